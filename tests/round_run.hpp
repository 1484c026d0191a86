// Shared by the after_verify tests (round_ops_test, round_ops_bad_input_test): the scenarios,
// one round's tree as an engine's forwards would write it, and the staged round state (a plan
// with its round section, the arena poisoned, its mirror, the engine's req_to_token and ring).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/round_ops.hpp"
#include "tests/round_chain.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {

inline constexpr unsigned char poison = 0xa5;

struct scenario {
  const char* name;
  std::int32_t topk, num_steps, draft_tokens, page_size, slot_stride;
  std::int32_t bucket, real;
  bool scalar_real;  // the real batch as a launch scalar (the staged word holds 0)
  bool refill;       // refill the ring after every round; false: never (it runs short)
  bool stops;        // stop ids 7 and 11 (the plan's two) and a budget of 1 on row 1
};

inline const scenario scenarios[] = {
    {"chain ps 1", 1, 3, 4, 1, 3, 4, 3, false, true, true},
    {"tree ps 4, full bucket", 2, 3, 6, 4, 5, 5, 4, false, true, true},
    {"tree ps 1, short ring", 3, 2, 7, 1, 2, 4, 3, true, false, false},
};

inline draft_config config_of(const scenario& s) {
  draft_config c;
  c.max_batch = 5;
  c.topk = s.topk;
  c.num_steps = s.num_steps;
  c.page_size = s.page_size;
  c.max_context_len = 128;
  c.pool_rows = 7;
  c.kv_slots = std::int64_t{1} << 20;
  c.slot_stride = s.slot_stride;
  c.verify_tokens = s.draft_tokens;
  c.round_on_device = true;
  c.max_stop_tokens = 2;
  return c;
}

// A round's tree, draft tokens and target predictions for every row of the bucket: real rows a
// valid tree (parent[i] in [-1, i), depth <= num_steps, some orphans), padded rows junk.
inline void write_tree(round_mirror& m, std::int32_t bucket, std::int32_t real,
                       std::mt19937_64& rng) {
  const draft_config& c = m.p->config;
  const std::int64_t D = c.verify_tokens;
  for (std::int64_t r = 0; r < bucket; ++r) {
    std::vector<std::int32_t> depth(static_cast<std::size_t>(D), 0);
    for (std::int64_t i = 0; i < D; ++i) {
      std::int32_t parent = -1;
      if (r >= real) {
        parent = static_cast<std::int32_t>(rng() % 2000) - 1000;  // never read
      } else if (i > 0 && rng() % 8 != 0) {
        std::vector<std::int32_t> open;
        for (std::int32_t u = 0; u < i; ++u) {
          if (depth[static_cast<std::size_t>(u)] < c.num_steps) open.push_back(u);
        }
        if (!open.empty()) parent = open[rng() % open.size()];
      }
      depth[static_cast<std::size_t>(i)] =
          parent >= 0 && r < real ? depth[static_cast<std::size_t>(parent)] + 1 : c.num_steps;
      m.put<std::int32_t>(m.field(round_parent), r * D + i, parent);
      m.put<std::int32_t>(m.field(round_draft_token), r * D + i,
                          static_cast<std::int32_t>(rng() % 3));
      m.put<std::int32_t>(m.field(round_target_predict), r * D + i,
                          rng() % 20 == 0 ? 7 : static_cast<std::int32_t>(rng() % 3));
    }
  }
}

// Copies the mirror's bytes [offset, offset + n) to the arena (what an engine writes).
inline void upload(executor& ex, const draft_buffers& b, const round_mirror& m, std::size_t offset,
                   std::size_t n) {
  ex.copy_to_device(b.base() + offset, m.bytes.data() + offset, n);
}

