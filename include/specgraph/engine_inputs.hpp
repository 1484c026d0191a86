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
// Per round, eagerly or inside the engine's graph for `bucket`:
//   begin_round(ex, b);                       // device_steps / device_depth only: counters
//   setup_round(ex, b, bucket, tables, in);   // guard reset + prefix metadata
//   step_metadata(ex, b, bucket, s, in);      // step s's expand metadata
//   csr_step_indices(ex, b, bucket, s, tables, in);  // CSR formats
#pragma once

#include <cstdint>
#include <limits>
#include <memory>

#include "specgraph/buffers.hpp"
#include "specgraph/conditional.hpp"
#include "specgraph/csr_ops.hpp"
#include "specgraph/index_ref.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"

namespace specgraph {

class executor;
class graph;

// One engine index tensor, [>= the largest planned bucket] elements `stride` apart (executor
// memory, int32 or int64).
struct engine_index {
  const void* data = nullptr;
  index_type type = index_type::int64;
  std::int64_t stride = 1;  // elements, [0, limits::max_input_stride]
};

// The engine's out_cache_loc, [>= the largest planned bucket][topk][slots] (executor memory,
// int64 or int32): slot j of branch t of request r is element
// r * request_stride + t * branch_stride + j * slot_stride.
struct engine_slots {
  const void* data = nullptr;
  index_type type = index_type::int64;
  std::int64_t request_stride = 0;  // elements, [1, limits::max_input_stride]
  std::int64_t branch_stride = 0;   // elements, [0, limits::max_input_stride]
  std::int64_t slot_stride = 1;     // elements, [0, limits::max_input_stride]
  std::int64_t slots = 0;           // slots per branch row (dimension 2), [num_steps, 2^31)
};

// The engine's static inputs. They must stay at the same address (and keep their strides)
// while graphs that read them exist; the engine writes them before each replay (on its stream,
// or ordered with an event, docs/metadata.md section 9).
struct engine_inputs {
  engine_index req_pool_index;
  engine_index seq_len;
  engine_slots out_cache_loc;
  // Optional: an int32 [1] in executor memory the engine writes with each round's real batch.
  // Rows at or past it (clamped to [0, bucket]) are padding rows whatever the tensors hold
  // there: every kernel reads them as a padded request (pool row 0, seq_len 1, slots 0), in
  // every replay mode and format; it also feeds the branch-layout check and device_depth's
  // continue condition (real rows only). Null: every row of the replayed bucket is read as
  // real (engines that pad their own static rows with pool row 0, seq_len 1 and slots 0, which
  // is specgraph's padding row); the branch-layout check (config.checked) then does not run
  // (it needs to tell real rows from padding rows) and the continue condition looks at every row.
  const std::int32_t* real_batch = nullptr;
};

// Checks `in` against the plan (non-null data, int32/int64 types, strides in range, slots >=
// num_steps); throws invalid_argument naming the field ("out_cache_loc.slots") with its value
// and the limit. Pure host work; reads nothing.
void check_engine_inputs(const plan& p, const engine_inputs& in);

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

// The round's ops reading `in` instead of the staged static inputs; otherwise as in ops.hpp and
// csr_ops.hpp (same checks, same outputs, same guard words). check_engine_inputs runs first.
// Each enqueues on ex's stream only, does not synchronise, and is capture-safe.
void setup_round(executor& ex, const draft_buffers& b, std::int32_t bucket,
                 const engine_tables& tables, const engine_inputs& in);
void step_metadata(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                   const engine_inputs& in);
void step_metadata_at_device_step(executor& ex, const draft_buffers& b, std::int32_t bucket,
                                  const engine_inputs& in);
void csr_step_indices(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                      const engine_tables& tables, const engine_inputs& in);
void csr_step_indices(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                      const engine_tables& tables, const csr_outputs& out, const engine_inputs& in);
void csr_round_indices(executor& ex, const draft_buffers& b, std::int32_t bucket,
                       const engine_tables& tables, const engine_inputs& in);
void csr_round_indices(executor& ex, const draft_buffers& b, std::int32_t bucket,
                       const engine_tables& tables, const csr_outputs& out,
                       const engine_inputs& in);
void csr_indices_at_device_step(executor& ex, const draft_buffers& b, std::int32_t bucket,
                                const engine_tables& tables, const engine_inputs& in);
void csr_indices_at_device_step(executor& ex, const draft_buffers& b, std::int32_t bucket,
                                const engine_tables& tables, const csr_outputs& out,
                                const engine_inputs& in);
// The continue condition reading in.real_batch (null: every row of the bucket).
void continue_while_confident(executor& ex, const draft_buffers& b, std::int32_t bucket,
                              conditional_handle handle, const engine_inputs& in);
// capture_device_depth_round with that condition; the round is started by begin_round instead
// of staging.
std::unique_ptr<graph> capture_device_depth_round(executor& ex, const draft_buffers& b,
                                                  std::int32_t bucket, const graph& step_body,
                                                  const engine_inputs& in);

}  // namespace specgraph
