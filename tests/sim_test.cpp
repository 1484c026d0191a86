// The main job's workload: the simulated engine's attention kernels against a dense float64
// reference, the whole run's counts, and a deliberately corrupted page table caught by
// verification.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "tests/test_support.hpp"
#include "tools/json.hpp"
#include "tools/run_command.hpp"
#include "tools/sim/sim_engine.hpp"
#include "tools/sim/sim_kernels.hpp"

namespace specgraph::testing {
namespace {

sim::sim_options small_options(std::uint64_t seed) {
  sim::sim_options o;
  o.max_batch = 6;
  o.topk = 3;
  o.num_steps = 4;
  o.page_size = 8;
  o.heads = 2;
  o.head_dim = 16;
  o.max_context = 80;
  o.rounds = 24;
  o.seed = seed;
  o.verify = sim::sim_options::verify_mode::sample;
  o.verify_every = 5;
  return o;
}

class SimEngine : public ExecutorTest {};

// The run at a small configuration with a fixed seed: verification passes and the report's
// counts add up.
TEST_P(SimEngine, SmallRunVerifiesAndCountsAddUp) {
  sim::sim_options o = small_options(7);
  o.depth = -1;  // adaptive: random depth per round
  o.executor = GetParam();
  sim::sim_engine engine(*ex, o);
  const capture_report cap = engine.capture();
  EXPECT_EQ(cap.graphs, 6 * 4);  // buckets 1..6, 4 steps
  const sim::run_report r = engine.run();
  ASSERT_EQ(r.rounds.size(), 24u);
  std::vector<std::int64_t> replays(4, 0), tokens(4, 0);
  std::int64_t verified = 0, outputs = 0;
  std::set<std::int32_t> buckets;
  for (std::size_t i = 0; i < r.rounds.size(); ++i) {
    const sim::round_record& rr = r.rounds[i];
    EXPECT_GE(rr.bucket, rr.batch);
    buckets.insert(rr.bucket);
    for (std::int32_t s = 0; s < rr.depth; ++s) {
      ++replays[static_cast<std::size_t>(s)];
      tokens[static_cast<std::size_t>(s)] += rr.batch * 3;
    }
    EXPECT_EQ(rr.verified, i % 5 == 0);
    if (rr.verified) {
      ++verified;
      outputs += static_cast<std::int64_t>(rr.depth) * rr.batch * 3 * 2;
    }
  }
  for (std::size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(r.steps[s].replays, replays[s]);
    EXPECT_EQ(static_cast<std::int64_t>(r.steps[s].seconds.size()), replays[s]);
    EXPECT_EQ(r.steps[s].draft_tokens, tokens[s]);
  }
  EXPECT_EQ(r.verified_rounds, verified);
  EXPECT_EQ(r.verified_outputs, outputs);
  EXPECT_GT(r.max_relative_error, 0.0);
  EXPECT_LE(r.max_relative_error, 1e-5);
  EXPECT_GE(buckets.size(), 3u);
}

// `run --slot-stride`: out_cache_loc rows 7 wide for 4 draft steps, the 3 extra slots of every
// row holding -1 (out of range: a read is refused and recorded, so checked mode would raise,
// and its table cell would be missing from the attention). Every round verifies against the
// float64 reference, with the poison staged beside the slots the steps read.
TEST_P(SimEngine, SlotRowsWiderThanTheStepsVerifyAndTheirExtraSlotsAreNeverRead) {
  sim::sim_options o = small_options(test_seed());
  o.slot_stride = 7;
  o.checked = true;
  o.rounds = 10;
  o.verify = sim::sim_options::verify_mode::all;
  sim::sim_engine engine(*ex, o);
  EXPECT_EQ(engine.capture().graphs, 6 * 4);  // the steps, not the stride, size the graphs
  const sim::run_report r = engine.run();
  EXPECT_EQ(r.verified_rounds, 10);
  EXPECT_LE(r.max_relative_error, 1e-5);
  const draft_runtime& rt = engine.runtime();
  const std::size_t staged = static_cast<std::size_t>(rt.staged_batch()) * 3 * 7;
  std::vector<std::int64_t> slots(staged);
  ex->copy_to_host(slots.data(), rt.buffers().out_cache_loc(), staged * 8);
  for (std::size_t i = 0; i < staged; ++i) EXPECT_EQ(slots[i] == -1, i % 7 >= 4) << i;
}

// Short prefixes (zero whole pages: the prefix pass sees no tokens, lse = -inf) and branches
// whose draft tokens cross into a second page, all verified.
TEST_P(SimEngine, ZeroPrefixPagesAndPageCrossingBranchesVerify) {
  sim::sim_options o = small_options(test_seed());
  o.max_context = 20;  // many prefixes shorter than a page of 8
  o.num_steps = 6;
  o.rounds = 12;
  o.verify = sim::sim_options::verify_mode::all;
  sim::sim_engine engine(*ex, o);
  engine.capture();
  sim::run_report report;
  report.steps.resize(6);
  bool zero_prefix = false, crossing = false;
  std::mt19937_64 rng(o.seed);
  // At least o.rounds rounds, and on until both shapes occurred: with a fresh seed each run,
  // 12 rounds alone missed a zero-prefix request about once in 80 runs.
  std::int32_t rounds = 0;
  for (std::int32_t round = 0; round < 240 && (round < o.rounds || !zero_prefix || !crossing);
       ++round, ++rounds) {
    const auto batch = static_cast<std::int32_t>(1 + rng() % 6);
    engine.run_round(round, batch, 6, true, report);
    draft_runtime& rt = engine.runtime();
    std::vector<std::int32_t> prefix(static_cast<std::size_t>(batch)),
        seqlen(static_cast<std::size_t>(batch) * 3);
    ex->copy_to_host(prefix.data(), rt.buffers().prefix_seqlen(), prefix.size() * 4);
    ex->copy_to_host(seqlen.data(), rt.buffers().expand_cache_seqlen(5), seqlen.size() * 4);
    for (const std::int32_t p : prefix) zero_prefix = zero_prefix || p == 0;
    for (const std::int32_t n : seqlen) crossing = crossing || n > 8;
  }
  EXPECT_TRUE(zero_prefix) << "no round had a request without whole prefix pages";
  EXPECT_TRUE(crossing) << "no branch crossed a page boundary";
  EXPECT_EQ(report.verified_rounds, rounds);
  EXPECT_LE(report.max_relative_error, 1e-5);
}

// A wrong prefix page-table entry (written after step 0 computed the table) must be caught by
// verification of step 1, naming round, step, bucket and row.
TEST_P(SimEngine, CorruptedPageTableEntryFailsVerification) {
  sim::sim_options o = small_options(11);
  o.verify = sim::sim_options::verify_mode::all;
  sim::sim_engine engine(*ex, o);
  engine.capture();
  engine.corrupt_prefix_table_at_round(2);
  sim::run_report report;
  report.steps.resize(4);
  engine.run_round(0, 6, 4, true, report);
  engine.run_round(1, 6, 4, true, report);
  try {
    engine.run_round(2, 6, 4, true, report);
    FAIL() << "verification should have failed";
  } catch (const sim::verification_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("round 2, step 1, bucket 6, row "), std::string::npos) << what;
  }
}

// Checked mode: a branch slot at the wrong in-page offset stops the run with a guard violation
// naming round, step, bucket and row.
TEST_P(SimEngine, CheckedModeGuardViolationNamesTheRound) {
  sim::sim_options o = small_options(5);
  o.checked = true;
  sim::sim_engine engine(*ex, o);
  engine.capture();
  engine.corrupt_branch_layout_at_round(1);
  sim::run_report report;
  report.steps.resize(4);
  engine.run_round(0, 4, 4, false, report);
  try {
    engine.run_round(1, 4, 4, false, report);
    FAIL() << "expected a guard violation";
  } catch (const guard_violation& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("round 1: expand.page_table (step 1, bucket 4, row 0)"), std::string::npos)
        << what;
  }
  engine.run_round(2, 4, 4, false, report);  // the engine goes on after the failed round
}

