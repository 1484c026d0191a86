// The draft-extend metadata (docs/extend.md) of a planned round as a capture-safe operation over
// the plan's arena (docs/extend-graphs.md): the draft-extend section (config.draft_extend, the
// window W = verify_tokens) holds the outputs of the largest bucket, exactly sized; a bucket's
// launch writes its first rows. Like verify_ops.hpp: host checks first (invalid_argument naming
// the field, nothing enqueued), then, on ex's stream only, a memset of the section's five guard
// words and the kernels of launch_extend_metadata: no allocation, no synchronisation, no
// read-back, so the call runs eagerly or records into the capture under way on that stream (one
// graph per bucket serves every round: the real batch and the accepted lengths are read on the
// device).
//
//   stage_round(ex, b, round);      // or draft_runtime::stage_verify: the verify round's
//                                   // req_pool_index, seq_len (without the window), real batch
//   ...verify forward, acceptance writes b.extend(bucket).accept_len (or stage_accept_len)...
//   extend_metadata(ex, b, bucket, {tables});
//   ...the draft model's extend forward reading b.extend(bucket)...
//
// Padded requests (r >= the real batch) are written by the padding rule of docs/extend.md
// section 4. Input contents are checked by the kernels (a bad request recorded in the section's
// first guard word and written as a padded one; an accepted length of 0 recorded in its fifth);
// read the words with read_guards / check_guards (their sites are named "extend ..." by
// guard_site_of).
#pragma once

#include <cstdint>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/extend_metadata.hpp"
#include "specgraph/ops.hpp"

namespace specgraph {

class executor;

struct extend_inputs {
  // req_to_token; its rows must be at least seq_len + W wide (req_to_token_stride, 0 =
  // max_context_len): window token j of request r sits at position seq_len[r] + j. A narrower
  // row is refused per request on the device, never read past.
  engine_tables tables;
  // The round's requests in executor memory, int32 [bucket]; null: the plan's staged ones
  // (b.req_pool_index(), b.seq_len(): the verify round's, padded to the bucket). seq_len
  // without the window. Given ones must stay at the same address while graphs that read them
  // exist.
  const std::int32_t* req_pool_index = nullptr;
  const std::int32_t* seq_len = nullptr;
  // The accepted lengths, int32 [bucket] in [0, W] in executor memory; null: the section's
  // (b.extend(bucket).accept_len, staged by stage_accept_len or written by the engine's
  // acceptance on the device).
  const std::int32_t* accept_len = nullptr;
  // The real batch, int32 [1] in executor memory, read on the device (null: b.real_batch()).
  const std::int32_t* real_batch = nullptr;
  // Acceptance's accept_index ([bucket][accept_index_stride] in executor memory): a real row it
  // accepted nothing for is written as a padded row (extend_params::accept_index). The device
  // round passes its section's; null: every real row is read.
  const std::int32_t* accept_index = nullptr;
  std::int64_t accept_index_stride = 0;
  // Null: the arena's draft-extend section (b.extend(bucket)), every layout the plan holds.
  // Else the engine's own buffers (executor memory), written in place of the arena's: the
  // layouts it sets are written (each all of its pointers or none, at least one; any subset,
  // whatever the plan's formats), each at least the bucket's exact size (extend_exact_tables:
  // page_stride >= ceil((M + W) / ps), prefix_kv_capacity >= bucket * M, full_kv_capacity >=
  // bucket * (M + W)); the op writes within the exact sizes. The section's scratch and guard
  // words are used either way.
  const extend_tables* outputs = nullptr;
};

// Writes the draft-extend metadata of `bucket` (a planned bucket) into the arena's section or
// in.outputs. Throws invalid_argument before anything is enqueued: "draft_extend" (no section),
// "bucket", "req_to_token" (null), "req_to_token_stride", "seq_len" (one of req_pool_index and
// seq_len given without the other), "outputs.<buffer>" (a layout partly given, none given, or
// short). Stream: ex's; asynchronous; no allocation; capture-safe.
void extend_metadata(executor& ex, const draft_buffers& b, std::int32_t bucket,
                     const extend_inputs& in);

// The launch parameters extend_metadata enqueues (after its host checks), for tests and for
// engines that compose the launch themselves. Host only; throws like extend_metadata.
extend_params extend_metadata_params(const draft_buffers& b, std::int32_t bucket,
                                     const extend_inputs& in);

// Copies a round's accepted lengths (host memory, [batch] in [0, W], batch <= bucket) into the
// section's accept_len, the padded rows [batch, bucket) as 1 (they are padding either way).
// Throws invalid_argument ("draft_extend", "bucket", "accept_len[i]" naming the value and W)
// before anything is copied. Stream: ex's (copy_to_device: the vector may be reused once it
// returns, which may block the host until the stream reaches the copy on CUDA); forbidden
// during capture (a graph would bake in the host address: write accept_len on the device there).
void stage_accept_len(executor& ex, const draft_buffers& b, std::int32_t bucket,
                      const std::vector<std::int32_t>& accept_len);

}  // namespace specgraph
