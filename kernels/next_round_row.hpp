// The next round's inputs (docs/next-round.md), part 2: one logical thread per row, after the
// plan (kernels/next_round_alloc.hpp). An allocating row writes its new req_to_token positions
// and allocated_len; then every row writes its next-round outputs. Host+device.
//
// Positions (s = new_seq_len, ps = page_size, all int64): draft token j of branch t sits at
//   s + t * num_steps + j                                      (ps = 1 or topk = 1)
//   floor_page(s) + t * nnp * ps + s % ps + j, nnp = ceil((s % ps + num_steps) / ps)  (else)
// tail copy (t >= 1, o < s % ps): dst floor_page(s) + t * nnp * ps + o, src floor_page(s) + o;
// verify j < D: s + j. The largest is below s + topk * (num_steps + 2 * ps) < 2^32.
#pragma once

#include <cstdint>

#include "kernels/next_round_alloc.hpp"

namespace specgraph::kernels {

// A row's next-round position layout.
struct next_round_layout {
  std::int64_t s = 0;       // new_seq_len
  std::int64_t base = 0;    // s at ps = 1 or topk = 1, else floor_page(s)
  std::int64_t branch = 0;  // positions per branch: num_steps, or nnp * ps
  std::int64_t lead = 0;    // 0, or s % ps: the first draft token's offset in its region
  bool paged = false;       // ps > 1 and topk > 1: regions and prefix-tail copies
};

SPECGRAPH_HD next_round_layout next_round_layout_of(const next_round_params& p, std::int64_t s) {
  next_round_layout l;
  l.s = s;
  const std::int64_t ps = p.page_size;
  l.paged = ps > 1 && p.topk > 1;
  if (!l.paged) {
    l.base = s;
    l.branch = p.num_steps;
  } else {
    l.lead = s % ps;
    l.base = s - l.lead;
    l.branch = (l.lead + p.num_steps + ps - 1) / ps * ps;
  }
  return l;
}

SPECGRAPH_HD std::int64_t next_round_draft_pos(const next_round_layout& l, std::int64_t t,
                                               std::int64_t j) {
  return l.base + t * l.branch + l.lead + j;
}

struct next_round_row_kernel {
  using params = next_round_params;
  static constexpr const char* name = "next_round_row";
  static constexpr kernel_id slots_id = kernel_id::next_round_slots;
  static constexpr kernel_id out_id = kernel_id::next_round_outputs;

  SPECGRAPH_HD static std::int64_t rows(const params& p) { return p.batch; }

  // Capacities are validated <= INT32_MAX and every flat index < max_rows.
  SPECGRAPH_HD static std::int32_t cap(std::int64_t c) { return static_cast<std::int32_t>(c); }

