// Random next-round cases for next_round_test.cpp: page sizes 1/2/4/16, topk 1..4, num_steps
// 1..5, reserves exact, spare and short, rows at the width edge, short rings and wrapped ring
// counters, stalls, finished and padded rows, the device real-batch word, (launcher only) bad
// rows and bad ring entries; capacities exact, spare, short or unset; and sequences of rounds
// that carry allocated_len and req_to_token over and refill the ring as an engine would.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "tests/next_round_reference.hpp"
#include "tests/next_round_run.hpp"

namespace specgraph::testing {

struct nr_rand {
  std::mt19937_64& rng;
  std::int64_t pick(std::int64_t lo, std::int64_t hi) {  // [lo, hi]
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  bool one_in(std::uint64_t n) { return rng() % n == 0; }
};

// A row's pages: fresh ids from `next_page` (gaps of 1..3, never reused).
inline void nr_back_row(nr_rand& g, nr_case& c, std::int64_t row, std::int64_t alloc,
                        std::int64_t& next_page) {
  const std::int64_t ps = c.page_size;
  for (std::int64_t q = 0; q * ps < alloc; ++q) {
    next_page += g.pick(1, 3);
    for (std::int64_t o = 0; o < ps && q * ps + o < alloc; ++o) {
      c.req_to_token[row * c.width + q * ps + o] = static_cast<std::int32_t>(next_page * ps + o);
    }
  }
}

inline nr_case nr_random_case(std::mt19937_64& rng, bool twin) {
  nr_rand g{rng};
  nr_case c;
  const std::int32_t sizes[] = {1, 2, 4, 16};
  c.page_size = sizes[g.pick(0, 3)];
  c.topk = static_cast<std::int32_t>(g.pick(1, 4));
  c.num_steps = static_cast<std::int32_t>(g.pick(1, 5));
  c.draft_tokens = static_cast<std::int32_t>(c.topk == 1 ? c.num_steps + 1
                                                         : g.pick(1, c.topk * c.num_steps + 1));
  const std::int64_t r1 = nr_reserve_formula(c.topk, c.num_steps, c.draft_tokens, c.page_size);
  c.reserve = static_cast<std::int32_t>(g.one_in(8) ? g.pick(0, 2 * r1) : r1);
  if (g.one_in(4)) c.slot_stride = c.num_steps + g.pick(1, 3);
  c.batch = static_cast<std::int32_t>(g.one_in(16) ? 0 : g.pick(1, 6));
  c.real_batch = static_cast<std::int32_t>(g.one_in(4) ? g.pick(0, c.batch) : c.batch);
  if (g.one_in(4)) {
    c.device_word = true;
    c.word_value = c.real_batch;
    if (!twin && g.one_in(4)) c.word_value = g.one_in(2) ? -1 : c.batch + 2;
  }
  const std::int32_t real =
      c.device_word ? std::min(std::max(c.word_value, 0), c.batch) : c.real_batch;
  c.has_finished = g.one_in(3);
  const std::int64_t ps = c.page_size;
  c.pool_rows = static_cast<std::int32_t>(c.batch + 1 + g.pick(0, 2));
  std::vector<std::int32_t> rows(static_cast<std::size_t>(c.pool_rows - 1));
  std::iota(rows.begin(), rows.end(), 1);
  std::shuffle(rows.begin(), rows.end(), rng);
  std::int64_t widest = 1;
  for (std::int32_t r = 0; r < c.batch; ++r) {
    const bool fin = c.has_finished && g.one_in(4);
    c.finished.push_back(fin ? static_cast<std::int32_t>(g.pick(1, 5)) : 0);
    c.bonus.push_back(static_cast<std::int32_t>(g.pick(-1000, 100000)));
    if (r >= real || (fin && g.one_in(2))) {  // never read: junk
      c.new_seq_len.push_back(static_cast<std::int32_t>(g.pick(-5, 3)));
      c.req_pool_index.push_back(g.one_in(2) ? 0 : static_cast<std::int32_t>(g.pick(-3, 999)));
      c.allocated_len.push_back(static_cast<std::int32_t>(g.pick(-9, 9)));
      continue;
    }
    const std::int64_t s = g.one_in(16) ? g.pick(1, 2000) : g.pick(1, 60);
    std::int64_t a = s + (g.one_in(4) ? 0 : g.pick(0, c.reserve + 2 * ps));
    if (g.one_in(2)) a = nr_round_up(a, ps);
    c.new_seq_len.push_back(static_cast<std::int32_t>(s));
    c.req_pool_index.push_back(rows[static_cast<std::size_t>(r)]);
    c.allocated_len.push_back(static_cast<std::int32_t>(a));
    widest = std::max(widest, a);
  }
  c.width = widest + (g.one_in(4) ? 0 : g.pick(0, c.reserve + 2 * ps + 2));
  c.req_to_token.assign(static_cast<std::size_t>(c.pool_rows * c.width), -7);
  std::int64_t next_page = g.pick(0, 50);
  for (std::int32_t r = 0; r < real; ++r) {
    const std::int64_t row = c.req_pool_index[r], a = c.allocated_len[r];
    if (row > 0 && row < c.pool_rows && a > 0 && a <= c.width) {
      nr_back_row(g, c, row, a, next_page);
    }
  }
  c.ring.resize(static_cast<std::size_t>(g.one_in(4) ? g.pick(1, 12) : g.pick(1, 120)));
  for (std::int32_t& e : c.ring) {
    next_page += g.pick(1, 3);
    e = static_cast<std::int32_t>(next_page);
  }
  const auto cap = static_cast<std::int64_t>(c.ring.size());
  c.head = g.one_in(8) ? (std::int64_t{1} << 40) + g.pick(0, 99) : g.pick(0, 50);
  c.tail = c.head + (g.one_in(3) ? g.pick(0, cap) : cap);
  if (g.one_in(10)) c.tail = c.head - g.pick(1, 3);
  c.stall = g.one_in(10) ? 1 : 0;
  if (!twin && g.one_in(20)) {
    c.ring[static_cast<std::size_t>(g.pick(0, cap - 1))] =
        g.one_in(2) || ps == 1 ? -1 : static_cast<std::int32_t>(0x7fffffff / ps + 1);
  }
  const auto bad = static_cast<std::size_t>(real > 0 ? g.pick(0, real - 1) : 0);
  if (!twin && real > 0 && c.finished[bad] == 0 && c.new_seq_len[bad] >= 1 &&
      g.one_in(10)) {           // one bad row: recorded,
    const std::size_t r = bad;  // inactive, no pages
    const std::int64_t which = g.pick(0, 3);
    if (which == 0) {
      c.new_seq_len[r] = static_cast<std::int32_t>(g.one_in(2) ? 0 : (1 << 28) + 1);
    } else if (which == 1) {
      c.req_pool_index[r] = g.one_in(2) ? -1 : c.pool_rows;
    } else if (which == 2) {
      c.allocated_len[r] =
          g.one_in(2) ? c.new_seq_len[r] - 1 : static_cast<std::int32_t>(c.width + 1);
    } else if (c.allocated_len[r] % ps != 0) {
      c.req_to_token[c.req_pool_index[r] * c.width + c.allocated_len[r] - 1] += 1;
    } else {
      c.new_seq_len[r] = 0;
    }
  }
  return c;
}

// Exact capacities, then sometimes one output short, spare room, or some outputs unset.
inline void nr_random_caps(std::mt19937_64& rng, const nr_case& c, std::int64_t* caps) {
  nr_rand g{rng};
  nr_exact(c, caps);
  if (g.one_in(8)) {
    const auto k = static_cast<std::size_t>(g.pick(0, 6));
    caps[k] = caps[k] > 0 ? g.pick(0, caps[k] - 1) : 0;
  } else if (g.one_in(8)) {
    for (int i = 0; i < 7; ++i) caps[i] += g.pick(0, 5);
  } else if (g.one_in(10)) {
    const auto keep = static_cast<int>(g.pick(0, 6));
    for (int i = 0; i < 7; ++i) {
      if (i != keep && g.one_in(2)) caps[i] = -1;
    }
  }
}

struct nr_sequence {
  nr_case c;
  std::int64_t next_page = 0;
};

// A bucket of valid requests at steady state: allocated_len = ceil_page(s + R).
inline nr_sequence nr_sequence_start(std::mt19937_64& rng) {
  nr_rand g{rng};
  nr_sequence q;
  nr_case& c = q.c;
  const std::int32_t sizes[] = {1, 2, 4, 16};
  c.page_size = sizes[g.pick(0, 3)];
  c.topk = static_cast<std::int32_t>(g.pick(1, 4));
  c.num_steps = static_cast<std::int32_t>(g.pick(1, 5));
  c.draft_tokens = static_cast<std::int32_t>(c.topk == 1 ? c.num_steps + 1
                                                         : g.pick(2, c.topk * c.num_steps + 1));
  c.reserve = static_cast<std::int32_t>(
      nr_reserve_formula(c.topk, c.num_steps, c.draft_tokens, c.page_size));
  c.batch = static_cast<std::int32_t>(g.pick(1, 5));
  c.real_batch = static_cast<std::int32_t>(g.one_in(4) ? g.pick(0, c.batch) : c.batch);
  c.has_finished = g.one_in(2);
  c.pool_rows = c.batch + 1;
  const std::int64_t ps = c.page_size;
  std::int64_t widest = 1;
  for (std::int32_t r = 0; r < c.batch; ++r) {
    const std::int64_t s = g.pick(1, 40);
    c.new_seq_len.push_back(static_cast<std::int32_t>(s));
    c.bonus.push_back(static_cast<std::int32_t>(g.pick(0, 1000)));
    c.req_pool_index.push_back(r + 1);
    c.allocated_len.push_back(static_cast<std::int32_t>(nr_round_up(s + c.reserve, ps)));
    c.finished.push_back(0);
    widest = std::max<std::int64_t>(widest, c.allocated_len.back());
  }
  // Wide enough for a few rounds, sometimes not for all of them.
  c.width = widest + g.pick(0, 8 * (c.num_steps + 1) + 2 * ps);
  c.req_to_token.assign(static_cast<std::size_t>(c.pool_rows * c.width), -7);
  q.next_page = g.pick(0, 50);
  for (std::int32_t r = 0; r < c.batch; ++r) {
    nr_back_row(g, c, r + 1, c.allocated_len[r], q.next_page);
  }
  c.ring.assign(static_cast<std::size_t>(g.pick(1, 3 * c.batch * ((c.num_steps + ps) / ps))), 0);
  c.head = c.tail = g.pick(0, 20);
  return q;
}

// The engine between rounds: commits 1..S tokens of every row that ran (never past its
// allocation), marks some finished, fills ring entries [tail, head + C) with fresh pages and
// publishes the tail, and sometimes clears a stall.
inline void nr_sequence_next(std::mt19937_64& rng, nr_sequence& q, const nr_result& o) {
  nr_rand g{rng};
  nr_case& c = q.c;
  c.req_to_token = o.req_to_token;
  const std::vector<std::int32_t> ran(o.cells[0].begin(), o.cells[0].begin() + c.batch);
  c.allocated_len = o.allocated_len;
  c.head = o.head;
  c.stall = o.stall;
  for (std::int32_t r = 0; r < c.batch; ++r) {
    if (ran[r] == 1) {
      const std::int64_t a = g.pick(1, c.num_steps + 1);
      c.new_seq_len[r] = static_cast<std::int32_t>(
          std::min<std::int64_t>(c.new_seq_len[r] + a, c.allocated_len[r]));
    }
    c.finished[r] = c.has_finished && g.one_in(6) ? 1 : 0;
  }
  const auto cap = static_cast<std::int64_t>(c.ring.size());
  const std::int64_t fill = g.pick(0, c.head + cap - c.tail);
  for (std::int64_t k = 0; k < fill; ++k) {
    q.next_page += g.pick(1, 3);
    c.ring[static_cast<std::size_t>((c.tail + k) % cap)] = static_cast<std::int32_t>(q.next_page);
  }
  c.tail += fill;
  if (c.stall != 0 && g.one_in(2)) c.stall = 0;
}

}  // namespace specgraph::testing
