#include <sstream>
#include <string>

#include "specgraph/error.hpp"
#include "specgraph/guard.hpp"

namespace specgraph {
namespace detail {

std::string where(const char* file, int line) {
  std::string f(file);
  // Keep messages short and stable: the path relative to the source tree's top folders.
  for (const char* top : {"include/", "kernels/", "device/", "graphs/", "tools/", "python/"}) {
    const auto pos = f.rfind(top);
    if (pos != std::string::npos) {
      f = f.substr(pos);
      break;
    }
  }
  return f + ":" + std::to_string(line);
}

namespace {

// One line, printable ASCII only: a message may echo engine-supplied text (a flag value, a JSON
// key), which must not break a log line or a terminal.
std::string printable(const std::string& text) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

}  // namespace

void throw_invalid(const char* file, int line, const std::string& field, const std::string& what) {
  // The message names the field and the limit; the location (the caller of the shared
  // validation helper) is kept beside it for whoever debugs specgraph itself.
  const std::string safe_field = printable(field);
  throw invalid_argument(safe_field, safe_field + ": " + printable(what), where(file, line));
}

}  // namespace detail

const char* to_string(kernel_id k) noexcept {
  switch (k) {
    case kernel_id::none: return "none";
    case kernel_id::expand_page_table: return "expand_page_table";
    case kernel_id::prefix_metadata: return "prefix_metadata";
    case kernel_id::sparse_fallback: return "sparse_fallback";
    case kernel_id::sparse_stage: return "sparse_stage";
    case kernel_id::stage_inputs: return "stage_inputs";
    case kernel_id::draft_kv_indices: return "draft_kv_indices";
    case kernel_id::verify_metadata: return "verify_metadata";
    case kernel_id::verify_prefix_page_table: return "verify_prefix_page_table";
    case kernel_id::verify_kv_indices: return "verify_kv_indices";
    case kernel_id::verify_packed_mask: return "verify_packed_mask";
  }
  return "unknown";
}

const char* to_string(violation_kind k) noexcept {
  switch (k) {
    case violation_kind::none: return "none";
    case violation_kind::capacity: return "capacity";
    case violation_kind::layout: return "layout";
    case violation_kind::bad_input: return "bad input";
  }
  return "unknown";
}

std::string describe(const guard_word& g) {
  if (g.violations == 0) return "no violation";
  std::ostringstream s;
  const auto kind = static_cast<violation_kind>(g.kind);
  s << to_string(kind) << " violation in " << to_string(static_cast<kernel_id>(g.kernel))
    << ": row " << g.row << ", column " << g.column;
  switch (kind) {
    case violation_kind::capacity: s << ", capacity " << g.capacity << ", value " << g.value; break;
    case violation_kind::layout: s << ", expected " << g.capacity << ", found " << g.value; break;
    default: s << ", value " << g.value << ", limit " << g.capacity; break;
  }
  s << " (" << g.violations << " in total)";
  return s.str();
}

}  // namespace specgraph
