#include <cuda_runtime.h>

#include <string>

#include "device/cuda_probe.hpp"

#ifndef SPECGRAPH_CUDA_ARCHITECTURES
#define SPECGRAPH_CUDA_ARCHITECTURES "unknown"
#endif

namespace specgraph::detail {
namespace {

// Compiled for exactly the architectures the library's kernels are: if this one has no image
// for the device, none has.
__global__ void image_probe_kernel() {}

cuda_probe probe_now() {
  cuda_probe r;
  int count = 0;  // left untouched by a failing cudaGetDeviceCount
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    r.reason = cudaGetErrorName(e);
    return r;
  }
  if (count <= 0) {
    r.reason = "no CUDA device";
    return r;
  }
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    r.reason = cudaGetErrorName(cudaGetLastError());
    return r;
  }
  cudaFuncAttributes attributes{};
  e = cudaFuncGetAttributes(&attributes, image_probe_kernel);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    r.reason = std::string("built for CUDA architectures ") + SPECGRAPH_CUDA_ARCHITECTURES +
               " only, device " + std::to_string(device) + " is sm_" + std::to_string(major) +
               std::to_string(minor) + " (" + cudaGetErrorName(e) +
               "); rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(major) +
               std::to_string(minor);
    return r;
  }
  r.available = true;
  return r;
}

}  // namespace

const cuda_probe& cuda_probe_result() {
  static const cuda_probe p = probe_now();
  return p;
}

}  // namespace specgraph::detail
