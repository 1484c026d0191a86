// draft_runtime conformance, run on every executor, against an independent model of a draft
// round (testing/reference_round.hpp, written from docs/metadata.md, never calling the library):
// every path (replay, run_round, whole-round graphs, run_eager; stage, stage_device) on random
// rounds; padded rows reset; slice-before-scatter; nothing allocates or synchronises after
// capture; bad input rejected before anything is written; device contents checked by kernels.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/runtime.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

draft_config small_config(std::int32_t page_size = 4) {
  draft_config c;
  c.max_batch = 12;
  c.topk = 3;
  c.num_steps = 4;
  c.page_size = page_size;
  c.max_context_len = 64;
  c.pool_rows = 16;
  c.kv_slots = 1 << 20;
  return c;
}

void expect_error(const std::function<void()>& call, const std::string& detail) {
  try {
    call();
    ADD_FAILURE() << "expected an error mentioning " << detail;
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find(detail), std::string::npos) << e.what();
  }
}

class Runtime : public ExecutorTest {};

// Every path against the model on random rounds: batches alternating big and small (padding and
// stale rows from the previous, larger round), random depths, host and device staging,
// step-by-step replay, run_round (whole-round graphs for full rounds) and eager runs, at page
// sizes 1, 2, 16 and one larger than any context (no whole prefix page at all). The whole arena
// and the probe outputs are poisoned before each round, so a step that does not run cannot pass.
TEST_P(Runtime, EveryPathMatchesTheIndependentModel) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const std::int32_t ps : {1, 2, 16, 1024}) {
    SCOPED_TRACE("page_size " + std::to_string(ps));
    draft_config c = small_config(ps);
    c.round_graphs = true;
    sim_engine eng(*ex, c, rng);
    eng.rt().capture();
    const std::vector<std::int32_t>& buckets = eng.rt().plan().config.buckets;
    std::vector<bool> bucket_seen(13, false);
    for (int round = 0; round < 48; ++round) {
      // The first rounds walk every bucket (one above the previous bucket, so padding shows);
      // then batches alternate between big and small.
      const auto i = static_cast<std::size_t>(round);
      const std::int32_t batch = i < buckets.size() ? (i == 0 ? 1 : buckets[i - 1] + 1)
                                 : round % 2 == 0   ? static_cast<std::int32_t>(9 + rng() % 4)
                                                    : static_cast<std::int32_t>(1 + rng() % 3);
      const int path = round % 3;  // 0: replay(s) one by one, 1: run_round, 2: run_eager
      // With round graphs the last step has no graph of its own: replay(s) runs up to step 2.
      const auto depth = static_cast<std::int32_t>(1 + rng() % (path == 0 ? 3 : 4));
      const bool from_device = round % 2 == 1;
      SCOPED_TRACE("round " + std::to_string(round) + ": batch " + std::to_string(batch) +
                   ", depth " + std::to_string(depth) + ", path " + std::to_string(path) +
                   (from_device ? ", staged from device memory" : ", staged from the host"));
      const host_round r = eng.random_round(rng, batch);
      eng.poison();
      if (from_device) {
        dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
        dvec<std::int64_t> slots(*ex, r.out_cache_loc);
        eng.rt().stage_device({r.batch, pool.data(), seq.data(), slots.data()});
        ex->synchronize();  // the temporaries are freed at the end of this scope
      } else {
        eng.rt().stage(r.inputs());
      }
      for (std::int32_t s = 0; s < depth; ++s) {
        if (path == 0) eng.rt().replay(s);
        if (path == 2) eng.rt().run_eager(s);
      }
      if (path == 1) eng.rt().run_round(depth);
      bucket_seen[static_cast<std::size_t>(eng.rt().staged_bucket())] = true;
      expect_matches_model(eng, eng.model_of(r, depth), depth);
      if (HasFailure()) return;
    }
    for (const std::int32_t bucket : buckets) {
      EXPECT_TRUE(bucket_seen[static_cast<std::size_t>(bucket)]) << "bucket " << bucket;
    }
  }
}

