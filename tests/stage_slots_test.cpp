// out_cache_loc in int32 or int64, one rule for every way in (issue 28 B5): stage_round (device
// memory) and draft_runtime::stage (host memory) widen int32 slots exactly as they copy int64
// ones. The staged rows are compared with the engine's own values (real rows) and zeros
// (padded rows) after the static inputs were poisoned.
#include <gtest/gtest.h>

#include <cstdint>
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

draft_config slots_config() {
  draft_config c;
  c.max_batch = 7;
  c.topk = 3;
  c.num_steps = 2;
  c.slot_stride = 4;  // rows wider than the steps: the unread slots are copied too
  c.page_size = 2;
  c.max_context_len = 24;
  c.pool_rows = 9;
  c.kv_slots = 1 << 20;
  return c;
}

// What the staged out_cache_loc of `bucket` must hold: the real rows as given, padding 0.
std::vector<std::int64_t> expected_slots(const host_round& r, std::int32_t bucket,
                                         std::size_t per_request) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(bucket) * per_request, 0);
  for (std::size_t i = 0; i < r.out_cache_loc.size(); ++i) out[i] = r.out_cache_loc[i];
  return out;
}

// The round's slot rows laid out `stride` slots apart (the slots past num_steps: 0).
std::vector<std::int64_t> rows_at_stride(const host_round& r, const draft_config& cfg,
                                         std::int32_t stride) {
  std::vector<std::int64_t> wide(static_cast<std::size_t>(r.batch * cfg.topk * stride), 0);
  for (std::int32_t k = 0; k < r.batch * cfg.topk * cfg.num_steps; ++k) {
    wide[static_cast<std::size_t>(k / cfg.num_steps * stride + k % cfg.num_steps)] =
        r.out_cache_loc[static_cast<std::size_t>(k)];
  }
  return wide;
}

class StageSlots : public ExecutorTest {};

TEST_P(StageSlots, Int32SlotsStageAsInt64) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const draft_config cfg = slots_config();
  sim_engine eng(*ex, cfg, rng);
  const plan& p = eng.rt().plan();
  const std::size_t per_request = static_cast<std::size_t>(cfg.topk) * 4;
  const plan own = make_plan(cfg);
  device_buffer arena(*ex, own.total_bytes);
  const draft_buffers b(own, arena.data());
  initialize_buffers(*ex, b);
  for (std::int32_t round = 0; round < 8; ++round) {
    const auto batch = static_cast<std::int32_t>(rng() % 8);  // 0 (an idle rank) .. max_batch
    host_round r = eng.random_round(rng, batch);
    r.out_cache_loc.resize(static_cast<std::size_t>(batch) * per_request);
    for (std::int64_t& s : r.out_cache_loc) {
      s = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(cfg.kv_slots));
    }
    const std::vector<std::int32_t> narrow(r.out_cache_loc.begin(), r.out_cache_loc.end());
    SCOPED_TRACE("round " + std::to_string(round) + ", batch " + std::to_string(batch));
    // Device memory, through stage_round.
    ex->fill_bytes(b.out_cache_loc(), 0xA5, own.max_rows() * std::size_t{4} * 8);
    dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len), slots(*ex, narrow);
    device_round_inputs in;
    in.batch = batch;
    in.req_pool_index = pool.data();
    in.seq_len = seq.data();
    in.out_cache_loc = slots.data();
    const std::int32_t bucket = stage_round(*ex, b, in);
    EXPECT_EQ(eng.read(b.out_cache_loc(), static_cast<std::size_t>(bucket) * per_request),
              expected_slots(r, bucket, per_request));
    // Host memory, through draft_runtime::stage.
    ex->fill_bytes(eng.rt().buffers().out_cache_loc(), 0xA5, p.max_rows() * std::size_t{4} * 8);
    round_inputs host = r.inputs();
    host.out_cache_loc = narrow.data();
    eng.rt().stage(host);
    ex->synchronize();
    EXPECT_EQ(eng.read(eng.rt().buffers().out_cache_loc(),
                       static_cast<std::size_t>(bucket) * per_request),
              expected_slots(r, bucket, per_request));
    if (HasFailure()) return;
  }
}

// A bad int32 slot is named by the host stage like an int64 one, nothing staged.
TEST_P(StageSlots, ABadInt32SlotIsNamed) {
  const std::uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  const draft_config cfg = slots_config();
  sim_engine eng(*ex, cfg, rng);
  host_round r = eng.random_round(rng, 2);
  std::vector<std::int32_t> narrow(static_cast<std::size_t>(2 * cfg.topk * 4), 5);
  narrow[static_cast<std::size_t>(1 * cfg.topk * 4 + 2 * 4 + 1)] = -3;
  round_inputs host = r.inputs();
  host.out_cache_loc = narrow.data();
  expect_invalid([&] { eng.rt().stage(host); }, "out_cache_loc[1][2][1]", "-3 is outside");
}

