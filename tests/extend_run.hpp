// Runs the library's draft-extend metadata over an extend_case (tests/extend_reference.hpp) into
// poisoned host buffers with slack past every capacity, in either entry: the host twin
// (run_extend_metadata with host_memory) or the launcher path on the host executor (the same
// row code the GPU runs, with executor scratch and the device real-batch word).
#pragma once

#include <cstdint>
#include <vector>

#include "specgraph/executor.hpp"
#include "specgraph/extend_metadata.hpp"
#include "tests/extend_reference.hpp"

namespace specgraph::testing {

inline constexpr std::int32_t extend_poison = -7;
inline constexpr std::int64_t extend_slack = 5;       // poisoned cells past every buffer's end
inline constexpr std::int64_t extend_stride_gap = 2;  // page-table row stride - capacity

struct extend_outputs {
  std::vector<std::int32_t> position, out_cache_loc, select_index;
  std::vector<std::int32_t> page_table, cache_seqlen, cu_q, cu_k, max_k;
  std::vector<std::int32_t> prefix_qo, prefix_kv, prefix_indices;
  std::vector<std::int32_t> full_qo, full_kv, full_indices, last_page_len;
  std::vector<guard_word> guard;
  std::int64_t page_stride = 0;
};

inline std::vector<std::int32_t> extend_poisoned(std::int64_t n) {
  return std::vector<std::int32_t>(static_cast<std::size_t>(n + extend_slack), extend_poison);
}

// device_word: read the real batch from a word (set to c.real_batch) instead of the scalar.
inline extend_outputs run_extend(executor& ex, const extend_case& c, bool host_twin,
                                 bool device_word = false) {
  const std::int64_t B = c.bucket, W = c.window;
  extend_outputs o;
  o.page_stride = c.page_capacity + extend_stride_gap;
  o.position = extend_poisoned(B * W);
  o.out_cache_loc = extend_poisoned(B * W);
  o.select_index = extend_poisoned(B);
  o.page_table = extend_poisoned(B * o.page_stride);
  o.cache_seqlen = extend_poisoned(B);
  o.cu_q = extend_poisoned(B + 1);
  o.cu_k = extend_poisoned(B + 1);
  o.max_k = extend_poisoned(1);
  o.prefix_qo = extend_poisoned(B + 1);
  o.prefix_kv = extend_poisoned(B + 1);
  o.prefix_indices = extend_poisoned(c.prefix_capacity);
  o.full_qo = extend_poisoned(B + 1);
  o.full_kv = extend_poisoned(B + 1);
  o.full_indices = extend_poisoned(c.full_capacity);
  o.last_page_len = extend_poisoned(B);
  o.guard.assign(extend_guard_count, guard_word{});
  extend_params p;
  p.position = o.position.data();
  p.out_cache_loc = o.out_cache_loc.data();
  p.select_index = o.select_index.data();
  p.page_table = o.page_table.data();
  p.page_stride = o.page_stride;
  p.page_capacity = c.page_capacity;
  p.cache_seqlen = o.cache_seqlen.data();
  p.cu_seqlens_q = o.cu_q.data();
  p.cu_seqlens_k = o.cu_k.data();
  p.max_seqlen_k = o.max_k.data();
  p.prefix_qo_indptr = o.prefix_qo.data();
  p.prefix_kv_indptr = o.prefix_kv.data();
  p.prefix_kv_indices = o.prefix_indices.data();
  p.prefix_kv_capacity = c.prefix_capacity;
  p.full_qo_indptr = o.full_qo.data();
  p.full_kv_indptr = o.full_kv.data();
  p.full_kv_indices = o.full_indices.data();
  p.full_kv_capacity = c.full_capacity;
  p.full_kv_last_page_len = o.last_page_len.data();
  p.req_to_token = c.req_to_token.data();
  p.req_to_token_stride = c.width;
  p.pool_rows = c.pool_rows;
  p.req_pool_index = c.req_pool_index.data();
  p.seq_len = c.seq_len.data();
  p.accept_len = c.accept_len.data();
  p.accept_index = c.accept_index.empty() ? nullptr : c.accept_index.data();
  p.accept_index_stride = c.accept_stride;
  p.batch = c.bucket;
  p.real_batch = c.real_batch;
  const std::int32_t word = c.real_batch;
  if (device_word) {
    p.real_batch = c.bucket;
    p.real_batch_at = &word;
  }
  p.extend_tokens = c.window;
  p.page_size = c.page_size;
  p.max_seq_len = c.max_seq_len;
  p.guard = o.guard.data();
  std::vector<std::int64_t> scratch(static_cast<std::size_t>(extend_scratch_words(c.bucket)) + 1,
                                    -1);
  if (!host_twin) p.scratch = scratch.data();
  run_extend_metadata(ex, p, host_twin);
  ex.synchronize();
  return o;
}

}  // namespace specgraph::testing
