// The next round's inputs (docs/next-round.md), part 1: which rows go on, a real row's content
// check, its allocation target, and the ring plan (pass 1). Host+device.
//
// The plan is ONE logical thread: the ring offsets are an exclusive prefix sum in row order, so
// one thread walks the rows (O(batch)) and then the ring entries this round takes (O(pages)) and
// leaves the plan in the scratch words for pass 2 (kernels/next_round_row.hpp):
//   scratch[0]             ring head at plan time
//   scratch[1]             N, the pages taken (>= 0), or -1 when nothing is allocated (stalled)
//   scratch[2 + r]         off[r], row r's first ring entry relative to the head
//   scratch[2 + batch + r] n[r], row r's pages (>= 0) when it allocates, -1 when it does not
// All arithmetic is int64: nxt <= max_context_len + 2^28 + page_size < 2^30, pages per row
// < 2^31, N < 2^51, ring counters [0, 2^62].
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/next_round_metadata.hpp"

namespace specgraph::kernels {

// Ring counters past this count as an empty ring (they never get there: 2^62 pages).
inline constexpr std::int64_t next_round_counter_limit = std::int64_t{1} << 62;
constexpr std::int64_t next_round_int32_max = 0x7fffffff;

SPECGRAPH_HD std::int32_t next_round_clamp32(std::int64_t v) {
  return static_cast<std::int32_t>(
      v > next_round_int32_max ? next_round_int32_max
                               : (v < -next_round_int32_max - 1 ? -next_round_int32_max - 1 : v));
}

SPECGRAPH_HD std::int64_t next_round_ceil_page(std::int64_t x, std::int64_t ps) {
  return (x + ps - 1) / ps * ps;
}

// The real batch: the launch scalar, or the device word clamped into [0, batch].
SPECGRAPH_HD std::int32_t next_round_real_batch(const next_round_params& p) {
  if (p.real_batch_at == nullptr) return p.real_batch;
  const std::int32_t v = *p.real_batch_at;
  return v < 0 ? 0 : (v > p.batch ? p.batch : v);
}

// A real row's first bad input (none: column 0). Columns: -1 new_seq_len outside
// [1, max_context_len] (capacity the limit); -2 req_pool_index outside [0, pool_rows) (capacity
// pool_rows); -3 allocated_len outside [new_seq_len, W] (capacity W); -4 the slot at
// allocated_len - 1 does not end a page run (allocated_len % ps != 0 and (slot + 1) % ps !=
// allocated_len % ps, or the rest of its page would pass INT32_MAX; capacity allocated_len % ps,
// value the slot).
struct next_round_fault {
  std::int32_t column = 0;
  std::int32_t capacity = 0;
  std::int64_t value = 0;
};

SPECGRAPH_HD next_round_fault next_round_check(const next_round_params& p, std::int32_t r) {
  next_round_fault f;
  const std::int64_t s = p.new_seq_len[r];
  if (s < 1 || s > limits::max_context_len) return {-1, limits::max_context_len, s};
  const std::int32_t row = p.req_pool_index[r];
  if (row < 0 || row >= p.pool_rows) return {-2, p.pool_rows, row};
  const std::int64_t alloc = p.allocated_len[r], w = p.req_to_token_stride;
  if (alloc < s || alloc > w) return {-3, next_round_clamp32(w), alloc};
  const std::int64_t ps = p.page_size, part = alloc % ps;
  if (part != 0) {
    const std::int64_t slot = p.req_to_token[static_cast<std::int64_t>(row) * w + alloc - 1];
    // The page's last slot, slot + ps - part, is written by pass 2: it must fit int32.
    if (slot < 0 || (slot + 1) % ps != part || slot + ps - part > next_round_int32_max) {
      return {-4, static_cast<std::int32_t>(part), slot};
    }
  }
  return f;
}

// Whether row r goes on to the next round (before the stall): real, not finished, content valid.
SPECGRAPH_HD bool next_round_goes_on(const next_round_params& p, std::int32_t r,
                                     std::int32_t real) {
  if (r >= real) return false;
  if (p.finished != nullptr && p.finished[r] != 0) return false;
  return next_round_check(p, r).column == 0;
}

// nxt = max(allocated_len, ceil_page(new_seq_len + reserve)), of a row that passed the check.
SPECGRAPH_HD std::int64_t next_round_target(const next_round_params& p, std::int32_t r) {
  const std::int64_t cur = p.allocated_len[r];
  const std::int64_t want =
      next_round_ceil_page(static_cast<std::int64_t>(p.new_seq_len[r]) + p.reserve, p.page_size);
  return want > cur ? want : cur;
}

// Pages a row takes to grow from cur to nxt: ceil(nxt / ps) - ceil(cur / ps).
SPECGRAPH_HD std::int64_t next_round_pages(std::int64_t cur, std::int64_t nxt, std::int64_t ps) {
  return (nxt + ps - 1) / ps - (cur + ps - 1) / ps;
}

// The ring's available pages: tail - head, 0 when negative or a counter is outside
// [0, next_round_counter_limit].
SPECGRAPH_HD std::int64_t next_round_available(std::int64_t head, std::int64_t tail) {
  if (head < 0 || tail < head || tail > next_round_counter_limit) return 0;
  return tail - head;
}

// Whether a ring entry is a page pass 2 may write: [0, max_page_id] and its last slot
// page * ps + ps - 1 <= INT32_MAX.
SPECGRAPH_HD bool next_round_page_ok(std::int64_t page, std::int64_t ps) {
  return page >= 0 && page <= limits::max_page_id && page * ps + ps - 1 <= next_round_int32_max;
}

// Pass 1 (one logical thread): the ring plan above. Records in guard[0] (next_round_alloc) a row
// too narrow (row_width: row r, column -1, capacity W, value nxt; the row takes nothing) and a
// short ring (ring: row -1, column -1, capacity the pages available clamped to int32, value N)
// or a bad entry among those about to be taken (ring: row -1, column k >= 0 its offset from the
// head clamped to int32, capacity the pages available clamped, value the entry); then the stall
// word is set and nothing is taken. A clamped real-batch word is recorded in guard[1]
// (bad_input, row -1, column -2, capacity batch, value the word).
struct next_round_plan_kernel {
  using params = next_round_params;
  static constexpr const char* name = "next_round_plan";
  static constexpr kernel_id id = kernel_id::next_round_alloc;

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    const std::int64_t b = p.batch;
    std::int64_t* off = p.scratch + 2;
    std::int64_t* pages = p.scratch + 2 + b;
    const std::int32_t real = next_round_real_batch(p);
    if (p.real_batch_at != nullptr && real != *p.real_batch_at) {
      guard_record(p.guard + 1, violation_kind::bad_input, kernel_id::next_round_slots, -1, -2,
                   p.batch, *p.real_batch_at);
    }
    const std::int64_t head = *p.ring_head;
    p.scratch[0] = head;
    bool go = *p.stall == 0;
    std::int64_t total = 0;
    for (std::int32_t r = 0; r < p.batch; ++r) {
      off[r] = total;
      pages[r] = -1;
      if (!go || !next_round_goes_on(p, r, real)) continue;
      const std::int64_t nxt = next_round_target(p, r);
      if (nxt > p.req_to_token_stride) {
        guard_record(p.guard, violation_kind::row_width, id, r, -1,
                     next_round_clamp32(p.req_to_token_stride), nxt);
        continue;
      }
      pages[r] = next_round_pages(p.allocated_len[r], nxt, p.page_size);
      total += pages[r];
    }
    if (go) {
      const std::int64_t available = next_round_available(head, *p.ring_tail);
      if (total > available) {
        guard_record(p.guard, violation_kind::ring, id, -1, -1, next_round_clamp32(available),
                     total);
        go = false;
      }
      for (std::int64_t k = 0; go && k < total; ++k) {
        const std::int64_t page = p.ring[(head + k) % p.ring_capacity];
        if (!next_round_page_ok(page, p.page_size)) {
          guard_record(p.guard, violation_kind::ring, id, -1, next_round_clamp32(k),
                       next_round_clamp32(available), page);
          go = false;
        }
      }
      if (!go) *p.stall = 1;
    }
    if (!go) {
      for (std::int32_t r = 0; r < p.batch; ++r) pages[r] = -1;
      p.scratch[1] = -1;
      return;
    }
    p.scratch[1] = total;
    *p.ring_head = head + total;
  }
};

}  // namespace specgraph::kernels
