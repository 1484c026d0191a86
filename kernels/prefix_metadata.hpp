// Per-cell code of the step-invariant prefix metadata (docs/metadata.md section 2). Host+device.
//
// Two passes over the cells (request r, column j) of the bucket's prefix table, one thread per
// cell, so reads of req_to_token and stores of the table are spread over threads instead of one
// serial loop per request:
//   check: validates the request (pool row, seq_len; cell j == 0) and the slot of its page j,
//          records bad_input and flags the request in `refused`; cell 0 also snapshots the
//          row's high-water mark (when marks are kept);
//   fill:  writes page j (or the dummy page 0 past the prefix) and, in cell 0, last_page_len,
//          prefix_seqlen and the new high-water mark. A refused request is written as a padded
//          request (pool row 0, seq_len 1) is: no cell of an earlier round survives in it.
//          With high-water marks, cells at or past both the new pages and the previous mark are
//          already zero and are not written.
// cu_seqlens_q does not depend on the inputs and is written by the check pass for every request.
//
// Preconditions (validate(prefix_params); ranges in limits.hpp): 1 <= page_size <= 2^20,
// topk >= 1, batch * topk <= 2^24, 1 <= pool_rows <= 2^24, 1 <= seq_limit <= 2^28,
// seq_limit <= req_to_token_stride <= 2^31, 1 <= capacity <= page_table_stride <= 2^31, pointers
// non-null (refused, high_water_before: for the launcher). Cells: [0, batch * capacity).
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "kernels/padding_rows.hpp"
#include "specgraph/metadata.hpp"

namespace specgraph::kernels {

struct prefix_cell {
  std::int32_t request;
  std::int32_t column;
};

// The request's validated view, or false (and nothing read) when its scalars are out of range.
struct prefix_request {
  const std::int32_t* tokens;  // its row of req_to_token
  std::int32_t seq_len;
  std::int32_t last_page_len;
  std::int32_t prefix_pages;  // whole pages: (seq_len - last_page_len) / page_size
};

SPECGRAPH_HD prefix_cell prefix_cell_of(const prefix_params& p, std::int64_t cell) {
  // cell < batch * capacity <= 2^24 * 2^31: int64; the quotient and remainder fit int32.
  return {static_cast<std::int32_t>(cell / p.capacity),
          static_cast<std::int32_t>(cell % p.capacity)};
}

// The longest accepted seq_len: max_context_len, or the row stride when not given.
SPECGRAPH_HD std::int64_t prefix_seq_limit(const prefix_params& p) {
  return p.max_seq_len > 0 ? p.max_seq_len : p.req_to_token_stride;
}

SPECGRAPH_HD void prefix_request_at(const prefix_params& p, std::int32_t pool_row,
                                    std::int32_t seq_len, prefix_request* out) {
  // Rows are read at the table's real stride (engines allocate req_to_token wider).
  out->tokens = p.req_to_token + static_cast<std::int64_t>(pool_row) * p.req_to_token_stride;
  out->seq_len = seq_len;
  out->last_page_len = seq_len % p.page_size;
  out->prefix_pages = (seq_len - out->last_page_len) / p.page_size;
}

// The request's pool row and seq_len as the round reads them: a padded request's (pool row 0,
// seq_len 1) at or past the device real batch, whatever the inputs hold there.
SPECGRAPH_HD std::int64_t prefix_pool_row(const prefix_params& p, std::int32_t r) {
  return past_real_batch(p.padding_from, r) ? 0 : p.req_pool_index.load(r);
}
SPECGRAPH_HD std::int64_t prefix_seq_len(const prefix_params& p, std::int32_t r) {
  return past_real_batch(p.padding_from, r) ? 1 : p.seq_len.load(r);
}

// The request's pool row and seq_len are loaded as int64 (the inputs may be int32 or int64, at
// any stride) and range-checked before they are narrowed: an int64 that does not fit int32 is
// out of range like any other.
SPECGRAPH_HD bool prefix_request_of(const prefix_params& p, std::int32_t r, prefix_request* out) {
  const std::int64_t pool_row = prefix_pool_row(p, r);
  const std::int64_t seq_len = prefix_seq_len(p, r);
  if (pool_row < 0 || pool_row >= p.pool_rows) return false;
  if (seq_len < 0 || seq_len > prefix_seq_limit(p)) return false;
  prefix_request_at(p, static_cast<std::int32_t>(pool_row), static_cast<std::int32_t>(seq_len),
                    out);
  return true;
}

// What a padded request reads (docs/metadata.md section 4): pool row 0, one token.
SPECGRAPH_HD prefix_request padding_request(const prefix_params& p) {
  prefix_request q{};
  prefix_request_at(p, 0, 1, &q);
  return q;
}

// The slot of page j of a request (its first token), as stored in req_to_token.
SPECGRAPH_HD std::int32_t prefix_slot(const prefix_params& p, const prefix_request& q,
                                      std::int32_t j) {
  return q.tokens[static_cast<std::int64_t>(j) * p.page_size];  // j * ps < seq_len <= 2^28
}

struct prefix_check_kernel {
  using params = prefix_params;
  static constexpr const char* name = "prefix_check";
  static constexpr kernel_id id = kernel_id::prefix_metadata;

  static std::int64_t rows(const params& p) {
    return static_cast<std::int64_t>(p.batch) * p.capacity;
  }

