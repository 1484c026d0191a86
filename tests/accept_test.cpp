// Greedy tree acceptance (docs/accept.md) against the independent reference of
// accept_reference.hpp: the worked examples verbatim, then random trees (parents with orphans,
// duplicate sibling tokens from a small alphabet, topk 1 chains, D 1..64, num_steps 1..8, padded
// buckets holding junk, idle ranks, exact capacities and one short one) in both entries (host
// twin, launcher on the host executor with or without the device real-batch word). Every output
// cell is checked, and the poisoned slack past every buffer stays poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/executor.hpp"
#include "tests/accept_reference.hpp"
#include "tests/accept_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// Cells per request of each output (the guard's row of a refused store is cell / width).
std::int64_t row_width(const accept_case& c, int i) {
  return i == 0 ? c.steps + 1 : (i == 2 || i == 3 ? c.nodes : 1);
}

// Every cell below the capacity as the reference says, every cell past it poisoned; guard[1]
// the lowest refused store (one output short at most) and guard[0] clean.
void expect_matches(const accept_case& c, const accept_outputs& o) {
  const accept_expect e = accept_reference(c);
  std::int64_t exact[accept_output_count];
  accept_exact(c, exact);
  std::int64_t refused = 0;
  for (int i = 0; i < accept_output_count; ++i) {
    const std::vector<std::int64_t>& want = accept_expected(e, i);
    ASSERT_EQ(static_cast<std::int64_t>(want.size()), exact[i]) << accept_output_names[i];
    const std::vector<std::int32_t>& got = o.cells[i];
    for (std::size_t k = 0; k < got.size(); ++k) {
      // A stalled round writes no bonus and no new_seq_len (outputs 4 and 5).
      const bool kept = e.keeps_next && (i == 4 || i == 5);
      const bool stored = !kept && static_cast<std::int64_t>(k) < std::min(o.capacity[i], exact[i]);
      ASSERT_EQ(got[k], stored ? want[k] : accept_poison)
          << accept_output_names[i] << "[" << k << "]";
    }
    if (o.capacity[i] < exact[i] && !(e.keeps_next && (i == 4 || i == 5))) {
      ASSERT_EQ(refused, 0) << "the test shortens one output at most";
      refused = exact[i] - o.capacity[i];
      const guard_word& g = o.guard[1];
      const auto cap = static_cast<std::size_t>(o.capacity[i]);
      EXPECT_EQ(g.kernel, static_cast<int>(kernel_id::accept_outputs));
      EXPECT_EQ(g.kind, static_cast<int>(violation_kind::capacity));
      EXPECT_EQ(g.row, o.capacity[i] / row_width(c, i)) << accept_output_names[i];
      EXPECT_EQ(g.column, o.capacity[i]) << accept_output_names[i];
      EXPECT_EQ(g.capacity, o.capacity[i]) << accept_output_names[i];
      EXPECT_EQ(g.value, want[cap]) << accept_output_names[i];
    }
  }
  EXPECT_EQ(o.guard[1].violations, refused) << describe(o.guard[1]);
  EXPECT_EQ(o.guard[0].violations, 0) << describe(o.guard[0]);
}

std::vector<std::int32_t> cells(const accept_outputs& o, int i, std::size_t n) {
  return std::vector<std::int32_t>(o.cells[i].begin(), o.cells[i].begin() + n);
}
using v32 = std::vector<std::int32_t>;

// E1: topk 1 chains, num_steps 3, D 4, seq_len [5, 3].
TEST(AcceptExamples, E1Chains) {
  accept_case c;
  c.bucket = c.real_batch = 2;
  c.nodes = 4;
  c.steps = 3;
  c.parent = {-1, 0, 1, 2, -1, 0, 1, 2};
  c.draft = {7, 11, 12, 13, 4, 5, 6, 8};
  c.target = {11, 12, 9, 0, 5, 6, 8, 3};
  c.seq_len = {5, 3};
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const accept_outputs o = run_accept_case(*ex, c, twin);
    expect_matches(c, o);
    EXPECT_EQ(cells(o, 0, 8), (v32{0, 1, 2, -1, 4, 5, 6, 7}));
    EXPECT_EQ(cells(o, 1, 2), (v32{2, 3}));
    EXPECT_EQ(cells(o, 2, 8), (v32{11, 12, 9, 0, 5, 6, 8, 3}));
    EXPECT_EQ(cells(o, 3, 8), (v32{11, 12, 9, 0, 5, 6, 8, 3}));  // 11 12 9 | 5 6 8 3
    EXPECT_EQ(cells(o, 4, 2), (v32{9, 3}));
    EXPECT_EQ(cells(o, 5, 2), (v32{8, 7}));
    EXPECT_EQ(cells(o, 6, 2), (v32{2, 7}));
  }
}

