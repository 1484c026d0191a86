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
cuda_rows_fn cuda_continue_condition();

}  // namespace specgraph::kernels
