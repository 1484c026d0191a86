// Internal: NVTX v3 ranges in the "specgraph" domain (header-only NVTX from the CUDA toolkit).
// Calls are no-ops until a tool (Nsight Systems, or the tests' recorder) injects itself through
// NVTX_INJECTION64_PATH. Built without NVTX headers, everything here compiles to nothing.
#pragma once

#include <cstdint>

namespace specgraph::detail {

using nvtx_string = const void*;  // an nvtxStringHandle_t, or null

// Registers `message` in the specgraph domain once; cheap to use on hot paths afterwards.
nvtx_string nvtx_register(const char* message);

// A pushed range with a registered message, an int64 payload and a category (0 = none).
class nvtx_range {
 public:
  nvtx_range(nvtx_string message, std::int64_t payload, std::uint32_t category = 0) noexcept;
  ~nvtx_range();
  nvtx_range(const nvtx_range&) = delete;
  nvtx_range& operator=(const nvtx_range&) = delete;
};

}  // namespace specgraph::detail
