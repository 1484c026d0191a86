// Built instead of the cuda executor when SPECGRAPH_ENABLE_CUDA is off.
#include <memory>
#include <string>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph {

bool cuda_available() noexcept {
  return false;
}
std::string cuda_unavailable_reason() {
  return "specgraph was built without CUDA";
}
std::unique_ptr<executor> make_cuda_executor() {
  throw unavailable("cuda executor unavailable: specgraph was built without CUDA");
}
std::unique_ptr<executor> make_cuda_executor(device_stream) {
  throw unavailable("cuda executor unavailable: specgraph was built without CUDA");
}
std::unique_ptr<graph> import_cuda_graph(void*) {
  throw unavailable("import_cuda_graph: specgraph was built without CUDA");
}

}  // namespace specgraph
