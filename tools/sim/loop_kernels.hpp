// The round loop's toy models (tools/sim/round_loop.hpp), host+device like the sim's other
// kernels: every value is a pure function of (the request's salt, a position or a round's
// committed length, a branch, a step, an element), so the float64 reference recomputes any
// token's K/V by position without reading the pool, the page tables or the logs' slots.
//
//   committed K/V of position p:          loop_value(salt, p, e, 1 / 2)
//   draft q/k/v of branch t, step j:      loop_value(salt, seq * 4096 + t * 64 + j, e, 3 / 4 / 5)
//   the tree (a topk-ary heap), the draft token and the target's prediction per node: hashes of
//   (salt, seq, node); the target predicts the stop token about once in stop_every nodes.
//
// All arithmetic on the hash is unsigned (wraparound defined); positions and sizes are int64.
#pragma once

#include <cstdint>

#include "specgraph/config.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph::sim {

// SplitMix64 over the four words: unsigned, so overflow wraps by definition.
SPECGRAPH_HD std::uint64_t loop_hash(std::uint64_t a, std::uint64_t b, std::uint64_t c,
                                     std::uint64_t d) {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL;
  const std::uint64_t v[4] = {a, b, c, d};
  for (int i = 0; i < 4; ++i) {
    h ^= v[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
  }
  return h;
}

// A float in [-1, 1): the hash's top 24 bits (exact in float).
SPECGRAPH_HD float loop_value(std::uint64_t salt, std::int64_t where, std::int64_t e,
                              std::uint64_t kind) {
  const std::uint64_t h =
      loop_hash(salt, static_cast<std::uint64_t>(where), static_cast<std::uint64_t>(e), kind);
  return static_cast<float>(static_cast<double>(h >> 40) / 8388608.0 - 1.0);
}

// The draft q/k/v index of branch t, step j of a round whose committed length is seq:
// seq < 2^31, t < 64, j < 64, so the index < 2^44 (int64).
SPECGRAPH_HD std::int64_t loop_draft_where(std::int64_t seq, std::int64_t t, std::int64_t j) {
  return seq * 4096 + t * 64 + j;
}

inline constexpr std::uint64_t loop_k = 1, loop_v = 2, loop_q = 3, loop_dk = 4, loop_dv = 5;
inline constexpr std::int32_t loop_stop_token = 2;  // the toy vocabulary is {0, 1, stop}

// Node i's parent: the chain for topk 1, else a topk-ary heap (depth <= num_steps for the
// configurations round_loop accepts: it checks).
SPECGRAPH_HD std::int32_t loop_parent(std::int32_t i, std::int32_t topk) {
  return i == 0 ? -1 : (topk == 1 ? i - 1 : (i - 1) / topk);
}
SPECGRAPH_HD std::int32_t loop_draft_token(std::uint64_t salt, std::int64_t seq,
                                           std::int64_t node) {
  return static_cast<std::int32_t>(
      loop_hash(salt, static_cast<std::uint64_t>(seq), static_cast<std::uint64_t>(node), 6) % 2);
}
SPECGRAPH_HD std::int32_t loop_target(std::uint64_t salt, std::int64_t seq, std::int64_t node,
                                      std::int32_t stop_every) {
  const std::uint64_t h =
      loop_hash(salt, static_cast<std::uint64_t>(seq), static_cast<std::uint64_t>(node), 7);
  if (stop_every > 0 && h % static_cast<std::uint64_t>(stop_every) == 0) return loop_stop_token;
  return static_cast<std::int32_t>((h >> 20) % 2);
}

// The draft model's q/k/v of one step for every query row (request r = row / topk, branch
// t = row % topk) of the staged round; rows past real_batch * topk get zeros.
struct loop_qkv_kernel {
  struct params {
    const std::int32_t* real_batch;      // [1]
    const std::int32_t* seq_len;         // [bucket] staged
    const std::int32_t* req_pool_index;  // [bucket] staged
    const std::uint64_t* salt;           // [pool_rows]
    std::int32_t topk, step, steps, head_elems;
    float* q;  // [rows][steps][head_elems]
    float* k;
    float* v;
  };
  static constexpr const char* name = "loop_qkv";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    const std::int64_t at = (row * p.steps + p.step) * p.head_elems;
    const bool real = row < static_cast<std::int64_t>(*p.real_batch) * p.topk;
    const std::int64_t r = row / p.topk, t = row % p.topk;
    const std::uint64_t salt = real ? p.salt[p.req_pool_index[r]] : 0;
    const std::int64_t where = real ? loop_draft_where(p.seq_len[r], t, p.step) : 0;
    for (std::int32_t e = 0; e < p.head_elems; ++e) {
      p.q[at + e] = real ? loop_value(salt, where, e, loop_q) : 0.0f;
      p.k[at + e] = real ? loop_value(salt, where, e, loop_dk) : 0.0f;
      p.v[at + e] = real ? loop_value(salt, where, e, loop_dv) : 0.0f;
    }
  }
};

// The engine's prefix-tail copies of paged tree drafting (next_round_params::tail_copy, pairs
// (dst slot, src slot), (-1, -1) unused): one logical thread per pair copies the K/V row. The
// tests' planted bug: nothing is copied in round skip_round (the round counter's value).
struct loop_tail_copy_kernel {
  struct params {
    const std::int32_t* pairs;  // [count][2]
    std::int32_t head_elems;
    float* k_pool;
    float* v_pool;
    const std::int32_t* counter;  // [1] the rounds logged so far: this round's index
    std::int32_t skip_round;      // -1: never
  };
  static constexpr const char* name = "loop_tail_copy";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t i) {
    if (*p.counter == p.skip_round) return;
    const std::int64_t dst = p.pairs[2 * i], src = p.pairs[2 * i + 1];
    if (dst < 0 || src < 0) return;
    for (std::int32_t e = 0; e < p.head_elems; ++e) {
      p.k_pool[dst * p.head_elems + e] = p.k_pool[src * p.head_elems + e];
      p.v_pool[dst * p.head_elems + e] = p.v_pool[src * p.head_elems + e];
    }
  }
};

