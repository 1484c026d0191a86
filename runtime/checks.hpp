// Internal: the validation helpers behind every invalid_argument specgraph throws, so messages
// read the same everywhere: "<field>: <value> is below the minimum <limit>".
#pragma once

#include <cstdint>
#include <string>

#include "specgraph/error.hpp"

namespace specgraph::detail {

inline std::string indexed(const std::string& name, std::int64_t i) {
  return name + "[" + std::to_string(i) + "]";
}
inline std::string indexed(const std::string& name, std::int64_t i, std::int64_t j) {
  return indexed(name, i) + "[" + std::to_string(j) + "]";
}

inline void at_least(const std::string& field, std::int64_t value, std::int64_t minimum) {
  SPECGRAPH_EXPECTS(value >= minimum, field,
                    std::to_string(value) + " is below the minimum " + std::to_string(minimum));
}
inline void at_most(const std::string& field, std::int64_t value, std::int64_t maximum,
                    const std::string& limit_name) {
  SPECGRAPH_EXPECTS(
      value <= maximum, field,
      std::to_string(value) + " exceeds " + limit_name + " " + std::to_string(maximum));
}
// lo <= value < hi, where hi is named (e.g. "page_size").
inline void in_range(const std::string& field, std::int64_t value, std::int64_t lo, std::int64_t hi,
                     const std::string& hi_name) {
  SPECGRAPH_EXPECTS(value >= lo && value < hi, field,
                    std::to_string(value) + " is outside [" + std::to_string(lo) + ", " + hi_name +
                        " " + std::to_string(hi) + ")");
}
inline void not_null(const char* field, const void* p) {
  SPECGRAPH_EXPECTS(p != nullptr, field, "null pointer");
}

}  // namespace specgraph::detail
