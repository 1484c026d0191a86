// Bytes copied per round into the static inputs, before and after inputs read in place
// (engine_inputs.hpp; docs/engines.md "Inputs read in place"): a runtime at the default table
// (buckets up to 256, topk 8, 5 steps, page 16, context 4096), per-step graphs, one round of
// `batch` requests per iteration, in three ways:
//   staged_host    draft_runtime::stage(): host inputs through the pinned ring (two copies)
//   staged_device  draft_runtime::stage_device(): the engine's device tensors copied by a kernel
//   in_place       bind_inputs() once, begin_round(bucket): the graphs read the engine's tensors
// Counters (per round, from executor_counters, which count every host-to-device copy and every
// byte stage_round's kernel writes):
//   bytes_to_device      copy_to_device + copy_from_pinned bytes
//   input_bytes_staged   device-to-device input staging bytes
//   bytes_copied         their sum (in_place: 0)
//   us_round             wall time of the round's host calls and its replays (the host
//                        executor runs the kernels inline: this is the host's whole round)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "specgraph/engine_inputs.hpp"
#include "specgraph/runtime.hpp"
#include "testing/branch_layout.hpp"

namespace specgraph::bench {
namespace {

constexpr std::int32_t kTopk = 8, kSteps = 5, kPage = 16, kContext = 4096, kMaxBatch = 256;
enum { staged_host = 0, staged_device = 1, in_place = 2 };
const char* way_name(int w) {
  return w == staged_host ? "staged_host" : w == staged_device ? "staged_device" : "in_place";
}

void input_bytes(benchmark::State& state, const std::string& kind, int way) {
  executor& ex = shared_executor(kind);
  const auto batch = static_cast<std::int32_t>(state.range(0));
  draft_config c;
  c.max_batch = kMaxBatch;
  c.topk = kTopk;
  c.num_steps = kSteps;
  c.page_size = kPage;
  c.max_context_len = kContext;
  c.pool_rows = kMaxBatch + 1;
  c.kv_slots = std::int64_t{1} << 30;
  std::vector<std::int32_t> rtt(static_cast<std::size_t>(c.pool_rows) * kContext);
  for (std::size_t i = 0; i < rtt.size(); ++i) rtt[i] = static_cast<std::int32_t>(i % (1 << 24));
  device_buffer req_to_token(ex, rtt.size() * 4);
  ex.copy_to_device(req_to_token.data(), rtt.data(), rtt.size() * 4);
  draft_runtime rt(ex, c, engine_tables{req_to_token.as<std::int32_t>()});

  // The round, as the engine holds it: int64 [max_bucket] indices and [max_bucket][topk][S]
  // slots on the device (SGLang's static inputs), its padding rows 0 / 1 / 0.
  std::mt19937_64 rng(static_cast<std::uint64_t>(batch));
  const testing::branch_round r =
      testing::make_branch_round(rng, batch, kTopk, kSteps, kPage, kContext);
  const std::int32_t max_bucket = rt.plan().max_bucket();
  const std::int32_t bucket = rt.plan().round_bucket(batch, 0);
  std::vector<std::int64_t> pool(static_cast<std::size_t>(max_bucket), 0);
  std::vector<std::int64_t> seq(static_cast<std::size_t>(max_bucket), 1);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(max_bucket) * kTopk * kSteps, 0);
  std::vector<std::int32_t> pool32(static_cast<std::size_t>(batch));
  for (std::int32_t i = 0; i < batch; ++i) {
    pool[static_cast<std::size_t>(i)] = 1 + i;
    pool32[static_cast<std::size_t>(i)] = 1 + i;
    seq[static_cast<std::size_t>(i)] = r.seq_len[static_cast<std::size_t>(i)];
  }
  std::copy(r.cache_loc.begin(), r.cache_loc.end(), slots.begin());
  device_buffer d_pool(ex, pool.size() * 8), d_seq(ex, seq.size() * 8),
      d_slots(ex, slots.size() * 8);
  ex.copy_to_device(d_pool.data(), pool.data(), pool.size() * 8);
  ex.copy_to_device(d_seq.data(), seq.data(), seq.size() * 8);
  ex.copy_to_device(d_slots.data(), slots.data(), slots.size() * 8);
  if (way == in_place) {
    engine_inputs in;
    in.req_pool_index = {d_pool.data(), index_type::int64, 1};
    in.seq_len = {d_seq.data(), index_type::int64, 1};
    in.out_cache_loc = {d_slots.data(), index_type::int64, kTopk * kSteps, kSteps, 1, kSteps};
    rt.bind_inputs(in);
  }
  rt.capture();
  round_inputs host_in;
  host_in.batch = batch;
  host_in.req_pool_index = pool32.data();
  host_in.seq_len = r.seq_len.data();
  host_in.out_cache_loc = r.cache_loc.data();
  device_round_inputs device_in;
  device_in.batch = batch;
  device_in.req_pool_index = d_pool.as<std::int64_t>();
  device_in.seq_len = d_seq.as<std::int64_t>();
  device_in.out_cache_loc = d_slots.as<std::int64_t>();
  ex.synchronize();

  const executor_counters before = ex.counters();
  std::int64_t rounds = 0;
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    if (way == staged_host) rt.stage(host_in);
    if (way == staged_device) rt.stage_device(device_in);
    if (way == in_place) rt.begin_round(bucket);
    rt.run_round(kSteps);
    ex.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    seconds += s;
    ++rounds;
  }
  const executor_counters after = ex.counters();
  const double n = rounds > 0 ? static_cast<double>(rounds) : 1.0;
  const double h2d = static_cast<double>(after.bytes_to_device - before.bytes_to_device) / n;
  const double d2d = static_cast<double>(after.input_bytes_staged - before.input_bytes_staged) / n;
  state.counters["bytes_to_device"] = h2d;
  state.counters["input_bytes_staged"] = d2d;
  state.counters["bytes_copied"] = h2d + d2d;
  state.counters["us_round"] = 1e6 * seconds / n;
  state.counters["bucket"] = bucket;
  state.SetLabel(way_name(way));
}

}  // namespace
}  // namespace specgraph::bench

int main(int argc, char** argv) {
  using namespace specgraph::bench;
  load_modules_eagerly();
  for (const std::string& kind : available_executors()) {
    for (const int way : {staged_host, staged_device, in_place}) {
      auto* b = benchmark::RegisterBenchmark(
          ("input_bytes/" + std::string(way_name(way)) + "/" + kind).c_str(),
          guarded([kind, way](benchmark::State& s) { input_bytes(s, kind, way); }));
      b->ArgNames({"batch"})->UseManualTime()->Unit(benchmark::kMicrosecond);
      for (const std::int64_t batch : {1, 64, 256}) b->Args({batch});
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