// After a full round, a round staged from device memory at page size 1 (where a stale pool row
// shows: a padded request reads req_to_token[pool row][0]) equals the model in every input and
// table. Fails if the staging kernel leaves padded req_pool_index or the real batch stale.
TEST_P(Runtime, DeviceStagingResetsEveryPaddedInputAndWritesTheRealBatch) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, small_config(1), rng);
  eng.rt().capture();
  for (int round = 0; round < 8; ++round) {
    eng.rt().stage(eng.random_round(rng, 12).inputs());  // real values in every row
    eng.rt().run_round(4);
    const host_round r = eng.random_round(rng, static_cast<std::int32_t>(1 + rng() % 7));
    dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
    dvec<std::int64_t> slots(*ex, r.out_cache_loc);
    const executor_counters before = ex->counters();
    eng.rt().stage_device({r.batch, pool.data(), seq.data(), slots.data()});
    EXPECT_EQ(ex->counters().synchronizations, before.synchronizations);
    EXPECT_EQ(ex->counters().copies_to_host, before.copies_to_host);
    eng.rt().run_round(4);
    expect_matches_model(eng, eng.model_of(r, 4), 4);
    if (HasFailure()) return;
  }
  device_round_inputs bad;
  bad.batch = 13;
  bad.req_pool_index = bad.seq_len = eng.rt().buffers().seq_len();
  bad.out_cache_loc = eng.rt().buffers().out_cache_loc();
  expect_invalid([&] { eng.rt().stage_device(bad); }, "batch", "13 exceeds max_batch 12");
}

// A full batch leaves real values in every row of its bucket; a smaller batch in the same
// bucket must see them reset (seq_len 1, pool row 0, slots 0), not reuse them.
TEST_P(Runtime, PaddedRowsAreResetEveryRound) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.buckets = {4, 8, 12};
  sim_engine eng(*ex, c, rng);
  eng.rt().capture();
  eng.rt().stage(eng.random_round(rng, 8).inputs());
  eng.rt().run_round(4);
  const host_round small = eng.random_round(rng, 5);
  eng.rt().stage(small.inputs());
  eng.rt().run_round(4);
  ASSERT_EQ(eng.rt().staged_bucket(), 8);
  const auto pool = eng.read(eng.rt().buffers().req_pool_index(), 8);
  const auto seq = eng.read(eng.rt().buffers().seq_len(), 8);
  const auto slots = eng.read(eng.rt().buffers().out_cache_loc(), 8 * 3 * 4);
  EXPECT_EQ(eng.read(eng.rt().buffers().real_batch(), 1)[0], 5);
  for (std::size_t r = 5; r < 8; ++r) {
    EXPECT_EQ(pool[r], 0);
    EXPECT_EQ(seq[r], 1);
    for (std::size_t j = 0; j < 12; ++j) EXPECT_EQ(slots[r * 12 + j], 0);
  }
  // Padded rows point at page 0 only and read 1 + d tokens.
  for (std::int32_t s = 0; s < 4; ++s) {
    const auto table =
        eng.read(eng.rt().buffers().expand_page_table(s), 24 * static_cast<std::size_t>(s + 2));
    const auto seqlen = eng.read(eng.rt().buffers().expand_cache_seqlen(s), 24);
    for (std::size_t row = 15; row < 24; ++row) {
      for (std::size_t col = 0; col < static_cast<std::size_t>(s + 2); ++col) {
        EXPECT_EQ(table[row * static_cast<std::size_t>(s + 2) + col], 0) << "row " << row;
      }
      EXPECT_EQ(seqlen[row], 1 + s + 1);
    }
  }
  expect_matches_model(eng, eng.model_of(small, 4), 4);
}

// Slice-before-scatter: whatever sits in columns >= s + 1 of each branch row, the step-s tables
// are identical.
TEST_P(Runtime, StepTablesIgnoreColumnsPastDecodeLength) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(2);
  c.num_steps = 6;
  sim_engine eng(*ex, c, rng);
  eng.rt().capture();
  const host_round r = eng.random_round(rng, 10);
  eng.rt().stage(r.inputs());
  eng.rt().run_round(6);
  const std::size_t rows = static_cast<std::size_t>(eng.rt().staged_bucket()) * 3;
  std::vector<std::vector<std::int32_t>> tables;
  for (std::int32_t s = 0; s < 6; ++s) {
    tables.push_back(
        eng.read(eng.rt().buffers().expand_page_table(s), rows * static_cast<std::size_t>(s + 2)));
  }
  for (std::int32_t s = 0; s < 6; ++s) {
    host_round garbage = r;
    for (std::size_t row = 0; row < 30; ++row) {
      for (std::int32_t j = s + 1; j < 6; ++j) {
        garbage.out_cache_loc[row * 6 + static_cast<std::size_t>(j)] =
            static_cast<std::int64_t>(rng() % (1 << 20));
      }
    }
    eng.rt().stage(garbage.inputs());
    eng.rt().run_round(s + 1);
    EXPECT_EQ(
        eng.read(eng.rt().buffers().expand_page_table(s), rows * static_cast<std::size_t>(s + 2)),
        tables[static_cast<std::size_t>(s)])
        << "step " << s;
    EXPECT_EQ(
        eng.rt().read_guards()[static_cast<std::size_t>(plan_layout::guard_expand(s))].violations,
        0);
  }
}

