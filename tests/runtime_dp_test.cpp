// Engines under data-parallel attention (docs/engines.md): the caller's bucket, idle ranks with
// a real batch of 0, and out_cache_loc rows wider than the draft forwards (slot_stride). Each
// round is compared with the independent model (testing/reference_round.hpp).
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/runtime.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

draft_config dp_config() {
  draft_config c;
  c.max_batch = 12;
  c.topk = 2;
  c.num_steps = 3;
  c.page_size = 4;
  c.max_context_len = 48;
  c.pool_rows = 16;
  c.kv_slots = 1 << 20;
  c.buckets = {1, 2, 4, 8, 12};
  return c;
}

// The engines' all-reduce of the batch (max over ranks), in memory: every rank blocks until
// all have contributed to the same generation.
class loopback_all_reduce {
 public:
  explicit loopback_all_reduce(int ranks) : ranks_(ranks) {}
  std::int32_t max(std::int32_t value) {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t generation = generation_;
    partial_ = arrived_ == 0 ? value : std::max(partial_, value);
    if (++arrived_ == ranks_) {
      result_ = partial_;
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return generation_ != generation; });
    }
    return result_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int ranks_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::int32_t partial_ = 0, result_ = 0;
};

class DataParallel : public ExecutorTest {};

// Two ranks in two threads, each with its own executor and runtime. Per round each draws its
// own real batch (rank 1 idle, batch 0, every other round; rank 0 now and then too), the
// all-reduce gives the world's largest, the model (not the plan) picks that batch's bucket, and
// both ranks stage with that explicit bucket and replay the same depth. Each rank's whole staged
// round (inputs, prefix and expand tables, what the forward read) equals the model's round for
// its own batch in that bucket, and both ranks launched the same graphs. Fails if the explicit
// bucket is ignored (a rank falls back to the bucket of its own batch) or batch 0 is refused.
TEST_P(DataParallel, RanksReplayTheBucketOfTheLargestBatchIdleRanksIncluded) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  constexpr int ranks = 2, rounds = 16;
  loopback_all_reduce all_reduce(ranks);
  std::vector<std::vector<std::pair<std::int32_t, std::int64_t>>> launched(ranks);
  std::vector<int> idle_rounds(ranks, 0);
  auto rank_main = [&](int rank) {
    auto owned = make_executor(GetParam());  // an executor per rank
    executor* rex = owned.get();
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(rank));
    std::mt19937_64 shared(seed);  // the same sequence on every rank: the round's depth
    sim_engine eng(*rex, dp_config(), rng);
    eng.rt().capture();
    for (int round = 0; round < rounds; ++round) {
      const bool idle = (rank == 1 && round % 2 == 0) || (rank == 0 && round % 5 == 4);
      const std::int32_t batch = idle ? 0 : static_cast<std::int32_t>(1 + rng() % 12);
      const auto depth = static_cast<std::int32_t>(1 + shared() % 3);
      const std::int32_t world = all_reduce.max(batch);
      const model_config m = eng.model();
      const std::int32_t bucket = model_bucket(m, world);
      SCOPED_TRACE("rank " + std::to_string(rank) + ", round " + std::to_string(round) +
                   ": batch " + std::to_string(batch) + ", world " + std::to_string(world) +
                   ", bucket " + std::to_string(bucket));
      const host_round r = eng.random_round(rng, batch);
      // An error fails the test but the rank stays in the all-reduce (no deadlock).
      try {
        eng.poison();
        const std::int64_t before = rex->counters().graph_launches;
        if (round % 3 == 2) {  // from device memory
          dvec<std::int32_t> pool(*rex, r.req_pool_index), seq(*rex, r.seq_len);
          dvec<std::int64_t> slots(*rex, r.out_cache_loc);
          device_round_inputs in{batch, pool.data(), seq.data(), slots.data()};
          in.bucket = bucket;
          eng.rt().stage_device(in);
          rex->synchronize();
        } else {
          round_inputs in = r.inputs();
          in.bucket = bucket;
          eng.rt().stage(in);
        }
        eng.rt().run_round(depth);
        launched[static_cast<std::size_t>(rank)].emplace_back(
            eng.rt().staged_bucket(), rex->counters().graph_launches - before);
        if (batch == 0) ++idle_rounds[static_cast<std::size_t>(rank)];
        expect_matches_model(eng,
                             model_draft_round(m, eng.req_to_token(), batch, r.req_pool_index,
                                               r.seq_len, r.out_cache_loc, depth, bucket),
                             depth);
        for (const guard_word& g : eng.rt().read_guards())
          EXPECT_EQ(g.violations, 0) << describe(g);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    }
  };
  std::thread other(rank_main, 1);
  rank_main(0);
  other.join();
  ASSERT_EQ(launched[0].size(), static_cast<std::size_t>(rounds));
  EXPECT_EQ(launched[0], launched[1]) << "the ranks replayed different graphs";
  EXPECT_GT(idle_rounds[0], 0);
  EXPECT_GT(idle_rounds[1], 0);
}

