// A small JSON reader and writer for the command-line program: enough for the inspection inputs
// (objects, arrays, integers, strings) and the reports. Not a general-purpose library.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace specgraph::tools {

class json_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct json {
  enum class kind { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool boolean = false;
  double number = 0;
  bool integral = false;  // the literal had no fraction or exponent
  std::int64_t integer = 0;
  std::string text;
  std::vector<json> items;
  std::map<std::string, json> members;

  static json parse(const std::string& source);  // throws json_error with the byte offset
};

// Typed access with errors that name the field ("cache_loc[2][1]: expected an integer").
std::int64_t as_int(const json& v, const std::string& field);
const std::vector<json>& as_array(const json& v, const std::string& field);
const json* member(const json& object, const std::string& key);  // null when absent
// Throws when `object` has a key outside `allowed` (catches typos such as "pagesize").
void expect_only_keys(const json& object, const std::vector<std::string>& allowed);

// Writer helpers.
std::string quote(const std::string& s);

}  // namespace specgraph::tools
