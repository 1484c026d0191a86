// The round after verify as one capture-safe operation over a plan's round section
// (docs/round-graphs.md): acceptance, the commit and the next round's inputs, launched back to
// back on the executor's stream from the arena, with the round's state in place, so that the
// next round needs no host work.
//
//   plan p = make_plan(cfg);             // cfg.round_on_device, cfg.verify_tokens = D
//   draft_buffers b(p, arena);
//   const round_view v = b.round(bucket);
//   ...the engine's verify forward writes v.parent, v.draft_token, v.target_predict...
//   after_verify(ex, v, {req_to_token, stride, ring, ring_capacity, ring_tail});
//   ...the next draft round reads b.seq_len(), b.out_cache_loc() as written by the op...
//
// In place (round_view.hpp): acceptance and the commit read the committed length from the
// staged seq_len and the pool rows from the staged req_pool_index; the next round writes
// seq_len' into that seq_len and its draft slots into the staged out_cache_loc; allocated_len
// and the ring head stay in the section. The engine steps in only when a request finishes
// (finished, free_begin / free_end) or arrives, or the ring runs short (the stall word).
#pragma once

#include <cstdint>
#include <string>

#include "specgraph/round_view.hpp"

namespace specgraph {

class executor;

struct after_verify_inputs {
  // The engine's req_to_token [pool_rows][req_to_token_stride] in executor memory: read by the
  // commit, written by the next round (new positions of the rows that allocate). Stride 0 =
  // max_context_len; else [max_context_len, 2^31). pool_rows: the plan's.
  std::int32_t* req_to_token = nullptr;
  std::int64_t req_to_token_stride = 0;
  // The ring of free pages the engine fills (next_round_metadata.hpp): ring[ring_capacity] page
  // ids and the engine's tail counter ring_tail [1], both executor memory; the head is the
  // section's (round_view::ring_head).
  const std::int32_t* ring = nullptr;
  std::int64_t ring_capacity = 0;  // [1, 2^40]
  const std::int64_t* ring_tail = nullptr;
  // The real batch: a device word read at run time (null: the staged b.real_batch()), or, when
  // real_batch >= 0, this launch scalar ([0, bucket]; a graph bakes it in).
  const std::int32_t* real_batch_at = nullptr;
  std::int32_t real_batch = -1;
  // Stop token ids in use: the first stop_token_count of round_view::stop_token_ids, in
  // [0, the plan's max_stop_tokens].
  std::int32_t stop_token_count = 0;
  // false: no length budget (round_view::max_new_tokens_left is not read). true: the commit
  // reads it and writes it back in place, each real row's budget run down by its emit_len.
  bool budget = true;
};

// Which launches after_verify enqueues. all: the guard reset, acceptance, the commit and the
// next round. accept_commit: the guard reset, acceptance and the commit only. next: the next
// round only. accept_commit then next enqueues exactly what all does, so an engine can run
// work between the two (draft extend, which reads the staged seq_len the next round
// overwrites: docs/round-graphs.md section 6.1).
enum class after_verify_part { all, accept_commit, next };

// The part named "all", "accept_commit" or "next". Throws invalid_argument "part" for any other
// name. Host only: no stream, no sync.
after_verify_part after_verify_part_of(const std::string& name);

// Resets the section's round_guard_count guard words, then launches acceptance, the commit and
// the next round for v.bucket, in that order (part: all, the default; accept_commit and next
// enqueue the first three and the last of these). Throws invalid_argument before anything is
// enqueued: "round_view" (a view whose pointers are not a plan's round section: built by hand,
// or of another arena), "req_to_token" (null), "req_to_token_stride", "ring" (null),
// "ring_capacity", "ring_tail" (null), "real_batch", "stop_token_count". Stream: ex's;
// asynchronous; no synchronisation, no allocation, no read-back: capture-safe (one graph per
// bucket serves every round: the real batch, the ring tail and every content are read on the
// device).
void after_verify(executor& ex, const round_view& v, const after_verify_inputs& in,
                  after_verify_part part = after_verify_part::all);

// The three launches' parameters after_verify enqueues (after its host checks), for tests and
// for engines that compose the launches themselves. Host only; throws like after_verify.
struct round_launch {
  accept_params accept;
  commit_params commit;
  next_round_params next;
};
round_launch after_verify_params(const round_view& v, const after_verify_inputs& in);

}  // namespace specgraph
