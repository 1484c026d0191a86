// Stand-ins for an engine's forwards inside a device-round graph (tests/device_round_test.cpp):
// a verify forward that writes the tree, the draft tokens and the target's predictions as a
// hash of (the row's committed seq_len, its pool row, the node), so acceptance varies round to
// round, and a logger (run as the extend forward) that appends the round's acceptance and
// extend inputs to a log at a device round counter; for the device-decided depth, a draft
// forward's confidence hashed likewise and a logger of each round's depth. Host+device; test
// code, not the library's.
#pragma once

#include <cstdint>

#include "specgraph/config.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph::testing {

// FNV-1a over (seq_len, pool row, node, salt), unsigned: wraparound is defined.
SPECGRAPH_HD std::uint64_t toy_hash(std::int64_t seq, std::int64_t pool, std::int64_t node,
                                    std::int64_t salt) {
  std::uint64_t h = 1469598103934665603ULL;
  const std::int64_t v[4] = {seq, pool, node, salt};
  for (int i = 0; i < 4; ++i) h = (h ^ static_cast<std::uint64_t>(v[i])) * 1099511628211ULL;
  return h ^ (h >> 29);
}

// Node i's parent: the chain for topk 1, else a topk-ary heap (depth <= log_topk(D) + 1, within
// num_steps for the configurations the tests use).
SPECGRAPH_HD std::int32_t toy_parent(std::int32_t i, std::int32_t topk) {
  return i == 0 ? -1 : (topk == 1 ? i - 1 : (i - 1) / topk);
}
SPECGRAPH_HD std::int32_t toy_draft(std::int64_t seq, std::int64_t pool, std::int64_t i) {
  return static_cast<std::int32_t>(toy_hash(seq, pool, i, 1) % 2);
}
// The target's prediction: mostly 0 / 1 (so about half the draft tokens match), now and then
// the stop token when `stop` >= 0.
SPECGRAPH_HD std::int32_t toy_target(std::int64_t seq, std::int64_t pool, std::int64_t i,
                                     std::int32_t stop) {
  const std::uint64_t h = toy_hash(seq, pool, i, 2);
  if (stop >= 0 && h % 41 == 0) return stop;
  return static_cast<std::int32_t>((h >> 8) % 2);
}

struct toy_verify_kernel {
  struct params {
    const std::int32_t* seq_len;         // [bucket] the staged (committed) lengths
    const std::int32_t* req_pool_index;  // [bucket]
    std::int32_t* parent;                // [bucket][D]
    std::int32_t* draft_token;
    std::int32_t* target_predict;
    std::int32_t nodes;  // D
    std::int32_t topk;
    std::int32_t stop;  // -1: never
  };
  static constexpr const char* name = "toy_verify";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t r) {
    const std::int64_t seq = p.seq_len[r], pool = p.req_pool_index[r];
    for (std::int32_t i = 0; i < p.nodes; ++i) {
      const std::int64_t at = r * p.nodes + i;
      p.parent[at] = toy_parent(i, p.topk);
      p.draft_token[at] = toy_draft(seq, pool, i);
      p.target_predict[at] = toy_target(seq, pool, i, p.stop);
    }
  }
};

// One thread: log[round] = accept_index [bucket * S], accept_length, bonus, the extend
// section's accept_len and seq_len, the commit's finished, the extend metadata's first window
// slot (out_cache_loc[r * W]: 0 on a padded row) [bucket] each; then ++round. Rounds past
// max_rounds are counted, not logged.
struct round_log_kernel {
  struct params {
    std::int32_t* round;  // [1]
    std::int32_t max_rounds;
    std::int32_t bucket, width;  // width = S
    const std::int32_t* accept_index;
    const std::int32_t* accept_length;
    const std::int32_t* bonus;
    const std::int32_t* accept_len;
    const std::int32_t* seq_len;
    const std::int32_t* finished;
    const std::int32_t* extend_slot;  // the extend's out_cache_loc [bucket * W]
    std::int32_t window;              // W
    std::int32_t* log;                // [max_rounds][bucket * (S + 6)]
  };
  static constexpr const char* name = "round_log";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    const std::int32_t k = *p.round;
    *p.round = k + 1;
    if (k < 0 || k >= p.max_rounds) return;
    const std::int64_t b = p.bucket, w = p.width;
    std::int32_t* out = p.log + static_cast<std::int64_t>(k) * b * (w + 6);
    for (std::int64_t i = 0; i < b * w; ++i) out[i] = p.accept_index[i];
    for (std::int64_t r = 0; r < b; ++r) {
      out[b * w + r] = p.accept_length[r];
      out[b * w + b + r] = p.bonus[r];
      out[b * w + 2 * b + r] = p.accept_len[r];
      out[b * w + 3 * b + r] = p.seq_len[r];
      out[b * w + 4 * b + r] = p.finished[r];
      out[b * w + 5 * b + r] = p.extend_slot[r * p.window];
    }
  }
};

// A draft forward's confidence for the device-decided depth (device_depth): query row q's
// confidence at the step the device counter holds, a hash of (its request's committed seq_len,
// its pool row, the step, its branch q % topk) in [0, 1) in steps of 1/1024 (exact in float),
// so the depth the round graph runs changes from round to round as seq_len advances. A spent
// counter (outside [0, num_steps)) is no step: nothing is written. One row per query row.
SPECGRAPH_HD float toy_confidence(std::int64_t seq, std::int64_t pool, std::int64_t step,
                                  std::int64_t branch) {
  const std::uint64_t h = toy_hash(seq, pool, step * 64 + branch, 3);
  return static_cast<float>(h % 1024) / 1024.0f;
}

struct toy_confidence_kernel {
  struct params {
    const std::int32_t* seq_len;         // [bucket]
    const std::int32_t* req_pool_index;  // [bucket]
    const std::int32_t* step;            // [1] the device step counter
    float* confidence;                   // [bucket * topk]
    std::int32_t* bodies;                // [1] draft forwards run this round, counted here
    std::int32_t topk;
    std::int32_t num_steps;
  };
  static constexpr const char* name = "toy_confidence";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t q) {
    const std::int32_t step = *p.step;
    if (q == 0) *p.bodies += 1;
    if (step < 0 || step >= p.num_steps) return;
    const std::int64_t r = q / p.topk;
    p.confidence[q] = toy_confidence(p.seq_len[r], p.req_pool_index[r], step, q % p.topk);
  }
};

// One thread, after the draft steps (run from the extend forward): log[2 k] = the device step
// counter (the depth round k ran), log[2 k + 1] = the draft forwards counted this round; the
// count back to 0, then ++round. Rounds past max_rounds are counted, not logged.
struct depth_log_kernel {
  struct params {
    std::int32_t* round;  // [1]
    std::int32_t max_rounds;
    const std::int32_t* step;
    std::int32_t* bodies;
    std::int32_t* log;  // [max_rounds][2]
  };
  static constexpr const char* name = "depth_log";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    const std::int32_t k = *p.round;
    *p.round = k + 1;
    const std::int32_t bodies = *p.bodies;
    *p.bodies = 0;
    if (k < 0 || k >= p.max_rounds) return;
    p.log[2 * static_cast<std::int64_t>(k)] = *p.step;
    p.log[2 * static_cast<std::int64_t>(k) + 1] = bodies;
  }
};

cuda_rows_fn toy_verify_cuda();
cuda_rows_fn round_log_cuda();
cuda_rows_fn toy_confidence_cuda();
cuda_rows_fn depth_log_cuda();

}  // namespace specgraph::testing
