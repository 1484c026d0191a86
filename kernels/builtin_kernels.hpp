// Internal: CUDA launchers of the built-in metadata kernels (null in host-only builds).
#pragma once

#include "specgraph/row_kernel.hpp"

namespace specgraph::kernels {

cuda_rows_fn cuda_expand_page_table();
cuda_rows_fn cuda_prefix_check();
cuda_rows_fn cuda_prefix_fill();
cuda_rows_fn cuda_sparse_stage();
cuda_rows_fn cuda_stage_inputs();
cuda_rows_fn cuda_count_violations();
cuda_rows_fn cuda_reset_guards();
cuda_rows_fn cuda_advance_step();
cuda_rows_fn cuda_begin_round();
cuda_rows_fn cuda_continue_condition();
cuda_rows_fn cuda_round_order();
cuda_rows_fn cuda_kv_check();
cuda_rows_fn cuda_kv_scan();
cuda_rows_fn cuda_kv_fill();
cuda_rows_fn cuda_verify_check();
cuda_rows_fn cuda_verify_scan();
cuda_rows_fn cuda_verify_count();
cuda_rows_fn cuda_verify_scan_rows();
cuda_rows_fn cuda_verify_prefix_fill();
cuda_rows_fn cuda_verify_expand_fill();
cuda_rows_fn cuda_verify_kv_fill();
cuda_rows_fn cuda_verify_mask_fill();

// Loads every built-in kernel into the current device's context (cuda_rows_load): the cuda
// executor calls it when made, so no first launch waits for a lazy module load. Returns the
// first cudaError_t as an int, 0 when all loaded (always 0 in host-only builds).
int load_cuda_kernels();

}  // namespace specgraph::kernels
