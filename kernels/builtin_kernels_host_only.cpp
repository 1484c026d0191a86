// Host-only builds: the built-in kernels have no CUDA launcher.
#include "kernels/builtin_kernels.hpp"

namespace specgraph::kernels {

cuda_rows_fn cuda_expand_page_table() {
  return nullptr;
}
cuda_rows_fn cuda_prefix_check() {
  return nullptr;
}
cuda_rows_fn cuda_prefix_fill() {
  return nullptr;
}
cuda_rows_fn cuda_sparse_stage() {
  return nullptr;
}
cuda_rows_fn cuda_stage_inputs() {
  return nullptr;
}
cuda_rows_fn cuda_count_violations() {
  return nullptr;
}
cuda_rows_fn cuda_reset_guards() {
  return nullptr;
}
cuda_rows_fn cuda_advance_step() {
  return nullptr;
}
cuda_rows_fn cuda_begin_round() {
  return nullptr;
}
cuda_rows_fn cuda_continue_condition() {
  return nullptr;
}

cuda_rows_fn cuda_round_order() {
  return nullptr;
}
cuda_rows_fn cuda_kv_check() {
  return nullptr;
}
cuda_rows_fn cuda_kv_scan() {
  return nullptr;
}
cuda_rows_fn cuda_kv_fill() {
  return nullptr;
}
cuda_rows_fn cuda_verify_check() {
  return nullptr;
}
cuda_rows_fn cuda_verify_scan() {
  return nullptr;
}
cuda_rows_fn cuda_verify_count() {
  return nullptr;
}
cuda_rows_fn cuda_verify_scan_rows() {
  return nullptr;
}
cuda_rows_fn cuda_verify_prefix_fill() {
  return nullptr;
}
cuda_rows_fn cuda_verify_expand_fill() {
  return nullptr;
}
cuda_rows_fn cuda_verify_kv_fill() {
  return nullptr;
}
cuda_rows_fn cuda_verify_mask_fill() {
  return nullptr;
}
int load_cuda_kernels() {
  return 0;
}

}  // namespace specgraph::kernels
