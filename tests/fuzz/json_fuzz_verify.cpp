// json_fuzz, `metadata verify` (docs/verify.md): an accepted input's output is recomputed with
// the independent reference of tests/verify_reference.hpp: both FA3 passes and every FlashInfer
// vector whole, kv_indices and the packed mask the first min(used, capacity) entries, one
// capacity violation per short buffer naming its kernel, the first refused cell and the count.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/json_fuzz_verify.hpp"
#include "tests/verify_reference.hpp"
#include "tools/json.hpp"

namespace specgraph::fuzz {
namespace {

using tools::json;

const json& at(const json& doc, const char* k) {
  const auto it = doc.members.find(k);
  FUZZ_CHECK(it != doc.members.end(), "verify: lacks key '%s'", k);
  return it->second;
}
std::int64_t number(const json& v) {
  FUZZ_CHECK(v.type == json::kind::number && v.integral, "verify: not an integer");
  return v.integer;
}
// A list of integers equal to `want`, element by element.
template <class T>
void expect_list(const json& v, const std::vector<T>& want, const char* name) {
  FUZZ_CHECK(v.items.size() == want.size(), "verify %s: %zu entries, expected %zu", name,
             v.items.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    FUZZ_CHECK(number(v.items[i]) == static_cast<std::int64_t>(want[i]), "verify %s[%zu]", name, i);
  }
}
// `rows` rows of `width` from a flat list.
void expect_rows(const json& v, const std::vector<std::int32_t>& flat, std::size_t rows,
                 std::size_t width, const char* name) {
  FUZZ_CHECK(v.items.size() == rows && flat.size() == rows * width, "verify %s: %zu rows", name,
             v.items.size());
  for (std::size_t r = 0; r < rows; ++r) {
    const auto from = flat.begin() + static_cast<std::ptrdiff_t>(r * width);
    expect_list(v.items[r],
                std::vector<std::int32_t>(from, from + static_cast<std::ptrdiff_t>(width)), name);
  }
}
std::int32_t optional(const json& doc, const char* k, std::int64_t fallback) {
  const auto it = doc.members.find(k);
  return static_cast<std::int32_t>(it == doc.members.end() ? fallback : it->second.integer);
}

}  // namespace

void check_verify_output(const std::string& input, const std::string& output) {
  const json doc = json::parse(output);
  FUZZ_CHECK(doc.members.size() == 3 && doc.members.count("fa3") &&
                 doc.members.count("flashinfer") && doc.members.count("violations"),
             "verify output keys");
  const json in = json::parse(input);  // accepted, so well-formed
  testing::verify_case c;
  c.page_size = static_cast<std::int32_t>(at(in, "page_size").integer);
  c.draft_tokens = static_cast<std::int32_t>(at(in, "num_draft_tokens").integer);
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
  for (const json& v : at(in, "custom_mask").items)
    c.mask.push_back(static_cast<std::uint8_t>(v.integer));
  c.real_batch = optional(in, "real_batch", c.batch());
  c.max_seq_len = *std::max_element(c.seq_len.begin(), c.seq_len.end());
  const std::int64_t d = c.draft_tokens;
  std::int64_t kv = 0, bytes = 0;
  for (std::int32_t s : c.seq_len) {
    kv += s + d;
    bytes += (d * (s + d) + 7) / 8;
  }
  c.prefix_capacity =
      optional(in, "prefix_capacity", (c.max_seq_len + c.page_size - 1) / c.page_size);
  c.kv_capacity = optional(in, "kv_indices_capacity", kv);
  c.packed_capacity = optional(in, "packed_mask_capacity", bytes);
  c.prefix_stride = c.prefix_capacity;
  c.expand_stride = c.draft_tokens;
  const testing::verify_expected w = testing::verify_reference(c);
  const json& prefix = at(at(doc, "fa3"), "prefix");
  const json& expand = at(at(doc, "fa3"), "expand");
  const json& fi = at(doc, "flashinfer");
  const auto b = static_cast<std::size_t>(c.batch()), dd = static_cast<std::size_t>(d);
  expect_rows(at(prefix, "page_table"), w.prefix_table, b,
              static_cast<std::size_t>(c.prefix_capacity), "prefix page_table");
  expect_list(at(prefix, "cache_seqlen"), w.prefix_cache_seqlen, "prefix cache_seqlen");
  expect_list(at(prefix, "cu_seqlens_q"), w.prefix_cu_q, "prefix cu_seqlens_q");
  expect_list(at(prefix, "cu_seqlens_k"), w.prefix_cu_k, "prefix cu_seqlens_k");
  FUZZ_CHECK(number(at(prefix, "max_seqlen_q")) == d, "verify prefix max_seqlen_q");
  expect_rows(at(expand, "page_table"), w.expand_table, b * dd, dd, "expand page_table");
  expect_list(at(expand, "cache_seqlen"), w.expand_cache_seqlen, "expand cache_seqlen");
  expect_list(at(expand, "cu_seqlens_q"), w.expand_cu_q, "expand cu_seqlens_q");
  expect_list(at(expand, "cu_seqlens_k"), w.expand_cu_k, "expand cu_seqlens_k");
  FUZZ_CHECK(number(at(expand, "max_seqlen_q")) == 1, "verify expand max_seqlen_q");
  expect_list(at(fi, "qo_indptr"), w.qo_indptr, "qo_indptr");
  expect_list(at(fi, "kv_indptr"), w.kv_indptr, "kv_indptr");
  expect_list(at(fi, "kv_last_page_len"), w.kv_last_page_len, "kv_last_page_len");
  expect_list(at(fi, "mask_indptr"), w.mask_indptr, "mask_indptr");
  expect_list(at(fi, "packed_mask_indptr"), w.packed_indptr, "packed_mask_indptr");
  const auto kv_stored =
      std::min<std::size_t>(w.kv_ids.size(), static_cast<std::size_t>(c.kv_capacity));
  expect_list(at(fi, "kv_indices"),
              std::vector<std::int64_t>(w.kv_ids.begin(),
                                        w.kv_ids.begin() + static_cast<std::ptrdiff_t>(kv_stored)),
              "kv_indices");
  const auto bytes_stored =
      std::min<std::size_t>(w.packed.size(), static_cast<std::size_t>(c.packed_capacity));
  expect_list(at(fi, "packed_mask"),
              std::vector<std::int64_t>(
                  w.packed.begin(), w.packed.begin() + static_cast<std::ptrdiff_t>(bytes_stored)),
              "packed_mask");
  const char* kernels[] = {"verify_prefix_page_table", "verify_kv_indices", "verify_packed_mask"};
  const auto& violations = at(doc, "violations").items;
  std::size_t listed = 0;
  for (int g = 0; g < verify_guard_count; ++g) {
    const auto& records = w.records[g];
    if (records.empty()) continue;
    FUZZ_CHECK(listed < violations.size(), "verify: buffer %d overflows, not listed", g);
    const json& v = violations[listed++];
    const testing::verify_record& first = records.front();  // the lowest (row, column)
    FUZZ_CHECK(at(v, "kind").text == "capacity" && at(v, "kernel").text == kernels[g] &&
                   number(at(v, "row")) == first.row && number(at(v, "column")) == first.column &&
                   number(at(v, "capacity")) == first.capacity &&
                   number(at(v, "value")) == first.value &&
                   number(at(v, "count")) == static_cast<std::int64_t>(records.size()),
               "verify: violation of buffer %d", g);
  }
  FUZZ_CHECK(listed == violations.size(), "verify: %zu violations listed, %zu expected",
             violations.size(), listed);
}

}  // namespace specgraph::fuzz
