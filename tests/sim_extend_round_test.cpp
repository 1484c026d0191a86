// The main job's draft-extend step (issue 30 item 5): over random configurations (every format,
// page sizes 1..64, random depths, small contexts so requests reach the edge and are replaced),
// the draft model's extend forward through each layout the format reads matches the float64
// reference by position, FA3 and CSR agree, the counts are those of the rounds that ran and the
// accepted lengths are the verify step's; a planted stale table cell fails the round naming the
// extend step, the request and the path; --no-extend runs no extend step.
#include <cstdint>
#include <random>
#include <string>

#include "tests/test_support.hpp"
#include "tools/sim/sim_engine.hpp"

namespace specgraph::testing {
namespace {

sim::sim_options random_options(std::mt19937_64& rng, std::uint64_t seed) {
  auto pick = [&](std::int32_t lo, std::int32_t hi) {
    return std::uniform_int_distribution<std::int32_t>(lo, hi)(rng);
  };
  sim::sim_options o;
  o.max_batch = pick(1, 6);
  o.topk = pick(1, 4);
  o.num_steps = pick(1, 5);
  const std::int32_t sizes[] = {1, 2, 4, 16, 64};
  o.page_size = sizes[pick(0, 4)];
  o.heads = pick(1, 2);
  o.head_dim = 8 * pick(1, 2);
  o.max_context = pick(1, 90);
  o.depth = -1;
  o.rounds = 8;
  o.seed = seed;
  o.format = static_cast<metadata_formats>(pick(0, 2));
  o.verify = sim::sim_options::verify_mode::all;
  o.verify_tokens = pick(1, 1 + o.topk * o.num_steps);
  return o;
}

class SimExtendRound : public ExecutorTest {};

TEST_P(SimExtendRound, RandomConfigsMatchTheReferenceAndTheFormatsAgree) {
  const std::uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  for (int c = 0; c < 8; ++c) {
    sim::sim_options o = random_options(rng, seed + static_cast<std::uint64_t>(c));
    o.executor = GetParam();
    SCOPED_TRACE("max_batch " + std::to_string(o.max_batch) + ", page " +
                 std::to_string(o.page_size) + ", context " + std::to_string(o.max_context) +
                 ", W " + std::to_string(o.verify_tokens) + ", format " + to_string(o.format) +
                 ", seed " + std::to_string(o.seed));
    sim::sim_engine engine(*ex, o);
    engine.capture();
    const sim::run_report r = engine.run();
    std::int64_t requests = 0;
    for (const sim::round_record& rr : r.rounds) requests += rr.batch;
    const sim::extend_stats& x = r.extend;
    EXPECT_EQ(x.steps, o.rounds);
    EXPECT_EQ(x.requests, requests);
    EXPECT_EQ(x.window_tokens, requests * o.verify_tokens);
    // Each request commits its accepted path and the root: the verify step's count + 1.
    EXPECT_EQ(x.accepted, r.verify.accepted + requests);
    EXPECT_EQ(x.verified_rounds, o.rounds);
    EXPECT_EQ(x.verified_outputs, requests * o.verify_tokens * o.heads);
    const bool fa3 = o.format != metadata_formats::csr, csr = o.format != metadata_formats::fa3;
    if (requests > 0) {
      EXPECT_EQ(x.max_relative_error_fa3 > 0, fa3);
      EXPECT_EQ(x.max_relative_error_full > 0, csr);
      EXPECT_EQ(x.max_relative_error_prefix > 0, csr);
    }
    EXPECT_LE(x.max_relative_error_fa3, o.tolerance);
    EXPECT_LE(x.max_relative_error_full, o.tolerance);
    EXPECT_LE(x.max_relative_error_prefix, o.tolerance);
    EXPECT_EQ(x.agreement_outputs, fa3 && csr ? x.verified_outputs : 0);
    if (HasFatalFailure()) return;
  }
}

// One page-table cell (FA3) and one full-layout index (CSR) of request 0 replaced after the
// metadata, as a stale table would hold: the reference by position catches it on that round.
TEST_P(SimExtendRound, APlantedStaleCellFailsTheRoundNamingTheExtendStep) {
  for (const metadata_formats f : {metadata_formats::fa3, metadata_formats::csr}) {
    sim::sim_options o;
    o.executor = GetParam();
    o.max_batch = 3;
    o.topk = 2;
    o.num_steps = 3;
    o.page_size = 4;
    o.heads = 1;
    o.head_dim = 8;
    o.min_context = 9;  // the first key's page holds other keys: another page reads others
    o.max_context = 30;
    o.format = f;
    o.seed = test_seed();
    sim::sim_engine engine(*ex, o);
    engine.capture();
    engine.corrupt_extend_table_at_round(1);
    sim::run_report report;
    report.steps.resize(3);
    engine.run_round(0, 3, 3, true, report);
    try {
      engine.run_round(1, 3, 3, true, report);
      ADD_FAILURE() << to_string(f) << ": verification should have failed";
    } catch (const sim::verification_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("round 1, extend step, bucket 3: request 0, window token "),
                std::string::npos)
          << what;
      EXPECT_NE(what.find(f == metadata_formats::fa3 ? "(fa3 path)" : "(csr full path)"),
                std::string::npos)
          << what;
    }
  }
}

TEST_P(SimExtendRound, WithoutTheExtendStepNoneRuns) {
  sim::sim_options o;
  o.executor = GetParam();
  o.max_batch = 2;
  o.max_context = 20;
  o.rounds = 3;
  o.draft_extend = false;
  sim::sim_engine engine(*ex, o);
  engine.capture();
  const sim::run_report r = engine.run();
  EXPECT_EQ(r.verify.steps, 3);
  EXPECT_EQ(r.extend.steps, 0);
  EXPECT_EQ(r.extend.requests, 0);
}

SPECGRAPH_INSTANTIATE_EXECUTORS(SimExtendRound);

}  // namespace
}  // namespace specgraph::testing
