#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "bench/stream_timer.hpp"
#include "specgraph/error.hpp"

namespace specgraph::bench {
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw error(std::string("stream_timer: ") + what + ": " + cudaGetErrorString(e));
}
}  // namespace

struct stream_timer::impl {
  executor* ex = nullptr;
  std::vector<cudaEvent_t> events;
};

stream_timer::stream_timer(executor& ex, int count) : impl_(new impl) {
  if (std::string(ex.name()) != "cuda") {
    throw error(std::string("stream_timer: needs the cuda executor, not '") + ex.name() + "'");
  }
  impl_->ex = &ex;
  for (int i = 0; i < count; ++i) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate");
    impl_->events.push_back(e);
  }
}

stream_timer::~stream_timer() {
  for (cudaEvent_t e : impl_->events) (void)cudaEventDestroy(e);
}

void stream_timer::record(int i) {
  check(cudaEventRecord(impl_->events.at(static_cast<std::size_t>(i)), impl_->ex->stream()),
        "cudaEventRecord");
}

double stream_timer::seconds(int from, int to) {
  cudaEvent_t a = impl_->events.at(static_cast<std::size_t>(from));
  cudaEvent_t b = impl_->events.at(static_cast<std::size_t>(to));
  check(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return 1e-3 * static_cast<double>(ms);
}

}  // namespace specgraph::bench
