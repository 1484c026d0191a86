// The buffers of a plan's round section (docs/round-graphs.md), by index: their names (the
// plan's buffer list is "after_verify.<name>") and exact shapes for a bucket. Host only; no stream.
#pragma once

#include <cstdint>

namespace specgraph {

// Field indices, in arena order (names: the params' fields, max_new_tokens_left as
// "tokens_left" and verify_out_cache_loc as "verify_slots", so every name fits the report's
// column): the engine-written inputs, the per-row state, the stop ids,
// acceptance's, the commit's and the next round's outputs, then the words and scratch.
enum round_field : std::int32_t {
  round_parent = 0,            // int32 [B][D], written by the engine per round (the verify tree)
  round_draft_token,           // int32 [B][D], written by the engine per round
  round_target_predict,        // int32 [B][D], written by the engine per round (target argmax)
  round_allocated_len,         // int32 [B], persistent: read and written by the next round
  round_max_new_tokens_left,   // int32 [B], written by the engine (the remaining budget)
  round_stop_token_ids,        // int32 [max_stop_tokens], written by the engine
  round_accept_index,          // int32 [B][S]
  round_accept_length,         // int32 [B]
  round_predict,               // int32 [B][D]
  round_accept_tokens,         // int32 [B][D]
  round_bonus,                 // int32 [B]
  round_new_seq_len,           // int32 [B]
  round_select_index,          // int32 [B]
  round_kv_move,               // int32 [B][num_steps][2]
  round_finished,              // int32 [B]
  round_emit_len,              // int32 [B]
  round_free_begin,            // int32 [B]
  round_free_end,              // int32 [B]
  round_active,                // int32 [B]
  round_root_token,            // int32 [B]
  round_draft_position,        // int32 [B][topk]
  round_tail_copy,             // int32 [B][topk - 1][page_size - 1][2]
  round_verify_out_cache_loc,  // int64 [B][D]
  round_ring_head,             // int64 [1], the ring's consumer counter (the device's)
  round_stall,                 // int32 [1], set when the ring was short; the engine clears it
  round_scratch,               // int64 [2B + 2], the next round's ring plan
  round_field_count
};

inline constexpr const char* round_field_names[round_field_count] = {
    "parent",         "draft_token",  "target_predict", "allocated_len", "tokens_left",
    "stop_token_ids", "accept_index", "accept_length",  "predict",       "accept_tokens",
    "bonus",          "new_seq_len",  "select_index",   "kv_move",       "finished",
    "emit_len",       "free_begin",   "free_end",       "active",        "root_token",
    "draft_position", "tail_copy",    "verify_slots",   "ring_head",     "stall",
    "scratch"};

// Guard words of the section, from its guard_base: acceptance's two, the commit's two, the next
// round's three (the order of accept_params, commit_params and next_round_params).
inline constexpr std::int32_t round_guard_accept = 0;
inline constexpr std::int32_t round_guard_commit = 2;
inline constexpr std::int32_t round_guard_next = 4;
inline constexpr std::int32_t round_guard_count = 7;

// The exact shape of a field for batch B, D, num_steps, topk, page size and the stop capacity:
// the dimensions (1 to 4; dims past `rank` are 1), whether the elements are int64, and the
// element count (each < 2^45 for arguments in the plan's ranges).
struct round_field_shape {
  std::int32_t rank = 1;
  std::int64_t dims[4] = {1, 1, 1, 1};
  bool int64 = false;
  std::int64_t elements() const { return dims[0] * dims[1] * dims[2] * dims[3]; }
};

inline round_field_shape round_field_shape_of(std::int32_t field, std::int64_t batch,
                                              std::int64_t draft_tokens, std::int64_t num_steps,
                                              std::int64_t topk, std::int64_t page_size,
                                              std::int64_t stop_capacity) {
  round_field_shape s;
  s.dims[0] = batch;
  switch (field) {
    case round_parent:
    case round_draft_token:
    case round_target_predict:
    case round_predict:
    case round_accept_tokens:
      s.rank = 2;
      s.dims[1] = draft_tokens;
      break;
    case round_verify_out_cache_loc:
      s.rank = 2;
      s.dims[1] = draft_tokens;
      s.int64 = true;
      break;
    case round_accept_index:
      s.rank = 2;
      s.dims[1] = num_steps + 1;
      break;
    case round_kv_move:
      s.rank = 3;
      s.dims[1] = num_steps;
      s.dims[2] = 2;
      break;
    case round_draft_position:
      s.rank = 2;
      s.dims[1] = topk;
      break;
    case round_tail_copy:
      s.rank = 4;
      s.dims[1] = topk - 1;
      s.dims[2] = page_size - 1;
      s.dims[3] = 2;
      break;
    case round_stop_token_ids: s.dims[0] = stop_capacity; break;
    case round_ring_head:
      s.dims[0] = 1;
      s.int64 = true;
      break;
    case round_stall: s.dims[0] = 1; break;
    case round_scratch:
      s.dims[0] = 2 * batch + 2;
      s.int64 = true;
      break;
    default: break;  // the per-request vectors: [B] int32
  }
  return s;
}

}  // namespace specgraph
