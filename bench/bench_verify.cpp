// The target-verify metadata of a draft tree (docs/verify.md): one launch of
// launch_verify_metadata per iteration on every available executor, writing one layout (the FA3
// cascade tables, or FlashInfer's indices, indptrs and packed mask: an engine runs one backend),
// with the bytes that launch writes and the bytes of the exact buffers against what engines
// reserve for the same bucket. CUDA is timed with events (manual time, host submission
// excluded); the host executor by wall clock.
//
// Inputs (a closed form, so that bench/peer_verify_torch.py builds the very same case): `bucket`
// requests, request r at seq_len = ctx / 2 + (r * 2654435761) % (ctx / 2 - 63) (spread over
// [ctx / 2, ctx - 64]), pool row r + 1, req_to_token[i] = i (rows ctx + D wide), max_seq_len =
// ctx, and every request's tree the same binary tree: token i > 0 has parent (i - 1) / 2, a query
// attends the whole prefix, itself and its ancestors. Buffers sized exactly (docs/verify.md
// section 6).
//
// Counters: bytes_written (the cells this launch stores: the written layout's tables and
// vectors), buffer_bytes (the exact buffers of the layout for this bucket at seq_len <= ctx), and
// for FlashInfer what SGLang 0.5.23's FlashInfer backend reserves for its verify graphs:
// engine_kv_indices_bytes (max_num_tokens x max_context_len int32, max_num_tokens = bucket x D)
// and engine_mask_bytes (the packed-mask buffer, max_num_tokens x max_context_len bytes); the
// input mask (mask_bytes, bucket x D x (ctx + D) cells) is the same for both.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph::bench {
namespace {

template <class T>
device_buffer upload(executor& ex, const std::vector<T>& v) {
  device_buffer b(ex, std::max<std::size_t>(1, v.size()) * sizeof(T));
  if (!v.empty()) ex.copy_to_device(b.data(), v.data(), v.size() * sizeof(T));
  return b;
}

// Whether tree token j is query i's ancestor or i itself (parent of t > 0: (t - 1) / 2).
bool attends(std::int32_t i, std::int32_t j) {
  for (std::int32_t t = i;; t = (t - 1) / 2) {
    if (t == j) return true;
    if (t == 0) return false;
  }
}

enum layout : int { fa3 = 0, flashinfer = 1 };

void verify_benchmark(benchmark::State& state, const std::string& kind) {
  executor& ex = shared_executor(kind);
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto d = static_cast<std::int32_t>(state.range(1));
  const auto ps = static_cast<std::int32_t>(state.range(2));
  const auto ctx = static_cast<std::int32_t>(state.range(3));
  const auto which = static_cast<layout>(state.range(4));
  const std::int64_t width = static_cast<std::int64_t>(ctx) + d;
  std::vector<std::int32_t> rtt(static_cast<std::size_t>((bucket + 1) * width));
  for (std::size_t i = 0; i < rtt.size(); ++i) rtt[i] = static_cast<std::int32_t>(i);
  std::vector<std::int32_t> pool, seq;
  std::vector<std::uint8_t> mask;
  std::int64_t kept = 0, packed_used = 0, pages_used = 0;
  for (std::int32_t r = 0; r < bucket; ++r) {
    pool.push_back(r + 1);
    seq.push_back(
        static_cast<std::int32_t>(ctx / 2 + (r * std::int64_t{2654435761}) % (ctx / 2 - 63)));
    kept += seq.back();
    packed_used += (static_cast<std::int64_t>(d) * (seq.back() + d) + 7) / 8;
    pages_used += (seq.back() + ps - 1) / ps;
    for (std::int32_t i = 0; i < d; ++i) {
      mask.insert(mask.end(), static_cast<std::size_t>(seq.back()), 1);
      for (std::int32_t j = 0; j < d; ++j) mask.push_back(attends(i, j) ? 1 : 0);
    }
  }
  const std::int64_t b = bucket, rows = b * d;
  const std::int64_t pages = verify_prefix_columns(ctx, ps);
  const std::int64_t kv_cap = verify_kv_indices_capacity(bucket, ctx, d);
  const std::int64_t packed_cap = verify_packed_mask_capacity(bucket, ctx, d);
  device_buffer d_rtt = upload(ex, rtt), d_pool = upload(ex, pool), d_seq = upload(ex, seq),
                d_mask = upload(ex, mask);
  auto i32 = [&](std::int64_t n) { return device_buffer(ex, static_cast<std::size_t>(n) * 4); };
  const bool f = which == fa3;
  // The other layout's buffers stay at one cell: its pointers are left null (not written).
  device_buffer prefix_table = i32(f ? b * pages : 1), prefix_cache = i32(b), prefix_q = i32(b + 1),
                prefix_k = i32(b + 1), expand_table = i32(f ? rows * d : 1),
                expand_cache = i32(rows), expand_q = i32(rows + 1), expand_k = i32(rows + 1);
  device_buffer qo = i32(b + 1), kv_indptr = i32(b + 1), kv_indices = i32(f ? 1 : kv_cap),
                last = i32(b), mask_indptr = i32(b + 1), packed_indptr = i32(b + 1);
  device_buffer packed(ex, static_cast<std::size_t>(f ? 1 : packed_cap));
  device_buffer guards(ex, verify_guard_count * sizeof(guard_word));
  device_buffer scratch(ex, static_cast<std::size_t>(verify_scratch_words(bucket, d)) * 8);
  ex.fill_bytes(guards.data(), 0, verify_guard_count * sizeof(guard_word));
  verify_params p;
  p.req_to_token = d_rtt.as<std::int32_t>();
  p.req_to_token_stride = width;
  p.pool_rows = bucket + 1;
  p.req_pool_index = d_pool.as<std::int32_t>();
  p.seq_len = d_seq.as<std::int32_t>();
  p.batch = p.real_batch = bucket;
  p.draft_tokens = d;
  p.page_size = ps;
  p.max_seq_len = ctx;
  p.custom_mask = d_mask.as<std::uint8_t>();
  p.mask_cells = static_cast<std::int64_t>(mask.size());
  p.slot_limit = static_cast<std::int64_t>(rtt.size());
  if (f) {
    p.prefix_page_table = prefix_table.as<std::int32_t>();
    p.prefix_stride = p.prefix_capacity = static_cast<std::int32_t>(pages);
    p.prefix_cache_seqlen = prefix_cache.as<std::int32_t>();
    p.prefix_cu_seqlens_q = prefix_q.as<std::int32_t>();
    p.prefix_cu_seqlens_k = prefix_k.as<std::int32_t>();
    p.expand_page_table = expand_table.as<std::int32_t>();
    p.expand_stride = d;
    p.expand_cache_seqlen = expand_cache.as<std::int32_t>();
    p.expand_cu_seqlens_q = expand_q.as<std::int32_t>();
    p.expand_cu_seqlens_k = expand_k.as<std::int32_t>();
  } else {
    p.qo_indptr = qo.as<std::int32_t>();
    p.kv_indptr = kv_indptr.as<std::int32_t>();
    p.kv_indices = kv_indices.as<std::int32_t>();
    p.kv_indices_capacity = static_cast<std::int32_t>(kv_cap);
    p.kv_last_page_len = last.as<std::int32_t>();
    p.mask_indptr = mask_indptr.as<std::int32_t>();
    p.packed_mask = packed.as<std::uint8_t>();
    p.packed_mask_capacity = static_cast<std::int32_t>(packed_cap);
    p.packed_mask_indptr = packed_indptr.as<std::int32_t>();
  }
  p.guard = guards.as<guard_word>();
  p.scratch = scratch.as<std::int64_t>();
  device_clock clock;
  for (auto _ : state) {
    state.SetIterationTime(clock(ex, [&] { launch_verify_metadata(ex, p); }));
  }
  clock.report(state);
  std::vector<guard_word> seen(verify_guard_count);
  ex.copy_to_host(seen.data(), guards.data(), verify_guard_count * sizeof(guard_word));
  for (const guard_word& g : seen) {
    if (g.violations != 0) state.SkipWithError("a guard word recorded a violation");
  }
  // Bytes stored by one launch, and the exact buffers (capacity at seq_len <= ctx).
  std::int64_t written = 0, buffer = 0;
  if (f) {
    written = 4 * (b * pages + 3 * b + 2 + rows * d + 3 * rows + 2);
    buffer = written;
  } else {
    written = 4 * (kept + rows + 5 * b + 4) + packed_used;
    buffer = 4 * (kv_cap + 5 * b + 4) + packed_cap;
  }
  state.SetBytesProcessed(state.iterations() * written);
  state.counters["bytes_written"] = static_cast<double>(written);
  state.counters["buffer_bytes"] = static_cast<double>(buffer);
  state.counters["mask_bytes"] = static_cast<double>(mask.size());
  if (f) {
    state.counters["prefix_pages_used"] = static_cast<double>(pages_used);
  } else {
    state.counters["engine_kv_indices_bytes"] = static_cast<double>(4 * rows * ctx);
    state.counters["engine_mask_bytes"] = static_cast<double>(rows * ctx);
    state.counters["kv_indices_bytes"] = static_cast<double>(4 * kv_cap);
    state.counters["packed_mask_bytes"] = static_cast<double>(packed_cap);
  }
}

}  // namespace
}  // namespace specgraph::bench

int main(int argc, char** argv) {
  using namespace specgraph::bench;
  load_modules_eagerly();
  for (const std::string& kind : available_executors()) {
    auto* b = benchmark::RegisterBenchmark(
        ("verify/" + kind).c_str(),
        guarded([kind](benchmark::State& s) { verify_benchmark(s, kind); }));
    b->ArgNames({"bucket", "D", "page_size", "ctx", "layout"});
    for (std::int64_t bucket : {1, 8, 64, 256}) {
      for (std::int64_t d : {4, 8, 16, 64}) {
        b->Args({bucket, d, 1, 4096, fa3});
        b->Args({bucket, d, 16, 4096, fa3});
        b->Args({bucket, d, 1, 4096, flashinfer});  // FlashInfer reads at page size 1
      }
    }
    b->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
