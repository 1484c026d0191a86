// The CSR operations over a plan (csr_ops.hpp): a staged round's indices in the arena and in
// engine-owned buffers equal the independent reference (tests/kv_indices_reference.hpp), buffers
// short of C_s are refused when bound, and a captured graph follows the inputs of each replay.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/csr_ops.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/kv_indices.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "tests/kv_indices_reference.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t ps = 4, topk = 3, steps = 3, ctx = 64, pool_rows = 9;

draft_config csr_config(metadata_formats formats, bool int64) {
  draft_config c;
  c.max_batch = 6;
  c.topk = topk;
  c.num_steps = steps;
  c.page_size = ps;
  c.max_context_len = ctx;
  c.pool_rows = pool_rows;
  c.kv_slots = 1 << 20;
  c.buckets = {2, 4, 6};
  c.formats = formats;
  c.csr_int64 = int64;
  return c;
}

// A round: pool rows of distinct slots, seq_len short enough for the branch regions of the
// 64-wide rows (seq_len + 2 * 4 * nnp + 3 <= 64 for seq_len <= 40).
struct round {
  std::vector<std::int32_t> req_to_token, pool, seq;
  std::vector<std::int64_t> slots;
};
round random_round(std::mt19937_64& rng, std::int32_t batch) {
  round r;
  for (std::int32_t i = 0; i < pool_rows * ctx; ++i) {
    r.req_to_token.push_back(static_cast<std::int32_t>((rng() % 4096) * 16 + i % 16));
  }
  for (std::int32_t i = 0; i < batch; ++i) {
    r.pool.push_back(static_cast<std::int32_t>(1 + rng() % (pool_rows - 1)));
    r.seq.push_back(static_cast<std::int32_t>(rng() % 41));
  }
  r.slots.assign(static_cast<std::size_t>(batch * topk * steps), 0);
  return r;
}

// The reference for bucket `bucket` as staged: real requests, then padding (seq_len 1, row 0).
kv_expected expected(const round& r, std::int32_t bucket) {
  kv_case c;
  c.page_size = ps;
  c.topk = topk;
  c.num_steps = steps;
  c.max_seq_len = ctx;
  c.pool_rows = pool_rows;
  c.width = ctx;
  c.req_to_token = r.req_to_token;
  c.req_pool_index = r.pool;
  c.seq_len = r.seq;
  c.req_pool_index.resize(static_cast<std::size_t>(bucket), 0);
  c.seq_len.resize(static_cast<std::size_t>(bucket), 1);
  c.step_count = steps;
  c.capacity = 0x7fffffff;
  return kv_reference(c);
}

template <class T>
std::vector<T> read(executor& ex, const void* src, std::size_t n) {
  std::vector<T> out(n);
  ex.copy_to_host(out.data(), src, n * sizeof(T));
  return out;
}

class CsrOps : public ExecutorTest {};

