// The host executor: the CPU emulation of the cuda executor (see executor.hpp).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph {
namespace {

// An event is a position in the executor's stream of operations: complete once every operation
// submitted before its last record has executed.
struct host_event {
  std::int64_t recorded_at = 0;
};

// One operation: a kernel launch (params copied at record time, as a graph kernel node copies
// its arguments), a copy or fill whose addresses are fixed at record time, a whole graph launch,
// or the point where an event is recorded.
struct host_node {
  enum class kind { kernel, copy, fill, graph, event, loop } type = kind::kernel;
  std::string name;
  std::int64_t rows = 0;
  host_rows_fn run = nullptr;
  std::vector<unsigned char> params;  // kernel params, or a staged copy source
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  unsigned char value = 0;
  std::shared_ptr<const std::vector<host_node>> graph_nodes;  // kind::graph
  struct host_event* recorded_event = nullptr;                // kind::event: a record node
  // kind::loop: a WHILE node; its body repeats while *condition is set (kernels set it through
  // the handle, the condition's address, which copies of the node share).
  std::shared_ptr<std::vector<host_node>> body;
  std::shared_ptr<unsigned> condition;
  bool initial = false;

  void execute() const {
    switch (type) {
      case kind::kernel: run(params.data(), rows); break;
      case kind::copy: std::memmove(dst, src != nullptr ? src : params.data(), bytes); break;
      case kind::fill: std::memset(dst, value, bytes); break;
      case kind::graph:
        for (const host_node& n : *graph_nodes) n.execute();
        break;
      case kind::event: break;
      case kind::loop: run_loop(); break;
    }
  }

  void run_loop() const {
    // A body whose condition never clears would hang a GPU too; here it is reported instead.
    constexpr std::int64_t max_iterations = std::int64_t{1} << 24;
    *condition = initial ? 1u : 0u;
    for (std::int64_t i = 0; *condition != 0; ++i) {
      if (i == max_iterations) {
        throw error(
            "host executor: a conditional WHILE body ran 2^24 times without clearing its "
            "condition");
      }
      for (const host_node& n : *body) n.execute();
    }
  }
};

host_event* as_event(device_event e) {
  return reinterpret_cast<host_event*>(e);  // NOLINT: the handle is a host_event we created
}

class host_graph final : public graph {
 public:
  explicit host_graph(std::vector<host_node> nodes) : nodes_(std::move(nodes)) {}
  std::size_t node_count() const override { return nodes_.size(); }
  const std::vector<host_node>& nodes() const { return nodes_; }

  void write_dot(const std::string& path) const override {
    std::ofstream out(path);
    if (!out) throw error("cannot write graph description to '" + path + "'");
    out << "digraph host_graph {\n  rankdir=TB;\n";
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const host_node& n = nodes_[i];
      out << "  n" << i << " [shape=box,label=\"";
      switch (n.type) {
        case host_node::kind::kernel: out << "kernel " << n.name << "\\nrows " << n.rows; break;
        case host_node::kind::copy: out << "copy " << n.bytes << " bytes"; break;
        case host_node::kind::fill: out << "fill " << n.bytes << " bytes"; break;
        case host_node::kind::graph: out << "graph"; break;
        case host_node::kind::event: out << "event"; break;
        case host_node::kind::loop: out << "while (" << n.body->size() << " body nodes)"; break;
      }
      out << "\"];\n";
      if (i > 0) out << "  n" << (i - 1) << " -> n" << i << ";\n";
    }
    out << "}\n";
    if (!out) throw error("cannot write graph description to '" + path + "'");
  }

 private:
  std::vector<host_node> nodes_;
};

class host_graph_exec final : public graph_exec {
 public:
  explicit host_graph_exec(std::vector<host_node> nodes)
      : nodes_(std::make_shared<const std::vector<host_node>>(std::move(nodes))) {}
  // Launches already queued keep the nodes they were launched with (as CUDA's update affects
  // only later launches).
  std::shared_ptr<const std::vector<host_node>> nodes_;
};

bool same_topology(const std::vector<host_node>& a, const std::vector<host_node>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].type != b[i].type || a[i].run != b[i].run) return false;
    if (a[i].type == host_node::kind::loop && !same_topology(*a[i].body, *b[i].body)) return false;
  }
  return true;
}

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
  void record_event(device_event e) override {
    forbid_in_conditional_body("an event record");
    if (capturing_) {
      // An external record node: at each replay the event is recorded again. A replay runs the
      // whole graph as one operation, so the event completes with it.
      host_node n;
      n.type = host_node::kind::event;
      n.recorded_event = as_event(e);
      recorded_.push_back(std::move(n));
      return;
    }
    as_event(e)->recorded_at = submitted_;
  }
  void wait_event(device_event) override {
    forbid_in_conditional_body("an event wait");
    // One stream: everything recorded anywhere on this executor is already ordered before what
    // follows. A wait node keeps the graph's shape comparable with CUDA's.
    if (capturing_) {
      host_node n;
      n.type = host_node::kind::event;
      recorded_.push_back(std::move(n));
    }
  }
  bool event_complete(device_event e) override {
    forbid_during_capture("event_complete (cudaEventQuery)");
    return executed_ >= as_event(e)->recorded_at;
  }
  void synchronize_event(device_event e) override {
    forbid_during_capture("synchronize_event");
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
  bool capturing() const noexcept override { return capturing_; }

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
    for (const host_node& node : *nodes) {
      if (node.recorded_event != nullptr) node.recorded_event->recorded_at = submitted_;
    }
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
