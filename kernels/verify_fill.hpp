// Per-cell code of the target-verify metadata (docs/verify.md), part 2: the fill passes, after
// verify_tree.hpp's check, scan, count and scan_rows. Host+device. A refused request (flagged)
// gets empty sequences: cache_seqlen 0, its table cells 0, no kv entries and no mask bytes, so
// every indptr stays complete and monotone.
//
//   prefix_fill:  one thread per (request r, column j < max(prefix_capacity, ceil(M / ps))): the
//                 page id of the request's j-th page, 0 past its last page; columns past the
//                 capacity that hold a page are refused (verify_prefix_page_table). Column 0 also
//                 writes the request's cache_seqlen and cu_seqlens cells;
//   expand_fill:  one thread per expand row e = r * D + i: cache_seqlen, cu_seqlens and the row of
//                 D slots, the attended ones first (increasing j), then the others;
//   kv_fill:      one thread per (request r, position p < M + D): the slot at p into kv_indices
//                 (checked against kv_indices_capacity); p = 0 writes the request's indptr cells;
//   mask_fill:    one thread per (request r, byte b): bits 8b .. 8b + 7 of the request's block in
//                 little bit order (checked against packed_mask_capacity).
#pragma once

#include <cstdint>

#include "kernels/verify_tree.hpp"

namespace specgraph::kernels {

// ceil(M / ps): the most pages a prefix of admissible length covers.
SPECGRAPH_HD std::int64_t verify_prefix_pages(const verify_params& p, std::int64_t seq_len) {
  return (seq_len + p.page_size - 1) / p.page_size;
}

SPECGRAPH_HD std::int64_t verify_prefix_span(const verify_params& p) {
  const std::int64_t pages = verify_prefix_pages(p, p.max_seq_len);
  return p.prefix_capacity > pages ? p.prefix_capacity : pages;
}

// Bytes of the packed mask of a request with `cells` cells.
SPECGRAPH_HD std::int64_t verify_bytes(std::int64_t cells) {
  return (cells + 7) / 8;
}

// An accepted request's view (the check pass accepted it), or false for a refused one.
SPECGRAPH_HD bool verify_accepted(const verify_params& p, const verify_scratch& s, std::int32_t r,
                                  verify_request* v) {
  return s.refused[r] == 0 && verify_request_of(p, r, v);
}

struct verify_prefix_fill_kernel {
  using params = verify_params;
  static constexpr const char* name = "verify_prefix_fill";

  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return p.prefix_page_table == nullptr ? 0 : p.batch * verify_prefix_span(p);
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    const verify_scratch s = verify_scratch_of(p);
    const std::int64_t span = verify_prefix_span(p);
    const auto r = static_cast<std::int32_t>(cell / span);
    const auto j = static_cast<std::int32_t>(cell % span);
    verify_request v{};
    const bool accepted = verify_accepted(p, s, r, &v);
    const std::int32_t seq_len = accepted ? v.seq_len : 0;
    const kernel_id meta = kernel_id::verify_metadata;
    if (j == 0) {
      const std::int32_t n = p.batch + 1;
      if (r == 0) {
        checked_store(p.prefix_cu_seqlens_q, 0, n, 0, p.guard, meta, r);
        checked_store(p.prefix_cu_seqlens_k, 0, n, 0, p.guard, meta, r);
      }
      checked_store(p.prefix_cache_seqlen, r, p.batch, seq_len, p.guard, meta, r);
      checked_store(p.prefix_cu_seqlens_q, r + 1, n,
                    static_cast<std::int64_t>(r + 1) * p.draft_tokens, p.guard, meta, r);
      checked_store(p.prefix_cu_seqlens_k, r + 1, n, s.prefix_keys[r] + seq_len, p.guard, meta, r);
    }
    const bool used = j < verify_prefix_pages(p, seq_len);
    if (!used && j >= p.prefix_capacity) return;
    const std::int64_t page =
        used ? v.entries[static_cast<std::int64_t>(j) * p.page_size] / p.page_size : 0;
    checked_store(p.prefix_page_table + r * p.prefix_stride, j, p.prefix_capacity, page, p.guard,
                  kernel_id::verify_prefix_page_table, r);
  }
};

