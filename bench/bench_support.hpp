// Shared pieces of the benchmark programs.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "specgraph/executor.hpp"

namespace specgraph::bench {

// The executors this machine can run: always "host", plus "cuda" when a device is usable.
inline std::vector<std::string> available_executors() {
  std::vector<std::string> out{"host"};
  if (cuda_available()) out.push_back("cuda");
  return out;
}

// One executor per kind for the whole program (a CUDA context is expensive to create).
inline executor& shared_executor(const std::string& kind) {
  static std::unique_ptr<executor> host, cuda;
  std::unique_ptr<executor>& slot = kind == "cuda" ? cuda : host;
  if (!slot) slot = make_executor(kind);
  return *slot;
}

// Device time of the work `enqueue` puts on the executor's stream, in seconds (CUDA events on
// the cuda executor, wall clock on the host executor).
inline double device_seconds(executor& ex, const std::function<void()>& enqueue) {
  return ex.time_device(enqueue);
}

}  // namespace specgraph::bench
