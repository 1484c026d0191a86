// Executor events and WHILE graphs at the capture's edges (issue 27 items 8, 10, 11), on every
// executor (the GPU check's smoke step runs the cuda instances):
//   - an event recorded and waited on inside one capture is an ordinary edge (no node), the
//     default; event_scope::external makes record / wait nodes that fire at each replay;
//   - the host emulation refuses what CUDA refuses around them;
//   - a re-captured WHILE graph is not updated in place (CUDA 13 does not change a conditional
//     node by update): the runtime instantiates it instead, and counts that;
//   - on CUDA, the first begin_while inside the engine's global-mode capture works (the body's
//     stream exists before any capture).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/runtime.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

#if defined(SPECGRAPH_HAS_CUDA)
#include <cuda_runtime.h>
#endif

namespace specgraph::testing {
namespace {

class ExecutorEvents : public ExecutorTest {};

std::int32_t random_byte(std::mt19937_64& rng) {
  return static_cast<std::int32_t>(1 + rng() % 250);
}

// Fill a, edge (record + wait in the same capture), copy a -> b: two nodes, and b holds the fill
// after each replay.
TEST_P(ExecutorEvents, AnEventInsideOneCaptureIsAnEdgeNotANode) {
  std::mt19937_64 rng(test_seed());
  const std::size_t n = 64 + rng() % 512;
  dvec<std::uint8_t> a(*ex, n, 0), b(*ex, n, 0);
  event_handle e(*ex);
  auto value = static_cast<std::uint8_t>(random_byte(rng));
  ex->begin_capture();
  ex->fill_bytes(a.data(), value, n);
  ex->record_event(e.get());  // the default: event_scope::capture
  ex->wait_event(e.get());
  ex->copy_on_device(b.data(), a.data(), n);
  const std::unique_ptr<graph> g = ex->end_capture();
  EXPECT_EQ(g->node_count(), 2u) << "an edge inside one capture adds no node";
  const std::unique_ptr<graph_exec> exec = ex->instantiate(*g);
  ex->launch_graph(*exec);
  EXPECT_EQ(b.download(), std::vector<std::uint8_t>(n, value));
}

// External: a wait node for an event recorded before the replay, a record node that fires at
// each replay (the engine waits for it after the launch).
TEST_P(ExecutorEvents, ExternalEventsAreNodesThatFireAtEachReplay) {
  std::mt19937_64 rng(test_seed());
  const std::size_t n = 64 + rng() % 512;
  dvec<std::uint8_t> a(*ex, n, 0);
  event_handle before(*ex), done(*ex);
  const auto value = static_cast<std::uint8_t>(random_byte(rng));
  ex->record_event(before.get());
  ex->begin_capture();
  ex->wait_event(before.get(), event_scope::external);
  ex->fill_bytes(a.data(), value, n);
  ex->record_event(done.get(), event_scope::external);
  const std::unique_ptr<graph> g = ex->end_capture();
  EXPECT_EQ(g->node_count(), 3u) << "a wait node, the fill, a record node";
  const std::unique_ptr<graph_exec> exec = ex->instantiate(*g);
  for (int replay = 0; replay < 2; ++replay) {
    ex->record_event(before.get());
    ex->launch_graph(*exec);
    ex->synchronize_event(done.get());
    EXPECT_TRUE(ex->event_complete(done.get()));
    EXPECT_EQ(a.download(), std::vector<std::uint8_t>(n, value)) << "replay " << replay;
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(ExecutorEvents);

// What CUDA refuses around an ordinary (event_scope::capture) event, the host emulation refuses
// too: waiting on an event from outside the capture without saying it is external, and using an
// event that belongs to an ended capture from outside it.
TEST(HostExecutorEvents, RefusesWhatCudaRefusesAroundACapturedEvent) {
  auto ex = make_host_executor({/*deferred=*/true});
  event_handle outside(*ex), inside(*ex);
  ex->record_event(outside.get());
  ex->begin_capture();
  EXPECT_THROW(ex->wait_event(outside.get()), capture_violation)
      << "an ordinary wait on an event recorded outside the capture";
  ex->wait_event(outside.get(), event_scope::external);  // said: fine
  ex->record_event(inside.get());
  ex->wait_event(inside.get());  // recorded in this capture: an edge
  (void)ex->end_capture();
  EXPECT_THROW((void)ex->event_complete(inside.get()), capture_violation);
  EXPECT_THROW(ex->synchronize_event(inside.get()), capture_violation);
  EXPECT_THROW(ex->wait_event(inside.get()), capture_violation);
  ex->begin_capture();
  EXPECT_THROW(ex->wait_event(inside.get()), capture_violation)
      << "recorded in an earlier capture, not this one";
  ex->abort_capture();
  ex->record_event(inside.get());  // recorded again outside: an ordinary event once more
  ex->synchronize_event(inside.get());
  EXPECT_TRUE(ex->event_complete(inside.get()));
}

// A WHILE graph (initial condition false: the body is captured but does not run) with a fill of
// `value` in its body and a fill of `after` behind it.
std::unique_ptr<graph> while_graph(executor& ex, std::uint8_t* body_dst, std::uint8_t* dst,
                                   std::size_t n, std::uint8_t value, std::uint8_t after) {
  ex.begin_capture();
  (void)ex.begin_while(false);
  ex.fill_bytes(body_dst, value, n);
  ex.end_while();
  ex.fill_bytes(dst, after, n);
  return ex.end_capture();
}

// CUDA 13: a conditional node's parameters do not change by update, and a WHILE node captured
// again is a new conditional node: update refuses, exec stays what it was.
TEST_P(ExecutorEvents, ARecapturedWhileGraphIsNotUpdatedInPlace) {
  std::mt19937_64 rng(test_seed());
  const std::size_t n = 32 + rng() % 256;
  dvec<std::uint8_t> body(*ex, n, 0), out(*ex, n, 0);
  const auto first = static_cast<std::uint8_t>(random_byte(rng));
  const auto second = static_cast<std::uint8_t>(first % 250 + 1);
  const std::unique_ptr<graph> g1 = while_graph(*ex, body.data(), out.data(), n, 9, first);
  const std::unique_ptr<graph_exec> exec = ex->instantiate(*g1);
  const std::unique_ptr<graph> g2 = while_graph(*ex, body.data(), out.data(), n, 9, second);
  EXPECT_FALSE(ex->update(*exec, *g2)) << "a re-captured conditional node cannot be updated";
  ex->launch_graph(*exec);
  EXPECT_EQ(out.download(), std::vector<std::uint8_t>(n, first)) << "exec must be unchanged";
  EXPECT_EQ(body.download(), std::vector<std::uint8_t>(n, 0)) << "the body must not have run";
}

// The runtime's capture falls back to instantiating the device-depth round graphs (their WHILE
// node) and updates the rest in place, and counts which.
TEST_P(ExecutorEvents, RecapturingDeviceDepthInstantiatesTheWhileGraphsAndCountsThem) {
  std::mt19937_64 rng(test_seed());
  draft_config c;
  c.max_batch = 8;
  c.topk = 2;
  c.num_steps = 3;
  c.page_size = 4;
  c.max_context_len = 64;
  c.pool_rows = 12;
  c.kv_slots = 1 << 20;
  c.device_steps = true;
  c.device_depth = true;
  sim_engine eng(*ex, c, rng);
  const capture_report one = eng.rt().capture();
  EXPECT_EQ(one.instantiated, one.graphs);
  const capture_report two = eng.rt().capture();
  std::int32_t rounds = 0;
  for (const graph_timing& t : two.per_graph) {
    const bool round_graph = t.step == all_steps;
    rounds += round_graph ? 1 : 0;
    EXPECT_EQ(t.updated, !round_graph) << "bucket " << t.bucket << " step " << t.step;
  }
  EXPECT_GT(rounds, 0) << "a device-depth plan has a WHILE round graph per bucket";
  EXPECT_EQ(two.instantiated, rounds);
  EXPECT_EQ(two.updated, two.graphs - rounds);
  const host_round r = eng.random_round(rng, 5);
  round_inputs in = r.inputs();
  in.max_depth = 2;
  eng.rt().stage(in);
  eng.rt().run_round_on_device();
  EXPECT_EQ(eng.rt().read_round_depth(), 2) << "the instantiated round graph runs";
}

#if defined(SPECGRAPH_HAS_CUDA)
class CudaCaptureEdges : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) {
      if (gpu_required()) FAIL() << "REQUIRE_GPU=1 but " << cuda_unavailable_reason();
      GTEST_SKIP() << "no usable CUDA device (" << cuda_unavailable_reason() << ")";
    }
  }
};

// The engine begins a global-mode capture (the mode torch.cuda.graph uses by default) on its
// stream; the executor over that stream begins its first WHILE body inside it. The body's
// stream was made with the executor, so nothing unsafe happens inside the capture, and the
// engine's capture ends cleanly.
TEST_F(CudaCaptureEdges, TheFirstWhileBodyInsideTheEnginesGlobalCaptureWorks) {
  std::mt19937_64 rng(test_seed());
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  {
    auto ex = make_cuda_executor(s);
    const std::size_t n = 32 + rng() % 256;
    dvec<std::uint8_t> body(*ex, n, 0), out(*ex, n, 0);
    const auto value = static_cast<std::uint8_t>(random_byte(rng));
    ex->synchronize();
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    (void)ex->begin_while(false);
    ex->fill_bytes(body.data(), 9, n);
    ex->end_while();
    ex->fill_bytes(out.data(), value, n);
    cudaGraph_t g = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess) << "the engine's capture was broken";
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(out.download(), std::vector<std::uint8_t>(n, value));
    EXPECT_EQ(body.download(), std::vector<std::uint8_t>(n, 0));
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(g);
  }
  (void)cudaStreamDestroy(s);
}
#endif

}  // namespace
}  // namespace specgraph::testing
