// Internal: the simulated engine's state for the verify step (sim_verify_round.cpp): the toy
// model, the target's inputs, and every buffer of the verify metadata, owned here and sized
// exactly by the verify_* capacity functions for (max_batch, max_context, D).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "specgraph/executor.hpp"
#include "tools/sim/sim_engine.hpp"
#include "tools/sim/sim_tree.hpp"
#include "tools/sim/sim_verify_kernels.hpp"

namespace specgraph::sim {

struct verify_state {
  std::int32_t max_tokens = 0;  // D the buffers hold (opt.verify_tokens)
  std::int32_t prefix_columns = 0, kv_capacity = 0, packed_capacity = 0;
  std::int64_t mask_capacity = 0;
  // A generator of its own: the draft loop's draws (batches, depths, replacements) are the same
  // with or without the verify step.
  std::mt19937_64 rng;
  toy_lm lm;
  std::vector<std::int32_t> root_token;  // per pool row: the last committed token
  // The target's inputs and outputs: [max_batch * D][heads * head_dim].
  device_buffer q, k, v, o_prefix, lse_prefix, o_expand, lse_expand, out, out_lse, out_csr;
  std::vector<float> h_q, h_k, h_v;
  // Metadata inputs and outputs.
  device_buffer pool_index, seq_len, mask;
  device_buffer prefix_table, prefix_cache, prefix_q, prefix_k;
  device_buffer expand_table, expand_cache, expand_q, expand_k;
  device_buffer qo, kv_indptr, kv_indices, last_page, mask_indptr, packed, packed_indptr;
  device_buffer guard, scratch;
  device_buffer commit_count, commit_src, commit_dst;  // the accepted tokens' K/V moves
  std::int32_t corrupt_mask_round = -1;
  verify_trace trace;
  sim_verify_cuda_launchers cuda = sim_verify_cuda();
};

}  // namespace specgraph::sim
