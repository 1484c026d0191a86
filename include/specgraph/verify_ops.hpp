// The target-verify metadata (docs/verify.md) of a planned round as a capture-safe operation over
// the plan's arena: the verify section (config.verify_tokens = D > 0) holds the outputs of the
// largest bucket, exactly sized; a bucket's launch writes its first rows. Like ops.hpp and
// csr_ops.hpp: host checks first (invalid_argument naming the field, nothing enqueued), then, on
// ex's stream only, a memset of the section's three guard words and of the scratch flags and
// the row kernels of launch_verify_metadata: no allocation, no synchronisation, no read-back, so
// the call runs eagerly or records into the capture under way on that stream (one graph per
// bucket serves every round: the real batch is read on the device).
//
//   stage_round(ex, b, round);        // or draft_runtime::stage / stage_verify: the staged
//                                     // req_pool_index, seq_len (without D) and real batch
//   verify_metadata(ex, b, bucket, {tables, ..., mask, mask_cells});
//   ...the target's verify forward reading b.verify(bucket)...
//
// Padded requests (r >= the real batch; staging gives them seq_len 1 on pool row 0) have no mask
// cells and attend everything (all-1 rows), as in launch_verify_metadata. Input contents are
// checked by the kernels (bad input recorded in the section's first guard word, the request
// written with empty sequences); read the words with read_guards / check_guards (their sites are
// named "verify ..." by guard_site_of).
#pragma once

#include <cstdint>

#include "specgraph/buffers.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph {

class executor;

// The engine's own output buffers (executor memory), written in place of the arena's: the
// kernels' verify_tables (verify_metadata.hpp), a layout all of its pointers or none
// (verify_layouts_of); the plan's formats decide which layouts are written (FA3 cascade with
// fa3/both, FlashInfer with csr/both), and each written layout must be given. Vectors hold the
// bucket's rows: prefix/FlashInfer ones bucket (+ 1), expand ones bucket * D (+ 1); the tables
// rows of prefix_stride >= ceil(max_context_len / page_size) and expand_stride >= D cells;
// kv_indices_capacity (elements) and packed_mask_capacity (bytes) are the buffers' sizes, at
// least the bucket's exact ones (verify_exact_tables), which the op then writes within;
// prefix_capacity is ignored (the op writes the exact ceil(max_context_len / page_size) columns).
using verify_engine_outputs = verify_tables;

struct verify_inputs {
  // req_to_token; its rows must be at least seq_len + D wide (req_to_token_stride, 0 =
  // max_context_len): verify token j of request r sits at position seq_len[r] + j. A narrower
  // row is refused per request on the device, never read past.
  engine_tables tables;
  // The verify round's requests in executor memory, int32 [bucket]; null: the plan's staged
  // ones (b.req_pool_index(), b.seq_len(): stage_round or draft_runtime staging, padded to the
  // bucket). seq_len without the D verify tokens. Given ones must stay at the same address
  // while graphs that read them exist.
  const std::int32_t* req_pool_index = nullptr;
  const std::int32_t* seq_len = nullptr;
  // The real batch, int32 [1] in executor memory, read on the device (null: b.real_batch()).
  const std::int32_t* real_batch = nullptr;
  // The engine's tree mask, one byte per cell, its full layout (verify_params::custom_mask), and
  // its length in cells: with mask_length_exact the formula's sum over the real requests must
  // equal it, else it is the buffer's size (a static buffer under graph replay; nothing past it
  // is read). A graph replayed for many rounds bakes mask_cells in: use the bound there.
  const std::uint8_t* custom_mask = nullptr;
  std::int64_t mask_cells = 0;  // [0, 2^62]
  bool mask_length_exact = false;
  // Null: the arena's verify section (b.verify(bucket)); else the engine's buffers. The
  // section's scratch and guard words are used either way (a plan with verify_tokens > 0).
  const verify_engine_outputs* outputs = nullptr;
};

// Writes the verify metadata of `bucket` (a planned bucket) into the arena's verify section or
// in.outputs. Throws invalid_argument before anything is enqueued: "verify_tokens" (no verify
// section), "bucket", "req_to_token" / "custom_mask" (null; a null mask is accepted when
// mask_cells is 0, an idle rank's empty mask), "req_to_token_stride",
// "mask_cells", "outputs.<buffer>" (a layout partly given, missing, or short). Stream: ex's;
// asynchronous; no allocation; capture-safe.
void verify_metadata(executor& ex, const draft_buffers& b, std::int32_t bucket,
                     const verify_inputs& in);

// The launch parameters verify_metadata enqueues (after its host checks), for tests and for
// engines that compose the launch themselves. Host only; throws like verify_metadata.
verify_params verify_metadata_params(const draft_buffers& b, std::int32_t bucket,
                                     const verify_inputs& in);

}  // namespace specgraph
