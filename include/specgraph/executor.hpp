// The backend seam: one runtime, two executors.
//
//   "cuda": real device memory and a stream: a non-blocking stream of its own, or the engine's
//           stream (non-owning); stream capture, cudaGraphInstantiateWithParams (with upload),
//           cudaGraphExecUpdate, cudaGraphLaunch; kernels launched with cudaLaunchKernelEx and
//           checked by their own return value.
//   "host": an honest emulation for machines without a GPU. "Device" memory is host memory;
//           launching a kernel runs the same host+device row function in a loop; capture records
//           launches, copies and fills, replay runs them in order. Whatever real stream capture
//           forbids (allocating, freeing, synchronising, reading device memory back, copying from
//           host memory) throws specgraph::capture_violation in host mode too, so CPU-green tests
//           do not hide capture bugs. With host_executor_options::deferred, work enqueued outside
//           capture is queued and runs only when the host waits for it (synchronize, an event
//           wait, a read-back), so what CUDA runs asynchronously is asynchronous here too.
//
// Unless stated otherwise, every member enqueues on the executor's one stream, does not
// synchronise, and may be called during capture. An executor is not thread-safe. The cuda
// executor makes its device current for the duration of each call (and restores the caller's),
// so an engine thread whose current device differs cannot enqueue on a mismatched stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "specgraph/conditional.hpp"
#include "specgraph/config.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph {

// Where the other end of an event recorded or waited on during capture is (executor::record_event).
enum class event_scope {
  capture,   // in the same capture: an ordinary edge of the captured graph
  external,  // outside the graph: an event record / wait node, fired at each replay
};

// A captured, not yet instantiated graph. Owned through unique_ptr.
class graph {
 public:
  virtual ~graph() = default;
  virtual std::size_t node_count() const = 0;
  // Writes a Graphviz description (cudaGraphDebugDotPrint on CUDA; the node list on host).
  // Throws specgraph::error when the file cannot be written.
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
  std::int64_t allocations = 0;         // allocate() calls that succeeded
  std::int64_t frees = 0;               // deallocate()/release() of non-null pointers
  std::int64_t pinned_allocations = 0;  // allocate_pinned() calls that succeeded
  std::int64_t synchronizations = 0;    // synchronize() calls
  std::int64_t event_waits = 0;         // synchronize_event() calls that found the event incomplete
  std::int64_t kernel_launches = 0;     // eager launches (not recorded into a graph)
  std::int64_t graph_launches = 0;
  std::int64_t copies_to_device = 0;  // copy_to_device and copy_from_pinned
  std::int64_t copies_to_host = 0;
  // Bytes copied into executor memory per round, the cost inputs read in place avoid
  // (engine_inputs.hpp): bytes_to_device counts copy_to_device and copy_from_pinned;
  // input_bytes_staged the static-input bytes stage_round's kernel writes (device to device),
  // counted when it is enqueued (a stage_round recorded into a capture counts once, there).
  std::int64_t bytes_to_device = 0;
  std::int64_t input_bytes_staged = 0;
};

struct device_timing {
  double device_seconds = 0;  // the enqueued work on the device, host submission excluded
  double submit_seconds = 0;  // host time inside `enqueue` (launch and copy submission)
};

class executor {
 public:
  virtual ~executor() = default;
  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;

  virtual const char* name() const noexcept = 0;
  // The stream work is enqueued on; null on the host executor.
  virtual device_stream stream() const noexcept = 0;

  // ---- memory ---------------------------------------------------------------------------
  // Allocates `bytes` of executor memory (256-byte aligned). Synchronous; forbidden during
  // capture (capture_violation).
  [[nodiscard]] virtual void* allocate(std::size_t bytes) = 0;
  // Total executor memory in bytes (the device's memory on CUDA, this machine's RAM on the host
  // executor): an allocation above it cannot succeed and is refused by name before it is tried.
  [[nodiscard]] virtual std::size_t memory_capacity() = 0;
  // Frees executor memory. Forbidden during capture (cudaFree synchronises the device).
  virtual void deallocate(void* p) = 0;
  // For destructors: frees now, or, during capture, once the capture has ended. Never throws.
  virtual void release(void* p) noexcept = 0;
  // Page-locked host memory (cudaHostAlloc), the source copy_from_pinned needs. Synchronous;
  // forbidden during capture.
  [[nodiscard]] virtual void* allocate_pinned(std::size_t bytes) = 0;
  virtual void deallocate_pinned(void* p) noexcept = 0;

