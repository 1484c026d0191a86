// draft_runtime conformance suite, run on every executor: replay equals eager execution, padded
// rows reset, slice-before-scatter, nothing allocates or synchronises after capture, bad input
// rejected before anything is written, capture failures recovered.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/forwarding_executor.hpp"
#include "specgraph/metadata.hpp"
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

// Eager reference: the same kernels and forward, run immediately on the host on a host copy of
// the padded inputs (what stage() is specified to produce).
struct eager_round {
  std::int32_t bucket = 0;
  std::vector<std::int32_t> last_page_len, prefix_seqlen, prefix_table, cu_seqlens_q;
  std::vector<std::vector<std::int32_t>> expand_table, cache_seqlen;
  std::vector<std::vector<std::int64_t>> probe;
};

eager_round run_eager(const plan& pl, const std::vector<std::int32_t>& req_to_token,
                      const host_round& round, std::int32_t depth) {
  const draft_config& c = pl.config;
  eager_round e;
  e.bucket = pl.bucket_for(round.batch);
  const std::int32_t B = e.bucket;
  const std::size_t per_request = static_cast<std::size_t>(c.topk) * c.num_steps;
  std::vector<std::int32_t> pool(static_cast<std::size_t>(B), 0),
      seq(static_cast<std::size_t>(B), 1);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(B) * per_request, 0);
  std::copy(round.req_pool_index.begin(), round.req_pool_index.end(), pool.begin());
  std::copy(round.seq_len.begin(), round.seq_len.end(), seq.begin());
  std::copy(round.out_cache_loc.begin(), round.out_cache_loc.end(), slots.begin());

  const std::int32_t cols = static_cast<std::int32_t>(pl.find("prefix.page_table").capacity);
  e.last_page_len.assign(static_cast<std::size_t>(B), -1);
  e.prefix_seqlen.assign(static_cast<std::size_t>(B), -1);
  e.prefix_table.assign(static_cast<std::size_t>(B) * cols, -1);
  e.cu_seqlens_q.assign(static_cast<std::size_t>(B) + 1, -1);
  guard_word g{};
  prefix_params p;
  p.req_to_token = req_to_token.data();
  p.req_to_token_stride = c.max_context_len;
  p.pool_rows = c.pool_rows;
  p.req_pool_index = pool.data();
  p.seq_len = seq.data();
  p.batch = B;
  p.topk = c.topk;
  p.page_size = c.page_size;
  p.last_page_len = e.last_page_len.data();
  p.prefix_seqlen = e.prefix_seqlen.data();
  p.page_table = e.prefix_table.data();
  p.page_table_stride = cols;
  p.capacity = cols;
  p.cu_seqlens_q = e.cu_seqlens_q.data();
  p.guard = &g;
  prefix_metadata_host(p);

  const std::int32_t rows = B * c.topk;
  for (std::int32_t s = 0; s < depth; ++s) {
    std::vector<std::int32_t> table(static_cast<std::size_t>(rows) * (s + 2), -1),
        cache_seqlen(static_cast<std::size_t>(rows), -1);
    expand_params x;
    x.cache_loc = slots.data();
    x.cache_loc_stride = c.num_steps;
    x.slots_read = s + 1;
    x.decode_length = s + 1;
    x.last_page_len = e.last_page_len.data();
    x.batch = B;
    x.topk = c.topk;
    x.page_size = c.page_size;
    x.page_table = table.data();
    x.page_table_stride = s + 2;
    x.capacity = s + 2;
    x.cache_seqlen = cache_seqlen.data();
    x.guard = &g;
    expand_page_table_host(x);
    std::vector<std::int64_t> probe(static_cast<std::size_t>(rows), 0);
    engine_probe_kernel::params q{};
    q.expand_table = table.data();
    q.expand_capacity = s + 2;
    q.expand_cache_seqlen = cache_seqlen.data();
    q.prefix_table = e.prefix_table.data();
    q.prefix_stride = cols;
    q.prefix_capacity = cols;
    q.prefix_seqlen = e.prefix_seqlen.data();
    q.topk = c.topk;
    q.out = probe.data();
    host_run_rows<engine_probe_kernel>(&q, rows);
    e.expand_table.push_back(table);
    e.cache_seqlen.push_back(cache_seqlen);
    e.probe.push_back(probe);
  }
  EXPECT_EQ(g.violations, 0) << describe(g);
  return e;
}

