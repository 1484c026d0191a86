#include <string>

#include "bench/stream_timer.hpp"
#include "specgraph/error.hpp"

namespace specgraph::bench {

struct stream_timer::impl {};

stream_timer::stream_timer(executor& ex, int) {
  throw error(std::string("stream_timer: this build has no CUDA (executor '") + ex.name() + "')");
}
stream_timer::~stream_timer() = default;
void stream_timer::record(int) {}
double stream_timer::seconds(int, int) {
  return 0;
}

}  // namespace specgraph::bench
