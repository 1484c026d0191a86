// Internal: the simulated engine's state for the draft-extend step (sim_extend_round.cpp): the
// draft model's own KV pool, the window's q/k/v, and every buffer of the draft-extend metadata,
// owned here and sized exactly by extend_exact_tables for (max_batch, max_context, W).
#pragma once

#include <cstdint>
#include <random>

#include "specgraph/executor.hpp"
#include "tools/sim/sim_extend_kernels.hpp"

namespace specgraph::sim {

struct extend_state {
  std::int32_t window = 0;  // W = opt.verify_tokens: every round's extend window
  std::int32_t page_columns = 0;
  std::int64_t prefix_capacity = 0, full_capacity = 0;
  // Its own generator: the draft model's K/V draws leave the other steps' draws unchanged.
  std::mt19937_64 rng;
  // The draft model's KV pool, [kv_slots][heads * head_dim], at the target pool's slots.
  device_buffer dk_pool, dv_pool;
  // The window's draft q/k/v and outputs: [max_batch * W][heads * head_dim].
  device_buffer q, k, v, o_fa3, o_full, o_prefix, o_window, out_prefix;
  device_buffer lse_prefix, lse_window, lse_out;  // [max_batch * W][heads]
  std::vector<float> h_q, h_k, h_v;
  // Metadata inputs and outputs.
  device_buffer accept_len;
  device_buffer position, out_cache_loc, select_index;
  device_buffer page_table, cache_seqlen, cu_seqlens_q, cu_seqlens_k, max_seqlen_k;
  device_buffer prefix_qo, prefix_kv, prefix_indices;
  device_buffer full_qo, full_kv, full_indices, full_last_page;
  device_buffer guard, scratch;
  sim_extend_cuda_launchers cuda = sim_extend_cuda();
};

}  // namespace specgraph::sim
