// Throughput per spec step of the `specgraph run` workload (simulated engine, two-pass paged
// attention forward): draft tokens per second of step s at several buckets, graph replay vs the
// same kernels launched eagerly. Each measurement is one step's device time; every request has a
// 512-token prefix so buckets compare.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "bench/bench_support.hpp"
#include "tools/sim/sim_engine.hpp"

namespace specgraph::bench {
namespace {

sim::sim_engine& engine_for(const std::string& kind, std::int32_t bucket) {
  // Never destroyed (see bench_graphs.cpp): engines must not outlive their executor at exit.
  static auto* engines =
      new std::map<std::pair<std::string, std::int32_t>, std::unique_ptr<sim::sim_engine>>();
  auto& slot = (*engines)[{kind, bucket}];
  if (!slot) {
    sim::sim_options o;  // the `specgraph run` defaults, at a fixed batch
    o.max_batch = bucket;
    o.min_batch = bucket;
    o.executor = kind;
    o.verify = sim::sim_options::verify_mode::none;
    o.replace_probability = 0;
    o.min_context = o.max_context / 2;  // every request at context 512: comparable buckets
    o.max_context = o.min_context;
    slot = std::make_unique<sim::sim_engine>(shared_executor(kind), o);
    slot->capture();
  }
  return *slot;
}

void draft_step(benchmark::State& state, const std::string& kind, bool eager) {
  executor& ex = shared_executor(kind);
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto step = static_cast<std::int32_t>(state.range(1));
  sim::sim_engine& engine = engine_for(kind, bucket);
  const std::int32_t topk = engine.options().topk;
  device_clock clock;
  for (auto _ : state) {
    state.PauseTiming();
    engine.begin_round(bucket);
    for (std::int32_t s = 0; s < step; ++s) engine.step(s, eager);
    ex.synchronize();
    state.ResumeTiming();
    state.SetIterationTime(clock(ex, [&] { engine.step(step, eager); }));
    state.PauseTiming();
    engine.end_round();
    state.ResumeTiming();
  }
  clock.report(state);
  state.SetItemsProcessed(state.iterations() * bucket * topk);  // items/s = draft tokens/s
}

}  // namespace
}  // namespace specgraph::bench

int main(int argc, char** argv) {
  using namespace specgraph::bench;
  load_modules_eagerly();
  for (const std::string& kind : available_executors()) {
    const std::vector<std::int64_t> buckets =
        kind == "cuda" ? std::vector<std::int64_t>{1, 8, 32, 64, 128, 256}
                       : std::vector<std::int64_t>{1, 8, 32};
    for (const bool eager : {false, true}) {
      benchmark::RegisterBenchmark(
          ("draft_step/" + std::string(eager ? "eager/" : "graph/") + kind).c_str(),
          guarded([kind, eager](benchmark::State& s) { draft_step(s, kind, eager); }))
          ->ArgNames({"bucket", "step"})
          ->ArgsProduct({buckets, {0, 1, 2, 3, 4}})
          ->UseManualTime()
          // A fixed count: each iteration also prepares a round (untimed, milliseconds of host
          // work), so letting manual time drive the count would take minutes on a GPU.
          ->Iterations(20)
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
