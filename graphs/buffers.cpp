// draft_buffers: typed views of a plan's arena (pointer arithmetic over plan_layout).
#include "specgraph/buffers.hpp"

#include <cstdint>
#include <string>

#include "device/checks.hpp"
#include "specgraph/error.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph {

sparse_stage_params sparse_view::params(const sparse_stage& stage) const {
  const stage_buffers& out = stages[static_cast<int>(stage.kind)];
  sparse_stage_params p;
  p.vertical = vertical_in;
  p.vertical_stride = vertical_in_stride;
  p.vertical_count = vertical_count_in;
  p.vertical_size = vertical_size;
  p.slash = slash_in;
  p.slash_stride = slash_in_stride;
  p.slash_count = slash_count_in;
  p.slash_size = slash_size;
  p.heads = heads;
  p.stage = stage;
  p.out_vertical = out.vertical;
  p.vertical_capacity = out.vertical_capacity;
  p.out_vertical_count = out.vertical_count;
  p.out_slash = out.slash;
  p.slash_capacity = out.slash_capacity;
  p.out_slash_count = out.slash_count;
  p.guard = out.guard;
  return p;
}

draft_buffers::draft_buffers(const specgraph::plan& p, void* base)
    : plan_(&p), base_(static_cast<unsigned char*>(base)) {
  detail::not_null("arena", base);
  const auto address = reinterpret_cast<std::uintptr_t>(base);  // NOLINT: alignment check
  SPECGRAPH_EXPECTS(address % arena_alignment == 0, "arena",
                    "base address is not " + std::to_string(arena_alignment) +
                        "-byte aligned (offset " + std::to_string(address % arena_alignment) + ")");
}

