// A device-decided round always ends, and its capture fails only by name (docs/device-rounds.md):
// the WHILE condition stops after num_steps bodies whatever the body and the control words hold
// (a body that never advances the step, a corrupted max_depth or body count, an engine condition
// that never stops); the test forward's confidence probe reads nothing on a spent counter; a
// round is captured on a private stream, so a stream CUDA cannot capture (the legacy default
// stream) does not matter; record_graph refuses a graph holding a conditional node, naming it;
// and abort_capture inside a conditional body gives the executor its stream back.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "specgraph/engine_inputs.hpp"
#include "specgraph/error.hpp"
#include "specgraph/forwarding_executor.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/runtime.hpp"
#include "testing/engine_probe.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t num_steps = 4;

draft_config depth_config() {
  draft_config c;
  c.max_batch = 12;
  c.topk = 3;
  c.num_steps = num_steps;
  c.page_size = 4;
  c.max_context_len = 64;
  c.pool_rows = 16;
  c.kv_slots = 1 << 20;
  c.device_steps = true;
  c.device_depth = true;
  return c;
}

void launch_count(executor& ex, std::int32_t* count) {
  const count_runs_kernel::params p{count};
  ex.launch(make_kernel_launch<count_runs_kernel>(p, 1, count_runs_cuda()));
}

void write_word(executor& ex, std::int32_t* word, std::int32_t value) {
  ex.copy_to_device(word, &value, sizeof value);
}

class RoundLimits : public ExecutorTest {};

// The body counts its runs and never advances the step counter: before the condition counted
// bodies itself, the WHILE node never ended (every row stays confident, the step stays 0).
TEST_P(RoundLimits, ABodyThatNeverAdvancesTheStepStopsAfterNumStepsBodies) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, depth_config(), rng);
  draft_runtime& rt = eng.rt();
  const draft_buffers& b = rt.buffers();
  const std::int32_t bucket = rt.plan().config.buckets.back();
  dvec<std::int32_t> count(*ex, 1, 0);
  ex->begin_capture();
  launch_count(*ex, count.data());
  const std::unique_ptr<graph> body = ex->end_capture();
  const std::unique_ptr<graph_exec> round =
      ex->instantiate(*capture_device_depth_round(*ex, b, bucket, *body));
  const host_round r = eng.random_round(rng, bucket);
  rt.stage(r.inputs());  // max_depth num_steps; min_confidence -inf: every row is confident
  ex->launch_graph(*round);
  EXPECT_EQ(count.download()[0], num_steps);
  EXPECT_EQ(eng.read(b.device_step(), 1)[0], 0) << "the body never advanced the step";
  EXPECT_EQ(eng.read(b.iterations(), 1)[0], num_steps);
  // Launched again without staging: the round's bodies are spent, only the first (the WHILE
  // node's condition starts set) runs.
  ex->launch_graph(*round);
  EXPECT_EQ(count.download()[0], num_steps + 1);
  // A corrupted body count is the limit too, not 2^31 bodies.
  for (const std::int32_t corrupt : {std::numeric_limits<std::int32_t>::min(), -1, 1000}) {
    rt.stage(r.inputs());
    write_word(*ex, b.iterations(), corrupt);
    write_word(*ex, count.data(), 0);
    ex->launch_graph(*round);
    EXPECT_EQ(count.download()[0], 1) << "body count " << corrupt;
  }
  // Staging starts a new round with a fresh count.
  rt.stage(r.inputs());
  write_word(*ex, count.data(), 0);
  ex->launch_graph(*round);
  EXPECT_EQ(count.download()[0], num_steps);
}