TEST_P(Runtime, NothingAllocatesOrSynchronisesAfterCapture) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, small_config(4), rng);
  eng.rt().capture();
  const executor_counters before = ex->counters();
  for (int round = 0; round < 20; ++round) {
    eng.rt().stage(eng.random_round(rng, static_cast<std::int32_t>(1 + rng() % 12)).inputs());
    eng.rt().run_round(static_cast<std::int32_t>(1 + rng() % 4));
  }
  const executor_counters after = ex->counters();
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.synchronizations, before.synchronizations);
  EXPECT_EQ(after.copies_to_host, before.copies_to_host);
  EXPECT_EQ(after.kernel_launches, before.kernel_launches) << "replay must launch graphs only";
  EXPECT_EQ(after.copies_to_device - before.copies_to_device, 40) << "two copies per stage()";
  EXPECT_GE(after.graph_launches - before.graph_launches, 20);
}

TEST_P(Runtime, BadRoundInputIsRejectedBeforeAnythingIsWritten) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, small_config(4), rng);
  eng.rt().capture();
  const host_round good = eng.random_round(rng, 7);
  eng.rt().stage(good.inputs());
  const auto snapshot = [&] {
    return std::make_pair(eng.read(eng.rt().buffers().real_batch(), 1 + 2 * 12),
                          eng.read(eng.rt().buffers().out_cache_loc(), 12 * 12));
  };
  const auto before = snapshot();
  auto expect_rejected = [&](host_round r, const std::string& field, const std::string& detail) {
    try {
      eng.rt().stage(r.inputs());
      ADD_FAILURE() << "expected rejection naming " << field;
    } catch (const invalid_argument& e) {
      EXPECT_EQ(e.field(), field) << e.what();
      EXPECT_NE(std::string(e.what()).find(detail), std::string::npos) << e.what();
    }
    EXPECT_TRUE(snapshot() == before)
        << "a rejected round wrote into the static inputs (" << field << ")";
  };
  host_round r = eng.random_round(rng, 13);
  expect_rejected(r, "batch", "13 exceeds max_batch 12");
  r = good;
  r.batch = -1;  // 0 is an idle rank (runtime_dp_test)
  expect_rejected(r, "batch", "-1 is below the minimum 0");
  r = good;
  r.seq_len[3] = 0;
  expect_rejected(r, "seq_len[3]", "0 is outside [1, max_context_len 64]");
  r = good;
  r.seq_len[1] = 65;
  expect_rejected(r, "seq_len[1]", "65 is outside");
  r = good;
  r.req_pool_index[2] = 16;
  expect_rejected(r, "req_pool_index[2]", "16 is outside [0, pool_rows 16)");
  r = good;
  r.out_cache_loc[1 * 12 + 2 * 4 + 3] = -1;
  expect_rejected(r, "out_cache_loc[1][2][3]", "-1 is outside [0, kv_slots 1048576)");
  r = good;
  r.out_cache_loc[0] = 1 << 20;
  expect_rejected(r, "out_cache_loc[0][0][0]", "1048576 is outside");

  // Replay misuse, each named.
  eng.rt().stage(good.inputs());
  expect_invalid([&] { eng.rt().replay(4); }, "step", "4 is outside [0, num_steps 4)");
  expect_invalid([&] { eng.rt().replay(-1); }, "step", "-1 is outside [0, num_steps 4)");
  expect_invalid([&] { eng.rt().replay(2); }, "step", "2 replayed out of order");
  expect_invalid([&] { eng.rt().run_round(0); }, "depth", "0 is below the minimum 1");
  expect_invalid([&] { eng.rt().run_round(5); }, "depth", "5 exceeds num_steps 4");
}

// Device contents cannot be read before they are written; the kernels check them instead.
TEST_P(Runtime, BadSlotStagedFromDeviceIsNamedByTheGuards) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.checked = true;
  sim_engine eng(*ex, c, rng);
  eng.rt().capture();
  host_round r = eng.random_round(rng, 3);
  r.out_cache_loc[1 * 4 + 0] = -5;  // request 0, branch 1, draft token 0
  dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
  dvec<std::int64_t> slots(*ex, r.out_cache_loc);
  eng.rt().stage_device({r.batch, pool.data(), seq.data(), slots.data()});
  try {
    eng.rt().run_round(2);
    FAIL() << "expected guard_violation";
  } catch (const guard_violation& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("expand.page_table (step 0, bucket 3, row 1)"), std::string::npos) << what;
    EXPECT_NE(what.find("bad input"), std::string::npos) << what;
    EXPECT_NE(what.find("value -5"), std::string::npos) << what;
  }
}

