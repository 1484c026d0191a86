#include <cuda_runtime.h>

#include <chrono>
#include <string>

#include "bench_support.hpp"
#include "specgraph/error.hpp"

namespace specgraph::bench {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw cuda_error(static_cast<int>(e), std::string(what) + ": " + cudaGetErrorName(e));
}
}  // namespace

double device_seconds(executor& ex, const std::function<void()>& enqueue) {
  if (std::string(ex.name()) != "cuda") {
    const auto t0 = std::chrono::steady_clock::now();
    enqueue();
    ex.synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  static cudaEvent_t start = nullptr, stop = nullptr;
  if (start == nullptr) {
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  check(cudaEventRecord(start, ex.stream()), "cudaEventRecord");
  enqueue();
  check(cudaEventRecord(stop, ex.stream()), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  return ms * 1e-3;
}

}  // namespace specgraph::bench
