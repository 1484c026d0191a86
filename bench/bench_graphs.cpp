// Graph lifecycle (capture of one graph, instantiate, update, upload, capture of the whole
// table) and replay costs: the host-side cost of stage() + replay() that a serving loop pays on
// its CPU thread, and the device time of a replayed step against the same kernels launched
// eagerly. Graphs here hold the metadata kernels only (no engine forward); bench_throughput runs
// the full simulated forward.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#if defined(SPECGRAPH_HAS_CUDA)
#include <cuda_runtime.h>
#endif

#include "bench/bench_support.hpp"
#include "specgraph/forwarding_executor.hpp"
#include "specgraph/runtime.hpp"
#include "testing/branch_layout.hpp"

namespace specgraph::bench {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

constexpr std::int32_t kTopk = 8, kSteps = 5, kPage = 16, kContext = 4096, kMaxBatch = 256;

// The ways to hold a round in graphs (draft_config): a graph per step, plus one whole-round graph,
// one graph per bucket with a device step counter, plus one device-depth round graph.
enum { per_step = 0, round_graphs = 1, device_steps = 2, device_depth = 3, graph_modes = 4 };
const char* mode_name(int m) {
  switch (m) {
    case round_graphs: return "round_graphs";
    case device_steps: return "device_steps";
    case device_depth: return "device_depth";
    default: return "per_step";
  }
}

// An executor that records and instantiates like the host executor but whose graph launches and
// pinned-to-device copies (device work) do nothing: what remains of stage() + replay() is the
// host's own work, the bookkeeping and the copy into the pinned slot.
class null_kernel_executor final : public forwarding_executor {
 public:
  null_kernel_executor() : forwarding_executor(make_host_executor()) {}
  const char* name() const noexcept override { return "host-null-kernels"; }
  void launch_graph(graph_exec&) override { ++counters_.graph_launches; }
  // The pinned-to-device copy is the device's work (an asynchronous DMA on CUDA), not the
  // host's: it is not charged to the host here either.
  void copy_from_pinned(void*, const void*, std::size_t) override { ++counters_.copies_to_device; }
};

executor& bench_executor(const std::string& kind) {
  static null_kernel_executor null_host;
  return kind == "host-null-kernels" ? static_cast<executor&>(null_host) : shared_executor(kind);
}

// A runtime at the default table (buckets up to 256, topk 8, 5 steps) and a pool of rounds.
struct fixture {
  device_buffer req_to_token;
  std::unique_ptr<draft_runtime> rt;
  std::vector<specgraph::testing::branch_round> rounds;  // one per bucket size asked for
  std::vector<std::vector<std::int32_t>> pool_index;

  fixture(executor& ex, bool capture, int graph_mode = per_step) {
    draft_config c;
    c.max_batch = kMaxBatch;
    c.topk = kTopk;
    c.num_steps = kSteps;
    c.page_size = kPage;
    c.max_context_len = kContext;
    c.pool_rows = kMaxBatch + 1;
    c.kv_slots = std::int64_t{1} << 30;
    c.round_graphs = graph_mode == round_graphs;
    c.device_steps = graph_mode == device_steps || graph_mode == device_depth;
    c.device_depth = graph_mode == device_depth;
    std::vector<std::int32_t> rtt(static_cast<std::size_t>(c.pool_rows) * kContext);
    for (std::size_t i = 0; i < rtt.size(); ++i) rtt[i] = static_cast<std::int32_t>(i % (1 << 24));
    req_to_token = device_buffer(ex, rtt.size() * 4);
    ex.copy_to_device(req_to_token.data(), rtt.data(), rtt.size() * 4);
    rt = std::make_unique<draft_runtime>(ex, c, engine_tables{req_to_token.as<std::int32_t>()});
    if (capture) rt->capture();
  }

