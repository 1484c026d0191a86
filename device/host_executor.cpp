// The host executor: the CPU emulation of the cuda executor (see executor.hpp). Its recorded
// operations and graphs are in host_graph.hpp.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/host_graph.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph {
namespace {

using detail::as_event;
using detail::check_recordable;
using detail::forbid_captured;
using detail::host_event;
using detail::host_graph;
using detail::host_graph_exec;
using detail::host_node;
using detail::same_topology;

class host_executor final : public executor {
 public:
  explicit host_executor(const host_executor_options& o) : options_(o) {}
  ~host_executor() override {
    for (void* p : deferred_frees_) std::free(p);
  }

  const char* name() const noexcept override { return "host"; }
  device_stream stream() const noexcept override { return nullptr; }

  void* allocate(std::size_t bytes) override {
    forbid_during_capture("allocate");
    void* p = aligned(bytes);
    ++counters_.allocations;
    return p;
  }
  std::size_t memory_capacity() override {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return static_cast<std::size_t>(-1);  // unknown: no limit
    return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
  }
  void deallocate(void* p) override {
    forbid_during_capture("deallocate (cudaFree synchronises the device)");
    free_now(p);
  }
  void release(void* p) noexcept override {
    if (p == nullptr) return;
    if (capturing_) {
      deferred_frees_.push_back(p);  // freed when the capture ends
    } else {
      free_now(p);
    }
  }
  void* allocate_pinned(std::size_t bytes) override {
    forbid_during_capture("allocate_pinned");
    void* p = aligned(bytes);
    ++counters_.pinned_allocations;
    return p;
  }
  void deallocate_pinned(void* p) noexcept override { std::free(p); }

  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    // A graph would bake in the host source address; the cuda executor refuses this during
    // capture, so the emulation does too.
    forbid_during_capture("copy_to_device (a copy from host memory)");
    ++counters_.copies_to_device;
    counters_.bytes_to_device += static_cast<std::int64_t>(bytes);
    host_node n;
    n.type = host_node::kind::copy;
    n.dst = dst;
    n.bytes = bytes;
    // Pageable semantics: the source is staged now and may be reused at once.
    const auto* s = static_cast<const unsigned char*>(src);
    n.params.assign(s, s + bytes);
    submit(std::move(n));
  }
  void copy_from_pinned(void* dst, const void* pinned_src, std::size_t bytes) override {
    forbid_during_capture("copy_from_pinned (a copy from host memory)");
    ++counters_.copies_to_device;
    counters_.bytes_to_device += static_cast<std::int64_t>(bytes);
    host_node n;
    n.type = host_node::kind::copy;
    n.dst = dst;
    n.src = pinned_src;  // read when the copy runs, as a DMA from pinned memory does
    n.bytes = bytes;
    submit(std::move(n));
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override {
    host_node n;
    n.type = host_node::kind::copy;
    n.dst = dst;
    n.src = src;
    n.bytes = bytes;
    submit(std::move(n));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    forbid_during_capture("copy_to_host (a host read of device memory)");
    drain();
    ++counters_.copies_to_host;
    std::memmove(dst, src, bytes);
  }
  void fill_bytes(void* dst, unsigned char value, std::size_t bytes) override {
    host_node n;
    n.type = host_node::kind::fill;
    n.dst = dst;
    n.value = value;
    n.bytes = bytes;
    submit(std::move(n));
  }

  void launch(const kernel_launch& k) override {
    if (k.host_run == nullptr)
      throw error(std::string("kernel '") + (k.name ? k.name : "?") +
                  "' has no host implementation");
    if (k.rows < 0)
      throw invalid_argument("rows", "rows: kernel '" + std::string(k.name) +
                                         "' has a negative row count " + std::to_string(k.rows));
    host_node n;
    n.type = host_node::kind::kernel;
    n.name = k.name;
    n.rows = k.rows;
    n.run = k.host_run;
    const auto* bytes = static_cast<const unsigned char*>(k.params);
    n.params.assign(bytes, bytes + k.params_size);
    if (!capturing_) ++counters_.kernel_launches;
    submit(std::move(n));
  }

  device_event create_event() override {
    forbid_during_capture("create_event");
    return reinterpret_cast<device_event>(new host_event());  // NOLINT: opaque handle
  }
  void destroy_event(device_event e) noexcept override { delete as_event(e); }
  using executor::record_event;
  using executor::wait_event;
  void record_event(device_event e, event_scope scope) override {
    forbid_in_conditional_body("an event record");
    host_event* ev = as_event(e);
    if (capturing_ && scope == event_scope::capture) {
      // CUDA's ordinary record during capture: no node; the event now belongs to this capture,
      // and a wait on it in the same capture is an edge (one stream here: order is given).
      ev->captured_in = capture_id_;
      return;
    }
    ev->captured_in = 0;
    if (capturing_) {
      // An external record node: at each replay the event is recorded again. A replay runs the
      // whole graph as one operation, so the event completes with it.
      host_node n;
      n.type = host_node::kind::event;
      n.recorded_event = ev;
      recorded_.push_back(std::move(n));
      return;
    }
    ev->recorded_at = submitted_;
  }
  void wait_event(device_event e, event_scope scope) override {
    forbid_in_conditional_body("an event wait");
    const host_event* ev = as_event(e);
    if (!capturing_) {
      forbid_captured(ev, "wait_event");
      return;  // one stream: everything recorded on this executor is already ordered before
    }
    if (scope == event_scope::capture) {
      if (ev->captured_in != capture_id_) {
        throw capture_violation(
            "host executor: wait_event(event_scope::capture) during capture on an event not "
            "recorded in this capture (CUDA refuses it); for an event recorded outside the "
            "graph (before the capture, or by the engine at replay) pass event_scope::external");
      }
      return;  // an edge inside the capture, no node
    }
    // An external wait node keeps the graph's shape comparable with CUDA's.
    host_node n;
    n.type = host_node::kind::event;
    recorded_.push_back(std::move(n));
  }
  bool event_complete(device_event e) override {
    forbid_during_capture("event_complete (cudaEventQuery)");
    forbid_captured(as_event(e), "event_complete");
    return executed_ >= as_event(e)->recorded_at;
  }
  void synchronize_event(device_event e) override {
    forbid_during_capture("synchronize_event");
    forbid_captured(as_event(e), "synchronize_event");
    const std::int64_t target = as_event(e)->recorded_at;
    if (executed_ >= target) return;
    ++counters_.event_waits;
    while (executed_ < target) run_one();
  }

  device_timing time_device(const std::function<void()>& enqueue) override {
    forbid_during_capture("time_device");
    drain();
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    enqueue();
    const auto submitted = clock::now();
    drain();
    device_timing t;
    t.submit_seconds = std::chrono::duration<double>(submitted - start).count();
    t.device_seconds = std::chrono::duration<double>(clock::now() - start).count();
    return t;
  }

  void synchronize() override {
    forbid_during_capture("synchronize");
    drain();
    ++counters_.synchronizations;
  }

  void begin_capture() override {
    if (capturing_) throw capture_violation("host executor: begin_capture while already capturing");
    capturing_ = true;
    ++capture_id_;
    recorded_.clear();
  }
  std::unique_ptr<graph> end_capture() override {
    if (!capturing_) throw capture_violation("host executor: end_capture without begin_capture");
    if (while_body_) {
      abort_capture();
      throw capture_violation("host executor: end_capture inside a conditional body");
    }
    end_capture_state();
    return std::make_unique<host_graph>(std::exchange(recorded_, {}));
  }
  void abort_capture() noexcept override {
    if (!capturing_) return;
    end_capture_state();
    recorded_.clear();
  }
  conditional_handle begin_while(bool initial) override {
    if (!capturing_) throw capture_violation("host executor: begin_while outside capture");
    if (while_body_) throw capture_violation("host executor: conditional nodes do not nest here");
    while_body_ = std::make_shared<std::vector<host_node>>();
    while_condition_ = std::make_shared<unsigned>(initial ? 1u : 0u);
    while_initial_ = initial;
    return static_cast<conditional_handle>(
        reinterpret_cast<std::uintptr_t>(while_condition_.get()));
  }
  void end_while() override {
    if (!while_body_) throw capture_violation("host executor: end_while without begin_while");
    host_node n;
    n.type = host_node::kind::loop;
    n.body = std::move(while_body_);
    n.condition = std::move(while_condition_);
    n.initial = while_initial_;
    while_body_.reset();
    recorded_.push_back(std::move(n));
  }
  void record_graph(const graph& g) override {
    if (!capturing_) throw capture_violation("host executor: record_graph outside capture");
    const auto& nodes = as_host(g).nodes();
    check_recordable(nodes, while_body_ != nullptr);
    host_node n;
    n.type = host_node::kind::graph;
    n.graph_nodes = std::make_shared<const std::vector<host_node>>(nodes);
    (while_body_ ? *while_body_ : recorded_).push_back(std::move(n));
  }
  bool capturing() const noexcept override { return capturing_; }
  bool host_visible() const noexcept override { return !options_.deferred && !capturing_; }

  std::unique_ptr<graph_exec> instantiate(const graph& g) override {
    forbid_during_capture("instantiate");
    return std::make_unique<host_graph_exec>(as_host(g).nodes());
  }
  bool update(graph_exec& exec, const graph& g) override {
    forbid_during_capture("update");
    auto& e = static_cast<host_graph_exec&>(exec);
    const auto& nodes = as_host(g).nodes();
    if (!same_topology(*e.nodes_, nodes)) return false;
    e.nodes_ = std::make_shared<const std::vector<host_node>>(nodes);
    return true;
  }
  void upload(graph_exec&) override { forbid_during_capture("upload"); }
  void launch_graph(graph_exec& exec) override {
    if (capturing_) throw capture_violation("host executor: graph launch during capture");
    ++counters_.graph_launches;
    host_node n;
    n.type = host_node::kind::graph;
    n.graph_nodes = static_cast<host_graph_exec&>(exec).nodes_;
    const auto nodes = n.graph_nodes;
    submit(std::move(n));
    mark_recorded_events(*nodes);
  }

 private:
  static const host_graph& as_host(const graph& g) {
    const auto* h = dynamic_cast<const host_graph*>(&g);
    if (h == nullptr) throw error("host executor: graph was not captured by a host executor");
    return *h;
  }
  static void* aligned(std::size_t bytes) {
    const std::size_t rounded = (bytes + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
    if (p == nullptr)
      throw error("host executor: allocation of " + std::to_string(bytes) + " bytes failed");
    return p;
  }
  void free_now(void* p) noexcept {
    if (p == nullptr) return;
    ++counters_.frees;
    std::free(p);
  }
  void forbid_during_capture(const char* what) const {
    if (capturing_) {
      throw capture_violation(std::string("host executor: ") + what +
                              " is not allowed during graph capture (CUDA stream capture forbids "
                              "it; allocate and read back outside capture)");
    }
  }
  // Event nodes, in a graph and in the graphs it records, fire at each launch.
  void mark_recorded_events(const std::vector<host_node>& nodes) const {
    for (const host_node& node : nodes) {
      if (node.recorded_event != nullptr) node.recorded_event->recorded_at = submitted_;
      if (node.type == host_node::kind::graph) mark_recorded_events(*node.graph_nodes);
    }
  }
  void forbid_in_conditional_body(const char* what) const {
    if (while_body_) {
      throw capture_violation(std::string("host executor: ") + what +
                              " is not allowed inside a conditional body (CUDA allows only "
                              "kernels, memsets and device copies there)");
    }
  }
  void end_capture_state() noexcept {
    capturing_ = false;
    while_body_.reset();
    while_condition_.reset();
    for (void* p : deferred_frees_) free_now(p);
    deferred_frees_.clear();
  }
  void submit(host_node n) {
    if (capturing_) {
      (while_body_ ? *while_body_ : recorded_).push_back(std::move(n));
      return;
    }
    ++submitted_;
    if (options_.deferred) {
      queue_.push_back(std::move(n));
    } else {
      n.execute();
      ++executed_;
    }
  }
  void run_one() {
    host_node n = std::move(queue_.front());
    queue_.pop_front();
    n.execute();
    ++executed_;
  }
  void drain() {
    while (!queue_.empty()) run_one();
  }

  host_executor_options options_;
  bool capturing_ = false;
  std::uint64_t capture_id_ = 0;  // counts begin_capture calls: the current capture's id
  std::vector<host_node> recorded_;
  std::shared_ptr<std::vector<host_node>> while_body_;  // set between begin_while and end_while
  std::shared_ptr<unsigned> while_condition_;
  bool while_initial_ = false;
  std::vector<void*> deferred_frees_;
  std::deque<host_node> queue_;  // deferred mode: submitted, not yet executed
  std::int64_t submitted_ = 0;   // operations submitted outside capture
  std::int64_t executed_ = 0;    // of which executed
};

}  // namespace

std::unique_ptr<executor> make_host_executor(const host_executor_options& options) {
  return std::make_unique<host_executor>(options);
}

std::unique_ptr<executor> make_executor(const std::string& kind) {
  if (kind == "host") return make_host_executor();
  if (kind == "cuda") return make_cuda_executor();
  if (kind == "auto") return cuda_available() ? make_cuda_executor() : make_host_executor();
  throw invalid_argument("executor", "executor: '" + kind + "' is not one of host, cuda, auto");
}

}  // namespace specgraph
