// specgraph inside an engine's CUDA world: the ops recorded into a capture the test begins itself
// in global mode on its own stream, stage() not waiting for the device, stage_device() ordered
// after a slow producer on another stream, and a stale error the engine left behind not blamed
// on specgraph. Built everywhere; skipped visibly without a usable GPU (REQUIRE_GPU=1 fails).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "specgraph/executor.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/runtime.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

#if defined(SPECGRAPH_HAS_CUDA)
#include <cuda_runtime.h>

#include "testing/cuda_test_kernels.hpp"
#endif

namespace specgraph::testing {
namespace {

class CudaInterop : public ::testing::Test {
 protected:
  void SetUp() override {
#if !defined(SPECGRAPH_HAS_CUDA)
    if (gpu_required()) FAIL() << "REQUIRE_GPU=1 but specgraph was built without CUDA";
    GTEST_SKIP() << "specgraph was built without CUDA";
#else
    if (!cuda_available()) {
      if (gpu_required()) FAIL() << "REQUIRE_GPU=1 but " << cuda_unavailable_reason();
      GTEST_SKIP() << "no usable CUDA device (" << cuda_unavailable_reason() << ")";
    }
#endif
  }
};

#if defined(SPECGRAPH_HAS_CUDA)

draft_config interop_config() {
  draft_config c;
  c.max_batch = 8;
  c.topk = 2;
  c.num_steps = 3;
  c.page_size = 4;
  c.max_context_len = 64;
  c.pool_rows = 12;
  c.kv_slots = 1 << 20;
  return c;
}

struct engine_stream {
  cudaStream_t s = nullptr;
  engine_stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~engine_stream() { (void)cudaStreamDestroy(s); }
};

// The tables of one staged round, read back through an executor.
std::vector<std::int32_t> tables(executor& ex, const draft_buffers& b, std::int32_t bucket,
                                 std::int32_t depth) {
  const auto rows = static_cast<std::size_t>(bucket * b.plan().config.topk);
  std::vector<std::int32_t> out;
  auto append = [&](const std::int32_t* p, std::size_t n) {
    std::vector<std::int32_t> v(n);
    ex.copy_to_host(v.data(), p, n * 4);
    out.insert(out.end(), v.begin(), v.end());
  };
  append(b.prefix_page_table(), static_cast<std::size_t>(bucket) *
                                    static_cast<std::size_t>(b.plan().layout.prefix_capacity));
  append(b.last_page_len(), static_cast<std::size_t>(bucket));
  for (std::int32_t s = 0; s < depth; ++s) {
    append(b.expand_page_table(s), rows * static_cast<std::size_t>(s + 2));
    append(b.expand_cache_seqlen(s), rows);
  }
  return out;
}

TEST_F(CudaInterop, OpsRecordIntoACaptureTheEngineBeginsInGlobalMode) {
  std::mt19937_64 rng(test_seed());
  engine_stream stream;
  auto ex = make_cuda_executor(stream.s);
  auto host = make_host_executor();
  const draft_config cfg = interop_config();
  std::mt19937_64 rng_host = rng;
  sim_engine eng(*ex, cfg, rng);               // its runtime gives the engine tables on the GPU
  sim_engine reference(*host, cfg, rng_host);  // the same pool and rounds on the host
  reference.rt().capture();
  const plan p = make_plan(cfg);
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  initialize_buffers(*ex, b);
  const std::int32_t bucket = 8;
  ASSERT_EQ(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_TRUE(ex->capturing()) << "the executor must see the engine's capture";
  setup_round(*ex, b, bucket, eng.tables());
  for (std::int32_t s = 0; s < 3; ++s) step_metadata(*ex, b, bucket, s);
  EXPECT_THROW((void)ex->allocate(16), capture_violation);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.s, &g), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  for (int round = 0; round < 4; ++round) {
    const host_round r = eng.random_round(rng, 6);
    (void)reference.random_round(rng_host, 6);
    dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
    dvec<std::int64_t> slots(*ex, r.out_cache_loc);
    stage_round(*ex, b, {6, pool.data(), seq.data(), slots.data()});
    ASSERT_EQ(cudaGraphLaunch(exec, stream.s), cudaSuccess);
    reference.rt().stage(r.inputs());
    reference.rt().run_round(3);
    EXPECT_EQ(tables(*ex, b, bucket, 3), tables(*host, reference.rt().buffers(), bucket, 3))
        << "round " << round;
  }
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(g);
}

TEST_F(CudaInterop, StageReturnsWhileTheDeviceIsStillBusy) {
  std::mt19937_64 rng(test_seed());
  auto ex = make_cuda_executor();
  sim_engine eng(*ex, interop_config(), rng);
  eng.rt().capture();
  const host_round r = eng.random_round(rng, 5);
  ASSERT_EQ(spin_then_write(ex->stream(), 60.0, nullptr, nullptr, 0), 0);
  const auto t0 = std::chrono::steady_clock::now();
  eng.rt().stage(r.inputs());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(cudaStreamQuery(ex->stream()), cudaErrorNotReady)
      << "stage() must not have waited for the 60 ms kernel";
  (void)cudaGetLastError();
  EXPECT_LT(ms, 30.0);
  EXPECT_EQ(ex->counters().event_waits, 0);
  std::vector<std::int32_t> pool(5);
  ex->copy_to_host(pool.data(), eng.rt().buffers().req_pool_index(), 20);
  EXPECT_EQ(pool, r.req_pool_index) << "the staged values arrive after the kernel";
}

TEST_F(CudaInterop, StageDeviceWaitsForTheProducersEvent) {
  std::mt19937_64 rng(test_seed());
  engine_stream producer;
  auto ex = make_cuda_executor();
  sim_engine eng(*ex, interop_config(), rng);
  eng.rt().capture();
  const host_round r = eng.random_round(rng, 4);
  const std::vector<std::int64_t> pool64(r.req_pool_index.begin(), r.req_pool_index.end());
  dvec<std::int64_t> final_values(*ex, pool64), pool(*ex, pool64.size(), 0);
  dvec<std::int32_t> seq(*ex, r.seq_len);
  dvec<std::int64_t> slots(*ex, r.out_cache_loc);
  ex->synchronize();
  event_handle written(*ex), consumed(*ex);
  // The engine's producer writes the pool indices only after 40 ms, on its own stream.
  ASSERT_EQ(spin_then_write(producer.s, 40.0, pool.data(), final_values.data(), 4), 0);
  ASSERT_EQ(cudaEventRecord(written.get(), producer.s), cudaSuccess);
  device_round_inputs in{4, pool.data(), seq.data(), slots.data()};
  in.wait_for = written.get();
  in.done = consumed.get();
  eng.rt().stage_device(in);
  ASSERT_EQ(cudaEventSynchronize(consumed.get()), cudaSuccess);
  std::vector<std::int32_t> staged(4);
  ex->copy_to_host(staged.data(), eng.rt().buffers().req_pool_index(), 16);
  EXPECT_EQ(staged, r.req_pool_index);
}

// run_round(depth, {wait_for, done}) over the owning executor's stream: the round waits on the
// device for the engine's producer (40 ms on another stream), so `done` is not complete when the
// call returns, and completes once the producer has.
TEST_F(CudaInterop, RunRoundWaitsForTheEnginesEventOnTheDevice) {
  std::mt19937_64 rng(test_seed());
  engine_stream producer;
  auto ex = make_cuda_executor();
  sim_engine eng(*ex, interop_config(), rng);
  eng.rt().capture();
  const host_round r = eng.random_round(rng, 5);
  eng.rt().stage(r.inputs());
  ex->synchronize();
  event_handle written(*ex), done(*ex);
  ASSERT_EQ(spin_then_write(producer.s, 40.0, nullptr, nullptr, 0), 0);
  ASSERT_EQ(cudaEventRecord(written.get(), producer.s), cudaSuccess);
  eng.rt().run_round(3, {written.get(), done.get()});
  EXPECT_EQ(cudaEventQuery(done.get()), cudaErrorNotReady) << "the round waited for nothing";
  (void)cudaGetLastError();
  ASSERT_EQ(cudaEventSynchronize(done.get()), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(written.get()), cudaSuccess);
}

// A device-depth round built over the legacy default stream (torch's default stream), which
// CUDA cannot capture: capture_device_depth_round captures on a private stream instead, and the
// round runs the staged depth.
TEST_F(CudaInterop, ADeviceDepthRoundIsCapturedOverTheLegacyStream) {
  std::mt19937_64 rng(test_seed());
  auto owner = make_cuda_executor();
  draft_config c = interop_config();
  c.device_steps = true;
  c.device_depth = true;
  sim_engine eng(*owner, c, rng);
  const std::int32_t bucket = 8;
  const std::unique_ptr<graph> body = eng.rt().capture_graph(bucket, 0);
  auto legacy = make_cuda_executor(nullptr);
  const std::unique_ptr<graph> round =
      capture_device_depth_round(*legacy, eng.rt().buffers(), bucket, *body);
  EXPECT_EQ(legacy->stream(), nullptr) << "the caller's stream is restored";
  const std::unique_ptr<graph_exec> exec = legacy->instantiate(*round);
  const host_round r = eng.random_round(rng, 7);
  round_inputs in = r.inputs();
  in.max_depth = 2;
  eng.rt().stage(in);
  owner->synchronize();
  legacy->launch_graph(*exec);
  legacy->synchronize();
  EXPECT_EQ(eng.rt().read_round_depth(), 2);
}

// A conditional body begun inside the engine's own capture, then abandoned: abort_capture ends
// the body capture and gives the executor the engine's stream back; the engine's capture is the
// engine's to end.
TEST_F(CudaInterop, AbortInsideTheEnginesCaptureRestoresItsStream) {
  engine_stream stream;
  auto ex = make_cuda_executor(stream.s);
  ASSERT_EQ(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal), cudaSuccess);
  (void)ex->begin_while(true);
  EXPECT_NE(ex->stream(), stream.s) << "the body is captured on an internal stream";
  ex->abort_capture();
  EXPECT_EQ(ex->stream(), stream.s);
  EXPECT_TRUE(ex->capturing()) << "the engine's capture is still open";
  cudaGraph_t g = nullptr;
  (void)cudaStreamEndCapture(stream.s, &g);
  if (g != nullptr) (void)cudaGraphDestroy(g);
  (void)cudaGetLastError();
  EXPECT_FALSE(ex->capturing());
}

TEST_F(CudaInterop, AStaleErrorLeftByTheEngineIsNotBlamedOnSpecgraph) {
  std::mt19937_64 rng(test_seed());
  auto ex = make_cuda_executor();
  sim_engine eng(*ex, interop_config(), rng);
  eng.rt().capture();
  void* p = nullptr;
  // A non-sticky error the engine leaves behind without clearing it.
  ASSERT_NE(cudaMalloc(&p, std::size_t{1} << 62), cudaSuccess);
  const host_round r = eng.random_round(rng, 3);
  EXPECT_NO_THROW(eng.rt().stage(r.inputs()));
  EXPECT_NO_THROW(eng.rt().run_round(3));
  EXPECT_NO_THROW(eng.rt().run_eager(0));
  EXPECT_NO_THROW(ex->synchronize());
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation)
      << "the engine's own error is left for the engine to read";
}

