// The simulated engines' FA3 draft-decode attention (tools/sim/sim_kernels.hpp's kernels), shared
// by the main job's engine (sim_engine_impl.hpp) and its round loop (round_loop.cpp): the
// request's whole prefix pages through the step-invariant prefix table, the branch's pages
// (copied partial page + draft tokens) through the step's expand table, merged by log-sum-exp into
// out[step]. Enqueued on ex's stream (capture-safe: launches only).
#pragma once

#include <cmath>
#include <cstdint>

#include "specgraph/buffers.hpp"
#include "specgraph/executor.hpp"
#include "tools/sim/sim_kernels.hpp"

namespace specgraph::sim {

struct fa3_buffers {
  const float* q = nullptr;  // [max_rows][steps][heads * head_dim]
  const float* k_pool = nullptr;
  const float* v_pool = nullptr;
  float* o_prefix = nullptr;    // [max_rows][heads * head_dim]
  float* lse_prefix = nullptr;  // [max_rows][heads]
  float* o_expand = nullptr;
  float* lse_expand = nullptr;
  float* out = nullptr;      // [steps][max_rows][heads * head_dim]
  float* out_lse = nullptr;  // [steps][max_rows][heads]
  std::int32_t steps = 0, heads = 0, head_dim = 0, page_size = 0, max_rows = 0;
};

inline void fa3_draft_attention(executor& ex, const sim_cuda_launchers& cuda, const step_view& v,
                                const fa3_buffers& b) {
  const std::int64_t hd = static_cast<std::int64_t>(b.heads) * b.head_dim;
  const std::int64_t rows = static_cast<std::int64_t>(v.rows) * b.heads;
  paged_attention_kernel::params a{};
  a.q = b.q;
  a.steps = b.steps;
  a.step = v.step;
  a.heads = b.heads;
  a.head_dim = b.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(b.head_dim));
  a.k_pool = b.k_pool;
  a.v_pool = b.v_pool;
  a.page_size = b.page_size;
  a.device_step = v.device_step;
  // Pass 1: the request's whole prefix pages through the step-invariant prefix table.
  a.page_table = v.prefix_page_table;
  a.table_stride = v.prefix_stride;
  a.seqlen = v.prefix_seqlen;
  a.rows_per_table_row = v.topk;
  a.o = b.o_prefix;
  a.lse = b.lse_prefix;
  ex.launch(make_kernel_launch<paged_attention_kernel>(a, rows, cuda.attention));
  // Pass 2: the branch's pages (copied partial page + draft tokens) through the step's table.
  a.page_table = v.expand_page_table;
  a.table_stride = v.expand_stride;
  a.seqlen = v.expand_cache_seqlen;
  a.rows_per_table_row = 1;
  a.o = b.o_expand;
  a.lse = b.lse_expand;
  ex.launch(make_kernel_launch<paged_attention_kernel>(a, rows, cuda.attention));
  lse_merge_kernel::params m{};
  m.o1 = b.o_prefix;
  m.lse1 = b.lse_prefix;
  m.o2 = b.o_expand;
  m.lse2 = b.lse_expand;
  m.heads = b.heads;
  m.head_dim = b.head_dim;
  m.out = b.out + static_cast<std::int64_t>(v.step) * b.max_rows * hd;
  m.out_lse = b.out_lse + static_cast<std::int64_t>(v.step) * b.max_rows * b.heads;
  m.device_step = v.device_step;  // step 0's view then: the slice follows the device step
  m.out_step_elems = static_cast<std::int64_t>(b.max_rows) * hd;
  m.lse_step_elems = static_cast<std::int64_t>(b.max_rows) * b.heads;
  ex.launch(make_kernel_launch<lse_merge_kernel>(m, rows, cuda.merge));
}

// An engine's buffers as fa3_buffers, and its draft step's K/V write: E has the device_buffers
// q_src, k_src, v_src, k_pool, v_pool, o_prefix, lse_prefix, o_expand, lse_expand, out, out_lse,
// the ints hd (heads * head_dim) and max_rows, and opt with num_steps, heads, head_dim and
// page_size (sim_engine's impl, the round loop's engine).
template <class E>
fa3_buffers fa3_buffers_of(const E& e) {
  fa3_buffers b;
  b.q = e.q_src.template as<float>();
  b.k_pool = e.k_pool.template as<float>();
  b.v_pool = e.v_pool.template as<float>();
  b.o_prefix = e.o_prefix.template as<float>();
  b.lse_prefix = e.lse_prefix.template as<float>();
  b.o_expand = e.o_expand.template as<float>();
  b.lse_expand = e.lse_expand.template as<float>();
  b.out = e.out.template as<float>();
  b.out_lse = e.out_lse.template as<float>();
  b.steps = e.opt.num_steps;
  b.heads = e.opt.heads;
  b.head_dim = e.opt.head_dim;
  b.page_size = e.opt.page_size;
  b.max_rows = e.max_rows;
  return b;
}

// The step's K and V of every real query row into the pool at its draft slot (kv_write_kernel).
template <class E>
void draft_kv_write(executor& ex, const sim_cuda_launchers& cuda, const step_view& v, const E& e) {
  kv_write_kernel::params w{};
  w.real_batch = v.real_batch;
  w.topk = v.topk;
  w.cache_loc = v.out_cache_loc;
  w.cache_loc_stride = v.cache_loc_stride;
  w.step = v.step;
  w.steps = e.opt.num_steps;
  w.head_elems = e.hd;
  w.k_src = e.k_src.template as<float>();
  w.v_src = e.v_src.template as<float>();
  w.k_pool = e.k_pool.template as<float>();
  w.v_pool = e.v_pool.template as<float>();
  w.device_step = v.device_step;
  ex.launch(make_kernel_launch<kv_write_kernel>(w, v.rows, cuda.kv_write));
}

}  // namespace specgraph::sim
