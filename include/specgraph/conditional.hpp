// Conditional WHILE graph nodes, on both executors: a kernel decides on the device whether the
// body runs again (CUDA 12.4+ conditional nodes; the host executor emulates them).
//
//   const conditional_handle h = ex.begin_while(/*initial=*/true);   // during capture
//   ...record the body: kernels, memsets, device copies...
//   ...a kernel calls set_condition(h, keep_going) ...
//   ex.end_while();
//
// At every launch of the graph the condition starts as `initial`; the body repeats while it is
// set. Inside a body only kernels, memsets and device-to-device copies may be recorded: event
// record/wait nodes, allocation and host copies are refused (capture_violation) on both
// executors, as CUDA refuses them in a conditional body.
#pragma once

#include <cstdint>

#include "specgraph/config.hpp"

namespace specgraph {

// A cudaGraphConditionalHandle on the cuda executor; on the host executor the address of the
// condition the emulation reads.
using conditional_handle = std::uint64_t;

// Sets the condition of the WHILE node `h` from a kernel (one thread should call it per launch:
// concurrent sets are undefined on CUDA).
SPECGRAPH_HD void set_condition(conditional_handle h, bool value) {
#if defined(__CUDA_ARCH__)
  cudaGraphSetConditional(h, value ? 1u : 0u);
#else
  *reinterpret_cast<unsigned*>(static_cast<std::uintptr_t>(h)) = value ? 1u : 0u;  // NOLINT
#endif
}

}  // namespace specgraph
