// The cuda executor (see executor.hpp). Compiled only when SPECGRAPH_ENABLE_CUDA is on; the
// library links the shared cudart only (never libcuda directly), so binaries start on machines
// without a driver and report the cuda executor as unavailable.
#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/cuda_blocking.hpp"
#include "device/cuda_check.hpp"
#include "device/cuda_handles.hpp"
#include "device/cuda_probe.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph {
namespace {

class cuda_graph final : public graph {
 public:
  explicit cuda_graph(cudaGraph_t g) : g_(g) {}
  cudaGraph_t get() const noexcept { return g_.get(); }
  std::size_t node_count() const override {
    std::size_t n = 0;
    SPECGRAPH_CUDA_TRY(cudaGraphGetNodes(g_.get(), nullptr, &n));
    return n;
  }
  void write_dot(const std::string& path) const override {
    const cudaError_t e =
        cudaGraphDebugDotPrint(g_.get(), path.c_str(), cudaGraphDebugDotFlagsVerbose);
    if (e == cudaErrorOperatingSystem) {
      (void)cudaGetLastError();  // our own, non-sticky: the file could not be written
      throw error("cannot write graph description to '" + path + "'");
    }
    SPECGRAPH_CUDA_TRY(e);
  }

 private:
  detail::unique_graph g_;
};

// Only cuda_executor::instantiate creates one.
class cuda_graph_exec final : public graph_exec {
 public:
  explicit cuda_graph_exec(cudaGraphExec_t e) : e_(e) {}
  cudaGraphExec_t get() const noexcept { return e_.get(); }

 private:
  detail::unique_graph_exec e_;
};

// Makes `device` current for one call and restores the caller's device afterwards, so an engine
// thread that last worked on another GPU cannot enqueue onto a stream of the wrong device.
class device_scope {
 public:
  explicit device_scope(int device) {
    SPECGRAPH_CUDA_TRY(cudaGetDevice(&previous_));
    if (previous_ != device) SPECGRAPH_CUDA_TRY(cudaSetDevice(device));
    device_ = device;
  }
  ~device_scope() {
    if (previous_ != device_) (void)cudaSetDevice(previous_);
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

class cuda_executor final : public executor {
 public:
  // Owning: a new non-blocking stream on the current device.
  cuda_executor() {
    SPECGRAPH_CUDA_TRY(cudaGetDevice(&device_));
    owned_stream_ = detail::make_stream();
    stream_ = owned_stream_.get();
  }
  // Non-owning: the engine's stream, on the stream's device.
  explicit cuda_executor(cudaStream_t engine_stream) : stream_(engine_stream) {
    SPECGRAPH_CUDA_TRY(cudaGetDevice(&device_));
    if (engine_stream != nullptr) SPECGRAPH_CUDA_TRY(cudaStreamGetDevice(engine_stream, &device_));
  }
  ~cuda_executor() override {
    if (own_capture_) abort_capture();
    for (void* p : deferred_frees_) (void)cudaFree(p);
    if (timing_flags_ != nullptr) (void)cudaFreeHost(timing_flags_);
  }

  const char* name() const noexcept override { return "cuda"; }
  device_stream stream() const noexcept override { return stream_; }

  void* allocate(std::size_t bytes) override {
    device_scope d(device_);
    forbid_during_capture("allocate");
    void* p = nullptr;
    SPECGRAPH_CUDA_TRY(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
    ++counters_.allocations;
    return p;
  }
  std::size_t memory_capacity() override {
    device_scope d(device_);
    std::size_t free_bytes = 0, total_bytes = 0;
    SPECGRAPH_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
    return total_bytes;
  }
  void deallocate(void* p) override {
    if (p == nullptr) return;
    device_scope d(device_);
    forbid_during_capture("deallocate (cudaFree synchronises the device)");
    SPECGRAPH_CUDA_TRY(cudaFree(p));
    ++counters_.frees;
  }
  void release(void* p) noexcept override {
    if (p == nullptr) return;
    if (capturing()) {
      deferred_frees_.push_back(p);  // freed when our capture ends (or with the executor)
      return;
    }
    const cudaError_t e = cudaFree(p);
    if (e == cudaSuccess) ++counters_.frees;
  }
  void* allocate_pinned(std::size_t bytes) override {
    device_scope d(device_);
    forbid_during_capture("allocate_pinned");
    void* p = nullptr;
    SPECGRAPH_CUDA_TRY(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault));
    ++counters_.pinned_allocations;
    return p;
  }
  void deallocate_pinned(void* p) noexcept override {
    if (p != nullptr) (void)cudaFreeHost(p);
  }

  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    device_scope d(device_);
    forbid_during_capture("copy_to_device (a copy from host memory)");
    SPECGRAPH_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    ++counters_.copies_to_device;
  }
  void copy_from_pinned(void* dst, const void* pinned_src, std::size_t bytes) override {
    device_scope d(device_);
    forbid_during_capture("copy_from_pinned (a copy from host memory)");
    SPECGRAPH_CUDA_TRY(cudaMemcpyAsync(dst, pinned_src, bytes, cudaMemcpyHostToDevice, stream_));
    ++counters_.copies_to_device;
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override {
    device_scope d(device_);
    SPECGRAPH_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    device_scope d(device_);
    forbid_during_capture("copy_to_host (a host read of device memory)");
    SPECGRAPH_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    SPECGRAPH_CUDA_TRY(cudaStreamSynchronize(stream_));
    ++counters_.copies_to_host;
  }
  void fill_bytes(void* dst, unsigned char value, std::size_t bytes) override {
    device_scope d(device_);
    SPECGRAPH_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, stream_));
  }

