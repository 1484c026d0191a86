// The round after verify on the device (issue 31): greedy acceptance, the commit and the next
// round's inputs chained as an engine runs them, one round's work per iteration: run_accept,
// run_commit and run_next_round through the launchers (host_memory false) on every available
// executor. Each iteration starts from the same state: allocated_len, the ring's head and the
// stall word are restored (the ring refilled) outside the timed region. CUDA is timed with events
// (manual time, host submission excluded); the host executor by wall clock.
//
// Shapes: bucket 1, 4, 16, 64, 256; topk 1 and 4; page size 1 and 16; num_steps 5; D 8 (topk 1:
// D = num_steps + 1, a chain).
//
// Inputs (a closed form): request r at committed length s = 100 + (37 r) % 900 in pool row r + 1,
// req_to_token[i] = i (rows 2048 wide: a slot ends its page's run exactly when its position does),
// allocated_len = ceil_page(s + R1) (an engine holding the exact reserve), the tree a chain
// (topk 1) or a root with topk children and a chain of D - 1 - topk nodes under the first one
// (topk 4: depth 4), draft token of node i = 100 + i, the target's prediction at node u the
// token of u's child on the path for the first (r % (depth + 1)) path nodes, else -1 (so the
// accepted length cycles over 0 .. depth across requests); no stop ids, no budgets. The ring holds
// exactly B * ceil(S / ps) fresh pages, the round's whole draw.
//
// Counters: launches_per_round and host_syncs_per_round (the executor's counters around the
// three calls: eager launches and synchronize() calls), output_bytes (the round's outputs at
// their exact capacities, the three calls' guard words and the next round's scratch excluded),
// kv_move_pairs (B * num_steps) beside sglang_kv_move_pairs (SGLang 0.5.23: B * S, padding
// included), ring_pages_per_round (B * ceil(S / ps), SGLang's draw is the same), and the standing
// reserve per request reserve_slots (R1) beside sglang_reserve_slots (2 * R1, the host's lag).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/next_round_metadata.hpp"

