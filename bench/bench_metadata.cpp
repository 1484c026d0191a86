// Metadata kernels per draft step: the fused expand page table against the multi-pass baseline
// (same run, same inputs), the prefix metadata and the sparse stage staging; on every available
// executor. CUDA is timed with events (manual time); the host executor by wall clock.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "bench/multipass_baseline.hpp"
#include "specgraph/metadata.hpp"
#include "testing/branch_layout.hpp"

namespace specgraph::bench {
namespace {

template <class T>
device_buffer upload(executor& ex, const std::vector<T>& v) {
  device_buffer b(ex, std::max<std::size_t>(1, v.size()) * sizeof(T));
  if (!v.empty()) ex.copy_to_device(b.data(), v.data(), v.size() * sizeof(T));
  return b;
}

struct expand_setup {
  std::int32_t rows = 0, d = 0;
  device_buffer cache_loc, lpl, table, seqlen, guard, lpl_rows, pages, is_new, pos;
  expand_params fused;
  multipass_buffers multi{};
};

// A draft round of `bucket` requests laid out as engines lay it out, 5 steps, metadata for step.
expand_setup make_expand(executor& ex, std::int32_t bucket, std::int32_t topk, std::int32_t ps,
                         std::int32_t step) {
  constexpr std::int32_t steps = 5;
  std::mt19937_64 rng(42);
  const auto round = specgraph::testing::make_branch_round(rng, bucket, topk, steps, ps, 4096);
  expand_setup s;
  s.rows = bucket * topk;
  s.d = step + 1;
  const auto rows = static_cast<std::size_t>(s.rows), d = static_cast<std::size_t>(s.d);
  s.cache_loc = upload(ex, round.cache_loc);
  s.lpl = upload(ex, round.last_page_len);
  s.table = device_buffer(ex, rows * (d + 1) * 4);
  s.seqlen = device_buffer(ex, rows * 4);
  s.guard = device_buffer(ex, sizeof(guard_word));
  ex.fill_bytes(s.guard.data(), 0, sizeof(guard_word));
  s.lpl_rows = device_buffer(ex, rows * 4);
  s.pages = device_buffer(ex, rows * d * 8);
  s.is_new = device_buffer(ex, rows * d * 4);
  s.pos = device_buffer(ex, rows * d * 4);
  expand_params& p = s.fused;
  p.cache_loc = s.cache_loc.as<std::int64_t>();
  p.cache_loc_stride = steps;
  p.slots_read = s.d;
  p.decode_length = s.d;
  p.last_page_len = s.lpl.as<std::int32_t>();
  p.batch = bucket;
  p.topk = topk;
  p.page_size = ps;
  p.page_table = s.table.as<std::int32_t>();
  p.page_table_stride = s.d + 1;
  p.capacity = s.d + 1;
  p.cache_seqlen = s.seqlen.as<std::int32_t>();
  p.guard = s.guard.as<guard_word>();
  s.multi = {s.cache_loc.as<std::int64_t>(),
             steps,
             p.last_page_len,
             topk,
             ps,
             s.d,
             s.d + 1,
             s.lpl_rows.as<std::int32_t>(),
             s.pages.as<std::int64_t>(),
             s.is_new.as<std::int32_t>(),
             s.pos.as<std::int32_t>(),
             p.page_table,
             p.cache_seqlen};
  ex.synchronize();
  return s;
}

void enqueue_multipass(executor& ex, const multipass_buffers& m, std::int64_t rows) {
  const multipass_cuda_launchers c = multipass_cuda();
  const std::int64_t elems = rows * m.d;
  ex.launch(make_kernel_launch<repeat_lpl_kernel>(m, rows, c.repeat));
  ex.launch(make_kernel_launch<divide_kernel>(m, elems, c.divide));
  ex.launch(make_kernel_launch<compare_kernel>(m, elems, c.compare));
  ex.launch(make_kernel_launch<prefix_sum_kernel>(m, rows, c.prefix_sum));
  ex.launch(make_kernel_launch<zero_kernel>(m, rows * m.capacity, c.zero));
  ex.launch(make_kernel_launch<scatter_kernel>(m, elems, c.scatter));
  ex.launch(make_kernel_launch<seqlen_kernel>(m, rows, c.seqlen));
}

void set_expand_counters(benchmark::State& state, const expand_setup& s) {
  // Bytes a row moves: d slots read (int64), d + 1 table cells and cache_seqlen written, its
  // request's last_page_len read.
  const std::int64_t bytes_per_row = s.d * 8 + (s.d + 1) * 4 + 4 + 4;
  state.SetItemsProcessed(state.iterations() * s.rows);
  state.SetBytesProcessed(state.iterations() * s.rows * bytes_per_row);
  state.counters["rows"] = s.rows;
}

void expand_benchmark(benchmark::State& state, const std::string& kind, bool fused) {
  executor& ex = shared_executor(kind);
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto topk = static_cast<std::int32_t>(state.range(1));
  const auto ps = static_cast<std::int32_t>(state.range(2));
  const auto step = static_cast<std::int32_t>(state.range(3));
  const expand_setup s = make_expand(ex, bucket, topk, ps, step);
  device_clock clock;
  for (auto _ : state) {
    state.SetIterationTime(clock(ex, [&] {
      if (fused) {
        launch_expand_page_table(ex, s.fused);
      } else {
        enqueue_multipass(ex, s.multi, s.rows);
      }
    }));
  }
  clock.report(state);
  set_expand_counters(state, s);
  state.counters["launches"] = fused ? 1 : 7;
}

// The multi-pass baseline as nested loops, called directly on the host (wall clock): the
// conservative CPU comparison (see multipass_loops).
void expand_loops_benchmark(benchmark::State& state) {
  executor& ex = shared_executor("host");
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto topk = static_cast<std::int32_t>(state.range(1));
  const auto ps = static_cast<std::int32_t>(state.range(2));
  const auto step = static_cast<std::int32_t>(state.range(3));
  const expand_setup s = make_expand(ex, bucket, topk, ps, step);
  for (auto _ : state) {
    multipass_loops(s.multi, s.rows);
    benchmark::ClobberMemory();
  }
  set_expand_counters(state, s);
  state.counters["launches"] = 0;
}

void prefix_benchmark(benchmark::State& state, const std::string& kind) {
  executor& ex = shared_executor(kind);
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto ps = static_cast<std::int32_t>(state.range(1));
  constexpr std::int32_t ctx = 4096, topk = 8;
  std::mt19937_64 rng(7);
  std::vector<std::int32_t> rtt(static_cast<std::size_t>(bucket) * ctx),
      pool(static_cast<std::size_t>(bucket)), seq(static_cast<std::size_t>(bucket));
  for (std::size_t i = 0; i < rtt.size(); ++i) rtt[i] = static_cast<std::int32_t>(i);
  for (std::int32_t r = 0; r < bucket; ++r) {
    pool[static_cast<std::size_t>(r)] = r;
    seq[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(1 + rng() % ctx);
  }
  const std::int32_t cols = (ctx + ps - 1) / ps;
  device_buffer d_rtt = upload(ex, rtt), d_pool = upload(ex, pool), d_seq = upload(ex, seq);
  device_buffer lpl(ex, static_cast<std::size_t>(bucket) * 4),
      len(ex, static_cast<std::size_t>(bucket) * 4),
      table(ex, static_cast<std::size_t>(bucket) * cols * 4),
      cu(ex, static_cast<std::size_t>(bucket + 1) * 4), guard(ex, sizeof(guard_word)),
      refused(ex, static_cast<std::size_t>(bucket) * 4);
  ex.fill_bytes(guard.data(), 0, sizeof(guard_word));
  prefix_params p;
  p.refused = refused.as<std::int32_t>();
  p.req_to_token = d_rtt.as<std::int32_t>();
  p.req_to_token_stride = ctx;
  p.pool_rows = bucket;
  p.req_pool_index = d_pool.as<std::int32_t>();
  p.seq_len = d_seq.as<std::int32_t>();
  p.batch = bucket;
  p.topk = topk;
  p.page_size = ps;
  p.last_page_len = lpl.as<std::int32_t>();
  p.prefix_seqlen = len.as<std::int32_t>();
  p.page_table = table.as<std::int32_t>();
  p.page_table_stride = cols;
  p.capacity = cols;
  p.cu_seqlens_q = cu.as<std::int32_t>();
  p.guard = guard.as<guard_word>();
  ex.synchronize();
  device_clock clock;
  for (auto _ : state) {
    state.SetIterationTime(clock(ex, [&] { launch_prefix_metadata(ex, p); }));
  }
  clock.report(state);
  state.SetItemsProcessed(state.iterations() * bucket);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bucket) * (cols * 8 + 16));
}

void sparse_benchmark(benchmark::State& state, const std::string& kind) {
  executor& ex = shared_executor(kind);
  const auto heads = static_cast<std::int32_t>(state.range(0));
  const auto size = static_cast<std::int32_t>(state.range(1));
  const auto stages = sparse_stages(8192, 4096 - 512);
  const sparse_stage st = stages.back();  // the last chunk: an inter stage
  std::mt19937_64 rng(3);
  std::vector<std::int32_t> v(static_cast<std::size_t>(heads * size)),
      counts(static_cast<std::size_t>(heads), size), sizes(static_cast<std::size_t>(heads), size);
  for (auto& x : v) x = static_cast<std::int32_t>(rng() % 8192);
  const std::int32_t cap = sparse_capacity(sizes, st.end);
  device_buffer dv = upload(ex, v), dc = upload(ex, counts), ds = upload(ex, sizes);
  device_buffer ov(ex, static_cast<std::size_t>(heads * cap) * 4),
      oc(ex, static_cast<std::size_t>(heads) * 4),
      os(ex, static_cast<std::size_t>(heads * cap) * 4),
      osc(ex, static_cast<std::size_t>(heads) * 4), guard(ex, sizeof(guard_word));
  ex.fill_bytes(guard.data(), 0, sizeof(guard_word));
  sparse_stage_params p;
  p.vertical = dv.as<std::int32_t>();
  p.vertical_stride = size;
  p.vertical_count = dc.as<std::int32_t>();
  p.vertical_size = ds.as<std::int32_t>();
  p.slash = dv.as<std::int32_t>();
  p.slash_stride = size;
  p.slash_count = dc.as<std::int32_t>();
  p.slash_size = ds.as<std::int32_t>();
  p.heads = heads;
  p.stage = st;
  p.out_vertical = ov.as<std::int32_t>();
  p.vertical_capacity = cap;
  p.out_vertical_count = oc.as<std::int32_t>();
  p.out_slash = os.as<std::int32_t>();
  p.slash_capacity = cap;
  p.out_slash_count = osc.as<std::int32_t>();
  p.guard = guard.as<guard_word>();
  ex.synchronize();
  device_clock clock;
  for (auto _ : state) {
    state.SetIterationTime(clock(ex, [&] { launch_sparse_stage(ex, p); }));
  }
  clock.report(state);
  state.SetItemsProcessed(state.iterations() * heads);
}

}  // namespace
}  // namespace specgraph::bench

