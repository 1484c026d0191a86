// Inputs read in place (docs/engines.md "Inputs read in place"): an engine's draft graph runner
// already keeps static input tensors for every captured batch size (req_pool_indices and
// seq_lens [max_bs], out_cache_loc [max_bs][topk][S]). Bound once, the round's kernels read
// them where they are: pointer, dtype and strides are baked into the captured graphs, so
// nothing is copied per round (stage_round is not needed; it stays for engines without static
// inputs).
//
// The values are checked on the device exactly as staged ones are: each one is loaded as int64
// and range-checked before it is narrowed (an int64 that does not fit int32, a pool row outside
// [0, pool_rows), a seq_len outside [0, max_context_len], a slot outside [0, kv_slots)); a bad
// value refuses its row, which is written as a padding row and counted in the guard word with
// the kernel, row, column, limit and value. Nothing is written out of bounds.
//
// The tensors (engine_inputs, round_io.hpp) become a round_source once, checked when it is made;
// every round op (ops.hpp, csr_ops.hpp) takes it as its last argument. Per round, eagerly or
// inside the engine's graph for `bucket`:
//   const round_source in(b.plan(), engine_in);    // once: check_engine_inputs
//   begin_round(ex, b);                            // the round's start (counters, order)
//   setup_round(ex, b, bucket, tables, in);        // guard reset + prefix metadata
//   step_metadata(ex, b, bucket, s, in);           // step s's expand metadata
//   csr_indices(ex, b, bucket, s, tables, {}, in); // CSR formats (into the arena)
#pragma once

#include <cstdint>
#include <limits>

#include "specgraph/buffers.hpp"
#include "specgraph/csr_ops.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/round_io.hpp"

namespace specgraph {

class executor;

// device_steps / device_depth with inputs read in place: resets the per-round control words
// staging would reset (device step counter and WHILE iteration count to 0, the round's
// max_depth (0: num_steps) and min_confidence) and starts the round for the order check
// (round.progress staged, the round.order word reset; docs/metadata.md section 11), and writes
// nothing else (no input copy). Two one-thread kernels; call it at the start of every round, in
// any mode, before the round's first replay (or as the first nodes of the engine's own round
// graph). Throws invalid_argument naming max_depth (0 or
// 1..num_steps) or min_confidence (NaN). Capture-safe (the values are baked into a capture);
// stream: ex's; no sync.
void begin_round(executor& ex, const draft_buffers& b, std::int32_t max_depth = 0,
                 float min_confidence = -std::numeric_limits<float>::infinity());

}  // namespace specgraph