  // ---- copies -----------------------------------------------------------------------------
  // Host -> executor memory, stream-ordered; the source may be reused as soon as the call
  // returns (it is staged first, which may block the host until the stream reaches the copy
  // on CUDA: use copy_from_pinned where that matters). Forbidden during capture (a graph would
  // bake in the host address).
  virtual void copy_to_device(void* dst, const void* src, std::size_t bytes) = 0;
  // Pinned host memory (allocate_pinned) -> executor memory, truly asynchronous: the source is
  // read when the copy runs, so it must not change until an event recorded after this call has
  // completed. Never blocks the host. Forbidden during capture.
  virtual void copy_from_pinned(void* dst, const void* pinned_src, std::size_t bytes) = 0;
  // Executor -> executor memory, stream-ordered.
  virtual void copy_on_device(void* dst, const void* src, std::size_t bytes) = 0;
  // Executor memory -> host. Synchronises the stream; forbidden during capture.
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;
  // Sets `bytes` bytes to `value`, stream-ordered.
  virtual void fill_bytes(void* dst, unsigned char value, std::size_t bytes) = 0;

  // Enqueues (or, during capture, records) one row kernel. The launch shape (rows) and params are
  // fixed at this point, exactly as in a captured CUDA graph. Throws cuda_error when the launch
  // itself fails (its own return value; an error left by someone else is not read).
  virtual void launch(const kernel_launch& k) = 0;

  // ---- events (ordering with the engine's other streams) -----------------------------------
  // Creates / destroys an event owned by the caller. Not during capture.
  [[nodiscard]] virtual device_event create_event() = 0;
  virtual void destroy_event(device_event e) noexcept = 0;
  // Records `e` at the current end of the stream; later work on the stream waits for `e`
  // (recorded on any stream, e.g. the engine's). Neither blocks the host. Outside capture the
  // scope changes nothing. During capture it says which side of the capture the other end is:
  //   event_scope::capture  (the default) the other end is in the same capture (the engine forks
  //       to or joins from another capturing stream): an ordinary edge of the captured graph, no
  //       node; the event cannot be queried, synchronised or waited on outside that capture.
  //       Waiting on an event not recorded in this capture this way throws capture_violation.
  //   event_scope::external  the other end is outside the graph (the engine waits for `done`
  //       after a replay, or recorded `wait_for` before it): an event record / wait node, the
  //       event fires (is waited on) at each replay.
  // Neither is allowed inside a conditional body (capture_violation).
  virtual void record_event(device_event e, event_scope scope) = 0;
  virtual void wait_event(device_event e, event_scope scope) = 0;
  void record_event(device_event e) { record_event(e, event_scope::capture); }
  void wait_event(device_event e) { wait_event(e, event_scope::capture); }
  // Whether the work before the last record of `e` has finished. Forbidden during capture.
  [[nodiscard]] virtual bool event_complete(device_event e) = 0;
  // Blocks the host until `e` has completed (counted in event_waits when it had not).
  // Forbidden during capture.
  virtual void synchronize_event(device_event e) = 0;

  // Runs `enqueue` (which only enqueues work on this executor's stream, without synchronising)
  // and returns how long that work took on the device and how long the host spent enqueueing
  // it. On CUDA the work is queued behind a kernel that blocks the stream until the host has
  // finished enqueueing (as NVBench does), and timed with events around it, so the device time
  // excludes host submission. On the host executor the device time is the wall time of the
  // work (inline, or its queue drained in deferred mode). Synchronises; not during capture.
  virtual device_timing time_device(const std::function<void()>& enqueue) = 0;

  // Waits for all enqueued work. Forbidden during capture.
  virtual void synchronize() = 0;

