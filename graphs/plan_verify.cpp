// make_plan()'s target-verify section (docs/verify.md "Plan and graphs"): the verify_tokens
// checks and the exactly sized buffers of the largest bucket, per the plan's formats.
#include <cstdint>
#include <string>

#include "graphs/plan_parts.hpp"
#include "specgraph/error.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph::detail {

void validate_verify(const draft_config& c) {
  const std::int32_t d = c.verify_tokens;
  SPECGRAPH_EXPECTS(d >= 0 && d <= max_draft_tokens, "verify_tokens",
                    std::to_string(d) + " is outside [0, max_draft_tokens " +
                        std::to_string(max_draft_tokens) +
                        "]; pass the tree size D (the engine's num_draft_tokens), or 0 for no "
                        "verify section");
  if (d == 0) return;
  // Checked after max_batch and max_context_len are (validate() runs these last).
  const std::int64_t rows = static_cast<std::int64_t>(c.max_batch) * d;  // < 2^31
  SPECGRAPH_EXPECTS(rows <= limits::max_rows, "verify_tokens",
                    std::to_string(d) + ": max_batch " + std::to_string(c.max_batch) +
                        " * D = " + std::to_string(rows) + " verify rows exceeds the row limit " +
                        std::to_string(limits::max_rows) + "; lower verify_tokens or max_batch");
  const std::int64_t cells = verify_mask_cells_capacity(c.max_batch, c.max_context_len, d);
  SPECGRAPH_EXPECTS(cells <= 0x7fffffff, "verify_tokens",
                    std::to_string(d) + ": max_batch " + std::to_string(c.max_batch) + " x D x (" +
                        "max_context_len " + std::to_string(c.max_context_len) +
                        " + D) = " + std::to_string(cells) +
                        " mask cells exceeds the int32 mask_indptr limit 2147483647; lower "
                        "verify_tokens, max_batch or max_context_len");
}

void add_verify_section(arena_builder& a, plan& p, std::int32_t guard_base) {
  const draft_config& c = p.config;
  plan_layout::verify_section& v = p.layout.verify;
  const std::int32_t bucket = p.max_bucket();
  const std::int64_t b = bucket, d = c.verify_tokens, rows = b * d;
  v.draft_tokens = c.verify_tokens;
  v.fa3 = c.formats != metadata_formats::csr;
  v.flashinfer = c.formats != metadata_formats::fa3;
  v.guard_base = guard_base;
  v.scratch_words = verify_scratch_words(bucket, c.verify_tokens);
  // The section starts on its own alignment boundary, so [begin, end) holds nothing else.
  v.begin = align_up(a.end(), arena_alignment);
  const verify_tables exact =
      verify_exact_tables(bucket, c.max_context_len, c.page_size, c.verify_tokens);
  if (v.fa3) {
    v.prefix_capacity = exact.prefix_capacity;
    v.prefix_page_table =
        a.add("verify.prefix.page_table", all_steps, {b, v.prefix_capacity}, dtype::int32);
    v.prefix_cache_seqlen = a.add("verify.prefix.cache_seqlen", all_steps, {b}, dtype::int32);
    v.prefix_cu_seqlens_q = a.add("verify.prefix.cu_seqlens_q", all_steps, {b + 1}, dtype::int32);
    v.prefix_cu_seqlens_k = a.add("verify.prefix.cu_seqlens_k", all_steps, {b + 1}, dtype::int32);
    v.expand_page_table = a.add("verify.expand.page_table", all_steps, {rows, d}, dtype::int32);
    v.expand_cache_seqlen = a.add("verify.expand.cache_seqlen", all_steps, {rows}, dtype::int32);
    v.expand_cu_seqlens_q =
        a.add("verify.expand.cu_seqlens_q", all_steps, {rows + 1}, dtype::int32);
    v.expand_cu_seqlens_k =
        a.add("verify.expand.cu_seqlens_k", all_steps, {rows + 1}, dtype::int32);
  }
  if (v.flashinfer) {
    v.kv_indices_capacity = exact.kv_indices_capacity;
    v.packed_mask_capacity = exact.packed_mask_capacity;
    v.qo_indptr = a.add("verify.qo_indptr", all_steps, {b + 1}, dtype::int32);
    v.kv_indptr = a.add("verify.kv_indptr", all_steps, {b + 1}, dtype::int32);
    v.kv_indices = a.add("verify.kv_indices", all_steps, {v.kv_indices_capacity}, dtype::int32);
    v.kv_last_page_len = a.add("verify.kv_last_page_len", all_steps, {b}, dtype::int32);
    v.mask_indptr = a.add("verify.mask_indptr", all_steps, {b + 1}, dtype::int32);
    v.packed_mask = a.add("verify.packed_mask", all_steps, {v.packed_mask_capacity}, dtype::uint8);
    v.packed_mask_indptr = a.add("verify.packed_mask_indptr", all_steps, {b + 1}, dtype::int32);
  }
  v.scratch = a.add("verify.scratch", all_steps, {v.scratch_words}, dtype::int64);
  v.end = a.end();
  p.our_verify_bytes = v.end - v.begin;
  // SGLang's verify mask buffer: one byte per cell, max_bs * D * max_context_len.
  p.engine_verify_mask_bytes = static_cast<std::size_t>(c.max_batch) * static_cast<std::size_t>(d) *
                               static_cast<std::size_t>(c.max_context_len);
  p.engine_verify_kv_indices_bytes = 4 * p.engine_verify_mask_bytes;
}

}  // namespace specgraph::detail