void expect_replay_matches(sim_engine& eng, const eager_round& want, std::int32_t depth) {
  draft_runtime& rt = eng.rt();
  const std::int32_t B = want.bucket;
  const std::size_t rows = static_cast<std::size_t>(B) * eng.config().topk;
  const std::size_t cols = static_cast<std::size_t>(rt.plan().find("prefix.page_table").capacity);
  ASSERT_EQ(rt.staged_bucket(), B);
  EXPECT_EQ(eng.read(rt.buffers().last_page_len(), static_cast<std::size_t>(B)),
            want.last_page_len);
  EXPECT_EQ(eng.read(rt.buffers().prefix_seqlen(), static_cast<std::size_t>(B)),
            want.prefix_seqlen);
  EXPECT_EQ(eng.read(rt.buffers().prefix_page_table(), static_cast<std::size_t>(B) * cols),
            want.prefix_table);
  EXPECT_EQ(eng.read(rt.buffers().cu_seqlens_q(), static_cast<std::size_t>(B) + 1),
            want.cu_seqlens_q);
  for (std::int32_t s = 0; s < depth; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    EXPECT_EQ(eng.read(rt.buffers().expand_page_table(s), rows * static_cast<std::size_t>(s + 2)),
              want.expand_table[static_cast<std::size_t>(s)]);
    EXPECT_EQ(eng.read(rt.buffers().expand_cache_seqlen(s), rows),
              want.cache_seqlen[static_cast<std::size_t>(s)]);
    EXPECT_EQ(eng.read(eng.probe_out(s), rows), want.probe[static_cast<std::size_t>(s)]);
  }
}

class Runtime : public ExecutorTest {};

TEST_P(Runtime, ReplayEqualsEagerForRandomBatchesBucketsAndDepths) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const std::int32_t ps : {1, 4, 16}) {
    SCOPED_TRACE("page_size " + std::to_string(ps));
    sim_engine eng(*ex, small_config(ps), rng);
    const capture_report report = eng.rt().capture();
    EXPECT_EQ(report.graphs, static_cast<std::int32_t>(eng.rt().plan().config.buckets.size()) * 4);
    const std::vector<std::int32_t>& buckets = eng.rt().plan().config.buckets;
    std::vector<bool> bucket_seen(static_cast<std::size_t>(eng.rt().plan().max_bucket()) + 1,
                                  false);
    for (int round = 0; round < 60; ++round) {
      // The first rounds walk every bucket (a batch one above the previous bucket, so padding is
      // exercised where possible); the rest are random.
      const std::size_t b = static_cast<std::size_t>(round);
      const auto batch = b < buckets.size() ? (b == 0 ? 1 : buckets[b - 1] + 1)
                                            : static_cast<std::int32_t>(1 + rng() % 12);
      const auto depth = static_cast<std::int32_t>(1 + rng() % 4);
      SCOPED_TRACE("round " + std::to_string(round) + ": batch " + std::to_string(batch) +
                   " depth " + std::to_string(depth));
      const host_round r = eng.random_round(rng, batch);
      eng.rt().stage(r.inputs());
      eng.rt().run_round(depth);
      bucket_seen[static_cast<std::size_t>(eng.rt().staged_bucket())] = true;
      expect_replay_matches(eng, run_eager(eng.rt().plan(), eng.req_to_token(), r, depth), depth);
      if (HasFailure()) return;
    }
    for (const std::int32_t bucket : buckets) {
      EXPECT_TRUE(bucket_seen[static_cast<std::size_t>(bucket)]) << "bucket " << bucket;
    }
  }
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
  expect_replay_matches(eng, run_eager(eng.rt().plan(), eng.req_to_token(), small, 4), 4);
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
  r.batch = 0;
  expect_rejected(r, "batch", "0 is below the minimum 1");
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

  // Replay misuse.
  eng.rt().stage(good.inputs());
  EXPECT_THROW(eng.rt().replay(4), invalid_argument);
  EXPECT_THROW(eng.rt().replay(-1), invalid_argument);
  try {
    eng.rt().replay(2);
    ADD_FAILURE() << "step 2 before steps 0 and 1 must be rejected";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("out of order"), std::string::npos) << e.what();
  }
  EXPECT_THROW(eng.rt().run_round(0), invalid_argument);
  EXPECT_THROW(eng.rt().run_round(5), invalid_argument);
}

