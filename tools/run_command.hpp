// `specgraph run`: the end-to-end simulated EAGLE draft loop (see tools/sim/sim_engine.hpp).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace specgraph::tools {

// Returns the exit status: 0 success, 1 verification or guard failure, 2 bad flags or config.
int run_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace specgraph::tools
