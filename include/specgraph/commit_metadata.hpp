// The commit of a speculative round (docs/commit.md), after greedy acceptance
// (accept_metadata.hpp): per request, the KV moves that bring the accepted path to the front of
// the verify window (topk > 1), whether the request finished in this round (a stop token the
// engine names, or its remaining length budget), how many of the round's tokens the client gets,
// and the positions of its row whose slots the engine's allocator takes back when it finishes.
//
// Nothing here touches a KV pool or the allocator: the moves are (destination slot, source slot)
// pairs the engine's copy kernel applies, one request's in increasing window row (each move reads
// its source before a later move writes it), and the freed range is a half-open range of
// positions of the request's req_to_token row.
//
// Launchers follow metadata.hpp's rules: scalars validated on the host first (invalid_argument
// naming the field, its value and the limit; nothing launched or written); one logical thread
// per request on the executor's stream (asynchronous, no synchronisation, no allocation:
// capture-safe); a real request with bad input content is recorded in guard[0] and written as a
// padding row; every store is checked against its capacity (guard[1]).
#pragma once

#include <cstdint>

#include "specgraph/guard.hpp"

namespace specgraph {

class executor;

// Stop token ids a commit compares the round's output tokens with: [0, max_stop_tokens].
inline constexpr std::int32_t max_stop_tokens = 1 << 10;

struct commit_params {
  // From acceptance, for the same bucket: accept_index [batch][S] (S = num_steps + 1; r * D + n_k
  // for k <= c, then -1), accept_length [batch] (c), accept_tokens [batch][D] (the committed
  // tokens target_predict[n_j] at j <= c).
  const std::int32_t* accept_index = nullptr;
  const std::int32_t* accept_length = nullptr;
  const std::int32_t* accept_tokens = nullptr;
  // [batch]: the committed length before the round, [1, limits::max_context_len] on real rows.
  const std::int32_t* seq_len = nullptr;
  // [batch]: positions [0, allocated_len) of the row are backed by the request's slots; real
  // rows: seq_len + D <= allocated_len <= req_to_token_stride.
  const std::int32_t* allocated_len = nullptr;
  const std::int32_t* req_pool_index = nullptr;  // [batch], in [0, pool_rows)
  // req_to_token[pool_rows][req_to_token_stride], int32 slots; read only (the window's slots).
  const std::int32_t* req_to_token = nullptr;
  std::int64_t req_to_token_stride = 0;  // W, [1, 2^31)
  std::int32_t pool_rows = 0;            // [1, limits::max_pool_rows]
  // Optional: stop_token_count ids (executor memory); an output token equal to one finishes
  // the request after it. null with count 0: no stop tokens.
  const std::int32_t* stop_token_ids = nullptr;
  std::int32_t stop_token_count = 0;  // [0, max_stop_tokens]
  // Optional, [batch], read and written in place: tokens the request may still produce, >= 1
  // on real rows; the round's tokens past it are cut and the request finishes. The commit
  // writes back what is left after the round, max_new_tokens_left[r] - emit_len[r] (>= 0, since
  // emit_len <= the budget): 0 for a request that finished by its budget, what the client could
  // still have had for one that stopped on a stop token. Written for every real row the commit
  // handles, whatever outputs are set or cut short; a padding row and a real row refused as bad
  // input (its budget below 1 included) keep their cell untouched. null: no budget.
  std::int32_t* max_new_tokens_left = nullptr;