  round_inputs inputs(std::int32_t batch) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(batch));
    rounds.push_back(
        specgraph::testing::make_branch_round(rng, batch, kTopk, kSteps, kPage, kContext));
    pool_index.emplace_back();
    for (std::int32_t r = 0; r < batch; ++r) pool_index.back().push_back(1 + r);
    round_inputs in;
    in.batch = batch;
    in.req_pool_index = pool_index.back().data();
    in.seq_len = rounds.back().seq_len.data();
    in.out_cache_loc = rounds.back().cache_loc.data();
    return in;
  }
};

fixture& shared_fixture(const std::string& kind, int graph_mode = per_step) {
  // Never destroyed: the executors they allocate from are function-local statics too, and
  // exit-time destruction order between them is not ours to choose.
  static auto* fixtures = new std::unique_ptr<fixture>[3 * graph_modes];
  const int i = (kind == "host" ? 0 : kind == "cuda" ? 1 : 2) * graph_modes + graph_mode;
  if (!fixtures[i]) fixtures[i] = std::make_unique<fixture>(bench_executor(kind), true, graph_mode);
  return *fixtures[i];
}

void capture_one(benchmark::State& state, const std::string& kind) {
  fixture& f = shared_fixture(kind);
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto step = static_cast<std::int32_t>(state.range(1));
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    auto g = f.rt->capture_graph(bucket, step);
    state.SetIterationTime(since(t0));
    benchmark::DoNotOptimize(g);
  }
}

void instantiate(benchmark::State& state, const std::string& kind) {
  executor& ex = bench_executor(kind);
  fixture& f = shared_fixture(kind);
  auto g = f.rt->capture_graph(static_cast<std::int32_t>(state.range(0)),
                               static_cast<std::int32_t>(state.range(1)));
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    auto exec = ex.instantiate(*g);
    state.SetIterationTime(since(t0));
    benchmark::DoNotOptimize(exec);
  }
}

void update(benchmark::State& state, const std::string& kind) {
  executor& ex = bench_executor(kind);
  fixture& f = shared_fixture(kind);
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto step = static_cast<std::int32_t>(state.range(1));
  auto g = f.rt->capture_graph(bucket, step);
  auto g2 = f.rt->capture_graph(bucket, step);
  auto exec = ex.instantiate(*g);
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    const bool ok = ex.update(*exec, *g2);
    state.SetIterationTime(since(t0));
    if (!ok) state.SkipWithError("update refused an identical topology");
  }
}

void upload(benchmark::State& state, const std::string& kind) {
  executor& ex = bench_executor(kind);
  fixture& f = shared_fixture(kind);
  auto g = f.rt->capture_graph(static_cast<std::int32_t>(state.range(0)),
                               static_cast<std::int32_t>(state.range(1)));
  auto exec = ex.instantiate(*g);
  device_clock clock;
  for (auto _ : state) state.SetIterationTime(clock(ex, [&] { ex.upload(*exec); }));
  clock.report(state);
}

// Device memory in use (CUDA), to see what the captured graphs hold; 0 elsewhere.
double device_bytes_in_use() {
#if defined(SPECGRAPH_HAS_CUDA)
  if (cuda_available()) {
    std::size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) {
      return static_cast<double>(total - free_bytes);
    }
  }
#endif
  return 0;
}

// Capture + instantiate of the whole default table (51 buckets; 5 steps each, or one graph per
// bucket with a device step counter, plus the round graphs where the mode has them) on a fresh
// runtime: time, graph count, nodes, and the device memory the graphs took.
void capture_table(benchmark::State& state, const std::string& kind, int graph_mode) {
  executor& ex = bench_executor(kind);
  std::int32_t graphs = 0;
  std::size_t nodes = 0;
  double graph_bytes = 0;
  for (auto _ : state) {
    fixture f(ex, false, graph_mode);
    ex.synchronize();
    const double before = device_bytes_in_use();
    const auto t0 = clock_type::now();
    const capture_report report = f.rt->capture();
    state.SetIterationTime(since(t0));
    ex.synchronize();
    graph_bytes = device_bytes_in_use() - before;
    graphs = report.graphs;
    nodes = 0;
    for (const graph_timing& t : report.per_graph) nodes += t.nodes;
  }
  state.counters["graphs"] = graphs;
  state.counters["graph_nodes"] = static_cast<double>(nodes);
  state.counters["graph_device_bytes"] = graph_bytes;
  state.SetLabel(mode_name(graph_mode));
}

