// Shared by the device-round tests (tests/device_round_test.cpp): the configurations, and (c),
// the independent references chained on a mirror (tests/round_chain.hpp) with the toy forwards'
// tree written on the host, from the starting state of testing/device_round_start.hpp. (a) the
// runtime's device-round graph launched K times back to back and (b) the host-driven rounds
// (stage, run_round, stage_verify, replay_verify, the library's host twins on a host copy of the
// arena, stage_extend, replay_extend, restage) are testing/device_round_driver.hpp's, shared with
// the benchmark. Each returns the same record: per round the accepted paths, lengths, bonus
// tokens and draft extend's inputs, then the final state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/round_fields.hpp"
#include "specgraph/runtime.hpp"
#include "testing/device_round_start.hpp"
#include "testing/round_forward.hpp"
#include "tests/round_chain.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {

struct dr_config {
  const char* name;
  std::int32_t topk, num_steps, draft_tokens, page_size;
};

inline const dr_config dr_configs[] = {
    {"chain ps 1", 1, 3, 4, 1},
    {"tree ps 4", 2, 3, 6, 4},
};

inline draft_config dr_draft_config(const dr_config& d) {
  draft_config c;
  c.max_batch = 4;
  c.buckets = {2, 4};
  c.topk = d.topk;
  c.num_steps = d.num_steps;
  c.slot_stride = d.num_steps;
  c.page_size = d.page_size;
  c.max_context_len = 128;
  c.pool_rows = 6;
  c.kv_slots = std::int64_t{1} << 20;
  c.verify_tokens = d.draft_tokens;
  c.draft_extend = true;
  c.round_on_device = true;
  c.max_stop_tokens = 1;
  return c;
}