// Inputs already in executor memory (as an engine holds them on the GPU): the same tables and
// forward outputs as staging from the host, padded rows reset on the device.
TEST_P(Runtime, StagingFromDeviceMemoryEqualsStagingFromHost) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, small_config(4), rng);
  eng.rt().capture();
  eng.rt().stage(eng.random_round(rng, 12).inputs());  // real values in every row first
  eng.rt().run_round(4);
  for (int round = 0; round < 12; ++round) {
    const host_round r = eng.random_round(rng, static_cast<std::int32_t>(1 + rng() % 12));
    dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
    dvec<std::int64_t> slots(*ex, r.out_cache_loc);
    device_round_inputs in;
    in.batch = r.batch;
    in.req_pool_index = pool.data();
    in.seq_len = seq.data();
    in.out_cache_loc = slots.data();
    const executor_counters before = ex->counters();
    eng.rt().stage_device(in);
    EXPECT_EQ(ex->counters().synchronizations, before.synchronizations);
    EXPECT_EQ(ex->counters().copies_to_host, before.copies_to_host);
    eng.rt().run_round(4);
    expect_replay_matches(eng, run_eager(eng.rt().plan(), eng.req_to_token(), r, 4), 4);
    const std::size_t bucket = static_cast<std::size_t>(eng.rt().staged_bucket());
    const auto seq_back = eng.read(eng.rt().buffers().seq_len(), bucket);
    for (std::size_t p = static_cast<std::size_t>(r.batch); p < bucket; ++p)
      EXPECT_EQ(seq_back[p], 1);
    if (HasFailure()) return;
  }
  device_round_inputs bad;
  bad.batch = 13;
  bad.req_pool_index = bad.seq_len = eng.rt().buffers().seq_len();
  bad.out_cache_loc = eng.rt().buffers().out_cache_loc();
  EXPECT_THROW(eng.rt().stage_device(bad), invalid_argument);
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

TEST_P(Runtime, ReplayBeforeCaptureOrStageIsAnError) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, small_config(4), rng);
  EXPECT_THROW(eng.rt().replay(0), error);
  eng.rt().capture();
  EXPECT_THROW(eng.rt().replay(0), error);
}