SPECGRAPH_INSTANTIATE_EXECUTORS(SimEngine);

// ---- the kernels on their own, host executor, hand-made page tables ------------------------
TEST(SimKernels, PagedAttentionAndMergeMatchDenseReference) {
  std::mt19937_64 rng(test_seed());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::int32_t heads = 2, dim = 8, ps = 4, slots = 64, hd = heads * dim;
  std::vector<float> k(static_cast<std::size_t>(slots * hd)), v(k.size()),
      q(static_cast<std::size_t>(2 * hd));
  for (auto* vec : {&k, &v, &q})
    for (auto& x : *vec) x = u(rng);
  // Row 0: pages 9, 3 (6 tokens, page crossing). Row 1: zero tokens.
  const std::vector<std::int32_t> table{9, 3, 0, 0, 0, 0}, seqlen{6, 0};
  std::vector<float> o(static_cast<std::size_t>(2 * hd), -1.0f), lse(4, -1.0f);
  sim::paged_attention_kernel::params p{};
  p.q = q.data();
  p.steps = 1;
  p.step = 0;
  p.heads = heads;
  p.head_dim = dim;
  p.scale = 0.5f;
  p.k_pool = k.data();
  p.v_pool = v.data();
  p.page_table = table.data();
  p.table_stride = 3;
  p.seqlen = seqlen.data();
  p.rows_per_table_row = 1;
  p.page_size = ps;
  p.o = o.data();
  p.lse = lse.data();
  host_run_rows<sim::paged_attention_kernel>(&p, 2 * heads);
  const std::int64_t token_slots[] = {36, 37, 38, 39, 12, 13};
  for (std::int32_t h = 0; h < heads; ++h) {
    double m = -1e300, l = 0;
    std::vector<double> scores;
    for (const std::int64_t s : token_slots) {
      double dot = 0;
      for (std::int32_t d = 0; d < dim; ++d)
        dot += static_cast<double>(q[static_cast<std::size_t>(h * dim + d)]) *
               k[static_cast<std::size_t>(s * hd + h * dim + d)];
      scores.push_back(dot * 0.5);
      m = std::max(m, dot * 0.5);
    }
    std::vector<double> ref(static_cast<std::size_t>(dim), 0.0);
    for (std::size_t i = 0; i < scores.size(); ++i) {
      const double w = std::exp(scores[i] - m);
      l += w;
      for (std::int32_t d = 0; d < dim; ++d)
        ref[static_cast<std::size_t>(d)] +=
            w * v[static_cast<std::size_t>(token_slots[i] * hd + h * dim + d)];
    }
    for (std::int32_t d = 0; d < dim; ++d) {
      EXPECT_NEAR(o[static_cast<std::size_t>(h * dim + d)], ref[static_cast<std::size_t>(d)] / l,
                  1e-5);
    }
    EXPECT_NEAR(lse[static_cast<std::size_t>(h)], m + std::log(l), 1e-5);
    // The empty row: o = 0, lse = -inf.
    EXPECT_EQ(o[static_cast<std::size_t>(hd + h * dim)], 0.0f);
    EXPECT_TRUE(std::isinf(lse[static_cast<std::size_t>(2 + h)]) &&
                lse[static_cast<std::size_t>(2 + h)] < 0);
  }
  // Merging with an empty pass returns the other pass exactly.
  std::vector<float> merged(static_cast<std::size_t>(hd)),
      merged_lse(static_cast<std::size_t>(heads));
  sim::lse_merge_kernel::params mp{};
  mp.o1 = o.data() + hd;  // the empty row
  mp.lse1 = lse.data() + heads;
  mp.o2 = o.data();
  mp.lse2 = lse.data();
  mp.heads = heads;
  mp.head_dim = dim;
  mp.out = merged.data();
  mp.out_lse = merged_lse.data();
  host_run_rows<sim::lse_merge_kernel>(&mp, heads);
  for (std::int32_t i = 0; i < hd; ++i)
    EXPECT_FLOAT_EQ(merged[static_cast<std::size_t>(i)], o[static_cast<std::size_t>(i)]);
  for (std::int32_t h = 0; h < heads; ++h)
    EXPECT_FLOAT_EQ(merged_lse[static_cast<std::size_t>(h)], lse[static_cast<std::size_t>(h)]);
}

