// An independent reference for the target-verify metadata (docs/verify.md), written from the
// format's definition token by token, not from the kernels: per request, the list of its prefix
// pages, its verify slots sorted by (not attended, j), its kv positions and its mask cells in the
// engine's layout, then concatenated; capacities are applied afterwards to the whole lists.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "specgraph/guard.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph::testing {

struct verify_case {
  std::int32_t page_size = 1, draft_tokens = 1, max_seq_len = 1, real_batch = 1;
  std::int32_t pool_rows = 1;
  std::int64_t width = 1;                  // W
  std::vector<std::int32_t> req_to_token;  // [pool_rows][W]
  std::vector<std::int32_t> req_pool_index, seq_len;
  std::vector<std::uint8_t> mask;  // the engine's full layout, real requests only
  bool mask_exact = true;
  std::int64_t mask_cells_declared = -1;  // -1: mask.size()
  std::int64_t slot_limit = INT64_MAX;
  std::int32_t prefix_capacity = 0, kv_capacity = 0, packed_capacity = 0;
  std::int64_t prefix_stride = 0, expand_stride = 0;
  std::int32_t batch() const { return static_cast<std::int32_t>(seq_len.size()); }
  std::int64_t mask_cells() const {
    return mask_cells_declared >= 0 ? mask_cells_declared : static_cast<std::int64_t>(mask.size());
  }
};

struct verify_record {
  violation_kind kind;
  kernel_id kernel;
  std::int32_t row, column, capacity;
  std::int64_t value;
};

struct verify_expected {
  // FA3 prefix: [batch][prefix_capacity] (the cells written), cache_seqlen, cu_q, cu_k.
  std::vector<std::int32_t> prefix_table, prefix_cache_seqlen, prefix_cu_q, prefix_cu_k;
  // FA3 expand: [batch * D][D].
  std::vector<std::int32_t> expand_table, expand_cache_seqlen, expand_cu_q, expand_cu_k;
  // FlashInfer: every id and byte, stored or not (capacities apply to the first ones).
  std::vector<std::int32_t> qo_indptr, kv_indptr, kv_last_page_len, mask_indptr, packed_indptr;
  std::vector<std::int64_t> kv_ids, packed;
  std::vector<verify_record> records[verify_guard_count];
};