  void launch(const kernel_launch& k) override {
    if (k.cuda_run == nullptr) {
      throw error(std::string("kernel '") + (k.name ? k.name : "?") +
                  "' has no CUDA implementation");
    }
    device_scope d(device_);
    const auto e = static_cast<cudaError_t>(k.cuda_run(k.params, k.rows, stream_));
    if (e != cudaSuccess) {
      // The launch's own status; a launch error is not sticky, so clear it rather than leave it
      // to be blamed on whoever checks next.
      (void)cudaGetLastError();
      detail::throw_cuda(e, (std::string("launch of kernel ") + k.name).c_str(), __FILE__,
                         __LINE__);
    }
    if (!capturing()) ++counters_.kernel_launches;
  }

  device_event create_event() override {
    device_scope d(device_);
    forbid_during_capture("create_event");
    cudaEvent_t e = nullptr;
    SPECGRAPH_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void destroy_event(device_event e) noexcept override {
    if (e != nullptr) (void)cudaEventDestroy(e);
  }
  void record_event(device_event e) override {
    device_scope d(device_);
    forbid_in_conditional_body("an event record");
    if (capturing()) {
      SPECGRAPH_CUDA_TRY(cudaEventRecordWithFlags(e, stream_, cudaEventRecordExternal));
    } else {
      SPECGRAPH_CUDA_TRY(cudaEventRecord(e, stream_));
    }
  }
  void wait_event(device_event e) override {
    device_scope d(device_);
    forbid_in_conditional_body("an event wait");
    SPECGRAPH_CUDA_TRY(cudaStreamWaitEvent(stream_, e, capturing() ? cudaEventWaitExternal : 0));
  }
  bool event_complete(device_event e) override {
    device_scope d(device_);
    forbid_during_capture("event_complete (cudaEventQuery)");
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not an error: the event is pending
      return false;
    }
    SPECGRAPH_CUDA_TRY(r);
    return true;
  }
  void synchronize_event(device_event e) override {
    if (event_complete(e)) return;
    device_scope d(device_);
    ++counters_.event_waits;
    SPECGRAPH_CUDA_TRY(cudaEventSynchronize(e));
  }