  SPECGRAPH_HD static bool bad_slot(const params& p, std::int32_t slot) {
    return slot < 0 || slot >= p.slot_limit;
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    if (p.run_when_zero != nullptr && *p.run_when_zero != 0) return;
    const prefix_cell c = prefix_cell_of(p, cell);
    const std::int32_t r = c.request;
    if (c.column == 0) {
      // The mark as the round found it, for the fill pass (which rewrites the mark itself). A
      // corrupted mark counts as the whole row.
      if (p.high_water != nullptr) {
        const std::int32_t mark = p.high_water[r];
        p.high_water_before[r] = mark < 0 || mark > p.capacity ? p.capacity : mark;
      }
      // batch * topk <= 2^24: fits int32.
      p.cu_seqlens_q[r] = r * p.topk;
      if (r == p.batch - 1) p.cu_seqlens_q[p.batch] = p.batch * p.topk;
    }
    prefix_request q{};
    if (!prefix_request_of(p, r, &q)) {
      if (c.column == 0) {
        // The value as loaded (int64: an int64 input that does not fit int32 is named as is).
        const std::int64_t pool_row = prefix_pool_row(p, r);
        if (pool_row < 0 || pool_row >= p.pool_rows) {
          guard_record(p.guard, violation_kind::bad_input, id, r, -1, p.pool_rows, pool_row);
        } else {
          guard_record(p.guard, violation_kind::bad_input, id, r, -1,
                       static_cast<std::int32_t>(prefix_seq_limit(p)), prefix_seq_len(p, r));
        }
        p.refused[r] = 1;
      }
      return;
    }
    if (c.column < q.prefix_pages) {
      const std::int32_t slot = prefix_slot(p, q, c.column);
      if (bad_slot(p, slot)) {
        guard_record(p.guard, violation_kind::bad_input, id, r, c.column * p.page_size, -1, slot);
        p.refused[r] = 1;
      }
    }
    // Pages past the table's capacity (only when a caller's capacity is below the prefix) are
    // checked by the row's last cell.
    if (c.column == p.capacity - 1) {
      for (std::int32_t j = p.capacity; j < q.prefix_pages; ++j) {
        const std::int32_t slot = prefix_slot(p, q, j);
        if (bad_slot(p, slot)) {
          guard_record(p.guard, violation_kind::bad_input, id, r, j * p.page_size, -1, slot);
          p.refused[r] = 1;
        }
      }
    }
  }
};

// With a device step counter (run_when_zero) the refused flags are cleared by this kernel at
// step 0 only, not by a memset before every step: the expand and CSR kernels of every step of
// the round read them (a refused request is padding in every table of its round).
struct prefix_clear_kernel {
  using params = prefix_params;
  static constexpr const char* name = "prefix_clear";

  static std::int64_t rows(const params& p) { return p.batch; }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t r) {
    if (p.run_when_zero != nullptr && *p.run_when_zero != 0) return;
    p.refused[r] = 0;
  }
};

struct prefix_fill_kernel {
  using params = prefix_params;
  static constexpr const char* name = "prefix_fill";
  static constexpr kernel_id id = kernel_id::prefix_metadata;

  static std::int64_t rows(const params& p) { return prefix_check_kernel::rows(p); }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    if (p.run_when_zero != nullptr && *p.run_when_zero != 0) return;
    const prefix_cell c = prefix_cell_of(p, cell);
    const std::int32_t r = c.request;
    prefix_request q{};
    // A refused request is written as a padded one: nothing of an earlier round survives in
    // its row (the refusal itself is counted by the check pass).
    const bool padded = p.refused[r] != 0 || !prefix_request_of(p, r, &q);
    if (padded) q = padding_request(p);
    const std::int32_t pages = q.prefix_pages < p.capacity ? q.prefix_pages : p.capacity;
    if (c.column == 0) {
      p.last_page_len[r] = q.last_page_len;
      p.prefix_seqlen[r] = q.seq_len - q.last_page_len;
      if (p.high_water != nullptr) p.high_water[r] = pages;
    }
    // Cells past both the pages and the previous mark are zero already: not written.
    if (p.high_water != nullptr && c.column >= pages && c.column >= p.high_water_before[r]) return;
    std::int32_t* table_row = p.page_table + static_cast<std::int64_t>(r) * p.page_table_stride;
    // Cells past the prefix get the dummy page 0: nothing stale from an earlier round survives.
    // The padded request's one page (page_size 1) is req_to_token[0][0], kept on page 0 by the
    // engine (section 1); should it be out of range, the dummy page itself.
    std::int32_t page = 0;
    if (c.column < q.prefix_pages) {
      const std::int32_t slot = prefix_slot(p, q, c.column);
      page = padded && prefix_check_kernel::bad_slot(p, slot) ? 0 : slot / p.page_size;
    }
    table_row[c.column] = page;
    // A prefix longer than the table (a caller's capacity below ceil(max_context_len / ps)):
    // the row's last cell refuses and records each page that does not fit.
    if (c.column == p.capacity - 1) {
      for (std::int32_t j = p.capacity; j < q.prefix_pages; ++j) {
        checked_store(table_row, j, p.capacity, prefix_slot(p, q, j) / p.page_size, p.guard, id, r);
      }
    }
  }
};

}  // namespace specgraph::kernels