// The runtime's own round (the body advances the step) with its max_depth word corrupted after
// staging: the step counter's range stops the round at num_steps, where it stopped at max_depth.
TEST_P(RoundLimits, ACorruptedMaxDepthStopsTheRoundAtNumSteps) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, depth_config(), rng);
  draft_runtime& rt = eng.rt();
  dvec<std::int32_t> count(*ex, 1, 0);
  rt.set_forward([&](const step_view& v) {
    eng.probe_forward(v);
    launch_count(*v.ex, count.data());
  });
  rt.capture();
  for (const std::int32_t corrupt :
       {num_steps + 1, 1000, std::numeric_limits<std::int32_t>::max()}) {
    SCOPED_TRACE("max_depth " + std::to_string(corrupt));
    const host_round r = eng.random_round(rng, static_cast<std::int32_t>(1 + rng() % 12));
    rt.stage(r.inputs());
    write_word(*ex, rt.buffers().max_depth(), corrupt);
    write_word(*ex, count.data(), 0);
    rt.run_round_on_device();
    EXPECT_EQ(rt.read_round_depth(), num_steps);
    EXPECT_EQ(count.download()[0], num_steps);
  }
  // A step counter already spent (corrupted after staging, with max_depth): no body can do
  // anything at such a step, so the round stops after the first, though its body count is not
  // spent.
  const host_round r = eng.random_round(rng, 5);
  rt.stage(r.inputs());
  write_word(*ex, rt.buffers().max_depth(), 1000);
  write_word(*ex, rt.buffers().device_step(), num_steps);
  write_word(*ex, count.data(), 0);
  rt.run_round_on_device();
  EXPECT_EQ(count.download()[0], 1);
}

// An engine's own condition (set_condition) that never says stop: the runtime's round still
// ends after num_steps bodies, having run every step once.
TEST_P(RoundLimits, AnEngineConditionThatNeverStopsEndsAtNumSteps) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, depth_config(), rng);
  draft_runtime& rt = eng.rt();
  dvec<std::int32_t> count(*ex, 1, 0);
  rt.set_forward([&](const step_view& v) {
    eng.probe_forward(v);
    launch_count(*v.ex, count.data());
  });
  rt.set_condition([](const step_view& v, conditional_handle h) {
    const constant_condition_kernel::params p{h, 1};
    v.ex->launch(make_kernel_launch<constant_condition_kernel>(p, 1, constant_condition_cuda()));
  });
  rt.capture();
  for (int round = 0; round < 3; ++round) {
    const host_round r = eng.random_round(rng, static_cast<std::int32_t>(1 + rng() % 12));
    round_inputs in = r.inputs();
    in.max_depth = static_cast<std::int32_t>(1 + rng() % num_steps);  // the engine's to honour
    rt.stage(in);
    write_word(*ex, count.data(), 0);
    rt.run_round_on_device();
    EXPECT_EQ(rt.read_round_depth(), num_steps);
    EXPECT_EQ(count.download()[0], num_steps);
    for (const guard_word& g : rt.read_guards()) EXPECT_EQ(g.violations, 0) << describe(g);
  }
}

