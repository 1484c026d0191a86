// draft_runtime's capture side, on every executor: capture failures named by (bucket, step) and
// recovered, re-capture updating graphs in place, whole-round graphs, DOT files, a forward that
// stages sparse indices in the graph, the refusal after a CUDA error (injected by a wrapping
// executor, so it runs everywhere) and the arena limit. Results are compared with the
// independent model (testing/reference_round.hpp).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/forwarding_executor.hpp"
#include "specgraph/metadata.hpp"
#include "specgraph/runtime.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

draft_config small_config(std::int32_t page_size = 4) {
  draft_config c;
  c.max_batch = 12;
  c.topk = 3;
  c.num_steps = 4;
  c.page_size = page_size;
  c.max_context_len = 64;
  c.pool_rows = 16;
  c.kv_slots = 1 << 20;
  return c;
}

class Runtime : public ExecutorTest {};

TEST_P(Runtime, ForwardFailureDuringCaptureNamesBucketAndStepAndRecovers) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.buckets = {4, 12};
  sim_engine eng(*ex, c, rng);
  auto expect_capture_failure = [&](draft_runtime::forward_fn f, std::int32_t bucket,
                                    std::int32_t step, const std::string& detail) {
    eng.rt().set_forward(step, std::move(f));
    try {
      eng.rt().capture();
      ADD_FAILURE() << "capture should have failed";
    } catch (const capture_failed& e) {
      EXPECT_EQ(e.bucket(), bucket);
      EXPECT_EQ(e.step(), step);
      const std::string what = e.what();
      EXPECT_NE(what.find("bucket " + std::to_string(bucket) + ", step " + std::to_string(step)),
                std::string::npos)
          << what;
      EXPECT_NE(what.find(detail), std::string::npos) << what;
    }
    EXPECT_FALSE(ex->capturing());
    eng.rt().set_forward(step, [&eng](const step_view& v) { eng.probe_forward(v); });
  };
  // Largest bucket first: a failure at step 2 is met in bucket 12.
  expect_capture_failure([](const step_view&) { throw std::runtime_error("engine bug"); }, 12, 2,
                         "engine bug");
  expect_capture_failure([](const step_view& v) { v.ex->synchronize(); }, 12, 1, "synchronize");
  expect_capture_failure([](const step_view& v) { (void)v.ex->allocate(64); }, 12, 3, "allocate");
  expect_capture_failure(
      [](const step_view& v) {
        std::int32_t x = 0;
        v.ex->copy_to_host(&x, v.real_batch, sizeof x);
      },
      12, 0, "copy_to_host");
  // Every forward fixed again: capture succeeds and rounds replay correctly.
  eng.rt().capture();
  const host_round r = eng.random_round(rng, 9);
  eng.poison();
  eng.rt().stage(r.inputs());
  eng.rt().run_round(4);
  expect_matches_model(eng, eng.model_of(r, 4), 4);
}

// config.round_graphs: a full round is one launch of the whole-round graph, with the same
// results; shorter rounds still replay step by step. Exactly the graphs replayed are captured:
// steps 0..2 (shorter rounds) and the round graph, 4 per bucket, every one launched.
TEST_P(Runtime, WholeRoundGraphsEqualPerStepReplay) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.round_graphs = true;
  sim_engine eng(*ex, c, rng);
  const capture_report report = eng.rt().capture();
  const auto buckets = static_cast<std::int32_t>(eng.rt().plan().config.buckets.size());
  EXPECT_EQ(report.graphs, buckets * 4);
  EXPECT_EQ(report.per_graph[3].step, all_steps);
  EXPECT_EQ(report.per_graph[3].bucket, 12);
  EXPECT_GT(report.per_graph[3].nodes, report.per_graph[2].nodes);
  for (int round = 0; round < 16; ++round) {
    const host_round r = eng.random_round(rng, static_cast<std::int32_t>(1 + rng() % 12));
    const std::int32_t depth = round % 2 == 0 ? 4 : 3;
    eng.poison();
    eng.rt().stage(r.inputs());
    const std::int64_t launches = ex->counters().graph_launches;
    eng.rt().run_round(depth);
    EXPECT_EQ(ex->counters().graph_launches - launches, depth == 4 ? 1 : 3);
    expect_matches_model(eng, eng.model_of(r, depth), depth);
    if (HasFailure()) return;
  }
  // After a whole round, the round is complete: only step 0 may start the next one.
  expect_invalid([&] { eng.rt().replay(1); }, "step", "1 replayed out of order");
  eng.rt().stage(eng.random_round(rng, 3).inputs());
  eng.rt().run_round(4);
  expect_invalid([&] { eng.rt().replay(4); }, "step", "4 is outside [0, num_steps 4)");
  eng.rt().stage(eng.random_round(rng, 3).inputs());
  for (std::int32_t s = 0; s < 3; ++s) eng.rt().replay(s);
  expect_invalid([&] { eng.rt().replay(3); }, "step",
                 "3: with round_graphs the last step runs only inside the whole-round graph");
}

