// The simulated engine's forward kernels (host+device, like the metadata kernels): write a draft
// step's K/V into the paged pool, paged decode attention over a page table, the log-sum-exp
// merge of the prefix and expand passes (docs/metadata.md section 5), and ragged decode attention
// over the CSR kv_indptr / kv_indices (docs/csr.md). float32 storage.
#pragma once

#include <cmath>
#include <cstdint>

#include "specgraph/config.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph::sim {

inline constexpr std::int32_t max_head_dim = 256;

// Copies the step's K and V of every real query row to the row's slot out_cache_loc[row][step].
// Padded rows write nothing: they all point at the dummy slot 0, and letting them write it
// concurrently would be a (benign but real) data race on global memory.
struct kv_write_kernel {
  struct params {
    const std::int32_t* real_batch;  // [1] the staged real batch (read at replay)
    std::int32_t topk;
    const std::int64_t* cache_loc;  // [rows][cache_loc_stride]
    std::int64_t cache_loc_stride;
    std::int32_t step;
    std::int32_t steps;
    std::int32_t head_elems;  // heads * head_dim
    const float* k_src;       // [rows][steps][head_elems]
    const float* v_src;
    float* k_pool;  // [kv_slots][head_elems]
    float* v_pool;
    const std::int32_t* device_step;  // when set, the step is read here (device step counter)
  };
  static constexpr const char* name = "kv_write";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    if (row >= static_cast<std::int64_t>(*p.real_batch) * p.topk) return;
    const std::int32_t step = p.device_step != nullptr ? *p.device_step : p.step;
    const std::int64_t slot = p.cache_loc[row * p.cache_loc_stride + step];
    const std::int64_t src = (row * p.steps + step) * p.head_elems;
    for (std::int32_t i = 0; i < p.head_elems; ++i) {
      p.k_pool[slot * p.head_elems + i] = p.k_src[src + i];
      p.v_pool[slot * p.head_elems + i] = p.v_src[src + i];
    }
  }
};

// Paged decode attention for one pass: one logical thread per (query row, head). The tokens are
// the first seqlen[table_row] positions of the table row (table_row = row / rows_per_table_row),
// token i on page table[table_row][i / page_size] at offset i % page_size. Online softmax;
// writes o and the natural-log lse. A pass over zero tokens writes o = 0 and lse = -inf.
struct paged_attention_kernel {
  struct params {
    const float* q;  // [rows][steps][heads][head_dim]
    std::int32_t steps;
    std::int32_t step;
    std::int32_t heads;
    std::int32_t head_dim;
    float scale;
    const float* k_pool;
    const float* v_pool;
    const std::int32_t* page_table;
    std::int64_t table_stride;
    const std::int32_t* seqlen;
    std::int32_t rows_per_table_row;  // topk for the per-request prefix table, 1 for expand
    std::int32_t page_size;
    float* o;                         // [rows][heads][head_dim]
    float* lse;                       // [rows][heads]
    const std::int32_t* device_step;  // when set, the step is read here (device step counter)
  };
  static constexpr const char* name = "paged_attention";

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t index) {
    const std::int64_t row = index / p.heads;
    const std::int32_t h = static_cast<std::int32_t>(index % p.heads);
    const std::int64_t table_row = row / p.rows_per_table_row;
    const std::int32_t n = p.seqlen[table_row];
    const std::int32_t hd = p.heads * p.head_dim;
    const std::int32_t step = p.device_step != nullptr ? *p.device_step : p.step;
    const float* q = p.q + (row * p.steps + step) * hd + h * p.head_dim;
    float acc[max_head_dim];
    for (std::int32_t d = 0; d < p.head_dim; ++d) acc[d] = 0.0f;
    float m = -INFINITY;
    float l = 0.0f;
    for (std::int32_t i = 0; i < n; ++i) {
      const std::int64_t page = p.page_table[table_row * p.table_stride + i / p.page_size];
      const std::int64_t slot = page * p.page_size + i % p.page_size;
      const float* k = p.k_pool + slot * hd + h * p.head_dim;
      const float* v = p.v_pool + slot * hd + h * p.head_dim;
      float s = 0.0f;
      for (std::int32_t d = 0; d < p.head_dim; ++d) s += q[d] * k[d];
      s *= p.scale;
      const float m_new = s > m ? s : m;
      const float correction = expf(m - m_new);  // 0 on the first token (m = -inf)
      const float w = expf(s - m_new);
      l = l * correction + w;
      for (std::int32_t d = 0; d < p.head_dim; ++d) acc[d] = acc[d] * correction + w * v[d];
      m = m_new;
    }
    float* o = p.o + (row * p.heads + h) * p.head_dim;
    if (n == 0) {
      for (std::int32_t d = 0; d < p.head_dim; ++d) o[d] = 0.0f;
      p.lse[row * p.heads + h] = -INFINITY;
      return;
    }
    for (std::int32_t d = 0; d < p.head_dim; ++d) o[d] = acc[d] / l;
    p.lse[row * p.heads + h] = m + logf(l);
  }
};