// docs/device-rounds.md: padded rows never keep a round alive, also when the engine's bound
// real-batch word (inputs read in place) is larger than the bucket replayed: the word is clamped
// to the bucket, so the rows past it (another request's, or stale) are not the round's. The body
// never advances the step, so only the condition (and the body limit) ends the round.
TEST_P(RoundLimits, ARealBatchWordAboveTheBucketIsClampedToIt) {
  std::mt19937_64 rng(test_seed());
  const plan p = make_plan(depth_config());
  const std::int32_t topk = p.config.topk, bucket = 2, word = 3;
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  initialize_buffers(*ex, b);
  const auto rows = static_cast<std::size_t>(p.max_rows());
  dvec<std::int64_t> index(*ex, static_cast<std::size_t>(p.max_bucket()), 0);
  dvec<std::int64_t> slots(*ex, rows * num_steps, 0);
  dvec<std::int32_t> real(*ex, {word});
  engine_inputs in;
  in.req_pool_index = {index.data(), index_type::int64, 1};
  in.seq_len = {index.data(), index_type::int64, 1};
  in.out_cache_loc = {slots.data(), index_type::int64, topk * num_steps, num_steps, 1, num_steps};
  in.real_batch = real.data();
  dvec<std::int32_t> count(*ex, 1, 0);
  ex->begin_capture();
  launch_count(*ex, count.data());
  const std::unique_ptr<graph> body = ex->end_capture();
  const std::unique_ptr<graph_exec> round = ex->instantiate(
      *capture_device_depth_round(*ex, b, bucket, *body, round_source(b.plan(), in)));
  for (const bool real_row_confident : {false, true}) {
    SCOPED_TRACE(real_row_confident ? "a real row confident" : "no real row confident");
    std::vector<float> confidence(rows, -1.0f);
    // Request 2's rows: inside the word, past the bucket.
    for (std::size_t r = static_cast<std::size_t>(bucket * topk);
         r < static_cast<std::size_t>(word * topk); ++r) {
      confidence[r] = 1.0f;
    }
    if (real_row_confident) confidence[rng() % static_cast<std::size_t>(bucket * topk)] = 1.0f;
    ex->copy_to_device(b.confidence(), confidence.data(), rows * sizeof(float));
    begin_round(*ex, b, num_steps, 0.0f);
    write_word(*ex, count.data(), 0);
    ex->launch_graph(*round);
    // One body (the WHILE node's first), or every body up to the limit.
    EXPECT_EQ(count.download()[0], real_row_confident ? num_steps : 1);
  }
}

// The test forward's confidence signal on a spent counter (outside [0, num_steps)) reads and
// writes nothing: the source has sentinel blocks before and after its num_steps rows blocks, so
// a read past either end would copy a sentinel.
TEST_P(RoundLimits, TheConfidenceProbeReadsNothingOnASpentCounter) {
  constexpr std::int64_t rows = 5;
  constexpr std::int32_t steps = 3;
  constexpr float sentinel = 7.5f, poison = -3.0f;
  std::vector<float> source(static_cast<std::size_t>((steps + 2) * rows), sentinel);
  for (std::int32_t s = 0; s < steps; ++s) {
    for (std::int64_t r = 0; r < rows; ++r) {
      source[static_cast<std::size_t>((s + 1) * rows + r)] = static_cast<float>(s * 10 + r);
    }
  }
  dvec<float> d_source(*ex, source), confidence(*ex, static_cast<std::size_t>(rows), poison);
  dvec<std::int32_t> step(*ex, 1, 0);
  for (const std::int32_t s : {-1, 0, 1, 2, 3, 4, std::numeric_limits<std::int32_t>::max()}) {
    SCOPED_TRACE("step " + std::to_string(s));
    write_word(*ex, step.data(), s);
    const std::vector<float> poisoned(static_cast<std::size_t>(rows), poison);
    ex->copy_to_device(confidence.data(), poisoned.data(), poisoned.size() * sizeof(float));
    const confidence_probe_kernel::params p{d_source.data() + rows, rows, step.data(),
                                            confidence.data(), steps};
    ex->launch(make_kernel_launch<confidence_probe_kernel>(p, rows, confidence_probe_cuda()));
    std::vector<float> want(static_cast<std::size_t>(rows), poison);
    if (s >= 0 && s < steps) {
      for (std::int64_t r = 0; r < rows; ++r) {
        want[static_cast<std::size_t>(r)] = static_cast<float>(s * 10 + r);
      }
    }
    EXPECT_EQ(confidence.download(), want);
  }
}

