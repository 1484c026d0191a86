// The backend seam: one runtime, two executors.
//
//   "cuda": real device memory, a non-blocking stream, stream capture in thread-local mode,
//           cudaGraphInstantiateWithParams (with upload), cudaGraphExecUpdate, cudaGraphLaunch.
//   "host": an honest emulation for machines without a GPU. "Device" memory is host memory;
//           launching a kernel runs the same host+device row function in a loop; capture records
//           launches and copies, replay runs them in order. Whatever real stream capture forbids
//           (allocating, synchronising, copying device memory to the host) throws
//           specgraph::capture_violation in host mode too, so CPU-green tests do not hide capture
//           bugs.
//
// Unless stated otherwise, every member enqueues on the executor's one stream, does not
// synchronise, and may be called during capture. An executor is not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "specgraph/config.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph {

// A captured, not yet instantiated graph. Move-only; owned through unique_ptr.
class graph {
 public:
  virtual ~graph() = default;
  virtual std::size_t node_count() const = 0;
  // Writes a Graphviz description (cudaGraphDebugDotPrint on CUDA; the launch list on host).
  virtual void write_dot(const std::string& path) const = 0;

 protected:
  graph() = default;
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;
};

// An instantiated graph. Only an executor creates one (executor::instantiate).
class graph_exec {
 public:
  virtual ~graph_exec() = default;

 protected:
  graph_exec() = default;
  graph_exec(const graph_exec&) = delete;
  graph_exec& operator=(const graph_exec&) = delete;
};

// Counters an engine (and the tests) use to prove the replay path is clean.
struct executor_counters {
  std::int64_t allocations = 0;  // allocate() calls that succeeded
  std::int64_t synchronizations = 0;
  std::int64_t kernel_launches = 0;  // eager launches (not recorded into a graph)
  std::int64_t graph_launches = 0;
  std::int64_t copies_to_device = 0;
  std::int64_t copies_to_host = 0;
};

class executor {
 public:
  virtual ~executor() = default;
  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;

  virtual const char* name() const noexcept = 0;
  // The stream work is enqueued on; null on the host executor.
  virtual device_stream stream() const noexcept = 0;

  // Allocates `bytes` of executor memory (256-byte aligned). Synchronous; forbidden during
  // capture (capture_violation).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;

  // Host -> executor memory, stream-ordered; the source may be reused as soon as the call
  // returns. Forbidden during capture (a graph would bake in the host address and read pageable
  // memory at replay): stage inputs before replaying, or copy_on_device from a static buffer.
  virtual void copy_to_device(void* dst, const void* src, std::size_t bytes) = 0;
  // Executor -> executor memory, stream-ordered.
  virtual void copy_on_device(void* dst, const void* src, std::size_t bytes) = 0;
  // Executor memory -> host. Synchronises the stream; forbidden during capture.
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;
  // Sets `bytes` bytes to `value`, stream-ordered.
  virtual void fill_bytes(void* dst, unsigned char value, std::size_t bytes) = 0;

  // Enqueues (or, during capture, records) one row kernel. The launch shape (rows) and params are
  // fixed at this point, exactly as in a captured CUDA graph.
  virtual void launch(const kernel_launch& k) = 0;

  // Runs `enqueue` (which only enqueues work on this executor's stream) and returns how long
  // that work took on the device, in seconds: CUDA events around it on the cuda executor,
  // wall-clock time on the host executor (where the work runs inline). Synchronises; not during
  // capture. For benchmarks and reports.
  virtual double time_device(const std::function<void()>& enqueue) = 0;

  // Waits for all enqueued work. Forbidden during capture.
  virtual void synchronize() = 0;

  // Capture. begin_capture starts recording the stream's work; end_capture returns it as a
  // graph. abort_capture ends a capture whose body failed and leaves the stream usable.
  virtual void begin_capture() = 0;
  virtual std::unique_ptr<graph> end_capture() = 0;
  virtual void abort_capture() noexcept = 0;
  virtual bool capturing() const noexcept = 0;

  // Instantiates (and uploads) a graph. Synchronous host work; forbidden during capture.
  virtual std::unique_ptr<graph_exec> instantiate(const graph& g) = 0;
  // Updates `exec` in place to run `g` (cudaGraphExecUpdate). Returns false when the topology
  // differs and the caller must instantiate instead; `exec` is then unchanged.
  virtual bool update(graph_exec& exec, const graph& g) = 0;
  // Uploads an instantiated graph's resources to the device ahead of its first launch
  // (cudaGraphUpload; instantiate() already uploads once). Stream-ordered; not during capture.
  virtual void upload(graph_exec& exec) = 0;
  // Launches an instantiated graph on the stream. Never allocates or synchronises.
  virtual void launch_graph(graph_exec& exec) = 0;

  const executor_counters& counters() const noexcept { return counters_; }

 protected:
  executor() = default;
  executor_counters counters_;
};

// The host executor; always available.
std::unique_ptr<executor> make_host_executor();

// Whether a CUDA device is usable here (built with CUDA and cudaGetDeviceCount > 0). Probed once.
bool cuda_available() noexcept;
// Why not, for skip messages ("built without CUDA", "cudaErrorInsufficientDriver", ...).
std::string cuda_unavailable_reason();
// The cuda executor on the current device; throws specgraph::unavailable when there is none.
std::unique_ptr<executor> make_cuda_executor();

// "host", "cuda" or "auto" (cuda when available, else host). Throws invalid_argument otherwise.
std::unique_ptr<executor> make_executor(const std::string& kind);

// RAII owner of one executor allocation. Move-only; never throws from its destructor.
class device_buffer {
 public:
  device_buffer() = default;
  device_buffer(executor& ex, std::size_t bytes) : ex_(&ex), bytes_(bytes) {
    data_ = bytes == 0 ? nullptr : ex.allocate(bytes);
  }
  ~device_buffer() { reset(); }
  device_buffer(device_buffer&& o) noexcept : ex_(o.ex_), data_(o.data_), bytes_(o.bytes_) {
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      ex_ = o.ex_;
      data_ = o.data_;
      bytes_ = o.bytes_;
      o.data_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  void* data() const noexcept { return data_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }
  std::size_t size() const noexcept { return bytes_; }

 private:
  void reset() noexcept {
    if (data_ != nullptr) ex_->deallocate(data_);
    data_ = nullptr;
  }
  executor* ex_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace specgraph
