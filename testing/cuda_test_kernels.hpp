// CUDA helpers for the interop tests: slow kernels that keep a stream busy, so a test can tell
// whether a call waited for the device. Defined only in CUDA builds (cuda_test_kernels.cu).
#pragma once

#include <cstdint>

#include "specgraph/config.hpp"

namespace specgraph::testing {

// Keeps `stream` busy for about `milliseconds` (one thread spinning on the clock), then, when
// `dst` is non-null, writes values[i] to dst[i] for i < n (int64). Returns the launch status.
int spin_then_write(device_stream stream, double milliseconds, std::int64_t* dst,
                    const std::int64_t* values, std::int64_t n);

}  // namespace specgraph::testing
