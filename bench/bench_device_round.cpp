// The whole round as one graph per bucket (issue 31 item 6): K = 16 rounds per iteration from
// one starting state, two ways, in the same program run:
//   device_loop  launch_device_rounds(K) (K graph launches, no host work between them) and one
//                synchronize;
//   host_loop    the same K rounds driven from the host as an engine drives them today (per
//                round: stage, the draft steps, stage_verify, the verify graph, the tree copied
//                to the host, the library's host twins of acceptance, commit and next round,
//                stage_extend, the extend graph, the engine's table uploaded, the guard words
//                read: every round synchronises).
// Both are testing/device_round_driver.hpp's drivers, the ones tests/device_round_test.cpp checks
// against the independent references, over a draft_runtime with the toy forwards
// (testing/round_forward.hpp; the stop token never drawn, so no request finishes and every row
// stays in the batch). The state is restored outside the timed region before each iteration.
// Once per configuration (outside timing) the two loops must reach the same final seq_len,
// allocated_len, draft slots, req_to_token and ring head with every guard word clean, and each
// benchmark's last iteration is rerun and compared with that: a mismatch ends it with
// SkipWithError.
//
// Shapes: bucket 1, 4, 16, 64 (every row real); topk 1 and 4; page size 1 and 16; num_steps 5;
// D 8 (topk 1: D = num_steps + 1, a chain). Starting state: testing/device_round_start.hpp
// (committed lengths 1..20, seeded per configuration), the ring holding K rounds' worst case.
//
// Counters, per round (the executor's counters over the timed region / K):
//   launches_per_round (graph + eager kernel launches), graph_launches_per_round,
//   syncs_per_round (synchronize() calls + copies to the host, each of which blocks the host until
//   the stream drains, + event waits), copies_to_host_per_round, copies_to_device_per_round,
//   host_us_per_round (wall time of the host thread, the final synchronize included; on the host
//   executor the kernels are emulated on this thread, so it includes their work),
//   submit_us_per_round (device_loop: the time to return from launch_device_rounds).
// Time: on the host executor the wall time of the K rounds (manual time); on CUDA their event
// time, first op to last, with rounds_per_s = K / event time, gpu_busy_us_per_round (device_loop:
// the K rounds queued behind time_device's spinning kernel, so the GPU never waits for the host;
// host_loop: the sum of the per-round event spans of its two GPU phases, stage to verify and
// stage_extend to the table upload, host submission inside them included) and
// gpu_idle_us_per_round = (event time - busy) / K: the GPU waiting for the host (for host_loop a
// lower bound).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_support.hpp"
#include "bench/stream_timer.hpp"
#include "specgraph/plan.hpp"
#include "testing/device_round_driver.hpp"
#include "testing/device_round_start.hpp"

