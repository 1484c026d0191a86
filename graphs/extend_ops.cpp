// The draft-extend metadata operation over a plan's draft-extend section (extend_ops.hpp).
#include "specgraph/extend_ops.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "device/checks.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph {
namespace {

void require_extend(const plan& pl) {
  SPECGRAPH_EXPECTS(pl.layout.extend.enabled(), "draft_extend",
                    "false: this plan has no draft-extend section (set draft_config::draft_extend "
                    "with verify_tokens = W)");
}

// The engine's tables into p after their checks: the layouts rule (at least one), the page
// stride and the buffers' sizes against the bucket's exact capacities (already in p).
void engine_outputs_into(const extend_tables& o, extend_params& p) {
  const extend_layouts given = extend_layouts_of(o, "outputs.");
  SPECGRAPH_EXPECTS(given.tokens || given.fa3 || given.prefix || given.full, "outputs",
                    "no layout given: set every pointer of at least one of the tokens, fa3, "
                    "prefix and full layouts, or pass outputs = nullptr for the arena's section");
  const std::string bucket = " bucket " + std::to_string(p.batch);
  if (given.fa3) {
    SPECGRAPH_EXPECTS(o.page_stride >= p.page_capacity && o.page_stride <= (std::int64_t{1} << 40),
                      "outputs.page_stride",
                      std::to_string(o.page_stride) + " is outside [" +
                          std::to_string(p.page_capacity) +
                          " (ceil((max_context_len + W) / page_size)), 2^40]; size the page "
                          "table's rows so");
  }
  if (given.prefix) {
    SPECGRAPH_EXPECTS(o.prefix_kv_capacity >= p.prefix_kv_capacity, "outputs.prefix_kv_indices",
                      std::to_string(o.prefix_kv_capacity) + " elements, below the " +
                          std::to_string(p.prefix_kv_capacity) + bucket +
                          " needs (bucket * max_context_len); size it so");
  }
  if (given.full) {
    SPECGRAPH_EXPECTS(o.full_kv_capacity >= p.full_kv_capacity, "outputs.full_kv_indices",
                      std::to_string(o.full_kv_capacity) + " elements, below the " +
                          std::to_string(p.full_kv_capacity) + bucket +
                          " needs (bucket * (max_context_len + W)); size it so");
  }
  // The pointers and the stride are the engine's; the capacities stay the bucket's exact ones.
  const extend_tables exact = p;
  static_cast<extend_tables&>(p) = o;
  p.page_capacity = given.fa3 ? exact.page_capacity : 0;
  p.prefix_kv_capacity = given.prefix ? exact.prefix_kv_capacity : 0;
  p.full_kv_capacity = given.full ? exact.full_kv_capacity : 0;
}

}  // namespace

extend_params extend_metadata_params(const draft_buffers& b, std::int32_t bucket,
                                     const extend_inputs& in) {
  const plan& pl = b.plan();
  const draft_config& c = pl.config;
  require_extend(pl);
  SPECGRAPH_EXPECTS(pl.has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
  const extend_view v = b.extend(bucket);
  detail::not_null("req_to_token", in.tables.req_to_token);
  SPECGRAPH_EXPECTS((in.req_pool_index == nullptr) == (in.seq_len == nullptr), "seq_len",
                    std::string(in.seq_len == nullptr ? "null" : "given") +
                        " while req_pool_index is " +
                        (in.req_pool_index == nullptr ? "null" : "given") +
                        "; give both (the engine's) or neither (the staged ones)");
  extend_params p;
  p.req_to_token = in.tables.req_to_token;
  p.req_to_token_stride = req_to_token_stride(c, in.tables);
  p.pool_rows = c.pool_rows;
  p.req_pool_index = in.req_pool_index != nullptr ? in.req_pool_index : v.req_pool_index;
  p.seq_len = in.seq_len != nullptr ? in.seq_len : v.seq_len;
  p.accept_len = in.accept_len != nullptr ? in.accept_len : v.accept_len;
  p.batch = bucket;
  p.real_batch = bucket;  // the bound; the kernels read the real batch from real_batch_at
  p.real_batch_at = in.real_batch != nullptr ? in.real_batch : v.real_batch;
  p.accept_index = in.accept_index;
  p.accept_index_stride = in.accept_index_stride;
  p.extend_tokens = v.extend_tokens;
  p.page_size = c.page_size;
  p.max_seq_len = c.max_context_len;
  p.slot_limit = c.kv_slots;
  p.guard = v.guard;
  p.scratch = v.scratch;
  // The bucket's exact capacities (a full bucket at seq_len = M fills them), then the tables:
  // the arena's section (its strides already the plan's) or the engine's.
  static_cast<extend_tables&>(p) =
      extend_exact_tables(bucket, c.max_context_len, c.page_size, v.extend_tokens);
  if (in.outputs != nullptr) {
    engine_outputs_into(*in.outputs, p);
  } else {
    static_cast<extend_tables&>(p) = v;
  }
  validate(p);  // every scalar and the layouts rule, before anything is enqueued
  return p;
}

void extend_metadata(executor& ex, const draft_buffers& b, std::int32_t bucket,
                     const extend_inputs& in) {
  run_extend_metadata(ex, extend_metadata_params(b, bucket, in), /*host_memory=*/false);
}

void stage_accept_len(executor& ex, const draft_buffers& b, std::int32_t bucket,
                      const std::vector<std::int32_t>& accept_len) {
  const plan& pl = b.plan();
  require_extend(pl);
  SPECGRAPH_EXPECTS(pl.has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
  const std::int32_t w = pl.layout.extend.extend_tokens;
  SPECGRAPH_EXPECTS(accept_len.size() <= static_cast<std::size_t>(bucket), "accept_len",
                    std::to_string(accept_len.size()) + " lengths for bucket " +
                        std::to_string(bucket) + "; pass one per real request of the round");
  std::vector<std::int32_t> row(static_cast<std::size_t>(bucket), 1);  // padded rows: 1
  for (std::size_t i = 0; i < accept_len.size(); ++i) {
    detail::between(detail::indexed("accept_len", static_cast<std::int64_t>(i)), accept_len[i], 0,
                    w, "W (verify_tokens)");
    row[i] = accept_len[i];
  }
  ex.copy_to_device(b.extend(bucket).accept_len, row.data(), row.size() * sizeof(std::int32_t));
}

}  // namespace specgraph
