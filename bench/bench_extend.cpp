// The draft-extend metadata (docs/extend.md): one run_extend_metadata per iteration writing all
// four layouts (tokens, FA3, CSR prefix, CSR full) on every available executor, through the
// launchers (path 0) and, on the host executor, through the host twin (path 1, host_memory), with
// the bytes that call writes and the exact buffers' bytes. CUDA is timed with events (manual
// time, host submission excluded); the host executor by wall clock.
//
// Page sizes 1, 16 (the torch peer's, bench/peer_extend_torch.py) and 64.
//
// Inputs (a closed form): `bucket` requests, request r at seq_len = M / 2 + (r * 2654435761) %
// (M / 2 - 63) (spread over [M / 2, M - 64]), accept_len 1 + r % W, pool row r + 1,
// req_to_token[i] = i (rows M + W wide), slot_limit the table's size. Buffers sized exactly
// (extend_exact_tables).
//
// Counters: bytes_written (the cells this call stores: token rows, the FA3 table's rows up to
// page_capacity and its vectors, both CSR layouts' used kv_indices and their indptrs) and
// buffer_bytes (the exact buffers of the four layouts for this bucket at seq_len <= M). The
// `extend_capacity` entries (no timing worth reading) give the exact bytes of each layout at
// bucket 256, W 8, M 131072 beside what SGLang 0.5.23 reserves for the same forward
// (extend_engine_reservations).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "specgraph/extend_metadata.hpp"

