// Capture-safe operations writing the CSR draft-decode indices (docs/csr.md) of a planned round:
// into the plan's arena (formats csr or both) or into kv_indptr / kv_indices buffers the engine
// owns. Like ops.hpp: host checks first (invalid_argument naming the field; nothing enqueued),
// then kernels on ex's stream only: no allocation, no synchronisation, no read-back, so each
// call runs eagerly or records into the capture under way on that stream. The inputs are the
// round's staged req_pool_index / seq_len (stage_round) and the engine's req_to_token
// ([pool_rows][max_context_len]); guard words: plan_layout::guard_csr(s), reset by setup_round.
#pragma once

#include <cstdint>

#include "specgraph/buffers.hpp"
#include "specgraph/ops.hpp"

namespace specgraph {

class executor;

// The engine's own output buffers (executor memory). Step s's kv_indptr row starts at
// s * kv_indptr_stride, its kv_indices at s * kv_indices_stride (strides in elements).
struct csr_outputs {
  std::int32_t* kv_indptr = nullptr;
  std::int64_t kv_indptr_stride = 0;  // >= max_rows + 1
  void* kv_indices = nullptr;
  index_type kv_indices_type = index_type::int32;
  std::int64_t kv_indices_stride = 0;  // >= C_(num_steps - 1), the widest step
  std::int64_t kv_indptr_size = 0;     // elements of the kv_indptr buffer
  std::int64_t kv_indices_size = 0;    // elements of the kv_indices buffer
};

// Checks once, on the host, that `out` holds every step of the plan exactly sized by
// C_s = max_rows * (max_context_len + s + 1): throws invalid_argument naming the buffer
// ("kv_indices", "kv_indptr", "kv_indices_stride", ...), its size and the size needed.
void check_csr_outputs(const plan& p, const csr_outputs& out);

// Step `step` of `bucket` into the plan's CSR buffers (b.csr_kv_indptr() row step,
// b.csr_kv_indices(step)). Throws invalid_argument for a plan without CSR, an unplanned bucket,
// a step outside [0, num_steps) or a null req_to_token. Capture-safe; stream: ex's.
void csr_step_indices(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                      const engine_tables& tables);
// The same into the engine's buffers (check_csr_outputs runs first). Capture-safe; stream: ex's.
void csr_step_indices(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                      const engine_tables& tables, const csr_outputs& out);
// Every step of the round in one launch, into the plan's buffers or the engine's.
void csr_round_indices(executor& ex, const draft_buffers& b, std::int32_t bucket,
                       const engine_tables& tables);
void csr_round_indices(executor& ex, const draft_buffers& b, std::int32_t bucket,
                       const engine_tables& tables, const csr_outputs& out);

// Device step counter (config.device_steps; docs/device-rounds.md): the step s the counter
// (b.device_step()) holds when the kernels run, read on the device, never from the host: written
// as csr_step_indices(s) writes it (kv_indptr row s, kv_indices of step s with capacity C_s of
// the bucket's rows, guard word guard_csr(s)). A counter outside [0, num_steps) (a graph
// replayed past the round, a round launched again without staging) writes nothing and records
// bad_input in guard_csr(0): row 0, column -1, capacity num_steps, value the counter. One graph
// per bucket serves every step: the body setup_round, step_metadata_at_device_step (with FA3),
// csr_indices_at_device_step, the forward, advance_step; and the same body in a WHILE node
// (device_depth). Into the plan's arena (its device_steps layout: step s at
// b.csr_kv_indices(s), a stride of plan_layout::csr_kv_indices_stride) or into the engine's
// buffers (check_csr_outputs runs first). Throws invalid_argument without device_steps, for a
// plan without CSR, an unplanned bucket or a null req_to_token. Enqueues on ex's stream only;
// no synchronisation, no allocation; capture-safe.
void csr_indices_at_device_step(executor& ex, const draft_buffers& b, std::int32_t bucket,
                                const engine_tables& tables);
void csr_indices_at_device_step(executor& ex, const draft_buffers& b, std::int32_t bucket,
                                const engine_tables& tables, const csr_outputs& out);

}  // namespace specgraph
