// Runs the library's next-round step over an nr_case (tests/next_round_reference.hpp) with every
// buffer in executor memory (dvec; host memory on the host executor) and the outputs poisoned
// with slack past every capacity, in either entry: the host twin (run_next_round with
// host_memory, host executor only) or the launcher on the executor (the row code the GPU runs).
// Then compares every cell and guard word with the reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "specgraph/executor.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "tests/next_round_reference.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {

inline constexpr std::int64_t nr_poison = -9;
inline constexpr std::int64_t nr_slack = 4;
inline constexpr const char* nr_output_names[7] = {"active",
                                                   "seq_len",
                                                   "root_token",
                                                   "draft_position",
                                                   "draft_out_cache_loc",
                                                   "tail_copy",
                                                   "verify_out_cache_loc"};

struct nr_result {
  std::vector<std::int64_t> cells[7];  // each output widened to int64, slack included
  std::int64_t capacity[7] = {};
  std::vector<std::int32_t> req_to_token, allocated_len;
  std::int64_t head = 0;
  std::int32_t stall = 0;
  std::vector<guard_word> guard;
};

// Every buffer of one run in executor memory, the outputs poisoned with slack, the guard words
// stale; p points at them. caps: each output's capacity (null: exact); a negative capacity
// leaves that output null.
struct nr_rig {
  nr_rig(executor& ex, const nr_case& c, const std::int64_t* caps = nullptr)
      : new_seq_len(ex, c.new_seq_len),
        bonus(ex, c.bonus),
        pool(ex, c.req_pool_index),
        alloc(ex, c.allocated_len),
        table(ex, c.req_to_token),
        ring(ex, c.ring),
        finished(ex, c.finished),
        stall(ex, std::vector<std::int32_t>{c.stall}),
        word(ex, std::vector<std::int32_t>{c.word_value}),
        head(ex, std::vector<std::int64_t>{c.head}),
        tail(ex, std::vector<std::int64_t>{c.tail}),
        scratch(ex, static_cast<std::size_t>(2 * c.batch + 2), -5),
        guard(ex, std::vector<guard_word>(next_round_guard_count, stale())) {
    nr_exact(c, capacity);
    if (caps != nullptr) {
      for (int i = 0; i < 7; ++i) capacity[i] = caps[i];
    }
    for (int i = 0; i < 7; ++i) {
      const auto n = static_cast<std::size_t>(capacity[i] < 0 ? 0 : capacity[i] + nr_slack);
      if (i == 4 || i == 6) {
        out64.emplace_back(ex, n, nr_poison);
      } else {
        out32.emplace_back(ex, n, static_cast<std::int32_t>(nr_poison));
      }
    }
    p.new_seq_len = new_seq_len.data();
    p.bonus = bonus.data();
    p.finished = c.has_finished ? finished.data() : nullptr;
    p.req_pool_index = pool.data();
    p.req_to_token = table.data();
    p.req_to_token_stride = c.width;
    p.pool_rows = c.pool_rows;
    p.allocated_len = alloc.data();
    p.ring = ring.data();
    p.ring_capacity = static_cast<std::int64_t>(c.ring.size());
    p.ring_head = head.data();
    p.ring_tail = tail.data();
    p.stall = stall.data();
    p.batch = c.batch;
    p.real_batch = c.device_word ? c.batch : c.real_batch;
    p.real_batch_at = c.device_word ? word.data() : nullptr;
    p.draft_tokens = c.draft_tokens;
    p.num_steps = c.num_steps;
    p.topk = c.topk;
    p.page_size = c.page_size;
    p.reserve = c.reserve;
    std::int32_t* o32[7] = {};
    std::int64_t* o64[7] = {};
    for (int i = 0, a = 0, b = 0; i < 7; ++i) {
      if (i == 4 || i == 6) {
        o64[i] = capacity[i] < 0 ? nullptr : out64[static_cast<std::size_t>(b)].data();
        ++b;
      } else {
        o32[i] = capacity[i] < 0 ? nullptr : out32[static_cast<std::size_t>(a)].data();
        ++a;
      }
    }
    auto cap = [&](int i) { return capacity[i] < 0 ? 0 : capacity[i]; };
    p.active = o32[0];
    p.active_capacity = cap(0);
    p.seq_len = o32[1];
    p.seq_len_capacity = cap(1);
    p.root_token = o32[2];
    p.root_token_capacity = cap(2);
    p.draft_position = o32[3];
    p.draft_position_capacity = cap(3);
    p.draft_out_cache_loc = o64[4];
    p.draft_out_cache_loc_capacity = cap(4);
    p.draft_slot_stride = nr_stride(c);
    p.tail_copy = o32[5];
    p.tail_copy_capacity = cap(5);
    p.verify_out_cache_loc = o64[6];
    p.verify_out_cache_loc_capacity = cap(6);
    p.scratch = scratch.data();
    p.guard = guard.data();
  }
  static guard_word stale() {
    guard_word g{};
    g.violations = 77;  // a previous round's words: run_next_round resets them
    return g;
  }
  nr_result collect() const {
    nr_result o;
    for (int i = 0, a = 0, b = 0; i < 7; ++i) {
      o.capacity[i] = capacity[i];
      if (i == 4 || i == 6) {
        o.cells[i] = out64[static_cast<std::size_t>(b++)].download();
      } else {
        const std::vector<std::int32_t> v = out32[static_cast<std::size_t>(a++)].download();
        o.cells[i].assign(v.begin(), v.end());
      }
      if (capacity[i] < 0) o.cells[i].clear();
    }
    o.req_to_token = table.download();
    o.allocated_len = alloc.download();
    o.head = head.download()[0];
    o.stall = stall.download()[0];
    o.guard = guard.download();
    return o;
  }