TEST_P(CsrOps, ArenaAndEngineBuffersMatchTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 40; ++i) {
    const bool int64 = rng() % 2 == 0;
    const plan p =
        make_plan(csr_config(rng() % 2 ? metadata_formats::both : metadata_formats::csr, int64));
    device_buffer arena(*ex, p.total_bytes);
    const draft_buffers b(p, arena.data());
    initialize_buffers(*ex, b);
    const auto batch = static_cast<std::int32_t>(1 + rng() % 6);
    const round r = random_round(rng, batch);
    dvec<std::int32_t> rtt(*ex, r.req_to_token), pool(*ex, r.pool), seq(*ex, r.seq);
    dvec<std::int64_t> slots(*ex, r.slots);
    const std::int32_t bucket = stage_round(*ex, b, {batch, pool.data(), seq.data(), slots.data()});
    setup_round(*ex, b, bucket, {rtt.data()});
    csr_indices(*ex, b, bucket, whole_round, {rtt.data()});
    // The engine's buffers: strided one cell past the widest step, poisoned.
    const std::int64_t rows = p.max_rows(), widest = rows * (ctx + steps);
    csr_outputs out;
    dvec<std::int32_t> indptr(*ex, static_cast<std::size_t>(steps * (rows + 2)), -5);
    dvec<std::int64_t> i64(*ex, static_cast<std::size_t>(steps * (widest + 1)), -5);
    dvec<std::int32_t> i32(*ex, static_cast<std::size_t>(steps * (widest + 1)), -5);
    out.kv_indptr = indptr.data();
    out.kv_indptr_stride = rows + 2;
    out.kv_indptr_size = static_cast<std::int64_t>(indptr.size());
    out.kv_indices = int64 ? static_cast<void*>(i64.data()) : static_cast<void*>(i32.data());
    out.kv_indices_type = int64 ? index_type::int64 : index_type::int32;
    out.kv_indices_stride = widest + 1;
    out.kv_indices_size = static_cast<std::int64_t>(i64.size());
    if (rng() % 2 == 0) {
      csr_indices(*ex, b, bucket, whole_round, {rtt.data()}, csr_target(p, out));
    } else {
      const csr_target target(p, out);  // checked once, for every step
      for (std::int32_t s = 0; s < steps; ++s) csr_indices(*ex, b, bucket, s, {rtt.data()}, target);
    }
    ex->synchronize();

    const kv_expected want = expected(r, bucket);
    const auto engine_indptr = indptr.download();
    const auto engine_i64 = i64.download();
    const auto engine_i32 = i32.download();
    const auto guards =
        read<guard_word>(*ex, b.guards(), static_cast<std::size_t>(p.layout.guard_count));
    for (std::int32_t s = 0; s < steps; ++s) {
      SCOPED_TRACE("case " + std::to_string(i) + " bucket " + std::to_string(bucket) + " step " +
                   std::to_string(s));
      const auto n = static_cast<std::size_t>(bucket * topk + 1);
      const auto arena_indptr = read<std::int32_t>(*ex, b.csr_kv_indptr() + s * (rows + 1),
                                                   static_cast<std::size_t>(rows + 1));
      for (std::size_t j = 0; j < static_cast<std::size_t>(rows + 1); ++j) {
        ASSERT_EQ(arena_indptr[j], j < n ? want.indptr[s][j] : 0) << "arena kv_indptr " << j;
      }
      for (std::size_t j = 0; j < static_cast<std::size_t>(rows + 2); ++j) {
        ASSERT_EQ(engine_indptr[static_cast<std::size_t>(s * (rows + 2)) + j],
                  j < n ? want.indptr[s][j] : -5)
            << "engine kv_indptr " << j;
      }
      const std::size_t used = want.ids[s].size();
      const auto cap = static_cast<std::size_t>(p.layout.csr_capacity[static_cast<std::size_t>(s)]);
      std::vector<std::int64_t> arena_ids;
      if (int64) {
        arena_ids = read<std::int64_t>(*ex, b.csr_kv_indices(s), cap);
      } else {
        for (std::int32_t v : read<std::int32_t>(*ex, b.csr_kv_indices(s), cap))
          arena_ids.push_back(v);
      }
      for (std::size_t f = 0; f < cap; ++f) {
        ASSERT_EQ(arena_ids[f], f < used ? want.ids[s][f] : 0) << "arena kv_indices " << f;
      }
      for (std::size_t f = 0; f < static_cast<std::size_t>(widest + 1); ++f) {
        const std::size_t cell = static_cast<std::size_t>(s * (widest + 1)) + f;
        const std::int64_t got = int64 ? engine_i64[cell] : engine_i32[cell];
        ASSERT_EQ(got, f < used ? want.ids[s][f] : -5) << "engine kv_indices " << f;
      }
      ASSERT_EQ(guards[static_cast<std::size_t>(p.layout.guard_csr(s))].violations, 0);
    }
  }
}

// Captured once, replayed for two different rounds: the graph reads the staged inputs.
TEST_P(CsrOps, CapturedRoundFollowsEachReplaysInputs) {
  std::mt19937_64 rng(test_seed());
  const plan p = make_plan(csr_config(metadata_formats::csr, false));
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  initialize_buffers(*ex, b);
  round r = random_round(rng, 4);
  dvec<std::int32_t> rtt(*ex, r.req_to_token), pool(*ex, r.pool), seq(*ex, r.seq);
  dvec<std::int64_t> slots(*ex, r.slots);
  ex->begin_capture();
  setup_round(*ex, b, 4, {rtt.data()});
  csr_indices(*ex, b, 4, whole_round, {rtt.data()});
  const auto g = ex->end_capture();
  const auto exec = ex->instantiate(*g);
  for (int replay = 0; replay < 2; ++replay) {
    for (auto& s : r.seq) s = static_cast<std::int32_t>(rng() % 41);
    dvec<std::int32_t> seq2(*ex, r.seq);
    stage_round(*ex, b, {4, pool.data(), seq2.data(), slots.data()});
    ex->launch_graph(*exec);
    ex->synchronize();
    const kv_expected want = expected(r, 4);
    const auto last =
        read<std::int32_t>(*ex, b.csr_kv_indices(steps - 1), want.ids[steps - 1].size());
    for (std::size_t f = 0; f < last.size(); ++f) ASSERT_EQ(last[f], want.ids[steps - 1][f]) << f;
  }
}

