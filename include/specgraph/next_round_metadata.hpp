// The next round's inputs on the device (docs/next-round.md), after the commit
// (commit_metadata.hpp): each request that goes on takes the pages its next round can touch from
// a ring of free pages the engine fills, writes them into its req_to_token row, and gets the next
// round's draft inputs (root token, positions, draft slots per branch and step, the prefix-tail
// copies of paged tree drafting) and verify slots. The engine's allocator stays the owner of
// pages: it fills the ring and publishes a tail counter; the device only consumes.
//
// Allocation (all or nothing): for every row that goes on (real, not finished),
//   nxt[r] = max(allocated_len[r], ceil_page(seq_len'[r] + reserve)),
//   n[r]   = ceil(nxt[r] / ps) - ceil(allocated_len[r] / ps) pages,
// rows in order take consecutive ring entries from head. When sum n > tail - head no row takes
// a page, guard word 0 records it and the stall word is set: every row is built as an inactive
// (padding) row, this round and every later one, until the engine clears the stall word. A row
// whose nxt exceeds the row width W takes nothing and is recorded; the others proceed.
//
// Launchers follow metadata.hpp's rules: scalars validated on the host first (invalid_argument
// naming the field, its value and the limit; nothing launched or written); two passes on the
// executor's stream (one logical thread for the ring plan, then one per request), asynchronous,
// no synchronisation, no allocation: capture-safe; a real request's bad input content is recorded
// and the row built inactive; every store is checked against its capacity.
#pragma once

#include <cstdint>

#include "specgraph/guard.hpp"

namespace specgraph {

class executor;

struct next_round_params {
  // [batch] from acceptance and commit: new_seq_len (seq_len' = seq_len + c + 1, in
  // [1, limits::max_context_len] on real rows), bonus (the next round's root token), finished
  // (optional: null means none finished).
  const std::int32_t* new_seq_len = nullptr;
  const std::int32_t* bonus = nullptr;
  const std::int32_t* finished = nullptr;
  // [batch], in [0, pool_rows); distinct across the rows that go on (each row's pass writes its
  // own req_to_token row).
  const std::int32_t* req_pool_index = nullptr;
  // Read and written: req_to_token[pool_rows][req_to_token_stride] int32 slots (the new
  // positions of allocating rows), allocated_len [batch] (nxt of allocating rows; real rows:
  // new_seq_len <= allocated_len <= W, and when allocated_len % ps != 0 the slot at
  // allocated_len - 1 ends its page's run: (slot + 1) % ps == allocated_len % ps).
  std::int32_t* req_to_token = nullptr;
  std::int64_t req_to_token_stride = 0;  // W, [1, 2^31)
  std::int32_t pool_rows = 0;            // [1, limits::max_pool_rows]
  std::int32_t* allocated_len = nullptr;

  // The ring of free pages (slot ids at page size 1), executor memory: ring[ring_capacity]
  // page ids in [0, limits::max_page_id]; ring_head [1] consumed entries (written here),
  // ring_tail [1] published entries (the engine's; read). 64-bit and monotonic: entry e lives at
  // ring[e % ring_capacity]; tail - head pages are available.
  const std::int32_t* ring = nullptr;
  std::int64_t ring_capacity = 0;  // [1, 2^40]
  std::int64_t* ring_head = nullptr;
  const std::int64_t* ring_tail = nullptr;
  // [1], executor memory: 0 to run; set to 1 when the ring was short. While it is nonzero every
  // row is built inactive and nothing is taken from the ring. The engine clears it after a refill.
  std::int32_t* stall = nullptr;

  std::int32_t batch = 0;                       // B, [0, limits::max_batch]
  std::int32_t real_batch = 0;                  // [0, batch]
  const std::int32_t* real_batch_at = nullptr;  // optional device word, as in accept_params
  std::int32_t draft_tokens = 0;                // D, [1, max_accept_tokens]
  std::int32_t num_steps = 0;                   // [1, max_accept_steps]
  std::int32_t topk = 0;                        // [1, limits::max_topk]
  std::int32_t page_size = 0;                   // [1, limits::max_page_size]
  // R, positions kept allocated past the committed length, [0, 2^28]; next_round_reserve gives
  // the exact one (docs/next-round.md).
  std::int32_t reserve = 0;

