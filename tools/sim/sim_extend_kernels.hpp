// The toy draft model's extend attention (issue 30 item 5): one logical thread per (window token
// row, head). Token row t = r * W + j (window token j of request r) attends the first
// n = L[r] - (W - 1 - j) keys of its request's key list, causal aligned to the end of the keys
// (L = seq_len + W, so n = seq_len + j + 1: prefix + window up to itself). The key list is read
// through either layout the draft-extend metadata writes:
//   * FA3 (C1): page_table[r * table_stride + i / page_size] * page_size + i % page_size, with
//     L = cache_seqlen[r] (a padded row's 1 key is page 0's slot 0);
//   * CSR full layout (C2f): kv_indices[kv_indptr[r] + i], L = kv_indptr[r + 1] - kv_indptr[r]
//     (page size 1).
// A row whose L is below W (a padded row, L = 1) attends max(n, 1) keys, so it writes a finite
// output that nothing reads. Host and device (SPECGRAPH_HD); no allocation.
#pragma once

#include <cmath>
#include <cstdint>

#include "specgraph/row_kernel.hpp"
#include "tools/sim/sim_kernels.hpp"

namespace specgraph::sim {

struct extend_attention_kernel {
  struct params {
    const float* q;  // [rows][heads][head_dim], rows = batch * window
    std::int32_t window;
    std::int32_t heads;
    std::int32_t head_dim;
    float scale;
    const float* k_pool;  // [slots][heads][head_dim]
    const float* v_pool;
    // FA3 (set page_table) or CSR full layout (set kv_indptr and kv_indices).
    const std::int32_t* page_table;
    std::int64_t table_stride;
    std::int32_t page_size;
    const std::int32_t* cache_seqlen;
    const std::int32_t* kv_indptr;
    const std::int32_t* kv_indices;
    float* o;  // [rows][heads][head_dim]
  };
  static constexpr const char* name = "extend_attention";

  SPECGRAPH_HD static std::int64_t slot_of(const params& p, std::int64_t r, std::int64_t i) {
    if (p.page_table != nullptr) {
      const std::int64_t page = p.page_table[r * p.table_stride + i / p.page_size];
      return page * p.page_size + i % p.page_size;
    }
    return p.kv_indices[p.kv_indptr[r] + i];
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t index) {
    const std::int64_t row = index / p.heads;
    const std::int32_t h = static_cast<std::int32_t>(index % p.heads);
    const std::int64_t r = row / p.window;
    const std::int64_t j = row % p.window;
    const std::int64_t L = p.page_table != nullptr
                               ? static_cast<std::int64_t>(p.cache_seqlen[r])
                               : static_cast<std::int64_t>(p.kv_indptr[r + 1]) - p.kv_indptr[r];
    std::int64_t n = L - (p.window - 1 - j);
    if (n < 1) n = 1;
    const std::int32_t hd = p.heads * p.head_dim;
    const float* q = p.q + row * hd + h * p.head_dim;
    float acc[max_head_dim];
    for (std::int32_t d = 0; d < p.head_dim; ++d) acc[d] = 0.0f;
    float m = -INFINITY;
    float l = 0.0f;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t slot = slot_of(p, r, i);
      const float* k = p.k_pool + slot * hd + h * p.head_dim;
      const float* v = p.v_pool + slot * hd + h * p.head_dim;
      float s = 0.0f;
      for (std::int32_t d = 0; d < p.head_dim; ++d) s += q[d] * k[d];
      s *= p.scale;
      const float m_new = s > m ? s : m;
      const float correction = expf(m - m_new);  // 0 on the first key (m = -inf)
      const float w = expf(s - m_new);
      l = l * correction + w;
      for (std::int32_t d = 0; d < p.head_dim; ++d) acc[d] = acc[d] * correction + w * v[d];
      m = m_new;
    }
    float* o = p.o + (row * p.heads + h) * p.head_dim;
    for (std::int32_t d = 0; d < p.head_dim; ++d) o[d] = acc[d] / l;
  }
};

// The CSR prefix layout (C2p) runs two passes merged by log-sum-exp (lse_merge_kernel), one
// logical thread per (window token row, head) each:
//   * prefix: token row t = r * W + j attends the committed prefix's slots
//     kv_indices[kv_indptr[r] .. kv_indptr[r + 1]) (every j alike), writing o and lse (an empty
//     prefix: o = 0, lse = -inf, so the merge takes the window alone);
//   * window: it attends the window's own tokens 0 .. j of request r from the forward's k / v
//     tensors ([rows][heads][head_dim], never the pool), causal within the window.
struct extend_two_pass_kernel {
  struct params {
    const float* q;  // [rows][heads][head_dim], rows = batch * window
    std::int32_t window;
    std::int32_t heads;
    std::int32_t head_dim;
    float scale;
    bool prefix;     // true: the prefix pass over the pool; false: the window pass over k / v
    const float* k;  // prefix: the pool [slots][hd]; window: the forward's [rows][hd]
    const float* v;
    const std::int32_t* kv_indptr;  // prefix pass: C2p's prefix_kv_indptr [batch + 1]
    const std::int32_t* kv_indices;
    float* o;    // [rows][heads][head_dim]
    float* lse;  // [rows][heads]
  };
  static constexpr const char* name = "extend_two_pass";

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t index) {
    const std::int64_t row = index / p.heads;
    const std::int32_t h = static_cast<std::int32_t>(index % p.heads);
    const std::int64_t r = row / p.window;
    const std::int64_t j = row % p.window;
    const std::int64_t begin = p.prefix ? p.kv_indptr[r] : 0;
    const std::int64_t end = p.prefix ? p.kv_indptr[r + 1] : j + 1;
    const std::int32_t hd = p.heads * p.head_dim;
    const float* q = p.q + row * hd + h * p.head_dim;
    float acc[max_head_dim];
    for (std::int32_t d = 0; d < p.head_dim; ++d) acc[d] = 0.0f;
    float m = -INFINITY;
    float l = 0.0f;
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t at = p.prefix ? p.kv_indices[i] : r * p.window + i;
      const float* k = p.k + at * hd + h * p.head_dim;
      const float* v = p.v + at * hd + h * p.head_dim;
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
    for (std::int32_t d = 0; d < p.head_dim; ++d) o[d] = end > begin ? acc[d] / l : 0.0f;
    p.lse[row * p.heads + h] = end > begin ? m + logf(l) : -INFINITY;
  }
};

// Its CUDA launcher (sim_kernels.cu; null in host-only builds), for the engine's extend round.
struct sim_extend_cuda_launchers {
  cuda_rows_fn attention, two_pass;
};
sim_extend_cuda_launchers sim_extend_cuda();

}  // namespace specgraph::sim
