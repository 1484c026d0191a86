// Internal: move-only RAII owners of CUDA runtime handles (stream, event, graph, graph exec).
// Destructors never throw: the handle is gone either way. A failing destroy means a bug (a
// double destroy, a handle of a dead context) and is asserted in debug builds; at process exit
// the runtime may already be unloading, which is not a bug.
// Include only from files compiled with the CUDA headers.
#pragma once

#include <cuda_runtime.h>

#include <cassert>
#include <utility>

#include "device/cuda_check.hpp"

namespace specgraph::detail {

template <class Handle, cudaError_t (*Destroy)(Handle)>
class unique_handle {
 public:
  unique_handle() noexcept = default;
  explicit unique_handle(Handle h) noexcept : h_(h) {}
  ~unique_handle() { reset(); }
  unique_handle(unique_handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  unique_handle& operator=(unique_handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  unique_handle(const unique_handle&) = delete;
  unique_handle& operator=(const unique_handle&) = delete;

  Handle get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != nullptr; }
  void reset() noexcept {
    if (h_ != nullptr) {
      const cudaError_t e = Destroy(h_);
      assert(e == cudaSuccess || e == cudaErrorCudartUnloading);
      (void)e;
    }
    h_ = nullptr;
  }

 private:
  Handle h_ = nullptr;
};

using unique_stream = unique_handle<cudaStream_t, &cudaStreamDestroy>;
using unique_event = unique_handle<cudaEvent_t, &cudaEventDestroy>;
using unique_graph = unique_handle<cudaGraph_t, &cudaGraphDestroy>;
using unique_graph_exec = unique_handle<cudaGraphExec_t, &cudaGraphExecDestroy>;

// A non-blocking stream: capture on a blocking stream would make every legacy-stream use in the
// process (e.g. a plain cudaMemcpy elsewhere) an error while capturing.
inline unique_stream make_stream() {
  cudaStream_t s = nullptr;
  SPECGRAPH_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return unique_stream(s);
}

inline unique_event make_event() {
  cudaEvent_t e = nullptr;
  SPECGRAPH_CUDA_TRY(cudaEventCreate(&e));
  return unique_event(e);
}

}  // namespace specgraph::detail