  // The row's allocation: the rest of a partial last page, then whole ring pages.
  SPECGRAPH_HD static void allocate(const params& p, std::int32_t r, std::int32_t* slots) {
    const std::int64_t ps = p.page_size, cur = p.allocated_len[r];
    const std::int64_t nxt = next_round_target(p, r);
    const std::int64_t aligned = next_round_ceil_page(cur, ps);
    const std::int64_t head = p.scratch[0], off = p.scratch[2 + r];
    const std::int64_t n = p.scratch[2 + static_cast<std::int64_t>(p.batch) + r];
    const std::int64_t w = p.req_to_token_stride;
    if (nxt > w) return;  // the plan refused it (row_width); never reached
    const std::int64_t last = cur > 0 ? slots[cur - 1] : 0;
    for (std::int64_t pos = cur; pos < nxt && pos < aligned; ++pos) {
      slots[pos] = static_cast<std::int32_t>(last + 1 + (pos - cur));
    }
    for (std::int64_t m = 0; m < n; ++m) {
      const std::int64_t page = p.ring[(head + off + m) % p.ring_capacity];
      for (std::int64_t o = 0; o < ps; ++o) {
        const std::int64_t pos = aligned + m * ps + o;
        if (pos < w) slots[pos] = static_cast<std::int32_t>(page * ps + o);
      }
    }
    p.allocated_len[r] = static_cast<std::int32_t>(nxt);
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row_index) {
    const auto r = static_cast<std::int32_t>(row_index);
    const std::int32_t real = next_round_real_batch(p);
    bool on = false;
    if (r < real && (p.finished == nullptr || p.finished[r] == 0)) {
      const next_round_fault f = next_round_check(p, r);
      if (f.column != 0) {
        guard_record(p.guard + 1, violation_kind::bad_input, slots_id, r, f.column, f.capacity,
                     f.value);
      } else {
        on = true;
      }
    }
    const bool active = on && p.scratch[1] >= 0;
    const std::int64_t b = p.batch;
    std::int32_t* slots = nullptr;
    std::int64_t alloc = 0;
    next_round_layout l = next_round_layout_of(p, 1);
    if (active) {
      slots =
          p.req_to_token + static_cast<std::int64_t>(p.req_pool_index[r]) * p.req_to_token_stride;
      if (p.scratch[2 + b + r] >= 0) allocate(p, r, slots);
      alloc = p.allocated_len[r];
      l = next_round_layout_of(p, p.new_seq_len[r]);
      report_unbacked(p, r, l, alloc);
    }
    // A position's slot: 0 when inactive or unbacked.
    auto slot_at = [&](std::int64_t pos) -> std::int64_t {
      return active && pos < alloc ? slots[pos] : 0;
    };
    guard_word* g = p.guard + 2;
    if (p.active != nullptr) {
      checked_store(p.active, r, cap(p.active_capacity), active ? 1 : 0, g, out_id, r);
    }
    if (p.seq_len != nullptr) {
      checked_store(p.seq_len, r, cap(p.seq_len_capacity), active ? l.s : 1, g, out_id, r);
    }
    if (p.root_token != nullptr) {
      checked_store(p.root_token, r, cap(p.root_token_capacity), active ? p.bonus[r] : 0, g, out_id,
                    r);
    }
    const std::int64_t k = p.topk;
    for (std::int64_t t = 0; t < k; ++t) {
      if (p.draft_position != nullptr) {
        checked_store(p.draft_position, static_cast<std::int32_t>(r * k + t),
                      cap(p.draft_position_capacity), active ? l.s : 0, g, out_id, r);
      }
      if (p.draft_out_cache_loc == nullptr) continue;
      const std::int64_t first = (r * k + t) * p.draft_slot_stride;
      for (std::int64_t j = 0; j < p.num_steps; ++j) {
        checked_store(p.draft_out_cache_loc, static_cast<std::int32_t>(first + j),
                      cap(p.draft_out_cache_loc_capacity), slot_at(next_round_draft_pos(l, t, j)),
                      g, out_id, r);
      }
    }
    const std::int64_t ps = p.page_size;
    if (p.tail_copy != nullptr && ps > 1 && k > 1) {
      for (std::int64_t t = 1; t < k; ++t) {
        for (std::int64_t o = 0; o < ps - 1; ++o) {
          const std::int64_t e = ((r * (k - 1) + t - 1) * (ps - 1) + o) * 2;
          const bool copy = active && o < l.lead;
          const std::int64_t dst = copy ? slot_at(l.base + t * l.branch + o) : -1;
          const std::int64_t src = copy ? slot_at(l.base + o) : -1;
          checked_store(p.tail_copy, static_cast<std::int32_t>(e), cap(p.tail_copy_capacity), dst,
                        g, out_id, r);
          checked_store(p.tail_copy, static_cast<std::int32_t>(e + 1), cap(p.tail_copy_capacity),
                        src, g, out_id, r);
        }
      }
    }
    if (p.verify_out_cache_loc != nullptr) {
      const std::int64_t first = r * static_cast<std::int64_t>(p.draft_tokens);
      for (std::int64_t j = 0; j < p.draft_tokens; ++j) {
        checked_store(p.verify_out_cache_loc, static_cast<std::int32_t>(first + j),
                      cap(p.verify_out_cache_loc_capacity), slot_at(l.s + j), g, out_id, r);
      }
    }
  }

  // The smallest next-round position (draft, tail copy destination, verify) at or past
  // allocated_len, recorded once per row in guard[1] (unbacked). Each branch reads one
  // contiguous run of positions (its tail copy destinations then its draft tokens), verify reads
  // [s, s + D); tail copy sources lie below s <= allocated_len.
  SPECGRAPH_HD static void report_unbacked(const params& p, std::int32_t r,
                                           const next_round_layout& l, std::int64_t alloc) {
    std::int64_t least = -1;
    auto see = [&](std::int64_t from, std::int64_t to) {  // the run [from, to)
      if (to <= alloc) return;
      const std::int64_t pos = from > alloc ? from : alloc;
      if (least < 0 || pos < least) least = pos;
    };
    for (std::int64_t t = 0; t < p.topk; ++t) {
      const std::int64_t from =
          l.paged && t >= 1 ? l.base + t * l.branch : next_round_draft_pos(l, t, 0);
      see(from, next_round_draft_pos(l, t, p.num_steps));
    }
    see(l.s, l.s + p.draft_tokens);
    if (least >= 0) {
      guard_record(p.guard + 1, violation_kind::unbacked, slots_id, r, next_round_clamp32(least),
                   next_round_clamp32(alloc), least);
    }
  }
};

}  // namespace specgraph::kernels