// docs/csr.md section 3: C_s = rows * (M + s + 1) is exact, "a full batch at seq_len = M uses
// all of it". req_to_token rows wider than M (as engines allocate them) leave the branch
// region room, so one request at seq_len = M fills every step's capacity to the last cell.
TEST_P(CsrOps, ARequestAtMaxContextLenFillsEveryStepsCapacityExactly) {
  std::mt19937_64 rng(test_seed());
  constexpr std::int32_t m = 8, width = 10, n = 2;
  draft_config c;
  c.max_batch = 1;
  c.topk = 1;
  c.num_steps = n;
  c.page_size = 1;
  c.max_context_len = m;
  c.pool_rows = 2;
  c.kv_slots = 1 << 12;
  c.formats = metadata_formats::csr;
  const plan p = make_plan(c);
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  initialize_buffers(*ex, b);
  std::vector<std::int32_t> r2t(2 * width, 0);
  for (std::int32_t j = 0; j < width; ++j) {
    r2t[static_cast<std::size_t>(width + j)] = static_cast<std::int32_t>(1 + rng() % 4095);
  }
  dvec<std::int32_t> rtt(*ex, r2t), pool(*ex, {1}), seq(*ex, {m});
  dvec<std::int64_t> slots(*ex, std::vector<std::int64_t>(n, 0));
  engine_tables tables{rtt.data()};
  tables.req_to_token_stride = width;
  for (const bool per_step : {false, true}) {
    SCOPED_TRACE(per_step ? "csr_step_indices" : "csr_round_indices");
    for (std::int32_t s = 0; s < n; ++s) {
      ex->fill_bytes(b.csr_kv_indices(s), 0xA5,
                     static_cast<std::size_t>(p.layout.csr_capacity[static_cast<std::size_t>(s)]) *
                         sizeof(std::int32_t));
    }
    const std::int32_t bucket = stage_round(*ex, b, {1, pool.data(), seq.data(), slots.data()});
    setup_round(*ex, b, bucket, tables);
    if (per_step) {
      for (std::int32_t s = 0; s < n; ++s) csr_indices(*ex, b, bucket, s, tables);
    } else {
      csr_indices(*ex, b, bucket, whole_round, tables);
    }
    const auto guards =
        read<guard_word>(*ex, b.guards(), static_cast<std::size_t>(p.layout.guard_count));
    for (std::int32_t s = 0; s < n; ++s) {
      SCOPED_TRACE("step " + std::to_string(s));
      // Row 0 lists positions 0 .. M - 1, then draft tokens 0 .. s at M .. M + s: M + s + 1.
      const auto cap = static_cast<std::size_t>(p.layout.csr_capacity[static_cast<std::size_t>(s)]);
      ASSERT_EQ(cap, static_cast<std::size_t>(m + s + 1));
      EXPECT_EQ(read<std::int32_t>(*ex, b.csr_kv_indptr() + s * (p.max_rows() + 1), 2),
                (std::vector<std::int32_t>{0, m + s + 1}));
      const std::vector<std::int32_t> want(r2t.begin() + width, r2t.begin() + width + m + s + 1);
      EXPECT_EQ(read<std::int32_t>(*ex, b.csr_kv_indices(s), cap), want);
      const guard_word& g = guards[static_cast<std::size_t>(p.layout.guard_csr(s))];
      EXPECT_EQ(g.violations, 0) << describe(g);
    }
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(CsrOps);

TEST(CsrOpsBinding, BuffersShortOfTheExactCapacityAreRefusedByName) {
  const plan p = make_plan(csr_config(metadata_formats::both, false));
  const std::int64_t rows = p.max_rows();  // 18
  std::int32_t cell = 0;
  csr_outputs out;
  out.kv_indptr = &cell;
  out.kv_indices = &cell;
  out.kv_indptr_stride = rows + 1;
  out.kv_indptr_size = steps * (rows + 1);
  // Engine sizing: rows * max_context_len per step, no room for the draft entries.
  out.kv_indices_stride = rows * ctx;
  out.kv_indices_size = steps * rows * ctx;
  expect_invalid([&] { check_csr_outputs(p, out); }, "kv_indices_stride",
                 "1152 is below the minimum 1206");
  out.kv_indices_stride = rows * (ctx + steps);
  expect_invalid([&] { check_csr_outputs(p, out); }, "kv_indices",
                 "3456 elements, below the 3618 needed");
  out.kv_indices_size = 3618;
  out.kv_indptr_size = 56;
  expect_invalid([&] { check_csr_outputs(p, out); }, "kv_indptr", "56 elements, below the 57");
  out.kv_indptr_size = 57;
  check_csr_outputs(p, out);
  const plan fa3 = make_plan(csr_config(metadata_formats::fa3, false));
  std::vector<unsigned char> arena(fa3.total_bytes + arena_alignment);
  auto* base = reinterpret_cast<void*>(
      (reinterpret_cast<std::uintptr_t>(arena.data()) + arena_alignment - 1) / arena_alignment *
      arena_alignment);
  const draft_buffers b(fa3, base);
  const auto ex = make_executor("host");
  expect_invalid([&] { csr_indices(*ex, b, 2, 0, {&cell}); }, "formats",
                 "fa3: this plan holds no CSR indices");
}

}  // namespace
}  // namespace specgraph::testing
