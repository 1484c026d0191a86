// The composable ops (ops.hpp) at the edges of what reaches them from device memory, where
// draft_runtime's host checks do not stand in front: a device step counter outside the round
// and an int64 index that does not fit int32. Each compares a byte snapshot of the whole arena
// before and after, so nothing is written but what docs/device-rounds.md and docs/metadata.md
// section 7 promise, and the asynchronous violation count agrees with the guard words.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

draft_config edge_config(bool device_steps) {
  draft_config c;
  c.max_batch = 12;
  c.topk = 3;
  c.num_steps = 4;
  c.page_size = 4;
  c.max_context_len = 64;
  c.pool_rows = 16;
  c.kv_slots = 1 << 20;
  c.device_steps = device_steps;
  return c;
}

std::vector<unsigned char> arena_bytes(executor& ex, const draft_buffers& b) {
  std::vector<unsigned char> out(b.bytes());
  ex.copy_to_host(out.data(), b.base(), out.size());
  return out;
}

// The first byte offset where `a` and `b` differ outside [skip_begin, skip_end), or -1.
std::int64_t first_difference(const std::vector<unsigned char>& a,
                              const std::vector<unsigned char>& b, std::size_t skip_begin,
                              std::size_t skip_end) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if ((i < skip_begin || i >= skip_end) && a[i] != b[i]) return static_cast<std::int64_t>(i);
  }
  return -1;
}

class OpsEdges : public ExecutorTest {};

// docs/device-rounds.md: a step with the counter outside [0, num_steps) writes nothing; row 0
// records bad_input (capacity num_steps, value the counter) in the step-0 expand guard word.
// draft_runtime refuses to replay that far, the composable ops do not: an engine replaying its
// graph once too often, or launching a round again without staging, drives the kernel there.
// Every other byte of the arena must be as it was (fails if the bound check lets the counter
// num_steps through: that step's table is num_steps + 2 wide in a num_steps + 1 wide buffer).
TEST_P(OpsEdges, ACounterOutsideTheRoundWritesNothingButRowZerosGuardRecord) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const draft_config cfg = edge_config(/*device_steps=*/true);
  sim_engine eng(*ex, cfg, rng);  // the engine's req_to_token and random rounds
  const plan p = make_plan(cfg);
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  initialize_buffers(*ex, b);
  const std::size_t guard_begin = static_cast<std::size_t>(
      reinterpret_cast<unsigned char*>(b.guards() + plan_layout::guard_expand(0)) - b.base());
  const std::size_t guard_end = guard_begin + sizeof(guard_word);
  const std::int32_t n = cfg.num_steps;
  const std::int32_t max = std::numeric_limits<std::int32_t>::max();
  const std::int32_t min = std::numeric_limits<std::int32_t>::min();
  std::int32_t smaller = 0;  // the bucket below: a batch in (smaller, bucket] stages `bucket`
  for (const std::int32_t bucket : p.config.buckets) {
    for (const std::int32_t counter : {n, n + 1, 2 * n, max, -1, min}) {
      SCOPED_TRACE("bucket " + std::to_string(bucket) + ", counter " + std::to_string(counter));
      const auto batch = static_cast<std::int32_t>(
          smaller + 1 +
          static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(bucket - smaller)));
      const host_round r = eng.random_round(rng, batch);
      dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
      dvec<std::int64_t> slots(*ex, r.out_cache_loc);
      ASSERT_EQ(stage_round(*ex, b, {batch, pool.data(), seq.data(), slots.data()}), bucket);
      // A whole round (every step, as many times as the counter allows), then one step more.
      const auto depth = static_cast<std::int32_t>(1 + rng() % static_cast<std::uint64_t>(n));
      for (std::int32_t s = 0; s < depth; ++s) {
        setup_round(*ex, b, bucket, eng.tables());
        step_metadata(*ex, b, bucket, at_device_step);
        advance_step(*ex, b);
      }
      for (const guard_word& g : read_guards(*ex, b)) ASSERT_EQ(g.violations, 0) << describe(g);
      ex->copy_to_device(b.device_step(), &counter, sizeof(counter));
      const std::vector<unsigned char> before = arena_bytes(*ex, b);
      step_metadata(*ex, b, bucket, at_device_step);
      const std::vector<unsigned char> after = arena_bytes(*ex, b);

      const std::int64_t at = first_difference(before, after, guard_begin, guard_end);
      EXPECT_EQ(at, -1) << "a byte written at arena offset " << at;
      const guard_word g = read_guards(*ex, b)[plan_layout::guard_expand(0)];
      EXPECT_EQ(g.violations, 1) << describe(g);
      EXPECT_EQ(g.kind, static_cast<std::int32_t>(violation_kind::bad_input));
      EXPECT_EQ(g.kernel, static_cast<std::int32_t>(kernel_id::expand_page_table));
      EXPECT_EQ(g.row, 0);
      EXPECT_EQ(g.column, -1);
      EXPECT_EQ(g.capacity, n) << "the limit: num_steps";
      EXPECT_EQ(g.value, counter);
      dvec<std::int32_t> flag(*ex, 1, -1);
      count_violations(*ex, b, flag.data());
      EXPECT_EQ(flag.download()[0], 1);
      if (HasFailure()) return;
    }
    smaller = bucket;
  }
}

