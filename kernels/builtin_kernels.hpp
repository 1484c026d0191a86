// Internal: CUDA launchers of the built-in metadata kernels (null in host-only builds).
#pragma once

#include "specgraph/row_kernel.hpp"

// The one list of built-in kernels: X(name) for the row kernel kernels::name_kernel, whose
// launcher is kernels::cuda_name(). The declarations below, their CUDA trampolines and host-only
// stubs (builtin_kernels.cu, builtin_kernels_host_only.cpp) and the preload all expand it, so a
// new kernel is named here once.
#define SPECGRAPH_BUILTIN_KERNELS(X) \
  X(expand_page_table)               \
  X(prefix_check)                    \
  X(prefix_fill)                     \
  X(prefix_clear)                    \
  X(sparse_stage)                    \
  X(stage_inputs)                    \
  X(count_violations)                \
  X(reset_guards)                    \
  X(advance_step)                    \
  X(begin_round)                     \
  X(continue_condition)              \
  X(round_order)                     \
  X(kv_check)                        \
  X(kv_scan)                         \
  X(kv_fill)                         \
  X(verify_check)                    \
  X(verify_scan)                     \
  X(verify_count)                    \
  X(verify_scan_rows)                \
  X(verify_prefix_fill)              \
  X(verify_expand_fill)              \
  X(verify_kv_fill)                  \
  X(verify_mask_fill)                \
  X(extend_check)                    \
  X(extend_scan)                     \
  X(extend_tokens_fill)              \
  X(extend_page_fill)                \
  X(extend_prefix_fill)              \
  X(extend_full_fill)                \
  X(accept)                          \
  X(next_round_plan)                 \
  X(next_round_row)                  \
  X(commit)                          \
  X(extend_handoff)                  \
  X(guard_fold)

namespace specgraph::kernels {

#define SPECGRAPH_DECLARE_LAUNCHER(name) cuda_rows_fn cuda_##name();
SPECGRAPH_BUILTIN_KERNELS(SPECGRAPH_DECLARE_LAUNCHER)
#undef SPECGRAPH_DECLARE_LAUNCHER

// Loads every built-in kernel into the current device's context (cuda_rows_load): registered
// with the cuda executor as its kernel preload (device/kernel_preload.hpp), which it runs when
// made, so no first launch waits for a lazy module load. Returns the first cudaError_t as an
// int, 0 when all loaded (always 0 in host-only builds).
int load_cuda_kernels();

}  // namespace specgraph::kernels