// record_graph adds its graph as a child graph node, and CUDA refuses a child graph holding a
// conditional node: refused by name, outside a conditional body and inside one, before CUDA
// would fail; the capture is still usable (aborted) afterwards.
TEST_P(RoundLimits, RecordGraphRefusesAGraphHoldingAConditionalNode) {
  dvec<std::int32_t> count(*ex, 1, 0);
  ex->begin_capture();
  (void)ex->begin_while(false);
  launch_count(*ex, count.data());
  ex->end_while();
  const std::unique_ptr<graph> with_loop = ex->end_capture();
  for (const bool in_body : {false, true}) {
    SCOPED_TRACE(in_body ? "inside a conditional body" : "outside a conditional body");
    ex->begin_capture();
    if (in_body) (void)ex->begin_while(true);
    try {
      ex->record_graph(*with_loop);
      ADD_FAILURE() << "record_graph accepted a graph holding a conditional node";
    } catch (const capture_violation& e) {
      EXPECT_NE(std::string(e.what()).find("a graph with a conditional node cannot be recorded"),
                std::string::npos)
          << e.what();
    }
    ex->abort_capture();
    EXPECT_FALSE(ex->capturing());
  }
  // A graph of kernels only is still recorded, in a body too.
  ex->begin_capture();
  launch_count(*ex, count.data());
  const std::unique_ptr<graph> kernels_only = ex->end_capture();
  ex->begin_capture();
  const conditional_handle h = ex->begin_while(true);
  ex->record_graph(*kernels_only);
  const constant_condition_kernel::params stop{h, 0};
  ex->launch(make_kernel_launch<constant_condition_kernel>(stop, 1, constant_condition_cuda()));
  ex->end_while();
  const std::unique_ptr<graph_exec> exec = ex->instantiate(*ex->end_capture());
  ex->launch_graph(*exec);
  EXPECT_EQ(count.download()[0], 1);
}

// A body that fails after begin_while: abort_capture ends it and the executor's stream is the
// one it had before the capture (on CUDA the body was captured on an internal stream), not
// capturing, and usable eagerly.
TEST_P(RoundLimits, AbortCaptureInsideABodyRestoresTheStream) {
  const device_stream before = ex->stream();
  dvec<std::int32_t> count(*ex, 1, 0);
  for (const bool private_capture : {false, true}) {
    if (private_capture) {
      ex->begin_private_capture();
    } else {
      ex->begin_capture();
    }
    (void)ex->begin_while(true);
    launch_count(*ex, count.data());
    ex->abort_capture();
    EXPECT_EQ(ex->stream(), before);
    EXPECT_FALSE(ex->capturing());
  }
  launch_count(*ex, count.data());
  EXPECT_EQ(count.download()[0], 1) << "eager work runs again, the aborted body never ran";
}

// An executor whose stream cannot be captured, as CUDA's legacy default stream (torch's default
// stream) cannot: begin_capture fails as cudaStreamBeginCapture does there.
class legacy_stream_executor final : public forwarding_executor {
 public:
  using forwarding_executor::forwarding_executor;
  void begin_capture() override {
    throw cuda_error(900,
                     "cudaStreamBeginCapture failed: cudaErrorStreamCaptureUnsupported "
                     "(the legacy stream, emulated)");
  }
};

// capture_device_depth_round over such an executor: the round is captured on a private stream
// and runs the depth staged.
TEST(RoundLimitsHost, TheRoundIsCapturedOnAPrivateStreamWhenTheCallersCannotBeCaptured) {
  std::mt19937_64 rng(test_seed());
  legacy_stream_executor ex(make_host_executor());
  EXPECT_THROW(ex.begin_capture(), cuda_error);
  sim_engine eng(ex, depth_config(), rng);
  draft_runtime& rt = eng.rt();
  const std::int32_t bucket = rt.plan().config.buckets.back();
  dvec<std::int32_t> count(ex, 1, 0);
  // The step body (counting its runs, advancing the step), captured the way this executor can.
  ex.begin_private_capture();
  launch_count(ex, count.data());
  advance_step(ex, rt.buffers());
  const std::unique_ptr<graph> body = ex.end_capture();
  const std::unique_ptr<graph_exec> round =
      ex.instantiate(*capture_device_depth_round(ex, rt.buffers(), bucket, *body));
  const host_round r = eng.random_round(rng, bucket);
  round_inputs in = r.inputs();
  in.max_depth = 3;
  rt.stage(in);
  ex.launch_graph(*round);
  EXPECT_EQ(rt.read_round_depth(), 3);
  EXPECT_EQ(count.download()[0], 3);
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RoundLimits);

}  // namespace
}  // namespace specgraph::testing