// (c): the references chained on a mirror of the arena; the tree from the toy forward's
// functions (written on the host, as the forward writes it on the device).
inline dr_record run_reference(const plan& p, const dr_start& s, std::int32_t rounds) {
  const draft_config& c = p.config;
  const std::int64_t B = s.bucket, D = c.verify_tokens, S = c.num_steps + 1;
  round_mirror m{&p, std::vector<unsigned char>(p.total_bytes, 0)};
  round_engine e;
  e.req_to_token = s.req_to_token;
  e.width = s.width;
  e.ring = s.ring;
  e.tail = s.tail;
  e.stop_ids = {stop_id};
  e.budget = !s.budget.empty();
  e.real_batch = s.real;
  for (std::int64_t r = 0; r < B; ++r) {
    m.put<std::int32_t>(p.layout.seq_len, r, s.seq_len[static_cast<std::size_t>(r)]);
    m.put<std::int32_t>(p.layout.req_pool_index, r, s.pool[static_cast<std::size_t>(r)]);
    m.put<std::int32_t>(m.field(round_allocated_len), r,
                        s.allocated_len[static_cast<std::size_t>(r)]);
    if (e.budget) {
      m.put<std::int32_t>(m.field(round_max_new_tokens_left), r,
                          s.budget[static_cast<std::size_t>(r)]);
    }
  }
  dr_record out;
  out.guard_total.assign(round_guard_count, 0);
  for (std::int32_t k = 0; k < rounds; ++k) {
    std::vector<std::int32_t> seq = m.i32s(p.layout.seq_len, B);
    for (std::int64_t r = 0; r < B; ++r) {
      const std::int64_t q = seq[static_cast<std::size_t>(r)];
      const std::int64_t pool = m.get<std::int32_t>(p.layout.req_pool_index, r);
      for (std::int32_t i = 0; i < D; ++i) {
        m.put<std::int32_t>(m.field(round_parent), r * D + i, toy_parent(i, c.topk));
        m.put<std::int32_t>(m.field(round_draft_token), r * D + i, toy_draft(q, pool, i));
        m.put<std::int32_t>(m.field(round_target_predict), r * D + i,
                            toy_target(q, pool, i, stop_id));
      }
    }
    const round_guards g = chain_round(m, e, s.bucket);
    for (int w = 0; w < round_guard_count; ++w) out.guard_total[w] += g.violations[w];
    out.accept_index.push_back(m.i32s(m.field(round_accept_index), B * S));
    const std::vector<std::int32_t> len = m.i32s(m.field(round_accept_length), B);
    out.accept_length.push_back(len);
    out.bonus.push_back(m.i32s(m.field(round_bonus), B));
    out.finished.push_back(m.i32s(m.field(round_finished), B));
    std::vector<std::int32_t> ext(static_cast<std::size_t>(B), 1);
    for (std::int32_t r = 0; r < s.real; ++r) ext[r] = len[r] + 1;
    out.extend_accept_len.push_back(ext);
    out.extend_seq_len.push_back(seq);
    // The extend's first window slot: req_to_token[pool][seq_len] for a row acceptance accepted
    // its root on; 0 (padding) for the rest, idle and stalled rows included, whose window at
    // seq_len 1 is their committed prefix.
    std::vector<std::int32_t> first(static_cast<std::size_t>(B), 0);
    for (std::int32_t r = 0; r < s.real; ++r) {
      if (m.get<std::int32_t>(m.field(round_accept_index), r * S) < 0) continue;
      const std::int64_t pool = m.get<std::int32_t>(p.layout.req_pool_index, r);
      first[static_cast<std::size_t>(r)] = e.req_to_token[static_cast<std::size_t>(
          pool * e.width + seq[static_cast<std::size_t>(r)])];
    }
    out.extend_slot.push_back(first);
  }
  out.seq_len = m.i32s(p.layout.seq_len, B);
  out.allocated_len = m.i32s(m.field(round_allocated_len), B);
  const std::int64_t row = static_cast<std::int64_t>(c.topk) * c.slot_stride;
  for (std::int64_t i = 0; i < s.real * row; ++i) {
    out.out_cache_loc.push_back(m.get<std::int64_t>(p.layout.out_cache_loc, i));
  }
  out.req_to_token = e.req_to_token;
  out.ring_head = m.get<std::int64_t>(m.field(round_ring_head), 0);
  out.stall = m.get<std::int32_t>(m.field(round_stall), 0);
  if (e.budget) out.tokens_left = m.i32s(m.field(round_max_new_tokens_left), B);
  return out;
}

inline void expect_same(const dr_record& got, const dr_record& want, std::int32_t rounds,
                        const char* what) {
  SCOPED_TRACE(what);
  for (std::int32_t k = 0; k < rounds; ++k) {
    SCOPED_TRACE("round " + std::to_string(k));
    const auto i = static_cast<std::size_t>(k);
    EXPECT_EQ(got.accept_index[i], want.accept_index[i]);
    EXPECT_EQ(got.accept_length[i], want.accept_length[i]);
    EXPECT_EQ(got.bonus[i], want.bonus[i]);
    if (!got.finished.empty()) {
      EXPECT_EQ(got.finished[i], want.finished[i]);
    }
    EXPECT_EQ(got.extend_accept_len[i], want.extend_accept_len[i]);
    EXPECT_EQ(got.extend_seq_len[i], want.extend_seq_len[i]);
    if (!got.extend_slot.empty() && !want.extend_slot.empty()) {  // device rounds and references
      EXPECT_EQ(got.extend_slot[i], want.extend_slot[i]);
    }
  }
  EXPECT_EQ(got.seq_len, want.seq_len);
  EXPECT_EQ(got.allocated_len, want.allocated_len);
  EXPECT_EQ(got.out_cache_loc, want.out_cache_loc);
  EXPECT_EQ(got.req_to_token, want.req_to_token);
  EXPECT_EQ(got.ring_head, want.ring_head);
  EXPECT_EQ(got.stall, want.stall);
  EXPECT_EQ(got.tokens_left, want.tokens_left);
}

}  // namespace specgraph::testing
