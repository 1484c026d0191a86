// Internal: whether this process can run specgraph's CUDA code, probed once.
#pragma once

#include <string>

namespace specgraph::detail {

struct cuda_probe {
  bool available = false;
  std::string reason;  // why not, for skip messages and `unavailable` errors
};

// cudaGetDeviceCount, then the current device's compute capability against the architectures
// this library was compiled for (a kernel image must exist for it: cudaFuncGetAttributes on a
// kernel of this library), so "built for sm_90 only, device is sm_86" is reported here instead
// of failing at the first launch.
const cuda_probe& cuda_probe_result();

}  // namespace specgraph::detail
