// The device-round graph with the depth decided on the device (config.device_steps +
// device_depth; docs/round-graphs.md section 6): the draft steps are the round graph's WHILE node
// over the step body, started afresh in every launch. A draft forward writes a confidence per
// query row hashed from its request's committed seq_len (testing/round_forward.hpp), so the depth
// changes from round to round; K = 8 rounds as K launches back to back, with no host work in
// between: (1) each round's depth (the device step counter, logged by the extend forward) and the
// draft forwards run equal an independent host computation of the rule (continue while any real
// row is confident, at most max_depth and num_steps steps); (2) the accepted paths, commits and
// the next rounds' state equal the chained references (tests/round_chain.hpp); (3) exactly K
// graph launches, no sync, no copy, no eager kernel. device_steps without device_depth refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/runtime.hpp"
#include "testing/device_round_driver.hpp"
#include "tests/device_round_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t K = 8;

class DeviceRoundDepth : public ExecutorTest {};

draft_config depth_config(const dr_config& d) {
  draft_config c = dr_draft_config(d);
  c.device_steps = true;
  c.device_depth = true;
  return c;
}

// The rule, written here: a round runs step 0, then another step while fewer than its limit
// (max_depth, 0: num_steps; never past num_steps) have run and some real row's confidence at the
// step just run reaches min_confidence. `seq` is the round's staged seq_len per row.
std::int32_t expected_depth(const draft_config& c, const dr_start& s,
                            const std::vector<std::int32_t>& seq, std::int32_t max_depth,
                            float min_confidence) {
  const std::int32_t limit = max_depth > 0 ? std::min(max_depth, c.num_steps) : c.num_steps;
  std::int32_t depth = 0;
  for (;;) {
    const std::int32_t step = depth++;
    if (depth >= limit) return depth;
    bool confident = false;
    for (std::int32_t r = 0; r < s.real; ++r) {
      for (std::int32_t b = 0; b < c.topk; ++b) {
        const float conf = toy_confidence(seq[static_cast<std::size_t>(r)],
                                          s.pool[static_cast<std::size_t>(r)], step, b);
        confident = confident || conf >= min_confidence;
      }
    }
    if (!confident) return depth;
  }
}

// The draft forward (the confidence, counting its runs) and the depth logger (in the extend
// forward, after the draft steps) on a rig, before its capture.
struct depth_probe {
  dvec<std::int32_t> round, bodies, log;
  depth_probe(executor& ex, dr_rig& a) : round(ex, 1, 0), bodies(ex, 1, 0), log(ex, 2 * K, -1) {
    const draft_config& c = a.rt.plan().config;
    const std::int32_t topk = c.topk, steps = c.num_steps;
    a.rt.set_forward([this, topk, steps](const step_view& v) {
      toy_confidence_kernel::params k{
          v.seq_len, v.req_pool_index, v.device_step, v.confidence, bodies.data(), topk, steps};
      v.ex->launch(make_kernel_launch<toy_confidence_kernel>(k, v.rows, toy_confidence_cuda()));
    });
    const std::int32_t* step = a.rt.buffers().device_step();
    a.extend_also = [this, step](const extend_view& v) {
      depth_log_kernel::params k{round.data(), K, step, bodies.data(), log.data()};
      v.ex->launch(make_kernel_launch<depth_log_kernel>(k, 1, depth_log_cuda()));
    };
  }
};

// Every configuration, fresh seeds, real batch 1..4, max_depth 0 / 2 / num_steps in turn, three
// thresholds drawn: (1), (2), (3) above; depths 1 .. num_steps all occur, max_depth 2 cuts rounds.
TEST_P(DeviceRoundDepth, EachRoundsDepthFollowsTheRuleAndTheStateEqualsTheReferences) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::int32_t depths[] = {0, 2, 3};
  const float thresholds[] = {0.5f, 0.75f, 0.875f};
  std::vector<std::int64_t> seen(4, 0);
  std::int64_t cut = 0;
  for (const dr_config& d : dr_configs) {
    SCOPED_TRACE(d.name);
    const draft_config cfg = depth_config(d);
    ASSERT_EQ(cfg.num_steps, 3);
    const plan p = make_plan(cfg);
    for (int i = 0; i < property_cases(12); ++i) {
      const std::int32_t real = 1 + static_cast<std::int32_t>(i % 4);
      const std::int32_t max_depth = depths[i % 3];
      const float threshold = thresholds[rng() % 3];
      SCOPED_TRACE("case " + std::to_string(i) + ", real batch " + std::to_string(real) +
                   ", max_depth " + std::to_string(max_depth) + ", min_confidence " +
                   std::to_string(threshold));
      const dr_start s = make_start(p, real, K, rng);
      const dr_record want = run_reference(p, s, K);
      dr_rig a(*ex, cfg, s);
      a.max_depth = max_depth;
      a.min_confidence = threshold;
      depth_probe probe(*ex, a);
      executor_counters during;
      const int mode = i % 3;
      const dr_record got = a.run_device(K, mode, &during);
      EXPECT_EQ(during.graph_launches, K);
      EXPECT_EQ(during.synchronizations, 0);
      EXPECT_EQ(during.copies_to_host, 0);
      EXPECT_EQ(during.copies_to_device, mode == 2 ? K - 1 : 0) << "only the ring's tail";
      EXPECT_EQ(during.kernel_launches, 0);
      expect_same(got, want, K, "device rounds with device_depth against the references");
      const std::vector<std::int32_t> log = probe.log.download();
      EXPECT_EQ(probe.round.download()[0], K);
      std::int32_t last = 0;
      for (std::int32_t k = 0; k < K; ++k) {
        SCOPED_TRACE("round " + std::to_string(k));
        last = expected_depth(cfg, s, want.extend_seq_len[static_cast<std::size_t>(k)], max_depth,
                              threshold);
        EXPECT_EQ(log[static_cast<std::size_t>(2 * k)], last) << "the device step counter";
        EXPECT_EQ(log[static_cast<std::size_t>(2 * k + 1)], last) << "draft forwards run";
        ++seen[static_cast<std::size_t>(last)];
        cut += max_depth == 2 && last == 2 &&
               expected_depth(cfg, s, want.extend_seq_len[static_cast<std::size_t>(k)], 0,
                              threshold) == 3;
      }
      EXPECT_EQ(a.rt.read_round_depth(), last) << "the last round's depth stays readable";
      const std::vector<guard_word> words = a.rt.read_round_guards();
      for (std::size_t w = 0; w < words.size(); ++w) {
        EXPECT_EQ(words[w].violations, 0)
            << guard_site_of(p, static_cast<std::int32_t>(w)).buffer << ": " << describe(words[w]);
      }
    }
  }
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[2], 0);
  EXPECT_GT(seen[3], 0);
  EXPECT_GT(cut, 0) << "no round was cut by max_depth 2";
}