namespace specgraph::bench {
namespace {

constexpr std::int32_t steps = 5;
constexpr std::int64_t width = 2048;

device_buffer upload(executor& ex, const std::vector<std::int32_t>& v) {
  device_buffer b(ex, std::max<std::size_t>(1, v.size()) * 4);
  if (!v.empty()) ex.copy_to_device(b.data(), v.data(), v.size() * 4);
  return b;
}
device_buffer cells(executor& ex, std::int64_t n, std::size_t bytes) {
  return device_buffer(ex, static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * bytes);
}

void round_benchmark(benchmark::State& state, const std::string& kind) {
  executor& ex = shared_executor(kind);
  const auto bucket = static_cast<std::int32_t>(state.range(0));
  const auto topk = static_cast<std::int32_t>(state.range(1));
  const auto ps = static_cast<std::int32_t>(state.range(2));
  const std::int32_t d = topk == 1 ? steps + 1 : 8;
  const std::int64_t b = bucket, S = steps + 1;
  const std::int64_t r1 = next_round_reserve(topk, steps, d, ps);
  auto ceil_page = [ps](std::int64_t x) { return (x + ps - 1) / ps * ps; };

  // The tree and the path through it.
  std::vector<std::int32_t> tree(static_cast<std::size_t>(d), -1), path{0};
  if (topk == 1) {
    for (std::int32_t i = 1; i < d; ++i) tree[static_cast<std::size_t>(i)] = i - 1;
  } else {
    for (std::int32_t i = 1; i <= topk; ++i) tree[static_cast<std::size_t>(i)] = 0;
    for (std::int32_t i = topk + 1; i < d; ++i) {
      tree[static_cast<std::size_t>(i)] = i == topk + 1 ? 1 : i - 1;
    }
  }
  for (std::int32_t i = 1; i < d; ++i) {
    if (tree[static_cast<std::size_t>(i)] == path.back()) path.push_back(i);
  }
  const auto depth = static_cast<std::int32_t>(path.size()) - 1;
  std::vector<std::int32_t> parent, draft, target, seq, pool, alloc;
  for (std::int32_t r = 0; r < bucket; ++r) {
    const std::int32_t accept = r % (depth + 1);
    for (std::int32_t i = 0; i < d; ++i) {
      parent.push_back(tree[static_cast<std::size_t>(i)]);
      draft.push_back(100 + i);
      target.push_back(-1);
    }
    for (std::int32_t k = 0; k < accept; ++k) {
      target[static_cast<std::size_t>(r * d + path[static_cast<std::size_t>(k)])] =
          100 + path[static_cast<std::size_t>(k + 1)];
    }
    seq.push_back(100 + (37 * r) % 900);
    pool.push_back(r + 1);
    alloc.push_back(static_cast<std::int32_t>(ceil_page(seq.back() + r1)));
  }
  std::vector<std::int32_t> rtt(static_cast<std::size_t>((b + 1) * width));
  for (std::size_t i = 0; i < rtt.size(); ++i) rtt[i] = static_cast<std::int32_t>(i);
  const std::int64_t pages = b * next_round_pages_per_request(steps, ps);
  std::vector<std::int32_t> ring(static_cast<std::size_t>(std::max<std::int64_t>(pages, 1)));
  for (std::size_t k = 0; k < ring.size(); ++k) {
    ring[k] = static_cast<std::int32_t>(static_cast<std::int64_t>(rtt.size()) / ps + 1 +
                                        static_cast<std::int64_t>(k));
  }

  device_buffer d_parent = upload(ex, parent), d_draft = upload(ex, draft),
                d_target = upload(ex, target), d_seq = upload(ex, seq), d_pool = upload(ex, pool),
                d_alloc = upload(ex, alloc), d_rtt = upload(ex, rtt), d_ring = upload(ex, ring),
                d_stall = upload(ex, {0});
  device_buffer d_head(ex, 8), d_tail(ex, 8);
  const std::int64_t head0 = 0, tail0 = pages;
  ex.copy_to_device(d_tail.data(), &tail0, 8);

  // Acceptance: every output at its exact capacity.
  accept_params a = accept_exact_capacities(bucket, d, steps);
  device_buffer a_index = cells(ex, b * S, 4), a_length = cells(ex, b, 4),
                a_predict = cells(ex, b * d, 4), a_tokens = cells(ex, b * d, 4),
                a_bonus = cells(ex, b, 4), a_seq = cells(ex, b, 4), a_select = cells(ex, b, 4),
                a_guard(ex, accept_guard_count * sizeof(guard_word));
  a.parent = d_parent.as<std::int32_t>();
  a.draft_token = d_draft.as<std::int32_t>();
  a.target_predict = d_target.as<std::int32_t>();
  a.seq_len = d_seq.as<std::int32_t>();
  a.batch = a.real_batch = bucket;
  a.draft_tokens = d;
  a.num_steps = steps;
  a.accept_index = a_index.as<std::int32_t>();
  a.accept_length = a_length.as<std::int32_t>();
  a.predict = a_predict.as<std::int32_t>();
  a.accept_tokens = a_tokens.as<std::int32_t>();
  a.bonus = a_bonus.as<std::int32_t>();
  a.new_seq_len = a_seq.as<std::int32_t>();
  a.select_index = a_select.as<std::int32_t>();
  a.guard = a_guard.as<guard_word>();

  commit_params m = commit_exact_capacities(bucket, steps);
  device_buffer m_move = cells(ex, b * steps * 2, 4), m_finished = cells(ex, b, 4),
                m_emit = cells(ex, b, 4), m_begin = cells(ex, b, 4), m_end = cells(ex, b, 4),
                m_guard(ex, commit_guard_count * sizeof(guard_word));
  m.accept_index = a.accept_index;
  m.accept_length = a.accept_length;
  m.accept_tokens = a.accept_tokens;
  m.seq_len = a.seq_len;
  m.allocated_len = d_alloc.as<std::int32_t>();
  m.req_pool_index = d_pool.as<std::int32_t>();
  m.req_to_token = d_rtt.as<std::int32_t>();
  m.req_to_token_stride = width;
  m.pool_rows = bucket + 1;
  m.batch = m.real_batch = bucket;
  m.draft_tokens = d;
  m.num_steps = steps;
  m.topk = topk;
  m.page_size = ps;
  m.kv_move = m_move.as<std::int32_t>();
  m.finished = m_finished.as<std::int32_t>();
  m.emit_len = m_emit.as<std::int32_t>();
  m.free_begin = m_begin.as<std::int32_t>();
  m.free_end = m_end.as<std::int32_t>();
  m.guard = m_guard.as<guard_word>();

  const next_round_sizes sizes = next_round_exact_capacities(bucket, d, steps, topk, ps);
  next_round_params n = sizes.capacities;
  device_buffer n_active = cells(ex, n.active_capacity, 4),
                n_seq = cells(ex, n.seq_len_capacity, 4),
                n_root = cells(ex, n.root_token_capacity, 4),
                n_pos = cells(ex, n.draft_position_capacity, 4),
                n_draft = cells(ex, n.draft_out_cache_loc_capacity, 8),
                n_tail = cells(ex, n.tail_copy_capacity, 4),
                n_verify = cells(ex, n.verify_out_cache_loc_capacity, 8),
                n_scratch = cells(ex, sizes.scratch_capacity, 8),
                n_guard(ex, next_round_guard_count * sizeof(guard_word));
  n.new_seq_len = a.new_seq_len;
  n.bonus = a.bonus;
  n.finished = m.finished;
  n.req_pool_index = m.req_pool_index;
  n.req_to_token = d_rtt.as<std::int32_t>();
  n.req_to_token_stride = width;
  n.pool_rows = bucket + 1;
  n.allocated_len = d_alloc.as<std::int32_t>();
  n.ring = d_ring.as<std::int32_t>();
  n.ring_capacity = static_cast<std::int64_t>(ring.size());
  n.ring_head = d_head.as<std::int64_t>();
  n.ring_tail = d_tail.as<std::int64_t>();
  n.stall = d_stall.as<std::int32_t>();
  n.reserve = static_cast<std::int32_t>(r1);
  n.active = n_active.as<std::int32_t>();
  n.seq_len = n_seq.as<std::int32_t>();
  n.root_token = n_root.as<std::int32_t>();
  n.draft_position = n_pos.as<std::int32_t>();
  n.draft_out_cache_loc = n_draft.as<std::int64_t>();
  n.tail_copy = topk > 1 && ps > 1 ? n_tail.as<std::int32_t>() : nullptr;
  n.verify_out_cache_loc = n_verify.as<std::int64_t>();
  n.scratch = n_scratch.as<std::int64_t>();
  n.guard = n_guard.as<guard_word>();

  device_clock clock;
  std::int64_t launches = 0, syncs = 0;
  const std::int32_t zero = 0;
  for (auto _ : state) {
    // The engine's refill, untimed: the allocation and the ring as before the round.
    if (!alloc.empty()) ex.copy_to_device(d_alloc.data(), alloc.data(), alloc.size() * 4);
    ex.copy_to_device(d_head.data(), &head0, 8);
    ex.copy_to_device(d_stall.data(), &zero, 4);
    state.SetIterationTime(clock(ex, [&] {
      const executor_counters before = ex.counters();
      run_accept(ex, a, false);
      run_commit(ex, m, false);
      run_next_round(ex, n, false);
      launches += ex.counters().kernel_launches - before.kernel_launches;
      syncs += ex.counters().synchronizations - before.synchronizations;
    }));
  }
  clock.report(state);
  std::vector<guard_word> seen(accept_guard_count + commit_guard_count + next_round_guard_count);
  ex.copy_to_host(seen.data(), a_guard.data(), accept_guard_count * sizeof(guard_word));
  ex.copy_to_host(seen.data() + accept_guard_count, m_guard.data(),
                  commit_guard_count * sizeof(guard_word));
  ex.copy_to_host(seen.data() + accept_guard_count + commit_guard_count, n_guard.data(),
                  next_round_guard_count * sizeof(guard_word));
  for (const guard_word& g : seen) {
    if (g.violations != 0) state.SkipWithError("a guard word recorded a violation");
  }
  const auto iterations = static_cast<double>(std::max<std::int64_t>(state.iterations(), 1));
  const std::int64_t accept_bytes = 4 * (b * S + 2 * b * d + 4 * b);
  const std::int64_t commit_bytes = 4 * (b * steps * 2 + 4 * b);
  const std::int64_t next_bytes =
      4 * (n.active_capacity + n.seq_len_capacity + n.root_token_capacity +
           n.draft_position_capacity + (n.tail_copy != nullptr ? n.tail_copy_capacity : 0)) +
      8 * (n.draft_out_cache_loc_capacity + n.verify_out_cache_loc_capacity);
  state.counters["launches_per_round"] = static_cast<double>(launches) / iterations;
  state.counters["host_syncs_per_round"] = static_cast<double>(syncs) / iterations;
  state.counters["output_bytes"] = static_cast<double>(accept_bytes + commit_bytes + next_bytes);
  state.counters["kv_move_pairs"] = static_cast<double>(b * steps);
  state.counters["sglang_kv_move_pairs"] = static_cast<double>(b * S);
  state.counters["ring_pages_per_round"] = static_cast<double>(pages);
  state.counters["reserve_slots"] = static_cast<double>(r1);
  state.counters["sglang_reserve_slots"] = static_cast<double>(2 * r1);
}

}  // namespace
}  // namespace specgraph::bench

int main(int argc, char** argv) {
  using namespace specgraph::bench;
  load_modules_eagerly();
  for (const std::string& kind : available_executors()) {
    auto* b = benchmark::RegisterBenchmark(
        ("round/" + kind).c_str(),
        guarded([kind](benchmark::State& s) { round_benchmark(s, kind); }));
    b->ArgNames({"bucket", "topk", "page_size"});
    for (std::int64_t bucket : {1, 4, 16, 64, 256}) {
      for (std::int64_t topk : {1, 4}) {
        for (std::int64_t ps : {1, 16}) b->Args({bucket, topk, ps});
      }
    }
    b->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
