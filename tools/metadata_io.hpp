// Internal: what the `specgraph metadata` commands share: typed JSON reads that name the field,
// list writers, and the error frame (exit 2 with one line naming the field).
#pragma once

#include <cstdint>
#include <istream>
#include <iterator>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

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

// The integer array `field` of `doc`, each element as int32 (named "field[i]" when it does not
// fit).
inline std::vector<std::int32_t> int32_items(const json& doc, const std::string& field) {
  const std::vector<json>& items = as_array(required(doc, field), field);
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    out.push_back(as_int32(items[i], field + "[" + std::to_string(i) + "]"));
  }
  return out;
}

// An optional int32 at least `minimum` (fallback when absent; the fallback is not checked).
inline std::int32_t optional_at_least(const json& doc, const std::string& field,
                                      std::int64_t fallback, std::int32_t minimum) {
  const json* v = member(doc, field);
  if (v == nullptr) return static_cast<std::int32_t>(fallback);
  const std::int32_t c = as_int32(*v, field);
  if (c < minimum) {
    throw json_error(field + ": " + std::to_string(c) + " is below the minimum " +
                     std::to_string(minimum));
  }
  return c;
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
