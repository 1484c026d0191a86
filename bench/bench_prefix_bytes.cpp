// Bytes the prefix metadata writes per round (docs/metadata.md section 2), before and after the
// per-request high-water marks: marks 0 rewrites every cell of every row of the bucket (the
// behaviour without marks), marks 1 writes each row's pages and clears only what the previous
// round left beyond them. Rounds alternate between two sets of lengths, each drawn uniformly in
// [1, longest] for every request (fresh requests each round: the most tail there is to clear);
// longest = context spreads them over the whole table, longest 4096 under a 131072 context is
// a long-context deployment serving mostly shorter requests.
//
// Counters (per round, from the marks the kernel itself leaves, read back outside the timed
// part; tests/prefix_rows_test.cpp checks that no cell past them is written):
//   table_bytes_written   4 * sum_r max(new pages, previous mark), or 4 * bucket * capacity
//   bytes_written         the table's plus last_page_len, prefix_seqlen, the marks, cu_seqlens_q
//   pages_in_use_bytes    4 * sum_r pages; tail_bytes: 4 * sum_r max(0, previous pages - pages),
//                         the cells the previous round left that must become zero
//   full_table_bytes      4 * bucket * capacity (what every round wrote before the marks)
//   written_over_needed   table_bytes_written / (pages_in_use_bytes + tail_bytes)
// Time: device time on cuda, wall time of the host executor's loop (manual time).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "specgraph/metadata.hpp"

namespace specgraph::bench {
namespace {

constexpr std::int32_t bucket = 256, topk = 8;

void prefix_bytes_benchmark(benchmark::State& state, const std::string& kind) {
  executor& ex = shared_executor(kind);
  const auto ps = static_cast<std::int32_t>(state.range(0));
  const auto ctx = static_cast<std::int32_t>(state.range(1));
  const auto longest = static_cast<std::uint64_t>(state.range(2));
  const bool marks = state.range(3) != 0;
  const std::int32_t cols = (ctx + ps - 1) / ps;
  const auto B = static_cast<std::size_t>(bucket);
  std::vector<std::int32_t> rtt(B * static_cast<std::size_t>(ctx)), pool(B);
  for (std::size_t i = 0; i < rtt.size(); ++i) rtt[i] = static_cast<std::int32_t>(i % (1 << 30));
  for (std::int32_t r = 0; r < bucket; ++r) pool[static_cast<std::size_t>(r)] = r;
  std::mt19937_64 rng(11);
  std::vector<std::vector<std::int32_t>> lengths(2, std::vector<std::int32_t>(B));
  for (auto& set : lengths) {
    for (auto& len : set) len = static_cast<std::int32_t>(1 + rng() % longest);
  }
  device_buffer d_rtt(ex, rtt.size() * 4), d_pool(ex, B * 4), d_seq(ex, B * 4), lpl(ex, B * 4),
      len(ex, B * 4), table(ex, B * static_cast<std::size_t>(cols) * 4), cu(ex, (B + 1) * 4),
      guard(ex, sizeof(guard_word)), refused(ex, B * 4), high_water(ex, 2 * B * 4);
  ex.copy_to_device(d_rtt.data(), rtt.data(), rtt.size() * 4);
  ex.copy_to_device(d_pool.data(), pool.data(), B * 4);
  ex.fill_bytes(table.data(), 0, table.size());  // as initialize_buffers leaves them
  ex.fill_bytes(high_water.data(), 0, high_water.size());
  ex.fill_bytes(guard.data(), 0, sizeof(guard_word));
  prefix_params p;
  p.req_to_token = d_rtt.as<std::int32_t>();
  p.req_to_token_stride = ctx;
  p.max_seq_len = ctx;
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
  p.refused = refused.as<std::int32_t>();
  if (marks) {
    p.high_water = high_water.as<std::int32_t>();
    p.high_water_before = high_water.as<std::int32_t>() + bucket;
  }
  double table_cells = 0, page_cells = 0, tail_cells = 0;
  std::int64_t rounds = 0;
  std::vector<std::int32_t> before(B), after(B);
  // One round first, untimed and uncounted: the counters describe rounds after a round.
  ex.copy_to_device(d_seq.data(), lengths[1].data(), B * 4);
  launch_prefix_metadata(ex, p);
  ex.synchronize();
  device_clock clock;
  for (auto _ : state) {
    const std::vector<std::int32_t>& lens = lengths[static_cast<std::size_t>(rounds % 2)];
    const std::vector<std::int32_t>& last = lengths[static_cast<std::size_t>(1 - rounds % 2)];
    ex.copy_to_device(d_seq.data(), lens.data(), B * 4);
    ex.copy_to_host(before.data(), high_water.data(), B * 4);
    state.SetIterationTime(clock(ex, [&] { launch_prefix_metadata(ex, p); }));
    ex.copy_to_host(after.data(), high_water.data(), B * 4);
    for (std::size_t r = 0; r < B; ++r) {
      const std::int32_t pages = lens[r] / ps;
      const std::int32_t previous = std::clamp(before[r], 0, cols);
      page_cells += pages;
      tail_cells += std::max(0, last[r] / ps - pages);
      table_cells += marks ? std::max(after[r], previous) : cols;
    }
    ++rounds;
  }
  clock.report(state);
  const double n = rounds > 0 ? static_cast<double>(rounds) : 1.0;
  // last_page_len, prefix_seqlen, cu_seqlens_q, and with marks the mark of each request.
  const double scalars = 4.0 * ((marks ? 3 : 2) * bucket + bucket + 1);
  state.counters["table_bytes_written"] = 4 * table_cells / n;
  state.counters["bytes_written"] = 4 * table_cells / n + scalars;
  state.counters["pages_in_use_bytes"] = 4 * page_cells / n;
  state.counters["tail_bytes"] = 4 * tail_cells / n;
  state.counters["full_table_bytes"] = 4.0 * bucket * cols;
  state.counters["written_over_needed"] =
      page_cells + tail_cells > 0 ? table_cells / (page_cells + tail_cells) : 0.0;
}

}  // namespace
}  // namespace specgraph::bench

int main(int argc, char** argv) {
  using namespace specgraph::bench;
  load_modules_eagerly();
  for (const std::string& kind : available_executors()) {
    auto* b = benchmark::RegisterBenchmark(
        ("prefix_bytes/" + kind).c_str(),
        guarded([kind](benchmark::State& s) { prefix_bytes_benchmark(s, kind); }));
    b->ArgNames({"page_size", "context", "longest", "marks"})
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    for (const std::int64_t marks : {0, 1}) {
      for (const std::int64_t ps : {1, 16}) {
        b->Args({ps, 4096, 4096, marks});
        b->Args({ps, 131072, 131072, marks});
        b->Args({ps, 131072, 4096, marks});
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
