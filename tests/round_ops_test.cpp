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
#include "tests/round_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

struct run_result {
  std::vector<std::int32_t> stalls;  // the stall word after each round
  std::int64_t finished = 0;         // finished rows over the rounds
};

run_result run_rounds(executor& ex, const scenario& s, bool graph_mode, std::uint64_t seed) {
  SCOPED_TRACE(std::string(s.name) + (graph_mode ? " (graph)" : " (eager)"));
  std::mt19937_64 rng(seed);
  round_rig rig(ex, s, rng);
  const plan& p = rig.p;
  const draft_config& c = p.config;
  const draft_buffers& b = rig.b;
  const round_view& v = rig.v;
  round_mirror& m = rig.m;
  round_engine& e = rig.e;
  dvec<std::int32_t>& r2t = *rig.r2t;
  dvec<std::int32_t>& ring = *rig.ring;
  dvec<std::int64_t>& tail = *rig.tail;
  const after_verify_inputs& in = rig.in;
  const std::int64_t per_round = rig.per_round;
  std::int32_t& next_page = rig.next_page;
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
    expect_round(ex, rig, want, s.bucket);
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
  std::mt19937_64 pick(seed);
  std::int64_t stalled = 0, finished = 0, idle = 0;
  for (int n = 0; n < property_cases(20); ++n) {
    for (scenario s : scenarios) {
      // The scenario's real batch first, then an idle rank (0), then any in [0, bucket].
      if (n == 1) s.real = 0;
      if (n > 1) s.real = static_cast<std::int32_t>(pick() % (s.bucket + 1));
      SCOPED_TRACE("case " + std::to_string(n) + ", real batch " + std::to_string(s.real));
      const std::uint64_t case_seed = seed + static_cast<std::uint64_t>(n);
      const run_result eager = run_rounds(*ex, s, false, case_seed);
      const run_result replayed = run_rounds(*ex, s, true, case_seed);
      EXPECT_EQ(eager.stalls, replayed.stalls) << s.name;
      EXPECT_EQ(eager.finished, replayed.finished) << s.name;
      if (!s.refill && s.real >= 3) {
        // Three rows taking >= 1 page each per round at ps 1 outrun the one round of pages.
        EXPECT_EQ(eager.stalls.back(), 1) << s.name;
      }
      if (s.stops && s.real >= 2) {
        // Row 1's budget of 1 finishes it in the first round, whatever it accepts.
        EXPECT_GT(eager.finished, 0) << s.name;
      }
      stalled += eager.stalls.back();
      finished += eager.finished;
      idle += s.real == 0;
    }
  }
  // The cases reached what they are for.
  EXPECT_GT(stalled, 0);
  EXPECT_GT(finished, 0);
  if (property_cases(20) >= 2) {
    EXPECT_GT(idle, 0);
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RoundOps);

}  // namespace
}  // namespace specgraph::testing