// Device time excludes host submission: the work is queued behind a blocking kernel. A slow
// host enqueue (30 ms of host work) around 5 ms of device work reads as ~5 ms of device time.
TEST_F(CudaInterop, TimeDeviceExcludesHostSubmission) {
  auto ex = make_cuda_executor();
  const device_timing t = ex->time_device([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    ASSERT_EQ(spin_then_write(ex->stream(), 5.0, nullptr, nullptr, 0), 0);
  });
  EXPECT_GE(t.submit_seconds, 0.030);
  EXPECT_GE(t.device_seconds, 0.004);
  EXPECT_LT(t.device_seconds, 0.020) << "host submission leaked into the device time";
}

TEST_F(CudaInterop, ExternalStreamExecutorPinsItsDevice) {
  engine_stream stream;
  auto ex = make_cuda_executor(stream.s);
  EXPECT_EQ(ex->stream(), stream.s);
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  if (count > 1) {
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);  // the engine thread moved on to another GPU
    device_buffer b(*ex, 64);                  // still allocated on the stream's device
    cudaPointerAttributes a{};
    ASSERT_EQ(cudaPointerGetAttributes(&a, b.data()), cudaSuccess);
    EXPECT_EQ(a.device, 0);
    int current = -1;
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, 1) << "the caller's current device is restored";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
}

#else

TEST_F(CudaInterop, OpsRecordIntoACaptureTheEngineBeginsInGlobalMode) {}
TEST_F(CudaInterop, StageReturnsWhileTheDeviceIsStillBusy) {}
TEST_F(CudaInterop, StageDeviceWaitsForTheProducersEvent) {}
TEST_F(CudaInterop, RunRoundWaitsForTheEnginesEventOnTheDevice) {}
TEST_F(CudaInterop, ADeviceDepthRoundIsCapturedOverTheLegacyStream) {}
TEST_F(CudaInterop, AbortInsideTheEnginesCaptureRestoresItsStream) {}
TEST_F(CudaInterop, AStaleErrorLeftByTheEngineIsNotBlamedOnSpecgraph) {}
TEST_F(CudaInterop, TimeDeviceExcludesHostSubmission) {}
TEST_F(CudaInterop, ExternalStreamExecutorPinsItsDevice) {}

#endif

}  // namespace
}  // namespace specgraph::testing
