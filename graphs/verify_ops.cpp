// The target-verify metadata operation over a plan's verify section (verify_ops.hpp).
#include "specgraph/verify_ops.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>

#include "device/checks.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph {
namespace {

// Whether all of a layout's output pointers are given (true) or none (false); some is refused.
bool given(const char* field, std::initializer_list<const void*> pointers) {
  int set = 0;
  for (const void* q : pointers) set += q != nullptr;
  SPECGRAPH_EXPECTS(set == 0 || set == static_cast<int>(pointers.size()), field,
                    std::to_string(set) + " of the layout's " + std::to_string(pointers.size()) +
                        " pointers given; give all of them or none");
  return set != 0;
}

void engine_outputs_into(const plan& pl, std::int32_t bucket, const verify_engine_outputs& o,
                         verify_params& p) {
  const plan_layout::verify_section& v = pl.layout.verify;
  const std::int32_t m = pl.config.max_context_len, d = v.draft_tokens;
  const bool fa3 = given(
      "outputs.prefix_page_table",
      {o.prefix_page_table, o.prefix_cache_seqlen, o.prefix_cu_seqlens_q, o.prefix_cu_seqlens_k,
       o.expand_page_table, o.expand_cache_seqlen, o.expand_cu_seqlens_q, o.expand_cu_seqlens_k});
  const bool flashinfer =
      given("outputs.kv_indices", {o.qo_indptr, o.kv_indptr, o.kv_indices, o.kv_last_page_len,
                                   o.mask_indptr, o.packed_mask, o.packed_mask_indptr});
  const std::string formats = to_string(pl.config.formats);
  SPECGRAPH_EXPECTS(fa3 == v.fa3, "outputs.prefix_page_table",
                    (fa3 ? "given, but formats " + formats + " hold no FA3 cascade tables"
                         : "missing: formats " + formats + " write the FA3 cascade tables"));
  SPECGRAPH_EXPECTS(
      flashinfer == v.flashinfer, "outputs.kv_indices",
      (flashinfer ? "given, but formats " + formats + " hold no FlashInfer indices"
                  : "missing: formats " + formats + " write the FlashInfer indices and mask"));
  if (fa3) {
    detail::between("outputs.prefix_stride", o.prefix_stride, v.prefix_capacity,
                    std::int64_t{1} << 40, "the limit");
    detail::between("outputs.expand_stride", o.expand_stride, d, 0x7fffffff, "the limit");
    p.prefix_page_table = o.prefix_page_table;
    p.prefix_stride = o.prefix_stride;
    p.prefix_cache_seqlen = o.prefix_cache_seqlen;
    p.prefix_cu_seqlens_q = o.prefix_cu_seqlens_q;
    p.prefix_cu_seqlens_k = o.prefix_cu_seqlens_k;
    p.expand_page_table = o.expand_page_table;
    p.expand_stride = o.expand_stride;
    p.expand_cache_seqlen = o.expand_cache_seqlen;
    p.expand_cu_seqlens_q = o.expand_cu_seqlens_q;
    p.expand_cu_seqlens_k = o.expand_cu_seqlens_k;
  }
  if (flashinfer) {
    const std::int64_t kv = verify_kv_indices_capacity(bucket, m, d);
    const std::int64_t packed = verify_packed_mask_capacity(bucket, m, d);
    SPECGRAPH_EXPECTS(o.kv_indices_size >= kv, "outputs.kv_indices",
                      std::to_string(o.kv_indices_size) + " elements, below the " +
                          std::to_string(kv) + " bucket " + std::to_string(bucket) +
                          " needs (bucket * (max_context_len + D)); size it so");
    SPECGRAPH_EXPECTS(o.packed_mask_size >= packed, "outputs.packed_mask",
                      std::to_string(o.packed_mask_size) + " bytes, below the " +
                          std::to_string(packed) + " bucket " + std::to_string(bucket) +
                          " needs (bucket * ceil(D * (max_context_len + D) / 8)); size it so");
    p.qo_indptr = o.qo_indptr;
    p.kv_indptr = o.kv_indptr;
    p.kv_indices = o.kv_indices;
    p.kv_last_page_len = o.kv_last_page_len;
    p.mask_indptr = o.mask_indptr;
    p.packed_mask = o.packed_mask;
    p.packed_mask_indptr = o.packed_mask_indptr;
  }
}

}  // namespace

