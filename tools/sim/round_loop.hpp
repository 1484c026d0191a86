// The main job's round loop (`specgraph run --rounds-per-launch N`; docs/main-job.md, "The round
// loop"):
// whole EAGLE rounds on the library's device-round graph (draft_runtime::launch_device_rounds),
// N rounds per host step with no synchronisation between them, beside the same rounds driven
// from the host (every round: the draft steps' graphs, the verify graph, acceptance, the commit
// and the next round's inputs by the library's host twins, the extend graph, the next round
// staged), on the same seed, in one run.
//
// The engine around it (toy models, tools/sim/loop_kernels.hpp): a batch of `batch` requests,
// each with a committed prefix whose K/V is a pure function of (request, position); the draft
// forward (its q/k/v a function of the round) attends through the FA3 page tables the library
// builds; the verify forward writes a toy tree and the target's predictions; the extend forward
// writes the committed tokens' K/V at their req_to_token slots; the engine's prefix-tail copies
// run before each round's first draft step; its allocator publishes pages to the ring. The host
// steps in every N rounds: it reads the round log, verifies, replaces the requests that finished
// (stop token, or length budget) with new ones and refills the ring. Both modes do exactly that at
// the same rounds, so their accepted paths and final req_to_token must be identical.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "specgraph/executor.hpp"

namespace specgraph::sim {

struct loop_options {
  std::int32_t batch = 8;  // real requests per round, [1, limits::max_batch]
  std::int32_t topk = 4;
  std::int32_t num_steps = 5;
  std::int32_t verify_tokens = 8;  // D, [1, 1 + topk * num_steps]; the tree's depth <= num_steps
  std::int32_t page_size = 16;
  std::int32_t heads = 4;
  std::int32_t head_dim = 64;
  std::int32_t min_context = 1, max_context = 1024;  // a new request's prefix, drawn
  std::int32_t rounds = 200;
  std::int32_t rounds_per_launch = 8;  // N, [1, rounds]
  std::uint64_t seed = 1;
  // Verify the draft attention of every round (all), of every verify_every-th round (sample;
  // rounds 0, verify_every, ...), or none, against the float64 reference by position.
  enum class verify_mode { none, sample, all } verify = verify_mode::sample;
  std::int32_t verify_every = 10;
  double tolerance = 1e-5;
  std::int32_t stop_every = 997;  // the toy target predicts the stop token once in this many
  // Every request's length budget (the tokens it may produce), [1, 1 << 30]; 0: no budget. Set,
  // the commit runs it down in place and finishes a request when it is spent (docs/commit.md).
  std::int32_t max_new_tokens = 0;
  // The engine's allocator at each host step publishes ring pages for this many rounds' worst
  // case, [0, rounds_per_launch]; 0: every round of the step (the ring never runs short). Fewer
  // and a round finds the ring short: it stalls (docs/round-graphs.md section 4), the rounds
  // queued behind it do nothing, and at its next step the host refills the ring, clears the
  // stall word and reruns the next round. Both modes publish at the host steps then.
  std::int32_t short_ring = 0;
  // Tests: in round `corrupt_round`, the device mode skips its prefix-tail copies (the branch
  // pages' copied tail stays stale): the verification must name that round.
  std::int32_t corrupt_round = -1;
};

// One mode's counts over the whole run: the executor's counters, and two clocks, both without
// the float64 reference. seconds: the mode's wall time. host_seconds: its host work, that wall
// time less the device work done on the host's thread (the waits at its synchronisations, and
// on the host executor the graphs it runs inside each launch call).
struct loop_mode_stats {
  std::string mode;  // "host-driven" or "device loop"
  std::int64_t rounds = 0;
  std::int64_t graph_launches = 0, kernel_launches = 0, synchronizations = 0;
  std::int64_t copies_to_host = 0, copies_to_device = 0;
  std::int64_t host_steps = 0;  // the times the host read the log (every N rounds, or every round)
  std::int64_t finished = 0, replaced = 0;
  std::int64_t finished_by_budget = 0;  // of `finished`: by the budget, not a stop token
  std::int64_t stalled_rounds = 0;      // rounds queued behind a stall (nothing ran in them)
  std::int64_t reruns = 0;              // next rounds the host reran after refilling the ring
  std::int64_t accepted = 0;            // accepted draft tokens, summed over live rows and rounds
  std::int64_t emitted = 0;             // tokens the clients get (emit_len), summed likewise
  std::int64_t row_rounds = 0;  // live requests summed over rounds (not idling, not padding)
  double seconds = 0, host_seconds = 0;
};

struct loop_report {
  std::string executor;
  std::int32_t bucket = 0;
  std::int64_t arena_bytes = 0;
  loop_mode_stats host, device;
  // The draft attention outputs of the verified rounds, both modes, against float64.
  std::int64_t verified_rounds = 0, verified_outputs = 0;  // (row, branch, step, head) vectors
  double max_relative_error = 0;
  // device loop vs host-driven: per round the accepted paths, lengths, bonus tokens, finished
  // flags, emitted lengths and budgets left, every draft output vector of every round (bitwise,
  // by a 64-bit hash), then seq_len, allocated_len, the budgets, the ring head and req_to_token
  // at the end.
  std::int64_t compared_rounds = 0, compared_cells = 0;
  bool identical = false;
};

// Runs both modes; throws verification_error (sim_engine.hpp) naming the mode, round, request,
// branch, step and head when an output misses the reference, or the first cell where the modes
// differ; invalid_argument naming the option for a configuration out of range.
loop_report run_round_loop(executor& ex, const loop_options& o);

}  // namespace specgraph::sim