// Host cost of one round's stage() and each step's replay(), as the serving loop's CPU thread
// pays it. On "host-null-kernels" graph launches do nothing, leaving the runtime's bookkeeping;
// on "cuda" replay enqueues cudaGraphLaunch (the stream is drained every 32 rounds, untimed).
void stage_and_replay(benchmark::State& state, const std::string& kind, int graph_mode) {
  executor& ex = bench_executor(kind);
  fixture& f = shared_fixture(kind, graph_mode);
  const round_inputs in = f.inputs(static_cast<std::int32_t>(state.range(0)));
  std::int64_t rounds = 0;
  double stage_s = 0, replay_s = 0;
  // The fastest window of 32 rounds: preemption on a shared machine only adds time, so the
  // minimum compares two builds where the mean drifts with the load.
  double window_s = 0, min_window_s = 0;
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    f.rt->stage(in);
    const auto t1 = clock_type::now();
    if (graph_mode == device_depth) {
      f.rt->run_round_on_device();  // one launch; the device decides the depth
    } else {
      f.rt->run_round(kSteps);  // kSteps launches, or one with whole-round graphs
    }
    const auto t2 = clock_type::now();
    stage_s += std::chrono::duration<double>(t1 - t0).count();
    replay_s += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(std::chrono::duration<double>(t2 - t0).count());
    window_s += std::chrono::duration<double>(t2 - t0).count();
    if (++rounds % 32 == 0) {
      if (rounds == 32 || window_s < min_window_s) min_window_s = window_s;
      window_s = 0;
      state.PauseTiming();
      ex.synchronize();
      state.ResumeTiming();
    }
  }
  ex.synchronize();
  const double n = static_cast<double>(rounds);
  // Per draft step: stage() amortised over the round's steps plus one replay().
  state.counters["us_per_step"] = 1e6 * (stage_s + replay_s) / (n * kSteps);
  state.counters["us_stage"] = 1e6 * stage_s / n;
  state.counters["us_replay"] = 1e6 * replay_s / (n * kSteps);
  state.counters["us_round_replay"] = 1e6 * replay_s / n;
  // 0 when fewer than 32 rounds ran.
  state.counters["us_per_step_min"] = 1e6 * min_window_s / (32.0 * kSteps);
  state.SetLabel(mode_name(graph_mode));
}

// Device time of a whole round (kSteps steps, staged untimed) in each graph mode, same tables: the
// device-depth round (one launch, a WHILE node deciding each next step) against per-step replay
// (kSteps launches), a whole-round graph and the device step counter.
void round_device_time(benchmark::State& state, const std::string& kind, int graph_mode) {
  executor& ex = bench_executor(kind);
  fixture& f = shared_fixture(kind, graph_mode);
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const round_inputs in = f.inputs(bucket);
  device_clock clock;
  for (auto _ : state) {
    state.PauseTiming();
    f.rt->stage(in);
    ex.synchronize();
    state.ResumeTiming();
    state.SetIterationTime(clock(ex, [&] {
      if (graph_mode == device_depth) {
        f.rt->run_round_on_device();
      } else {
        f.rt->run_round(kSteps);
      }
    }));
  }
  clock.report(state);
  state.SetLabel(mode_name(graph_mode));
  state.SetItemsProcessed(state.iterations() * bucket * kTopk * kSteps);
}