namespace specgraph::bench {
namespace {

device_buffer upload(executor& ex, const std::vector<std::int32_t>& v) {
  device_buffer b(ex, std::max<std::size_t>(1, v.size()) * 4);
  if (!v.empty()) ex.copy_to_device(b.data(), v.data(), v.size() * 4);
  return b;
}

// The exact bytes of each layout (int32 cells), extend_capacity_report's accounting.
struct layout_bytes {
  std::int64_t tokens, fa3, prefix, full;
};
layout_bytes exact_bytes(std::int32_t bucket, std::int32_t m, std::int32_t ps, std::int32_t w) {
  const extend_tables t = extend_exact_tables(bucket, m, ps, w);
  const std::int64_t b = bucket;
  return {4 * (2 * b * w + b), 4 * (b * t.page_capacity + b + 2 * (b + 1) + 1),
          4 * (t.prefix_kv_capacity + 2 * (b + 1)), 4 * (t.full_kv_capacity + 2 * (b + 1) + b)};
}

void extend_benchmark(benchmark::State& state, const std::string& kind) {
  executor& ex = shared_executor(kind);
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto w = static_cast<std::int32_t>(state.range(1));
  const auto ps = static_cast<std::int32_t>(state.range(2));
  const auto m = static_cast<std::int32_t>(state.range(3));
  const bool twin = state.range(4) == 1;
  const std::int64_t width = static_cast<std::int64_t>(m) + w, b = bucket;
  std::vector<std::int32_t> rtt(static_cast<std::size_t>((b + 1) * width));
  for (std::size_t i = 0; i < rtt.size(); ++i) rtt[i] = static_cast<std::int32_t>(i);
  std::vector<std::int32_t> pool, seq, accept;
  std::int64_t prefix_used = 0;
  for (std::int32_t r = 0; r < bucket; ++r) {
    pool.push_back(r + 1);
    seq.push_back(static_cast<std::int32_t>(m / 2 + (r * std::int64_t{2654435761}) % (m / 2 - 63)));
    accept.push_back(1 + r % w);
    prefix_used += seq.back();
  }
  const extend_tables exact = extend_exact_tables(bucket, m, ps, w);
  // The twin reads host memory: the host executor's buffers are host memory.
  device_buffer d_rtt = upload(ex, rtt), d_pool = upload(ex, pool), d_seq = upload(ex, seq),
                d_accept = upload(ex, accept);
  auto i32 = [&](std::int64_t n) {
    return device_buffer(ex, static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * 4);
  };
  std::vector<device_buffer> out;
  extend_params p;
  static_cast<extend_tables&>(p) = exact;
  const std::int64_t cells[extend_field_count] = {
      b * w, b * w, b,     b * exact.page_stride,    b,     b + 1, b + 1,
      1,     b + 1, b + 1, exact.prefix_kv_capacity, b + 1, b + 1, exact.full_kv_capacity,
      b};
  for (int i = 0; i < extend_field_count; ++i) out.push_back(i32(cells[i]));
  for (int i = 0; i < extend_field_count; ++i) {
    set_extend_field(p, i, out[static_cast<std::size_t>(i)].as<std::int32_t>());
  }
  device_buffer guards(ex, extend_guard_count * sizeof(guard_word));
  device_buffer scratch(ex, static_cast<std::size_t>(extend_scratch_words(bucket)) * 8 + 8);
  p.req_to_token = d_rtt.as<std::int32_t>();
  p.req_to_token_stride = width;
  p.pool_rows = bucket + 1;
  p.req_pool_index = d_pool.as<std::int32_t>();
  p.seq_len = d_seq.as<std::int32_t>();
  p.accept_len = d_accept.as<std::int32_t>();
  p.batch = p.real_batch = bucket;
  p.extend_tokens = w;
  p.page_size = ps;
  p.max_seq_len = m;
  p.slot_limit = static_cast<std::int64_t>(rtt.size());
  p.guard = guards.as<guard_word>();
  p.scratch = scratch.as<std::int64_t>();
  device_clock clock;
  for (auto _ : state) {
    state.SetIterationTime(clock(ex, [&] { run_extend_metadata(ex, p, twin); }));
  }
  clock.report(state);
  std::vector<guard_word> seen(extend_guard_count);
  ex.copy_to_host(seen.data(), guards.data(), extend_guard_count * sizeof(guard_word));
  for (const guard_word& g : seen) {
    if (g.violations != 0) state.SkipWithError("a guard word recorded a violation");
  }
  // Stored by one call: full rows of the FA3 table (tails cleared), the used kv_indices.
  const std::int64_t keys = prefix_used + b * w;
  const std::int64_t written = 4 * (2 * b * w + b) +
                               4 * (b * exact.page_capacity + b + 2 * (b + 1) + 1) +
                               4 * (prefix_used + 2 * (b + 1)) + 4 * (keys + 2 * (b + 1) + b);
  const layout_bytes e = exact_bytes(bucket, m, ps, w);
  state.SetBytesProcessed(state.iterations() * written);
  state.counters["bytes_written"] = static_cast<double>(written);
  state.counters["buffer_bytes"] = static_cast<double>(e.tokens + e.fa3 + e.prefix + e.full);
}

// The exact layouts at (bucket, W, M, ps) beside SGLang's reservations for the same forward.
void capacity_benchmark(benchmark::State& state) {
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto w = static_cast<std::int32_t>(state.range(1));
  const auto ps = static_cast<std::int32_t>(state.range(2));
  const auto m = static_cast<std::int32_t>(state.range(3));
  layout_bytes e{};
  for (auto _ : state) {
    e = exact_bytes(bucket, m, ps, w);
    benchmark::DoNotOptimize(e);
  }
  const extend_engine_reservation r = extend_engine_reservations(bucket, m, ps, w);
  state.counters["tokens_bytes"] = static_cast<double>(e.tokens);
  state.counters["fa3_bytes"] = static_cast<double>(e.fa3);
  state.counters["prefix_bytes"] = static_cast<double>(e.prefix);
  state.counters["full_bytes"] = static_cast<double>(e.full);
  state.counters["engine_fa3_page_table_bytes"] = static_cast<double>(4 * r.fa3_page_table);
  state.counters["engine_triton_kv_indices_bytes"] = static_cast<double>(8 * r.triton_kv_indices);
  state.counters["engine_flashinfer_kv_indices_bytes"] =
      static_cast<double>(4 * r.flashinfer_kv_indices);
  state.counters["engine_flashinfer_mask_bytes"] = static_cast<double>(r.flashinfer_mask_bytes);
}

}  // namespace
}  // namespace specgraph::bench

int main(int argc, char** argv) {
  using namespace specgraph::bench;
  load_modules_eagerly();
  for (const std::string& kind : available_executors()) {
    auto* b = benchmark::RegisterBenchmark(
        ("extend/" + kind).c_str(),
        guarded([kind](benchmark::State& s) { extend_benchmark(s, kind); }));
    b->ArgNames({"bucket", "W", "page_size", "M", "path"});
    for (std::int64_t bucket : {1, 8, 64, 256}) {
      for (std::int64_t ps : {1, 16, 64}) {
        b->Args({bucket, 8, ps, 4096, 0});
        if (kind == "host") b->Args({bucket, 8, ps, 4096, 1});  // the host twin
      }
    }
    b->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
  auto* c = benchmark::RegisterBenchmark("extend_capacity", guarded(capacity_benchmark));
  c->ArgNames({"bucket", "W", "page_size", "M"});
  c->Args({256, 8, 1, 131072})->Args({256, 8, 64, 131072});
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
