// after_verify (round_ops.hpp): K = 6 rounds back to back on one bucket, (a) eager and (b)
// recorded once as a graph and replayed, where between rounds the test only does what an
// engine's forwards and allocator do (writes the next tree, draft tokens and target predictions
// into the section's inputs; refills the ring and publishes its tail). After every round the
// whole arena (poisoned before staging), the engine's req_to_token and the guard words are
// compared with the independent references chained on the host (tests/round_chain.hpp): every
// output cell, the staged seq_len and out_cache_loc the op writes in place, allocated_len, the
// ring head, the stall word, and every byte it must not touch. Finished rows, padded rows, a
// short ring (stall), the misuse errors.
#include <gtest/gtest.h>

#include <cstdint>
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
namespace {

constexpr unsigned char poison = 0xa5;

struct scenario {
  const char* name;
  std::int32_t topk, num_steps, draft_tokens, page_size, slot_stride;
  std::int32_t bucket, real;
  bool scalar_real;  // the real batch as a launch scalar (the staged word holds 0)
  bool refill;       // refill the ring after every round; false: never (it runs short)
  bool stops;        // stop id 7 and a budget of 1 on row 1
};

const scenario scenarios[] = {
    {"chain ps 1", 1, 3, 4, 1, 3, 4, 3, false, true, true},
    {"tree ps 4, full bucket", 2, 3, 6, 4, 5, 5, 4, false, true, true},
    {"tree ps 1, short ring", 3, 2, 7, 1, 2, 4, 3, true, false, false},
};

draft_config config_of(const scenario& s) {
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
void write_tree(round_mirror& m, std::int32_t bucket, std::int32_t real, std::mt19937_64& rng) {
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
void upload(executor& ex, const draft_buffers& b, const round_mirror& m, std::size_t offset,
            std::size_t n) {
  ex.copy_to_device(b.base() + offset, m.bytes.data() + offset, n);
}

struct run_result {
  std::vector<std::int32_t> stalls;  // the stall word after each round
  std::int64_t finished = 0;         // finished rows over the rounds
};

run_result run_rounds(executor& ex, const scenario& s, bool graph_mode, std::uint64_t seed) {
  SCOPED_TRACE(std::string(s.name) + (graph_mode ? " (graph)" : " (eager)"));
  std::mt19937_64 rng(seed);
  const plan p = make_plan(config_of(s));
  const draft_config& c = p.config;
  device_buffer arena(ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  const round_view v = b.round(s.bucket);
  round_mirror m{&p, std::vector<unsigned char>(p.total_bytes, poison)};
  ex.fill_bytes(b.base(), poison, b.bytes());
  const std::int64_t ps = c.page_size, W = c.max_context_len, R = p.layout.round.reserve;
  // The engine: req_to_token rows backed up to allocated_len = ceil_page(s + R), junk after.
  round_engine e;
  e.width = W;
  e.req_to_token.assign(static_cast<std::size_t>(c.pool_rows * W), -9);
  e.budget = true;
  e.real_batch = s.real;
  if (s.stops) e.stop_ids = {7};
  std::int32_t next_page = 1;
  for (std::int64_t r = 0; r < s.bucket; ++r) {
    const bool real = r < s.real;
    const std::int32_t seq = real ? 1 + static_cast<std::int32_t>(rng() % 20) : 1;
    const std::int32_t row = real ? static_cast<std::int32_t>(r + 1) : 0;  // padding: pool row 0
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
  }
  m.put<std::int32_t>(p.layout.real_batch, 0, s.scalar_real ? 0 : s.real);
  m.put<std::int64_t>(m.field(round_ring_head), 0, 0);
  m.put<std::int32_t>(m.field(round_stall), 0, 0);
  m.put<std::int32_t>(m.field(round_stop_token_ids), 0, 7);
  // The ring: one round's worst case B * ceil(S / ps) pages available, one entry of slack.
  const std::int64_t per_round = s.bucket * ((c.num_steps + 1 + ps - 1) / ps);
  e.ring.assign(static_cast<std::size_t>(per_round + 1), -1);
  for (; e.tail < per_round; ++e.tail) e.ring[static_cast<std::size_t>(e.tail)] = next_page++;
  // Stage: the small inputs, the section (state words included).
  upload(ex, b, m, p.layout.real_batch, p.layout.small_inputs_bytes);
  upload(ex, b, m, p.layout.round.begin, p.layout.round.end - p.layout.round.begin);
  dvec<std::int32_t> r2t(ex, e.req_to_token);
  dvec<std::int32_t> ring(ex, e.ring);
  dvec<std::int64_t> tail(ex, std::vector<std::int64_t>{e.tail});
  after_verify_inputs in;
  in.req_to_token = r2t.data();
  in.ring = ring.data();
  in.ring_capacity = static_cast<std::int64_t>(e.ring.size());
  in.ring_tail = tail.data();
  in.real_batch = s.scalar_real ? s.real : -1;
  in.stop_token_count = s.stops ? 1 : 0;
  std::unique_ptr<graph_exec> exec;
  if (graph_mode) {
    ex.begin_capture();
    after_verify(ex, v, in);
    const std::unique_ptr<graph> g = ex.end_capture();
    exec = ex.instantiate(*g);
  }
  run_result out;
  const std::int64_t D = c.verify_tokens;
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // The engine's forwards: the next tree into the section's inputs.
    write_tree(m, s.bucket, s.real, rng);
    for (std::int32_t f : {round_parent, round_draft_token, round_target_predict}) {
      upload(ex, b, m, m.field(f), static_cast<std::size_t>(s.bucket * D * 4));
    }
    if (graph_mode) {
      ex.launch_graph(*exec);
    } else {
      after_verify(ex, v, in);
    }
    const round_guards want = chain_round(m, e, s.bucket);
    std::vector<unsigned char> got(p.total_bytes);
    ex.copy_to_host(got.data(), b.base(), got.size());
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
                static_cast<std::size_t>(2 * s.bucket + 2) * 8);
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
    EXPECT_EQ(r2t.download(), e.req_to_token);
    const std::int32_t stall = m.get<std::int32_t>(m.field(round_stall), 0);
    out.stalls.push_back(stall);
    for (std::int64_t r = 0; r < s.bucket; ++r) {
      out.finished += m.get<std::int32_t>(m.field(round_finished), r);
    }
    // The allocator: refill what the round took and publish the tail (stream order).
    if (s.refill) {
      const std::int64_t head = m.get<std::int64_t>(m.field(round_ring_head), 0);
      const std::int64_t from = e.tail;
      for (; e.tail < head + per_round; ++e.tail) {
        e.ring[static_cast<std::size_t>(e.tail % in.ring_capacity)] = next_page++;
      }
      for (std::int64_t t = from; t < e.tail; ++t) {
        const std::size_t slot = static_cast<std::size_t>(t % in.ring_capacity);
        ex.copy_to_device(ring.data() + slot, &e.ring[slot], 4);
      }
      ex.copy_to_device(tail.data(), &e.tail, 8);
    }
  }
  return out;
}

class RoundOps : public ExecutorTest {};

TEST_P(RoundOps, SixRoundsEagerAndReplayedMatchTheChainedReferences) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  for (const scenario& s : scenarios) {
    const run_result eager = run_rounds(*ex, s, false, seed);
    const run_result replayed = run_rounds(*ex, s, true, seed);
    EXPECT_EQ(eager.stalls, replayed.stalls) << s.name;
    if (!s.refill) {
      // Three rows taking >= 1 page each per round at ps 1 outrun the one round of pages.
      EXPECT_EQ(eager.stalls.back(), 1) << s.name;
    }
    if (s.stops) {
      // Row 1's budget of 1 finishes it in the first round, whatever it accepts.
      EXPECT_GT(eager.finished, 0) << s.name;
    }
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RoundOps);

}  // namespace
}  // namespace specgraph::testing
