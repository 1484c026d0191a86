// Internal: checking CUDA runtime calls. Include only from files compiled with the CUDA headers.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "specgraph/error.hpp"

namespace specgraph::detail {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw cuda_error(static_cast<int>(e), where(file, line) + ": " + call +
                                            " failed: " + cudaGetErrorName(e) + " (" +
                                            cudaGetErrorString(e) + ")");
}

}  // namespace specgraph::detail

// SPECGRAPH_CUDA_TRY(call): throws specgraph::cuda_error naming the call, file:line and error.
#define SPECGRAPH_CUDA_TRY(call)                                                  \
  do {                                                                            \
    const cudaError_t specgraph_err_ = (call);                                    \
    if (specgraph_err_ != cudaSuccess)                                            \
      ::specgraph::detail::throw_cuda(specgraph_err_, #call, __FILE__, __LINE__); \
  } while (0)