TEST_P(Runtime, ForwardFailureDuringCaptureNamesBucketAndStepAndRecovers) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.buckets = {4, 12};
  sim_engine eng(*ex, c, rng);
  auto expect_capture_failure = [&](draft_runtime::forward_fn f, std::int32_t bucket,
                                    std::int32_t step, const std::string& detail) {
    eng.rt().set_forward(step, std::move(f));
    try {
      eng.rt().capture();
      ADD_FAILURE() << "capture should have failed";
    } catch (const capture_failed& e) {
      EXPECT_EQ(e.bucket(), bucket);
      EXPECT_EQ(e.step(), step);
      const std::string what = e.what();
      EXPECT_NE(what.find("bucket " + std::to_string(bucket) + ", step " + std::to_string(step)),
                std::string::npos)
          << what;
      EXPECT_NE(what.find(detail), std::string::npos) << what;
    }
    EXPECT_FALSE(ex->capturing());
    eng.rt().set_forward(step, [&eng](const step_view& v) { eng.probe_forward(v); });
  };
  // Largest bucket first: a failure at step 2 is met in bucket 12.
  expect_capture_failure([](const step_view&) { throw std::runtime_error("engine bug"); }, 12, 2,
                         "engine bug");
  expect_capture_failure([](const step_view& v) { v.ex->synchronize(); }, 12, 1, "synchronize");
  expect_capture_failure([](const step_view& v) { (void)v.ex->allocate(64); }, 12, 3, "allocate");
  expect_capture_failure(
      [](const step_view& v) {
        std::int32_t x = 0;
        v.ex->copy_to_host(&x, v.real_batch, sizeof x);
      },
      12, 0, "copy_to_host");
  // Every forward fixed again: capture succeeds and rounds replay correctly.
  eng.rt().capture();
  const host_round r = eng.random_round(rng, 9);
  eng.rt().stage(r.inputs());
  eng.rt().run_round(4);
  expect_replay_matches(eng, run_eager(eng.rt().plan(), eng.req_to_token(), r, 4), 4);
}

// The same work without graphs, on the same executor: identical tables and forward outputs.
TEST_P(Runtime, EagerStepsEqualReplayedSteps) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, small_config(4), rng);
  eng.rt().capture();
  for (int round = 0; round < 10; ++round) {
    const host_round r = eng.random_round(rng, static_cast<std::int32_t>(1 + rng() % 12));
    const std::size_t rows = static_cast<std::size_t>(eng.rt().plan().bucket_for(r.batch)) * 3;
    auto snapshot = [&] {
      std::vector<std::vector<std::int64_t>> out;
      for (std::int32_t s = 0; s < 4; ++s) out.push_back(eng.read(eng.probe_out(s), rows));
      const auto prefix = eng.read(eng.rt().buffers().prefix_page_table(), rows / 3 * 16);
      out.emplace_back(prefix.begin(), prefix.end());
      return out;
    };
    eng.rt().stage(r.inputs());
    for (std::int32_t s = 0; s < 4; ++s) eng.rt().run_eager(s);
    const auto eager = snapshot();
    ex->fill_bytes(eng.probe_out(0), 0, 4 * 36 * sizeof(std::int64_t));
    eng.rt().stage(r.inputs());
    eng.rt().run_round(4);
    EXPECT_EQ(snapshot(), eager) << "round " << round;
  }
}

// config.round_graphs: a full round is one launch of the whole-round graph, with the same
// results; shorter rounds still replay step by step.
TEST_P(Runtime, WholeRoundGraphsEqualPerStepReplay) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.round_graphs = true;
  sim_engine eng(*ex, c, rng);
  const capture_report report = eng.rt().capture();
  const auto buckets = static_cast<std::int32_t>(eng.rt().plan().config.buckets.size());
  EXPECT_EQ(report.graphs, buckets * 5);
  EXPECT_EQ(report.per_graph[4].step, all_steps);
  EXPECT_EQ(report.per_graph[4].bucket, 12);
  EXPECT_GT(report.per_graph[4].nodes, report.per_graph[3].nodes);
  for (int round = 0; round < 16; ++round) {
    const host_round r = eng.random_round(rng, static_cast<std::int32_t>(1 + rng() % 12));
    const std::int32_t depth = round % 2 == 0 ? 4 : 2;
    eng.rt().stage(r.inputs());
    const std::int64_t launches = ex->counters().graph_launches;
    eng.rt().run_round(depth);
    EXPECT_EQ(ex->counters().graph_launches - launches, depth == 4 ? 1 : 2);
    expect_replay_matches(eng, run_eager(eng.rt().plan(), eng.req_to_token(), r, depth), depth);
    if (HasFailure()) return;
  }
  // After a whole round, the round is complete: only step 0 may start the next one.
  EXPECT_THROW(eng.rt().replay(1), invalid_argument);
  eng.rt().stage(eng.random_round(rng, 3).inputs());
  eng.rt().run_round(4);
  EXPECT_THROW(eng.rt().replay(4), invalid_argument);
}