  // ---- capture ----------------------------------------------------------------------------
  // begin_capture starts recording the stream's work (thread-local mode on CUDA); end_capture
  // returns it as a graph. abort_capture ends a capture whose body failed and leaves the stream
  // usable: after it, stream() is the stream it was before begin_capture (or
  // begin_private_capture). Inside a capture the engine began on this executor's stream it ends
  // only what this executor began there (a conditional body) and restores stream(); the
  // engine's own capture stays the engine's to end (and, holding the aborted work, to discard).
  virtual void begin_capture() = 0;
  [[nodiscard]] virtual std::unique_ptr<graph> end_capture() = 0;
  virtual void abort_capture() noexcept = 0;
  // Like begin_capture, but on CUDA records on a private non-blocking stream of the executor,
  // which stream() returns until end_capture / abort_capture: for a graph built only from what
  // is enqueued through this executor (record_graph, launch, copies), whatever stream() is,
  // including the legacy default stream, which CUDA cannot capture. Work other code enqueues on
  // the previous stream meanwhile is not recorded (nor ordered with the capture, which runs
  // nothing). Host executor: the same as begin_capture (it has no streams). Host work; not
  // during another capture (capture_violation).
  virtual void begin_private_capture() { begin_capture(); }
  // Whether the stream is being captured: by this executor's begin_capture, or (cuda) by anyone
  // else capturing the same stream, e.g. the engine's torch.cuda.graph.
  virtual bool capturing() const noexcept = 0;
  // Whether executor memory is this process's memory and eager work has run when the call that
  // enqueued it returns (the host executor, not deferred, not capturing): a value in it can then
  // be read without a synchronisation. The round's ops use it to refuse an out-of-order call
  // eagerly (docs/metadata.md section 11); false elsewhere (they record a violation instead).
  virtual bool host_visible() const noexcept { return false; }
  // A WHILE node (conditional.hpp), during capture only: begin_while() adds the node after
  // everything recorded so far and records what follows into its body, until end_while(); work
  // recorded after end_while() runs after the loop. The body repeats while its condition is
  // set; the condition starts as `initial` at every launch. On CUDA the body is captured on an
  // internal stream of the executor, which stream() returns meanwhile. Not nestable.
  [[nodiscard]] virtual conditional_handle begin_while(bool initial) = 0;
  virtual void end_while() = 0;
  // Records `g` as one node of the capture under way (a child graph node holding a copy of
  // it): a graph this executor captured, or on CUDA one an engine captured itself and imported
  // with import_cuda_graph (e.g. the torch.cuda.graph of a step body). The memory its nodes
  // use must stay valid while the recording graph is used. During capture only. `g` may not hold
  // a conditional node (CUDA refuses one in a child graph), and inside a conditional body only
  // what a body may (kernels, memsets, device copies, child graphs): anything else is refused
  // here with capture_violation naming it.
  virtual void record_graph(const graph& g) = 0;

  // Instantiates (and uploads) a graph. Synchronous host work; forbidden during capture.
  [[nodiscard]] virtual std::unique_ptr<graph_exec> instantiate(const graph& g) = 0;
  // Updates `exec` in place to run `g` (cudaGraphExecUpdate). Returns false when the topology
  // differs and the caller must instantiate instead; `exec` is then unchanged and no CUDA error
  // is left behind. The rule (CUDA 13's, which the host executor follows): nodes pair up in
  // capture order; the node count, each node's type and the topology of child graphs and WHILE
  // bodies must match. A kernel node's function, launch size and arguments may change (CUDA
  // refuses a function change only across contexts, to CDP, device-side graph calls or a
  // cooperative launch; specgraph launches none of those). Only later launches see the update.
  [[nodiscard]] virtual bool update(graph_exec& exec, const graph& g) = 0;
  // Uploads an instantiated graph's resources to the device ahead of its first launch
  // (cudaGraphUpload; instantiate() already uploads once). Stream-ordered; not during capture.
  virtual void upload(graph_exec& exec) = 0;
  // Launches an instantiated graph on the stream. Never allocates or synchronises. Not during
  // capture.
  virtual void launch_graph(graph_exec& exec) = 0;

  const executor_counters& counters() const noexcept { return counters_; }
  // For ops that copy inputs with a kernel (stage_round): adds to input_bytes_staged.
  void count_input_bytes_staged(std::int64_t bytes) noexcept {
    counters_.input_bytes_staged += bytes;
  }

 protected:
  executor() = default;
  executor_counters counters_;
};

struct host_executor_options {
  // Queue eager work and run it only when the host waits (synchronize, synchronize_event,
  // event_complete never runs it, copy_to_host): an emulation of an asynchronous device.
  bool deferred = false;
};

// The host executor; always available.
std::unique_ptr<executor> make_host_executor(const host_executor_options& options = {});

