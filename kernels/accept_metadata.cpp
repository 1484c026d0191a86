// Host-side validation, sizing and launchers of greedy tree acceptance (accept_metadata.hpp).
#include "specgraph/accept_metadata.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "device/checks.hpp"
#include "kernels/accept_fill.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/family_run.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph {
namespace {

using detail::at_most;
using detail::between;
using detail::indexed;
using detail::not_null;

constexpr std::int64_t int32_max = 0x7fffffff;

kernel_launch accept_launch(const accept_params& p) {
  return make_kernel_launch<kernels::accept_kernel>(p, kernels::accept_kernel::rows(p),
                                                    kernels::cuda_accept());
}

}  // namespace

accept_params accept_exact_capacities(std::int32_t batch, std::int32_t draft_tokens,
                                      std::int32_t num_steps) {
  const std::int64_t b = batch;
  accept_params p;
  p.batch = batch;
  p.draft_tokens = draft_tokens;
  p.num_steps = num_steps;
  p.accept_index_capacity = b * (static_cast<std::int64_t>(num_steps) + 1);
  p.predict_capacity = b * draft_tokens;
  p.accept_tokens_capacity = b * draft_tokens;
  p.accept_length_capacity = b;
  p.bonus_capacity = b;
  p.new_seq_len_capacity = b;
  p.select_index_capacity = b;
  return p;
}

void validate_scalars(const accept_params& p) {
  between("batch", p.batch, 0, limits::max_batch, "the limit");
  // 0: an idle rank (every row padding).
  between("real_batch", p.real_batch, 0, p.batch, "batch");
  between("draft_tokens", p.draft_tokens, 1, max_accept_tokens, "the limit");
  between("num_steps", p.num_steps, 1, max_accept_steps, "the limit");
  const std::int64_t b = p.batch;
  at_most("draft_tokens", b * p.draft_tokens, limits::max_rows,
          "the row limit (batch * draft_tokens)");
  at_most("num_steps", b * (static_cast<std::int64_t>(p.num_steps) + 1), limits::max_rows,
          "the row limit (batch * (num_steps + 1))");
  const char* names[] = {"accept_index_capacity",  "accept_length_capacity", "predict_capacity",
                         "accept_tokens_capacity", "bonus_capacity",         "new_seq_len_capacity",
                         "select_index_capacity"};
  const std::int64_t caps[] = {p.accept_index_capacity, p.accept_length_capacity,
                               p.predict_capacity,      p.accept_tokens_capacity,
                               p.bonus_capacity,        p.new_seq_len_capacity,
                               p.select_index_capacity};
  for (int i = 0; i < 7; ++i) between(names[i], caps[i], 0, int32_max, "the limit");
}

void validate(const accept_params& p) {
  validate_scalars(p);
  if (p.batch > 0) {
    not_null("parent", p.parent);
    not_null("draft_token", p.draft_token);
    not_null("target_predict", p.target_predict);
    not_null("seq_len", p.seq_len);
  }
  not_null("guard", p.guard);
  const bool any = p.accept_index != nullptr || p.accept_length != nullptr ||
                   p.predict != nullptr || p.accept_tokens != nullptr || p.bonus != nullptr ||
                   p.new_seq_len != nullptr || p.select_index != nullptr;
  SPECGRAPH_EXPECTS(any, "accept_index",
                    "no output set: set at least one of accept_index, accept_length, predict, "
                    "accept_tokens, bonus, new_seq_len, select_index");
}

void validate_contents_host(const accept_params& p) {
  validate(p);
  if (p.stall != nullptr && *p.stall != 0) return;  // a stalled round reads no row
  const std::int64_t d = p.draft_tokens;
  for (std::int32_t r = 0; r < p.real_batch; ++r) {
    if (p.idle != nullptr && p.idle[r] != 0) continue;
    between(indexed("seq_len", r), p.seq_len[r], 0, limits::max_context_len, "the limit");
    const std::int32_t* parent = p.parent + r * d;
    if (parent[0] != -1) {
      detail::throw_invalid(__FILE__, __LINE__, indexed("parent", r, 0),
                            std::to_string(parent[0]) + " is not -1 (node 0 is the root)");
    }
    for (std::int64_t i = 1; i < d; ++i) {
      if (parent[i] < -1 || parent[i] >= i) {
        detail::throw_invalid(__FILE__, __LINE__, indexed("parent", r, i),
                              std::to_string(parent[i]) + " is outside [-1, " + std::to_string(i) +
                                  ") (a parent precedes its child; -1: "
                                  "an orphan)");
      }
    }
    // Depths in node order (parents precede children); -1 for unreachable nodes.
    std::vector<std::int64_t> depth(static_cast<std::size_t>(d), 0);
    for (std::int64_t i = 1; i < d; ++i) {
      depth[i] = parent[i] < 0 || depth[parent[i]] < 0 ? -1 : depth[parent[i]] + 1;
      if (depth[i] > p.num_steps) {
        detail::throw_invalid(__FILE__, __LINE__, indexed("parent", r, i),
                              "node " + std::to_string(i) + " is reachable at depth " +
                                  std::to_string(depth[i]) + ", past num_steps " +
                                  std::to_string(p.num_steps));
      }
    }
  }
}

namespace {

// The passes without checks (the entries below check first).
void accept_run_here(const accept_params& p) {
  const kernel_launch l = accept_launch(p);
  l.host_run(l.params, l.rows);
}

void accept_enqueue(executor& ex, const accept_params& p) {
  ex.launch(accept_launch(p));
}

}  // namespace

void launch_accept(executor& ex, const accept_params& p) {
  validate(p);
  accept_enqueue(ex, p);
}

void accept_host(const accept_params& p) {
  validate_contents_host(p);
  accept_run_here(p);
}

void run_accept(executor& ex, const accept_params& p, bool host_memory) {
  kernels::run_family(
      ex, p, host_memory, p.guard, accept_guard_count, [](const accept_params& q) { validate(q); },
      [](const accept_params& q) { validate_contents_host(q); }, accept_run_here, accept_enqueue);
}

}  // namespace specgraph
