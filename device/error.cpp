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
    case kernel_id::round_setup: return "setup_round";
    case kernel_id::step_metadata: return "step_metadata";
    case kernel_id::csr_indices: return "csr_step_indices";
    case kernel_id::extend_metadata: return "extend_metadata";
    case kernel_id::extend_page_table: return "extend_page_table";
    case kernel_id::extend_triton_kv_indices: return "extend_triton_kv_indices";
    case kernel_id::extend_flashinfer_kv_indices: return "extend_flashinfer_kv_indices";
    case kernel_id::extend_select_index: return "extend_select_index";
    case kernel_id::accept_metadata: return "accept_metadata";
    case kernel_id::accept_outputs: return "accept_outputs";
    case kernel_id::commit_metadata: return "commit_metadata";
    case kernel_id::commit_outputs: return "commit_outputs";
    case kernel_id::next_round_alloc: return "next_round_alloc";
    case kernel_id::next_round_slots: return "next_round_slots";
    case kernel_id::next_round_outputs: return "next_round_outputs";
  }
  return "unknown";
}

const char* to_string(violation_kind k) noexcept {
  switch (k) {
    case violation_kind::none: return "none";
    case violation_kind::capacity: return "capacity";
    case violation_kind::layout: return "layout";
    case violation_kind::bad_input: return "bad input";
    case violation_kind::order: return "order";
    case violation_kind::accept_len: return "accept_len";
    case violation_kind::row_width: return "row_width";
    case violation_kind::ring: return "ring";
    case violation_kind::unbacked: return "unbacked";
  }
  return "unknown";
}

const char* to_string(round_progress p) noexcept {
  switch (p) {
    case round_progress::none: return "nothing staged";
    case round_progress::staged: return "staged, not set up";
    case round_progress::set_up: return "set up";
  }
  return "unknown";
}

namespace {

// An order violation (docs/metadata.md section 11): the op, what it needs, what it found, the fix.
std::string describe_order(const guard_word& g) {
  std::ostringstream s;
  const auto op = static_cast<kernel_id>(g.kernel);
  s << "order violation: " << to_string(op);
  if (op != kernel_id::round_setup) {
    if (g.column >= 0) {
      s << " (step " << g.column << ")";
    } else {
      s << " (at the device step)";
    }
  }
  const auto need = static_cast<round_progress>(g.capacity);
  s << " ran with the round " << to_string(static_cast<round_progress>(g.value)) << ", expected "
    << (need == round_progress::staged ? "a staged round" : "the round set up") << "; "
    << (need == round_progress::staged
            ? "stage the round first (stage_round / stage_; begin_round for inputs read in place)"
            : "call setup_round (round_setup_) for this round first, as step 0's graph does")
    << " (" << g.violations << " in total)";
  return s.str();
}

}  // namespace

std::string describe(const guard_word& g) {
  if (g.violations == 0) return "no violation";
  std::ostringstream s;
  const auto kind = static_cast<violation_kind>(g.kind);
  if (kind == violation_kind::order) return describe_order(g);
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
