// make_plan()'s draft-extend section (docs/extend-graphs.md): the draft_extend checks and the
// exactly sized buffers of the largest bucket, per the plan's formats.
#include <cstdint>
#include <string>

#include "graphs/plan_parts.hpp"
#include "specgraph/error.hpp"
#include "specgraph/extend_metadata.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph::detail {

void validate_extend(const draft_config& c) {
  if (!c.draft_extend) return;
  SPECGRAPH_EXPECTS(c.verify_tokens > 0, "draft_extend",
                    "true with verify_tokens 0: the draft-extend window is the verify tree's W "
                    "tokens; set verify_tokens to the tree size W, or draft_extend to false");
  // What else the kernels need holds already, after validate_verify: W in [1, max_draft_tokens]
  // = [1, max_extend_tokens]; max_batch * W <= max_rows; and the verify mask's B * W * (M + W)
  // cells fit int32, so the full layout's B * (M + W) entries (the int32 indptrs) do too.
  static_assert(max_draft_tokens == max_extend_tokens, "the window is the verify tree");
}

void add_extend_section(arena_builder& a, plan& p, std::int32_t guard_base) {
  const draft_config& c = p.config;
  plan_layout::extend_section& e = p.layout.extend;
  const std::int32_t bucket = p.max_bucket();
  e.extend_tokens = c.verify_tokens;
  e.tokens = true;
  e.fa3 = c.formats != metadata_formats::csr;
  e.prefix = e.full = c.formats != metadata_formats::fa3;
  e.guard_base = guard_base;
  e.scratch_words = extend_scratch_words(bucket);
  // The shapes come from the kernels' own sizing (extend_shape_of over the exact tables).
  const extend_params shape =
      extend_sizing(bucket, c.max_context_len, c.page_size, e.extend_tokens);
  e.page_capacity = shape.page_capacity;
  e.prefix_kv_capacity = e.prefix ? shape.prefix_kv_capacity : 0;
  e.full_kv_capacity = e.full ? shape.full_kv_capacity : 0;
  // The section starts on its own alignment boundary, so [begin, end) holds nothing else.
  e.begin = align_up(a.end(), arena_alignment);
  e.accept_len = a.add("extend.accept_len", all_steps, {bucket}, dtype::int32);
  const bool held[extend_layout_count] = {e.tokens, e.fa3, e.prefix, e.full};
  for (int layout = 0; layout < extend_layout_count; ++layout) {
    if (!held[layout]) continue;
    for (int i = extend_layout_bounds[layout]; i < extend_layout_bounds[layout + 1]; ++i) {
      const extend_field_shape f = extend_shape_of(i, shape);
      e.field[i] = a.add(
          std::string("extend.") + extend_field_names[i], all_steps,
          f.table ? std::vector<std::int64_t>{f.rows, f.cols} : std::vector<std::int64_t>{f.rows},
          dtype::int32);
    }
  }
  if (!e.fa3) e.page_capacity = 0;
  e.scratch = a.add("extend.scratch", all_steps, {e.scratch_words}, dtype::int64);
  e.end = a.end();
  p.our_extend_bytes = e.end - e.begin;
  const extend_engine_reservation r = extend_engine_reservations(
      c.max_batch, c.max_context_len, c.page_size, e.extend_tokens);  // each < 2^51
  p.engine_extend_fa3_bytes = e.fa3 ? static_cast<std::size_t>(4 * r.fa3_page_table) : 0;
  p.engine_extend_triton_bytes = e.full ? static_cast<std::size_t>(8 * r.triton_kv_indices) : 0;
  p.engine_extend_flashinfer_bytes =
      e.full ? static_cast<std::size_t>(4 * r.flashinfer_kv_indices + r.flashinfer_mask_bytes) : 0;
}

}  // namespace specgraph::detail
