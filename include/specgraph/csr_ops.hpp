// Capture-safe operations writing the CSR draft-decode indices (docs/csr.md) of a planned round:
// into the plan's arena (formats csr or both) or into kv_indptr / kv_indices buffers the engine
// owns (a csr_target, round_io.hpp). Like ops.hpp: host checks first (invalid_argument naming the
// field; nothing enqueued), then kernels on ex's stream only: no allocation, no synchronisation,
// no read-back, so each call runs eagerly or records into the capture under way on that stream.
// The inputs are the round's staged req_pool_index / seq_len (stage_round) or an engine's read in
// place (a round_source), and the engine's req_to_token ([pool_rows][max_context_len]); guard
// words: plan_layout::guard_csr(s), reset by setup_round.
#pragma once

#include <cstdint>

#include "specgraph/buffers.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/round_io.hpp"

namespace specgraph {

class executor;

// The CSR indices of `bucket` for `step`:
// - a fixed step s: kv_indptr row s and step s's kv_indices (capacity C_s of the bucket's rows,
//   guard word guard_csr(s));
// - whole_round: every step of the round (into the engine's buffers one launch, into the arena's
//   per-step buffers one launch per step);
// - at_device_step (config.device_steps; docs/device-rounds.md): the step s the counter
//   (b.device_step()) holds when the kernels run, read on the device, never from the host,
//   written as the fixed step s is. A counter outside [0, num_steps) (a graph replayed past the
//   round, a round launched again without staging) writes nothing and records bad_input in
//   guard_csr(0): row 0, column -1, capacity num_steps, value the counter. One graph per bucket
//   serves every step: the body setup_round, step_metadata(at_device_step) (with FA3),
//   csr_indices(at_device_step), the forward, advance_step; and the same body in a WHILE node
//   (device_depth). In the arena, the device_steps layout holds step s at b.csr_kv_indices(s),
//   a stride of plan_layout::csr_kv_indices_stride.
// `out`: the plan's arena (default; b.csr_kv_indptr() row s, b.csr_kv_indices(s)) or the
// engine's buffers (csr_target(plan, csr_outputs), checked when it was made). `in`: the staged
// inputs (default) or the engine's (round_source). Throws invalid_argument for a plan without
// CSR ("formats"), an unplanned bucket, a step outside [0, num_steps), at_device_step without
// device_steps, a null req_to_token, or a source / target made for another plan ("source",
// "target"). Needs the round set up (docs/metadata.md section 11; op name "csr_step_indices").
// Enqueues on ex's stream only; no synchronisation, no allocation; capture-safe.
void csr_indices(executor& ex, const draft_buffers& b, std::int32_t bucket, round_step step,
                 const engine_tables& tables, const csr_target& out = {},
                 const round_source& in = {});

}  // namespace specgraph