verify_params verify_metadata_params(const draft_buffers& b, std::int32_t bucket,
                                     const verify_inputs& in) {
  const plan& pl = b.plan();
  const draft_config& c = pl.config;
  SPECGRAPH_EXPECTS(pl.layout.verify.enabled(), "verify_tokens",
                    "0: this plan has no verify section (set draft_config::verify_tokens to the "
                    "tree size D)");
  SPECGRAPH_EXPECTS(pl.has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
  const verify_view v = b.verify(bucket);
  detail::not_null("req_to_token", in.tables.req_to_token);
  detail::between("mask_cells", in.mask_cells, 0, std::int64_t{1} << 62, "the limit");
  // An empty mask (an idle rank's: no real request has cells) may have no storage.
  if (in.mask_cells > 0) detail::not_null("custom_mask", in.custom_mask);
  SPECGRAPH_EXPECTS((in.req_pool_index == nullptr) == (in.seq_len == nullptr), "seq_len",
                    std::string(in.seq_len == nullptr ? "null" : "given") +
                        " while req_pool_index is " +
                        (in.req_pool_index == nullptr ? "null" : "given") +
                        "; give both (the engine's) or neither (the staged ones)");
  verify_params p;
  p.req_to_token = in.tables.req_to_token;
  p.req_to_token_stride = req_to_token_stride(c, in.tables);
  p.pool_rows = c.pool_rows;
  p.req_pool_index = in.req_pool_index != nullptr ? in.req_pool_index : v.req_pool_index;
  p.seq_len = in.seq_len != nullptr ? in.seq_len : v.seq_len;
  p.batch = bucket;
  p.real_batch = bucket;  // the bound; the kernels read the real batch from real_batch_at
  p.real_batch_at = in.real_batch != nullptr ? in.real_batch : v.real_batch;
  p.draft_tokens = v.draft_tokens;
  p.page_size = c.page_size;
  p.max_seq_len = c.max_context_len;
  p.custom_mask = in.custom_mask;
  p.mask_cells = in.mask_cells;
  p.mask_length_exact = in.mask_length_exact;
  p.slot_limit = c.kv_slots;
  p.guard = v.guard;
  p.scratch = v.scratch;
  if (in.outputs != nullptr) {
    engine_outputs_into(pl, bucket, *in.outputs, p);
  } else {
    p.prefix_page_table = v.prefix_page_table;
    p.prefix_stride = v.prefix_stride;
    p.prefix_cache_seqlen = v.prefix_cache_seqlen;
    p.prefix_cu_seqlens_q = v.prefix_cu_seqlens_q;
    p.prefix_cu_seqlens_k = v.prefix_cu_seqlens_k;
    p.expand_page_table = v.expand_page_table;
    p.expand_stride = v.draft_tokens;
    p.expand_cache_seqlen = v.expand_cache_seqlen;
    p.expand_cu_seqlens_q = v.expand_cu_seqlens_q;
    p.expand_cu_seqlens_k = v.expand_cu_seqlens_k;
    p.qo_indptr = v.qo_indptr;
    p.kv_indptr = v.kv_indptr;
    p.kv_indices = v.kv_indices;
    p.kv_last_page_len = v.kv_last_page_len;
    p.mask_indptr = v.mask_indptr;
    p.packed_mask = v.packed_mask;
    p.packed_mask_indptr = v.packed_mask_indptr;
  }
  // The bucket's exact capacities (a full bucket at seq_len = M fills them).
  p.prefix_capacity = pl.layout.verify.fa3 ? pl.layout.verify.prefix_capacity : 0;
  if (pl.layout.verify.flashinfer) {
    p.kv_indices_capacity = static_cast<std::int32_t>(
        verify_kv_indices_capacity(bucket, c.max_context_len, v.draft_tokens));
    p.packed_mask_capacity = static_cast<std::int32_t>(
        verify_packed_mask_capacity(bucket, c.max_context_len, v.draft_tokens));
  }
  validate(p);  // every scalar, before anything is enqueued
  return p;
}

void verify_metadata(executor& ex, const draft_buffers& b, std::int32_t bucket,
                     const verify_inputs& in) {
  const verify_params p = verify_metadata_params(b, bucket, in);
  // The section's own guard words start clean each verify round (setup_round resets them too).
  ex.fill_bytes(p.guard, 0, sizeof(guard_word) * verify_guard_count);
  launch_verify_metadata(ex, p);
}

}  // namespace specgraph
