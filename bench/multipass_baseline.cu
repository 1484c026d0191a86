#include "bench/multipass_baseline.hpp"
#include "specgraph/row_kernel_cuda.cuh"

namespace specgraph::bench {
multipass_cuda_launchers multipass_cuda() {
  return {&cuda_rows<repeat_lpl_kernel>, &cuda_rows<divide_kernel>, &cuda_rows<compare_kernel>,
          &cuda_rows<prefix_sum_kernel>, &cuda_rows<zero_kernel>,   &cuda_rows<scatter_kernel>,
          &cuda_rows<seqlen_kernel>};
}
}  // namespace specgraph::bench
