// The device-decided depth from Python (docs/device-rounds.md). torch.cuda.graph records no
// conditional WHILE node, so the engine captures the step body with torch (one graph per bucket:
// round_setup_, step_metadata_device_, its forward, advance_step_) and specgraph wraps a copy of
// that graph into the round: WHILE { body; continue_while_confident } (ops.hpp,
// capture_device_depth_round), instantiated once and launched once per round on the current
// stream. On CPU memory there is no graph to wrap: continue_condition_host evaluates the same
// condition kernel into a flag, so a driver can run the body in a loop with identical semantics.
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "python/src/binding.hpp"
#include "specgraph/conditional.hpp"
#include "specgraph/engine_inputs.hpp"
#include "specgraph/ops.hpp"

namespace specgraph::python {

// One bucket's instantiated round graph. Keeps the buffers (and so the arena) alive; the memory
// of the wrapped body (the engine's graph pool) is the engine's to keep.
class round_graph_obj : public ffi::Object {
 public:
  buffers_ref buffers;
  std::int32_t bucket = 0;
  std::unique_ptr<graph_exec> exec;
  explicit round_graph_obj(buffers_ref b) : buffers(std::move(b)) {}
  static constexpr bool _type_mutable = true;
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("specgraph.RoundGraph", round_graph_obj, ffi::Object);
};
class round_graph_ref : public ffi::ObjectRef {
 public:
  explicit round_graph_ref(ffi::ObjectPtr<round_graph_obj> n) : ffi::ObjectRef(std::move(n)) {}
  TVM_FFI_DEFINE_OBJECT_REF_METHODS_NOTNULLABLE(round_graph_ref, ffi::ObjectRef, round_graph_obj);
};

namespace {

void expect_cuda_arena(const buffers_ref& b, const char* what) {
  SPECGRAPH_EXPECTS(b->device.device_type == kDLCUDA, "arena",
                    std::string("on ") + describe_device(b->device) + ": " + what);
}

void expect_own_arena(const buffers_ref& b, const ffi::TensorView& arena) {
  SPECGRAPH_EXPECTS(address_of(arena) == static_cast<void*>(b->buffers.base()), "arena",
                    "not the arena these buffers were made over");
}

// Wraps the engine's step body (a cudaGraph_t, e.g. torch.cuda.CUDAGraph(keep_graph=True)
// .raw_cuda_graph()) into the bucket's round and instantiates it (uploaded on the current
// stream). Host work; not inside a capture.
// source: the engine's bound inputs (the condition reads their real_batch), or None (staged).
round_graph_ref make_round_graph(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                                 std::int64_t cuda_graph, source_arg source) {
  expect_cuda_arena(b,
                    "a round graph wraps a CUDA graph; on CPU memory loop over the body "
                    "with continue_condition_host");
  expect_own_arena(b, arena);
  SPECGRAPH_EXPECTS(cuda_graph != 0, "cuda_graph", "0: expected a cudaGraph_t address");
  executor& ex = executor_for(b->device);
  const std::int32_t at = int32_arg("bucket", bucket);
  const std::unique_ptr<graph> body =
      import_cuda_graph(reinterpret_cast<void*>(static_cast<std::uintptr_t>(cuda_graph)));
  const std::unique_ptr<graph> round =
      capture_device_depth_round(ex, b->buffers, at, *body, source_of(b, source));
  auto n = ffi::make_object<round_graph_obj>(b);
  n->bucket = at;
  n->exec = ex.instantiate(*round);
  return round_graph_ref(std::move(n));
}

// One launch of the round on the current stream: the body runs while the condition holds.
// Never allocates or synchronises; not during a capture.
void launch_round_graph(round_graph_ref g, ffi::TensorView arena) {
  expect_own_arena(g->buffers, arena);
  executor_for(g->buffers->device).launch_graph(*g->exec);
}

std::int64_t round_graph_bucket(round_graph_ref g) {
  return g->bucket;
}

// Host memory only: the round's condition kernel (continue_while_confident) writes 1 or 0 into
// flag (int32 [1]): 1 while the step is below max_depth and a real row's confidence reaches
// min_confidence. The same kernel the round graph runs after each body.
void continue_condition_host(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                             ffi::TensorView flag, source_arg source) {
  SPECGRAPH_EXPECTS(b->device.device_type == kDLCPU, "arena",
                    "on " + describe_device(b->device) +
                        ": on a GPU the condition sets a graph's WHILE node (round_graph)");
  SPECGRAPH_EXPECTS(b->plan->config.device_depth, "device_depth",
                    "false: the condition belongs to device-depth rounds");
  expect_own_arena(b, arena);
  check_int_tensor("flag", flag, int_kind::int32, 1, b->device);
  // On the host executor a conditional handle is the address of the condition word.
  const auto handle =
      static_cast<conditional_handle>(reinterpret_cast<std::uintptr_t>(address_of(flag)));
  const std::int32_t at = int32_arg("bucket", bucket);
  continue_while_confident(executor_for(b->device), b->buffers, at, handle, source_of(b, source));
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::ObjectDef<round_graph_obj>();
  refl::GlobalDef()
      .def("specgraph.round_graph", checked<&make_round_graph>::call)
      .def("specgraph.launch_round_graph", checked<&launch_round_graph>::call)
      .def("specgraph.round_graph_bucket", round_graph_bucket)
      .def("specgraph.continue_condition_host", checked<&continue_condition_host>::call);
}

}  // namespace specgraph::python
