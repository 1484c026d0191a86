// The attention-format flag that `plan` and `run` share: --format is the spelling documented
// everywhere, --formats (plan's spelling until issue 28) is accepted by both as an alias, and
// both read the same three values with the same error.
#pragma once

#include <string>

#include "specgraph/plan.hpp"
#include "tools/cli_text.hpp"

namespace specgraph::tools {

inline bool is_format_flag(const std::string& flag) {
  return flag == "--format" || flag == "--formats";
}

// The value of --format / --formats; a bad value yields the message the caller throws in its
// own error type: "<flag as typed>: '<value>' is not one of fa3, csr, both".
inline bool parse_format(const std::string& flag, const std::string& value,
                         metadata_formats& format, std::string& error) {
  if (value == "fa3") {
    format = metadata_formats::fa3;
  } else if (value == "csr") {
    format = metadata_formats::csr;
  } else if (value == "both") {
    format = metadata_formats::both;
  } else {
    error = flag + ": " + echo(value) + " is not one of fa3, csr, both";
    return false;
  }
  return true;
}

}  // namespace specgraph::tools
