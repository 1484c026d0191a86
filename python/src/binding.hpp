// Internal to the Python extension: the FFI objects, error translation and tensor checks shared by
// bindings.cpp (plans, reports, host metadata) and ops.cpp (buffers and the capture-safe ops).
//
// The extension is a plain shared library loaded by tvm_ffi.load_module (not a CPython module):
// every function is registered as a tvm-ffi global "specgraph.<name>" and called from
// python/specgraph through tvm_ffi.init_ffi_api. Tensors arrive through DLPack (numpy, torch and
// any framework with __dlpack__); for a torch CUDA tensor argument tvm-ffi sets the environment
// stream to torch's current stream for the duration of the call, which is the stream the ops use.
#pragma once

#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/object.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/string.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "specgraph/buffers.hpp"
#include "specgraph/csr_ops.hpp"
#include "specgraph/engine_inputs.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"

namespace specgraph::python {

namespace ffi = tvm::ffi;
using ffi_map = ffi::Map<ffi::String, ffi::Any>;

// ---- errors ---------------------------------------------------------------------------------
// Error kinds thrown to Python; python/specgraph/errors.py registers one class per kind
// (tvm_ffi.register_error). Structured attributes travel in the error's extra_context.
inline constexpr const char* kind_invalid_argument = "specgraph.InvalidArgument";
inline constexpr const char* kind_guard_violation = "specgraph.GuardViolation";
inline constexpr const char* kind_capture_failed = "specgraph.CaptureFailed";
inline constexpr const char* kind_cuda_error = "specgraph.CudaError";
inline constexpr const char* kind_error = "specgraph.SpecgraphError";

[[noreturn]] void throw_kind(const char* kind, const std::string& message, ffi_map context = {});
// Inside catch (...): rethrows the current exception as the ffi::Error of its Python class, the
// message intact. ffi::Error passes through unchanged.
[[noreturn]] void translate_current_exception();

// checked<&fn>::call has fn's signature and translates every exception fn throws.
template <auto Fn>
struct checked;
template <typename R, typename... Args, R (*Fn)(Args...)>
struct checked<Fn> {
  static R call(Args... args) {
    try {
      return Fn(std::forward<Args>(args)...);
    } catch (...) {
      translate_current_exception();
    }
  }
};

// ---- tensors --------------------------------------------------------------------------------
// The first element's address (data + byte_offset).
inline void* address_of(const ffi::TensorView& t) {
  return static_cast<unsigned char*>(t.data_ptr()) + t.byte_offset();
}
// v as int32; throws invalid_argument naming `field` when it does not fit.
std::int32_t int32_arg(const char* field, std::int64_t v);
enum class int_kind { int32, int64, int32_or_int64 };
// Throws invalid_argument naming `field` unless t is contiguous, on `device`, of the dtype asked
// for, with at least `min_elements` elements. Returns whether it is int64.
bool check_int_tensor(const char* field, const ffi::TensorView& t, int_kind kind,
                      std::int64_t min_elements, DLDevice device);
std::string describe_dtype(DLDataType t);
std::string describe_shape(const ffi::TensorView& t);  // "[2, 3]"
std::string describe_device(DLDevice d);

// ---- objects --------------------------------------------------------------------------------
// A plan: immutable after make_plan, shared by every Buffers made from it.
class plan_obj : public ffi::Object {
 public:
  std::shared_ptr<const specgraph::plan> plan;
  static constexpr bool _type_mutable = false;
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("specgraph.Plan", plan_obj, ffi::Object);
};
class plan_ref : public ffi::ObjectRef {
 public:
  explicit plan_ref(ffi::ObjectPtr<plan_obj> n) : ffi::ObjectRef(std::move(n)) {}
  TVM_FFI_DEFINE_OBJECT_REF_METHODS_NOTNULLABLE(plan_ref, ffi::ObjectRef, plan_obj);
};

// Buffers over a caller's arena: keeps the plan and the arena tensor alive, remembers the bucket
// of the last stage (the default bucket check_guards reports).
class buffers_obj : public ffi::Object {
 public:
  std::shared_ptr<const specgraph::plan> plan;
  ffi::Tensor arena;  // a reference: the memory cannot go away under the views or the graphs
  specgraph::draft_buffers buffers;
  DLDevice device{kDLCPU, 0};
  std::int32_t staged_bucket = 0;
  static constexpr bool _type_mutable = true;
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("specgraph.Buffers", buffers_obj, ffi::Object);
};
class buffers_ref : public ffi::ObjectRef {
 public:
  explicit buffers_ref(ffi::ObjectPtr<buffers_obj> n) : ffi::ObjectRef(std::move(n)) {}
  TVM_FFI_DEFINE_OBJECT_REF_METHODS_NOTNULLABLE(buffers_ref, ffi::ObjectRef, buffers_obj);
};

// The buffers over an op's arena argument (ops.cpp): the arena the buffers were made over, or a
// copy of it of the plan's size on the same device (torch.compile's functionalization).
specgraph::draft_buffers buffers_of(const buffers_ref& b, const ffi::TensorView& arena);
// req_to_token checked as the ops read it (int32 [>= pool_rows, max_context_len], contiguous,
// on the buffers' device); throws invalid_argument naming "req_to_token".
specgraph::engine_tables tables_of(const buffers_ref& b, const ffi::TensorView& req_to_token);

// ---- round sources and targets (inputs.cpp, csr.cpp) --------------------------------------
// Every round op takes its source and, where it writes CSR indices, its target as optional
// arguments with defaults: no source, the inputs staged into the arena; no target, the arena.

// The engine's static inputs checked once by bind_inputs (Python's specgraph.BoundInputs holds
// it): the checked engine_inputs, the tensors they point into (kept alive) and the plan and
// device they were checked against.
class inputs_obj : public ffi::Object {
 public:
  std::shared_ptr<const specgraph::plan> plan;
  DLDevice device{kDLCPU, 0};
  specgraph::round_source source;  // checked against *plan when made
  ffi::Tensor req_pool_indices, seq_lens, out_cache_loc;
  ffi::Optional<ffi::Tensor> real_batch;
  static constexpr bool _type_mutable = false;
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("specgraph.BoundInputs", inputs_obj, ffi::Object);
};
class inputs_ref : public ffi::ObjectRef {
 public:
  explicit inputs_ref(ffi::ObjectPtr<inputs_obj> n) : ffi::ObjectRef(std::move(n)) {}
  TVM_FFI_DEFINE_OBJECT_REF_METHODS_NOTNULLABLE(inputs_ref, ffi::ObjectRef, inputs_obj);
};
using source_arg = ffi::Optional<inputs_ref>;  // None: the staged inputs
using opt_tensor = ffi::Optional<ffi::Tensor>;

// The engine's static inputs read in place (inputs.cpp), each tensor checked against the plan
// (dtype, shape, strides, device): invalid_argument names the tensor, its dtype, shape and
// strides and what is needed. The library's own check (check_engine_inputs) runs when the
// round_source is made from them, once.
specgraph::engine_inputs inputs_of(const buffers_ref& b, const ffi::TensorView& req_pool_indices,
                                   const ffi::TensorView& seq_lens,
                                   const ffi::TensorView& out_cache_loc,
                                   const opt_tensor& real_batch);
// The source an op reads: the staged inputs (no source), else the bound inputs' round_source as
// bind_inputs made it (made, and so checked, again only when bound against another plan or
// device).
specgraph::round_source source_of(const buffers_ref& b, const source_arg& source);

// The CSR target an op writes: the arena's CSR buffers (neither tensor), else the engine's
// kv_indptr / kv_indices (both or neither: invalid_argument names the missing one), checked
// against the plan once, when the csr_target is made (csr.cpp).
specgraph::csr_target target_of(const buffers_ref& b, const opt_tensor& kv_indptr,
                                const opt_tensor& kv_indices, const void* arena,
                                const ffi::TensorView& req_to_token);

// ---- executors --------------------------------------------------------------------------------
// The executor for work on `device`: the host executor for CPU memory; for CUDA memory a cuda
// executor over the environment stream of that device (torch's current stream when a torch
// tensor is an argument), cached per (device, stream) so a call creates nothing.
specgraph::executor& executor_for(DLDevice device);

// ---- NVTX -------------------------------------------------------------------------------------
// A range in the "specgraph" NVTX domain around one op, when enabled (SPECGRAPH_NVTX, read once
// by the Python package). Costs one branch when disabled; nothing without NVTX headers.
enum class op_id : int {
  stage,
  round_setup,
  step_metadata,
  sparse_stage,
  count_violations,
  check_guards,
  initialize,
  step_metadata_device,
  advance_step,
  csr_step_indices,
  csr_round_indices,
  csr_indices_device,
  begin_round,
  count
};
void set_nvtx_enabled(bool on);
class op_range {
 public:
  explicit op_range(op_id id);
  ~op_range();
  op_range(const op_range&) = delete;
  op_range& operator=(const op_range&) = delete;

 private:
  bool pushed_ = false;
};

}  // namespace specgraph::python