// count_violations sums every guard word, the staging one (word 0) included: stage_round from
// device memory refuses an int64 pool index above int32 (never narrowed to another pool row)
// and records it in the staging word only. The engine's asynchronous check must count it, on
// the stream, before and after the round's other kernels, without a synchronisation.
TEST_P(OpsEdges, TheAsynchronousCountIncludesWhatOnlyStagingRecorded) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const draft_config cfg = edge_config(/*device_steps=*/false);
  sim_engine eng(*ex, cfg, rng);
  const plan p = make_plan(cfg);
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  initialize_buffers(*ex, b);
  dvec<std::int32_t> flag(*ex, 1, -1);
  for (int round = 0; round < 6; ++round) {
    const auto batch = static_cast<std::int32_t>(2 + rng() % 11);
    const auto bad = static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(batch));
    SCOPED_TRACE("round " + std::to_string(round) + ", batch " + std::to_string(batch) +
                 ", request " + std::to_string(bad));
    const host_round r = eng.random_round(rng, batch);
    std::vector<std::int64_t> pool64(r.req_pool_index.begin(), r.req_pool_index.end());
    dvec<std::int64_t> pool(*ex, pool64), slots(*ex, r.out_cache_loc);
    dvec<std::int32_t> seq(*ex, r.seq_len);
    // The same round staged clean first, so the refused request keeps valid contents and no
    // kernel after staging has anything to record.
    const std::int32_t bucket = stage_round(*ex, b, {batch, pool.data(), seq.data(), slots.data()});
    // Above int32: narrowed, it would be pool row 1 .. 14, a valid row (another request's).
    pool64[bad] = (std::int64_t{1} << 32) + 1 + static_cast<std::int64_t>(rng() % 14);
    dvec<std::int64_t> bad_pool(*ex, pool64);
    const std::int64_t syncs = ex->counters().synchronizations;
    const std::int64_t reads = ex->counters().copies_to_host;
    ASSERT_EQ(stage_round(*ex, b, {batch, bad_pool.data(), seq.data(), slots.data()}), bucket);
    count_violations(*ex, b, flag.data());
    EXPECT_EQ(ex->counters().synchronizations, syncs) << "the count does not synchronise";
    EXPECT_EQ(ex->counters().copies_to_host, reads) << "nor read back";
    EXPECT_EQ(flag.download()[0], 1) << "after staging";
    setup_round(*ex, b, bucket, eng.tables());
    for (std::int32_t s = 0; s < cfg.num_steps; ++s) step_metadata(*ex, b, bucket, s);
    count_violations(*ex, b, flag.data());
    EXPECT_EQ(flag.download()[0], 1) << "after the round (setup resets all but staging's word)";
    const std::vector<guard_word> words = read_guards(*ex, b);
    for (std::size_t i = 0; i < words.size(); ++i) {
      EXPECT_EQ(words[i].violations,
                i == static_cast<std::size_t>(plan_layout::guard_stage) ? 1 : 0)
          << "guard word " << i << ": " << describe(words[i]);
    }
    const guard_word& g = words[plan_layout::guard_stage];
    EXPECT_EQ(g.kind, static_cast<std::int32_t>(violation_kind::bad_input));
    EXPECT_EQ(g.kernel, static_cast<std::int32_t>(kernel_id::stage_inputs));
    EXPECT_EQ(g.row, static_cast<std::int32_t>(bad));
    EXPECT_EQ(g.value, pool64[bad]);
    // A clean round clears it: staging resets its own word.
    (void)stage_round(*ex, b, {batch, pool.data(), seq.data(), slots.data()});
    count_violations(*ex, b, flag.data());
    EXPECT_EQ(flag.download()[0], 0);
    if (HasFailure()) return;
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(OpsEdges);

}  // namespace
}  // namespace specgraph::testing
