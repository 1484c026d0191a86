// Internal: the host executor's recorded work (docs: executor.hpp, "host"): operations, events,
// captured graphs and their instantiations. Used only by host_executor.cpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph::detail {

// An event is a position in the executor's stream of operations: complete once every operation
// submitted before its last record has executed.
struct host_event {
  std::int64_t recorded_at = 0;
  // Nonzero while the event was last recorded with event_scope::capture inside a capture: the
  // id of that capture (CUDA: the event belongs to the capture until it is recorded again).
  std::uint64_t captured_in = 0;
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

inline host_event* as_event(device_event e) {
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

// Whether `b` can update an instantiation of `a`: cudaGraphExecUpdate's rule (CUDA 13,
// cuda_runtime_api.h) as it applies to what the host executor records. Nodes pair up in capture
// order; the count, each node's type and, recursively, the topology of child graphs (as
// cudaGraphExecChildGraphNodeSetParams requires) and of WHILE bodies must match. A kernel node's
// function MAY change (CUDA refuses that only across contexts, to or from CDP, device-side graph
// calls or cooperative launches, none of which a host kernel can be), as may its rows, params,
// copy and fill addresses, sizes and values. A WHILE node pairs only with itself (the same
// conditional handle): CUDA 13 refuses a conditional node's parameters changing by update.
inline bool same_topology(const std::vector<host_node>& a, const std::vector<host_node>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].type != b[i].type) return false;
    // CUDA 13 does not change a conditional node's parameters by update: a WHILE node captured
    // again has a new conditional handle (its condition here), so cudaGraphExecUpdate refuses
    // it and the caller instantiates. Only the same node (the same graph again) updates.
    if (a[i].type == host_node::kind::loop &&
        (a[i].condition != b[i].condition || a[i].initial != b[i].initial)) {
      return false;
    }
    if (a[i].type == host_node::kind::loop && !same_topology(*a[i].body, *b[i].body)) return false;
    if (a[i].type == host_node::kind::graph &&
        !same_topology(*a[i].graph_nodes, *b[i].graph_nodes)) {
      return false;
    }
  }
  return true;
}

// What a recorded graph (a child graph node) may not hold, as CUDA refuses it: a conditional
// node at any depth, and inside a conditional body an event node.
inline void check_recordable(const std::vector<host_node>& nodes, bool in_conditional_body) {
  for (const host_node& node : nodes) {
    if (node.type == host_node::kind::loop) {
      throw capture_violation(
          "host executor: record_graph: a graph with a conditional node cannot be recorded "
          "(it would become a child graph, and CUDA refuses conditional nodes in child "
          "graphs); record its work with begin_while instead");
    }
    if (in_conditional_body && node.type == host_node::kind::event) {
      throw capture_violation(
          "host executor: record_graph: a graph with an event node is not allowed inside a "
          "conditional body (CUDA allows only kernels, memsets, device copies, child graphs "
          "and conditional nodes there)");
    }
    if (node.type == host_node::kind::graph) {
      check_recordable(*node.graph_nodes, in_conditional_body);
    }
  }
}

// CUDA's cudaErrorCapturedEvent: an event last recorded inside a capture (event_scope::capture)
// cannot be waited on, queried or synchronised outside it.
inline void forbid_captured(const host_event* ev, const char* what) {
  if (ev->captured_in != 0) {
    throw capture_violation(std::string("host executor: ") + what +
                            " on an event last recorded inside a capture with "
                            "event_scope::capture (CUDA refuses it); record it with "
                            "event_scope::external to use it after a replay");
  }
}

}  // namespace specgraph::detail