  // Outputs, any subset (null: not written; at least one set), capacities in elements.
  std::int32_t* active = nullptr;  // [batch]: 1 for a row the next round runs
  std::int64_t active_capacity = 0;
  std::int32_t* seq_len = nullptr;  // [batch]: seq_len' (inactive rows: 1)
  std::int64_t seq_len_capacity = 0;
  std::int32_t* root_token = nullptr;  // [batch]: the bonus (inactive rows: 0)
  std::int64_t root_token_capacity = 0;
  std::int32_t* draft_position = nullptr;  // [batch][topk]: seq_len' (inactive rows: 0)
  std::int64_t draft_position_capacity = 0;
  // [batch][topk][draft_slot_stride]: cell (t, j < num_steps) = req_to_token[row][P(s', t, j)]
  // (docs/next-round.md; draft-round positions), 0 when unbacked or inactive; cells
  // j >= num_steps are not written.
  std::int64_t* draft_out_cache_loc = nullptr;
  std::int64_t draft_out_cache_loc_capacity = 0;
  std::int64_t draft_slot_stride = 0;  // [num_steps, limits::max_slot_stride]
  // [batch][topk - 1][page_size - 1][2]: the draft pool's prefix-tail copies (dst slot, src slot)
  // for branch t >= 1 and o < s' % ps; (-1, -1) elsewhere and when topk = 1 or ps = 1 (then
  // the capacity may be 0).
  std::int32_t* tail_copy = nullptr;
  std::int64_t tail_copy_capacity = 0;
  std::int64_t* verify_out_cache_loc = nullptr;  // [batch][D]: req_to_token[row][s' + j] (0)
  std::int64_t verify_out_cache_loc_capacity = 0;

  // [2 * batch + 2] int64, executor memory: the ring plan between the passes.
  std::int64_t* scratch = nullptr;
  // [next_round_guard_count]: guard[0] allocation (kernel_id next_round_alloc: a row too narrow,
  // the ring short), guard[1] bad input and unbacked positions (next_round_slots), guard[2]
  // stores past a capacity (next_round_outputs).
  guard_word* guard = nullptr;
};

inline constexpr std::int32_t next_round_guard_count = 3;

// R1 of docs/next-round.md: max(num_steps * topk, D) at ps = 1 or topk = 1, else
// max(ceil((ps - 1 + num_steps) / ps) * ps * topk, D). int64; arguments in range. Host only,
// no stream.
std::int64_t next_round_reserve(std::int32_t topk, std::int32_t num_steps,
                                std::int32_t draft_tokens, std::int32_t page_size);
// Pages one request can take in a round: ceil((num_steps + 1) / ps), whatever the reserve (for a
// request holding ceil_page(s + reserve) positions). The ring needs batch times this per round.
// Host only, no stream.
std::int64_t next_round_pages_per_request(std::int32_t num_steps, std::int32_t page_size);
// The exact capacities and the scratch size (scratch_capacity = 2 * batch + 2); pointers null.
// capacities.draft_slot_stride is num_steps; batch, draft_tokens, num_steps, topk, page_size
// and real_batch (= batch) are set too. Host only, no stream; arguments in range.
struct next_round_sizes {
  next_round_params capacities;
  std::int64_t scratch_capacity = 0;
};
next_round_sizes next_round_exact_capacities(std::int32_t batch, std::int32_t draft_tokens,
                                             std::int32_t num_steps, std::int32_t topk,
                                             std::int32_t page_size);

// The scalars only (ranges, products, capacities); throws invalid_argument naming the field.
// Host only: reads no pointer.
void validate_scalars(const next_round_params& p);
// validate_scalars and the pointers (the per-row inputs when batch > 0; req_to_token, the ring
// words, stall, scratch and guard always; at least one output). Throws; writes nothing.
void validate(const next_round_params& p);
// Also the real rows' contents in host memory (new_seq_len, req_pool_index, allocated_len and
// its page run, the real-batch word, the ring page ids this round would take); throws naming
// the row (or ring entry). Reads the ring words and the stall word; writes nothing.
void validate_contents_host(const next_round_params& p);

// Two passes on ex's stream (the ring plan, one logical thread; then batch logical threads);
// asynchronous, no synchronisation, capture-safe, no allocation; guard words not reset. Bad
// content in executor memory is recorded in the guard words, never thrown.
void launch_next_round(executor& ex, const next_round_params& p);
// The same computation on the calling thread over host memory, after validate_contents_host;
// uses a scratch of its own (p.scratch is not written). No stream; synchronous.
void next_round_host(const next_round_params& p);
// Checks p (validate; with host_memory validate_contents_host) before anything is written,
// resets p.guard's next_round_guard_count words on ex's stream, then runs next_round_host
// (host_memory: synchronous) or launch_next_round (asynchronous on ex's stream, capture-safe).
void run_next_round(executor& ex, const next_round_params& p, bool host_memory);

}  // namespace specgraph
