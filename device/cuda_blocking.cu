#include "device/cuda_blocking.hpp"

namespace specgraph::detail {
namespace {

__global__ void blocking_kernel(const volatile int* release, int* timed_out, long long timeout_ns) {
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (*release == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (static_cast<long long>(t - t0) > timeout_ns) {
      *timed_out = 1;
      return;
    }
  }
}

}  // namespace

cudaError_t launch_blocking_kernel(cudaStream_t stream, const volatile int* release, int* timed_out,
                                   long long timeout_ns) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(1);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, blocking_kernel, release, timed_out, timeout_ns);
}

cudaError_t load_blocking_kernel() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, blocking_kernel);
}

}  // namespace specgraph::detail