int main(int argc, char** argv) {
  using namespace specgraph::bench;
  load_modules_eagerly();
  for (const std::string& kind : available_executors()) {
    for (const bool fused : {true, false}) {
      benchmark::RegisterBenchmark(
          ("expand/" + std::string(fused ? "fused" : "multipass") + "/" + kind).c_str(),
          guarded([kind, fused](benchmark::State& s) { expand_benchmark(s, kind, fused); }))
          ->ArgNames({"bucket", "topk", "page_size", "step"})
          ->ArgsProduct({{1, 8, 64, 256}, {1, 4, 8}, {1, 16, 64}, {0, 4}})
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
    if (kind == "host") {
      benchmark::RegisterBenchmark("expand/multipass_loops/host", guarded(expand_loops_benchmark))
          ->ArgNames({"bucket", "topk", "page_size", "step"})
          ->ArgsProduct({{1, 8, 64, 256}, {1, 4, 8}, {1, 16, 64}, {0, 4}})
          ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark(("prefix/" + kind).c_str(), guarded([kind](benchmark::State& s) {
                                   prefix_benchmark(s, kind);
                                 }))
        ->ArgNames({"bucket", "page_size"})
        ->ArgsProduct({{1, 8, 64, 256}, {1, 16}})
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(
        ("sparse_stage/" + kind).c_str(),
        guarded([kind](benchmark::State& s) { sparse_benchmark(s, kind); }))
        ->ArgNames({"heads", "size"})
        ->ArgsProduct({{8, 32, 128}, {4, 64}})
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
