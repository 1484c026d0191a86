// libFuzzer harness: tools/json.cpp's parser and the `metadata expand` / `metadata fallback` /
// `metadata kv-indices` / `metadata verify` / `metadata accept` commands, all on every input (the
// input is the JSON text itself; the kv-indices and verify output checks are in json_fuzz_kv.cpp
// and json_fuzz_verify.cpp).
//
// Promises checked:
//   * json::parse returns or throws json_error; a parsed document survives a round trip through
//     a writer that uses only the escapes the parser reads;
//   * each command returns 0 or 2 and lets no exception escape;
//   * on 2: stdout is empty and stderr is exactly one line "specgraph: error: ..." of printable
//     ASCII;
//   * on 0: stdout is one line of JSON with exactly the documented keys; for expand, the table
//     and cache_seqlen equal docs/metadata.md section 3 computed independently, and a violation
//     is listed exactly for the rows whose pages overflow the capacity; for fallback, the indices
//     are section 6's, capped at the capacity.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/json_fuzz_kv.hpp"
#include "tests/fuzz/json_fuzz_verify.hpp"
#include "tools/json.hpp"
#include "tools/metadata_command.hpp"

namespace {

using specgraph::tools::json;
using specgraph::tools::json_error;

// Writes a parsed document back with only the escapes the parser understands.
void write_string(const std::string& text, std::string& out) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: out += c;
    }
  }
  out += '"';
}

void write(const json& v, std::string& out) {
  switch (v.type) {
    case json::kind::null: out += "null"; break;
    case json::kind::boolean: out += v.boolean ? "true" : "false"; break;
    case json::kind::number: {
      if (v.integral) {
        out += std::to_string(v.integer);
      } else {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", v.number);
        out += buf;
        if (std::string(buf).find_first_of(".eE") == std::string::npos) out += ".0";
      }
      break;
    }
    case json::kind::string: write_string(v.text, out); break;
    case json::kind::array: {
      out += '[';
      for (std::size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += ',';
        write(v.items[i], out);
      }
      out += ']';
      break;
    }
    case json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, m] : v.members) {
        if (!first) out += ',';
        first = false;
        write_string(k, out);
        out += ':';
        write(m, out);
      }
      out += '}';
      break;
    }
  }
}

bool same(const json& a, const json& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case json::kind::null: return true;
    case json::kind::boolean: return a.boolean == b.boolean;
    case json::kind::number:
      if (a.integral != b.integral) return false;
      return a.integral ? a.integer == b.integer : a.number == b.number;
    case json::kind::string: return a.text == b.text;
    case json::kind::array:
      if (a.items.size() != b.items.size()) return false;
      for (std::size_t i = 0; i < a.items.size(); ++i) {
        if (!same(a.items[i], b.items[i])) return false;
      }
      return true;
    case json::kind::object:
      if (a.members.size() != b.members.size()) return false;
      for (const auto& [k, m] : a.members) {
        const auto it = b.members.find(k);
        if (it == b.members.end() || !same(m, it->second)) return false;
      }
      return true;
  }
  return false;
}

// Finite numbers only: "1e999" parses to infinity, which no JSON writer can write back.
bool finite(const json& v) {
  if (v.type == json::kind::number) return v.integral || std::isfinite(v.number);
  for (const json& i : v.items) {
    if (!finite(i)) return false;
  }
  for (const auto& [k, m] : v.members) {
    if (!finite(m)) return false;
  }
  return true;
}

void check_parser(const std::string& text) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json_error&) {
    return;
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "json::parse threw something other than json_error: %s", e.what());
  }
  if (!finite(doc)) return;
  std::string again;
  write(doc, again);
  json back;
  try {
    back = json::parse(again);
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "a parsed document does not parse again: %s\n     text: %s", e.what(),
               again.c_str());
  }
  FUZZ_CHECK(same(doc, back), "parse(write(parse(x))) differs from parse(x): %s", again.c_str());
}

struct run_result {
  int code = -1;
  std::string out, err;
};