// Ragged paged decode over the CSR layout FlashInfer and Triton read (docs/csr.md): one logical
// thread per (query row, head). Row q of the step attends the token slots
// kv_indices[kv_indptr[q] .. kv_indptr[q + 1]) of that step, each slot a position in the pool
// viewed with page size 1 whatever the KV page size (the kept prefix, then the branch's drafted
// tokens). One pass of online softmax; writes the step's o (nothing merges it, so no lse). An
// empty row writes o = 0.
inline constexpr std::int32_t max_csr_steps = 32;
struct csr_attention_kernel {
  struct params {
    const float* q;  // [rows][steps][heads][head_dim]
    std::int32_t steps;
    std::int32_t step;
    std::int32_t heads;
    std::int32_t head_dim;
    float scale;
    const float* k_pool;
    const float* v_pool;
    const std::int32_t* kv_indptr;  // step s's row at kv_indptr + s * indptr_stride
    std::int64_t indptr_stride;
    // Step 0's kv_indices (one of the two, by the plan's index type); step s's start
    // indices_offset[s] elements after it (the plan's steps are separate buffers).
    const std::int32_t* indices_i32;
    const std::int64_t* indices_i64;
    std::int64_t indices_offset[max_csr_steps];
    float* o;  // [steps][out_step_elems]: the step's slice, [rows][heads][head_dim]
    std::int64_t out_step_elems;
    const std::int32_t* device_step;  // when set, the step is read here (device step counter)
  };
  static constexpr const char* name = "csr_attention";

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t index) {
    const std::int64_t row = index / p.heads;
    const std::int32_t h = static_cast<std::int32_t>(index % p.heads);
    const std::int32_t hd = p.heads * p.head_dim;
    const std::int32_t step = p.device_step != nullptr ? *p.device_step : p.step;
    const std::int32_t* indptr = p.kv_indptr + step * p.indptr_stride;
    const std::int64_t begin = indptr[row];
    const std::int64_t end = indptr[row + 1];
    const std::int64_t offset = p.indices_offset[step];
    const float* q = p.q + (row * p.steps + step) * hd + h * p.head_dim;
    float acc[max_head_dim];
    for (std::int32_t d = 0; d < p.head_dim; ++d) acc[d] = 0.0f;
    float m = -INFINITY;
    float l = 0.0f;
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t slot =
          p.indices_i64 != nullptr ? p.indices_i64[offset + i] : p.indices_i32[offset + i];
      const float* k = p.k_pool + slot * hd + h * p.head_dim;
      const float* v = p.v_pool + slot * hd + h * p.head_dim;
      float s = 0.0f;
      for (std::int32_t d = 0; d < p.head_dim; ++d) s += q[d] * k[d];
      s *= p.scale;
      const float m_new = s > m ? s : m;
      const float correction = expf(m - m_new);  // 0 on the first token (m = -inf)
      const float w = expf(s - m_new);
      l = l * correction + w;
      for (std::int32_t d = 0; d < p.head_dim; ++d) acc[d] = acc[d] * correction + w * v[d];
      m = m_new;
    }
    float* o = p.o + step * p.out_step_elems + (row * p.heads + h) * p.head_dim;
    for (std::int32_t d = 0; d < p.head_dim; ++d) o[d] = end > begin ? acc[d] / l : 0.0f;
  }
};