// A bucket that is not planned, or below the batch, is refused by name (the value, the table,
// the batch and the fix) before anything is written, on both staging paths; so is a batch
// outside [0, max_batch]. 0 keeps the default choice.
TEST_P(DataParallel, AnExplicitBucketOutsideTheTableOrBelowTheBatchIsRefused) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, dp_config(), rng);
  eng.rt().capture();
  const host_round good = eng.random_round(rng, 5);
  eng.rt().stage(good.inputs());
  EXPECT_EQ(eng.rt().staged_bucket(), 8);
  const draft_buffers& b = eng.rt().buffers();
  const auto snapshot = [&] {
    return std::make_pair(eng.read(b.real_batch(), 1 + 2 * 12), eng.read(b.out_cache_loc(), 72));
  };
  const auto before = snapshot();
  const std::string table = "(planned: 1, 2, 4, 8, 12)";
  for (const bool device : {false, true}) {
    SCOPED_TRACE(device ? "stage_device" : "stage");
    dvec<std::int32_t> pool(*ex, good.req_pool_index), seq(*ex, good.seq_len);
    dvec<std::int64_t> slots(*ex, good.out_cache_loc);
    auto stage_with = [&](std::int32_t batch, std::int32_t bucket) {
      if (device) {
        device_round_inputs in{batch, pool.data(), seq.data(), slots.data()};
        in.bucket = bucket;
        eng.rt().stage_device(in);
      } else {
        round_inputs in = good.inputs();
        in.batch = batch;
        in.bucket = bucket;
        eng.rt().stage(in);
      }
    };
    expect_invalid([&] { stage_with(5, 6); }, "bucket",
                   "6 is not a planned bucket " + table + "; pass one of them, or 0");
    expect_invalid([&] { stage_with(5, 4); }, "bucket",
                   "4 is below the batch 5 (its rows cannot hold the round); pass a planned "
                   "bucket >= 5 " +
                       table);
    expect_invalid([&] { stage_with(5, -8); }, "bucket", "-8 is not a planned bucket");
    expect_invalid([&] { stage_with(5, 16); }, "bucket", "16 is not a planned bucket");
    expect_invalid([&] { stage_with(-1, 0); }, "batch", "-1 is below the minimum 0");
    expect_invalid([&] { stage_with(13, 12); }, "batch", "13 exceeds max_batch 12");
    ex->synchronize();
    EXPECT_TRUE(snapshot() == before) << "a refused round wrote into the static inputs";
    EXPECT_EQ(eng.rt().staged_bucket(), 8);
  }
  // The plan's choice, used by both paths: 0 = the smallest bucket holding the batch.
  const plan& p = eng.rt().plan();
  EXPECT_EQ(p.round_bucket(5, 0), 8);
  EXPECT_EQ(p.round_bucket(0, 0), 1);
  EXPECT_EQ(p.round_bucket(0, 12), 12);
  EXPECT_EQ(p.round_bucket(12, 12), 12);
  EXPECT_EQ(p.round_bucket(3, 4), 4);
}