run_result run(int (*command)(std::istream&, std::ostream&, std::ostream&), const char* name,
               const std::string& input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  run_result r;
  try {
    r.code = command(in, out, err);
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "metadata %s let an exception escape: %s", name, e.what());
  } catch (...) {
    FUZZ_CHECK(false, "metadata %s let a non-std exception escape", name);
  }
  r.out = out.str();
  r.err = err.str();
  FUZZ_CHECK(r.code == 0 || r.code == 2, "metadata %s returned %d", name, r.code);
  if (r.code == 2) {
    FUZZ_CHECK(r.out.empty(), "metadata %s: exit 2 with stdout '%s'", name, r.out.c_str());
    FUZZ_CHECK(r.err.rfind("specgraph: error: ", 0) == 0,
               "metadata %s: stderr does not start with 'specgraph: error: ': '%s'", name,
               r.err.c_str());
    FUZZ_CHECK(!r.err.empty() && r.err.back() == '\n' && r.err.find('\n') == r.err.size() - 1,
               "metadata %s: stderr is not exactly one line: '%s'", name, r.err.c_str());
    FUZZ_CHECK(specgraph::fuzz::printable_line(r.err.substr(0, r.err.size() - 1)),
               "metadata %s: stderr is not printable ASCII: '%s'", name, r.err.c_str());
  } else {
    FUZZ_CHECK(r.err.empty(), "metadata %s: exit 0 with stderr '%s'", name, r.err.c_str());
    FUZZ_CHECK(!r.out.empty() && r.out.back() == '\n' && r.out.find('\n') == r.out.size() - 1,
               "metadata %s: stdout is not one line", name);
  }
  return r;
}

// Outputs above this are checked by their frame only (a 2^24-cell table is legal but would take
// gigabytes as a parsed document).
constexpr std::size_t max_parsed_output = 1 << 20;

std::int64_t integer(const json& v, const char* what) {
  FUZZ_CHECK(v.type == json::kind::number && v.integral, "%s is not an integer", what);
  return v.integer;
}

const json& key(const json& doc, const char* k) {
  const auto it = doc.members.find(k);
  FUZZ_CHECK(it != doc.members.end(), "output lacks key '%s'", k);
  return it->second;
}

void check_keys(const json& doc, const std::set<std::string>& keys, const char* what) {
  FUZZ_CHECK(doc.type == json::kind::object, "%s output is not an object", what);
  std::set<std::string> got;
  for (const auto& [k, v] : doc.members) got.insert(k);
  FUZZ_CHECK(got == keys, "%s output has unexpected keys", what);
}

void check_violation(const json& v, const char* kernel) {
  check_keys(v, {"kind", "kernel", "row", "column", "capacity", "value", "count"}, "violation");
  const std::string& kind = key(v, "kind").text;
  FUZZ_CHECK(kind == "capacity" || kind == "layout" || kind == "bad_input",
             "violation kind '%s' is not a valid kind", kind.c_str());
  FUZZ_CHECK(key(v, "kernel").text == kernel, "violation kernel '%s', expected '%s'",
             key(v, "kernel").text.c_str(), kernel);
  FUZZ_CHECK(integer(key(v, "count"), "count") >= 1, "violation count below 1");
  (void)integer(key(v, "row"), "row");
  (void)integer(key(v, "column"), "column");
  (void)integer(key(v, "capacity"), "capacity");
  (void)integer(key(v, "value"), "value");
}