// ---- the command -------------------------------------------------------------------------
// Padded rows write no K/V (issue 10): they all point at dummy slot 0, and a write by each of
// them would race on it. Rows of real requests write their slot.
TEST(SimKernels, KvWriteSkipsPaddedRows) {
  const std::int32_t real_batch = 1, topk = 2, hd = 3;
  const std::vector<std::int64_t> cache_loc{2, 3, 0, 0};  // rows 2, 3: padding on slot 0
  std::vector<float> k_src(4 * hd), v_src(4 * hd), k_pool(4 * hd, -1.0f), v_pool(4 * hd, -1.0f);
  for (std::size_t i = 0; i < k_src.size(); ++i) {
    k_src[i] = static_cast<float>(i);
    v_src[i] = static_cast<float>(100 + i);
  }
  sim::kv_write_kernel::params p{};
  p.real_batch = &real_batch;
  p.topk = topk;
  p.cache_loc = cache_loc.data();
  p.cache_loc_stride = 1;
  p.step = 0;
  p.steps = 1;
  p.head_elems = hd;
  p.k_src = k_src.data();
  p.v_src = v_src.data();
  p.k_pool = k_pool.data();
  p.v_pool = v_pool.data();
  host_run_rows<sim::kv_write_kernel>(&p, 4);
  for (int i = 0; i < hd; ++i) {
    EXPECT_EQ(k_pool[static_cast<std::size_t>(i)], -1.0f) << "a padded row wrote slot 0";
    EXPECT_EQ(v_pool[static_cast<std::size_t>(i)], -1.0f) << "a padded row wrote slot 0";
    EXPECT_EQ(k_pool[static_cast<std::size_t>(2 * hd + i)], static_cast<float>(i));
    EXPECT_EQ(k_pool[static_cast<std::size_t>(3 * hd + i)], static_cast<float>(hd + i));
  }
}

