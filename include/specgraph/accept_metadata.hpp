// Greedy tree acceptance (docs/accept.md): after the target's verify forward, each request's
// tree of D draft nodes (a parent array) is walked from the root, taking at each node the first
// child (in node order) whose draft token equals the target's prediction there, for at most
// num_steps steps. The walk gives the accepted nodes and their count, SGLang's accept_index and
// predict layouts, the tokens the round commits (the accepted draft tokens and the bonus), the new
// committed length and the draft-extend select index.
//
// Launchers follow metadata.hpp's rules: every scalar parameter is validated on the host first
// (invalid_argument naming the field, its value and the limit; nothing launched or written); the
// kernel is enqueued on the executor's stream (asynchronous, no synchronisation, no allocation:
// capture-safe), one logical thread per request; input contents in device memory (seq_len, the
// parent arrays) are checked by the kernel (a request with a bad value is recorded as bad_input
// in guard[0] and written as a padding row); every store is checked against its buffer's
// capacity and a refused store is recorded in guard[1].
#pragma once

#include <cstdint>

#include "specgraph/guard.hpp"

namespace specgraph {

class executor;

// D, the verify tree's size with its root (SGLang's num_draft_tokens): [1, max_accept_tokens].
inline constexpr std::int32_t max_accept_tokens = 1 << 10;
// num_steps, the longest accepted path without its root: [1, max_accept_steps].
inline constexpr std::int32_t max_accept_steps = 1 << 10;

struct accept_params {
  // Inputs, [batch][D] int32, row r at r * D. parent[r][0] = -1 (the root); for i >= 1,
  // parent[r][i] in [-1, i) (-1: an orphan, never accepted, nor its descendants). A node reachable
  // from the root has depth <= num_steps.
  const std::int32_t* parent = nullptr;
  const std::int32_t* draft_token = nullptr;     // any int32: node i's draft token
  const std::int32_t* target_predict = nullptr;  // any int32: the target's argmax at node i
  // [batch]: the committed length before the round, in [0, limits::max_context_len]; a padding
  // row's value is copied to new_seq_len unread otherwise (any int32).
  const std::int32_t* seq_len = nullptr;
  std::int32_t batch = 0;       // B (the bucket when padded), [0, limits::max_batch]
  std::int32_t real_batch = 0;  // [0, batch]: requests r >= real_batch are padding
  // Optional, executor memory [1]: when set, the kernel reads the real batch here at run time
  // and real_batch above is ignored past validation (set it to batch). A value outside
  // [0, batch] is clamped into it and recorded as bad_input in guard[0] (row -1, column -2,
  // capacity batch, value the word).
  const std::int32_t* real_batch_at = nullptr;
  // Optional, executor memory [batch], any int32: a real row with a nonzero value is idle (a
  // request that finished in an earlier round and was left in place; a round section points it
  // at the commit's finished flags). It is written as a padding row, unchecked and unrecorded.
  // null: no row is idle.
  const std::int32_t* idle = nullptr;
  // Optional, executor memory [1], any int32: nonzero at run time means the round is stalled (an
  // earlier round's next round found the ring short and built every row inactive; the engine has
  // not yet refilled the ring and cleared the word, docs/next-round.md section 3). Every row is
  // then written as padding, unchecked and unrecorded, except bonus and new_seq_len, which are
  // not written: they keep the stalling round's values, the inputs the engine's rerun of the next
  // round reads. A round section points it at its stall word. null: never stalled.
  const std::int32_t* stall = nullptr;
  std::int32_t draft_tokens = 0;  // D, [1, max_accept_tokens]; batch * D <= limits::max_rows
  std::int32_t num_steps = 0;     // [1, max_accept_steps]; batch * (num_steps + 1) <= max_rows

  // Outputs, int32, any subset (null: not written; at least one set), each with its capacity in
  // elements (accept_exact_capacities gives the exact ones; a store at or past it is refused and
  // recorded). S = num_steps + 1.
  std::int32_t* accept_index = nullptr;  // [batch][S]: r * D + n_k for k <= c, then -1
  std::int64_t accept_index_capacity = 0;
  std::int32_t* accept_length = nullptr;  // [batch]: c, the accepted draft nodes
  std::int64_t accept_length_capacity = 0;
  std::int32_t* predict = nullptr;  // [batch][D]: target_predict at accepted nodes, else 0
  std::int64_t predict_capacity = 0;
  // [batch][D]: the committed tokens target_predict[n_j] at j <= c (the accepted draft tokens
  // then the bonus; draft extend's input ids), 0 past them.
  std::int32_t* accept_tokens = nullptr;
  std::int64_t accept_tokens_capacity = 0;
  std::int32_t* bonus = nullptr;  // [batch]: target_predict[n_c]
  std::int64_t bonus_capacity = 0;
  std::int32_t* new_seq_len = nullptr;  // [batch]: seq_len + c + 1
  std::int64_t new_seq_len_capacity = 0;
  std::int32_t* select_index = nullptr;  // [batch]: r * D + c (draft extend's r * D + a - 1)
  std::int64_t select_index_capacity = 0;

  // [accept_guard_count]: guard[0] bad input (kernel_id accept_metadata), guard[1] stores past a
  // capacity (accept_outputs).
  guard_word* guard = nullptr;
};

inline constexpr std::int32_t accept_guard_count = 2;

// The exact capacities of a bucket (batch B, tree size D, num_steps): accept_index B * S,
// predict and accept_tokens B * D, the per-request vectors B; pointers left null. Host only;
// arguments in the ranges of accept_params.
accept_params accept_exact_capacities(std::int32_t batch, std::int32_t draft_tokens,
                                      std::int32_t num_steps);

// The scalars only (batch, real_batch, draft_tokens, num_steps, their products, every
// capacity); throws invalid_argument naming the field.
void validate_scalars(const accept_params& p);
// validate_scalars and the pointers (inputs when batch > 0, guard, at least one output). Throws
// invalid_argument; writes nothing.
void validate(const accept_params& p);
// Also scans the contents (seq_len, every parent entry, every reachable node's depth); host
// memory. Throws invalid_argument naming the request and node; writes nothing.
void validate_contents_host(const accept_params& p);

// Enqueues one pass (batch + 1 logical threads: one per request, one for the real-batch word)
// on the executor's stream. Asynchronous, capture-safe, no allocation, no scratch; does not reset
// the guard words.
void launch_accept(executor& ex, const accept_params& p);
// The same computation on the calling thread over host memory, after validate_contents_host.
void accept_host(const accept_params& p);
// Checks p (validate; with host_memory validate_contents_host) before anything is written, resets
// p.guard's accept_guard_count words, then runs accept_host (host_memory: synchronous) or
// launch_accept (asynchronous on ex's stream, capture-safe).
void run_accept(executor& ex, const accept_params& p, bool host_memory);

}  // namespace specgraph
