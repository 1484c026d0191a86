// Where a round's ops read and write, as values (docs/engines.md "Inputs read in place",
// docs/csr.md): every round op takes one declaration with defaults, the way CUB takes iterators
// and FlashInfer takes `out=`, instead of one overload per combination.
//
// - round_source: where the round's kernels read req_pool_index, seq_len and out_cache_loc. The
//   default, round_source{}, is the arena's staged static inputs (stage_round,
//   draft_runtime::stage); round_source(plan, engine_inputs) is an engine's own static input
//   tensors read in place, checked once when it is made (check_engine_inputs) and then carried
//   without re-checking: every op only compares the plan it was made for.
// - csr_target: where the CSR ops write kv_indptr / kv_indices. The default is the plan's arena;
//   csr_target(plan, csr_outputs) is the engine's own buffers, checked once when it is made
//   (check_csr_outputs).
// - round_step: which step an op computes: a fixed step s (an int converts), whole_round (every
//   step, the CSR indices) or at_device_step (the step the device counter holds when the kernels
//   run, config.device_steps).
//
// A source or target remembers the plan it was checked against (by address: the plan object the
// buffers were made over, which outlives them); an op over the buffers of another plan refuses
// it with invalid_argument "source" or "target" before anything is enqueued. The pointers,
// dtypes and strides inside are fixed when the value is made, so each launch knows its load path
// (and a capture bakes it in).
//
//   const round_source in(b.plan(), engine_in);      // checked here, once
//   const csr_target out(b.plan(), engine_out);      // checked here, once
//   setup_round(ex, b, bucket, tables, in);
//   step_metadata(ex, b, bucket, s, in);
//   csr_indices(ex, b, bucket, s, tables, out, in);
#pragma once

#include <cstddef>
#include <cstdint>

#include "specgraph/plan.hpp"

namespace specgraph {

// An index array as an engine holds it: int32 or int64 (SGLang keeps int64). Narrowing to the
// int32 tables is checked, never silent.
enum class index_type : std::int32_t { int32 = 0, int64 = 1 };
struct index_array {
  const void* data = nullptr;
  index_type type = index_type::int32;
  index_array() = default;
  index_array(std::nullptr_t) {}                                            // NOLINT: implicit
  index_array(const std::int32_t* p) : data(p), type(index_type::int32) {}  // NOLINT: implicit
  index_array(const std::int64_t* p) : data(p), type(index_type::int64) {}  // NOLINT: implicit
};

// ---- the engine's static inputs, read in place (engine_inputs.hpp) -------------------------
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
// and the limit. Pure host work; reads nothing; no stream. round_source's constructor runs it.
void check_engine_inputs(const plan& p, const engine_inputs& in);

// ---- the engine's CSR output buffers (csr_ops.hpp) ------------------------------------------
// Executor memory. Step s's kv_indptr row starts at s * kv_indptr_stride, its kv_indices at
// s * kv_indices_stride (strides in elements).
struct csr_outputs {
  std::int32_t* kv_indptr = nullptr;
  std::int64_t kv_indptr_stride = 0;  // >= max_rows + 1
  void* kv_indices = nullptr;
  index_type kv_indices_type = index_type::int32;
  std::int64_t kv_indices_stride = 0;  // >= C_(num_steps - 1), the widest step
  std::int64_t kv_indptr_size = 0;     // elements of the kv_indptr buffer
  std::int64_t kv_indices_size = 0;    // elements of the kv_indices buffer
};

// Checks, on the host, that `out` holds every step of the plan exactly sized by
// C_s = max_rows * (max_context_len + s + 1): throws invalid_argument naming the buffer
// ("kv_indices", "kv_indptr", "kv_indices_stride", ...), its size and the size needed. Pure host
// work; no stream. csr_target's constructor runs it.
void check_csr_outputs(const plan& p, const csr_outputs& out);

// ---- the values the round ops take ----------------------------------------------------------
// Where the round's kernels read their inputs. Trivially copyable; pure host values (no stream,
// no sync, nothing enqueued).
class round_source {
 public:
  // The arena's staged static inputs (the default of every round op).
  round_source() noexcept = default;
  // The engine's tensors read in place: check_engine_inputs(p, in) runs here, once (throws
  // invalid_argument naming the field). The ops then accept it only over buffers of `p`.
  round_source(const plan& p, const engine_inputs& in);

  bool staged() const noexcept { return plan_ == nullptr; }
  // The engine's tensors (all null when staged()).
  const engine_inputs& inputs() const noexcept { return inputs_; }
  // The plan the inputs were checked against (null when staged(): the arena fits its own plan).
  const plan* checked_for() const noexcept { return plan_; }

 private:
  const plan* plan_ = nullptr;
  engine_inputs inputs_;
};

// Where the CSR ops write kv_indptr / kv_indices. Trivially copyable; pure host values.
class csr_target {
 public:
  // The plan's arena (b.csr_kv_indptr(), b.csr_kv_indices(s)): the default of csr_indices.
  csr_target() noexcept = default;
  // The engine's buffers: check_csr_outputs(p, out) runs here, once (throws invalid_argument
  // naming the buffer). csr_indices then accepts it only over buffers of `p`.
  csr_target(const plan& p, const csr_outputs& out);

  bool arena() const noexcept { return plan_ == nullptr; }
  const csr_outputs& outputs() const noexcept { return outputs_; }  // all null when arena()
  const plan* checked_for() const noexcept { return plan_; }

 private:
  const plan* plan_ = nullptr;
  csr_outputs outputs_;
};

// Which step of the round an op computes: a fixed step (an int converts implicitly; the op
// range-checks it against [0, num_steps), naming "step"), every step (whole_round) or the step
// the device counter holds (at_device_step; config.device_steps, docs/device-rounds.md).
class round_step {
 public:
  constexpr round_step(std::int32_t step) noexcept : step_(step) {}  // NOLINT: implicit, a step

  constexpr bool is_fixed() const noexcept { return kind_ == kind::fixed; }
  constexpr bool is_whole_round() const noexcept { return kind_ == kind::whole; }
  constexpr bool is_device() const noexcept { return kind_ == kind::device; }
  // The fixed step (-1 for whole_round and at_device_step).
  constexpr std::int32_t index() const noexcept { return step_; }

  static constexpr round_step every() noexcept { return round_step(kind::whole); }
  static constexpr round_step device() noexcept { return round_step(kind::device); }

 private:
  enum class kind : std::int32_t { fixed, whole, device };
  constexpr explicit round_step(kind k) noexcept : step_(-1), kind_(k) {}
  std::int32_t step_ = 0;
  kind kind_ = kind::fixed;
};

// Every step of the round in one call (csr_indices).
inline constexpr round_step whole_round = round_step::every();
// The step the device step counter holds when the kernels run, read on the device.
inline constexpr round_step at_device_step = round_step::device();

}  // namespace specgraph