TEST_P(Runtime, CapturingAgainUpdatesGraphsInPlace) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, small_config(4), rng);
  const capture_report first = eng.rt().capture();
  EXPECT_EQ(first.instantiated, first.graphs);
  EXPECT_EQ(first.updated, 0);
  const capture_report second = eng.rt().capture();
  EXPECT_EQ(second.updated, second.graphs);
  EXPECT_EQ(second.instantiated, 0);
  ASSERT_EQ(second.per_graph.size(), static_cast<std::size_t>(second.graphs));
  EXPECT_EQ(second.per_graph.front().bucket, 12);  // largest first
  EXPECT_EQ(second.per_graph.back().bucket, 1);
  const host_round r = eng.random_round(rng, 3);
  eng.rt().stage(r.inputs());
  eng.rt().run_round(4);
  expect_replay_matches(eng, run_eager(eng.rt().plan(), eng.req_to_token(), r, 4), 4);
}

// Checked mode: a real row whose slots break the branch layout raises guard_violation naming
// buffer, step, bucket and row.
TEST_P(Runtime, CheckedModeNamesTheViolation) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.checked = true;
  sim_engine eng(*ex, c, rng);
  eng.rt().capture();
  host_round r = eng.random_round(rng, 5);
  eng.rt().stage(r.inputs());
  EXPECT_NO_THROW(eng.rt().run_round(4));
  // Row 7 = request 2, branch 1; its step-1 slot moves to another in-page offset.
  std::int64_t& slot = r.out_cache_loc[7 * 4 + 1];
  slot = (slot / 4) * 4 + (slot % 4 + 1) % 4;
  eng.rt().stage(r.inputs());
  try {
    eng.rt().run_round(4);
    FAIL() << "expected guard_violation";
  } catch (const guard_violation& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("expand.page_table (step 1, bucket 5, row 7)"), std::string::npos) << what;
    EXPECT_NE(what.find("layout"), std::string::npos) << what;
  }
}

TEST_P(Runtime, DotFilesDescribeEveryGraph) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.buckets = {6, 12};
  sim_engine eng(*ex, c, rng);
  eng.rt().capture();
  const auto dir =
      std::filesystem::temp_directory_path() / ("specgraph_dot_" + std::to_string(rng()));
  std::filesystem::create_directories(dir);
  eng.rt().write_dot(dir.string());
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++files;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("digraph"), std::string::npos);
    if (GetParam() == "host") {
      EXPECT_NE(text.find("expand_page_table"), std::string::npos) << entry.path();
      EXPECT_NE(text.find("engine_probe"), std::string::npos) << entry.path();
    }
  }
  EXPECT_EQ(files, 8u);
  std::filesystem::remove_all(dir);
}

