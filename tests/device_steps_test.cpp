// The device step counter and the device-decided round depth (docs/device-rounds.md), on
// every executor: one graph per bucket replayed step after step gives the same tables and
// forward inputs as the independent model; the seed bug is refused exactly as in per-step mode;
// a round graph whose WHILE node runs while a real row is confident runs exactly the depth the
// host expects; and the host emulation refuses, inside a conditional body, what CUDA refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/metadata.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/runtime.hpp"
#include "testing/engine_probe.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

draft_config counter_config(std::int32_t page_size, bool device_depth = false) {
  draft_config c;
  c.max_batch = 12;
  c.topk = 3;
  c.num_steps = 4;
  c.page_size = page_size;
  c.max_context_len = 64;
  c.pool_rows = 16;
  c.kv_slots = 1 << 20;
  c.device_steps = true;
  c.device_depth = device_depth;
  return c;
}

// The step-s probe outputs (what the forward read) for every step run, the last step's table
// and cache_seqlen, and the prefix tables equal the model. The counter ends at the depth run.
void expect_counter_round_matches_model(sim_engine& eng, const model_round& want,
                                        std::int32_t depth) {
  const draft_buffers& b = eng.rt().buffers();
  const std::size_t rows = static_cast<std::size_t>(want.bucket) * 3;
  const std::size_t stride = 5;  // num_steps + 1
  EXPECT_EQ(eng.read(b.device_step(), 1)[0], depth) << "the counter ends at the depth run";
  EXPECT_EQ(eng.read(b.prefix_page_table(), want.prefix_table.size()), want.prefix_table);
  EXPECT_EQ(eng.read(b.last_page_len(), want.last_page_len.size()), want.last_page_len);
  for (std::int32_t s = 0; s < depth; ++s) {
    EXPECT_EQ(eng.read(eng.probe_out(s), rows), want.probe[static_cast<std::size_t>(s)])
        << "forward inputs, step " << s;
  }
  // The shared table holds the last step's rows in its first depth + 1 columns.
  const auto last = static_cast<std::size_t>(depth - 1);
  const auto table = eng.read(b.expand_page_table(0), rows * stride);
  for (std::size_t row = 0; row < rows; ++row) {
    for (std::size_t col = 0; col <= last + 1; ++col) {
      ASSERT_EQ(table[row * stride + col], want.expand_table[last][row * (last + 2) + col])
          << "row " << row << " column " << col;
    }
  }
  EXPECT_EQ(eng.read(b.expand_cache_seqlen(0), rows), want.cache_seqlen[last]);
}

class DeviceSteps : public ExecutorTest {};

TEST_P(DeviceSteps, OneGraphPerBucketMatchesTheModelAtEveryStep) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const std::int32_t ps : {1, 4, 16}) {
    SCOPED_TRACE("page_size " + std::to_string(ps));
    sim_engine eng(*ex, counter_config(ps), rng);
    const capture_report report = eng.rt().capture();
    EXPECT_EQ(report.graphs, static_cast<std::int32_t>(eng.rt().plan().config.buckets.size()))
        << "one graph per bucket";
    for (int round = 0; round < 24; ++round) {
      const auto batch = round % 2 == 0 ? static_cast<std::int32_t>(9 + rng() % 4)
                                        : static_cast<std::int32_t>(1 + rng() % 4);
      const auto depth = static_cast<std::int32_t>(1 + rng() % 4);
      SCOPED_TRACE("round " + std::to_string(round) + ", batch " + std::to_string(batch) +
                   ", depth " + std::to_string(depth));
      const host_round r = eng.random_round(rng, batch);
      eng.poison();
      if (round % 3 == 2) {
        dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
        dvec<std::int64_t> slots(*ex, r.out_cache_loc);
        eng.rt().stage_device({r.batch, pool.data(), seq.data(), slots.data()});
        ex->synchronize();
      } else {
        eng.rt().stage(r.inputs());
      }
      if (round % 3 == 1) {
        for (std::int32_t s = 0; s < depth; ++s) eng.rt().run_eager(s);
      } else {
        eng.rt().run_round(depth);
      }
      expect_counter_round_matches_model(eng, eng.model_of(r, depth), depth);
      for (const guard_word& g : eng.rt().read_guards()) EXPECT_EQ(g.violations, 0) << describe(g);
      if (HasFailure()) return;
    }
  }
}