namespace specgraph::bench {
namespace {

using specgraph::testing::dr_record;
using specgraph::testing::dr_rig;
using specgraph::testing::dr_start;
using clock_type = std::chrono::steady_clock;

constexpr std::int32_t K = 16;
constexpr std::int32_t steps = 5;

draft_config round_config(std::int32_t bucket, std::int32_t topk, std::int32_t ps) {
  draft_config c;
  c.max_batch = bucket;
  c.buckets = {bucket};
  c.topk = topk;
  c.num_steps = steps;
  c.slot_stride = steps;
  c.page_size = ps;
  c.max_context_len = 512;
  c.pool_rows = bucket + 1;
  c.kv_slots = std::int64_t{1} << 22;
  c.verify_tokens = topk == 1 ? steps + 1 : 8;
  c.draft_extend = true;
  c.round_on_device = true;
  c.max_stop_tokens = 1;
  return c;
}

// "" when the two records' final state agrees, else what differs.
std::string differs(const dr_record& a, const dr_record& b) {
  if (a.seq_len != b.seq_len) return "seq_len";
  if (a.req_to_token != b.req_to_token) return "req_to_token";
  if (a.allocated_len != b.allocated_len) return "allocated_len";
  if (a.out_cache_loc != b.out_cache_loc) return "out_cache_loc";
  if (a.ring_head != b.ring_head) return "ring_head";
  if (a.stall != b.stall) return "stall";
  return "";
}

// One configuration's plan, starting state and the two rigs, built and checked once (the
// benchmark body runs more than once per benchmark) and shared by its two benchmarks.
struct fixture {
  dr_start start;
  std::unique_ptr<dr_rig> device, host;
  dr_record device_want, host_want;
  std::string error;  // the check's finding; empty when the loops agree
};

fixture build(executor& ex, std::int32_t bucket, std::int32_t topk, std::int32_t ps) {
  const draft_config cfg = round_config(bucket, topk, ps);
  const plan p = make_plan(cfg);
  std::mt19937_64 rng(20261203ULL + static_cast<std::uint64_t>(bucket * 100 + topk * 10 + ps));
  fixture f;
  f.start = specgraph::testing::make_start(p, bucket, K, rng);
  f.device = std::make_unique<dr_rig>(ex, cfg, f.start, -1);
  f.host = std::make_unique<dr_rig>(ex, cfg, f.start, -1);
  f.device->prepare_device();
  f.device_want = f.device->run_device(K, 0);
  f.host->prepare_host();
  f.host_want = f.host->run_host(K);
  std::string d = differs(f.device_want, f.host_want);
  std::int64_t grown = 0;
  for (std::int32_t r = 0; r < bucket; ++r) {
    grown += f.device_want.seq_len[static_cast<std::size_t>(r)] -
             f.start.seq_len[static_cast<std::size_t>(r)];
  }
  if (!d.empty()) {
    f.error = "device loop and host loop end with different " + d;
  } else if (f.host_want.guard_violations != 0) {
    f.error = "host loop guard violation: " + f.host_want.first_guard;
  } else if (f.device_want.stall != 0) {
    f.error = "the ring ran short (stall)";
  } else if (grown < static_cast<std::int64_t>(bucket) * K) {
    f.error = "the rounds committed less than one token per row and round";
  } else {
    for (const guard_word& g : f.device->rt.read_round_guards()) {
      if (g.violations != 0) f.error = "device loop guard violation: " + describe(g);
    }
  }
  return f;
}

// The cache, cleared at the end of main() while the shared executors still live.
std::map<std::tuple<std::string, int, int, int>, std::unique_ptr<fixture>>& cache() {
  static std::map<std::tuple<std::string, int, int, int>, std::unique_ptr<fixture>> c;
  return c;
}

fixture& fixture_for(executor& ex, const std::string& kind, std::int32_t bucket, std::int32_t topk,
                     std::int32_t ps) {
  auto& slot = cache()[std::make_tuple(kind, bucket, topk, ps)];
  if (!slot) slot = std::make_unique<fixture>(build(ex, bucket, topk, ps));
  return *slot;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct totals {
  executor_counters counts;
  double wall = 0, submit = 0, span = 0, busy = 0;
  void add(const executor_counters& d) {
    counts.graph_launches += d.graph_launches;
    counts.kernel_launches += d.kernel_launches;
    counts.synchronizations += d.synchronizations;
    counts.event_waits += d.event_waits;
    counts.copies_to_host += d.copies_to_host;
    counts.copies_to_device += d.copies_to_device;
  }
  void report(benchmark::State& state, bool cuda) const {
    const double rounds = static_cast<double>(K) * static_cast<double>(state.iterations());
    auto per = [rounds](double v) { return rounds > 0 ? v / rounds : 0.0; };
    const auto c = [](std::int64_t v) { return static_cast<double>(v); };
    state.counters["launches_per_round"] = per(c(counts.graph_launches + counts.kernel_launches));
    state.counters["graph_launches_per_round"] = per(c(counts.graph_launches));
    state.counters["syncs_per_round"] =
        per(c(counts.synchronizations + counts.copies_to_host + counts.event_waits));
    state.counters["copies_to_host_per_round"] = per(c(counts.copies_to_host));
    state.counters["copies_to_device_per_round"] = per(c(counts.copies_to_device));
    state.counters["host_us_per_round"] = per(1e6 * wall);
    if (submit > 0) state.counters["submit_us_per_round"] = per(1e6 * submit);
    if (cuda) {
      state.counters["rounds_per_s"] = span > 0 ? rounds / span : 0.0;
      state.counters["gpu_busy_us_per_round"] = per(1e6 * busy);
      state.counters["gpu_idle_us_per_round"] = per(1e6 * (span - busy));
      state.SetLabel("time: K = 16 rounds, CUDA event time");
    } else {
      state.SetLabel("time: K = 16 rounds, wall (host executor: kernels emulated on this thread)");
    }
  }
};

void device_loop(benchmark::State& state, const std::string& kind) {
  executor& ex = shared_executor(kind);
  fixture& f = fixture_for(ex, kind, static_cast<std::int32_t>(state.range(0)),
                           static_cast<std::int32_t>(state.range(1)),
                           static_cast<std::int32_t>(state.range(2)));
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  dr_rig& rig = *f.device;
  const bool cuda = kind == "cuda";
  std::unique_ptr<stream_timer> timer;
  if (cuda) timer = std::make_unique<stream_timer>(ex, 2);
  totals t;
  for (auto _ : state) {
    if (cuda) {  // the GPU's own time for the K rounds: all queued before it starts
      rig.restore_device(0);
      t.busy += ex.time_device([&] { rig.launch_rounds(K, 0); }).device_seconds;
    }
    rig.restore_device(0);
    ex.synchronize();
    const executor_counters before = ex.counters();
    const clock_type::time_point t0 = clock_type::now();
    if (cuda) timer->record(0);
    rig.launch_rounds(K, 0);
    if (cuda) timer->record(1);
    const double submit = seconds_since(t0);
    ex.synchronize();
    const double wall = seconds_since(t0);
    t.add(specgraph::testing::counters_since(before, ex.counters()));
    t.wall += wall;
    t.submit += submit;
    const double span = cuda ? timer->seconds(0, 1) : wall;
    t.span += span;
    state.SetIterationTime(span);
  }
  t.report(state, cuda);
  rig.restore_device(0);
  rig.launch_rounds(K, 0);
  const std::string d = differs(rig.read_device(K), f.device_want);
  if (!d.empty())
    state.SkipWithError(("a rerun of the device loop ends with another " + d).c_str());
}

void host_loop(benchmark::State& state, const std::string& kind) {
  executor& ex = shared_executor(kind);
  fixture& f = fixture_for(ex, kind, static_cast<std::int32_t>(state.range(0)),
                           static_cast<std::int32_t>(state.range(1)),
                           static_cast<std::int32_t>(state.range(2)));
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  dr_rig& rig = *f.host;
  const bool cuda = kind == "cuda";
  std::unique_ptr<stream_timer> timer;
  if (cuda) timer = std::make_unique<stream_timer>(ex, 4 * K);
  std::function<void(int, int)> mark;
  if (cuda) mark = [&timer](int k, int phase) { timer->record(4 * k + phase); };
  totals t;
  for (auto _ : state) {
    rig.restore_host();
    ex.synchronize();
    const executor_counters before = ex.counters();
    const clock_type::time_point t0 = clock_type::now();
    for (std::int32_t k = 0; k < K; ++k) rig.host_round(k, false, mark);
    ex.synchronize();
    const double wall = seconds_since(t0);
    t.add(specgraph::testing::counters_since(before, ex.counters()));
    t.wall += wall;
    double span = wall;
    if (cuda) {
      span = timer->seconds(0, 4 * K - 1);
      for (int k = 0; k < K; ++k) {
        t.busy += timer->seconds(4 * k, 4 * k + 1) + timer->seconds(4 * k + 2, 4 * k + 3);
      }
    }
    t.span += span;
    state.SetIterationTime(span);
  }
  t.report(state, cuda);
  rig.restore_host();
  for (std::int32_t k = 0; k < K; ++k) rig.host_round(k, false);
  const dr_record got = rig.finish_host();
  const std::string d = differs(got, f.host_want);
  if (!d.empty()) state.SkipWithError(("a rerun of the host loop ends with another " + d).c_str());
  if (got.guard_violations != 0) state.SkipWithError(got.first_guard.c_str());
}

}  // namespace
}  // namespace specgraph::bench

int main(int argc, char** argv) {
  using namespace specgraph::bench;
  load_modules_eagerly();
  // One registration per configuration and loop, the two loops of a configuration next to each
  // other: on a shared machine they then run under the same load.
  for (const std::string& kind : available_executors()) {
    for (std::int64_t bucket : {1, 4, 16, 64}) {
      for (std::int64_t topk : {1, 4}) {
        for (std::int64_t ps : {1, 16}) {
          for (const bool device : {true, false}) {
            auto* b = benchmark::RegisterBenchmark(
                ("device_round/" + std::string(device ? "device_loop" : "host_loop") + "/" + kind)
                    .c_str(),
                guarded([kind, device](benchmark::State& s) {
                  if (device) {
                    device_loop(s, kind);
                  } else {
                    host_loop(s, kind);
                  }
                }));
            b->ArgNames({"bucket", "topk", "page_size"});
            b->Args({bucket, topk, ps});
            b->UseManualTime()->Unit(benchmark::kMicrosecond);
          }
        }
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  cache().clear();
  return 0;
}
