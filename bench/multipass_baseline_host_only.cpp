#include "bench/multipass_baseline.hpp"

namespace specgraph::bench {
multipass_cuda_launchers multipass_cuda() {
  return {};
}
}  // namespace specgraph::bench