// Rows slot_stride = 6 wide for num_steps = 3 forwards (SGLang's S = num_steps + 1, and wider):
// the slots past num_steps of every row hold poison that is out of range (-1, kv_slots,
// INT64_MAX, ...), so a stage that checked them, or a kernel that read rows at the num_steps
// stride, is refused or recorded (checked mode raises). The staged rows, every table and what
// the forward read equal the model reading rows at stride 6, in per-step and device-step modes;
// the plan sizes out_cache_loc 6 wide and holds num_steps tables.
TEST_P(DataParallel, SlotRowsWiderThanTheForwardsAreReadAtTheirStrideAndTheExtraSlotsNever) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const bool device_steps : {false, true}) {
    SCOPED_TRACE(device_steps ? "device steps" : "per-step graphs");
    draft_config c = dp_config();
    c.slot_stride = 6;
    c.checked = true;
    c.device_steps = device_steps;
    sim_engine eng(*ex, c, rng);
    const plan& p = eng.rt().plan();
    EXPECT_EQ(p.find("input.out_cache_loc").shape, (std::vector<std::int64_t>{12, 2, 6}));
    EXPECT_EQ(eng.rt().view(12, 0).cache_loc_stride, 6);
    EXPECT_EQ(p.layout.expand_stride.size(), 3u);
    const capture_report cap = eng.rt().capture();
    EXPECT_EQ(cap.graphs, device_steps ? 5 : 15);
    const std::int64_t poison[] = {-1, c.kv_slots, std::numeric_limits<std::int64_t>::max(),
                                   std::numeric_limits<std::int64_t>::min()};
    for (int round = 0; round < 12; ++round) {
      const auto batch = static_cast<std::int32_t>(1 + rng() % 12);
      const auto depth = static_cast<std::int32_t>(1 + rng() % 3);
      SCOPED_TRACE("round " + std::to_string(round) + ": batch " + std::to_string(batch) +
                   ", depth " + std::to_string(depth));
      // The generator's rows are num_steps wide; widen them to 6 with poison after.
      const host_round narrow = eng.random_round(rng, batch);
      host_round r = narrow;
      r.out_cache_loc.clear();
      for (std::size_t row = 0; row < static_cast<std::size_t>(batch) * 2; ++row) {
        for (std::size_t j = 0; j < 6; ++j) {
          r.out_cache_loc.push_back(j < 3 ? narrow.out_cache_loc[row * 3 + j]
                                          : poison[(row + j) % 4]);
        }
      }
      eng.poison();
      if (round % 2 == 1) {
        dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
        dvec<std::int64_t> slots(*ex, r.out_cache_loc);
        eng.rt().stage_device({batch, pool.data(), seq.data(), slots.data()});
        ex->synchronize();
      } else {
        eng.rt().stage(r.inputs());
      }
      eng.rt().run_round(depth);  // checked: raises on any guard word
      const model_round want = eng.model_of(r, depth);
      const draft_buffers& b = eng.rt().buffers();
      EXPECT_EQ(eng.read(b.out_cache_loc(), want.out_cache_loc.size()), want.out_cache_loc);
      if (!device_steps) {
        expect_matches_model(eng, want, depth);
        continue;
      }
      // One shared table num_steps + 1 wide: the last step's s + 2 columns of every row.
      const std::size_t rows = static_cast<std::size_t>(want.bucket) * 2;
      const auto width = static_cast<std::size_t>(depth + 1);
      const auto table = eng.read(b.expand_page_table(0), rows * 4);
      const auto& last = want.expand_table[static_cast<std::size_t>(depth - 1)];
      for (std::size_t row = 0; row < rows; ++row) {
        for (std::size_t col = 0; col < width; ++col) {
          EXPECT_EQ(table[row * 4 + col], last[row * width + col]) << "row " << row;
        }
      }
      EXPECT_EQ(eng.read(b.expand_cache_seqlen(0), rows),
                want.cache_seqlen[static_cast<std::size_t>(depth - 1)]);
      if (HasFailure()) return;
    }
  }
}

// slot_stride is validated by name: below num_steps, above the limit; 0 means num_steps.
TEST(SlotStride, IsValidatedAndDefaultsToNumSteps) {
  draft_config c = dp_config();
  EXPECT_EQ(make_plan(c).config.slot_stride, 3);
  c.slot_stride = 2;
  expect_invalid([&] { (void)make_plan(c); }, "slot_stride",
                 "2 is outside [num_steps 3, 65536] (0 = num_steps");
  c.slot_stride = (1 << 16) + 1;
  expect_invalid([&] { (void)make_plan(c); }, "slot_stride", "65537 is outside");
  c.slot_stride = 4;
  const plan p = make_plan(c);
  EXPECT_EQ(p.find("input.out_cache_loc").bytes, 12u * 2 * 4 * 8);
  EXPECT_NE(p.report_text().find("draft forwards: num_steps 3 (steps, each with its expand "
                                 "table); out_cache_loc rows: slot_stride 4 slots (1 per row "
                                 "never read)"),
            std::string::npos)
      << p.report_text();
  EXPECT_NE(p.report_json().find("\"num_steps\":3,\"slot_stride\":4"), std::string::npos);
}

SPECGRAPH_INSTANTIATE_EXECUTORS(DataParallel);

}  // namespace
}  // namespace specgraph::testing
