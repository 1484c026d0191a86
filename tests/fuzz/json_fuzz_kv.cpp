// json_fuzz, `metadata kv-indices` (docs/csr.md): an accepted input's output is recomputed with
// the independent reference of tests/kv_indices_reference.hpp: kv_indptr whole, kv_indices the
// first min(used, capacity) ids of each step, one capacity violation per overflowing step with
// the refused count, the first refused id and the row that owns it.
#include <algorithm>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/json_fuzz_kv.hpp"
#include "tests/kv_indices_reference.hpp"

namespace specgraph::fuzz {
namespace {

using tools::json;

const json& at(const json& doc, const char* k) {
  const auto it = doc.members.find(k);
  FUZZ_CHECK(it != doc.members.end(), "kv-indices: lacks key '%s'", k);
  return it->second;
}
std::int64_t number(const json& v) {
  FUZZ_CHECK(v.type == json::kind::number && v.integral, "kv-indices: not an integer");
  return v.integer;
}
std::int32_t optional(const json& doc, const char* k, std::int32_t fallback) {
  const auto it = doc.members.find(k);
  return it == doc.members.end() ? fallback : static_cast<std::int32_t>(it->second.integer);
}

}  // namespace

void check_kv_indices_output(const std::string& input, const std::string& output) {
  const json doc = json::parse(output);  // one line the command wrote: it parses
  FUZZ_CHECK(doc.members.size() == 3 && doc.members.count("kv_indptr") &&
                 doc.members.count("kv_indices") && doc.members.count("violations"),
             "kv-indices output keys");
  const json in = json::parse(input);  // accepted, so well-formed
  testing::kv_case c;
  c.page_size = static_cast<std::int32_t>(at(in, "page_size").integer);
  c.topk = static_cast<std::int32_t>(at(in, "topk").integer);
  c.num_steps = static_cast<std::int32_t>(at(in, "num_steps").integer);
  c.slot_stride = optional(in, "slot_stride", 0);  // absent: num_steps
  c.entry_page_size = optional(in, "entry_page_size", 1);
  c.window = optional(in, "window", 0);
  c.sink = optional(in, "sink", 0);
  for (const json& v : at(in, "seq_len").items)
    c.seq_len.push_back(static_cast<std::int32_t>(v.integer));
  for (const json& v : at(in, "req_pool_index").items) {
    c.req_pool_index.push_back(static_cast<std::int32_t>(v.integer));
  }
  const auto& rows = at(in, "req_to_token").items;
  c.pool_rows = static_cast<std::int32_t>(rows.size());
  c.width = static_cast<std::int64_t>(rows[0].items.size());
  for (const json& row : rows) {
    for (const json& v : row.items) c.req_to_token.push_back(static_cast<std::int32_t>(v.integer));
  }
  c.max_seq_len = std::max(0, *std::max_element(c.seq_len.begin(), c.seq_len.end()));
  c.int64_indices = true;
  c.first_step = 0;
  c.step_count = c.num_steps;
  c.capacity = 0x7fffffff;  // the reference's capacities are applied per step below
  const testing::kv_expected want = testing::kv_reference(c);
  const auto& indptr = at(doc, "kv_indptr").items;
  const auto& indices = at(doc, "kv_indices").items;
  FUZZ_CHECK(static_cast<std::int32_t>(indptr.size()) == c.num_steps &&
                 static_cast<std::int32_t>(indices.size()) == c.num_steps,
             "kv-indices: %zu / %zu steps", indptr.size(), indices.size());
  std::size_t listed = 0;
  const auto& violations = at(doc, "violations").items;
  for (std::int32_t s = 0; s < c.num_steps; ++s) {
    const auto k = static_cast<std::size_t>(s);
    FUZZ_CHECK(indptr[k].items.size() == want.indptr[k].size(), "kv_indptr[%d] size", s);
    for (std::size_t j = 0; j < want.indptr[k].size(); ++j) {
      FUZZ_CHECK(number(indptr[k].items[j]) == want.indptr[k][j], "kv_indptr[%d][%zu]", s, j);
    }
    const std::size_t used = want.ids[k].size();
    std::size_t capacity = used;
    if (in.members.count("capacity")) {
      capacity = static_cast<std::size_t>(at(in, "capacity").items[k].integer);
    }
    const std::size_t stored = std::min(used, capacity);
    FUZZ_CHECK(indices[k].items.size() == stored, "kv_indices[%d]: %zu entries, expected %zu", s,
               indices[k].items.size(), stored);
    for (std::size_t f = 0; f < stored; ++f) {
      FUZZ_CHECK(number(indices[k].items[f]) == want.ids[k][f], "kv_indices[%d][%zu]", s, f);
    }
    if (used <= capacity) continue;
    FUZZ_CHECK(listed < violations.size(), "kv-indices: step %d overflows, not listed", s);
    const json& v = violations[listed++];
    FUZZ_CHECK(number(at(v, "step")) == s && at(v, "kind").text == "capacity" &&
                   at(v, "kernel").text == "draft_kv_indices",
               "kv-indices: violation %zu names another step or kind", listed - 1);
    FUZZ_CHECK(number(at(v, "column")) == static_cast<std::int64_t>(capacity) &&
                   number(at(v, "capacity")) == static_cast<std::int64_t>(capacity) &&
                   number(at(v, "count")) == static_cast<std::int64_t>(used - capacity) &&
                   number(at(v, "value")) == want.ids[k][capacity],
               "kv-indices: step %d violation details", s);
    const auto owner = std::upper_bound(want.indptr[k].begin(), want.indptr[k].end(),
                                        static_cast<std::int32_t>(capacity)) -
                       want.indptr[k].begin() - 1;
    FUZZ_CHECK(number(at(v, "row")) == owner, "kv-indices: step %d violation row", s);
  }
  FUZZ_CHECK(listed == violations.size(), "kv-indices: %zu violations listed, %zu expected",
             violations.size(), listed);
}

}  // namespace specgraph::fuzz
