// The cuda executor: memory, copies, kernel launches, events, timing, and the factories.
// Capture and graphs are in cuda_capture.cpp. Compiled only when SPECGRAPH_ENABLE_CUDA is on; the
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
#include "device/cuda_executor.hpp"
#include "device/cuda_probe.hpp"
#include "device/kernel_preload.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph {
namespace detail {

cuda_executor::cuda_executor() {
  SPECGRAPH_CUDA_TRY(cudaGetDevice(&device_));
  owned_stream_ = detail::make_stream();
  stream_ = owned_stream_.get();
  load_kernels();
}

cuda_executor::cuda_executor(cudaStream_t engine_stream) : stream_(engine_stream) {
  SPECGRAPH_CUDA_TRY(cudaGetDevice(&device_));
  if (engine_stream != nullptr) SPECGRAPH_CUDA_TRY(cudaStreamGetDevice(engine_stream, &device_));
  load_kernels();
}

// Every kernel this executor launches by itself, loaded now (the built-in kernels through the
// preload the kernels layer registers, device/kernel_preload.hpp): with CUDA's default lazy
// loading a kernel's first launch may wait for the whole context, which behind time_device's
// spinning kernel would wait until its timeout. Skipped while the engine's stream is capturing (an
// executor made inside the engine's capture): nothing spins there, and loading is left to CUDA;
// the internal streams are then made on first use.
void cuda_executor::load_kernels() {
  device_scope d(device_);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (stream_ != nullptr) SPECGRAPH_CUDA_TRY(cudaStreamIsCapturing(stream_, &status));
  if (status != cudaStreamCaptureStatusNone) return;
  SPECGRAPH_CUDA_TRY(static_cast<cudaError_t>(detail::run_kernel_preload()));
  SPECGRAPH_CUDA_TRY(detail::load_blocking_kernel());
  // The internal streams too, before any capture: begin_while's body stream and
  // begin_private_capture's stream would otherwise be created inside a live capture (the first
  // device-depth capture inside the engine's), where CUDA may refuse stream creation as unsafe
  // in global mode and invalidate the engine's capture around it.
  body_stream_ = detail::make_stream();
  capture_stream_ = detail::make_stream();
}

cuda_executor::~cuda_executor() {
  abort_capture();  // ours, and a conditional body inside an engine's capture
  for (void* p : deferred_frees_) (void)cudaFree(p);
  if (timing_flags_ != nullptr) (void)cudaFreeHost(timing_flags_);
}

void* cuda_executor::allocate(std::size_t bytes) {
  device_scope d(device_);
  forbid_during_capture("allocate");
  void* p = nullptr;
  SPECGRAPH_CUDA_TRY(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  ++counters_.allocations;
  return p;
}

std::size_t cuda_executor::memory_capacity() {
  device_scope d(device_);
  std::size_t free_bytes = 0, total_bytes = 0;
  SPECGRAPH_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes;
}

void cuda_executor::deallocate(void* p) {
  if (p == nullptr) return;
  device_scope d(device_);
  forbid_during_capture("deallocate (cudaFree synchronises the device)");
  SPECGRAPH_CUDA_TRY(cudaFree(p));
  ++counters_.frees;
}

void cuda_executor::release(void* p) noexcept {
  if (p == nullptr) return;
  if (capturing()) {
    deferred_frees_.push_back(p);  // freed when our capture ends (or with the executor)
    return;
  }
  const cudaError_t e = cudaFree(p);
  if (e == cudaSuccess) ++counters_.frees;
}

void* cuda_executor::allocate_pinned(std::size_t bytes) {
  device_scope d(device_);
  forbid_during_capture("allocate_pinned");
  void* p = nullptr;
  SPECGRAPH_CUDA_TRY(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault));
  ++counters_.pinned_allocations;
  return p;
}

void cuda_executor::deallocate_pinned(void* p) noexcept {
  if (p != nullptr) (void)cudaFreeHost(p);
}

void cuda_executor::copy_to_device(void* dst, const void* src, std::size_t bytes) {
  device_scope d(device_);
  forbid_during_capture("copy_to_device (a copy from host memory)");
  SPECGRAPH_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  ++counters_.copies_to_device;
  counters_.bytes_to_device += static_cast<std::int64_t>(bytes);
}

void cuda_executor::copy_from_pinned(void* dst, const void* pinned_src, std::size_t bytes) {
  device_scope d(device_);
  forbid_during_capture("copy_from_pinned (a copy from host memory)");
  SPECGRAPH_CUDA_TRY(cudaMemcpyAsync(dst, pinned_src, bytes, cudaMemcpyHostToDevice, stream_));
  ++counters_.copies_to_device;
  counters_.bytes_to_device += static_cast<std::int64_t>(bytes);
}

void cuda_executor::copy_on_device(void* dst, const void* src, std::size_t bytes) {
  device_scope d(device_);
  SPECGRAPH_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void cuda_executor::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  device_scope d(device_);
  forbid_during_capture("copy_to_host (a host read of device memory)");
  SPECGRAPH_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  SPECGRAPH_CUDA_TRY(cudaStreamSynchronize(stream_));
  ++counters_.copies_to_host;
}

void cuda_executor::fill_bytes(void* dst, unsigned char value, std::size_t bytes) {
  device_scope d(device_);
  SPECGRAPH_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, stream_));
}