// E2: topk 2, num_steps 2, D 4, seq_len [6, 1] with row 1 padded.
TEST(AcceptExamples, E2TreeAndPaddedRow) {
  accept_case c;
  c.bucket = 2;
  c.real_batch = 1;
  c.nodes = 4;
  c.steps = 2;
  c.parent = {-1, 0, 0, 1, 5, 9, -3, 7};  // row 1: junk, never read
  c.draft = {7, 11, 21, 12, 1, 2, 3, 4};
  c.target = {11, 12, 5, 30, 1, 2, 3, 4};
  c.seq_len = {6, 1};
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const accept_outputs o = run_accept_case(*ex, c, twin, !twin);
    expect_matches(c, o);
    EXPECT_EQ(cells(o, 0, 6), (v32{0, 1, 3, -1, -1, -1}));
    EXPECT_EQ(cells(o, 1, 2), (v32{2, 0}));
    EXPECT_EQ(cells(o, 2, 8), (v32{11, 12, 0, 30, 0, 0, 0, 0}));
    EXPECT_EQ(cells(o, 3, 4), (v32{11, 12, 30, 0}));
    EXPECT_EQ(cells(o, 4, 2), (v32{30, 0}));
    EXPECT_EQ(cells(o, 5, 2), (v32{9, 1}));
    EXPECT_EQ(cells(o, 6, 2), (v32{2, 7}));  // the padded row's is 1 * 4 + 3
  }
}

accept_case random_case(std::mt19937_64& rng) {
  auto pick = [&](std::int64_t lo, std::int64_t hi) {  // [lo, hi]
    return static_cast<std::int32_t>(lo + static_cast<std::int64_t>(rng() % (hi - lo + 1)));
  };
  accept_case c;
  c.steps = pick(1, 8);
  const bool chain = rng() % 4 == 0;  // topk 1
  c.nodes = chain ? c.steps + 1 : (rng() % 8 == 0 ? pick(1, 64) : pick(1, 12));
  c.bucket = rng() % 16 == 0 ? 0 : pick(1, 5);
  c.real_batch = rng() % 4 == 0 ? pick(0, c.bucket) : c.bucket;
  const std::int32_t alphabet = pick(1, 4);  // small: duplicate siblings and long matches
  const std::int32_t orphan_odds = pick(0, 3);
  const std::int64_t D = c.nodes;
  // In one case in four, idle flags: a real row flagged (one in three) holds junk like padding
  // and must be written as padding; padding rows' flags are junk, never read.
  const bool flags = rng() % 4 == 0;
  for (std::int32_t r = 0; r < c.bucket && flags; ++r) {
    c.idle.push_back(r >= c.real_batch ? pick(-3, 3) : (rng() % 3 == 0 ? pick(1, 3) : 0));
  }
  // In one case in eight a stall word: nonzero (the round is stalled, every row holds junk) in
  // half of them, else 0 (read, not stalled).
  if (rng() % 8 == 0) c.stall.push_back(rng() % 2 == 0 ? pick(1, 3) : 0);
  for (std::int32_t r = 0; r < c.bucket; ++r) {
    const bool real =
        r < c.real_batch && (!flags || c.idle[static_cast<std::size_t>(r)] == 0) && !c.stalled();
    std::vector<std::int32_t> depth(static_cast<std::size_t>(D), -1);
    for (std::int64_t i = 0; i < D; ++i) {
      std::int32_t q = -1;
      if (!real) {
        q = pick(-4, 70);  // junk: a padded row is never read
      } else if (i == 0) {
        q = -1;
      } else if (chain) {
        q = static_cast<std::int32_t>(i - 1);
      } else if (orphan_odds > 0 && pick(0, 15) < orphan_odds) {
        q = -1;
      } else {
        // Any earlier node that keeps the depth within num_steps (unreachable ones too).
        for (int tries = 0; tries < 8; ++tries) {
          const std::int32_t cand = pick(0, i - 1);
          const std::int32_t dc = depth[static_cast<std::size_t>(cand)];
          if (dc < c.steps) {
            q = cand;
            break;
          }
        }
      }
      c.parent.push_back(q);
      if (real) {
        depth[static_cast<std::size_t>(i)] =
            i == 0 ? 0 : (q < 0 ? -1 : std::max(-1, depth[static_cast<std::size_t>(q)] + 1));
        if (q >= 0 && depth[static_cast<std::size_t>(q)] < 0)
          depth[static_cast<std::size_t>(i)] = -1;
      }
      c.draft.push_back(real ? pick(0, alphabet - 1) : pick(-100, 100));
      c.target.push_back(real ? pick(0, alphabet - 1) : pick(-100, 100));
    }
    c.seq_len.push_back(real ? (rng() % 8 == 0 ? pick(0, 1 << 28) : pick(0, 50))
                             : pick(-(1 << 30), 1 << 30));
  }
  return c;
}