TEST_P(Runtime, CapturingAgainUpdatesGraphsInPlace) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, small_config(4), rng);
  const capture_report first = eng.rt().capture();
  EXPECT_EQ(first.instantiated, first.graphs);
  EXPECT_EQ(first.updated, 0);
  const capture_report second = eng.rt().capture();
  EXPECT_EQ(second.updated, second.graphs);
  EXPECT_EQ(second.instantiated, 0);
  ASSERT_EQ(second.per_graph.size(), static_cast<std::size_t>(second.graphs));
  EXPECT_EQ(second.per_graph.front().bucket, 12);  // largest first
  EXPECT_EQ(second.per_graph.back().bucket, 1);
  const host_round r = eng.random_round(rng, 3);
  eng.poison();
  eng.rt().stage(r.inputs());
  eng.rt().run_round(4);
  expect_matches_model(eng, eng.model_of(r, 4), 4);
}

// Checked mode: a real row whose slots break the branch layout raises guard_violation naming
// buffer, step, bucket and row.
TEST_P(Runtime, CheckedModeNamesTheViolation) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.checked = true;
  sim_engine eng(*ex, c, rng);
  eng.rt().capture();
  host_round r = eng.random_round(rng, 5);
  eng.rt().stage(r.inputs());
  EXPECT_NO_THROW(eng.rt().run_round(4));
  // Row 7 = request 2, branch 1; its step-1 slot moves to another in-page offset.
  std::int64_t& slot = r.out_cache_loc[7 * 4 + 1];
  slot = (slot / 4) * 4 + (slot % 4 + 1) % 4;
  eng.rt().stage(r.inputs());
  try {
    eng.rt().run_round(4);
    FAIL() << "expected guard_violation";
  } catch (const guard_violation& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("expand.page_table (step 1, bucket 5, row 7)"), std::string::npos) << what;
    EXPECT_NE(what.find("layout"), std::string::npos) << what;
  }
}

TEST_P(Runtime, DotFilesDescribeEveryGraph) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.buckets = {6, 12};
  sim_engine eng(*ex, c, rng);
  eng.rt().capture();
  const auto dir =
      std::filesystem::temp_directory_path() / ("specgraph_dot_" + std::to_string(rng()));
  std::filesystem::create_directories(dir);
  eng.rt().write_dot(dir.string());
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++files;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("digraph"), std::string::npos);
    if (GetParam() == "host") {
      EXPECT_NE(text.find("expand_page_table"), std::string::npos) << entry.path();
      EXPECT_NE(text.find("engine_probe"), std::string::npos) << entry.path();
    }
  }
  EXPECT_EQ(files, 8u);
  std::filesystem::remove_all(dir);
}

