// `specgraph metadata expand|fallback`: one case as JSON on stdin, the result as JSON on stdout.
#pragma once

#include <iosfwd>
#include <string>

namespace specgraph::tools {

// Each returns the process exit code: 0 on success, 2 on invalid input (one line on `err`
// naming the field).
int metadata_expand(std::istream& in, std::ostream& out, std::ostream& err);
int metadata_fallback(std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace specgraph::tools