  std::int32_t batch = 0;       // B, [0, limits::max_batch]
  std::int32_t real_batch = 0;  // [0, batch]
  // Optional device word read at run time instead of real_batch (clamped into [0, batch] and
  // recorded as in accept_params).
  const std::int32_t* real_batch_at = nullptr;
  // Optional, [batch], any int32: a real row with a nonzero value is idle (it finished in an
  // earlier round and was left in place). It is not checked, moves nothing (kv_move -1), keeps
  // its budget, and its finished, emit_len, free_begin and free_end cells are not written: they
  // keep what the round it finished in wrote. May alias finished (in-place state: a round
  // section does, so a finished row stays idle until the engine clears its flag when it
  // restages the row). null: no row is idle.
  const std::int32_t* idle = nullptr;
  // Optional, [1], any int32: nonzero at run time means the round is stalled (accept_params::
  // stall). Every row that is not idle is then written as padding, unchecked: no moves, not
  // finished, emit_len 0, nothing freed, its budget untouched. An idle row stays idle. A round
  // section points it at its stall word. null: never stalled.
  const std::int32_t* stall = nullptr;
  std::int32_t draft_tokens = 0;  // D, [1, max_accept_tokens]
  std::int32_t num_steps = 0;     // [1, max_accept_steps]
  std::int32_t topk = 0;          // [1, limits::max_topk]; 1: no moves (the chain is in place)
  std::int32_t page_size = 0;     // [1, limits::max_page_size]

  // Outputs, int32, any subset (null: not written; at least one set), capacities in elements.
  // [batch][num_steps][2]: entry k - 1 (window row k = 1 .. num_steps) is (V[k], V[n_k]) with
  // V[i] = req_to_token[row][seq_len + i] when k <= c and n_k != k, else (-1, -1). All -1 for
  // topk = 1 and for padding rows.
  std::int32_t* kv_move = nullptr;
  std::int64_t kv_move_capacity = 0;
  std::int32_t* finished = nullptr;  // [batch]: 1 when the request finished in this round
  std::int64_t finished_capacity = 0;
  // [batch]: the round's tokens the client gets (docs/commit.md): a stop token at output index
  // e gives e + 1, capped at the budget m; else m when a >= m; else a = c + 1. 0 on padding.
  std::int32_t* emit_len = nullptr;
  std::int64_t emit_len_capacity = 0;
  // [batch]: the positions [free_begin, free_end) of a finished request's row to release,
  // [ceil_page(owned), allocated_len) with owned = seq_len + min(a, emit_len + 1); empty
  // (0, 0) for a request that goes on and for padding.
  std::int32_t* free_begin = nullptr;
  std::int64_t free_begin_capacity = 0;
  std::int32_t* free_end = nullptr;
  std::int64_t free_end_capacity = 0;

  // [commit_guard_count]: guard[0] bad input (kernel_id commit_metadata), guard[1] stores past
  // a capacity (commit_outputs).
  guard_word* guard = nullptr;
};

inline constexpr std::int32_t commit_guard_count = 2;

// The exact capacities (kv_move batch * num_steps * 2, the vectors batch); pointers null. Host
// only (no stream); arguments in the ranges of commit_params.
commit_params commit_exact_capacities(std::int32_t batch, std::int32_t num_steps);

// Scalars (ranges, products, capacities); throws invalid_argument naming the field. Host only,
// no stream; reads no buffer.
void validate_scalars(const commit_params& p);
// validate_scalars and the pointers (the inputs, req_to_token included, when batch > 0;
// stop_token_ids when stop_token_count > 0; guard; at least one output). Throws
// invalid_argument; writes nothing; no stream.
void validate(const commit_params& p);
// Also every input content of the real rows, in host memory (seq_len, allocated_len,
// req_pool_index, accept_length, accept_index, max_new_tokens_left); throws naming the row
// (e.g. allocated_len[1], accept_index[1][2]), the value and the limit. Synchronous, no stream.
void validate_contents_host(const commit_params& p);

// One pass of batch + 1 logical threads on ex's stream (validate first, on the host);
// asynchronous, capture-safe, no allocation, no synchronisation; does not reset the guard words.
// Bad content of a real row is recorded in guard[0] (columns: docs/commit.md section 7).
void launch_commit(executor& ex, const commit_params& p);
// The same computation on the calling thread over host memory, after validate_contents_host
// (synchronous, no stream; does not reset the guard words).
void commit_host(const commit_params& p);
// Checks (validate; with host_memory validate_contents_host), resets the guard words, then runs
// commit_host (synchronous) or launch_commit (asynchronous on ex's stream, capture-safe).
void run_commit(executor& ex, const commit_params& p, bool host_memory);

}  // namespace specgraph