struct verify_expand_fill_kernel {
  using params = verify_params;
  static constexpr const char* name = "verify_expand_fill";

  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return p.expand_page_table == nullptr ? 0 : static_cast<std::int64_t>(p.batch) * p.draft_tokens;
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t e64) {
    const verify_scratch s = verify_scratch_of(p);
    const std::int32_t d = p.draft_tokens;
    const auto e = static_cast<std::int32_t>(e64);  // < max_rows
    const std::int32_t r = e / d, i = e % d;
    const std::int32_t n = static_cast<std::int32_t>(rows(p)) + 1;
    const kernel_id meta = kernel_id::verify_metadata;
    if (e == 0) {
      checked_store(p.expand_cu_seqlens_q, 0, n, 0, p.guard, meta, r);
      checked_store(p.expand_cu_seqlens_k, 0, n, 0, p.guard, meta, r);
    }
    const std::int64_t count = s.count[e];
    checked_store(p.expand_cache_seqlen, e, n - 1, count, p.guard, meta, r);
    checked_store(p.expand_cu_seqlens_q, e + 1, n, e + 1, p.guard, meta, r);
    checked_store(p.expand_cu_seqlens_k, e + 1, n, s.row_start[e] + count, p.guard, meta, r);
    std::int32_t* row = p.expand_page_table + e * p.expand_stride;
    verify_request v{};
    if (!verify_accepted(p, s, r, &v)) {
      for (std::int32_t j = 0; j < d; ++j) checked_store(row, j, d, 0, p.guard, meta, r);
      return;
    }
    std::int32_t front = 0, back = static_cast<std::int32_t>(count);
    for (std::int32_t j = 0; j < d; ++j) {
      const std::int32_t slot = v.entries[v.seq_len + j];
      const std::int32_t column = verify_bit(p, s, r, v, i, j) ? front++ : back++;
      checked_store(row, column, d, slot, p.guard, meta, r);
    }
  }
};

struct verify_kv_fill_kernel {
  using params = verify_params;
  static constexpr const char* name = "verify_kv_fill";

  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return p.kv_indices == nullptr ? 0 : p.batch * verify_span(p);
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    const verify_scratch s = verify_scratch_of(p);
    const std::int64_t span = verify_span(p);
    const auto r = static_cast<std::int32_t>(cell / span);
    const auto pos = static_cast<std::int32_t>(cell % span);
    verify_request v{};
    const bool accepted = verify_accepted(p, s, r, &v);
    const std::int32_t len = accepted ? v.seq_len + p.draft_tokens : 0;
    const std::int64_t start = s.kv_start[r];
    if (pos == 0) {
      const std::int32_t n = p.batch + 1;
      const kernel_id meta = kernel_id::verify_metadata;
      const std::int64_t bytes = accepted ? verify_bytes(verify_block_cells(p, v.seq_len)) : 0;
      if (r == 0) {
        checked_store(p.qo_indptr, 0, n, 0, p.guard, meta, r);
        checked_store(p.kv_indptr, 0, n, 0, p.guard, meta, r);
        checked_store(p.mask_indptr, 0, n, 0, p.guard, meta, r);
        checked_store(p.packed_mask_indptr, 0, n, 0, p.guard, meta, r);
      }
      checked_store(p.qo_indptr, r + 1, n, static_cast<std::int64_t>(r + 1) * p.draft_tokens,
                    p.guard, meta, r);
      checked_store(p.kv_indptr, r + 1, n, start + len, p.guard, meta, r);
      checked_store(p.kv_last_page_len, r, n - 1, 1, p.guard, meta, r);
      checked_store(p.mask_indptr, r + 1, n, (start + len) * p.draft_tokens, p.guard, meta, r);
      checked_store(p.packed_mask_indptr, r + 1, n, s.packed_start[r] + bytes, p.guard, meta, r);
    }
    if (pos >= len) return;
    checked_store(p.kv_indices, static_cast<std::int32_t>(start + pos),
                  static_cast<std::int32_t>(p.kv_indices_capacity),  // validated < 2^31
                  v.entries[pos], p.guard + 1, kernel_id::verify_kv_indices, r);
  }
};

struct verify_mask_fill_kernel {
  using params = verify_params;
  static constexpr const char* name = "verify_mask_fill";

  // Bytes of the largest request: ceil(D * (M + D) / 8).
  SPECGRAPH_HD static std::int64_t span(const params& p) {
    return verify_bytes(verify_block_cells(p, p.max_seq_len));
  }
  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return p.packed_mask == nullptr ? 0 : p.batch * span(p);
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    const verify_scratch s = verify_scratch_of(p);
    const std::int64_t bytes_max = span(p);
    const auto r = static_cast<std::int32_t>(cell / bytes_max);
    const std::int64_t b = cell % bytes_max;
    verify_request v{};
    if (!verify_accepted(p, s, r, &v)) return;
    const std::int64_t cells = verify_block_cells(p, v.seq_len);
    if (b >= verify_bytes(cells)) return;
    std::int32_t byte = 0;
    for (std::int32_t k = 0; k < 8; ++k) {
      const std::int64_t c = 8 * b + k;
      const bool bit = c < cells && (v.padded || p.custom_mask[s.mask_offset[r] + c] != 0);
      byte |= static_cast<std::int32_t>(bit) << k;
    }
    checked_store(p.packed_mask, static_cast<std::int32_t>(s.packed_start[r] + b),
                  static_cast<std::int32_t>(p.packed_mask_capacity), byte, p.guard + 2,
                  kernel_id::verify_packed_mask, r);
  }
};

}  // namespace specgraph::kernels
