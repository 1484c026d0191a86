#include <cuda_runtime.h>

#include "testing/cuda_test_kernels.hpp"

namespace specgraph::testing {
namespace {

__global__ void spin_then_write_kernel(long long nanoseconds, std::int64_t* dst,
                                       const std::int64_t* values, std::int64_t n) {
  // globaltimer counts nanoseconds on every architecture we build for.
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (static_cast<long long>(t - t0) < nanoseconds);
  if (dst != nullptr) {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = values[i];
  }
}

}  // namespace

int spin_then_write(device_stream stream, double milliseconds, std::int64_t* dst,
                    const std::int64_t* values, std::int64_t n) {
  spin_then_write_kernel<<<1, 1, 0, stream>>>(static_cast<long long>(milliseconds * 1e6), dst,
                                              values, n);
  return static_cast<int>(cudaPeekAtLastError());
}

}  // namespace specgraph::testing
