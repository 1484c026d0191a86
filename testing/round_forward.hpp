// Stand-ins for an engine's forwards inside a device-round graph (tests/device_round_test.cpp):
// a verify forward that writes the tree, the draft tokens and the target's predictions as a
// hash of (the row's committed seq_len, its pool row, the node), so acceptance varies round to
// round, and a logger (run as the extend forward) that appends the round's acceptance and
// extend inputs to a log at a device round counter. Host+device; test code, not the library's.
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
// section's accept_len and seq_len, the commit's finished [bucket] each; then ++round. Rounds past
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
    std::int32_t* log;  // [max_rounds][bucket * (S + 5)]
  };
  static constexpr const char* name = "round_log";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    const std::int32_t k = *p.round;
    *p.round = k + 1;
    if (k < 0 || k >= p.max_rounds) return;
    const std::int64_t b = p.bucket, w = p.width;
    std::int32_t* out = p.log + static_cast<std::int64_t>(k) * b * (w + 5);
    for (std::int64_t i = 0; i < b * w; ++i) out[i] = p.accept_index[i];
    for (std::int64_t r = 0; r < b; ++r) {
      out[b * w + r] = p.accept_length[r];
      out[b * w + b + r] = p.bonus[r];
      out[b * w + 2 * b + r] = p.accept_len[r];
      out[b * w + 3 * b + r] = p.seq_len[r];
      out[b * w + 4 * b + r] = p.finished[r];
    }
  }
};

cuda_rows_fn toy_verify_cuda();
cuda_rows_fn round_log_cuda();

}  // namespace specgraph::testing
