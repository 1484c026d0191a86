// The host executor: the CPU emulation of the cuda executor (see executor.hpp).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph {
namespace {

// One recorded operation: a kernel launch (params copied at record time, as a graph kernel node
// copies its arguments) or a copy/fill whose addresses are fixed at record time.
struct host_node {
  enum class kind { kernel, copy, fill } type = kind::kernel;
  std::string name;
  std::int64_t rows = 0;
  host_rows_fn run = nullptr;
  std::vector<unsigned char> params;
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  unsigned char value = 0;

  void execute() const {
    switch (type) {
      case kind::kernel: run(params.data(), rows); break;
      case kind::copy: std::memmove(dst, src, bytes); break;
      case kind::fill: std::memset(dst, value, bytes); break;
    }
  }
};

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
      }
      out << "\"];\n";
      if (i > 0) out << "  n" << (i - 1) << " -> n" << i << ";\n";
    }
    out << "}\n";
  }

 private:
  std::vector<host_node> nodes_;
};

class host_graph_exec final : public graph_exec {
 public:
  explicit host_graph_exec(std::vector<host_node> nodes) : nodes_(std::move(nodes)) {}
  std::vector<host_node>& nodes() { return nodes_; }

 private:
  std::vector<host_node> nodes_;
};

bool same_topology(const std::vector<host_node>& a, const std::vector<host_node>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].type != b[i].type || a[i].run != b[i].run) return false;
  }
  return true;
}

class host_executor final : public executor {
 public:
  const char* name() const noexcept override { return "host"; }
  device_stream stream() const noexcept override { return nullptr; }

  void* allocate(std::size_t bytes) override {
    forbid_during_capture("allocate");
    const std::size_t rounded = (bytes + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
    if (p == nullptr)
      throw error("host executor: allocation of " + std::to_string(bytes) + " bytes failed");
    ++counters_.allocations;
    return p;
  }
  void deallocate(void* p) noexcept override { std::free(p); }

  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    // A graph would bake in the host source address and read pageable memory at replay time;
    // the cuda executor refuses this during capture, so the emulation does too.
    forbid_during_capture("copy_to_device (a copy from host memory)");
    ++counters_.copies_to_device;
    std::memmove(dst, src, bytes);
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override {
    record_or_run_copy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    forbid_during_capture("copy_to_host (a host read of device memory)");
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
      throw invalid_argument("rows", "kernel '" + std::string(k.name) + "': negative row count " +
                                         std::to_string(k.rows));
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

  double time_device(const std::function<void()>& enqueue) override {
    forbid_during_capture("time_device");
    const auto start = std::chrono::steady_clock::now();
    enqueue();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  void synchronize() override {
    forbid_during_capture("synchronize");
    ++counters_.synchronizations;
  }

  void begin_capture() override {
    if (capturing_) throw capture_violation("host executor: begin_capture while already capturing");
    capturing_ = true;
    recorded_.clear();
  }
  std::unique_ptr<graph> end_capture() override {
    if (!capturing_) throw capture_violation("host executor: end_capture without begin_capture");
    capturing_ = false;
    return std::make_unique<host_graph>(std::exchange(recorded_, {}));
  }
  void abort_capture() noexcept override {
    capturing_ = false;
    recorded_.clear();
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
    if (!same_topology(e.nodes(), nodes)) return false;
    e.nodes() = nodes;
    return true;
  }
  void upload(graph_exec&) override { forbid_during_capture("upload"); }
  void launch_graph(graph_exec& exec) override {
    if (capturing_) throw capture_violation("host executor: graph launch during capture");
    ++counters_.graph_launches;
    for (const host_node& n : static_cast<host_graph_exec&>(exec).nodes()) n.execute();
  }

 private:
  static const host_graph& as_host(const graph& g) {
    const auto* h = dynamic_cast<const host_graph*>(&g);
    if (h == nullptr) throw error("host executor: graph was not captured by a host executor");
    return *h;
  }
  void forbid_during_capture(const char* what) const {
    if (capturing_) {
      throw capture_violation(std::string("host executor: ") + what +
                              " is not allowed during graph capture (CUDA stream capture forbids "
                              "it; allocate and read back outside capture)");
    }
  }
  void record_or_run_copy(void* dst, const void* src, std::size_t bytes) {
    host_node n;
    n.type = host_node::kind::copy;
    n.dst = dst;
    n.src = src;
    n.bytes = bytes;
    submit(std::move(n));
  }
  void submit(host_node n) {
    if (capturing_) {
      recorded_.push_back(std::move(n));
    } else {
      n.execute();
    }
  }

  bool capturing_ = false;
  std::vector<host_node> recorded_;
};

}  // namespace

std::unique_ptr<executor> make_host_executor() {
  return std::make_unique<host_executor>();
}

std::unique_ptr<executor> make_executor(const std::string& kind) {
  if (kind == "host") return make_host_executor();
  if (kind == "cuda") return make_cuda_executor();
  if (kind == "auto") return cuda_available() ? make_cuda_executor() : make_host_executor();
  throw invalid_argument("executor", "executor '" + kind + "' is not one of host, cuda, auto");
}

}  // namespace specgraph