// The round setup is in the one graph but runs at step 0 only: rewriting the engine's
// req_to_token after step 0 must not reach the round's prefix tables (they are step-invariant,
// and a setup rerun at every step would also recount its guard violations). Fails with the
// mutation counter-setup-every-step.
TEST_P(DeviceSteps, TheRoundSetupRunsAtStepZeroOnly) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  sim_engine eng(*ex, counter_config(4), rng);
  eng.rt().capture();
  for (int round = 0; round < 6; ++round) {
    const auto depth = static_cast<std::int32_t>(2 + rng() % 3);
    const host_round r = eng.random_round(rng, static_cast<std::int32_t>(1 + rng() % 12));
    eng.poison();
    eng.rt().stage(r.inputs());
    eng.rt().run_eager(0);
    eng.overwrite_req_to_token(0x11);  // other pages (and slots past kv_slots)
    for (std::int32_t s = 1; s < depth; ++s) eng.rt().run_eager(s);
    ex->synchronize();
    expect_counter_round_matches_model(eng, eng.model_of(r, depth), depth);
    for (const guard_word& g : eng.rt().read_guards()) EXPECT_EQ(g.violations, 0) << describe(g);
    eng.restore_req_to_token();
    if (HasFailure()) return;
  }
}

// The seed bug through the device-counter path: the full num_steps-wide row read at step 0 into
// the shared table is refused and reported at column 2, capacity 2, as in per-step mode.
TEST_P(DeviceSteps, TheSeedBugIsRefusedAtColumnTwoCapacityTwo) {
  const std::vector<std::int64_t> slots{1, 2, 3, 4, 5};
  dvec<std::int64_t> cache_loc(*ex, slots);
  dvec<std::int32_t> lpl(*ex, std::vector<std::int32_t>{1});
  dvec<std::int32_t> step(*ex, std::vector<std::int32_t>{0});
  dvec<std::int32_t> table(*ex, 6, -7), seqlen(*ex, 1, -7);
  dvec<guard_word> guards(*ex, 5, guard_word{});
  expand_params p;
  p.cache_loc = cache_loc.data();
  p.cache_loc_stride = 5;
  p.slots_read = 5;  // the bug: the whole row instead of d = 1 slot
  p.last_page_len = lpl.data();
  p.batch = 1;
  p.topk = 1;
  p.page_size = 2;
  p.page_table = table.data();
  p.page_table_stride = 6;  // num_steps + 1
  p.cache_seqlen = seqlen.data();
  p.guard = guards.data();
  p.device_step = step.data();
  p.device_steps = 5;
  launch_expand_page_table(*ex, p);
  const guard_word g = guards.download()[0];
  EXPECT_EQ(g.violations, 1);
  EXPECT_EQ(static_cast<violation_kind>(g.kind), violation_kind::capacity);
  EXPECT_EQ(g.row, 0);
  EXPECT_EQ(g.column, 2);
  EXPECT_EQ(g.capacity, 2);
  EXPECT_EQ(g.value, 2);
  EXPECT_EQ(table.download(), (std::vector<std::int32_t>{0, 1, -7, -7, -7, -7}))
      << "columns past the step's capacity are not the step's: never written";
  EXPECT_EQ(seqlen.download()[0], 2);
}

// Conditional rounds. The forward writes each row's confidence for the step it is at from a
// per-round table conf[step][row] (testing::confidence_probe_kernel); the host works out the
// depth the device must choose.
std::int32_t expected_depth(const std::vector<float>& conf, std::int64_t rows,
                            std::int32_t real_rows, std::int32_t max_depth, float threshold) {
  std::int32_t depth = 1;  // the body always runs once
  while (depth < max_depth) {
    const float* step = conf.data() + static_cast<std::size_t>((depth - 1) * rows);
    if (!std::any_of(step, step + real_rows, [&](float c) { return c >= threshold; })) break;
    ++depth;
  }
  return depth;
}

// A sim_engine in device_depth mode whose forward is the probe plus the confidence signal.
struct confidence_engine {
  confidence_engine(executor& ex, std::mt19937_64& rng)
      : eng(ex, counter_config(4, /*device_depth=*/true), rng),
        rows(eng.rt().plan().max_rows()),
        source(ex, static_cast<std::size_t>(4 * rows), 0.0f) {
    eng.rt().set_forward([this](const step_view& v) {
      eng.probe_forward(v);
      confidence_probe_kernel::params p{source.data(), rows, v.device_step, v.confidence,
                                        eng.rt().plan().config.num_steps};
      v.ex->launch(make_kernel_launch<confidence_probe_kernel>(p, rows, confidence_probe_cuda()));
    });
  }
  sim_engine eng;
  std::int64_t rows;
  dvec<float> source;
};

