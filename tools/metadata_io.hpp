// Internal: what the `specgraph metadata` commands share: typed JSON reads that name the field,
// list writers, and the error frame (exit 2 with one line naming the field).
#pragma once

#include <cstdint>
#include <istream>
#include <iterator>
#include <limits>
#include <ostream>
#include <string>

#include "specgraph/error.hpp"
#include "specgraph/guard.hpp"
#include "tools/cli_text.hpp"
#include "tools/json.hpp"

namespace specgraph::tools {

inline std::int32_t as_int32(const json& v, const std::string& field) {
  const std::int64_t x = as_int(v, field);
  if (x < std::numeric_limits<std::int32_t>::min() ||
      x > std::numeric_limits<std::int32_t>::max()) {
    throw json_error(field + ": " + std::to_string(x) + " does not fit in int32");
  }
  return static_cast<std::int32_t>(x);
}

inline const json& required(const json& object, const std::string& key) {
  const json* v = member(object, key);
  if (v == nullptr) throw json_error(key + ": missing");
  return *v;
}

inline json read_object(std::istream& in) {
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return json::parse(text);
}

template <class T>
void write_list(std::ostream& out, const T* data, std::size_t n) {
  out << '[';
  for (std::size_t i = 0; i < n; ++i) out << (i ? "," : "") << data[i];
  out << ']';
}

inline void write_violation(std::ostream& out, const guard_word& g) {
  out << "{\"kind\":" << quote(to_string(static_cast<violation_kind>(g.kind)))
      << ",\"kernel\":" << quote(to_string(static_cast<kernel_id>(g.kernel)))
      << ",\"row\":" << g.row << ",\"column\":" << g.column << ",\"capacity\":" << g.capacity
      << ",\"value\":" << g.value << ",\"count\":" << g.violations << '}';
}

template <class Body>
int guarded(std::ostream& err, Body body) {
  try {
    body();
    return 0;
  } catch (const json_error& e) {
    err << "specgraph: error: " << one_line(e.what()) << '\n';
  } catch (const invalid_argument& e) {
    err << "specgraph: error: " << one_line(e.what()) << '\n';
  }
  return 2;
}

}  // namespace specgraph::tools
