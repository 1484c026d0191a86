// An independent reference of the next round's inputs (docs/next-round.md), written from the
// semantics with plain loops and no code shared with kernels/next_round_*: the allocation walks
// the new positions one by one with a ring cursor, the next round's positions are listed per
// branch, and every violation the guard words must count is listed with its details.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace specgraph::testing {

struct nr_case {
  std::int32_t batch = 0, real_batch = 0;
  bool device_word = false;  // real batch read from a word holding word_value
  std::int32_t word_value = 0;
  std::int32_t draft_tokens = 1, num_steps = 1, topk = 1, page_size = 1, reserve = 0;
  std::vector<std::int32_t> new_seq_len, bonus, req_pool_index, allocated_len;  // [batch]
  bool has_finished = false;
  std::vector<std::int32_t> finished;  // [batch] when has_finished
  std::int64_t width = 1;              // W
  std::int32_t pool_rows = 1;
  std::vector<std::int32_t> req_to_token;  // [pool_rows][W]
  std::vector<std::int32_t> ring;          // [C]
  std::int64_t head = 0, tail = 0;
  std::int32_t stall = 0;
  std::int64_t slot_stride = 0;  // draft_slot_stride; 0 means num_steps
};

struct nr_violation {
  std::int32_t kind, row, column, capacity;
  std::int64_t value;
};

// One output cell the round stores: flat index, value, the request row it belongs to.
struct nr_cell {
  std::int64_t index, value;
  std::int32_t row;
};

struct nr_expect {
  std::vector<std::int32_t> req_to_token, allocated_len;
  std::int64_t head = 0;
  std::int32_t stall = 0;
  std::vector<std::int64_t> pages;  // pages each row took (0 when none)
  // Outputs in params order: active, seq_len, root_token, draft_position, draft_out_cache_loc,
  // tail_copy, verify_out_cache_loc.
  std::vector<nr_cell> cells[7];
  std::vector<nr_violation> guard[2];  // guard[0] allocation, guard[1] bad input and unbacked
};

inline std::int64_t nr_stride(const nr_case& c) {
  return c.slot_stride > 0 ? c.slot_stride : c.num_steps;
}

// The exact capacities in output order.
inline void nr_exact(const nr_case& c, std::int64_t* caps) {
  const std::int64_t b = c.batch, k = c.topk, ps = c.page_size;
  caps[0] = caps[1] = caps[2] = b;
  caps[3] = b * k;
  caps[4] = b * k * nr_stride(c);
  caps[5] = b * (k - 1) * (ps - 1) * 2;
  caps[6] = b * c.draft_tokens;
}

inline std::int64_t nr_round_up(std::int64_t x, std::int64_t ps) {
  return x % ps == 0 ? x : x + (ps - x % ps);
}

