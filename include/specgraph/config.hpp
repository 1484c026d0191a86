// Compile-time configuration shared by host and device code.
#pragma once

// SPECGRAPH_HD marks the per-row functions that run unchanged on the CPU (host executor, tests)
// and on the GPU (CUDA trampolines). Under nvcc they are __host__ __device__; under a plain C++
// compiler they are ordinary inline functions, so CPU tests execute exactly the GPU's code.
#if defined(__CUDACC__)
#define SPECGRAPH_HD __host__ __device__ inline
#else
#define SPECGRAPH_HD inline
#endif

// Forward declarations of the CUDA stream and event types, so public headers need not include
// <cuda_runtime.h>. cudaStream_t is `CUstream_st*` and cudaEvent_t is `CUevent_st*` in every
// CUDA runtime.
struct CUstream_st;
struct CUevent_st;

namespace specgraph {
using device_stream = CUstream_st*;
// A cudaEvent_t on the cuda executor; on the host executor an opaque handle it created.
using device_event = CUevent_st*;
}  // namespace specgraph