// Restaged with other control words after K launches: the next K rounds follow the new
// max_depth and min_confidence (the graph bakes neither in).
TEST_P(DeviceRoundDepth, RestagingChangesTheControlWordsTheLaunchesRead) {
  std::mt19937_64 rng(test_seed());
  const draft_config cfg = depth_config(dr_configs[1]);
  const plan p = make_plan(cfg);
  const dr_start s = make_start(p, 3, K, rng);
  dr_rig a(*ex, cfg, s);
  depth_probe probe(*ex, a);
  a.max_depth = 1;
  (void)a.run_device(2, 0);
  a.max_depth = 0;
  a.min_confidence = 2.0f;  // no confidence reaches it: every round stops after step 0 ...
  (void)a.run_device(2, 0);
  a.min_confidence = -1.0f;  // ... every row reaches this: every round runs num_steps
  (void)a.run_device(2, 0);
  EXPECT_EQ(probe.log.download(),
            (std::vector<std::int32_t>{1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, -1, -1, -1, -1}));
}

// Checked mode (the draft metadata's layout checks on, inside every body the WHILE node runs):
// a chain at page size 4 (in-page offsets that the checks test; the rig's first slots follow
// the layout there, and no stop token, so no finished row idles on unallocated slots), K
// launches with device_depth keep every word of the summary clean and each round's depth within
// [1, num_steps]; junk in the padding row's pool row is raised after the launch, naming the
// prefix table and the row.
TEST_P(DeviceRoundDepth, CheckedModeKeepsEveryDeviceStepCleanAndRaisesJunk) {
  std::mt19937_64 rng(test_seed());
  const dr_config chain4{"chain ps 4", 1, 3, 4, 4};
  draft_config cfg = depth_config(chain4);
  cfg.checked = true;
  const plan p = make_plan(cfg);
  dr_start s = make_start(p, 3, K, rng);
  {
    dr_rig a(*ex, cfg, s, /*stop=*/-1);
    a.min_confidence = 0.5f;
    depth_probe probe(*ex, a);
    (void)a.run_device(K, 1);  // K launch_device_round calls: each one checked
    const std::vector<guard_word> words = a.rt.read_round_guards();
    for (std::size_t w = 0; w < words.size(); ++w) {
      EXPECT_EQ(words[w].violations, 0)
          << guard_site_of(p, static_cast<std::int32_t>(w)).buffer << ": " << describe(words[w]);
    }
    const std::vector<std::int32_t> log = probe.log.download();
    for (std::int32_t k = 0; k < K; ++k) {
      EXPECT_GE(log[static_cast<std::size_t>(2 * k)], 1);
      EXPECT_LE(log[static_cast<std::size_t>(2 * k)], cfg.num_steps);
    }
  }
  s.req_to_token[0] = -9;
  dr_rig a(*ex, cfg, s, /*stop=*/-1);
  depth_probe probe(*ex, a);
  a.rt.bind_round_ring(a.in);
  (void)a.rt.capture();
  a.stage_start();
  try {
    a.rt.launch_device_round();
    ADD_FAILURE() << "checked mode must raise the summary";
  } catch (const guard_violation& e) {
    EXPECT_NE(std::string(e.what()).find("prefix.page_table"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("row 3"), std::string::npos) << e.what();
  }
}

// device_steps without device_depth: no device-round graph can hold it; refused by name with
// the fix, before anything is bound or launched.
TEST_P(DeviceRoundDepth, DeviceStepsWithoutDeviceDepthIsRefusedByName) {
  std::mt19937_64 rng(7);
  draft_config cfg = depth_config(dr_configs[0]);
  cfg.device_depth = false;
  const plan p = make_plan(cfg);
  const dr_start s = make_start(p, 2, K, rng);
  dr_rig a(*ex, cfg, s);
  const std::int64_t launches = ex->counters().graph_launches;
  expect_invalid([&] { a.rt.bind_round_ring(a.in); }, "device_depth", "set device_depth");
  EXPECT_FALSE(a.rt.round_ring_bound());
  a.stage_start();
  expect_invalid([&] { a.rt.launch_device_round(); }, "device_depth", "device_steps off");
  expect_invalid([&] { a.rt.launch_device_rounds(K); }, "device_depth");
  EXPECT_EQ(ex->counters().graph_launches, launches);
}

SPECGRAPH_INSTANTIATE_EXECUTORS(DeviceRoundDepth);

}  // namespace
}  // namespace specgraph::testing