// Every slot the forwards read is range-checked by the host stage, wherever it lies: packed rows
// (slot_stride = num_steps, one flat loop) and wider rows (a loop per row), int64 and int32. Each
// position of rounds of 1 to 3 requests in turn holds -1 or kv_slots and must be named.
TEST_P(StageSlots, EveryReadSlotIsCheckedInPackedAndWiderRows) {
  std::mt19937_64 rng(test_seed());
  for (const std::int32_t stride : {3, 5}) {
    draft_config cfg = slots_config();
    cfg.num_steps = 3;
    cfg.slot_stride = stride;
    sim_engine eng(*ex, cfg, rng);
    for (std::int32_t batch = 1; batch <= 3; ++batch) {
      const host_round r = eng.random_round(rng, batch);
      for (std::int32_t i = 0; i < batch * cfg.topk * cfg.num_steps; ++i) {
        const std::int32_t row = i / cfg.num_steps, j = i % cfg.num_steps;
        const auto at = static_cast<std::size_t>(row * stride + j);
        const std::int64_t bad = i % 2 == 0 ? -1 : cfg.kv_slots;
        std::vector<std::int64_t> wide = rows_at_stride(r, cfg, stride);
        wide[at] = bad;
        std::vector<std::int32_t> narrow(wide.begin(), wide.end());
        const std::string field = "out_cache_loc[" + std::to_string(row / cfg.topk) + "][" +
                                  std::to_string(row % cfg.topk) + "][" + std::to_string(j) + "]";
        SCOPED_TRACE("slot_stride " + std::to_string(stride) + ", " + field);
        round_inputs in = r.inputs();
        in.out_cache_loc = wide.data();
        expect_invalid([&] { eng.rt().stage(in); }, field, std::to_string(bad) + " is outside");
        in.out_cache_loc = narrow.data();
        expect_invalid([&] { eng.rt().stage(in); }, field, std::to_string(bad) + " is outside");
      }
    }
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(StageSlots);

// With every ring slot in flight (a host executor whose work runs only when the host waits),
// stage() checks the slots before it waits and copies after: a bad slot is named without a
// wait, and the arena then holds the last good round, nothing of the refused one.
TEST(StageSlotsRingFull, ABadSlotIsNamedWithoutAWaitAndNothingOfItIsStaged) {
  std::mt19937_64 rng(test_seed());
  for (const std::int32_t stride : {2, 4}) {
    auto slow = make_host_executor({/*deferred=*/true});
    draft_config cfg = slots_config();
    cfg.slot_stride = stride;
    sim_engine eng(*slow, cfg, rng);
    host_round good;
    std::vector<std::int64_t> good_rows;
    for (std::int32_t i = 0; i < draft_runtime::staging_slots; ++i) {
      good = eng.random_round(rng, 3);
      good_rows = rows_at_stride(good, cfg, stride);
      round_inputs in = good.inputs();
      in.out_cache_loc = good_rows.data();
      eng.rt().stage(in);
    }
    // The last slot read of the last row (request 1, branch 2, slot 1): the end of the check.
    const host_round r = eng.random_round(rng, 2);
    std::vector<std::int64_t> wide = rows_at_stride(r, cfg, stride);
    wide[static_cast<std::size_t>(5 * stride + 1)] = -2;
    const std::vector<std::int32_t> narrow(wide.begin(), wide.end());
    const std::int64_t waits = slow->counters().event_waits;
    round_inputs in = r.inputs();
    in.out_cache_loc = wide.data();
    expect_invalid([&] { eng.rt().stage(in); }, "out_cache_loc[1][2][1]", "-2 is outside");
    in.out_cache_loc = narrow.data();
    expect_invalid([&] { eng.rt().stage(in); }, "out_cache_loc[1][2][1]", "-2 is outside");
    EXPECT_EQ(slow->counters().event_waits, waits) << "slot_stride " << stride;
    slow->synchronize();
    EXPECT_EQ(eng.read(eng.rt().buffers().out_cache_loc(), good_rows.size()), good_rows)
        << "slot_stride " << stride;
    EXPECT_EQ(eng.read(eng.rt().buffers().req_pool_index(), 3), good.req_pool_index);
  }
}

}  // namespace
}  // namespace specgraph::testing
