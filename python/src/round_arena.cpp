// The Python extension's round after verify over the plan's arena (round_ops.hpp,
// docs/round-graphs.md): acceptance, the commit and the next round's inputs of a bucket, launched
// back to back from the arena's round section (DraftConfig(round_on_device=True), D =
// verify_tokens) and the draft section's staged requests, with the engine's req_to_token and its
// ring of free pages. Like extend_arena.cpp, the arena tensor decides the device (and, for torch
// CUDA tensors, the stream: torch's current one); every argument is checked on the host (here
// the tensors' dtypes, shapes and devices, then after_verify's own checks by name) before
// anything is enqueued. The section's views are plan_info's "round" (bindings.cpp).
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>
#include <string>

#include "python/src/binding.hpp"
#include "specgraph/round_ops.hpp"

namespace specgraph::python {
namespace {

// req_to_token: int32 [>= pool_rows, >= max_context_len], contiguous, on the arena's device,
// read and written at its own width; ring: int32 [capacity >= 1] page ids; ring_tail: int64 [1],
// the engine's tail counter. real_batch -1: the staged real-batch word, read on the device;
// else a launch scalar in [0, bucket] (after_verify refuses it by name). part: which launches
// (after_verify_part_of's names).
void after_verify_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                     ffi::TensorView req_to_token, ffi::TensorView ring, ffi::TensorView ring_tail,
                     std::int64_t real_batch, std::int64_t stop_token_count, bool budget,
                     ffi::String part) {
  const draft_buffers bufs = buffers_of(b, arena);
  // draft_buffers::round refuses "round_on_device" (no section) and "bucket" first.
  const round_view v = bufs.round(int32_arg("bucket", bucket));
  const engine_tables tables = tables_of(b, req_to_token);
  check_int_tensor("ring", ring, int_kind::int32, 1, b->device);
  SPECGRAPH_EXPECTS(ring.ndim() == 1, "ring",
                    "shape " + describe_shape(ring) + ", expected [ring_capacity] page ids");
  check_int_tensor("ring_tail", ring_tail, int_kind::int64, 1, b->device);
  SPECGRAPH_EXPECTS(ring_tail.ndim() == 1 && ring_tail.size(0) == 1, "ring_tail",
                    "shape " + describe_shape(ring_tail) + ", expected [1] (the tail counter)");
  after_verify_inputs in;
  // The op writes the rows that allocate: req_to_token is the engine's (a mutated argument).
  in.req_to_token = const_cast<std::int32_t*>(tables.req_to_token);
  in.req_to_token_stride = tables.req_to_token_stride;
  in.ring = static_cast<const std::int32_t*>(address_of(ring));
  in.ring_capacity = ring.size(0);
  in.ring_tail = static_cast<const std::int64_t*>(address_of(ring_tail));
  // -1: the staged word; after_verify refuses anything outside [-1, bucket] by name.
  in.real_batch = int32_arg("real_batch", real_batch);
  in.stop_token_count = int32_arg("stop_token_count", stop_token_count);
  in.budget = budget;
  // part: "all", "accept_commit" or "next", refused by name in C++ (round_ops.hpp) before
  // anything is enqueued.
  const after_verify_part which = after_verify_part_of(std::string(part));
  after_verify(executor_for(b->device), v, in, which);
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef().def("specgraph.after_verify", checked<&after_verify_op>::call);
}

}  // namespace specgraph::python