TEST(AcceptRandom, EveryCellAgainstTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto ex = make_host_executor();
  const int cases = property_cases(1000000);
  std::int64_t trees = 0, accepted = 0, short_runs = 0, idle_rows = 0, stalled_rows = 0;
  for (int i = 0; i < cases; ++i) {
    const accept_case c = random_case(rng);
    SCOPED_TRACE("case " + std::to_string(i));
    std::int64_t caps[accept_output_count];
    accept_exact(c, caps);
    if (rng() % 8 == 0) {  // one output short of what the round writes
      const int k = static_cast<int>(rng() % accept_output_count);
      caps[k] =
          caps[k] > 0 ? static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(caps[k])) : 0;
      ++short_runs;
    }
    const bool twin = i % 2 == 0;
    const accept_outputs o = run_accept_case(*ex, c, twin, !twin && i % 4 == 1, caps);
    expect_matches(c, o);
    if (HasFatalFailure()) return;
    trees += c.real_batch;
    for (std::int32_t r = 0; r < c.real_batch && r < o.capacity[1]; ++r) accepted += o.cells[1][r];
    for (std::size_t r = 0; r < c.idle.size(); ++r) {
      idle_rows += static_cast<std::int32_t>(r) < c.real_batch && c.idle[r] != 0;
    }
    stalled_rows += c.stalled() ? c.real_batch : 0;
  }
  if (cases >= 1000) {
    EXPECT_GT(idle_rows, 0) << "no idle row";
    EXPECT_GT(stalled_rows, 0) << "no real row in a stalled round";
  }
  RecordProperty("trees", std::to_string(trees));
  RecordProperty("idle_rows", std::to_string(idle_rows));
  RecordProperty("accepted_nodes", std::to_string(accepted));
  RecordProperty("short_runs", std::to_string(short_runs));
}

// The launcher on each executor with everything in executor memory (on a GPU: the kernel itself,
// its guard-word atomics and the device real-batch word): the examples' trees and random ones,
// one output short in some, checked cell by cell as above.
class AcceptExecutors : public ExecutorTest {};

TEST_P(AcceptExecutors, EveryCellAgainstTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int cases = std::max(1, property_cases(1000000) / 500);  // 2000 by default
  for (int i = 0; i < cases; ++i) {
    const accept_case c = random_case(rng);
    SCOPED_TRACE("case " + std::to_string(i));
    std::int64_t caps[accept_output_count];
    accept_exact(c, caps);
    if (i % 5 == 4) {
      const int k = static_cast<int>(rng() % accept_output_count);
      caps[k] =
          caps[k] > 0 ? static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(caps[k])) : 0;
    }
    expect_matches(c, run_accept_on(*ex, c, i % 2 == 1, caps));
    if (HasFatalFailure()) return;
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(AcceptExecutors);

}  // namespace
}  // namespace specgraph::testing