void check_expand_output(const std::string& input, const std::string& output) {
  if (output.size() > max_parsed_output) {
    FUZZ_CHECK(output.rfind("{\"page_table\":[[", 0) == 0, "large expand output: bad start");
    FUZZ_CHECK(output.find("]],\"cache_seqlen\":[") != std::string::npos,
               "large expand output: no cache_seqlen");
    return;
  }
  json doc;
  try {
    doc = json::parse(output);
  } catch (const json_error& e) {
    FUZZ_CHECK(false, "expand output does not parse: %s", e.what());
  }
  check_keys(doc, {"page_table", "cache_seqlen", "violations"}, "expand");
  // The command accepted the input, so it is well-formed: recompute section 3 from it.
  const json in = json::parse(input);
  const auto field = [&](const char* k) { return key(in, k).integer; };
  const auto ps = static_cast<std::int32_t>(field("page_size"));
  const auto topk = static_cast<std::int32_t>(field("topk"));
  const auto d = static_cast<std::int32_t>(field("decode_length"));
  const auto capacity = static_cast<std::int32_t>(field("capacity"));
  const auto slots_read = static_cast<std::int32_t>(
      in.members.count("slots_read") ? field("slots_read") : static_cast<std::int64_t>(d));
  const auto& lpl = key(in, "last_page_len").items;
  const auto& rows = key(in, "cache_loc").items;
  const auto& table = key(doc, "page_table").items;
  const auto& seqlen = key(doc, "cache_seqlen").items;
  FUZZ_CHECK(table.size() == rows.size() && seqlen.size() == rows.size(),
             "expand output has %zu table rows and %zu cache_seqlen for %zu input rows",
             table.size(), seqlen.size(), rows.size());
  std::set<std::int64_t> overflowing;
  for (std::size_t row = 0; row < rows.size(); ++row) {
    std::vector<std::int64_t> slots;
    for (const json& s : rows[row].items) slots.push_back(s.integer);
    const auto r = static_cast<std::size_t>(row / static_cast<std::size_t>(topk));
    const specgraph::fuzz::expand_row_result want = specgraph::fuzz::expand_reference(
        slots.data(), slots_read, static_cast<std::int32_t>(lpl[r].integer), ps, d,
        std::numeric_limits<std::int64_t>::max(), false);
    FUZZ_CHECK(!want.bad, "expand accepted an input the reference calls bad (row %zu)", row);
    const std::vector<std::int32_t> cells = specgraph::fuzz::expected_table_row(
        std::vector<std::int32_t>(static_cast<std::size_t>(capacity), 0), want.pages, capacity);
    FUZZ_CHECK(table[row].items.size() == cells.size(), "row %zu has %zu cells, expected %zu", row,
               table[row].items.size(), cells.size());
    for (std::size_t c = 0; c < cells.size(); ++c) {
      FUZZ_CHECK(integer(table[row].items[c], "cell") == cells[c],
                 "page_table[%zu][%zu] = %lld, reference %d", row, c,
                 static_cast<long long>(table[row].items[c].integer), cells[c]);
    }
    FUZZ_CHECK(integer(seqlen[row], "cache_seqlen") == want.cache_seqlen,
               "cache_seqlen[%zu] = %lld, reference %d", row,
               static_cast<long long>(seqlen[row].integer), want.cache_seqlen);
    if (want.pages.size() > static_cast<std::size_t>(capacity)) {
      overflowing.insert(static_cast<std::int64_t>(row));
    }
  }
  std::set<std::int64_t> listed;
  for (const json& v : key(doc, "violations").items) {
    check_violation(v, "expand_page_table");
    FUZZ_CHECK(key(v, "kind").text == "capacity", "the command reported a non-capacity violation");
    listed.insert(integer(key(v, "row"), "row"));
  }
  FUZZ_CHECK(listed == overflowing,
             "violations listed for %zu rows, the reference overflows %zu rows", listed.size(),
             overflowing.size());
}

void check_fallback_output(const std::string& input, const std::string& output) {
  if (output.size() > max_parsed_output) {
    FUZZ_CHECK(output.rfind("{\"indices\":[0,", 0) == 0, "large fallback output: bad start");
    return;
  }
  json doc;
  try {
    doc = json::parse(output);
  } catch (const json_error& e) {
    FUZZ_CHECK(false, "fallback output does not parse: %s", e.what());
  }
  check_keys(doc, {"indices", "violations"}, "fallback");
  const json in = json::parse(input);
  const std::int64_t seq_len = key(in, "seq_len").integer;
  const std::int64_t max_count = key(in, "max_count").integer;
  const std::int64_t capacity = key(in, "capacity").integer;
  std::vector<std::int64_t> want =
      specgraph::fuzz::fallback_reference(seq_len, max_count, capacity + 1);
  const bool overflow = static_cast<std::int64_t>(want.size()) > capacity;
  if (overflow) want.resize(static_cast<std::size_t>(capacity));
  const auto& got = key(doc, "indices").items;
  FUZZ_CHECK(got.size() == want.size(), "fallback gave %zu indices, reference %zu", got.size(),
             want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    FUZZ_CHECK(integer(got[i], "index") == want[i], "fallback index %zu = %lld, reference %lld", i,
               static_cast<long long>(got[i].integer), static_cast<long long>(want[i]));
  }
  const auto& violations = key(doc, "violations").items;
  FUZZ_CHECK(violations.size() == (overflow ? 1u : 0u), "fallback listed %zu violations",
             violations.size());
  for (const json& v : violations) check_violation(v, "sparse_fallback");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  check_parser(input);
  const run_result expand = run(specgraph::tools::metadata_expand, "expand", input);
  if (expand.code == 0) check_expand_output(input, expand.out);
  const run_result fallback = run(specgraph::tools::metadata_fallback, "fallback", input);
  if (fallback.code == 0) check_fallback_output(input, fallback.out);
  const run_result kv = run(specgraph::tools::metadata_kv_indices, "kv-indices", input);
  if (kv.code == 0 && kv.out.size() <= max_parsed_output) {
    specgraph::fuzz::check_kv_indices_output(input, kv.out);
  }
  const run_result verify = run(specgraph::tools::metadata_verify, "verify", input);
  if (verify.code == 0 && verify.out.size() <= max_parsed_output) {
    specgraph::fuzz::check_verify_output(input, verify.out);
  }
  // accept: the exit code and error-line promises only (tests/cli_accept_*_test.cpp check values).
  run(specgraph::tools::metadata_accept, "accept", input);
  return 0;
}