// An engine's forward stages sparse vertical/slash indices inside the captured graphs through the
// StepView's sparse buffers; the replayed buffers equal an eager host staging of the same input.
TEST_P(Runtime, ForwardStagesSparseIndicesInsideTheGraph) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.sparse = sparse_config{4, {4, 4, 4, 4}, {4, 4, 4, 4}, 128};
  sim_engine eng(*ex, c, rng);
  const std::vector<sparse_stage> stages = sparse_stages(128, 48);
  // The last chunk (prev 96) has all three stage kinds.
  const std::vector<sparse_stage> last(stages.end() - 3, stages.end());
  eng.rt().set_forward([&](const step_view& v) {
    eng.probe_forward(v);
    ASSERT_TRUE(v.sparse.enabled());
    for (const sparse_stage& st : last) launch_sparse_stage(*v.ex, v.sparse.params(st));
  });
  eng.rt().capture();
  const step_view v = eng.rt().view(12, 0);
  for (int round = 0; round < 5; ++round) {
    // A fresh selection per round, written outside capture into the static sparse inputs. Head 1
    // selects nothing, so every stage slot of it takes the capacity-capped fallback.
    std::vector<std::int32_t> vin(16), sin(16), vcount{4, 0, 4, 2}, scount{4, 0, 3, 4};
    for (auto& x : vin) x = static_cast<std::int32_t>(rng() % 128);
    for (auto& x : sin) x = static_cast<std::int32_t>(rng() % 128);
    ex->copy_to_device(v.sparse.vertical_in, vin.data(), vin.size() * 4);
    ex->copy_to_device(v.sparse.slash_in, sin.data(), sin.size() * 4);
    ex->copy_to_device(v.sparse.vertical_count_in, vcount.data(), 16);
    ex->copy_to_device(v.sparse.slash_count_in, scount.data(), 16);
    eng.rt().stage(eng.random_round(rng, 4).inputs());
    eng.rt().run_round(2);
    ASSERT_EQ(eng.rt()
                  .read_guards()[static_cast<std::size_t>(eng.rt().plan().layout.guard_sparse(0))]
                  .violations,
              0);
    const std::vector<std::int32_t> sizes{4, 4, 4, 4};
    for (const sparse_stage& st : last) {
      SCOPED_TRACE(to_string(st.kind));
      const auto& out = v.sparse.stages[static_cast<int>(st.kind)];
      ASSERT_EQ(out.vertical_capacity, 4);
      std::vector<std::int32_t> want_v(16, -1), want_vc(4, -1), want_s(16, -1), want_sc(4, -1);
      guard_word g{};
      sparse_stage_params p;
      p.vertical = vin.data();
      p.vertical_stride = 4;
      p.vertical_count = vcount.data();
      p.vertical_size = sizes.data();
      p.slash = sin.data();
      p.slash_stride = 4;
      p.slash_count = scount.data();
      p.slash_size = sizes.data();
      p.heads = 4;
      p.stage = st;
      p.out_vertical = want_v.data();
      p.vertical_capacity = 4;
      p.out_vertical_count = want_vc.data();
      p.out_slash = want_s.data();
      p.slash_capacity = 4;
      p.out_slash_count = want_sc.data();
      p.guard = &g;
      sparse_stage_host(p);
      EXPECT_EQ(eng.read(out.vertical, 16), want_v);
      EXPECT_EQ(eng.read(out.vertical_count, 4), want_vc);
      EXPECT_EQ(eng.read(out.slash, 16), want_s);
      EXPECT_EQ(eng.read(out.slash_count, 4), want_sc);
      EXPECT_GT(want_vc[1], 0) << "head 1 must have fallen back";
    }
  }
}

// After a CUDA error the runtime refuses further work instead of replaying into a broken context.
// The fault is injected by an executor wrapper, so this runs on every machine.
class faulty_executor final : public forwarding_executor {
 public:
  using forwarding_executor::forwarding_executor;
  bool fail_next_graph_launch = false;
  int fail_launches_during_capture = 0;  // a cuda_error code, 0 = none
  void launch_graph(graph_exec& e) override {
    if (fail_next_graph_launch) {
      throw cuda_error(700, "cudaGraphLaunch failed: cudaErrorIllegalAddress (injected)");
    }
    forwarding_executor::launch_graph(e);
  }
  void launch(const kernel_launch& k) override {
    if (fail_launches_during_capture != 0 && capturing()) {
      throw cuda_error(
          fail_launches_during_capture,
          "launch failed with injected error " + std::to_string(fail_launches_during_capture));
    }
    forwarding_executor::launch(k);
  }
};