// Device time of step s replayed as a graph vs the same kernels launched eagerly.
void step_device_time(benchmark::State& state, const std::string& kind, bool eager) {
  executor& ex = bench_executor(kind);
  fixture& f = shared_fixture(kind);
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto step = static_cast<std::int32_t>(state.range(1));
  const round_inputs in = f.inputs(bucket);
  device_clock clock;
  for (auto _ : state) {
    state.PauseTiming();
    f.rt->stage(in);
    for (std::int32_t s = 0; s < step; ++s) f.rt->replay(s);
    ex.synchronize();
    state.ResumeTiming();
    state.SetIterationTime(clock(ex, [&] {
      if (eager) {
        f.rt->run_eager(step);
      } else {
        f.rt->replay(step);
      }
    }));
  }
  clock.report(state);
  state.SetItemsProcessed(state.iterations() * bucket * kTopk);
}

}  // namespace
}  // namespace specgraph::bench

int main(int argc, char** argv) {
  using namespace specgraph::bench;
  using benchmark::RegisterBenchmark;
  load_modules_eagerly();
  std::vector<std::string> kinds = available_executors();
  for (const std::string& kind : kinds) {
    const std::vector<std::vector<std::int64_t>> one = {{1, 64, 256}, {0, 4}};
    RegisterBenchmark(("lifecycle/capture_one/" + kind).c_str(),
                      guarded([kind](benchmark::State& s) { capture_one(s, kind); }))
        ->ArgNames({"bucket", "step"})
        ->ArgsProduct(one)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    RegisterBenchmark(("lifecycle/instantiate/" + kind).c_str(),
                      guarded([kind](benchmark::State& s) { instantiate(s, kind); }))
        ->ArgNames({"bucket", "step"})
        ->ArgsProduct(one)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    RegisterBenchmark(("lifecycle/update/" + kind).c_str(),
                      guarded([kind](benchmark::State& s) { update(s, kind); }))
        ->ArgNames({"bucket", "step"})
        ->ArgsProduct(one)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    RegisterBenchmark(("lifecycle/upload/" + kind).c_str(),
                      guarded([kind](benchmark::State& s) { upload(s, kind); }))
        ->ArgNames({"bucket", "step"})
        ->ArgsProduct(one)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    for (const int mode : {per_step, round_graphs, device_steps, device_depth}) {
      RegisterBenchmark(
          ("lifecycle/capture_table/" + std::string(mode_name(mode)) + "/" + kind).c_str(),
          guarded([kind, mode](benchmark::State& s) { capture_table(s, kind, mode); }))
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
    for (const bool eager : {false, true}) {
      RegisterBenchmark(
          ("replay/step_device_time/" + std::string(eager ? "eager/" : "graph/") + kind).c_str(),
          guarded([kind, eager](benchmark::State& s) { step_device_time(s, kind, eager); }))
          ->ArgNames({"bucket", "step"})
          ->ArgsProduct({{1, 8, 64, 256}, {0, 4}})
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (const std::string& kind : kinds) {
    for (const int mode : {per_step, round_graphs, device_steps, device_depth}) {
      RegisterBenchmark(
          ("replay/round_device_time/" + std::string(mode_name(mode)) + "/" + kind).c_str(),
          guarded([kind, mode](benchmark::State& s) { round_device_time(s, kind, mode); }))
          ->ArgNames({"bucket"})
          ->Arg(1)
          ->Arg(64)
          ->Arg(256)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  kinds.front() = "host-null-kernels";  // host bookkeeping without the kernels
  for (const std::string& kind : kinds) {
    for (const int mode : {per_step, round_graphs, device_steps, device_depth}) {
      RegisterBenchmark(
          ("replay/stage_and_round/" + std::string(mode_name(mode)) + "/" + kind).c_str(),
          guarded([kind, mode](benchmark::State& s) { stage_and_replay(s, kind, mode); }))
          ->ArgNames({"bucket"})
          ->Arg(1)
          ->Arg(8)
          ->Arg(64)
          ->Arg(256)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