  dvec<std::int32_t> new_seq_len, bonus, pool, alloc, table, ring, finished, stall, word;
  dvec<std::int64_t> head, tail, scratch;
  dvec<guard_word> guard;
  std::vector<dvec<std::int32_t>> out32;
  std::vector<dvec<std::int64_t>> out64;
  std::int64_t capacity[7] = {};
  next_round_params p;
};

inline nr_result nr_run(executor& ex, const nr_case& c, bool host_twin,
                        const std::int64_t* caps = nullptr) {
  nr_rig rig(ex, c, caps);
  run_next_round(ex, rig.p, host_twin);
  ex.synchronize();
  return rig.collect();
}

inline void nr_expect_guard(const guard_word& g, const std::vector<nr_violation>& want,
                            kernel_id kernel, const char* what) {
  ASSERT_EQ(g.violations, static_cast<std::int32_t>(want.size())) << what << ": " << describe(g);
  const nr_violation* f = nr_first(want);
  if (f == nullptr) return;
  EXPECT_EQ(g.kernel, static_cast<int>(kernel)) << what;
  EXPECT_EQ(g.kind, f->kind) << what << ": " << describe(g);
  EXPECT_EQ(g.row, f->row) << what << ": " << describe(g);
  EXPECT_EQ(g.column, f->column) << what << ": " << describe(g);
  EXPECT_EQ(g.capacity, f->capacity) << what << ": " << describe(g);
  EXPECT_EQ(g.value, f->value) << what << ": " << describe(g);
}

// Every output cell, the state words and the three guard words against the reference; returns
// the number of refused stores (guard[2]).
inline std::int64_t nr_check(const nr_case& c, const nr_result& o) {
  const nr_expect e = nr_reference(c);
  EXPECT_EQ(o.req_to_token, e.req_to_token);
  EXPECT_EQ(o.allocated_len, e.allocated_len);
  EXPECT_EQ(o.head, e.head);
  EXPECT_EQ(o.stall, e.stall);
  std::int64_t refused = 0;
  const nr_cell* first_refused = nullptr;
  std::int32_t first_cap = 0;
  for (int i = 0; i < 7; ++i) {
    if (o.capacity[i] < 0) continue;
    std::vector<std::int64_t> want(static_cast<std::size_t>(o.capacity[i] + nr_slack), nr_poison);
    for (const nr_cell& x : e.cells[i]) {
      if (x.index < o.capacity[i]) {
        want[static_cast<std::size_t>(x.index)] = x.value;
      } else {
        ++refused;
        if (first_refused == nullptr || x.row < first_refused->row ||
            (x.row == first_refused->row && x.index < first_refused->index)) {
          first_refused = &x;
          first_cap = static_cast<std::int32_t>(o.capacity[i]);
        }
      }
    }
    for (std::size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(o.cells[i][k], want[k]) << nr_output_names[i] << "[" << k << "]";
      if (o.cells[i][k] != want[k]) return refused;
    }
  }
  nr_expect_guard(o.guard[0], e.guard[0], kernel_id::next_round_alloc, "guard[0]");
  nr_expect_guard(o.guard[1], e.guard[1], kernel_id::next_round_slots, "guard[1]");
  const guard_word& g = o.guard[2];
  EXPECT_EQ(g.violations, refused) << describe(g);
  if (first_refused != nullptr) {
    EXPECT_EQ(g.kind, static_cast<int>(violation_kind::capacity));
    EXPECT_EQ(g.kernel, static_cast<int>(kernel_id::next_round_outputs));
    EXPECT_EQ(g.row, first_refused->row);
    EXPECT_EQ(g.column, first_refused->index);
    EXPECT_EQ(g.capacity, first_cap);
    EXPECT_EQ(g.value, first_refused->value);
  }
  return refused;
}

}  // namespace specgraph::testing
