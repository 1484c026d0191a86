// A simulated serving engine around draft_runtime: a fragmented paged KV pool, requests with
// random prefixes, EAGLE branch allocation per round (docs/metadata.md section 1), and a forward
// captured in every graph that writes the step's K/V and runs two-pass paged decode attention
// merged by log-sum-exp (format fa3), and/or one ragged decode pass over the CSR kv_indptr /
// kv_indices the library writes (format csr). Rounds can be verified against a dense float64
// reference that gathers tokens by position, never through page tables or CSR indices. After
// the draft steps, a verify step runs the target over each request's draft tree through the
// verify metadata and commits the accepted path (docs/verify.md section 10).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "specgraph/executor.hpp"
#include "specgraph/runtime.hpp"

namespace specgraph::sim {

struct sim_options {
  std::int32_t max_batch = 32;
  std::int32_t topk = 4;
  std::int32_t num_steps = 5;
  std::int32_t slot_stride = 0;  // out_cache_loc row width (0: num_steps); extra slots poisoned
  std::int32_t page_size = 16;
  std::int32_t heads = 4;
  std::int32_t head_dim = 64;
  std::int32_t max_context = 1024;
  std::int32_t min_context = 1;  // request prefixes are drawn from [min_context, max_context]
  std::int32_t rounds = 200;
  std::int32_t depth = 0;      // 0: num_steps every round; -1: random 1..num_steps per round
  std::int32_t min_batch = 1;  // batches are drawn uniformly from [min_batch, max_batch]
  std::uint64_t seed = 1;
  std::string executor = "auto";
  enum class verify_mode { none, sample, all } verify = verify_mode::sample;
  std::int32_t verify_every = 10;  // with verify = sample: every Nth round (and the first)
  bool checked = false;
  bool device_steps = false;          // one graph per bucket, the step read from a device counter
  double replace_probability = 0.05;  // per request per round: finishes, a new one arrives
  double tolerance = 1e-5;            // relative error allowed against the float64 reference
  // Which attention path the forward runs: fa3 (two passes over the prefix and expand page
  // tables, merged), csr (one pass over the step's kv_indptr / kv_indices, written by
  // csr_indices for the step, or for the whole round under device_steps), or both (then the two
  // paths' outputs are also compared on every round, see run_report::agreement_*). csr and both
  // plan formats both (draft_runtime writes the FA3 tables in any case) and widen req_to_token rows
  // to max_context + (topk - 1) * page_size * nnp + num_steps: the branches' draft positions
  // (docs/csr.md section 1). num_steps <= max_csr_steps with csr.
  metadata_formats format = metadata_formats::fa3;
  bool csr_int64 = false;  // CSR kv_indices int64 (Triton's) instead of int32 (FlashInfer's)
  // The verify step after the draft steps (tools/sim/sim_verify_round.cpp): a tree of
  // min(verify_tokens, 1 + topk * depth) tokens per request (root included), verified by the
  // target in one forward with tree attention; the accepted path extends the request. 0: no
  // verify step (the draft loop alone). [0, min(max_draft_tokens, 1 + topk * num_steps)], or
  // -1: min(8, 1 + topk * num_steps) (resolved_verify_tokens).
  std::int32_t verify_tokens = -1;
  bool trace_verify = false;  // tests: record the last verify step in sim_engine::last_verify()
  // The draft-extend step after each verify step (tools/sim/sim_extend_round.cpp): the draft
  // model's extend forward over each request's window of W = verify_tokens tokens through the
  // draft-extend metadata (docs/extend.md), the accepted tokens' draft K/V committed. Needs a
  // verify step (ignored without one).
  bool draft_extend = true;
};

inline std::int32_t resolved_verify_tokens(const sim_options& o) {
  const std::int64_t all = 1 + static_cast<std::int64_t>(o.topk) * o.num_steps;
  return o.verify_tokens >= 0 ? o.verify_tokens
                              : static_cast<std::int32_t>(std::min<std::int64_t>(8, all));
}

// Trees and acceptance of the verify steps, and their outputs' checks (the report's verify row).
struct verify_stats {
  std::int64_t steps = 0;        // verify forwards run (one per round)
  std::vector<double> seconds;   // one per step: K/V write, metadata, attention, synchronised
  std::int64_t requests = 0;     // real requests verified, summed over rounds
  std::int64_t tree_tokens = 0;  // real tree tokens (root included), summed
  std::int64_t accepted = 0;     // accepted draft tokens, summed (each request commits + 1)
  std::int64_t finished = 0;     // requests that reached max_context and were replaced
  std::int64_t verified_rounds = 0, verified_outputs = 0;  // (token, head) vectors, per path
  double max_relative_error_fa3 = 0, max_relative_error_csr = 0;
  std::int64_t agreement_rounds = 0, agreement_outputs = 0;  // format both
  double max_abs_difference = 0, max_relative_difference = 0;
};

// The draft-extend step of every round (tools/sim/sim_extend_round.cpp; the report's extend row).
struct extend_stats {
  std::int64_t steps = 0;          // extend forwards run (one per round with a verify step)
  std::vector<double> seconds;     // one per step: K/V write, metadata, attention, synchronised
  std::int64_t requests = 0;       // real requests extended, summed over rounds
  std::int64_t window_tokens = 0;  // real window tokens (W per request), summed
  std::int64_t accepted = 0;       // accepted lengths (the window tokens committed), summed
  std::int64_t verified_rounds = 0, verified_outputs = 0;  // (token, head) vectors, per path
  // Per path against the float64 reference: FA3's page table (C1), CSR's full layout (C2f) and
  // its prefix layout with the window from the forward's own tensors (C2p).
  double max_relative_error_fa3 = 0, max_relative_error_full = 0, max_relative_error_prefix = 0;
  std::int64_t agreement_rounds = 0, agreement_outputs = 0;  // format both: fa3 vs both csr
  double max_relative_difference = 0;
};

// The last verify step (sim_options::trace_verify), for the tests: the inputs of its metadata,
// every output buffer as it stood after the launch (poisoned before it), the trees, the float64
// reference and the acceptance.
struct verify_trace {
  std::int32_t round = -1, batch = 0, bucket = 0, depth = 0, tokens = 0, page_size = 0;
  std::int32_t max_seq_len = 0, width = 0, pool_rows = 0, topk = 0;
  std::vector<std::int32_t> req_to_token;             // [pool_rows][width], host mirror
  std::vector<std::int32_t> pool_index, seq_len;      // [bucket], padding included
  std::vector<std::uint8_t> mask;                     // the engine's full layout
  std::vector<std::int32_t> root_token;               // [batch]
  std::vector<std::int32_t> draft_token;              // [batch][topk][depth]
  std::vector<double> draft_score;                    // [batch][topk][depth]
  std::vector<std::int32_t> tree_parent, tree_token;  // [batch][D]
  std::vector<double> reference;                      // [batch][D][heads * head_dim], float64
  std::vector<float> output;                          // [batch][D][heads * head_dim]: acceptance's
  std::vector<std::int32_t> accepted;                 // [batch]
  std::vector<std::int32_t> seq_len_after;            // [batch]; -1: finished and replaced
  std::vector<float> lm_bigram, lm_head;              // the toy model (sim_tree.hpp)
  std::int32_t vocab = 0;
  // The verify buffers after the launch, whole (their poison: verify_poison, verify_poison_byte).
  std::vector<std::int32_t> prefix_table, prefix_cache_seqlen, prefix_cu_q, prefix_cu_k;
  std::vector<std::int32_t> expand_table, expand_cache_seqlen, expand_cu_q, expand_cu_k;
  std::vector<std::int32_t> qo_indptr, kv_indptr, kv_indices, kv_last_page_len, mask_indptr,
      packed_indptr;
  std::vector<std::uint8_t> packed;
  std::int64_t prefix_stride = 0, expand_stride = 0;
  std::int32_t prefix_capacity = 0, kv_capacity = 0, packed_capacity = 0;
};
inline constexpr std::int32_t verify_poison = -7;
inline constexpr std::uint8_t verify_poison_byte = 0xa5;

// Verification failed: names round, step, bucket and row.
class verification_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct step_stats {
  std::int32_t step = 0;
  std::int64_t replays = 0;
  std::int64_t draft_tokens = 0;  // real query rows drafted by this step, summed over rounds
  std::vector<double> seconds;    // one per replay
};

struct round_record {
  std::int32_t batch = 0, bucket = 0, depth = 0;
  bool verified = false;
};

struct run_report {
  std::string executor;
  capture_report capture;
  std::vector<step_stats> steps;
  std::vector<round_record> rounds;
  std::int64_t verified_rounds = 0;
  std::int64_t verified_outputs = 0;  // (row, step, head) vectors compared, per path
  double max_relative_error = 0;      // over the paths that ran
  double max_relative_error_fa3 = 0, max_relative_error_csr = 0;
  // Format both: the two paths' outputs compared on every round (verify not none), per real
  // (row, step, head) vector; difference relative to the vector's largest |fa3 output|.
  std::int64_t agreement_rounds = 0, agreement_outputs = 0;
  double max_abs_difference = 0, max_relative_difference = 0;
  double run_seconds = 0;
  verify_stats verify;
  extend_stats extend;
};

class sim_engine {
 public:
  sim_engine(executor& ex, const sim_options& options);
  ~sim_engine();
  sim_engine(const sim_engine&) = delete;
  sim_engine& operator=(const sim_engine&) = delete;