// Merges the prefix and expand passes per (row, head): m = max(l1, l2), w_i = exp(l_i - m),
// o = (o1 w1 + o2 w2) / (w1 + w2), lse = m + log(w1 + w2).
struct lse_merge_kernel {
  struct params {
    const float* o1;
    const float* lse1;
    const float* o2;
    const float* lse2;
    std::int32_t heads;
    std::int32_t head_dim;
    float* out;      // [rows][heads][head_dim], this step's slice
    float* out_lse;  // [rows][heads], this step's slice
    // Device step counter: the slice is out + *device_step * out_step_elems (and the lse's
    // + *device_step * lse_step_elems).
    const std::int32_t* device_step;
    std::int64_t out_step_elems, lse_step_elems;
  };
  static constexpr const char* name = "lse_merge";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t index) {
    float* out = p.out;
    float* out_lse = p.out_lse;
    if (p.device_step != nullptr) {
      out += *p.device_step * p.out_step_elems;
      out_lse += *p.device_step * p.lse_step_elems;
    }
    const float l1 = p.lse1[index];
    const float l2 = p.lse2[index];
    const float m = l1 > l2 ? l1 : l2;
    const float w1 = l1 == -INFINITY ? 0.0f : expf(l1 - m);
    const float w2 = l2 == -INFINITY ? 0.0f : expf(l2 - m);
    const float inv = 1.0f / (w1 + w2);
    const std::int64_t base = index * p.head_dim;
    for (std::int32_t d = 0; d < p.head_dim; ++d) {
      out[base + d] = (p.o1[base + d] * w1 + p.o2[base + d] * w2) * inv;
    }
    out_lse[index] = m + logf(w1 + w2);
  }
};

// Copies each branch's share of its request's last partial page (the first last_page_len
// tokens) into the branch's fresh first page, as a serving engine does when it allocates the
// branch (docs/metadata.md section 1). Runs eagerly before a round, after stage().
struct branch_page_copy_kernel {
  struct params {
    const std::int32_t* req_to_token;
    std::int64_t req_to_token_stride;
    const std::int32_t* req_pool_index;  // staged inputs
    const std::int32_t* seq_len;
    const std::int64_t* cache_loc;
    std::int64_t cache_loc_stride;
    std::int32_t topk;
    std::int32_t page_size;
    std::int32_t head_elems;
    float* k_pool;
    float* v_pool;
  };
  static constexpr const char* name = "branch_page_copy";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    const std::int64_t r = row / p.topk;
    const std::int32_t seq = p.seq_len[r];
    const std::int32_t lpl = seq % p.page_size;
    const std::int64_t first_slot = p.cache_loc[row * p.cache_loc_stride];
    const std::int64_t page_start = first_slot - first_slot % p.page_size;
    const std::int32_t* tokens = p.req_to_token + p.req_pool_index[r] * p.req_to_token_stride;
    for (std::int32_t i = 0; i < lpl; ++i) {
      const std::int64_t src = tokens[seq - lpl + i];
      const std::int64_t dst = page_start + i;
      for (std::int32_t e = 0; e < p.head_elems; ++e) {
        p.k_pool[dst * p.head_elems + e] = p.k_pool[src * p.head_elems + e];
        p.v_pool[dst * p.head_elems + e] = p.v_pool[src * p.head_elems + e];
      }
    }
  }
};

struct sim_cuda_launchers {
  cuda_rows_fn kv_write, attention, merge, branch_copy, csr_attention;
};
sim_cuda_launchers sim_cuda();  // all null in host-only builds

}  // namespace specgraph::sim