inline verify_expected verify_reference(const verify_case& c) {
  const std::int64_t D = c.draft_tokens, ps = c.page_size;
  const std::int32_t bs = c.batch();
  verify_expected out;
  std::vector<bool> refused(static_cast<std::size_t>(bs), false);
  auto bad = [&](std::int32_t r, std::int32_t column, std::int64_t limit, std::int64_t value) {
    refused[static_cast<std::size_t>(r)] = true;
    out.records[0].push_back({violation_kind::bad_input, kernel_id::verify_metadata, r, column,
                              static_cast<std::int32_t>(std::min<std::int64_t>(limit, INT32_MAX)),
                              value});
  };
  auto slot_at = [&](std::int32_t r, std::int64_t position) -> std::int64_t {
    return c.req_to_token[static_cast<std::size_t>(c.req_pool_index[r] * c.width + position)];
  };
  for (std::int32_t r = 0; r < bs; ++r) {
    const std::int64_t seq = c.seq_len[r], pool = c.req_pool_index[r];
    if (pool < 0 || pool >= c.pool_rows) {
      bad(r, -1, c.pool_rows, pool);
    } else if (seq < 1 || seq > c.max_seq_len) {
      bad(r, -1, c.max_seq_len, seq);
    } else if (seq + D > c.width) {
      bad(r, -1, c.width, seq);
    } else {
      for (std::int64_t p = 0; p < seq + D; ++p) {
        const std::int64_t slot = slot_at(r, p);
        if (slot < 0 || slot >= c.slot_limit) bad(r, static_cast<std::int32_t>(p), -1, slot);
      }
    }
  }
  // Mask blocks: where each real request's cells start in the engine's layout.
  std::vector<std::int64_t> block(static_cast<std::size_t>(bs) + 1, 0);
  for (std::int32_t r = 0; r < bs; ++r) {
    const std::int64_t seq = c.seq_len[r];
    const bool counted = r < c.real_batch && seq >= 1 && seq <= c.max_seq_len;
    block[r + 1] = block[r] + (counted ? D * (seq + D) : 0);
  }
  const std::int64_t needed = block[c.real_batch];
  if (c.mask_exact ? needed != c.mask_cells() : needed > c.mask_cells()) {
    out.records[0].push_back(
        {violation_kind::bad_input, kernel_id::verify_metadata, -1, -1,
         static_cast<std::int32_t>(std::min<std::int64_t>(c.mask_cells(), INT32_MAX)), needed});
    for (std::int32_t r = 0; r < c.real_batch; ++r) refused[static_cast<std::size_t>(r)] = true;
  }
  // Does query i of request r attend verify token j?
  auto attends = [&](std::int32_t r, std::int64_t i, std::int64_t j) {
    if (r >= c.real_batch) return true;
    const std::int64_t seq = c.seq_len[r];
    return c.mask[static_cast<std::size_t>(block[r] + i * (seq + D) + seq + j)] != 0;
  };
  out.prefix_cu_q = {0};
  out.prefix_cu_k = {0};
  out.expand_cu_q = {0};
  out.expand_cu_k = {0};
  out.qo_indptr = {0};
  out.kv_indptr = {0};
  out.mask_indptr = {0};
  out.packed_indptr = {0};
  std::vector<std::int32_t> kv_owner, byte_owner;
  for (std::int32_t r = 0; r < bs; ++r) {
    const bool ok = !refused[static_cast<std::size_t>(r)];
    const std::int64_t seq = ok ? c.seq_len[r] : 0;
    // FA3 prefix: the pages that hold positions 0, ps, 2 ps, ... < seq.
    std::vector<std::int64_t> pages;
    for (std::int64_t p = 0; p < seq; p += ps) pages.push_back(slot_at(r, p) / ps);
    for (std::int64_t j = 0; j < c.prefix_capacity; ++j) {
      out.prefix_table.push_back(
          j < static_cast<std::int64_t>(pages.size()) ? static_cast<std::int32_t>(pages[j]) : 0);
    }
    for (std::size_t j = static_cast<std::size_t>(c.prefix_capacity); j < pages.size(); ++j) {
      out.records[0].push_back({violation_kind::capacity, kernel_id::verify_prefix_page_table, r,
                                static_cast<std::int32_t>(j), c.prefix_capacity, pages[j]});
    }
    out.prefix_cache_seqlen.push_back(static_cast<std::int32_t>(seq));
    out.prefix_cu_q.push_back(static_cast<std::int32_t>((r + 1) * D));
    out.prefix_cu_k.push_back(out.prefix_cu_k.back() + static_cast<std::int32_t>(seq));
    // FA3 expand: per query, attended verify slots then the others.
    std::vector<std::int32_t> yes, no;
    for (std::int64_t i = 0; i < D; ++i) {
      yes.clear();
      no.clear();
      for (std::int64_t j = 0; ok && j < D; ++j) {
        (attends(r, i, j) ? yes : no).push_back(static_cast<std::int32_t>(slot_at(r, seq + j)));
      }
      const auto n = static_cast<std::int32_t>(yes.size());
      yes.insert(yes.end(), no.begin(), no.end());
      yes.resize(static_cast<std::size_t>(D), 0);  // a refused request: zeros
      out.expand_table.insert(out.expand_table.end(), yes.begin(), yes.end());
      out.expand_cache_seqlen.push_back(n);
      out.expand_cu_q.push_back(static_cast<std::int32_t>(out.expand_cu_q.size()));
      out.expand_cu_k.push_back(out.expand_cu_k.back() + n);
    }
    // FlashInfer: prefix and verify positions, the block's cells packed 8 per byte.
    out.qo_indptr.push_back(static_cast<std::int32_t>((r + 1) * D));
    const std::int64_t keys = ok ? seq + D : 0;
    for (std::int64_t p = 0; p < keys; ++p) {
      out.kv_ids.push_back(slot_at(r, p));
      kv_owner.push_back(r);
    }
    out.kv_indptr.push_back(out.kv_indptr.back() + static_cast<std::int32_t>(keys));
    out.kv_last_page_len.push_back(1);
    out.mask_indptr.push_back(static_cast<std::int32_t>(D * out.kv_indptr.back()));
    std::vector<int> cells;
    for (std::int64_t i = 0; ok && i < D; ++i) {
      for (std::int64_t col = 0; col < seq + D; ++col) {
        const bool one = r >= c.real_batch ||
                         c.mask[static_cast<std::size_t>(block[r] + i * (seq + D) + col)] != 0;
        cells.push_back(one ? 1 : 0);
      }
    }
    std::size_t bytes = 0;
    for (std::size_t b = 0; b * 8 < cells.size(); ++b, ++bytes) {
      std::int64_t v = 0;
      for (std::size_t k = 0; k < 8 && b * 8 + k < cells.size(); ++k) v += cells[b * 8 + k] << k;
      out.packed.push_back(v);
      byte_owner.push_back(r);
    }
    out.packed_indptr.push_back(out.packed_indptr.back() + static_cast<std::int32_t>(bytes));
  }
  for (std::size_t f = static_cast<std::size_t>(c.kv_capacity); f < out.kv_ids.size(); ++f) {
    out.records[1].push_back({violation_kind::capacity, kernel_id::verify_kv_indices, kv_owner[f],
                              static_cast<std::int32_t>(f), c.kv_capacity, out.kv_ids[f]});
  }
  for (std::size_t f = static_cast<std::size_t>(c.packed_capacity); f < out.packed.size(); ++f) {
    out.records[2].push_back({violation_kind::capacity, kernel_id::verify_packed_mask,
                              byte_owner[f], static_cast<std::int32_t>(f), c.packed_capacity,
                              out.packed[f]});
  }
  return out;
}

// The launch parameters of a case (pointers left for the caller).
inline verify_params verify_params_of(const verify_case& c) {
  verify_params p;
  p.req_to_token_stride = c.width;
  p.pool_rows = c.pool_rows;
  p.batch = c.batch();
  p.real_batch = c.real_batch;
  p.draft_tokens = c.draft_tokens;
  p.page_size = c.page_size;
  p.max_seq_len = c.max_seq_len;
  p.mask_cells = c.mask_cells();
  p.mask_length_exact = c.mask_exact;
  p.slot_limit = c.slot_limit;
  p.prefix_capacity = c.prefix_capacity;
  p.prefix_stride = c.prefix_stride;
  p.expand_stride = c.expand_stride;
  p.kv_indices_capacity = c.kv_capacity;
  p.packed_mask_capacity = c.packed_capacity;
  return p;
}

}  // namespace specgraph::testing
