#include "specgraph/row_kernel_cuda.cuh"
#include "testing/engine_probe.hpp"

namespace specgraph::testing {
cuda_rows_fn engine_probe_cuda() {
  return &cuda_rows<engine_probe_kernel>;
}
cuda_rows_fn confidence_probe_cuda() {
  return &cuda_rows<confidence_probe_kernel>;
}
}  // namespace specgraph::testing
