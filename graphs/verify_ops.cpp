// The target-verify metadata operation over a plan's verify section (verify_ops.hpp).
#include "specgraph/verify_ops.hpp"

#include <cstdint>
#include <string>

#include "device/checks.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph {
namespace {

// The engine's tables into p after their checks: the one layouts rule, the plan's formats, the
// strides and the buffers' sizes against the bucket's exact capacities (already in p).
void engine_outputs_into(const plan& pl, const verify_engine_outputs& o, verify_params& p) {
  const plan_layout::verify_section& v = pl.layout.verify;
  const verify_layouts given = verify_layouts_of(o, "outputs.");
  const std::string formats = to_string(pl.config.formats);
  SPECGRAPH_EXPECTS(given.fa3 == v.fa3, "outputs.prefix_page_table",
                    (given.fa3 ? "given, but formats " + formats + " hold no FA3 cascade tables"
                               : "missing: formats " + formats + " write the FA3 cascade tables"));
  SPECGRAPH_EXPECTS(
      given.flashinfer == v.flashinfer, "outputs.kv_indices",
      (given.flashinfer
           ? "given, but formats " + formats + " hold no FlashInfer indices"
           : "missing: formats " + formats + " write the FlashInfer indices and mask"));
  if (given.fa3) {
    detail::between("outputs.prefix_stride", o.prefix_stride, v.prefix_capacity,
                    std::int64_t{1} << 40, "the limit");
    detail::between("outputs.expand_stride", o.expand_stride, v.draft_tokens, 0x7fffffff,
                    "the limit");
  }
  if (given.flashinfer) {
    const std::int32_t bucket = p.batch;
    SPECGRAPH_EXPECTS(o.kv_indices_capacity >= p.kv_indices_capacity, "outputs.kv_indices",
                      std::to_string(o.kv_indices_capacity) + " elements, below the " +
                          std::to_string(p.kv_indices_capacity) + " bucket " +
                          std::to_string(bucket) +
                          " needs (bucket * (max_context_len + D)); size it so");
    SPECGRAPH_EXPECTS(o.packed_mask_capacity >= p.packed_mask_capacity, "outputs.packed_mask",
                      std::to_string(o.packed_mask_capacity) + " bytes, below the " +
                          std::to_string(p.packed_mask_capacity) + " bucket " +
                          std::to_string(bucket) +
                          " needs (bucket * ceil(D * (max_context_len + D) / 8)); size it so");
  }
  // The pointers and strides are the engine's; the capacities stay the bucket's exact ones.
  const verify_tables exact = p;
  static_cast<verify_tables&>(p) = o;
  p.prefix_capacity = exact.prefix_capacity;
  p.kv_indices_capacity = exact.kv_indices_capacity;
  p.packed_mask_capacity = exact.packed_mask_capacity;
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
  // The bucket's exact capacities (a full bucket at seq_len = M fills them), then the tables:
  // the arena's section or the engine's.
  const verify_tables exact =
      verify_exact_tables(bucket, c.max_context_len, c.page_size, v.draft_tokens);
  p.prefix_capacity = pl.layout.verify.fa3 ? exact.prefix_capacity : 0;
  p.kv_indices_capacity = pl.layout.verify.flashinfer ? exact.kv_indices_capacity : 0;
  p.packed_mask_capacity = pl.layout.verify.flashinfer ? exact.packed_mask_capacity : 0;
  if (in.outputs != nullptr) {
    engine_outputs_into(pl, *in.outputs, p);
  } else {
    static_cast<verify_tables&>(p) = v;  // exact capacities and the plan's strides already
  }
  validate(p);  // every scalar, before anything is enqueued
  return p;
}

void verify_metadata(executor& ex, const draft_buffers& b, std::int32_t bucket,
                     const verify_inputs& in) {
  run_verify_metadata(ex, verify_metadata_params(b, bucket, in), /*host_memory=*/false);
}

}  // namespace specgraph
