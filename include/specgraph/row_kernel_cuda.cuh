// CUDA side of row kernels: include from a .cu file to get cuda_rows<K>, the launcher to pass
// to make_kernel_launch. One thread per row, fixed block size, grid derived from the row count
// only, so the launch shape is a pure function of the params (what graph capture bakes in).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "specgraph/row_kernel.hpp"

namespace specgraph {

inline constexpr int row_kernel_block = 128;

template <class K>
__global__ void __launch_bounds__(row_kernel_block)
    row_trampoline(const typename K::params p, std::int64_t rows) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row < rows) K::run_row(p, row);
}

// Launched with cudaLaunchKernelEx, whose return value is this launch's status: an error left
// behind by someone else (cudaGetLastError) is neither read nor blamed on the kernel.
template <class K>
int cuda_rows(const void* params, std::int64_t rows, device_stream stream) {
  if (rows <= 0) return 0;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>((rows + row_kernel_block - 1) / row_kernel_block));
  config.blockDim = dim3(row_kernel_block);
  config.stream = stream;
  const cudaError_t e = cudaLaunchKernelEx(&config, row_trampoline<K>,
                                           *static_cast<const typename K::params*>(params), rows);
  return static_cast<int>(e);
}

// Loads K's kernel into the current device's context now. CUDA loads modules lazily by default
// (CUDA_MODULE_LOADING=LAZY): the first launch of a kernel may then wait for the whole context,
// and behind a kernel that spins until the host releases it (executor::time_device) that wait
// never ends. Call before such a launch, e.g. when the engine's executor is made. Returns the
// cudaError_t of cudaFuncGetAttributes as an int (0: loaded). Host only; no stream, no sync of
// work already queued; not capture-safe (loading is not stream work, do it before capturing).
template <class K>
int cuda_rows_load() {
  cudaFuncAttributes attributes{};
  return static_cast<int>(cudaFuncGetAttributes(&attributes, row_trampoline<K>));
}

}  // namespace specgraph
