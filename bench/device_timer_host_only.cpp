#include <chrono>

#include "bench_support.hpp"

namespace specgraph::bench {

double device_seconds(executor& ex, const std::function<void()>& enqueue) {
  const auto t0 = std::chrono::steady_clock::now();
  enqueue();
  ex.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace specgraph::bench