// The committed tokens' K/V (the draft model's extend forward, and a new request's prefix):
// row r < *real_batch writes positions [begin[r], begin[r] + count[r]) of pool row pool[r] at
// their req_to_token slots.
struct loop_commit_kv_kernel {
  struct params {
    const std::int32_t* real_batch;  // [1]
    const std::int32_t* pool;        // [rows]
    const std::int32_t* begin;       // [rows]
    const std::int32_t* count;       // [rows]
    const std::int32_t* req_to_token;
    std::int64_t width;
    const std::uint64_t* salt;  // [pool_rows]
    std::int32_t head_elems;
    float* k_pool;
    float* v_pool;
  };
  static constexpr const char* name = "loop_commit_kv";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t r) {
    if (r >= *p.real_batch) return;
    const std::int64_t row = p.pool[r];
    const std::uint64_t salt = p.salt[row];
    for (std::int64_t pos = p.begin[r]; pos < static_cast<std::int64_t>(p.begin[r]) + p.count[r];
         ++pos) {
      const std::int64_t slot = p.req_to_token[row * p.width + pos];
      for (std::int32_t e = 0; e < p.head_elems; ++e) {
        p.k_pool[slot * p.head_elems + e] = loop_value(salt, pos, e, loop_k);
        p.v_pool[slot * p.head_elems + e] = loop_value(salt, pos, e, loop_v);
      }
    }
  }
};

// The target's verify forward as far as acceptance reads it: the tree, the draft tokens and the
// target's predictions of every row of the bucket (padded rows too: acceptance ignores them).
struct loop_tree_kernel {
  struct params {
    const std::int32_t* seq_len;         // [bucket] staged
    const std::int32_t* req_pool_index;  // [bucket] staged
    const std::uint64_t* salt;
    std::int32_t* parent;  // [bucket][D]
    std::int32_t* draft_token;
    std::int32_t* target_predict;
    std::int32_t nodes, topk, stop_every;
  };
  static constexpr const char* name = "loop_tree";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t r) {
    const std::uint64_t salt = p.salt[p.req_pool_index[r]];
    const std::int64_t seq = p.seq_len[r];
    for (std::int32_t i = 0; i < p.nodes; ++i) {
      const std::int64_t at = r * p.nodes + i;
      p.parent[at] = loop_parent(i, p.topk);
      p.draft_token[at] = loop_draft_token(salt, seq, i);
      p.target_predict[at] = loop_target(salt, seq, i, p.stop_every);
    }
  }
};

// The log: one logical thread per (step, query row) copies the round's draft attention outputs
// into slot (*counter % slots) of the output log; then loop_log_kernel (one thread) logs the
// acceptance and advances the counter.
struct loop_out_log_kernel {
  struct params {
    const std::int32_t* counter;  // [1]
    std::int32_t slots;           // rounds per launch
    std::int64_t round_elems;     // steps * rows * head_elems
    std::int32_t head_elems;
    const float* out;  // [steps][rows][head_elems]
    float* log;        // [slots][round_elems]
  };
  static constexpr const char* name = "loop_out_log";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t i) {
    const std::int64_t k = *p.counter % p.slots;
    const std::int64_t at = i * p.head_elems;
    for (std::int32_t e = 0; e < p.head_elems; ++e) {
      p.log[k * p.round_elems + at + e] = p.out[at + e];
    }
  }
};

struct loop_log_kernel {
  struct params {
    std::int32_t* counter;  // [1] rounds logged
    std::int32_t slots;
    std::int32_t bucket, width;  // width: S = num_steps + 1
    const std::int32_t* accept_index;
    const std::int32_t* accept_length;
    const std::int32_t* bonus;
    const std::int32_t* finished;
    const std::int32_t* seq_len;  // the verify round's
    const std::int32_t* emit_len;
    const std::int32_t* left;   // the budgets after the commit; null: none (logged as 0)
    const std::int32_t* stall;  // [1] the stall word the next round leaves (read next launch)
    std::int32_t* log;          // [slots][bucket * (S + row_fields) + 1]
  };
  static constexpr const char* name = "loop_log";
  // Per row beside its path: accept_length, bonus, finished, seq_len, emit_len, left; then one
  // word a round: the stall word as the round found it.
  static constexpr std::int64_t row_fields = 6;
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    const std::int32_t k = *p.counter;
    *p.counter = k + 1;
    const std::int64_t b = p.bucket, w = p.width;
    std::int32_t* out = p.log + static_cast<std::int64_t>(k % p.slots) * (b * (w + row_fields) + 1);
    for (std::int64_t i = 0; i < b * w; ++i) out[i] = p.accept_index[i];
    for (std::int64_t r = 0; r < b; ++r) {
      out[b * w + r] = p.accept_length[r];
      out[b * w + b + r] = p.bonus[r];
      out[b * w + 2 * b + r] = p.finished[r];
      out[b * w + 3 * b + r] = p.seq_len[r];
      out[b * w + 4 * b + r] = p.emit_len[r];
      out[b * w + 5 * b + r] = p.left != nullptr ? p.left[r] : 0;
    }
    out[b * (w + row_fields)] = *p.stall;
  }
};

struct loop_cuda_launchers {
  cuda_rows_fn qkv, tail_copy, commit_kv, tree, out_log, log;
};
loop_cuda_launchers loop_cuda();

}  // namespace specgraph::sim