// A slot equal to kv_slots is the first one out of range. Fails on a kernel whose slot bound is
// off by one (slot > slot_limit), which no host-staged round can reach (stage() refuses it).
TEST_P(Runtime, ASlotEqualToKvSlotsFromDeviceMemoryIsRefused) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, small_config(4), rng);
  eng.rt().capture();
  host_round r = eng.random_round(rng, 2);
  r.out_cache_loc[3 * 4 + 0] = eng.config().kv_slots;  // request 1, branch 0, draft token 0
  dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
  dvec<std::int64_t> slots(*ex, r.out_cache_loc);
  eng.poison();
  eng.rt().stage_device({r.batch, pool.data(), seq.data(), slots.data()});
  eng.rt().run_round(1);
  const guard_word g = eng.rt().read_guards()[plan_layout::guard_expand(0)];
  ASSERT_EQ(g.violations, 1);
  EXPECT_EQ(static_cast<violation_kind>(g.kind), violation_kind::bad_input);
  EXPECT_EQ(g.row, 3);
  EXPECT_EQ(g.column, 0);
  EXPECT_EQ(g.value, eng.config().kv_slots);
  const auto table = eng.read(eng.rt().buffers().expand_page_table(0), 6 * 2);
  EXPECT_EQ(table[6], 0) << "the refused row is written as a padded row";
  EXPECT_EQ(table[7], 0) << "the refused row is written as a padded row";
  EXPECT_EQ(eng.read(eng.rt().buffers().expand_cache_seqlen(0), 6)[3], 1 % 4 + 1);
  EXPECT_NE(table[4], static_cast<std::int32_t>(0xA5A5A5A5)) << "row 2 is fine and written";
}

// The layout check has two halves: in-page offsets, and the number of page runs. Here every
// offset is right but the branch jumps to another page mid-page, so only the run count tells.
// Fails with the run-count half disabled.
TEST_P(Runtime, CheckedModeCatchesAWrongRunCountWithRightOffsets) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(16);
  c.checked = true;
  sim_engine eng(*ex, c, rng);
  eng.rt().capture();
  host_round r = eng.random_round(rng, 2);
  r.seq_len[1] = 17;  // last_page_len 1: draft tokens at offsets 1, 2, 3, 4 of one page
  for (std::int32_t t = 0; t < 3; ++t) {
    for (std::int32_t j = 0; j < 4; ++j) {
      // Branch 0 (row 3) moves from page 40 to page 41 after two tokens; branches 1 and 2 stay.
      const std::int64_t page = t == 0 ? (j < 2 ? 40 : 41) : 50 + t;
      r.out_cache_loc[static_cast<std::size_t>((3 + t) * 4 + j)] = page * 16 + 1 + j;
    }
  }
  eng.rt().stage(r.inputs());
  try {
    eng.rt().run_round(4);
    FAIL() << "expected guard_violation";
  } catch (const guard_violation& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("expand.page_table (step 2, bucket 2, row 3)"), std::string::npos) << what;
    EXPECT_NE(what.find("layout violation"), std::string::npos) << what;
    EXPECT_NE(what.find("column 2, expected 1, found 2"), std::string::npos) << what;
  }
}

// A violation belongs to its round: the next clean round starts from clean guard words. Fails if
// the round setup stops resetting them.
TEST_P(Runtime, GuardsAreResetEveryRound) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, small_config(4), rng);
  eng.rt().capture();
  host_round bad = eng.random_round(rng, 2);
  bad.out_cache_loc[0] = -3;
  dvec<std::int32_t> pool(*ex, bad.req_pool_index), seq(*ex, bad.seq_len);
  dvec<std::int64_t> slots(*ex, bad.out_cache_loc);
  eng.rt().stage_device({bad.batch, pool.data(), seq.data(), slots.data()});
  eng.rt().run_round(4);
  EXPECT_GT(eng.rt().read_guards()[plan_layout::guard_expand(0)].violations, 0);
  eng.rt().stage(eng.random_round(rng, 2).inputs());
  eng.rt().run_round(4);
  for (const guard_word& g : eng.rt().read_guards()) EXPECT_EQ(g.violations, 0) << describe(g);
}

TEST_P(Runtime, ReplayBeforeCaptureOrStageIsAnError) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, small_config(4), rng);
  expect_error([&] { eng.rt().replay(0); }, "replay before capture()");
  eng.rt().capture();
  expect_error([&] { eng.rt().replay(0); }, "replay before stage()");
}

SPECGRAPH_INSTANTIATE_EXECUTORS(Runtime);

}  // namespace
}  // namespace specgraph::testing
