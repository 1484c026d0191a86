#include "specgraph/row_kernel_cuda.cuh"
#include "testing/csr_probe.hpp"
#include "testing/engine_probe.hpp"
#include "testing/round_forward.hpp"

namespace specgraph::testing {
cuda_rows_fn engine_probe_cuda() {
  return &cuda_rows<engine_probe_kernel>;
}
cuda_rows_fn confidence_probe_cuda() {
  return &cuda_rows<confidence_probe_kernel>;
}
cuda_rows_fn count_runs_cuda() {
  return &cuda_rows<count_runs_kernel>;
}
cuda_rows_fn constant_condition_cuda() {
  return &cuda_rows<constant_condition_kernel>;
}
cuda_rows_fn csr_probe_cuda() {
  return &cuda_rows<csr_probe_kernel>;
}
cuda_rows_fn toy_verify_cuda() {
  return &cuda_rows<toy_verify_kernel>;
}
cuda_rows_fn round_log_cuda() {
  return &cuda_rows<round_log_kernel>;
}
cuda_rows_fn toy_confidence_cuda() {
  return &cuda_rows<toy_confidence_kernel>;
}
cuda_rows_fn depth_log_cuda() {
  return &cuda_rows<depth_log_kernel>;
}
}  // namespace specgraph::testing
