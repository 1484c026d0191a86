// Internal: the pieces of draft_runtime shared by its implementation files (runtime.cpp:
// construction, staging and guards; graph_table.cpp: capture, update, replay and DOT files;
// runtime_verify.cpp: the verify graphs; runtime_extend.cpp, runtime_device_round.cpp: the
// extend and device-round graphs), the one capture loop of the draft and verify graphs
// among them (detail::capture_body, detail::capture_timed).
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/runtime.hpp"

namespace specgraph {

struct draft_runtime::graph_slot {
  std::unique_ptr<graph> captured;
  std::unique_ptr<graph_exec> exec;
};

// One pinned host slot of the staging ring: the small inputs laid out exactly as in the arena
// (real_batch, req_pool_index, seq_len), then out_cache_loc; `copied` is recorded after the two
// copies that read the slot, and waited on before the slot is written again.
struct draft_runtime::staging_slot {
  pinned_buffer memory;
  event_handle copied;
  bool in_flight = false;
  std::size_t cache_loc_offset = 0;  // byte offset of out_cache_loc in `memory`
};

// Runs `body`; a cuda_error escaping it puts the runtime into its refusing state.
template <class F>
void draft_runtime::guarding_cuda(F&& body) {
  try {
    body();
  } catch (const cuda_error& e) {
    failure_ = e.what();
    throw;
  }
}

namespace detail {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// The one capture of a graph's body (draft and verify graphs): begin_capture on ex's stream,
// body(), end_capture. A failure aborts the capture; capture-related CUDA errors and every other
// exception become capture_failed(bucket, step, what + the message); any other cuda_error (an
// illegal address, a launch failure: the context may be broken) is stored in `failure` (the
// runtime then refuses further work) and rethrown as it is.
template <class Body>
std::unique_ptr<graph> capture_body(executor& ex, std::int32_t bucket, std::int32_t step,
                                    const std::string& what, std::string& failure, Body&& body) {
  try {
    ex.begin_capture();
  } catch (const cuda_error& e) {
    failure = e.what();
    throw;
  }
  try {
    body();
    return ex.end_capture();
  } catch (const cuda_error& e) {
    ex.abort_capture();
    if (e.capture_related()) throw capture_failed(bucket, step, what + e.what());
    failure = e.what();
    throw;
  } catch (const std::exception& e) {
    ex.abort_capture();
    throw capture_failed(bucket, step, what + e.what());
  }
}

// One turn of the capture loops (draft graphs per bucket and step, verify graphs per bucket):
// capture() times the capture and returns the graph, install(graph, timing) puts it into its
// slot; then the report counts it and progress(graphs so far, total) is called.
template <class Capture, class Install>
void capture_timed(std::int32_t bucket, std::int32_t step, capture_report& report,
                   const std::function<void(int, int)>& progress, int total, Capture&& capture,
                   Install&& install) {
  graph_timing t;
  t.bucket = bucket;
  t.step = step;
  const auto t0 = clock_type::now();
  std::unique_ptr<graph> g = capture();
  t.capture_seconds = seconds_since(t0);
  install(std::move(g), t);
  ++report.graphs;
  if (progress) progress(report.graphs, total);
}

}  // namespace detail
}  // namespace specgraph
