// Per-cell code of the draft-extend metadata (docs/extend.md), part 2: the fill passes, after
// extend_check.hpp's check and scan (which leave each request's padded flag and sums in
// scratch). Host+device. A padded row (past the real batch, or refused by the check) is
// written as the spec's padding row: positions and slots 0, one key (req_to_token[0][0]), no
// prefix entries.
//
//   tokens_fill:  one thread per token row t = r * W + j: position and out_cache_loc;
//   page_fill:    one thread per (request r, column c < max(page_capacity, ceil((M + W) / ps))):
//                 the page id of the row's c-th page for c < ceil(L / ps), refused past the
//                 capacity (extend_page_table), and 0 in every other column up to the capacity,
//                 so no page id of an earlier round or a later position is left in the row;
//   prefix_fill:  one thread per (request r, position q < M): the slot at q < seq_len into the
//                 prefix kv_indices (extend_triton_kv_indices past the capacity);
//   full_fill:    one thread per (request r, position q < M + W): the slot at q < L into the
//                 full kv_indices (extend_flashinfer_kv_indices past the capacity).
#pragma once

#include <cstdint>

#include "kernels/extend_check.hpp"

namespace specgraph::kernels {

struct extend_tokens_fill_kernel {
  using params = extend_params;
  static constexpr const char* name = "extend_tokens_fill";

  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return p.position == nullptr ? 0 : static_cast<std::int64_t>(p.batch) * p.extend_tokens;
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t t64) {
    const extend_scratch s = extend_scratch_of(p);
    const auto t = static_cast<std::int32_t>(t64);  // batch * W <= max_rows
    const std::int32_t r = t / p.extend_tokens, j = t % p.extend_tokens;
    const std::int32_t n = static_cast<std::int32_t>(rows(p));
    std::int64_t position = 0, slot = 0;
    if (s.padded[r] == 0) {
      position = static_cast<std::int64_t>(p.seq_len[r]) + j;
      slot = extend_pool_row(p, p.req_pool_index[r])[position];
    }
    const kernel_id id = kernel_id::extend_metadata;
    checked_store(p.position, t, n, position, p.guard, id, r);
    checked_store(p.out_cache_loc, t, n, slot, p.guard, id, r);
  }
};

// ceil((M + W) / ps): the most pages a real row covers.
SPECGRAPH_HD std::int64_t extend_page_span(const extend_params& p) {
  const std::int64_t pages = (extend_span(p) + p.page_size - 1) / p.page_size;
  return p.page_capacity > pages ? p.page_capacity : pages;
}

struct extend_page_fill_kernel {
  using params = extend_params;
  static constexpr const char* name = "extend_page_fill";

  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return p.page_table == nullptr ? 0 : p.batch * extend_page_span(p);
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    const extend_scratch s = extend_scratch_of(p);
    const std::int64_t span = extend_page_span(p);
    const auto r = static_cast<std::int32_t>(cell / span);
    const auto c = static_cast<std::int32_t>(cell % span);
    const bool padded = s.padded[r] != 0;
    const std::int64_t len = padded ? 1 : static_cast<std::int64_t>(p.seq_len[r]) + p.extend_tokens;
    const bool used = c < (len + p.page_size - 1) / p.page_size;
    if (!used && c >= p.page_capacity) return;
    std::int64_t page = 0;
    if (used) {
      page = padded ? extend_pad_slot(p) / p.page_size
                    : extend_pool_row(
                          p, p.req_pool_index[r])[static_cast<std::int64_t>(c) * p.page_size] /
                          p.page_size;
    }
    checked_store(p.page_table + r * p.page_stride, c, p.page_capacity, page, p.guard + 1,
                  kernel_id::extend_page_table, r);
  }
};

struct extend_prefix_fill_kernel {
  using params = extend_params;
  static constexpr const char* name = "extend_prefix_fill";

  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return p.prefix_kv_indices == nullptr ? 0 : static_cast<std::int64_t>(p.batch) * p.max_seq_len;
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    const extend_scratch s = extend_scratch_of(p);
    const auto r = static_cast<std::int32_t>(cell / p.max_seq_len);
    const auto q = static_cast<std::int32_t>(cell % p.max_seq_len);
    if (s.padded[r] != 0 || q >= p.seq_len[r]) return;
    const auto at = static_cast<std::int32_t>(s.prefix_start[r] + q);  // < batch * M
    checked_store(p.prefix_kv_indices, at, extend_clamp32(p.prefix_kv_capacity),
                  extend_pool_row(p, p.req_pool_index[r])[q], p.guard + 2,
                  kernel_id::extend_triton_kv_indices, r);
  }
};

struct extend_full_fill_kernel {
  using params = extend_params;
  static constexpr const char* name = "extend_full_fill";

  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return p.full_kv_indices == nullptr ? 0 : p.batch * extend_span(p);
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    const extend_scratch s = extend_scratch_of(p);
    const std::int64_t span = extend_span(p);
    const auto r = static_cast<std::int32_t>(cell / span);
    const auto q = static_cast<std::int32_t>(cell % span);
    const bool padded = s.padded[r] != 0;
    const std::int64_t len = padded ? 1 : static_cast<std::int64_t>(p.seq_len[r]) + p.extend_tokens;
    if (q >= len) return;
    const std::int64_t slot =
        padded ? extend_pad_slot(p) : extend_pool_row(p, p.req_pool_index[r])[q];
    const auto at = static_cast<std::int32_t>(s.full_start[r] + q);  // < batch * (M + W)
    checked_store(p.full_kv_indices, at, extend_clamp32(p.full_kv_capacity), slot, p.guard + 3,
                  kernel_id::extend_flashinfer_kv_indices, r);
  }
};

}  // namespace specgraph::kernels