// An engine's forward stages sparse vertical/slash indices inside the captured graphs through the
// StepView's sparse buffers; the replayed buffers equal an eager host staging of the same input.
TEST_P(Runtime, ForwardStagesSparseIndicesInsideTheGraph) {
  std::mt19937_64 rng(test_seed());
  draft_config c = small_config(4);
  c.sparse = sparse_config{4, {4, 4, 4, 4}, {4, 4, 4, 4}, 128};
  sim_engine eng(*ex, c, rng);
  const std::vector<sparse_stage> stages = sparse_stages(128, 48);
  // The last chunk (prev 96) has all three stage kinds.
  const std::vector<sparse_stage> last(stages.end() - 3, stages.end());
  eng.rt().set_forward([&](const step_view& v) {
    eng.probe_forward(v);
    ASSERT_TRUE(v.sparse.enabled());
    for (const sparse_stage& st : last) launch_sparse_stage(*v.ex, v.sparse.params(st));
  });
  eng.rt().capture();
  const step_view v = eng.rt().view(12, 0);
  for (int round = 0; round < 5; ++round) {
    // A fresh selection per round, written outside capture into the static sparse inputs. Head 1
    // selects nothing, so every stage slot of it takes the capacity-capped fallback.
    std::vector<std::int32_t> vin(16), sin(16), vcount{4, 0, 4, 2}, scount{4, 0, 3, 4};
    for (auto& x : vin) x = static_cast<std::int32_t>(rng() % 128);
    for (auto& x : sin) x = static_cast<std::int32_t>(rng() % 128);
    ex->copy_to_device(v.sparse.vertical_in, vin.data(), vin.size() * 4);
    ex->copy_to_device(v.sparse.slash_in, sin.data(), sin.size() * 4);
    ex->copy_to_device(v.sparse.vertical_count_in, vcount.data(), 16);
    ex->copy_to_device(v.sparse.slash_count_in, scount.data(), 16);
    eng.rt().stage(eng.random_round(rng, 4).inputs());
    eng.rt().run_round(2);
    ASSERT_EQ(eng.rt()
                  .read_guards()[static_cast<std::size_t>(eng.rt().plan().layout.guard_sparse(0))]
                  .violations,
              0);
    const std::vector<std::int32_t> sizes{4, 4, 4, 4};
    for (const sparse_stage& st : last) {
      SCOPED_TRACE(to_string(st.kind));
      const auto& out = v.sparse.stages[static_cast<int>(st.kind)];
      ASSERT_EQ(out.vertical_capacity, 4);
      std::vector<std::int32_t> want_v(16, -1), want_vc(4, -1), want_s(16, -1), want_sc(4, -1);
      guard_word g{};
      sparse_stage_params p;
      p.vertical = vin.data();
      p.vertical_stride = 4;
      p.vertical_count = vcount.data();
      p.vertical_size = sizes.data();
      p.slash = sin.data();
      p.slash_stride = 4;
      p.slash_count = scount.data();
      p.slash_size = sizes.data();
      p.heads = 4;
      p.stage = st;
      p.out_vertical = want_v.data();
      p.vertical_capacity = 4;
      p.out_vertical_count = want_vc.data();
      p.out_slash = want_s.data();
      p.slash_capacity = 4;
      p.out_slash_count = want_sc.data();
      p.guard = &g;
      sparse_stage_host(p);
      EXPECT_EQ(eng.read(out.vertical, 16), want_v);
      EXPECT_EQ(eng.read(out.vertical_count, 4), want_vc);
      EXPECT_EQ(eng.read(out.slash, 16), want_s);
      EXPECT_EQ(eng.read(out.slash_count, 4), want_sc);
      EXPECT_GT(want_vc[1], 0) << "head 1 must have fallen back";
    }
  }
}

// After a CUDA error the runtime refuses further work instead of replaying into a broken context.
// The fault is injected by an executor wrapper, so this runs on every machine.
class faulty_executor final : public forwarding_executor {
 public:
  using forwarding_executor::forwarding_executor;
  bool fail_next_graph_launch = false;
  int fail_launches_during_capture = 0;  // a cuda_error code, 0 = none
  void launch_graph(graph_exec& e) override {
    if (fail_next_graph_launch) {
      throw cuda_error(700, "cudaGraphLaunch failed: cudaErrorIllegalAddress (injected)");
    }
    forwarding_executor::launch_graph(e);
  }
  void launch(const kernel_launch& k) override {
    if (fail_launches_during_capture != 0 && capturing()) {
      throw cuda_error(
          fail_launches_during_capture,
          "launch failed with injected error " + std::to_string(fail_launches_during_capture));
    }
    forwarding_executor::launch(k);
  }
};

