// CUDA trampolines of the built-in metadata kernels. The per-row code is in the headers beside
// this file and is the same code the host executor runs.
#include "kernels/builtin_kernels.hpp"
#include "kernels/draft_kv_indices.hpp"
#include "kernels/expand_page_table.hpp"
#include "kernels/guard_ops.hpp"
#include "kernels/prefix_metadata.hpp"
#include "kernels/round_control.hpp"
#include "kernels/round_order.hpp"
#include "kernels/sparse_indices.hpp"
#include "kernels/stage_inputs.hpp"
#include "kernels/verify_fill.hpp"
#include "specgraph/row_kernel_cuda.cuh"

namespace specgraph::kernels {

cuda_rows_fn cuda_expand_page_table() {
  return &cuda_rows<expand_page_table_kernel>;
}
cuda_rows_fn cuda_prefix_check() {
  return &cuda_rows<prefix_check_kernel>;
}
cuda_rows_fn cuda_prefix_fill() {
  return &cuda_rows<prefix_fill_kernel>;
}
cuda_rows_fn cuda_sparse_stage() {
  return &cuda_rows<sparse_stage_kernel>;
}
cuda_rows_fn cuda_stage_inputs() {
  return &cuda_rows<stage_inputs_kernel>;
}
cuda_rows_fn cuda_count_violations() {
  return &cuda_rows<count_violations_kernel>;
}
cuda_rows_fn cuda_reset_guards() {
  return &cuda_rows<reset_guards_kernel>;
}
cuda_rows_fn cuda_advance_step() {
  return &cuda_rows<advance_step_kernel>;
}
cuda_rows_fn cuda_begin_round() {
  return &cuda_rows<begin_round_kernel>;
}
cuda_rows_fn cuda_continue_condition() {
  return &cuda_rows<continue_condition_kernel>;
}

cuda_rows_fn cuda_round_order() {
  return &cuda_rows<round_order_kernel>;
}
cuda_rows_fn cuda_kv_check() {
  return &cuda_rows<kv_check_kernel>;
}
cuda_rows_fn cuda_kv_scan() {
  return &cuda_rows<kv_scan_kernel>;
}
cuda_rows_fn cuda_kv_fill() {
  return &cuda_rows<kv_fill_kernel>;
}

cuda_rows_fn cuda_verify_check() {
  return &cuda_rows<verify_check_kernel>;
}
cuda_rows_fn cuda_verify_scan() {
  return &cuda_rows<verify_scan_kernel>;
}
cuda_rows_fn cuda_verify_count() {
  return &cuda_rows<verify_count_kernel>;
}
cuda_rows_fn cuda_verify_scan_rows() {
  return &cuda_rows<verify_scan_rows_kernel>;
}
cuda_rows_fn cuda_verify_prefix_fill() {
  return &cuda_rows<verify_prefix_fill_kernel>;
}
cuda_rows_fn cuda_verify_expand_fill() {
  return &cuda_rows<verify_expand_fill_kernel>;
}
cuda_rows_fn cuda_verify_kv_fill() {
  return &cuda_rows<verify_kv_fill_kernel>;
}
cuda_rows_fn cuda_verify_mask_fill() {
  return &cuda_rows<verify_mask_fill_kernel>;
}

int load_cuda_kernels() {
  const int results[] = {cuda_rows_load<expand_page_table_kernel>(),
                         cuda_rows_load<prefix_check_kernel>(),
                         cuda_rows_load<prefix_fill_kernel>(),
                         cuda_rows_load<sparse_stage_kernel>(),
                         cuda_rows_load<stage_inputs_kernel>(),
                         cuda_rows_load<count_violations_kernel>(),
                         cuda_rows_load<reset_guards_kernel>(),
                         cuda_rows_load<advance_step_kernel>(),
                         cuda_rows_load<begin_round_kernel>(),
                         cuda_rows_load<continue_condition_kernel>(),
                         cuda_rows_load<round_order_kernel>(),
                         cuda_rows_load<kv_check_kernel>(),
                         cuda_rows_load<kv_scan_kernel>(),
                         cuda_rows_load<kv_fill_kernel>(),
                         cuda_rows_load<verify_check_kernel>(),
                         cuda_rows_load<verify_scan_kernel>(),
                         cuda_rows_load<verify_count_kernel>(),
                         cuda_rows_load<verify_scan_rows_kernel>(),
                         cuda_rows_load<verify_prefix_fill_kernel>(),
                         cuda_rows_load<verify_expand_fill_kernel>(),
                         cuda_rows_load<verify_kv_fill_kernel>(),
                         cuda_rows_load<verify_mask_fill_kernel>()};
  for (const int e : results) {
    if (e != 0) return e;
  }
  return 0;
}

}  // namespace specgraph::kernels