  draft_runtime& runtime();
  const sim_options& options() const;

  capture_report capture(const std::function<void(int, int)>& progress = {});
  // One round: batch real requests, `depth` steps, verified when `verify`. Times each step's
  // replay (synchronising after it) into `report`. Throws verification_error or guard_violation.
  void run_round(std::int32_t round, std::int32_t batch, std::int32_t depth, bool verify,
                 run_report& report);
  // The pieces of run_round, for benchmarks that time one step: begin_round picks `batch`
  // requests, allocates their branches, uploads the round's draft outputs and stages the round;
  // step(s) replays graph(B, s) (or, with eager, launches the same kernels without a graph) and
  // does not synchronise; end_round frees the branch pages.
  void begin_round(std::int32_t batch);
  void step(std::int32_t s, bool eager);
  void end_round();

  // The whole run with the options' rounds, batches and depths.
  run_report run(const std::function<void(int, int)>& progress = {});

  // For the corruption test: after step 0 of round `round` (which computes the step-invariant
  // prefix table), overwrite one prefix page-table entry of a real request with a wrong page.
  void corrupt_prefix_table_at_round(std::int32_t round);
  // For the checked-mode test: in round `round`, move the step-1 slot of the first branch to the
  // wrong in-page offset (needs page_size >= 2 and num_steps >= 2), breaking the section-1 layout.
  void corrupt_branch_layout_at_round(std::int32_t round);
  // For the CSR tests: in round `round`, point request 0's branch-0 draft position 1 in
  // req_to_token (which the CSR indices read, the FA3 tables do not) at the request's first
  // prefix slot (needs num_steps >= 2): the csr path's steps 1.. of row 0 attend a wrong token.
  void corrupt_draft_position_at_round(std::int32_t round);
  // For the verify tests: in round `round`, after the verify metadata is built, clear the bit
  // of request 0's query 1 for the root (tree cell (1, 0); needs D >= 2) in the packed mask the
  // csr path reads: that query misses its parent, and the verification names it.
  void corrupt_packed_mask_at_round(std::int32_t round);
  // Tests: after the draft-extend metadata of `round`, overwrite one page-table cell of request 0
  // (FA3) and one full-layout kv index (CSR) with another slot: that round's extend check must
  // fail (a planted bug, the way an engine's stale table would show).
  void corrupt_extend_table_at_round(std::int32_t round);
  // The last verify step, with sim_options::trace_verify.
  const verify_trace& last_verify() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace specgraph::sim