// A CUDA error during capture that is not a capture error (e.g. a sticky illegal address) is
// not "capture failed, runtime usable": it stays a cuda_error and the runtime refuses further
// work. A capture error (900-908: the capture was invalidated) is a capture_failed and leaves it
// usable.
TEST_P(Runtime, ACudaErrorDuringCaptureIsRethrownAndTheRuntimeRefuses) {
  std::mt19937_64 rng(test_seed());
  {
    faulty_executor faulty(make_executor(GetParam()));
    sim_engine eng(faulty, small_config(4), rng);
    faulty.fail_launches_during_capture = 901;  // cudaErrorStreamCaptureInvalidated
    EXPECT_THROW(eng.rt().capture(), capture_failed);
    faulty.fail_launches_during_capture = 0;
    EXPECT_NO_THROW(eng.rt().capture());
  }
  faulty_executor faulty(std::move(ex));
  sim_engine eng(faulty, small_config(4), rng);
  faulty.fail_launches_during_capture = 700;  // cudaErrorIllegalAddress
  try {
    eng.rt().capture();
    ADD_FAILURE() << "expected cuda_error";
  } catch (const capture_failed& e) {
    ADD_FAILURE() << "a sticky CUDA error must not look recoverable: " << e.what();
  } catch (const cuda_error& e) {
    EXPECT_EQ(e.code(), 700);
  }
  EXPECT_FALSE(faulty.capturing()) << "the capture must have been ended";
  faulty.fail_launches_during_capture = 0;
  try {
    eng.rt().stage(eng.random_round(rng, 3).inputs());
    ADD_FAILURE() << "the runtime must refuse further work";
  } catch (const cuda_error&) {
    ADD_FAILURE() << "refusal must not look like a new CUDA error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("refuses to continue after a CUDA error"),
              std::string::npos)
        << e.what();
  }
}

TEST_P(Runtime, RefusesFurtherWorkAfterACudaError) {
  std::mt19937_64 rng(test_seed());
  faulty_executor faulty(std::move(ex));
  sim_engine eng(faulty, small_config(4), rng);
  eng.rt().capture();
  const host_round r = eng.random_round(rng, 6);
  eng.rt().stage(r.inputs());
  eng.rt().run_round(4);
  faulty.fail_next_graph_launch = true;
  eng.rt().stage(r.inputs());
  EXPECT_THROW(eng.rt().replay(0), cuda_error);
  faulty.fail_next_graph_launch = false;  // even with the device "healthy" again
  for (auto attempt : {0, 1, 2}) {
    try {
      if (attempt == 0) eng.rt().replay(0);
      if (attempt == 1) eng.rt().stage(r.inputs());
      if (attempt == 2) eng.rt().capture();
      ADD_FAILURE() << "attempt " << attempt << " should have been refused";
    } catch (const cuda_error&) {
      ADD_FAILURE() << "refusal must not look like a new CUDA error";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("refuses to continue after a CUDA error"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("cudaErrorIllegalAddress"), std::string::npos)
          << e.what();
    }
  }
}

// Regression (issue 11): allocations of 10^11 bytes and more were attempted and failed as a
// plain specgraph::error; an arena larger than the executor's memory is refused by name first.
TEST_P(Runtime, AnArenaLargerThanTheExecutorsMemoryIsRefusedBeforeAllocating) {
  draft_config c = small_config(1);
  c.max_batch = 1 << 20;
  c.topk = 1;
  c.max_context_len = 1 << 16;  // prefix table: 2^20 x 2^16 int32 = 256 GiB
  c.pool_rows = 1;
  std::vector<std::int32_t> rtt(1, 0);
  const std::int64_t allocations = ex->counters().allocations;
  try {
    draft_runtime rt(*ex, c, engine_tables{rtt.data()});
    ADD_FAILURE() << "a 256 GiB arena cannot be allocated";
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "arena") << e.what();
    EXPECT_NE(std::string(e.what()).find("bytes of memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ex->counters().allocations, allocations) << "no allocation may be attempted";
}

SPECGRAPH_INSTANTIATE_EXECUTORS(Runtime);

}  // namespace
}  // namespace specgraph::testing
