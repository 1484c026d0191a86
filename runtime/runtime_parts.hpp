// Internal: the pieces of draft_runtime shared by its implementation files (runtime.cpp:
// construction, staging and guards; graph_table.cpp: capture, update, replay and DOT files).
#pragma once

#include <chrono>
#include <memory>

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

}  // namespace detail
}  // namespace specgraph