  device_timing time_device(const std::function<void()>& enqueue) override {
    device_scope d(device_);
    forbid_during_capture("time_device");
    if (!timing_start_) {
      timing_start_ = detail::make_event();
      timing_stop_ = detail::make_event();
      void* flags = nullptr;
      SPECGRAPH_CUDA_TRY(cudaHostAlloc(&flags, 2 * sizeof(int), cudaHostAllocMapped));
      timing_flags_ = static_cast<int*>(flags);
    }
    // The stream is held by a blocking kernel while the host enqueues the work, so the events
    // around the work measure the device alone, not the host's submission.
    volatile int* flags = timing_flags_;
    flags[0] = 0;
    flags[1] = 0;
    int* device_flags = nullptr;
    SPECGRAPH_CUDA_TRY(
        cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flags), timing_flags_, 0));
    SPECGRAPH_CUDA_TRY(
        detail::launch_blocking_kernel(stream_, device_flags, device_flags + 1, 2'000'000'000LL));
    SPECGRAPH_CUDA_TRY(cudaEventRecord(timing_start_.get(), stream_));
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    try {
      enqueue();
    } catch (...) {
      flags[0] = 1;  // never leave the stream blocked
      throw;
    }
    const auto t1 = clock::now();
    SPECGRAPH_CUDA_TRY(cudaEventRecord(timing_stop_.get(), stream_));
    flags[0] = 1;
    SPECGRAPH_CUDA_TRY(cudaEventSynchronize(timing_stop_.get()));
    if (flags[1] != 0) {
      throw error("time_device: the work took more than 2 s to enqueue (did it synchronise?)");
    }
    float ms = 0;
    SPECGRAPH_CUDA_TRY(cudaEventElapsedTime(&ms, timing_start_.get(), timing_stop_.get()));
    device_timing t;
    t.device_seconds = static_cast<double>(ms) * 1e-3;
    t.submit_seconds = std::chrono::duration<double>(t1 - t0).count();
    return t;
  }

  void synchronize() override {
    device_scope d(device_);
    forbid_during_capture("synchronize");
    SPECGRAPH_CUDA_TRY(cudaStreamSynchronize(stream_));
    ++counters_.synchronizations;
  }

  void begin_capture() override {
    device_scope d(device_);
    if (capturing())
      throw capture_violation("cuda executor: begin_capture while already capturing");
    // Thread-local mode: other threads of the engine may keep allocating without invalidating
    // this capture.
    SPECGRAPH_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    own_capture_ = true;
  }
  std::unique_ptr<graph> end_capture() override {
    if (!own_capture_) throw capture_violation("cuda executor: end_capture without begin_capture");
    device_scope d(device_);
    if (main_stream_ != nullptr) {
      abort_capture();
      throw capture_violation("cuda executor: end_capture inside a conditional body");
    }
    own_capture_ = false;
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &g);
    free_deferred();
    if (e != cudaSuccess) {
      if (g != nullptr) (void)cudaGraphDestroy(g);
      (void)cudaGetLastError();  // capture errors are not sticky; the stream stays usable
      detail::throw_cuda(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    return std::make_unique<cuda_graph>(g);
  }
  void abort_capture() noexcept override {
    if (!own_capture_) return;
    own_capture_ = false;
    int previous = 0;
    (void)cudaGetDevice(&previous);
    (void)cudaSetDevice(device_);
    if (main_stream_ != nullptr) {  // a body capture in flight: end it first
      cudaGraph_t body = nullptr;
      (void)cudaStreamEndCapture(stream_, &body);
      stream_ = main_stream_;
      main_stream_ = nullptr;
    }
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(stream_, &g);  // always end, even after invalidation
    if (g != nullptr) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
    free_deferred();
    (void)cudaSetDevice(previous);
  }
  conditional_handle begin_while(bool initial) override {
    device_scope d(device_);
    if (!capturing()) throw capture_violation("cuda executor: begin_while outside capture");
    if (main_stream_ != nullptr) {
      throw capture_violation("cuda executor: conditional nodes do not nest here");
    }
    // The WHILE node goes after everything captured so far; the main capture continues after
    // it, and the body is captured into the node's own graph on an internal stream.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaGraph_t g = nullptr;
    const cudaGraphNode_t* deps = nullptr;
    const cudaGraphEdgeData* edges = nullptr;
    std::size_t n = 0;
    SPECGRAPH_CUDA_TRY(cudaStreamGetCaptureInfo(stream_, &status, nullptr, &g, &deps, &edges, &n));
    cudaGraphConditionalHandle handle = 0;
    SPECGRAPH_CUDA_TRY(cudaGraphConditionalHandleCreate(&handle, g, initial ? 1u : 0u,
                                                        cudaGraphCondAssignDefault));
    cudaGraphNodeParams params{};
    params.type = cudaGraphNodeTypeConditional;
    params.conditional.handle = handle;
    params.conditional.type = cudaGraphCondTypeWhile;
    params.conditional.size = 1;
    cudaGraphNode_t node = nullptr;
    SPECGRAPH_CUDA_TRY(cudaGraphAddNode(&node, g, deps, edges, n, &params));
    SPECGRAPH_CUDA_TRY(cudaStreamUpdateCaptureDependencies(stream_, &node, nullptr, 1,
                                                           cudaStreamSetCaptureDependencies));
    if (!body_stream_) body_stream_ = detail::make_stream();
    SPECGRAPH_CUDA_TRY(cudaStreamBeginCaptureToGraph(body_stream_.get(),
                                                     params.conditional.phGraph_out[0], nullptr,
                                                     nullptr, 0, cudaStreamCaptureModeThreadLocal));
    main_stream_ = stream_;
    stream_ = body_stream_.get();
    return handle;
  }
  void end_while() override {
    if (main_stream_ == nullptr)
      throw capture_violation("cuda executor: end_while without begin_while");
    device_scope d(device_);
    cudaGraph_t body = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &body);
    stream_ = main_stream_;
    main_stream_ = nullptr;
    SPECGRAPH_CUDA_TRY(e);
  }
  bool capturing() const noexcept override {
    if (own_capture_) return true;
    // Someone else (the engine's torch.cuda.graph, its own cudaStreamBeginCapture) may be
    // capturing this stream; what capture forbids is forbidden then too.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_, &status) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return status != cudaStreamCaptureStatusNone;
  }

  std::unique_ptr<graph_exec> instantiate(const graph& g) override {
    device_scope d(device_);
    forbid_during_capture("instantiate");
    cudaGraphInstantiateParams params{};
    params.flags = cudaGraphInstantiateFlagUpload;
    params.uploadStream = stream_;
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiateWithParams(&exec, as_cuda(g).get(), &params);
    if (e != cudaSuccess || params.result_out != cudaGraphInstantiateSuccess) {
      if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
      (void)cudaGetLastError();  // ours: do not leave it for the next launch to be blamed for
      throw cuda_error(static_cast<int>(e),
                       detail::where(__FILE__, __LINE__) +
                           ": cudaGraphInstantiateWithParams failed: " + cudaGetErrorName(e) +
                           ", result " + std::to_string(static_cast<int>(params.result_out)));
    }
    return std::make_unique<cuda_graph_exec>(exec);
  }
  bool update(graph_exec& exec, const graph& g) override {
    device_scope d(device_);
    forbid_during_capture("update");
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t e =
        cudaGraphExecUpdate(static_cast<cuda_graph_exec&>(exec).get(), as_cuda(g).get(), &info);
    if (e == cudaErrorGraphExecUpdateFailure) {
      (void)cudaGetLastError();
      return false;
    }
    SPECGRAPH_CUDA_TRY(e);
    return true;
  }
  void upload(graph_exec& exec) override {
    device_scope d(device_);
    forbid_during_capture("upload");
    SPECGRAPH_CUDA_TRY(cudaGraphUpload(static_cast<cuda_graph_exec&>(exec).get(), stream_));
  }
  void launch_graph(graph_exec& exec) override {
    device_scope d(device_);
    if (capturing()) throw capture_violation("cuda executor: graph launch during capture");
    SPECGRAPH_CUDA_TRY(cudaGraphLaunch(static_cast<cuda_graph_exec&>(exec).get(), stream_));
    ++counters_.graph_launches;
  }

 private:
  static const cuda_graph& as_cuda(const graph& g) {
    const auto* c = dynamic_cast<const cuda_graph*>(&g);
    if (c == nullptr) throw error("cuda executor: graph was not captured by a cuda executor");
    return *c;
  }
  void forbid_during_capture(const char* what) const {
    if (capturing()) {
      throw capture_violation(std::string("cuda executor: ") + what +
                              " is not allowed during graph capture");
    }
  }
  void forbid_in_conditional_body(const char* what) const {
    if (main_stream_ != nullptr) {
      throw capture_violation(std::string("cuda executor: ") + what +
                              " is not allowed inside a conditional body");
    }
  }
  void free_deferred() noexcept {
    for (void* p : deferred_frees_) {
      if (cudaFree(p) == cudaSuccess) ++counters_.frees;
    }
    deferred_frees_.clear();
  }

  int device_ = 0;
  detail::unique_stream owned_stream_;  // empty over an engine's stream
  cudaStream_t stream_ = nullptr;
  detail::unique_event timing_start_, timing_stop_;  // time_device, created on first use
  int* timing_flags_ = nullptr;  // time_device: [release, timed out], pinned and mapped
  bool own_capture_ = false;
  detail::unique_stream body_stream_;   // captures conditional bodies, created on first use
  cudaStream_t main_stream_ = nullptr;  // set while stream_ is the body stream
  std::vector<void*> deferred_frees_;
};

}  // namespace

bool cuda_available() noexcept {
  try {
    return detail::cuda_probe_result().available;
  } catch (...) {
    return false;
  }
}

std::string cuda_unavailable_reason() {
  return detail::cuda_probe_result().reason;
}

std::unique_ptr<executor> make_cuda_executor() {
  if (!cuda_available())
    throw unavailable("cuda executor unavailable: " + cuda_unavailable_reason());
  return std::make_unique<cuda_executor>();
}

std::unique_ptr<executor> make_cuda_executor(device_stream engine_stream) {
  if (!cuda_available())
    throw unavailable("cuda executor unavailable: " + cuda_unavailable_reason());
  return std::make_unique<cuda_executor>(engine_stream);
}

}  // namespace specgraph
