// `specgraph plan`: the static buffers a configuration needs and what today's engine sizing costs.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace specgraph::tools {

// Returns 0, or 2 on bad flags (one line on `err` naming the flag).
int plan_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace specgraph::tools
