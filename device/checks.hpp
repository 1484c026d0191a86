// Internal: the validation helpers behind every invalid_argument specgraph throws, so messages
// read the same everywhere: "<field>: <value> is below the minimum <limit>". Each helper records
// the file:line of its caller (not its own) as the error's location().
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

inline void at_least(const std::string& field, std::int64_t value, std::int64_t minimum,
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (value < minimum) {
    throw_invalid(file, line, field,
                  std::to_string(value) + " is below the minimum " + std::to_string(minimum));
  }
}
inline void at_most(const std::string& field, std::int64_t value, std::int64_t maximum,
                    const std::string& limit_name, const char* file = __builtin_FILE(),
                    int line = __builtin_LINE()) {
  if (value > maximum) {
    throw_invalid(file, line, field,
                  std::to_string(value) + " exceeds " + limit_name + " " + std::to_string(maximum));
  }
}
// minimum <= value <= maximum, where the maximum is named (e.g. "the limit"); a value below the
// minimum is told the whole range, so the user learns the maximum too.
inline void between(const std::string& field, std::int64_t value, std::int64_t minimum,
                    std::int64_t maximum, const std::string& limit_name,
                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (value < minimum) {
    throw_invalid(file, line, field,
                  std::to_string(value) + " is below the minimum " + std::to_string(minimum) +
                      " (the range is " + std::to_string(minimum) + " to " + limit_name + " " +
                      std::to_string(maximum) + ")");
  }
  at_most(field, value, maximum, limit_name, file, line);
}
// lo <= value < hi, where hi is named (e.g. "page_size").
inline void in_range(const std::string& field, std::int64_t value, std::int64_t lo, std::int64_t hi,
                     const std::string& hi_name, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  if (value < lo || value >= hi) {
    throw_invalid(file, line, field,
                  std::to_string(value) + " is outside [" + std::to_string(lo) + ", " + hi_name +
                      " " + std::to_string(hi) + ")");
  }
}
inline void not_null(const char* field, const void* p, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  if (p == nullptr) throw_invalid(file, line, field, "null pointer");
}

}  // namespace specgraph::detail