// A staged round state: every real row backed up to allocated_len = ceil_page(s + R) with
// pages 1, 2, ... in row order (junk -9 after), padded rows at seq_len 1, pool row 0; the ring
// holding one round's worst case B * ceil(S / ps) pages with one entry of slack.
class round_rig {
 public:
  round_rig(executor& ex, const scenario& s, std::mt19937_64& rng)
      : p(make_plan(config_of(s))),
        arena(ex, p.total_bytes),
        b(p, arena.data()),
        v(b.round(s.bucket)),
        m{&p, std::vector<unsigned char>(p.total_bytes, poison)} {
    const draft_config& c = p.config;
    ex.fill_bytes(b.base(), poison, b.bytes());
    const std::int64_t ps = c.page_size, W = c.max_context_len, R = p.layout.round.reserve;
    e.width = W;
    e.req_to_token.assign(static_cast<std::size_t>(c.pool_rows * W), -9);
    e.budget = true;
    e.real_batch = s.real;
    if (s.stops) e.stop_ids = {7, 11};  // 11 is never predicted
    for (std::int64_t r = 0; r < s.bucket; ++r) {
      const bool real = r < s.real;
      const std::int32_t seq = real ? 1 + static_cast<std::int32_t>(rng() % 20) : 1;
      const std::int32_t row = real ? static_cast<std::int32_t>(r + 1) : 0;
      const std::int64_t alloc = real ? nr_round_up(seq + R, ps) : 0;
      for (std::int64_t q = 0; q < alloc; q += ps) {
        for (std::int64_t o = 0; o < ps; ++o) {
          e.req_to_token[static_cast<std::size_t>(row * W + q + o)] =
              static_cast<std::int32_t>(next_page * ps + o);
        }
        ++next_page;
      }
      m.put<std::int32_t>(p.layout.seq_len, r, seq);
      m.put<std::int32_t>(p.layout.req_pool_index, r, row);
      m.put<std::int32_t>(m.field(round_allocated_len), r, static_cast<std::int32_t>(alloc));
      m.put<std::int32_t>(m.field(round_max_new_tokens_left), r, s.stops && r == 1 ? 1 : 1000);
      // A real row's finished flag is staged 0 (not idle); a padded row's keeps the poison,
      // which no kernel may read as idle.
      if (real) m.put<std::int32_t>(m.field(round_finished), r, 0);
    }
    m.put<std::int32_t>(p.layout.real_batch, 0, s.scalar_real ? 0 : s.real);
    m.put<std::int64_t>(m.field(round_ring_head), 0, 0);
    m.put<std::int32_t>(m.field(round_stall), 0, 0);
    m.put<std::int32_t>(m.field(round_stop_token_ids), 0, 7);
    m.put<std::int32_t>(m.field(round_stop_token_ids), 1, 11);
    per_round = s.bucket * ((c.num_steps + 1 + ps - 1) / ps);
    e.ring.assign(static_cast<std::size_t>(per_round + 1), -1);
    for (; e.tail < per_round; ++e.tail) e.ring[static_cast<std::size_t>(e.tail)] = next_page++;
    // Stage: the small inputs, the section (state words included), the engine's buffers.
    upload(ex, b, m, p.layout.real_batch, p.layout.small_inputs_bytes);
    upload(ex, b, m, p.layout.round.begin, p.layout.round.end - p.layout.round.begin);
    r2t = std::make_unique<dvec<std::int32_t>>(ex, e.req_to_token);
    ring = std::make_unique<dvec<std::int32_t>>(ex, e.ring);
    tail = std::make_unique<dvec<std::int64_t>>(ex, std::vector<std::int64_t>{e.tail});
    in.req_to_token = r2t->data();
    in.ring = ring->data();
    in.ring_capacity = static_cast<std::int64_t>(e.ring.size());
    in.ring_tail = tail->data();
    in.real_batch = s.scalar_real ? s.real : -1;
    in.stop_token_count = s.stops ? 2 : 0;
  }
  round_rig(const round_rig&) = delete;
  round_rig& operator=(const round_rig&) = delete;

  const plan p;
  device_buffer arena;
  const draft_buffers b;
  const round_view v;
  round_mirror m;
  round_engine e;
  std::unique_ptr<dvec<std::int32_t>> r2t, ring;
  std::unique_ptr<dvec<std::int64_t>> tail;
  after_verify_inputs in;
  std::int32_t next_page = 1;
  std::int64_t per_round = 0;
};

// The round's guard words (the next round's as the reference, the others clean) and every other
// byte of the arena against the mirror: written cells exact, everything else as it was. The
// guard words and the next round's ring plan (its scratch, within the bucket's 2B + 2 words)
// are then taken into the mirror.
inline void expect_round(executor& ex, round_rig& rig, const round_guards& want,
                         std::int32_t bucket) {
  const plan& p = rig.p;
  round_mirror& m = rig.m;
  std::vector<unsigned char> got(p.total_bytes);
  ex.copy_to_host(got.data(), rig.b.base(), got.size());
  // The guard words: acceptance's and the commit's clean, the next round's as the reference.
  for (std::int32_t w = 0; w < round_guard_count; ++w) {
    guard_word g;
    const std::size_t at =
        p.layout.guards + static_cast<std::size_t>(p.layout.round.guard_base + w) * sizeof(g);
    std::memcpy(&g, got.data() + at, sizeof(g));
    EXPECT_EQ(g.violations, want.violations[w])
        << guard_site_of(p, p.layout.round.guard_base + w).buffer;
    if (want.violations[w] > 0) {
      EXPECT_EQ(g.row, want.row[w]) << w;
      EXPECT_EQ(g.column, want.column[w]) << w;
    }
    std::memcpy(m.bytes.data() + at, got.data() + at, sizeof(g));
  }
  // The next round's ring plan between its passes: its own business, within the bucket's
  // 2B + 2 words (the words past them stay poisoned).
  const std::size_t scratch = m.field(round_scratch);
  std::memcpy(m.bytes.data() + scratch, got.data() + scratch,
              static_cast<std::size_t>(2 * bucket + 2) * 8);
  // Every other byte of the arena: written cells exact, everything else as it was.
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != m.bytes[i]) {
      const buffer_spec* in_buffer = nullptr;
      for (const buffer_spec& x : p.buffers) {
        if (i >= x.offset && i < x.offset + x.bytes) in_buffer = &x;
      }
      ADD_FAILURE() << "arena byte " << i << " ("
                    << (in_buffer != nullptr ? in_buffer->name : std::string("padding"))
                    << (in_buffer != nullptr ? " +" + std::to_string(i - in_buffer->offset) : "")
                    << "): got " << int(got[i]) << ", want " << int(m.bytes[i]);
      break;
    }
  }
}

}  // namespace specgraph::testing
