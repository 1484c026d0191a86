// The round section of a plan's arena (config.round_on_device; docs/round-graphs.md) for one
// bucket: the launch parameters of acceptance, the commit and the next round, every pointer into
// the arena, every capacity the bucket's exact one. Returned by draft_buffers::round(bucket);
// pointer arithmetic only (no allocation, no device access, no stream), so it may be built
// anywhere, during capture included.
#pragma once

#include <cstdint>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/next_round_metadata.hpp"

namespace specgraph {

// What is the engine's to fill before after_verify (round_ops.hpp) runs, and what it sets: the
// engine's req_to_token, the ring (ring, ring_capacity, ring_tail) and the real batch are left
// null / 0 here (after_verify_inputs gives them); real_batch_at is the staged real-batch word.
//
// In-place state: accept.seq_len and commit.seq_len are the draft section's staged seq_len (the
// committed length before the round), commit/next req_pool_index the staged req_pool_index;
// next.seq_len writes seq_len' back into that same staged seq_len and next.draft_out_cache_loc
// into the staged out_cache_loc (draft_slot_stride = the plan's slot_stride), so the draft round
// that follows reads them with no host staging. allocated_len is read and written in place (by
// the next round), and so is max_new_tokens_left (by the commit: each real row's budget run down
// by its emit_len, when after_verify_inputs::budget is set).
struct round_view {
  std::int32_t bucket = 0;
  std::int32_t max_context_len = 0;  // the plan's (req_to_token's narrowest row)
  accept_params accept;              // parent, draft_token, target_predict: written by the engine
  commit_params commit;    // stop_token_ids (stop_token_count 0 here), max_new_tokens_left
  next_round_params next;  // ring_head, stall: the section's words
  // The engine-written inputs and the words, for convenience (the same pointers as above).
  std::int32_t* parent = nullptr;               // [bucket][D]
  std::int32_t* draft_token = nullptr;          // [bucket][D]
  std::int32_t* target_predict = nullptr;       // [bucket][D]
  std::int32_t* allocated_len = nullptr;        // [bucket]
  std::int32_t* max_new_tokens_left = nullptr;  // [bucket]
  std::int32_t* stop_token_ids = nullptr;       // [stop_capacity], null when the capacity is 0
  std::int32_t stop_capacity = 0;
  std::int64_t* ring_head = nullptr;  // [1]
  std::int32_t* stall = nullptr;      // [1]
  guard_word* guard = nullptr;        // [round_guard_count]
};

}  // namespace specgraph