void cuda_executor::launch(const kernel_launch& k) {
  if (k.cuda_run == nullptr) {
    throw error(std::string("kernel '") + (k.name ? k.name : "?") + "' has no CUDA implementation");
  }
  device_scope d(device_);
  const auto e = static_cast<cudaError_t>(k.cuda_run(k.params, k.rows, stream_));
  if (e != cudaSuccess) {
    // The launch's own status; a launch error is not sticky, so clear it rather than leave it
    // to be blamed on whoever checks next.
    (void)cudaGetLastError();
    detail::throw_cuda(e, (std::string("launch of kernel ") + k.name).c_str(), __FILE__, __LINE__);
  }
  if (!capturing()) ++counters_.kernel_launches;
}

device_event cuda_executor::create_event() {
  device_scope d(device_);
  forbid_during_capture("create_event");
  cudaEvent_t e = nullptr;
  SPECGRAPH_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void cuda_executor::destroy_event(device_event e) noexcept {
  if (e != nullptr) (void)cudaEventDestroy(e);
}

// During capture: an external record / wait node for event_scope::external; otherwise CUDA's
// ordinary capture semantics (the record joins the event to this capture, a wait on it in the
// same capture becomes an edge; CUDA refuses an ordinary wait on an event from outside it).
void cuda_executor::record_event(device_event e, event_scope scope) {
  device_scope d(device_);
  forbid_in_conditional_body("an event record");
  if (scope == event_scope::external && capturing()) {
    SPECGRAPH_CUDA_TRY(cudaEventRecordWithFlags(e, stream_, cudaEventRecordExternal));
  } else {
    SPECGRAPH_CUDA_TRY(cudaEventRecord(e, stream_));
  }
}

void cuda_executor::wait_event(device_event e, event_scope scope) {
  device_scope d(device_);
  forbid_in_conditional_body("an event wait");
  const bool external = scope == event_scope::external && capturing();
  SPECGRAPH_CUDA_TRY(cudaStreamWaitEvent(stream_, e, external ? cudaEventWaitExternal : 0));
}

bool cuda_executor::event_complete(device_event e) {
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

void cuda_executor::synchronize_event(device_event e) {
  if (event_complete(e)) return;
  device_scope d(device_);
  ++counters_.event_waits;
  SPECGRAPH_CUDA_TRY(cudaEventSynchronize(e));
}

device_timing cuda_executor::time_device(const std::function<void()>& enqueue) {
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

void cuda_executor::synchronize() {
  device_scope d(device_);
  forbid_during_capture("synchronize");
  SPECGRAPH_CUDA_TRY(cudaStreamSynchronize(stream_));
  ++counters_.synchronizations;
}

void cuda_executor::forbid_during_capture(const char* what) const {
  if (capturing()) {
    throw capture_violation(std::string("cuda executor: ") + what +
                            " is not allowed during graph capture");
  }
}

void cuda_executor::forbid_in_conditional_body(const char* what) const {
  if (main_stream_ != nullptr) {
    throw capture_violation(std::string("cuda executor: ") + what +
                            " is not allowed inside a conditional body");
  }
}

}  // namespace detail

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
  return std::make_unique<detail::cuda_executor>();
}

std::unique_ptr<executor> make_cuda_executor(device_stream engine_stream) {
  if (!cuda_available())
    throw unavailable("cuda executor unavailable: " + cuda_unavailable_reason());
  return std::make_unique<detail::cuda_executor>(engine_stream);
}

}  // namespace specgraph
