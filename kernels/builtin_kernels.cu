// CUDA trampolines of the built-in metadata kernels. The per-row code is in the headers beside
// this file and is the same code the host executor runs.
#include "device/kernel_preload.hpp"
#include "kernels/accept_fill.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/commit_row.hpp"
#include "kernels/device_round.hpp"
#include "kernels/draft_kv_indices.hpp"
#include "kernels/expand_page_table.hpp"
#include "kernels/extend_fill.hpp"
#include "kernels/guard_ops.hpp"
#include "kernels/next_round_alloc.hpp"
#include "kernels/next_round_row.hpp"
#include "kernels/prefix_metadata.hpp"
#include "kernels/round_control.hpp"
#include "kernels/round_order.hpp"
#include "kernels/sparse_indices.hpp"
#include "kernels/stage_inputs.hpp"
#include "kernels/verify_fill.hpp"
#include "specgraph/row_kernel_cuda.cuh"

namespace specgraph::kernels {

#define SPECGRAPH_LAUNCHER(name)      \
  cuda_rows_fn cuda_##name() {        \
    return &cuda_rows<name##_kernel>; \
  }
SPECGRAPH_BUILTIN_KERNELS(SPECGRAPH_LAUNCHER)
#undef SPECGRAPH_LAUNCHER

int load_cuda_kernels() {
#define SPECGRAPH_LOAD(name) cuda_rows_load<name##_kernel>(),
  const int results[] = {SPECGRAPH_BUILTIN_KERNELS(SPECGRAPH_LOAD)};
#undef SPECGRAPH_LOAD
  for (const int e : results) {
    if (e != 0) return e;
  }
  return 0;
}

// The cuda executor (device/, one layer down) preloads through this hook when made; it never
// includes this layer. Registered when the library loads: this file's launchers are what every
// op links, so it is always part of a program that launches a built-in kernel.
[[maybe_unused]] const bool preload_registered =
    (specgraph::detail::register_kernel_preload(&load_cuda_kernels), true);

}  // namespace specgraph::kernels
