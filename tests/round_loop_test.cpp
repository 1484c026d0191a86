// The main job's round loop (`specgraph run --rounds-per-launch N`, tools/sim/round_loop.hpp;
// issue 31 item 5): over random configurations (topk 1..4, page sizes 1..16, batches that pad
// their bucket, a stop token frequent enough that requests finish and are replaced, a length
// budget in half the cases, small enough that requests finish by it too), both modes
// pass the float64 reference on every round and are identical, round by round and at the end;
// the device loop makes exactly one graph launch per round, no eager kernel and one
// synchronisation per host step; the host-driven loop synchronises every host step and launches
// num_steps + 2 graphs per round. A planted bug (the prefix-tail copies skipped in one round of
// the device loop) fails that round by name; a budget of one token finishes every row in its
// first round; bad options are refused by name.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "specgraph/error.hpp"
#include "tests/test_support.hpp"
#include "tools/sim/round_loop.hpp"
#include "tools/sim/sim_engine.hpp"

namespace specgraph::testing {
namespace {

sim::loop_options random_loop(std::mt19937_64& rng, std::uint64_t seed) {
  auto pick = [&](std::int32_t lo, std::int32_t hi) {
    return std::uniform_int_distribution<std::int32_t>(lo, hi)(rng);
  };
  sim::loop_options o;
  o.batch = pick(1, 6);
  o.topk = pick(1, 4);
  o.num_steps = pick(1, 4);
  const std::int32_t sizes[] = {1, 2, 4, 16};
  o.page_size = sizes[pick(0, 3)];
  o.heads = pick(1, 2);
  o.head_dim = 8 * pick(1, 2);
  o.max_context = pick(1, 60);
  o.min_context = pick(1, o.max_context);
  o.rounds = pick(6, 20);
  o.rounds_per_launch = pick(1, o.rounds);
  o.seed = seed;
  o.verify = sim::loop_options::verify_mode::all;
  o.stop_every = pick(5, 30);
  o.verify_tokens = pick(1, std::min(16, 1 + o.topk * o.num_steps));
  o.max_new_tokens = pick(0, 1) != 0 ? pick(1, 12) : 0;  // half the cases with a budget
  return o;
}

std::string describe(const sim::loop_options& o) {
  return "batch " + std::to_string(o.batch) + ", topk " + std::to_string(o.topk) + ", steps " +
         std::to_string(o.num_steps) + ", D " + std::to_string(o.verify_tokens) + ", ps " +
         std::to_string(o.page_size) + ", context " + std::to_string(o.min_context) + ".." +
         std::to_string(o.max_context) + ", rounds " + std::to_string(o.rounds) + " / " +
         std::to_string(o.rounds_per_launch) + ", stop 1/" + std::to_string(o.stop_every) +
         ", budget " + std::to_string(o.max_new_tokens);
}

class RoundLoop : public ExecutorTest {};

TEST_P(RoundLoop, BothModesPassTheReferenceAndAreIdentical) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::int64_t finished = 0, replaced = 0, paged_trees = 0, by_budget = 0, by_stop_budgeted = 0;
  for (int i = 0; i < property_cases(12); ++i) {
    const sim::loop_options o = random_loop(rng, seed + static_cast<std::uint64_t>(i));
    SCOPED_TRACE(describe(o));
    const sim::loop_report r = sim::run_round_loop(*ex, o);
    EXPECT_TRUE(r.identical);
    EXPECT_EQ(r.compared_rounds, o.rounds);
    // verify all: every round with a live request, in both modes; at least the first round
    // after each host step (every row live: the finished ones were replaced).
    const std::int64_t steps = (o.rounds + o.rounds_per_launch - 1) / o.rounds_per_launch;
    EXPECT_GE(r.verified_rounds, 2 * steps);
    EXPECT_LE(r.verified_rounds, 2 * o.rounds);
    EXPECT_GT(r.verified_outputs, 0);
    EXPECT_LE(r.max_relative_error, o.tolerance);
    for (const sim::loop_mode_stats* s : {&r.host, &r.device}) {
      EXPECT_EQ(s->rounds, o.rounds) << s->mode;
      EXPECT_EQ(s->host_steps, steps) << s->mode;
      EXPECT_GE(s->accepted, 0) << s->mode;
    }
    EXPECT_EQ(r.device.graph_launches, o.rounds);
    EXPECT_EQ(r.device.synchronizations, steps);
    EXPECT_EQ(r.host.graph_launches, static_cast<std::int64_t>(o.rounds) * (o.num_steps + 2));
    EXPECT_EQ(r.host.synchronizations, steps);
    EXPECT_EQ(r.host.finished, r.device.finished);
    EXPECT_EQ(r.host.accepted, r.device.accepted);
    EXPECT_EQ(r.host.emitted, r.device.emitted);
    EXPECT_EQ(r.host.finished_by_budget, r.device.finished_by_budget);
    // A live row emits 1 .. num_steps + 1 tokens a round; without a budget none finishes by one.
    EXPECT_GE(r.device.emitted, r.device.row_rounds);
    EXPECT_LE(r.device.emitted, r.device.row_rounds * (o.num_steps + 1));
    if (o.max_new_tokens == 0) {
      EXPECT_EQ(r.device.finished_by_budget, 0);
    }
    by_budget += r.device.finished_by_budget;
    if (o.max_new_tokens > 0) by_stop_budgeted += r.device.finished - r.device.finished_by_budget;
    finished += r.device.finished;
    replaced += r.device.replaced;
    paged_trees += o.topk > 1 && o.page_size > 1;
  }
  EXPECT_GT(finished, 0) << "some requests must finish on the stop token";
  EXPECT_GT(replaced, 0) << "and be replaced at a host step";
  EXPECT_GT(paged_trees, 0) << "some cases must need the prefix-tail copies";
  EXPECT_GT(by_budget, 0) << "some requests must finish by their budget";
  EXPECT_GT(by_stop_budgeted, 0) << "and some with a budget on the stop token";
}

// A budget of one token: every live row finishes in its first round by its budget, emitting one
// token (the root's prediction), and idles until the next host step replaces it. With N = 3 per
// host step, each host step has exactly one live round per row: batch x steps row-rounds.
TEST_P(RoundLoop, ABudgetOfOneFinishesEveryRowInItsFirstRound) {
  sim::loop_options o;
  o.batch = 3;
  o.topk = 2;
  o.num_steps = 3;
  o.verify_tokens = 6;
  o.page_size = 4;
  o.heads = 1;
  o.head_dim = 8;
  o.min_context = 3;
  o.max_context = 20;
  o.rounds = 9;
  o.rounds_per_launch = 3;
  o.seed = test_seed();
  o.verify = sim::loop_options::verify_mode::all;
  o.stop_every = 0;  // no stop token: every finish is the budget's
  o.max_new_tokens = 1;
  const sim::loop_report r = sim::run_round_loop(*ex, o);
  EXPECT_TRUE(r.identical);
  for (const sim::loop_mode_stats* s : {&r.host, &r.device}) {
    EXPECT_EQ(s->row_rounds, 3 * 3) << s->mode;
    EXPECT_EQ(s->finished, 3 * 3) << s->mode;
    EXPECT_EQ(s->finished_by_budget, 3 * 3) << s->mode;
    EXPECT_EQ(s->emitted, 3 * 3) << s->mode;
    EXPECT_EQ(s->replaced, 3 * 2) << s->mode;  // not after the last host step
  }
  // A budget of num_steps + 1 or more lets a row go on past a round that accepts everything.
  o.max_new_tokens = 1000;
  const sim::loop_report g = sim::run_round_loop(*ex, o);
  EXPECT_TRUE(g.identical);
  EXPECT_EQ(g.device.finished_by_budget, 0);
  EXPECT_EQ(g.device.row_rounds, 3 * 9);
}

// The default shape of the main job's round loop at a small scale: a paged tree filling its
// bucket exactly (8 of 8), several host steps, every round verified.
TEST_P(RoundLoop, AFullBucketOfPagedTrees) {
  sim::loop_options o;
  o.batch = 8;
  o.topk = 4;
  o.num_steps = 5;
  o.verify_tokens = 8;
  o.page_size = 16;
  o.heads = 2;
  o.head_dim = 16;
  o.min_context = 1;
  o.max_context = 80;
  o.rounds = 24;
  o.rounds_per_launch = 8;
  o.seed = test_seed();
  o.verify = sim::loop_options::verify_mode::all;
  o.stop_every = 40;
  const sim::loop_report r = sim::run_round_loop(*ex, o);
  EXPECT_EQ(r.bucket, 8);
  EXPECT_TRUE(r.identical);
  EXPECT_EQ(r.verified_rounds, 48);
  EXPECT_EQ(r.device.graph_launches, 24);
  EXPECT_EQ(r.device.kernel_launches, r.device.replaced);  // one K/V prefill per new request
  EXPECT_EQ(r.device.synchronizations, 3);
}

// A short ring (one round's worst case published per host step): rounds stall, the rounds
// queued behind a stall do nothing, and at the next host step the engine refills the ring,
// clears the word and reruns the next round. Every live round still passes the float64
// reference and the bookkeeping check, whose seq_len rule spans the stall (a stalled round that
// accepted over its inactive rows would break it: the rerun would build from its seq_len 1),
// and both modes stall at the same rounds and are identical.
TEST_P(RoundLoop, AShortRingStallsAndTheHostRerunsTheNextRound) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::int64_t stalled = 0, reruns = 0;
  for (int i = 0; i < std::max(2, property_cases(12) / 2); ++i) {
    sim::loop_options o = random_loop(rng, seed + static_cast<std::uint64_t>(i));
    // Page size 1 and four rounds or more per step: a step takes more than one round's worst
    // case of pages.
    o.page_size = 1;
    o.rounds_per_launch = std::max(4, o.rounds_per_launch);
    o.rounds = std::max(o.rounds, 2 * o.rounds_per_launch);
    o.short_ring = 1;
    SCOPED_TRACE(describe(o));
    const sim::loop_report r = sim::run_round_loop(*ex, o);
    EXPECT_TRUE(r.identical);
    EXPECT_EQ(r.host.stalled_rounds, r.device.stalled_rounds);
    EXPECT_EQ(r.host.reruns, r.device.reruns);
    EXPECT_LE(r.device.reruns, (o.rounds + o.rounds_per_launch - 1) / o.rounds_per_launch);
    EXPECT_EQ(r.device.graph_launches, o.rounds) << "a stalled round is still one launch";
    EXPECT_LE(r.max_relative_error, o.tolerance);
    stalled += r.device.stalled_rounds;
    reruns += r.device.reruns;
  }
  EXPECT_GT(stalled, 0) << "no round ran behind a stall";
  EXPECT_GT(reruns, 0) << "the host never reran a next round";
}