inline nr_expect nr_reference(const nr_case& c) {
  nr_expect e;
  e.req_to_token = c.req_to_token;
  e.allocated_len = c.allocated_len;
  e.head = c.head;
  e.stall = c.stall;
  const std::int64_t B = c.batch, ps = c.page_size, W = c.width, C = c.ring.size();
  e.pages.assign(B, 0);
  std::int32_t real = c.real_batch;
  if (c.device_word) {
    real = std::min(std::max(c.word_value, 0), c.batch);
    if (real != c.word_value) e.guard[1].push_back({3, -1, -2, c.batch, c.word_value});
  }
  // Which rows go on, and the bad input of real rows.
  std::vector<bool> on(B, false);
  for (std::int64_t r = 0; r < B; ++r) {
    if (r >= real || (c.has_finished && c.finished[r] != 0)) continue;
    const std::int64_t s = c.new_seq_len[r], row = c.req_pool_index[r], a = c.allocated_len[r];
    const auto ri = static_cast<std::int32_t>(r);
    if (s < 1 || s > (1 << 28)) {
      e.guard[1].push_back({3, ri, -1, 1 << 28, s});
    } else if (row < 0 || row >= c.pool_rows) {
      e.guard[1].push_back({3, ri, -2, c.pool_rows, row});
    } else if (a < s || a > W) {
      e.guard[1].push_back({3, ri, -3, static_cast<std::int32_t>(W), a});
    } else if (a % ps != 0 &&
               (c.req_to_token[row * W + a - 1] < 0 ||
                (static_cast<std::int64_t>(c.req_to_token[row * W + a - 1]) + 1) % ps != a % ps)) {
      e.guard[1].push_back(
          {3, ri, -4, static_cast<std::int32_t>(a % ps), c.req_to_token[row * W + a - 1]});
    } else {
      on[r] = true;
    }
  }
  // The allocation: targets, the ring, all or nothing.
  bool stalled = c.stall != 0;
  std::vector<std::int64_t> target(B, -1);
  if (!stalled) {
    std::int64_t need = 0;
    for (std::int64_t r = 0; r < B; ++r) {
      if (!on[r]) continue;
      const std::int64_t cur = c.allocated_len[r];
      const std::int64_t nxt = std::max(cur, nr_round_up(c.new_seq_len[r] + c.reserve, ps));
      if (nxt > W) {
        e.guard[0].push_back(
            {6, static_cast<std::int32_t>(r), -1, static_cast<std::int32_t>(W), nxt});
        continue;
      }
      target[r] = nxt;
      for (std::int64_t p = nr_round_up(cur, ps); p < nxt; p += ps) ++e.pages[r];
      need += e.pages[r];
    }
    const std::int64_t avail = c.head >= 0 && c.tail >= c.head ? c.tail - c.head : 0;
    const auto avail32 = static_cast<std::int32_t>(std::min<std::int64_t>(avail, 0x7fffffff));
    if (need > avail) {
      e.guard[0].push_back({7, -1, -1, avail32, need});
      stalled = true;
    } else {
      for (std::int64_t k = 0; k < need; ++k) {
        const std::int64_t page = c.ring[(c.head + k) % C];
        if (page < 0 || page * ps + ps - 1 > 0x7fffffff) {
          e.guard[0].push_back({7, -1, static_cast<std::int32_t>(k), avail32, page});
          stalled = true;
          break;
        }
      }
    }
    if (stalled) {
      e.stall = 1;
    } else {
      // Walk the new positions in row order with a ring cursor.
      std::int64_t cursor = c.head;
      for (std::int64_t r = 0; r < B; ++r) {
        if (target[r] < 0) continue;
        const std::int64_t row = c.req_pool_index[r], cur = c.allocated_len[r];
        std::int64_t page = -1;
        for (std::int64_t p = cur; p < target[r]; ++p) {
          std::int64_t slot;
          if (p % ps != 0 && p < nr_round_up(cur, ps)) {
            slot = c.req_to_token[row * W + cur - 1] + 1 + (p - cur);
          } else {
            if (p % ps == 0) page = c.ring[cursor++ % C];
            slot = page * ps + p % ps;
          }
          e.req_to_token[row * W + p] = static_cast<std::int32_t>(slot);
        }
        e.allocated_len[r] = static_cast<std::int32_t>(target[r]);
      }
      e.head = cursor;
    }
  }
  if (stalled) std::fill(e.pages.begin(), e.pages.end(), 0);
  // The outputs.
  const std::int64_t k = c.topk, n = c.num_steps, D = c.draft_tokens, stride = nr_stride(c);
  for (std::int64_t r = 0; r < B; ++r) {
    const auto ri = static_cast<std::int32_t>(r);
    const bool act = on[r] && !stalled;
    const std::int64_t s = c.new_seq_len[r];
    const std::int64_t row = act ? c.req_pool_index[r] : 0, alloc = e.allocated_len[r];
    std::int64_t unbacked = -1;
    auto slot = [&](std::int64_t pos) -> std::int64_t {
      if (!act) return 0;
      if (pos >= alloc) {
        if (unbacked < 0 || pos < unbacked) unbacked = pos;
        return 0;
      }
      return e.req_to_token[row * W + pos];
    };
    e.cells[0].push_back({r, act ? 1 : 0, ri});
    e.cells[1].push_back({r, act ? s : 1, ri});
    e.cells[2].push_back({r, act ? c.bonus[r] : 0, ri});
    const bool paged = ps > 1 && k > 1;
    const std::int64_t lead = paged && act ? s % ps : 0;
    std::int64_t region = 0;  // positions per branch when paged
    if (paged && act) {
      std::int64_t pages_per_branch = 0;
      while (pages_per_branch * ps < lead + n) ++pages_per_branch;
      region = pages_per_branch * ps;
    }
    for (std::int64_t t = 0; t < k; ++t) {
      e.cells[3].push_back({r * k + t, act ? s : 0, ri});
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t pos = paged ? s - lead + t * region + lead + j : s + t * n + j;
        e.cells[4].push_back({(r * k + t) * stride + j, slot(pos), ri});
      }
    }
    if (paged) {
      for (std::int64_t t = 1; t < k; ++t) {
        for (std::int64_t o = 0; o + 1 < ps; ++o) {
          const std::int64_t at = ((r * (k - 1) + t - 1) * (ps - 1) + o) * 2;
          const bool copy = act && o < lead;
          e.cells[5].push_back({at, copy ? slot(s - lead + t * region + o) : -1, ri});
          e.cells[5].push_back({at + 1, copy ? slot(s - lead + o) : -1, ri});
        }
      }
    }
    for (std::int64_t j = 0; j < D; ++j) e.cells[6].push_back({r * D + j, slot(s + j), ri});
    if (unbacked >= 0) {
      e.guard[1].push_back(
          {8, ri, static_cast<std::int32_t>(unbacked), static_cast<std::int32_t>(alloc), unbacked});
    }
  }
  return e;
}

// The violation a guard word keeps: the lowest (row, column).
inline const nr_violation* nr_first(const std::vector<nr_violation>& v) {
  const nr_violation* best = nullptr;
  for (const nr_violation& x : v) {
    if (best == nullptr || x.row < best->row || (x.row == best->row && x.column < best->column)) {
      best = &x;
    }
  }
  return best;
}

// The reserve of the spec's 5.1, written from its two lines.
inline std::int64_t nr_reserve_formula(std::int64_t topk, std::int64_t steps, std::int64_t d,
                                       std::int64_t ps) {
  if (ps == 1 || topk == 1) return std::max(steps * topk, d);
  std::int64_t pages = 0;
  while (pages * ps < ps - 1 + steps) ++pages;
  return std::max(pages * ps * topk, d);
}

}  // namespace specgraph::testing
