#include "testing/csr_probe.hpp"
#include "testing/engine_probe.hpp"
#include "testing/round_forward.hpp"

namespace specgraph::testing {
cuda_rows_fn engine_probe_cuda() {
  return nullptr;
}
cuda_rows_fn confidence_probe_cuda() {
  return nullptr;
}
cuda_rows_fn count_runs_cuda() {
  return nullptr;
}
cuda_rows_fn constant_condition_cuda() {
  return nullptr;
}
cuda_rows_fn csr_probe_cuda() {
  return nullptr;
}
cuda_rows_fn toy_verify_cuda() {
  return nullptr;
}
cuda_rows_fn round_log_cuda() {
  return nullptr;
}
cuda_rows_fn toy_confidence_cuda() {
  return nullptr;
}
cuda_rows_fn depth_log_cuda() {
  return nullptr;
}
}  // namespace specgraph::testing