// A CUDA error during capture that is not a capture error (e.g. a sticky illegal address) is
// not "capture failed, runtime usable": it stays a cuda_error and the runtime refuses further
// work. A capture error (900-908: the capture was invalidated) is a capture_failed and leaves it
// usable.
TEST_P(Runtime, ACudaErrorDuringCaptureIsRethrownAndTheRuntimeRefuses) {
  std::mt19937_64 rng(test_seed());
  {
    faulty_executor faulty(make_executor(GetParam()));
    sim_engine eng(faulty, small_config(4), rng);
    faulty.fail_launches_during_capture = 901;  // cudaErrorStreamCaptureInvalidated
    EXPECT_THROW(eng.rt().capture(), capture_failed);
    faulty.fail_launches_during_capture = 0;
    EXPECT_NO_THROW(eng.rt().capture());
  }
  faulty_executor faulty(std::move(ex));
  sim_engine eng(faulty, small_config(4), rng);
  faulty.fail_launches_during_capture = 700;  // cudaErrorIllegalAddress
  try {
    eng.rt().capture();
    ADD_FAILURE() << "expected cuda_error";
  } catch (const capture_failed& e) {
    ADD_FAILURE() << "a sticky CUDA error must not look recoverable: " << e.what();
  } catch (const cuda_error& e) {
    EXPECT_EQ(e.code(), 700);
  }
  EXPECT_FALSE(faulty.capturing()) << "the capture must have been ended";
  faulty.fail_launches_during_capture = 0;
  try {
    eng.rt().stage(eng.random_round(rng, 3).inputs());
    ADD_FAILURE() << "the runtime must refuse further work";
  } catch (const cuda_error&) {
    ADD_FAILURE() << "refusal must not look like a new CUDA error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("refuses to continue after a CUDA error"),
              std::string::npos)
        << e.what();
  }
}

TEST_P(Runtime, RefusesFurtherWorkAfterACudaError) {
  std::mt19937_64 rng(test_seed());
  faulty_executor faulty(std::move(ex));
  sim_engine eng(faulty, small_config(4), rng);
  eng.rt().capture();
  const host_round r = eng.random_round(rng, 6);
  eng.rt().stage(r.inputs());
  eng.rt().run_round(4);
  faulty.fail_next_graph_launch = true;
  eng.rt().stage(r.inputs());
  EXPECT_THROW(eng.rt().replay(0), cuda_error);
  faulty.fail_next_graph_launch = false;  // even with the device "healthy" again
  for (auto attempt : {0, 1, 2}) {
    try {
      if (attempt == 0) eng.rt().replay(0);
      if (attempt == 1) eng.rt().stage(r.inputs());
      if (attempt == 2) eng.rt().capture();
      ADD_FAILURE() << "attempt " << attempt << " should have been refused";
    } catch (const cuda_error&) {
      ADD_FAILURE() << "refusal must not look like a new CUDA error";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("refuses to continue after a CUDA error"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("cudaErrorIllegalAddress"), std::string::npos)
          << e.what();
    }
  }
}

// Regression (issue 11): allocations of 10^11 bytes and more were attempted and failed as a
// plain specgraph::error; an arena larger than the executor's memory is refused by name first.
TEST_P(Runtime, AnArenaLargerThanTheExecutorsMemoryIsRefusedBeforeAllocating) {
  draft_config c = small_config(1);
  c.max_batch = 1 << 20;
  c.topk = 1;
  c.max_context_len = 1 << 16;  // prefix table: 2^20 x 2^16 int32 = 256 GiB
  c.pool_rows = 1;
  std::vector<std::int32_t> rtt(1, 0);
  const std::int64_t allocations = ex->counters().allocations;
  try {
    draft_runtime rt(*ex, c, engine_tables{rtt.data()});
    ADD_FAILURE() << "a 256 GiB arena cannot be allocated";
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "arena") << e.what();
    EXPECT_NE(std::string(e.what()).find("bytes of memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ex->counters().allocations, allocations) << "no allocation may be attempted";
}

SPECGRAPH_INSTANTIATE_EXECUTORS(Runtime);

}  // namespace
}  // namespace specgraph::testing
