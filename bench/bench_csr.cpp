// The CSR draft-decode indices (docs/csr.md): one step and a whole round (every step in one
// launch) on every available executor, with the entries and bytes each launch writes. CUDA is
// timed with events (manual time, host submission excluded); the host executor by wall clock.
// Inputs: `bucket` requests, request r at seq_len = ctx / 2 + (r * 2654435761) % (ctx / 2 - 63)
// (spread over [ctx / 2, ctx - 64], a closed form so that bench/peer_csr_torch.py builds the very
// same case), pool row r + 1, req_to_token[i] = i, topk branches, page size 16, 5 draft steps,
// int32 indices sized exactly (C_s = rows * (ctx + s + 1)).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "specgraph/kv_indices.hpp"

namespace specgraph::bench {
namespace {

constexpr std::int32_t steps = 5, ps = 16;

template <class T>
device_buffer upload(executor& ex, const std::vector<T>& v) {
  device_buffer b(ex, std::max<std::size_t>(1, v.size()) * sizeof(T));
  if (!v.empty()) ex.copy_to_device(b.data(), v.data(), v.size() * sizeof(T));
  return b;
}

void csr_benchmark(benchmark::State& state, const std::string& kind) {
  executor& ex = shared_executor(kind);
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto topk = static_cast<std::int32_t>(state.range(1));
  const auto ctx = static_cast<std::int32_t>(state.range(2));
  const bool round = state.range(3) != 0;
  // Rows carry headroom for the branch regions: ctx + topk * ps * 2 + steps positions.
  const std::int64_t width = ctx + static_cast<std::int64_t>(topk) * ps * 2 + steps;
  std::vector<std::int32_t> rtt(static_cast<std::size_t>((bucket + 1) * width));
  for (std::size_t i = 0; i < rtt.size(); ++i) rtt[i] = static_cast<std::int32_t>(i);
  std::vector<std::int32_t> pool, seq;
  std::int64_t kept = 0;
  for (std::int32_t r = 0; r < bucket; ++r) {
    pool.push_back(r + 1);
    seq.push_back(
        static_cast<std::int32_t>(ctx / 2 + (r * std::int64_t{2654435761}) % (ctx / 2 - 63)));
    kept += seq.back();
  }
  const std::int64_t rows = static_cast<std::int64_t>(bucket) * topk;
  std::int64_t cells = 0;
  for (std::int32_t s = 0; s < steps; ++s) cells += kv_indices_step_capacity(rows, ctx, s);
  device_buffer d_rtt = upload(ex, rtt), d_pool = upload(ex, pool), d_seq = upload(ex, seq);
  device_buffer indptr(ex, static_cast<std::size_t>(steps * (rows + 1)) * 4);
  device_buffer indices(ex, static_cast<std::size_t>(cells) * 4);
  device_buffer guards(ex, steps * sizeof(guard_word));
  device_buffer scratch(ex, static_cast<std::size_t>(kv_indices_scratch_ints(bucket)) * 4);
  ex.fill_bytes(guards.data(), 0, steps * sizeof(guard_word));
  kv_indices_params p;
  p.req_to_token = d_rtt.as<std::int32_t>();
  p.req_to_token_stride = width;
  p.pool_rows = bucket + 1;
  p.req_pool_index = d_pool.as<std::int32_t>();
  p.seq_len = d_seq.as<std::int32_t>();
  p.batch = bucket;
  p.topk = topk;
  p.num_steps = steps;
  p.page_size = ps;
  p.max_seq_len = ctx;
  p.first_step = round ? 0 : steps - 1;
  p.step_count = round ? steps : 1;
  p.kv_indptr = indptr.as<std::int32_t>();
  p.kv_indptr_stride = rows + 1;
  p.kv_indices_i32 = indices.as<std::int32_t>();
  p.capacity = static_cast<std::int32_t>(kv_indices_step_capacity(rows, ctx, p.first_step));
  p.capacity_growth = static_cast<std::int32_t>(rows);
  p.guard = guards.as<guard_word>();
  p.scratch = scratch.as<std::int32_t>();
  device_clock clock;
  for (auto _ : state) {
    state.SetIterationTime(clock(ex, [&] { launch_draft_kv_indices(ex, p); }));
  }
  clock.report(state);
  // Entries written: topk * sum(seq_len) + rows * d per step launched (no window).
  std::int64_t entries = 0;
  for (std::int32_t s = p.first_step; s < p.first_step + p.step_count; ++s) {
    entries += topk * kept + rows * (s + 1);
  }
  const std::int64_t bytes = entries * 4 + p.step_count * (rows + 1) * 4;
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["entries"] = static_cast<double>(entries);
  state.counters["bytes_written"] = static_cast<double>(bytes);
  state.counters["launch_cells"] =
      static_cast<double>(p.step_count * rows * (ctx + p.first_step + p.step_count));
}

}  // namespace
}  // namespace specgraph::bench

int main(int argc, char** argv) {
  using namespace specgraph::bench;
  load_modules_eagerly();
  for (const std::string& kind : available_executors()) {
    benchmark::RegisterBenchmark(("csr/" + kind).c_str(),
                                 guarded([kind](benchmark::State& s) { csr_benchmark(s, kind); }))
        ->ArgNames({"bucket", "topk", "ctx", "round"})
        ->ArgsProduct({{8, 64}, {1, 8}, {1024, 4096}, {0, 1}})
        ->Args({256, 8, 4096, 0})  // the GPU check's largest bucket (docs/gpu-check.md)
        ->Args({256, 8, 4096, 1})
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
