// Host-only builds: the built-in kernels have no CUDA launcher.
#include "kernels/builtin_kernels.hpp"

namespace specgraph::kernels {

#define SPECGRAPH_NO_LAUNCHER(name) \
  cuda_rows_fn cuda_##name() {      \
    return nullptr;                 \
  }
SPECGRAPH_BUILTIN_KERNELS(SPECGRAPH_NO_LAUNCHER)
#undef SPECGRAPH_NO_LAUNCHER

int load_cuda_kernels() {
  return 0;
}

}  // namespace specgraph::kernels
