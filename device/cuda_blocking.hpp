// Internal: the blocking kernel behind cuda_executor::time_device (device time without host
// submission time). Include only from files compiled with the CUDA headers.
#pragma once

#include <cuda_runtime.h>

namespace specgraph::detail {

// Launches one thread on `stream` that spins until *release != 0 (host-mapped memory the host
// writes), or until `timeout_ns` has passed, in which case it sets *timed_out. Returns the
// launch's own status.
cudaError_t launch_blocking_kernel(cudaStream_t stream, const volatile int* release, int* timed_out,
                                   long long timeout_ns);

// Loads the blocking kernel into the current device's context (cudaFuncGetAttributes), so that
// its first launch does not wait for a lazy module load.
cudaError_t load_blocking_kernel();

}  // namespace specgraph::detail
