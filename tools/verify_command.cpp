// `specgraph metadata verify`: the target-verify metadata of a draft tree (docs/verify.md) for one
// case given as JSON, computed by the host twin: the FA3 cascade's prefix and expand tables and
// FlashInfer's indices with the packed mask.
#include <algorithm>
#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/verify_metadata.hpp"
#include "tools/json.hpp"
#include "tools/metadata_command.hpp"
#include "tools/metadata_io.hpp"

namespace specgraph::tools {
namespace {

// The cells one `metadata verify` may walk or print: a crash dump's few requests.
constexpr std::int64_t max_output_cells = std::int64_t{1} << 24;

void write_row(std::ostream& out, const std::vector<std::int32_t>& cells, std::size_t row,
               std::size_t width) {
  write_list(out, cells.data() + row * width, width);
}

}  // namespace

int metadata_verify(std::istream& in, std::ostream& out, std::ostream& err) {
  return guarded(err, [&] {
    const json doc = read_object(in);
    expect_only_keys(doc, {"page_size", "num_draft_tokens", "seq_len", "req_pool_index",
                           "req_to_token", "custom_mask", "real_batch", "prefix_capacity",
                           "kv_indices_capacity", "packed_mask_capacity"});
    verify_params p;
    p.page_size = as_int32(required(doc, "page_size"), "page_size");
    const std::int32_t d = as_int32(required(doc, "num_draft_tokens"), "num_draft_tokens");
    if (d < 1 || d > max_draft_tokens) {
      throw json_error("num_draft_tokens: " + std::to_string(d) + " is outside [1, " +
                       std::to_string(max_draft_tokens) + "]");
    }
    p.draft_tokens = d;
    const std::vector<std::int32_t> seq_len = int32_items(doc, "seq_len");
    const std::vector<std::int32_t> pool_index = int32_items(doc, "req_pool_index");
    if (seq_len.empty()) throw json_error("seq_len: empty (batch must be >= 1)");
    if (pool_index.size() != seq_len.size()) {
      throw json_error("req_pool_index: " + std::to_string(pool_index.size()) +
                       " entries, expected one per request, " + std::to_string(seq_len.size()));
    }
    for (std::size_t r = 0; r < seq_len.size(); ++r) {  // before any size is derived from them
      if (seq_len[r] < 1) {
        throw json_error("seq_len[" + std::to_string(r) + "]: " + std::to_string(seq_len[r]) +
                         " is below the minimum 1");
      }
    }
    const auto bs = static_cast<std::int32_t>(seq_len.size());
    p.batch = bs;
    p.real_batch = bs;
    if (const json* v = member(doc, "real_batch")) {
      p.real_batch = as_int32(*v, "real_batch");
      if (p.real_batch < 0 || p.real_batch > bs) {  // 0: an idle rank, every request padding
        throw json_error("real_batch: " + std::to_string(p.real_batch) + " is outside [0, " +
                         "batch " + std::to_string(bs) + "]");
      }
    }
    const std::vector<json>& rows = as_array(required(doc, "req_to_token"), "req_to_token");
    if (rows.empty()) throw json_error("req_to_token: empty (pool_rows must be >= 1)");
    std::vector<std::int32_t> req_to_token;
    std::size_t width = 0;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const std::string field = "req_to_token[" + std::to_string(r) + "]";
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
    const std::vector<json>& mask_items = as_array(required(doc, "custom_mask"), "custom_mask");
    std::vector<std::uint8_t> mask;
    for (std::size_t i = 0; i < mask_items.size(); ++i) {
      const std::string field = "custom_mask[" + std::to_string(i) + "]";
      const std::int64_t v = as_int(mask_items[i], field);
      if (v != 0 && v != 1) throw json_error(field + ": " + std::to_string(v) + " is not 0 or 1");
      mask.push_back(static_cast<std::uint8_t>(v));
    }
    p.max_seq_len = std::max(1, *std::max_element(seq_len.begin(), seq_len.end()));
    p.req_to_token = req_to_token.data();
    p.req_to_token_stride = static_cast<std::int64_t>(width);
    p.pool_rows = static_cast<std::int32_t>(rows.size());
    p.req_pool_index = pool_index.data();
    p.seq_len = seq_len.data();
    p.custom_mask = mask.data();
    p.mask_cells = static_cast<std::int64_t>(mask.size());
    // The work and the output: bounded before anything is computed (the mask cells dominate).
    const std::int64_t cells = verify_mask_cells_capacity(bs, p.max_seq_len, d);
    if (cells > max_output_cells) {
      throw json_error("seq_len: " + std::to_string(bs) + " requests x " + std::to_string(d) +
                       " queries x (max seq_len " + std::to_string(p.max_seq_len) + " + " +
                       std::to_string(d) + ") = " + std::to_string(cells) +
                       " mask cells exceeds the limit of " + std::to_string(max_output_cells));
    }
    const std::int64_t pages = verify_prefix_columns(p.max_seq_len, std::max(p.page_size, 1));
    p.prefix_capacity = optional_at_least(doc, "prefix_capacity", pages, 0);
    if (static_cast<std::int64_t>(bs) * p.prefix_capacity > max_output_cells) {
      throw json_error("prefix_capacity: " + std::to_string(p.prefix_capacity) + " columns x " +
                       std::to_string(bs) + " requests exceeds the limit of " +
                       std::to_string(max_output_cells) + " table cells");
    }
    std::int64_t kv_used = 0, bytes_used = 0;
    for (std::int32_t s : seq_len) {
      kv_used += static_cast<std::int64_t>(s) + d;
      bytes_used += (static_cast<std::int64_t>(d) * (static_cast<std::int64_t>(s) + d) + 7) / 8;
    }
    p.kv_indices_capacity = optional_at_least(doc, "kv_indices_capacity", kv_used, 0);
    p.packed_mask_capacity = optional_at_least(doc, "packed_mask_capacity", bytes_used, 0);
    const auto kv_stored =
        static_cast<std::size_t>(std::min<std::int64_t>(kv_used, p.kv_indices_capacity));
    const auto bytes_stored =
        static_cast<std::size_t>(std::min<std::int64_t>(bytes_used, p.packed_mask_capacity));

    const auto b = static_cast<std::size_t>(bs), rows_e = b * static_cast<std::size_t>(d);
    const auto cap = static_cast<std::size_t>(p.prefix_capacity);
    std::vector<std::int32_t> prefix_table(std::max<std::size_t>(b * cap, 1)), prefix_cache(b),
        prefix_q(b + 1), prefix_k(b + 1), expand_table(rows_e * static_cast<std::size_t>(d)),
        expand_cache(rows_e), expand_q(rows_e + 1), expand_k(rows_e + 1), qo(b + 1),
        kv_indptr(b + 1), kv_indices(std::max<std::size_t>(kv_stored, 1)), last(b),
        mask_indptr(b + 1), packed_indptr(b + 1);
    std::vector<std::uint8_t> packed(std::max<std::size_t>(bytes_stored, 1));
    std::vector<guard_word> guards(verify_guard_count, guard_word{});
    p.prefix_page_table = prefix_table.data();
    p.prefix_stride = p.prefix_capacity;
    p.prefix_cache_seqlen = prefix_cache.data();
    p.prefix_cu_seqlens_q = prefix_q.data();
    p.prefix_cu_seqlens_k = prefix_k.data();
    p.expand_page_table = expand_table.data();
    p.expand_stride = d;
    p.expand_cache_seqlen = expand_cache.data();
    p.expand_cu_seqlens_q = expand_q.data();
    p.expand_cu_seqlens_k = expand_k.data();
    p.qo_indptr = qo.data();
    p.kv_indptr = kv_indptr.data();
    p.kv_indices = kv_indices.data();
    p.kv_last_page_len = last.data();
    p.mask_indptr = mask_indptr.data();
    p.packed_mask = packed.data();
    p.packed_mask_indptr = packed_indptr.data();
    p.guard = guards.data();
    verify_metadata_host(p);  // throws naming the field; nothing computed from bad input

    out << "{\"fa3\":{\"prefix\":{\"page_table\":[";
    for (std::size_t r = 0; r < b; ++r) {
      out << (r ? "," : "");
      write_row(out, prefix_table, r, cap);
    }
    out << "],\"cache_seqlen\":";
    write_list(out, prefix_cache.data(), b);
    out << ",\"cu_seqlens_q\":";
    write_list(out, prefix_q.data(), b + 1);
    out << ",\"cu_seqlens_k\":";
    write_list(out, prefix_k.data(), b + 1);
    out << ",\"max_seqlen_q\":" << d << "},\"expand\":{\"page_table\":[";
    for (std::size_t e = 0; e < rows_e; ++e) {
      out << (e ? "," : "");
      write_row(out, expand_table, e, static_cast<std::size_t>(d));
    }
    out << "],\"cache_seqlen\":";
    write_list(out, expand_cache.data(), rows_e);
    out << ",\"cu_seqlens_q\":";
    write_list(out, expand_q.data(), rows_e + 1);
    out << ",\"cu_seqlens_k\":";
    write_list(out, expand_k.data(), rows_e + 1);
    out << ",\"max_seqlen_q\":1}},\"flashinfer\":{\"qo_indptr\":";
    write_list(out, qo.data(), b + 1);
    out << ",\"kv_indptr\":";
    write_list(out, kv_indptr.data(), b + 1);
    out << ",\"kv_indices\":";
    write_list(out, kv_indices.data(), kv_stored);
    out << ",\"kv_last_page_len\":";
    write_list(out, last.data(), b);
    out << ",\"mask_indptr\":";
    write_list(out, mask_indptr.data(), b + 1);
    out << ",\"packed_mask_indptr\":";
    write_list(out, packed_indptr.data(), b + 1);
    out << ",\"packed_mask\":[";
    for (std::size_t i = 0; i < bytes_stored; ++i) out << (i ? "," : "") << int{packed[i]};
    out << "]},\"violations\":[";
    bool first = true;
    for (const guard_word& g : guards) {
      if (g.violations == 0) continue;
      out << (first ? "" : ",");
      write_violation(out, g);
      first = false;
    }
    out << "]}\n";
  });
}

}  // namespace specgraph::tools
