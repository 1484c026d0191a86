// `specgraph metadata extend`: the draft-extend metadata (docs/extend.md, docs/extend.md) of
// one round given as JSON, computed by the host twin over tables sized by the input: the extend
// tokens' positions, slots and select index, FA3's tables (C1), the CSR prefix layout Triton
// reads (C2p) and the full layout of FlashInfer's graph replay (C2f).
#include <algorithm>
#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/extend_metadata.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/limits.hpp"
#include "tools/json.hpp"
#include "tools/metadata_command.hpp"
#include "tools/metadata_io.hpp"

namespace specgraph::tools {
namespace {

// The cells one `metadata extend` may print: a crash dump's few requests, not an engine's arena.
constexpr std::int64_t max_output_cells = std::int64_t{1} << 24;

void in_range(const std::string& field, std::int64_t v, std::int64_t lo, std::int64_t hi,
              const std::string& hi_name) {
  if (v < lo) {
    throw json_error(field + ": " + std::to_string(v) + " is below the minimum " +
                     std::to_string(lo));
  }
  if (v > hi) {
    throw json_error(field + ": " + std::to_string(v) + " is above the maximum " + hi_name + " " +
                     std::to_string(hi));
  }
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

int metadata_extend(std::istream& in, std::ostream& out, std::ostream& err) {
  return guarded(err, [&] {
    const json doc = read_object(in);
    expect_only_keys(doc, {"page_size", "num_draft_tokens", "seq_len", "accept_len",
                           "req_pool_index", "req_to_token", "bucket", "page_table_capacity",
                           "triton_kv_capacity", "flashinfer_kv_capacity"});
    const std::int32_t ps = as_int32(required(doc, "page_size"), "page_size");
    in_range("page_size", ps, 1, limits::max_page_size, "limits::max_page_size");
    const std::int32_t w = as_int32(required(doc, "num_draft_tokens"), "num_draft_tokens");
    in_range("num_draft_tokens", w, 1, max_extend_tokens, "max_extend_tokens");
    const std::vector<std::int32_t> seq_len = int32_items(doc, "seq_len");
    const std::vector<std::int32_t> accept_len = int32_items(doc, "accept_len");
    const std::vector<std::int32_t> pool_index = int32_items(doc, "req_pool_index");
    const auto bs = static_cast<std::int64_t>(seq_len.size());
    for (const auto* v : {&accept_len, &pool_index}) {
      if (static_cast<std::int64_t>(v->size()) != bs) {
        throw json_error(std::string(v == &accept_len ? "accept_len" : "req_pool_index") + ": " +
                         std::to_string(v->size()) + " entries, expected one per request (" +
                         "seq_len has " + std::to_string(bs) + ")");
      }
    }
    for (std::int64_t r = 0; r < bs; ++r) {  // before any size is derived from them
      const std::string at = "[" + std::to_string(r) + "]";
      if (seq_len[r] < 0) {
        throw json_error("seq_len" + at + ": " + std::to_string(seq_len[r]) +
                         " is below the minimum 0");
      }
      if (accept_len[r] < 0 || accept_len[r] > w) {
        throw json_error("accept_len" + at + ": " + std::to_string(accept_len[r]) +
                         " is outside [0, num_draft_tokens " + std::to_string(w) + "]");
      }
    }
    const std::int32_t bucket = optional_at_least(doc, "bucket", bs, 0);
    if (bucket < bs) {
      throw json_error("bucket: " + std::to_string(bucket) + " is below the " + std::to_string(bs) +
                       " requests (padded rows are appended, never dropped)");
    }
    in_range("bucket", bucket, 0, limits::max_batch, "limits::max_batch");
    const std::int64_t b = bucket;
    if (b * w > max_output_cells) {
      throw json_error("bucket: " + std::to_string(b) + " x num_draft_tokens " + std::to_string(w) +
                       " token rows exceeds the limit of " + std::to_string(max_output_cells));
    }

    const std::vector<json>& rows = as_array(required(doc, "req_to_token"), "req_to_token");
    if (rows.empty()) {
      throw json_error("req_to_token: empty (pool row 0 backs the padded rows: at least 1 row)");
    }
    if (rows.size() > static_cast<std::size_t>(limits::max_pool_rows)) {
      throw json_error("req_to_token: " + std::to_string(rows.size()) +
                       " rows is above the maximum limits::max_pool_rows " +
                       std::to_string(limits::max_pool_rows));
    }
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
        const std::string cell = field + "[" + std::to_string(j) + "]";
        const std::int64_t v = as_int(row[j], cell);
        if (v < 0 || v > std::int64_t{0x7fffffff}) {
          throw json_error(cell + ": " + std::to_string(v) + " is outside [0, 2^31)");
        }
        req_to_token.push_back(static_cast<std::int32_t>(v));
      }
    }
    std::int64_t max_seq = 0, prefix_used = 0, full_used = b - bs, columns = 1;
    for (std::int64_t r = 0; r < bs; ++r) {
      const std::string at = "[" + std::to_string(r) + "]";
      if (pool_index[r] < 0 || static_cast<std::size_t>(pool_index[r]) >= rows.size()) {
        throw json_error("req_pool_index" + at + ": " + std::to_string(pool_index[r]) +
                         " is outside [0, pool_rows " + std::to_string(rows.size()) + ")");
      }
      const std::int64_t len = std::int64_t{seq_len[r]} + w;  // L, the post-write length
      if (len > static_cast<std::int64_t>(width)) {
        throw json_error("seq_len" + at + ": " + std::to_string(seq_len[r]) + " + " +
                         std::to_string(w) + " window tokens needs " + std::to_string(len) +
                         " positions, past the row width " + std::to_string(width));
      }
      max_seq = std::max<std::int64_t>(max_seq, seq_len[r]);
      prefix_used += seq_len[r];
      full_used += len;
      columns = std::max(columns, ceil_div(len, ps));
    }
    const std::int32_t cap = optional_at_least(doc, "page_table_capacity", columns, 1);
    if (b * cap > max_output_cells) {
      throw json_error("page_table_capacity: " + std::to_string(cap) + " columns x bucket " +
                       std::to_string(b) + " exceeds the limit of " +
                       std::to_string(max_output_cells) + " table cells");
    }
    // Each used count is below the input's cells (+ the bucket), so it fits int32.
    const std::int32_t prefix_cap = optional_at_least(doc, "triton_kv_capacity", prefix_used, 0);
    const std::int32_t full_cap = optional_at_least(doc, "flashinfer_kv_capacity", full_used, 0);
    const auto prefix_kept =
        static_cast<std::size_t>(std::min<std::int64_t>(prefix_used, prefix_cap));
    const auto full_kept = static_cast<std::size_t>(std::min<std::int64_t>(full_used, full_cap));

    // The bucket's per-request inputs: the real requests, then padded rows (pool row 0).
    const auto n = static_cast<std::size_t>(b);
    std::vector<std::int32_t> seq(n, 0), acc(n, w), pool(n, 0);
    std::copy(seq_len.begin(), seq_len.end(), seq.begin());
    std::copy(accept_len.begin(), accept_len.end(), acc.begin());
    std::copy(pool_index.begin(), pool_index.end(), pool.begin());
    extend_params p;
    p.req_to_token = req_to_token.data();
    p.req_to_token_stride = static_cast<std::int64_t>(width);
    p.pool_rows = static_cast<std::int32_t>(rows.size());
    p.req_pool_index = pool.data();
    p.seq_len = seq.data();
    p.accept_len = acc.data();
    p.batch = bucket;
    p.real_batch = static_cast<std::int32_t>(bs);
    p.extend_tokens = w;
    p.page_size = ps;
    p.max_seq_len = static_cast<std::int32_t>(max_seq);

    const auto tokens = n * static_cast<std::size_t>(w), cols = static_cast<std::size_t>(cap);
    std::vector<std::int32_t> position(std::max<std::size_t>(tokens, 1)),
        slot(std::max<std::size_t>(tokens, 1)), select(std::max<std::size_t>(n, 1)),
        table(std::max<std::size_t>(n * cols, 1)), cache(std::max<std::size_t>(n, 1)), cu_q(n + 1),
        cu_k(n + 1), max_k(1), pre_qo(n + 1), pre_kv(n + 1),
        pre_ix(std::max<std::size_t>(prefix_kept, 1)), full_qo(n + 1), full_kv(n + 1),
        full_ix(std::max<std::size_t>(full_kept, 1)), last(std::max<std::size_t>(n, 1));
    std::vector<guard_word> guards(extend_guard_count, guard_word{});
    p.position = position.data();
    p.out_cache_loc = slot.data();
    p.select_index = select.data();
    p.page_table = table.data();
    p.page_stride = cap;
    p.page_capacity = cap;
    p.cache_seqlen = cache.data();
    p.cu_seqlens_q = cu_q.data();
    p.cu_seqlens_k = cu_k.data();
    p.max_seqlen_k = max_k.data();
    p.prefix_qo_indptr = pre_qo.data();
    p.prefix_kv_indptr = pre_kv.data();
    p.prefix_kv_indices = pre_ix.data();
    p.prefix_kv_capacity = prefix_cap;  // stores stop at the used count: the buffer holds those
    p.full_qo_indptr = full_qo.data();
    p.full_kv_indptr = full_kv.data();
    p.full_kv_indices = full_ix.data();
    p.full_kv_capacity = full_cap;
    p.full_kv_last_page_len = last.data();
    p.guard = guards.data();
    // The library checks the scalars and every content again (invalid_argument naming the
    // field, nothing written), then its host twin runs on this thread.
    validate_contents_host(p);
    extend_metadata_host(p);

    out << "{\"tokens\":{\"position\":";
    write_list(out, position.data(), tokens);
    out << ",\"out_cache_loc\":";
    write_list(out, slot.data(), tokens);
    out << ",\"select_index\":";
    write_list(out, select.data(), n);
    out << "},\"fa3\":{\"cache_seqlen\":";
    write_list(out, cache.data(), n);
    out << ",\"cu_seqlens_q\":";
    write_list(out, cu_q.data(), n + 1);
    out << ",\"cu_seqlens_k\":";
    write_list(out, cu_k.data(), n + 1);
    out << ",\"page_table\":[";
    for (std::size_t r = 0; r < n; ++r) {
      out << (r ? "," : "");
      write_list(out, table.data() + r * cols, cols);
    }
    out << "],\"max_seqlen_q\":" << w << ",\"max_seqlen_k\":" << max_k[0]
        << "},\"triton\":{\"qo_indptr\":";
    write_list(out, pre_qo.data(), n + 1);
    out << ",\"kv_indptr\":";
    write_list(out, pre_kv.data(), n + 1);
    out << ",\"kv_indices\":";
    write_list(out, pre_ix.data(), prefix_kept);
    out << ",\"max_extend_len\":" << w << "},\"flashinfer\":{\"qo_indptr\":";
    write_list(out, full_qo.data(), n + 1);
    out << ",\"kv_indptr\":";
    write_list(out, full_kv.data(), n + 1);
    out << ",\"kv_indices\":";
    write_list(out, full_ix.data(), full_kept);
    out << ",\"kv_last_page_len\":";
    write_list(out, last.data(), n);
    out << "},\"violations\":[";
    // A guard word holds the first violation and a total; the CLI lists one page-table violation
    // per short row and one accept_len violation per row, so those two are derived here from the
    // checked inputs (a few lines each). The kv buffers' words are one per buffer already.
    bool first = true;
    auto next = [&] {
      out << (first ? "" : ",");
      first = false;
    };
    if (guards[0].violations != 0) {  // bad input the checks above let through: shown, not lost
      next();
      write_violation(out, guards[0]);
    }
    for (std::int64_t r = 0; r < bs; ++r) {
      const std::int64_t need = ceil_div(std::int64_t{seq_len[r]} + w, ps);
      if (need <= cap) continue;
      const std::int64_t page = req_to_token[static_cast<std::size_t>(pool_index[r]) * width +
                                             static_cast<std::size_t>(std::int64_t{cap} * ps)] /
                                ps;
      next();
      out << "{\"kind\":\"capacity\",\"kernel\":" << quote(to_string(kernel_id::extend_page_table))
          << ",\"row\":" << r << ",\"column\":" << cap << ",\"capacity\":" << cap
          << ",\"value\":" << page << ",\"count\":" << need - cap << '}';
    }
    for (int word : {2, 3}) {
      if (guards[static_cast<std::size_t>(word)].violations == 0) continue;
      next();
      write_violation(out, guards[static_cast<std::size_t>(word)]);
    }
    for (std::int64_t r = 0; r < bs; ++r) {
      if (accept_len[r] != 0) continue;
      next();
      out << "{\"kind\":" << quote(to_string(violation_kind::accept_len))
          << ",\"kernel\":" << quote(to_string(kernel_id::extend_select_index)) << ",\"row\":" << r
          << ",\"value\":0}";
    }
    out << "]}\n";
  });
}

}  // namespace specgraph::tools