// Whether a CUDA device is usable here (built with CUDA, cudaGetDeviceCount > 0 and the device's
// compute capability among those compiled in). Probed once.
bool cuda_available() noexcept;
// Why not, for skip messages ("built without CUDA", "cudaErrorInsufficientDriver",
// "built for sm_90 only, device is sm_86", ...). Empty when available.
std::string cuda_unavailable_reason();
// The cuda executor on the current device with a non-blocking stream of its own. Throws
// specgraph::unavailable when there is none.
std::unique_ptr<executor> make_cuda_executor();
// A cuda executor over the engine's stream (non-owning: the stream must outlive it). It pins
// the stream's device (cudaStreamGetDevice; the current device for the legacy stream).
std::unique_ptr<executor> make_cuda_executor(device_stream engine_stream);

// A graph an engine captured itself (a cudaGraph_t, e.g.
// torch.cuda.CUDAGraph(keep_graph=True).raw_cuda_graph()), copied (cudaGraphClone) so the
// engine may destroy its own afterwards, for cuda_executor::record_graph. The memory its nodes
// use (the engine's graph pool) must stay valid while graphs recording it are used. Host work
// only; not during a capture of `cuda_graph` itself. Throws invalid_argument for a null graph or
// one CUDA cannot copy (one holding allocation or conditional nodes), unavailable without CUDA.
std::unique_ptr<graph> import_cuda_graph(void* cuda_graph);

// "host", "cuda" or "auto" (cuda when available, else host). Throws invalid_argument otherwise.
std::unique_ptr<executor> make_executor(const std::string& kind);

namespace detail {

// The one RAII owner of an executor resource: `Handle` (memory or an event) released by the
// executor member `Free` when the owner goes or is assigned over. Move-only (a moved-from owner
// holds nothing); never throws from its destructor (during a capture a device free is deferred
// until the capture ends, see executor::release). Host work only; nothing enqueued but the free.
template <class Handle, void (executor::*Free)(Handle) noexcept>
class executor_owned {
 public:
  executor_owned() = default;
  executor_owned(executor& ex, Handle h, std::size_t bytes) noexcept
      : ex_(&ex), h_(h), bytes_(bytes) {}
  ~executor_owned() { reset(); }
  executor_owned(executor_owned&& o) noexcept
      : ex_(o.ex_), h_(std::exchange(o.h_, Handle{})), bytes_(std::exchange(o.bytes_, 0)) {}
  executor_owned& operator=(executor_owned&& o) noexcept {
    if (this != &o) {
      reset();
      ex_ = o.ex_;
      h_ = std::exchange(o.h_, Handle{});
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  executor_owned(const executor_owned&) = delete;
  executor_owned& operator=(const executor_owned&) = delete;

 protected:
  Handle handle() const noexcept { return h_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void reset() noexcept {
    if (h_ != Handle{}) (ex_->*Free)(h_);
    h_ = Handle{};
  }
  executor* ex_ = nullptr;
  Handle h_{};
  std::size_t bytes_ = 0;
};

// Executor memory of `bytes` (none for 0) from `Alloc`, released by `Free`.
template <void* (executor::*Alloc)(std::size_t), void (executor::*Free)(void*) noexcept>
class executor_memory : public executor_owned<void*, Free> {
 public:
  executor_memory() = default;
  executor_memory(executor& ex, std::size_t bytes)
      : executor_owned<void*, Free>(ex, bytes == 0 ? nullptr : (ex.*Alloc)(bytes), bytes) {}
  void* data() const noexcept { return this->handle(); }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(this->handle());
  }
  std::size_t size() const noexcept { return this->bytes(); }
};

}  // namespace detail

// RAII owner of one executor allocation (executor::allocate / release). Move-only; never throws
// from its destructor (during a capture the free is deferred until the capture ends).
using device_buffer = detail::executor_memory<&executor::allocate, &executor::release>;

// RAII owner of pinned host memory (executor::allocate_pinned / deallocate_pinned). Move-only.
using pinned_buffer =
    detail::executor_memory<&executor::allocate_pinned, &executor::deallocate_pinned>;

// RAII owner of one executor event (executor::create_event / destroy_event). Move-only.
class event_handle : public detail::executor_owned<device_event, &executor::destroy_event> {
 public:
  event_handle() = default;
  explicit event_handle(executor& ex) : executor_owned(ex, ex.create_event(), 0) {}
  device_event get() const noexcept { return handle(); }
};

}  // namespace specgraph