TEST(RunCommand, SmallRunPrintsAPassingReportAndJson) {
  const std::string json_path = ::testing::TempDir() + "specgraph_run_test.json";
  std::ostringstream out, err;
  const int rc = tools::run_command(
      {"--executor",  "host", "--max-batch", "5", "--topk",     "2",      "--steps",       "3",
       "--page-size", "4",    "--heads",     "2", "--head-dim", "8",      "--max-context", "40",
       "--rounds",    "12",   "--seed",      "3", "--json",     json_path},
      out, err);
  ASSERT_EQ(rc, 0) << err.str();
  EXPECT_NE(out.str().find("verification: 2 rounds"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("PASSED"), std::string::npos);
  std::ifstream in(json_path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const tools::json doc = tools::json::parse(text);
  EXPECT_EQ(tools::as_int(doc.members.at("rounds"), "rounds"), 12);
  EXPECT_EQ(tools::as_int(doc.members.at("replays"), "replays"), 36);
  EXPECT_EQ(doc.members.at("steps").items.size(), 3u);
  EXPECT_EQ(tools::as_int(doc.members.at("capture").members.at("graphs"), "graphs"), 15);
  EXPECT_TRUE(doc.members.at("verification").members.at("passed").boolean);
}

// "--checked=0" turned checking on (issue 11): it means off.
TEST(RunCommand, CheckedFlagTakesAnExplicitBoolean) {
  std::ostringstream out, err;
  const std::string json_path = (std::filesystem::temp_directory_path() /
                                 ("specgraph_checked_" + std::to_string(::getpid()) + ".json"))
                                    .string();
  for (const auto& [flag, want] : {std::pair<std::string, bool>{"--checked=0", false},
                                   {"--checked=on", true},
                                   {"--checked", true}}) {
    ASSERT_EQ(
        tools::run_command({"--executor", "host", "--rounds", "2", "--max-batch", "2",
                            "--max-context", "32", "--verify", "none", flag, "--json", json_path},
                           out, err),
        0)
        << err.str();
    std::ifstream in(json_path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const tools::json doc = tools::json::parse(text);
    EXPECT_EQ(doc.members.at("config").members.at("checked").boolean, want) << flag;
  }
  std::filesystem::remove(json_path);
}

// Every byte the simulated engine allocates is defined before the first round: a round writes
// only its bucket's rows and the steps it runs, and verification copies whole steps back, so an
// output buffer left uninitialised is a read of never-written memory (compute-sanitizer
// initcheck reports each).
TEST(SimEngineMemory, EveryAllocationIsWrittenBeforeTheFirstRound) {
  write_tracking_executor ex(make_host_executor());
  sim::sim_engine engine(ex, small_options(3));
  EXPECT_EQ(ex.unwritten(), std::vector<std::string>{});
}

TEST(RunCommand, BadFlagsAreOneLineNamingTheFlagWithExitCode2) {
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"--topk", "0"}, "--topk: 0 is outside [1, 64]"},
      {{"--steps", "x"}, "--steps: 'x' is not an integer"},
      {{"--depth", "6"}, "--depth: 6 is outside [1, 5]"},
      {{"--executor", "tpu"}, "--executor: 'tpu' is not one of host, cuda, auto"},
      {{"--min-batch", "9", "--max-batch", "4"}, "--min-batch: 9 exceeds --max-batch 4"},
      {{"--verify", "some"}, "--verify: 'some' is not one of all, sample, none"},
      {{"--rounds"}, "--rounds: missing value"},
      {{"--frobnicate", "1"}, "unknown flag '--frobnicate'"},
      {{"--max-context", "1048576", "--max-batch", "512"},
       "--max-context: the simulated run would need"},
      // Regressions (issue 11): a boolean flag parses strictly; echoed text is escaped.
      {{"--checked=maybe"}, "--checked: 'maybe' is not one of 1, true, on, 0, false, off"},
      {{"--executor", "tp\nu"}, "--executor: 'tp\\x0au' is not one of"},
      {{"--json", "/nonexistent-specgraph-dir/run.json"},
       "--json: cannot write '/nonexistent-specgraph-dir/run.json'"},
      {{"--dump-graphs", "/proc/specgraph-graphs"}, "--dump-graphs: cannot write into"},
  };
  for (const auto& c : cases) {
    std::ostringstream out, err;
    EXPECT_EQ(tools::run_command(c.args, out, err), 2) << c.message;
    EXPECT_NE(err.str().find(c.message), std::string::npos) << err.str();
    EXPECT_EQ(err.str().find('\n'), err.str().size() - 1) << "one line: " << err.str();
  }
}

}  // namespace
}  // namespace specgraph::testing