// The planted bug: the device loop skips its prefix-tail copies in round 2, so the branches t >= 1
// of a request whose committed length is off a page boundary attend a stale tail: that round
// fails by name in the device loop (the host-driven loop, which runs first, passes).
TEST_P(RoundLoop, SkippedTailCopiesFailThatRound) {
  sim::loop_options o;
  o.batch = 4;
  o.topk = 2;
  o.num_steps = 3;
  o.verify_tokens = 5;
  o.page_size = 4;
  o.heads = 1;
  o.head_dim = 8;
  o.min_context = 5;
  o.max_context = 30;
  o.rounds = 6;
  o.rounds_per_launch = 3;
  o.seed = 3;
  o.verify = sim::loop_options::verify_mode::all;
  o.corrupt_round = 2;
  try {
    (void)sim::run_round_loop(*ex, o);
    ADD_FAILURE() << "the stale tail must fail the verification";
  } catch (const sim::verification_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device loop round 2:"), std::string::npos) << m;
    EXPECT_NE(m.find("branch 1"), std::string::npos) << m;
  }
  o.corrupt_round = -1;
  EXPECT_TRUE(sim::run_round_loop(*ex, o).identical);
}

TEST_P(RoundLoop, BadOptionsAreRefusedByName) {
  sim::loop_options o;
  o.rounds = 4;
  o.rounds_per_launch = 5;
  expect_invalid([&] { (void)sim::run_round_loop(*ex, o); }, "rounds_per_launch");
  o.rounds_per_launch = 2;
  o.batch = 0;
  expect_invalid([&] { (void)sim::run_round_loop(*ex, o); }, "batch");
  o.batch = 2;
  o.topk = 1;
  o.num_steps = 2;
  o.verify_tokens = 3;  // the chain's limit, 1 + topk * num_steps
  o.max_context = 10;
  o.heads = 1;
  o.head_dim = 8;
  EXPECT_TRUE(sim::run_round_loop(*ex, o).identical);
  o.verify_tokens = 4;
  expect_invalid([&] { (void)sim::run_round_loop(*ex, o); }, "verify_tokens", "[1, 3]");
  o.verify_tokens = 3;
  o.max_new_tokens = -1;
  expect_invalid([&] { (void)sim::run_round_loop(*ex, o); }, "max_new_tokens", "[0, 1073741824]");
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RoundLoop);

}  // namespace
}  // namespace specgraph::testing
