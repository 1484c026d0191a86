// Internal: the cuda executor (see executor.hpp), its graph wrappers and the device scope it
// holds around every call. Defined in cuda_executor.cpp (memory, copies, launches, events,
// timing) and cuda_capture.cpp (capture, conditional nodes, instantiate, update, launch).
// Include only from files compiled with the CUDA headers.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device/cuda_check.hpp"
#include "device/cuda_handles.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph::detail {

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
  cuda_executor();
  // Non-owning: the engine's stream, on the stream's device.
  explicit cuda_executor(cudaStream_t engine_stream);
  ~cuda_executor() override;

  const char* name() const noexcept override { return "cuda"; }
  device_stream stream() const noexcept override { return stream_; }

  void* allocate(std::size_t bytes) override;
  std::size_t memory_capacity() override;
  void deallocate(void* p) override;
  void release(void* p) noexcept override;
  void* allocate_pinned(std::size_t bytes) override;
  void deallocate_pinned(void* p) noexcept override;

  void copy_to_device(void* dst, const void* src, std::size_t bytes) override;
  void copy_from_pinned(void* dst, const void* pinned_src, std::size_t bytes) override;
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override;
  void fill_bytes(void* dst, unsigned char value, std::size_t bytes) override;

  void launch(const kernel_launch& k) override;

  device_event create_event() override;
  void destroy_event(device_event e) noexcept override;
  using executor::record_event;
  using executor::wait_event;
  void record_event(device_event e, event_scope scope) override;
  void wait_event(device_event e, event_scope scope) override;
  bool event_complete(device_event e) override;
  void synchronize_event(device_event e) override;

  device_timing time_device(const std::function<void()>& enqueue) override;

  void synchronize() override;

  void begin_capture() override;
  void begin_private_capture() override;
  std::unique_ptr<graph> end_capture() override;
  void abort_capture() noexcept override;
  conditional_handle begin_while(bool initial) override;
  void end_while() override;
  void record_graph(const graph& g) override;
  bool capturing() const noexcept override;

  std::unique_ptr<graph_exec> instantiate(const graph& g) override;
  bool update(graph_exec& exec, const graph& g) override;
  void upload(graph_exec& exec) override;
  void launch_graph(graph_exec& exec) override;

 private:
  static const cuda_graph& as_cuda(const graph& g);
  void forbid_during_capture(const char* what) const;
  void forbid_in_conditional_body(const char* what) const;
  void free_deferred() noexcept;
  void load_kernels();
  void restore_origin_stream() noexcept;

  int device_ = 0;
  detail::unique_stream owned_stream_;  // empty over an engine's stream
  cudaStream_t stream_ = nullptr;
  detail::unique_event timing_start_, timing_stop_;  // time_device, created on first use
  int* timing_flags_ = nullptr;  // time_device: [release, timed out], pinned and mapped
  bool own_capture_ = false;
  detail::unique_stream body_stream_;     // captures conditional bodies; made with the executor
                                          // (on first use only if made inside a capture)
  cudaStream_t main_stream_ = nullptr;    // set while stream_ is the body stream
  detail::unique_stream capture_stream_;  // begin_private_capture's; made like body_stream_
  cudaStream_t origin_stream_ = nullptr;  // stream_ before a private capture (may be legacy)
  bool private_capture_ = false;          // stream_ is capture_stream_ until the capture ends
  std::vector<void*> deferred_frees_;
};

}  // namespace specgraph::detail
