// The two small kernels of the device-round graph (draft_runtime::launch_device_round,
// docs/round-graphs.md section 6), public so an engine that composes the round itself can use
// them too:
//
//   ...acceptance (launch_accept), the commit (launch_commit)...
//   launch_extend_handoff(ex, {accept_length, cap, accept_len, cap, real_batch_at, bucket, N});
//   ...extend_metadata, the extend forward, the next round (launch_next_round)...
//   launch_guard_fold(ex, {b.guards() + first, summary + first, count});   // the last node
//
// Both validate on the host first (invalid_argument naming the field, nothing enqueued), then
// enqueue one pass on ex's stream: asynchronous, no allocation, no synchronisation, capture-safe.
#pragma once

#include <cstdint>

#include "specgraph/guard.hpp"

namespace specgraph {

class executor;

// Draft extend's accepted lengths (docs/extend.md accept_len, [0, W]) from acceptance's
// accept_length (the accepted draft nodes c, [0, num_steps]): accept_len[r] = c + 1 for the real
// rows r < *real_batch_at (clamped to [0, batch]), 1 for padded rows. A real row's c outside
// [0, num_steps] (acceptance never writes one) is handed over as 0, which extend_metadata
// records in its accept_len word and pads; nothing out of range is passed on.
struct extend_handoff_params {
  const std::int32_t* accept_length = nullptr;  // [batch], executor memory
  std::int64_t accept_length_capacity = 0;      // >= batch
  std::int32_t* accept_len = nullptr;           // [batch], executor memory
  std::int64_t accept_len_capacity = 0;         // >= batch
  const std::int32_t* real_batch_at = nullptr;  // [1], executor memory
  std::int32_t batch = 0;                       // the bucket, [0, limits::max_batch]
  std::int32_t num_steps = 0;                   // [1, limits::max_num_steps]
};

// Throws invalid_argument ("batch", "num_steps", "accept_length_capacity", "accept_len_capacity"
// naming the value and the limit; "accept_length", "accept_len", "real_batch_at" when null);
// writes nothing; no stream.
void validate(const extend_handoff_params& p);
// validate, then one pass of `batch` logical threads on ex's stream (capture-safe, no sync).
void launch_extend_handoff(executor& ex, const extend_handoff_params& p);

// Folds guard words into a sticky summary: for each i < count with words[i].violations > 0,
// summary[i].violations += words[i].violations (saturating at 2^31 - 1) and the details of the
// earlier violation of the two (lowest row, then column: guard_word::first) kept. One logical
// thread, run after every kernel that records into `words` (stream order).
struct guard_fold_params {
  const guard_word* words = nullptr;  // [count], executor memory
  guard_word* summary = nullptr;      // [count], executor memory, apart from words
  std::int32_t count = 0;             // [1, 2^16]
};

// Throws invalid_argument ("count"; "words", "summary" when null; "summary" when it overlaps
// words); writes nothing; no stream.
void validate(const guard_fold_params& p);
// validate, then one thread on ex's stream (capture-safe, no sync).
void launch_guard_fold(executor& ex, const guard_fold_params& p);

}  // namespace specgraph
