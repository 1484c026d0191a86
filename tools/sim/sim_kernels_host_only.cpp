#include "tools/sim/loop_kernels.hpp"
#include "tools/sim/sim_extend_kernels.hpp"
#include "tools/sim/sim_kernels.hpp"
#include "tools/sim/sim_verify_kernels.hpp"

namespace specgraph::sim {
sim_cuda_launchers sim_cuda() {
  return {nullptr, nullptr, nullptr, nullptr, nullptr};
}
sim_verify_cuda_launchers sim_verify_cuda() {
  return {nullptr, nullptr, nullptr};
}
sim_extend_cuda_launchers sim_extend_cuda() {
  return {nullptr, nullptr};
}
loop_cuda_launchers loop_cuda() {
  return {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
}
}  // namespace specgraph::sim
