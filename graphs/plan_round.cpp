// make_plan()'s round section (docs/round-graphs.md): the round_on_device checks (the row width
// against the largest committed length and the reserve included) and the exactly sized buffers
// of the round after verify (acceptance, commit, next round) for the largest bucket.
#include <cstdint>
#include <string>
#include <vector>

#include "device/checks.hpp"
#include "graphs/plan_parts.hpp"
#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/error.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/round_fields.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph::detail {
namespace {

// R: config.round_reserve, or next_round_reserve's R1 (<= 2^21) for -1.
std::int64_t resolved_reserve(const draft_config& c) {
  return c.round_reserve >= 0
             ? c.round_reserve
             : next_round_reserve(c.topk, c.num_steps, c.verify_tokens, c.page_size);
}

// M, the largest committed seq_len at which a round allocates, checked against the rows: a round
// at seq_len' <= M allocates up to ceil_page(seq_len' + R) <= ceil_page(M + R) positions, and
// every req_to_token row is at least max_context_len wide (after_verify's stride check). The
// derived M is the largest with ceil_page(M + R) <= max_context_len: floor_page(max_context_len)
// - R. int64: M + R + page_size <= 2^28 + 2^28 + 2^20.
std::int64_t resolved_max_seq_len(const draft_config& c) {
  const std::int64_t ps = c.page_size, w = c.max_context_len, r = resolved_reserve(c);
  const std::int64_t rows = w / ps * ps;  // floor_page(max_context_len)
  auto ceil_page = [ps](std::int64_t x) { return (x + ps - 1) / ps * ps; };
  const std::string narrowest =
      " positions, past max_context_len " + std::to_string(w) + " (the narrowest req_to_token row)";
  if (c.round_max_seq_len >= 0) {
    const std::int64_t m = c.round_max_seq_len, need = ceil_page(m + r);
    SPECGRAPH_EXPECTS(
        need <= w, "round_max_seq_len",
        std::to_string(m) + ": a round at this committed length allocates up to " +
            "ceil_page(M + R) = ceil_page(" + std::to_string(m) + " + " + std::to_string(r) +
            ") = " + std::to_string(need) + narrowest +
            "; widen the rows to max_context_len >= " + std::to_string(need) +
            (rows - r >= 1
                 ? ", or lower round_max_seq_len to " + std::to_string(rows - r)
                 : ", or lower round_reserve (no M >= 1 fits with R " + std::to_string(r) + ")"));
    return m;
  }
  const std::int64_t m = rows - r;
  SPECGRAPH_EXPECTS(
      m >= 1, "round_reserve",
      std::to_string(r) + (c.round_reserve < 0 ? " (the default R1)" : "") +
          ": the reserve alone does not fit the rows: a request at committed length 1 "
          "allocates up to ceil_page(1 + R) = " +
          std::to_string(ceil_page(1 + r)) + narrowest +
          "; widen the rows to max_context_len >= " + std::to_string(ceil_page(1 + r)) +
          (rows >= 1 ? ", or lower round_reserve to " + std::to_string(rows - 1) : ""));
  return m;
}

}  // namespace

void validate_round(const draft_config& c) {
  between("max_stop_tokens", c.max_stop_tokens, 0, max_stop_tokens, "max_stop_tokens");
  SPECGRAPH_EXPECTS(c.round_reserve == -1 || (c.round_reserve >= 0 && c.round_reserve <= (1 << 28)),
                    "round_reserve",
                    std::to_string(c.round_reserve) +
                        " is outside [0, 2^28]; pass -1 for next_round_reserve(topk, num_steps, "
                        "verify_tokens, page_size)");
  SPECGRAPH_EXPECTS(c.round_max_seq_len == -1 || (c.round_max_seq_len >= 1 &&
                                                  c.round_max_seq_len <= limits::max_context_len),
                    "round_max_seq_len",
                    std::to_string(c.round_max_seq_len) +
                        " is outside [1, 2^28]; pass -1 for the largest M with ceil_page(M + R) "
                        "<= max_context_len");
  if (!c.round_on_device) return;
  SPECGRAPH_EXPECTS(c.verify_tokens > 0, "round_on_device",
                    "true with verify_tokens 0: the round's tree is the verify tree of D nodes; "
                    "set verify_tokens to D, or round_on_device to false");
  // Checked after validate_verify: D in [1, max_draft_tokens] = [1, max_accept_tokens],
  // max_batch * D <= max_rows; num_steps in [1, max_num_steps] = [1, max_accept_steps].
  static_assert(max_draft_tokens == max_accept_tokens && limits::max_num_steps == max_accept_steps,
                "the round's limits are the verify tree's");
  const std::int64_t paths = static_cast<std::int64_t>(c.max_batch) * (c.num_steps + 1);  // < 2^31
  SPECGRAPH_EXPECTS(paths <= limits::max_rows, "num_steps",
                    std::to_string(c.num_steps) + ": max_batch " + std::to_string(c.max_batch) +
                        " * (num_steps + 1) = " + std::to_string(paths) +
                        " accepted-path entries exceeds the row limit " +
                        std::to_string(limits::max_rows) + "; lower num_steps or max_batch");
  (void)resolved_max_seq_len(c);  // the rows hold ceil_page(M + R), M >= 1
}

void add_round_section(arena_builder& a, plan& p, std::int32_t guard_base) {
  const draft_config& c = p.config;
  plan_layout::round_section& s = p.layout.round;
  const std::int64_t bucket = p.max_bucket();
  s.draft_tokens = c.verify_tokens;
  s.reserve = static_cast<std::int32_t>(resolved_reserve(c));          // <= 2^28
  s.max_seq_len = static_cast<std::int32_t>(resolved_max_seq_len(c));  // [1, 2^28]
  s.stop_capacity = c.max_stop_tokens;
  s.guard_base = guard_base;
  // The section starts on its own alignment boundary, so [begin, end) holds nothing else.
  s.begin = align_up(a.end(), arena_alignment);
  for (std::int32_t i = 0; i < round_field_count; ++i) {
    const round_field_shape f = round_field_shape_of(i, bucket, c.verify_tokens, c.num_steps,
                                                     c.topk, c.page_size, c.max_stop_tokens);
    s.field[i] = a.add(std::string("after_verify.") + round_field_names[i], all_steps,
                       std::vector<std::int64_t>(f.dims, f.dims + f.rank),
                       f.int64 ? dtype::int64 : dtype::int32);
  }
  s.end = a.end();
  p.our_round_bytes = s.end - s.begin;
  // The spec's section 8 and 5.1, each exact: move pairs B x num_steps (SGLang B x S), the
  // standing reserve R1 per request (SGLang 2 * R1). int64, each < 2^32.
  p.round_kv_move_pairs = bucket * c.num_steps;
  p.engine_kv_move_pairs = bucket * (c.num_steps + 1);
  const std::int64_t r1 = next_round_reserve(c.topk, c.num_steps, c.verify_tokens, c.page_size);
  p.round_reserve_per_request = s.reserve;
  p.engine_reserve_per_request = 2 * r1;
}

}  // namespace specgraph::detail
