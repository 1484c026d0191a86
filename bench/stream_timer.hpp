// Timing events on an executor's stream, for the benchmarks that time work the host drives with
// synchronisations in between (time_device cannot: it queues the work behind a spinning kernel).
// CUDA only: cudaEvent_t with timing (the executor's own events are created without timing).
// On the host executor, or in a build without CUDA, the constructor throws specgraph::error.
#pragma once

#include <memory>

#include "specgraph/executor.hpp"

namespace specgraph::bench {

class stream_timer {
 public:
  // `count` events. Throws specgraph::error when `ex` is not a CUDA executor.
  stream_timer(executor& ex, int count);
  ~stream_timer();
  stream_timer(const stream_timer&) = delete;
  stream_timer& operator=(const stream_timer&) = delete;
  // Records event i at the current end of the executor's stream. Does not block the host; not
  // during capture.
  void record(int i);
  // Seconds between events `from` and `to` (both recorded). Blocks the host until `to` has
  // completed (a cudaEventSynchronize, not counted in the executor's counters).
  double seconds(int from, int to);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace specgraph::bench