// 40 rounds of random batches and confidence scenarios: stage, `run_round()` (one launch), then
// the depth run equals the host's expectation and every table equals the model at that depth.
template <typename RunRound>
void expect_device_decided_depths(executor& ex, confidence_engine& ce, std::mt19937_64& rng,
                                  RunRound run_round) {
  sim_engine& eng = ce.eng;
  const std::int64_t rows = ce.rows;
  for (int round = 0; round < 40; ++round) {
    const auto batch = static_cast<std::int32_t>(1 + rng() % 12);
    const host_round r = eng.random_round(rng, batch);
    std::vector<float> conf(static_cast<std::size_t>(4 * rows));
    const int scenario = round % 4;
    for (std::size_t i = 0; i < conf.size(); ++i) {
      const auto row = static_cast<std::int64_t>(i) % rows;
      const bool padded = row >= static_cast<std::int64_t>(batch) * 3;
      // 0: random; 1: every real row stops after step 0; 2: only padded rows are confident;
      // 3: everyone confident (max_depth must still stop the round).
      conf[i] = scenario == 0   ? static_cast<float>(rng() % 1000) / 1000.0f
                : scenario == 1 ? (padded ? 1.0f : 0.0f)
                : scenario == 2 ? (padded ? 1.0f : 0.1f)
                                : 1.0f;
    }
    ex.copy_to_device(ce.source.data(), conf.data(), conf.size() * sizeof(float));
    round_inputs in = r.inputs();
    in.max_depth = static_cast<std::int32_t>(1 + rng() % 4);
    in.min_confidence = scenario == 0 ? 0.97f : 0.5f;
    const std::int32_t want =
        expected_depth(conf, rows, batch * 3, in.max_depth, in.min_confidence);
    SCOPED_TRACE("round " + std::to_string(round) + ", scenario " + std::to_string(scenario) +
                 ", batch " + std::to_string(batch) + ", max_depth " +
                 std::to_string(in.max_depth) + ", expected depth " + std::to_string(want));
    eng.poison();
    eng.rt().stage(in);
    const std::int64_t launches = ex.counters().graph_launches;
    run_round(eng.rt().staged_bucket());
    EXPECT_EQ(ex.counters().graph_launches - launches, 1) << "one launch per round";
    const std::int32_t depth = eng.rt().read_round_depth();
    EXPECT_EQ(depth, want);
    EXPECT_LE(depth, in.max_depth);
    if (scenario == 1 || scenario == 2) {
      EXPECT_EQ(depth, 1);
    }
    if (scenario == 3) {
      EXPECT_EQ(depth, in.max_depth);
    }
    expect_counter_round_matches_model(eng, eng.model_of(r, depth), depth);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST_P(DeviceSteps, TheDeviceDecidesTheDepthFromTheConfidenceSignal) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  confidence_engine ce(*ex, rng);
  const capture_report report = ce.eng.rt().capture();
  EXPECT_EQ(report.graphs, 2 * static_cast<std::int32_t>(ce.eng.rt().plan().config.buckets.size()));
  expect_device_decided_depths(*ex, ce, rng,
                               [&](std::int32_t) { ce.eng.rt().run_round_on_device(); });
}

// An engine that captures with its own tooling (torch.cuda.graph cannot record a WHILE node)
// captures the step body itself; capture_device_depth_round wraps it (record_graph) into the
// round. Here the body is the runtime's own graph(B) of device-step mode, captured and never
// instantiated by the runtime: the composed rounds must equal the runtime's own, depth for depth.
TEST_P(DeviceSteps, AnEngineCapturedStepBodyComposesIntoTheDeviceDecidedRound) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  confidence_engine ce(*ex, rng);
  draft_runtime& rt = ce.eng.rt();
  std::vector<std::unique_ptr<graph_exec>> rounds;
  for (const std::int32_t bucket : rt.plan().config.buckets) {
    const std::unique_ptr<graph> body = rt.capture_graph(bucket, 0);
    const std::unique_ptr<graph> round =
        capture_device_depth_round(*ex, rt.buffers(), bucket, *body);
    rounds.push_back(ex->instantiate(*round));
  }
  EXPECT_FALSE(ex->capturing());
  const auto& buckets = rt.plan().config.buckets;
  expect_device_decided_depths(*ex, ce, rng, [&](std::int32_t bucket) {
    const auto i = std::find(buckets.begin(), buckets.end(), bucket) - buckets.begin();
    ex->launch_graph(*rounds[static_cast<std::size_t>(i)]);
  });

  const std::unique_ptr<graph> body = rt.capture_graph(buckets[0], 0);
  expect_invalid([&] { (void)capture_device_depth_round(*ex, rt.buffers(), 13, *body); }, "bucket",
                 "13");
  sim_engine per_step(*ex, counter_config(4), rng);
  expect_invalid(
      [&] { (void)capture_device_depth_round(*ex, per_step.rt().buffers(), buckets[0], *body); },
      "device_depth", "false");
  ex->begin_capture();
  EXPECT_THROW((void)capture_device_depth_round(*ex, rt.buffers(), buckets[0], *body),
               capture_violation)
      << "a capture of its own, not inside another";
  ex->abort_capture();
}

