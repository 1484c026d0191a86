// An independent reference of the draft-extend metadata (docs/extend.md), written from the
// semantics with plain loops over requests and positions: no code shared with kernels/extend_*.
// It takes only valid inputs (every real request's pool row, seq_len, accept_len and slots in
// range) and returns every output cell the library must write, the guard words' counts and the
// first violation each must record.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace specgraph::testing {

struct extend_case {
  std::int32_t page_size = 1;
  std::int32_t window = 1;  // W
  std::int32_t bucket = 0;  // B
  std::int32_t real_batch = 0;
  std::int32_t max_seq_len = 0;  // M
  std::int32_t pool_rows = 1;
  std::int64_t width = 1;  // req_to_token row width
  std::vector<std::int32_t> req_to_token;
  std::vector<std::int32_t> seq_len, accept_len, req_pool_index;  // [B]: rows past real: junk
  // Optional [B]: real requests refused as bad input (a fuzz harness's own check), written as
  // padded rows; empty: none. Their inputs are not read.
  std::vector<std::uint8_t> refused;
  // Optional [B][accept_stride]: acceptance's accept_index; a real row whose first entry is
  // negative accepted nothing and is written as a padded row, its inputs not read. Empty: none.
  std::vector<std::int32_t> accept_index;
  std::int64_t accept_stride = 0;
  std::int32_t page_capacity = 0;
  std::int64_t prefix_capacity = 0, full_capacity = 0;
};

struct extend_first {  // the lowest (row, column) violation of one guard word
  std::int64_t count = 0;
  std::int32_t row = 0, column = 0;
  std::int64_t value = 0;
};

struct extend_expect {
  std::vector<std::int64_t> position, out_cache_loc, select_index;
  std::vector<std::int64_t> cache_seqlen, cu_q, cu_k;
  std::vector<std::vector<std::int64_t>> page_rows;  // [B][page_capacity]
  std::int64_t max_k = 0;
  std::vector<std::int64_t> prefix_indptr, prefix_indices;  // indices: min(used, capacity)
  std::vector<std::int64_t> full_indptr, full_indices;
  extend_first page, prefix, full, accept;
};

inline void extend_note(extend_first& f, std::int32_t row, std::int32_t column,
                        std::int64_t value) {
  if (f.count == 0 || row < f.row || (row == f.row && column < f.column)) {
    f.row = row;
    f.column = column;
    f.value = value;
  }
  ++f.count;
}

inline extend_expect extend_reference(const extend_case& c) {
  extend_expect e;
  const std::int64_t W = c.window, ps = c.page_size;
  auto slot = [&](std::int64_t row, std::int64_t pos) {
    return c.req_to_token[row * c.width + pos];
  };
  std::int64_t keys = 0, prefix = 0;
  for (std::int32_t r = 0; r < c.bucket; ++r) {
    const bool real = r < c.real_batch &&
                      !(static_cast<std::size_t>(r) < c.refused.size() && c.refused[r] != 0) &&
                      !(!c.accept_index.empty() &&
                        c.accept_index[static_cast<std::size_t>(r * c.accept_stride)] < 0);
    const std::int64_t row = real ? c.req_pool_index[r] : 0;
    const std::int64_t seq = real ? c.seq_len[r] : 0;
    const std::int64_t L = real ? seq + W : 1;
    for (std::int64_t j = 0; j < W; ++j) {
      e.position.push_back(real ? seq + j : 0);
      e.out_cache_loc.push_back(real ? slot(row, seq + j) : 0);
    }
    std::int64_t select = r * W + W - 1;
    if (real) {
      const std::int64_t a = c.accept_len[r];
      select = a == 0 ? r * W : r * W + a - 1;
      if (a == 0) extend_note(e.accept, r, 0, 0);
    }
    e.select_index.push_back(select);
    e.cache_seqlen.push_back(L);
    e.cu_q.push_back(r * W);
    e.cu_k.push_back(keys);
    std::vector<std::int64_t> pages(static_cast<std::size_t>(c.page_capacity), 0);
    const std::int64_t need = (L + ps - 1) / ps;
    for (std::int64_t col = 0; col < need; ++col) {
      const std::int64_t page = slot(row, col * ps) / ps;
      if (col < c.page_capacity) {
        pages[static_cast<std::size_t>(col)] = page;
      } else {
        extend_note(e.page, r, static_cast<std::int32_t>(col), page);
      }
    }
    e.page_rows.push_back(pages);
    e.max_k = std::max(e.max_k, L);
    e.prefix_indptr.push_back(prefix);
    for (std::int64_t q = 0; q < seq; ++q, ++prefix) {
      if (prefix < c.prefix_capacity) {
        e.prefix_indices.push_back(slot(row, q));
      } else {
        extend_note(e.prefix, r, static_cast<std::int32_t>(prefix), slot(row, q));
      }
    }
    e.full_indptr.push_back(keys);
    for (std::int64_t q = 0; q < L; ++q, ++keys) {
      if (keys < c.full_capacity) {
        e.full_indices.push_back(slot(row, q));
      } else {
        extend_note(e.full, r, static_cast<std::int32_t>(keys), slot(row, q));
      }
    }
  }
  e.cu_q.push_back(c.bucket * W);
  e.cu_k.push_back(keys);
  e.prefix_indptr.push_back(prefix);
  e.full_indptr.push_back(keys);
  return e;
}

}  // namespace specgraph::testing