extend_view draft_buffers::extend(std::int32_t bucket) const {
  const plan_layout::extend_section& l = layout().extend;
  SPECGRAPH_EXPECTS(l.enabled(), "draft_extend",
                    "false: this plan has no draft-extend section (set draft_config::draft_extend "
                    "with verify_tokens = W)");
  if (bucket == 0) bucket = plan_->max_bucket();
  SPECGRAPH_EXPECTS(plan_->has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
  const draft_config& c = plan_->config;
  extend_view v;
  // The bucket's exact capacities and the plan's stride; the pointers of the plan's layouts.
  const extend_tables exact =
      extend_exact_tables(bucket, c.max_context_len, c.page_size, l.extend_tokens);
  for (int i = 0; i < extend_field_count; ++i) {
    if (l.field[i] != 0) set_extend_field(v, i, at<std::int32_t>(l.field[i]));
  }
  if (l.fa3) v.page_stride = v.page_capacity = l.page_capacity;
  if (l.prefix) v.prefix_kv_capacity = exact.prefix_kv_capacity;
  if (l.full) v.full_kv_capacity = exact.full_kv_capacity;
  v.bucket = bucket;
  v.extend_tokens = l.extend_tokens;
  v.page_size = c.page_size;
  v.max_seq_len = c.max_context_len;
  v.real_batch = real_batch();
  v.req_pool_index = req_pool_index();
  v.seq_len = seq_len();
  v.accept_len = at<std::int32_t>(l.accept_len);
  v.scratch = at<std::int64_t>(l.scratch);
  v.guard = guards() + l.guard_base;
  return v;
}

verify_view draft_buffers::verify(std::int32_t bucket) const {
  const plan_layout::verify_section& l = layout().verify;
  SPECGRAPH_EXPECTS(l.enabled(), "verify_tokens",
                    "0: this plan has no verify section (set draft_config::verify_tokens to the "
                    "tree size D)");
  if (bucket == 0) bucket = plan_->max_bucket();
  SPECGRAPH_EXPECTS(plan_->has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
  const draft_config& c = plan_->config;
  verify_view v;
  // The bucket's exact capacities and the plan's strides; the pointers of the plan's layouts.
  const verify_tables exact =
      verify_exact_tables(bucket, c.max_context_len, c.page_size, l.draft_tokens);
  v.prefix_stride = v.prefix_capacity = l.prefix_capacity;
  v.expand_stride = exact.expand_stride;
  v.bucket = bucket;
  v.draft_tokens = l.draft_tokens;
  v.page_size = c.page_size;
  v.max_seq_len = c.max_context_len;
  v.real_batch = real_batch();
  v.req_pool_index = req_pool_index();
  v.seq_len = seq_len();
  auto i32 = [&](std::size_t offset) { return at<std::int32_t>(offset); };
  if (l.fa3) {
    v.prefix_page_table = i32(l.prefix_page_table);
    v.prefix_cache_seqlen = i32(l.prefix_cache_seqlen);
    v.prefix_cu_seqlens_q = i32(l.prefix_cu_seqlens_q);
    v.prefix_cu_seqlens_k = i32(l.prefix_cu_seqlens_k);
    v.expand_page_table = i32(l.expand_page_table);
    v.expand_cache_seqlen = i32(l.expand_cache_seqlen);
    v.expand_cu_seqlens_q = i32(l.expand_cu_seqlens_q);
    v.expand_cu_seqlens_k = i32(l.expand_cu_seqlens_k);
  } else {
    v.prefix_stride = v.prefix_capacity = 0;
    v.expand_stride = 0;
  }
  if (l.flashinfer) {
    v.qo_indptr = i32(l.qo_indptr);
    v.kv_indptr = i32(l.kv_indptr);
    v.kv_indices = i32(l.kv_indices);
    v.kv_indices_capacity = exact.kv_indices_capacity;
    v.kv_last_page_len = i32(l.kv_last_page_len);
    v.mask_indptr = i32(l.mask_indptr);
    v.packed_mask = at<std::uint8_t>(l.packed_mask);
    v.packed_mask_capacity = exact.packed_mask_capacity;
    v.packed_mask_indptr = i32(l.packed_mask_indptr);
  }
  v.scratch = at<std::int64_t>(l.scratch);
  v.guard = guards() + l.guard_base;
  return v;
}

std::int32_t* draft_buffers::expand_page_table(std::int32_t step) const {
  detail::in_range("step", step, 0, plan_->config.num_steps, "num_steps");
  SPECGRAPH_EXPECTS(layout().has_fa3, "formats", "csr: this plan holds no FA3 expand tables");
  return at<std::int32_t>(layout().expand_page_table[static_cast<std::size_t>(step)]);
}

void* draft_buffers::csr_kv_indices(std::int32_t step) const {
  detail::in_range("step", step, 0, plan_->config.num_steps, "num_steps");
  SPECGRAPH_EXPECTS(!layout().csr_kv_indices.empty(), "formats",
                    std::string(to_string(plan_->config.formats)) +
                        ": this plan holds no CSR indices (use csr or both)");
  return at<unsigned char>(layout().csr_kv_indices[static_cast<std::size_t>(step)]);
}

std::int32_t* draft_buffers::expand_cache_seqlen(std::int32_t step) const {
  detail::in_range("step", step, 0, plan_->config.num_steps, "num_steps");
  SPECGRAPH_EXPECTS(layout().has_fa3, "formats", "csr: this plan holds no FA3 expand tables");
  return at<std::int32_t>(layout().expand_cache_seqlen[static_cast<std::size_t>(step)]);
}

sparse_view draft_buffers::sparse() const {
  sparse_view s;
  const draft_config& c = plan_->config;
  if (!c.sparse) return s;
  const plan_layout& l = layout();
  s.heads = c.sparse->heads;
  s.vertical_in = at<std::int32_t>(l.sparse_in.vertical);
  s.vertical_in_stride = l.sparse_in.vertical_stride;
  s.vertical_count_in = at<std::int32_t>(l.sparse_in.vertical_count);
  s.vertical_size = at<std::int32_t>(l.sparse_in.vertical_size);
  s.slash_in = at<std::int32_t>(l.sparse_in.slash);
  s.slash_in_stride = l.sparse_in.slash_stride;
  s.slash_count_in = at<std::int32_t>(l.sparse_in.slash_count);
  s.slash_size = at<std::int32_t>(l.sparse_in.slash_size);
  for (std::int32_t k = 0; k < sparse_stage_kinds; ++k) {
    const auto& in = l.sparse_stage[k];
    auto& out = s.stages[k];
    out.vertical = at<std::int32_t>(in.vertical);
    out.vertical_capacity = in.vertical_capacity;
    out.vertical_count = at<std::int32_t>(in.vertical_count);
    out.slash = at<std::int32_t>(in.slash);
    out.slash_capacity = in.slash_capacity;
    out.slash_count = at<std::int32_t>(in.slash_count);
    out.guard = guards() + l.guard_sparse(k);
  }
  return s;
}

step_view draft_buffers::view(std::int32_t bucket, std::int32_t step) const {
  const draft_config& c = plan_->config;
  detail::in_range("step", step, 0, c.num_steps, "num_steps");
  SPECGRAPH_EXPECTS(plan_->has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
  const plan_layout& l = layout();
  step_view v;
  v.bucket = bucket;
  v.step = step;
  v.decode_length = step + 1;
  v.topk = c.topk;
  v.page_size = c.page_size;
  v.rows = bucket * c.topk;  // <= limits::max_rows
  v.req_pool_index = req_pool_index();
  v.seq_len = seq_len();
  v.out_cache_loc = out_cache_loc();
  v.cache_loc_stride = c.slot_stride;
  v.real_batch = real_batch();
  v.last_page_len = last_page_len();
  v.prefix_seqlen = prefix_seqlen();
  v.prefix_page_table = prefix_page_table();
  v.prefix_stride = l.prefix_capacity;
  v.prefix_capacity = l.prefix_capacity;
  v.cu_seqlens_q = cu_seqlens_q();
  if (l.has_fa3) {  // a csr-only plan's view has no FA3 tables (null pointers, stride 0)
    v.expand_page_table = at<std::int32_t>(l.expand_page_table[static_cast<std::size_t>(step)]);
    v.expand_capacity = step + 2;
    v.expand_stride = l.expand_stride[static_cast<std::size_t>(step)];
  } else {
    v.prefix_page_table = nullptr;
  }
  v.device_step = c.device_steps ? device_step() : nullptr;
  v.confidence = confidence();
  if (l.has_fa3) {
    v.expand_cache_seqlen = at<std::int32_t>(l.expand_cache_seqlen[static_cast<std::size_t>(step)]);
  }
  if (!l.csr_kv_indices.empty()) {
    const std::int64_t max_rows = plan_->max_rows();
    v.csr_kv_indptr = csr_kv_indptr() + step * (max_rows + 1);
    v.csr_kv_indices = csr_kv_indices(step);
    v.csr_int64 = c.csr_int64;
    v.csr_capacity = l.csr_capacity[static_cast<std::size_t>(step)];
    v.csr_capacity_growth = max_rows;
    v.csr_kv_indptr_stride = max_rows + 1;
    v.csr_kv_indices_stride = l.csr_kv_indices_stride;
  }
  v.sparse = sparse();
  return v;
}

}  // namespace specgraph
