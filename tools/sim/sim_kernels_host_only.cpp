#include "tools/sim/sim_kernels.hpp"

namespace specgraph::sim {
sim_cuda_launchers sim_cuda() {
  return {nullptr, nullptr, nullptr, nullptr, nullptr};
}
}  // namespace specgraph::sim
