// The simulated engine's verify-forward kernels (host+device, like sim_kernels.hpp): the target
// model's K/V of the tree tokens into their slots, FlashInfer-style masked paged prefill over
// kv_indptr / kv_indices and the bit-packed tree mask (docs/verify.md section 3), and the move
// of the accepted tokens' K/V to their committed positions. The FA3 cascade reuses
// paged_attention_kernel (prefix table, then the expand rows at page size 1) and
// lse_merge_kernel. float32 storage.
#pragma once

#include <cmath>
#include <cstdint>

#include "specgraph/config.hpp"
#include "tools/sim/sim_kernels.hpp"

namespace specgraph::sim {

// One thread per (request, tree token): writes the target's K and V of token i of request r to
// the slot req_to_token[pool_index[r]][seq_len[r] + i]. Padded requests write nothing.
struct verify_kv_write_kernel {
  struct params {
    const std::int32_t* req_to_token;
    std::int64_t req_to_token_stride;
    const std::int32_t* pool_index;  // [batch]
    const std::int32_t* seq_len;     // [batch], without the tree tokens
    std::int32_t real_batch;
    std::int32_t tokens;      // D
    std::int32_t head_elems;  // heads * head_dim
    const float* k_src;       // [batch * D][head_elems]
    const float* v_src;
    float* k_pool;
    float* v_pool;
  };
  static constexpr const char* name = "verify_kv_write";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t e) {
    const std::int64_t r = e / p.tokens;
    if (r >= p.real_batch) return;
    const std::int64_t position = static_cast<std::int64_t>(p.seq_len[r]) + e % p.tokens;
    const std::int64_t slot = p.req_to_token[p.pool_index[r] * p.req_to_token_stride + position];
    for (std::int32_t i = 0; i < p.head_elems; ++i) {
      p.k_pool[slot * p.head_elems + i] = p.k_src[e * p.head_elems + i];
      p.v_pool[slot * p.head_elems + i] = p.v_src[e * p.head_elems + i];
    }
  }
};

// FlashInfer's masked paged prefill at page size 1, one thread per (query row, head): the row's
// request r is the one with qo_indptr[r] <= row < qo_indptr[r + 1] (binary search), its query
// index i = row - qo_indptr[r]; it may attend the slots kv_indices[kv_indptr[r] ..
// kv_indptr[r + 1]) (n of them), slot j when bit i * n + j of the request's mask segment is set:
// byte packed_mask[packed_mask_indptr[r] + (i * n + j) / 8], bit (i * n + j) % 8 (little bit
// order). Online softmax; an empty row writes o = 0.
struct masked_prefill_kernel {
  struct params {
    const float* q;  // [rows][heads][head_dim]
    std::int32_t heads;
    std::int32_t head_dim;
    float scale;
    const float* k_pool;
    const float* v_pool;
    const std::int32_t* qo_indptr;  // [batch + 1]
    std::int32_t batch;
    const std::int32_t* kv_indptr;
    const std::int32_t* kv_indices;
    const std::uint8_t* packed_mask;
    const std::int32_t* packed_mask_indptr;
    float* o;  // [rows][heads][head_dim]
  };
  static constexpr const char* name = "masked_prefill";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t index) {
    const std::int64_t row = index / p.heads;
    const std::int32_t h = static_cast<std::int32_t>(index % p.heads);
    const std::int32_t hd = p.heads * p.head_dim;
    std::int32_t lo = 0, hi = p.batch;  // the last r with qo_indptr[r] <= row
    while (hi - lo > 1) {
      const std::int32_t mid = lo + (hi - lo) / 2;
      if (p.qo_indptr[mid] <= row) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const std::int64_t i = row - p.qo_indptr[lo];
    const std::int64_t begin = p.kv_indptr[lo];
    const std::int64_t n = p.kv_indptr[lo + 1] - begin;
    const std::uint8_t* mask = p.packed_mask + p.packed_mask_indptr[lo];
    const float* q = p.q + row * hd + h * p.head_dim;
    float acc[max_head_dim];
    for (std::int32_t d = 0; d < p.head_dim; ++d) acc[d] = 0.0f;
    float m = -INFINITY;
    float l = 0.0f;
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t bit = i * n + j;
      if (((mask[bit / 8] >> (bit % 8)) & 1) == 0) continue;
      const std::int64_t slot = p.kv_indices[begin + j];
      const float* k = p.k_pool + slot * hd + h * p.head_dim;
      const float* v = p.v_pool + slot * hd + h * p.head_dim;
      float s = 0.0f;
      for (std::int32_t d = 0; d < p.head_dim; ++d) s += q[d] * k[d];
      s *= p.scale;
      const float m_new = s > m ? s : m;
      const float correction = expf(m - m_new);
      const float w = expf(s - m_new);
      l = l * correction + w;
      for (std::int32_t d = 0; d < p.head_dim; ++d) acc[d] = acc[d] * correction + w * v[d];
      m = m_new;
    }
    float* o = p.o + (row * p.heads + h) * p.head_dim;
    for (std::int32_t d = 0; d < p.head_dim; ++d) o[d] = l > 0.0f ? acc[d] / l : 0.0f;
  }
};

// One thread per request: the accepted tokens' K/V moved to their committed positions,
// count[r] moves from src[r * stride + k] to dst[r * stride + k], in order k = 0, 1, ... (each
// source lies at or after its destination and after every earlier source, so no move reads a
// slot an earlier one wrote).
struct verify_commit_kernel {
  struct params {
    const std::int32_t* count;  // [requests]
    const std::int64_t* src;    // [requests][stride]
    const std::int64_t* dst;
    std::int32_t stride;
    std::int32_t head_elems;
    float* k_pool;
    float* v_pool;
  };
  static constexpr const char* name = "verify_commit";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t r) {
    for (std::int32_t k = 0; k < p.count[r]; ++k) {
      const std::int64_t from = p.src[r * p.stride + k], to = p.dst[r * p.stride + k];
      for (std::int32_t e = 0; e < p.head_elems; ++e) {
        p.k_pool[to * p.head_elems + e] = p.k_pool[from * p.head_elems + e];
        p.v_pool[to * p.head_elems + e] = p.v_pool[from * p.head_elems + e];
      }
    }
  }
};

struct sim_verify_cuda_launchers {
  cuda_rows_fn kv_write, masked_prefill, commit;
};
sim_verify_cuda_launchers sim_verify_cuda();  // all null in host-only builds

}  // namespace specgraph::sim