TEST_P(DeviceSteps, MisuseIsNamed) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, counter_config(4), rng);
  eng.rt().capture();
  eng.rt().stage(eng.random_round(rng, 3).inputs());
  eng.rt().replay(0);
  expect_invalid([&] { eng.rt().replay(0); }, "step", "0 replayed out of order");
  expect_invalid([&] { eng.rt().run_round_on_device(); }, "device_depth", "false");
  expect_invalid([&] { eng.rt().set_forward(1, [](const step_view&) {}); }, "step",
                 "a per-step forward needs per-step graphs");
  round_inputs bad = eng.random_round(rng, 3).inputs();
  bad.max_depth = 5;
  expect_invalid([&] { eng.rt().stage(bad); }, "max_depth", "5 exceeds num_steps 4");
  draft_config c = counter_config(4);
  c.device_steps = false;
  c.device_depth = true;
  expect_invalid([&] { (void)make_plan(c); }, "device_depth", "requires device_steps");
  c = counter_config(4);
  c.round_graphs = true;
  expect_invalid([&] { (void)make_plan(c); }, "round_graphs", "cannot be combined");
}

SPECGRAPH_INSTANTIATE_EXECUTORS(DeviceSteps);

// The honest host executor refuses inside a conditional body what CUDA refuses there, and its
// WHILE node runs the body while a kernel keeps the condition set.
struct count_down_kernel {
  struct params {
    std::int32_t* counter;
    conditional_handle handle;
  };
  static constexpr const char* name = "count_down";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    *p.counter -= 1;
    set_condition(p.handle, *p.counter > 0);
  }
};

TEST(ConditionalBody, RunsWhileSetAndRefusesWhatCudaRefuses) {
  auto ex = make_host_executor();
  device_buffer counter(*ex, sizeof(std::int32_t));
  event_handle e(*ex);
  ex->begin_capture();
  const conditional_handle h = ex->begin_while(true);
  count_down_kernel::params p{counter.as<std::int32_t>(), h};
  ex->launch(make_kernel_launch<count_down_kernel>(p, 1, nullptr));
  EXPECT_THROW(ex->record_event(e.get()), capture_violation);
  EXPECT_THROW(ex->wait_event(e.get()), capture_violation);
  EXPECT_THROW((void)ex->allocate(8), capture_violation);
  EXPECT_THROW((void)ex->begin_while(true), capture_violation) << "no nesting";
  ex->end_while();
  auto exec = ex->instantiate(*ex->end_capture());
  for (const std::int32_t start : {5, 1}) {
    *counter.as<std::int32_t>() = start;
    ex->launch_graph(*exec);
    EXPECT_EQ(*counter.as<std::int32_t>(), 0) << "the body ran " << start << " times";
  }
  ex->begin_capture();
  (void)ex->begin_while(false);
  EXPECT_THROW((void)ex->end_capture(), capture_violation) << "end_capture inside a body";
  EXPECT_FALSE(ex->capturing());

  // A graph recorded into a body is checked as a whole: an event node inside it is refused.
  ex->begin_capture();
  ex->record_event(e.get(), event_scope::external);  // an event record node
  const std::unique_ptr<graph> with_event = ex->end_capture();
  EXPECT_THROW(ex->record_graph(*with_event), capture_violation) << "outside capture";
  ex->begin_capture();
  ex->record_graph(*with_event);  // allowed outside a body
  (void)ex->begin_while(true);
  EXPECT_THROW(ex->record_graph(*with_event), capture_violation);
  ex->abort_capture();
}

}  // namespace
}  // namespace specgraph::testing
