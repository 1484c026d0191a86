#include "specgraph/row_kernel_cuda.cuh"
#include "tools/sim/loop_kernels.hpp"
#include "tools/sim/sim_extend_kernels.hpp"
#include "tools/sim/sim_kernels.hpp"
#include "tools/sim/sim_verify_kernels.hpp"

namespace specgraph::sim {
sim_cuda_launchers sim_cuda() {
  return {&cuda_rows<kv_write_kernel>, &cuda_rows<paged_attention_kernel>,
          &cuda_rows<lse_merge_kernel>, &cuda_rows<branch_page_copy_kernel>,
          &cuda_rows<csr_attention_kernel>};
}
sim_verify_cuda_launchers sim_verify_cuda() {
  return {&cuda_rows<verify_kv_write_kernel>, &cuda_rows<masked_prefill_kernel>,
          &cuda_rows<verify_commit_kernel>};
}
sim_extend_cuda_launchers sim_extend_cuda() {
  return {&cuda_rows<extend_attention_kernel>, &cuda_rows<extend_two_pass_kernel>};
}
loop_cuda_launchers loop_cuda() {
  return {&cuda_rows<loop_qkv_kernel>,       &cuda_rows<loop_tail_copy_kernel>,
          &cuda_rows<loop_commit_kv_kernel>, &cuda_rows<loop_tree_kernel>,
          &cuda_rows<loop_out_log_kernel>,   &cuda_rows<loop_log_kernel>};
}
}  // namespace specgraph::sim
