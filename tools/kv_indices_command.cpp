// `specgraph metadata kv-indices`: the CSR draft-decode indices of every step (docs/csr.md
// section 6) for one case given as JSON, computed by the host twin one step at a time.
#include <algorithm>
#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/kv_indices.hpp"
#include "specgraph/limits.hpp"
#include "tools/json.hpp"
#include "tools/metadata_command.hpp"
#include "tools/metadata_io.hpp"

namespace specgraph::tools {
namespace {

// The cells one `metadata kv-indices` may walk: a crash dump's few rows, not gigabytes.
constexpr std::int64_t max_output_cells = std::int64_t{1} << 24;

// An array of int32 values named field[i].
std::vector<std::int32_t> int32_list(const json& doc, const std::string& field) {
  const json& value = required(doc, field);
  const std::vector<json>& items = as_array(value, field);
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    out.push_back(as_int32(items[i], field + "[" + std::to_string(i) + "]"));
  }
  return out;
}

std::int32_t optional_int32(const json& doc, const std::string& field, std::int32_t fallback) {
  const json* v = member(doc, field);
  return v ? as_int32(*v, field) : fallback;
}

}  // namespace

int metadata_kv_indices(std::istream& in, std::ostream& out, std::ostream& err) {
  return guarded(err, [&] {
    const json doc = read_object(in);
    expect_only_keys(doc,
                     {"page_size", "topk", "num_steps", "seq_len", "req_pool_index", "req_to_token",
                      "entry_page_size", "window", "sink", "capacity", "slot_stride"});
    kv_indices_params p;
    p.page_size = as_int32(required(doc, "page_size"), "page_size");
    p.topk = as_int32(required(doc, "topk"), "topk");
    p.num_steps = as_int32(required(doc, "num_steps"), "num_steps");
    // Draft slots per branch (the engine's rows: SGLang's S for S - 1 draft forwards); the
    // branch regions are laid out from it. [num_steps, limits::max_slot_stride].
    // Absent: 0, which the kernels read as num_steps.
    p.slot_stride = optional_int32(doc, "slot_stride", 0);
    if (member(doc, "slot_stride") != nullptr &&
        (p.slot_stride < p.num_steps || p.slot_stride > limits::max_slot_stride)) {
      throw json_error("slot_stride: " + std::to_string(p.slot_stride) + " is outside [num_steps " +
                       std::to_string(p.num_steps) + ", " +
                       std::to_string(limits::max_slot_stride) +
                       "]; give at least num_steps (the default) draft slots per branch");
    }
    p.entry_page_size = optional_int32(doc, "entry_page_size", 1);
    p.window = optional_int32(doc, "window", 0);
    p.sink = optional_int32(doc, "sink", 0);
    const std::vector<std::int32_t> seq_len = int32_list(doc, "seq_len");
    const std::vector<std::int32_t> pool_index = int32_list(doc, "req_pool_index");
    if (seq_len.empty()) throw json_error("seq_len: empty (batch must be >= 1)");
    if (pool_index.size() != seq_len.size()) {
      throw json_error("req_pool_index: " + std::to_string(pool_index.size()) +
                       " entries, expected one per request, " + std::to_string(seq_len.size()));
    }
    const std::string rows_field = "req_to_token";
    const json& rows_value = required(doc, rows_field);
    const std::vector<json>& rows = as_array(rows_value, rows_field);
    if (rows.empty()) throw json_error("req_to_token: empty (pool_rows must be >= 1)");
    std::vector<std::int32_t> req_to_token;
    std::size_t width = 0;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const std::string field = rows_field + "[" + std::to_string(r) + "]";
      const std::vector<json>& row = as_array(rows[r], field);
      if (r == 0) width = row.size();
      if (row.size() != width || width == 0) {
        throw json_error(field + ": " + std::to_string(row.size()) +
                         " entries, expected the width of row 0, " + std::to_string(width) +
                         " (>= 1)");
      }
      for (std::size_t j = 0; j < row.size(); ++j) {
        req_to_token.push_back(as_int32(row[j], field + "[" + std::to_string(j) + "]"));
      }
    }
    p.batch = static_cast<std::int32_t>(seq_len.size());
    p.req_to_token = req_to_token.data();
    p.req_to_token_stride = static_cast<std::int64_t>(width);
    p.pool_rows = static_cast<std::int32_t>(rows.size());
    p.req_pool_index = pool_index.data();
    p.seq_len = seq_len.data();
    p.max_seq_len = std::max(0, *std::max_element(seq_len.begin(), seq_len.end()));
    p.first_step = 0;
    p.step_count = std::max(p.num_steps, 1);
    p.kv_indptr_stride = static_cast<std::int64_t>(p.batch) * std::max(p.topk, 1) + 1;
    std::int32_t placeholder = 0;
    std::int64_t placeholder64 = 0;
    guard_word placeholder_guard{};
    p.kv_indptr = &placeholder;
    p.kv_indices_i64 = &placeholder64;  // int64: every slot id prints as read, none refused
    p.guard = &placeholder_guard;
    validate_contents_host(p);  // throws naming the field; nothing computed from bad input
    // The host computation walks rows * (Lmax + d) cells per step: bounded like the output.
    const std::int64_t rows_n = static_cast<std::int64_t>(p.batch) * p.topk;
    const std::int64_t cells =
        rows_n * (kv_kept_max(p.max_seq_len, p.window, p.sink) + p.num_steps);
    if (cells * p.num_steps > max_output_cells) {
      throw json_error("num_steps: " + std::to_string(p.num_steps) + " steps x " +
                       std::to_string(cells) + " cells exceeds the limit of " +
                       std::to_string(max_output_cells) + " cells");
    }
    std::vector<std::int64_t> capacity;
    if (const json* cap = member(doc, "capacity")) {
      const std::vector<json>& items = as_array(*cap, "capacity");
      if (static_cast<std::int64_t>(items.size()) != p.num_steps) {
        throw json_error("capacity: " + std::to_string(items.size()) +
                         " entries, expected one per step, " + std::to_string(p.num_steps));
      }
      for (std::size_t s = 0; s < items.size(); ++s) {
        const std::string field = "capacity[" + std::to_string(s) + "]";
        const std::int32_t c = as_int32(items[s], field);
        if (c < 0) throw json_error(field + ": " + std::to_string(c) + " is below the minimum 0");
        capacity.push_back(c);
      }
    }

    const auto n_indptr = static_cast<std::size_t>(rows_n + 1);
    std::vector<std::vector<std::int32_t>> indptr(static_cast<std::size_t>(p.num_steps));
    std::vector<std::vector<std::int64_t>> indices(static_cast<std::size_t>(p.num_steps));
    std::vector<guard_word> guards(static_cast<std::size_t>(p.num_steps), guard_word{});
    for (std::int32_t s = 0; s < p.num_steps; ++s) {
      const auto k = static_cast<std::size_t>(s);
      const std::int64_t used =
          kv_indices_used(seq_len.data(), p.batch, p.topk, p.window, p.sink, s);
      const std::int64_t cap = capacity.empty() ? used : capacity[k];
      // One step per launch, its buffer as long as what can be stored: min(used, capacity).
      indptr[k].assign(n_indptr, 0);
      indices[k].assign(static_cast<std::size_t>(std::max<std::int64_t>(std::min(used, cap), 1)),
                        0);
      kv_indices_params q = p;
      q.first_step = s;
      q.step_count = 1;
      q.capacity = static_cast<std::int32_t>(cap);
      q.kv_indices_stride = 0;
      q.kv_indptr = indptr[k].data();
      q.kv_indices_i64 = indices[k].data();
      q.guard = &guards[k];
      draft_kv_indices_host(q);
      indices[k].resize(static_cast<std::size_t>(std::min(used, cap)));
    }

    out << "{\"kv_indptr\":[";
    for (std::size_t k = 0; k < indptr.size(); ++k) {
      out << (k ? "," : "");
      write_list(out, indptr[k].data(), indptr[k].size());
    }
    out << "],\"kv_indices\":[";
    for (std::size_t k = 0; k < indices.size(); ++k) {
      out << (k ? "," : "");
      write_list(out, indices[k].data(), indices[k].size());
    }
    out << "],\"violations\":[";
    bool first = true;
    for (std::size_t k = 0; k < guards.size(); ++k) {
      const guard_word& g = guards[k];
      if (g.violations == 0) continue;
      out << (first ? "" : ",")
          << "{\"kind\":" << quote(to_string(static_cast<violation_kind>(g.kind)))
          << ",\"kernel\":" << quote(to_string(static_cast<kernel_id>(g.kernel)))
          << ",\"step\":" << k << ",\"row\":" << g.row << ",\"column\":" << g.column
          << ",\"capacity\":" << g.capacity << ",\"value\":" << g.value
          << ",\"count\":" << g.violations << '}';
      first = false;
    }
    out << "]}\n";
  });
}

}  // namespace specgraph::tools
