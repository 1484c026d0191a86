// plan(): exact static buffer sizes, one arena, the default buckets, the sizing report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/plan.hpp"
#include "tests/test_support.hpp"

namespace specgraph {
namespace {

draft_config config(std::int32_t max_batch = 32, std::int32_t topk = 4, std::int32_t steps = 5,
                    std::int32_t ps = 16, std::int32_t ctx = 1024) {
  draft_config c;
  c.max_batch = max_batch;
  c.topk = topk;
  c.num_steps = steps;
  c.page_size = ps;
  c.max_context_len = ctx;
  c.pool_rows = 64;
  c.kv_slots = 1 << 20;
  return c;
}

TEST(DefaultBuckets, FollowTheCommonListCappedAtMaxBatch) {
  std::vector<std::int32_t> want{1,  2,  3,  4,  5,  6,  7,  8,  10, 12,
                                 14, 16, 18, 20, 22, 24, 26, 28, 30, 32};
  EXPECT_EQ(default_buckets(32), want);
  want.push_back(33);
  EXPECT_EQ(default_buckets(33), want);
  const auto big = default_buckets(300);
  EXPECT_EQ(big[big.size() - 4], 256);
  EXPECT_EQ(big[big.size() - 3], 272);
  EXPECT_EQ(big[big.size() - 2], 288);
  EXPECT_EQ(big.back(), 300);
  EXPECT_TRUE(std::is_sorted(big.begin(), big.end()));
  EXPECT_EQ(std::count(big.begin(), big.end(), 44), 1);
  EXPECT_EQ(std::count(big.begin(), big.end(), 42), 0);
  EXPECT_EQ(default_buckets(1), std::vector<std::int32_t>{1});
}

TEST(Plan, StepTablesAreExactlyDPlusOneWideAndPrefixExistsOnce) {
  for (const std::int32_t steps : {1, 3, 5, 8}) {
    const plan p = make_plan(config(32, 4, steps, 16, 1000));
    for (std::int32_t s = 0; s < steps; ++s) {
      const buffer_spec& t = p.find("expand.page_table", s);
      EXPECT_EQ(t.shape, (std::vector<std::int64_t>{32 * 4, s + 2}));
      EXPECT_EQ(t.capacity, s + 2);
      EXPECT_EQ(t.bytes, static_cast<std::size_t>(32 * 4 * (s + 2) * 4));
      EXPECT_EQ(p.find("expand.cache_seqlen", s).shape, (std::vector<std::int64_t>{128}));
    }
    try {
      (void)p.find("expand.page_table", steps);
      ADD_FAILURE() << "no step " << steps << " table exists";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("no buffer 'expand.page_table' for step"),
                std::string::npos)
          << e.what();
    }
    const buffer_spec& prefix = p.find("prefix.page_table");
    EXPECT_EQ(prefix.shape, (std::vector<std::int64_t>{32, 63}));  // ceil(1000 / 16)
    EXPECT_EQ(std::count_if(p.buffers.begin(), p.buffers.end(),
                            [](const buffer_spec& b) { return b.name == "prefix.page_table"; }),
              1);
    EXPECT_EQ(p.find("input.out_cache_loc").shape, (std::vector<std::int64_t>{32, 4, steps}));
    // Staging, prefix, a word per step, then round.order (docs/metadata.md section 11).
    EXPECT_EQ(p.find("guards").shape, (std::vector<std::int64_t>{2 + steps + 1}));
    EXPECT_EQ(p.find("guards").bytes, static_cast<std::size_t>(2 + steps + 1) * sizeof(guard_word));
    EXPECT_EQ(p.layout.guard_order, 2 + steps);
  }
}

TEST(Plan, BuffersAreAlignedDisjointAndInsideOneArena) {
  draft_config c = config(64, 8, 5, 16, 4096);
  c.sparse = sparse_config{4, {4, 2, 4, 3}, {4, 4, 1, 0}, 128};
  const plan p = make_plan(c);
  std::vector<const buffer_spec*> sorted;
  for (const buffer_spec& b : p.buffers) sorted.push_back(&b);
  std::sort(sorted.begin(), sorted.end(),
            [](const buffer_spec* a, const buffer_spec* b) { return a->offset < b->offset; });
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    EXPECT_EQ(sorted[i]->offset % sorted[i]->alignment, 0u) << sorted[i]->name;
    if (i + 1 < sorted.size()) {
      EXPECT_LE(sorted[i]->offset + sorted[i]->bytes, sorted[i + 1]->offset) << sorted[i]->name;
    }
  }
  EXPECT_LE(sorted.back()->offset + sorted.back()->bytes, p.total_bytes);
  EXPECT_EQ(p.total_bytes % arena_alignment, 0u);
  // The small inputs and the round control words are packed so stage() copies them with one
  // transfer.
  // real_batch, then step, max_depth, min_confidence, iterations, progress: 24 bytes.
  EXPECT_EQ(p.find("input.req_pool_index").offset, p.find("input.real_batch").offset + 24);
  EXPECT_EQ(p.find("round.progress").offset, p.find("input.real_batch").offset + 20);
  EXPECT_EQ(p.find("round.step").offset, p.find("input.real_batch").offset + 4);
  EXPECT_EQ(p.find("input.seq_len").offset, p.find("input.req_pool_index").offset + 64 * 4);
  // Sparse buffers sized per head: the largest head size clamped to the keys seen.
  EXPECT_EQ(p.find("sparse.intra.vertical").shape, (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(p.find("sparse.inter.slash").shape, (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(p.find("guards").shape, (std::vector<std::int64_t>{2 + 5 + 3 + 1}));
}

TEST(Plan, VerticalCapacityClampsToTheKeysSeenSlashDoesNot) {
  draft_config c = config();
  c.sparse = sparse_config{2, {64, 8}, {3, 12}, 10};
  const plan p = make_plan(c);
  EXPECT_EQ(p.find("sparse.succ.vertical").capacity, 10);
  EXPECT_EQ(p.find("sparse.succ.slash").capacity, 12);
  EXPECT_EQ(p.find("sparse.vertical_in").capacity, 64);
}

TEST(Plan, ReportComparesWithTodaysEngineSizing) {
  const plan p = make_plan(config(32, 4, 5, 16, 1024));
  // Today: prefix 1024 columns x 32 rows x 5 steps; expand 5 columns x 128 rows x 5 steps.
  EXPECT_EQ(p.today.prefix_table_bytes, 5u * 32 * 1024 * 4);
  EXPECT_EQ(p.today.expand_table_bytes, 5u * 128 * 5 * 4);
  EXPECT_EQ(p.our_prefix_table_bytes, 32u * 64 * 4);
  EXPECT_EQ(p.our_expand_table_bytes, 128u * (2 + 3 + 4 + 5 + 6) * 4);
  EXPECT_GT(p.today.total_bytes, 20 * p.total_bytes / 10);
  const std::string text = p.report_text();
  EXPECT_NE(text.find("expand.page_table"), std::string::npos);
  EXPECT_NE(text.find("[128x6]"), std::string::npos) << text;
  EXPECT_NE(text.find(std::to_string(p.total_bytes) + " bytes in one allocation"),
            std::string::npos);
  const std::string json = p.report_json();
  EXPECT_NE(json.find("\"total_bytes\":" + std::to_string(p.total_bytes)), std::string::npos);
  EXPECT_NE(json.find("\"name\":\"expand.page_table\",\"step\":4,\"shape\":[128,6]"),
            std::string::npos)
      << json;
}

TEST(Plan, BucketForPicksTheSmallestBucketAtLeastTheBatch) {
  draft_config c = config(40);
  c.buckets = {4, 16, 40};
  const plan p = make_plan(c);
  EXPECT_EQ(p.bucket_for(1), 4);
  EXPECT_EQ(p.bucket_for(4), 4);
  EXPECT_EQ(p.bucket_for(5), 16);
  EXPECT_EQ(p.bucket_for(40), 40);
  try {
    (void)p.bucket_for(41);
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "batch");
    EXPECT_NE(std::string(e.what()).find("41 exceeds the largest bucket 40"), std::string::npos);
  }
  testing::expect_invalid([&] { (void)p.bucket_for(0); }, "batch", "0 is below the minimum 1");
}

TEST(DefaultBuckets, RejectsOutOfRangeMaxBatchByName) {
  // default_buckets(INT32_MAX) overflowed its loop before (issue 11).
  try {
    (void)default_buckets(2147483647);
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "max_batch");
  }
  const auto big = default_buckets(1 << 20);
  EXPECT_EQ(big.back(), 1 << 20);
  EXPECT_TRUE(std::is_sorted(big.begin(), big.end()));
}

TEST(Plan, InvalidConfigsNameTheField) {
  struct bad {
    void (*mutate)(draft_config&);
    const char* field;
    const char* detail;
  };
  const bad cases[] = {
      {[](draft_config& c) { c.topk = 0; }, "topk", "0 is below the minimum 1"},
      {[](draft_config& c) { c.page_size = -16; }, "page_size", "-16 is below the minimum 1"},
      {[](draft_config& c) { c.num_steps = 0; }, "num_steps", "0"},
      {[](draft_config& c) { c.max_batch = 0; }, "max_batch", "0"},
      {[](draft_config& c) { c.max_context_len = 0; }, "max_context_len", "0"},
      {[](draft_config& c) { c.pool_rows = 0; }, "pool_rows", "0"},
      {[](draft_config& c) { c.kv_slots = 0; }, "kv_slots", "0"},
      {[](draft_config& c) {
         c.buckets = {1, 8, 8, 32};
       },
       "buckets[2]", "8 is below the minimum 9"},
      {[](draft_config& c) {
         c.buckets = {1, 8, 16};
       },
       "buckets", "the largest bucket 16 is below max_batch 32"},
      {[](draft_config& c) {
         c.sparse = sparse_config{2, {4}, {4, 4}, 64};
       },
       "sparse.vertical_size", "1 entries, expected heads = 2"},
      {[](draft_config& c) {
         c.sparse = sparse_config{1, {-1}, {4}, 64};
       },
       "sparse.vertical_size[0]", "-1"},
      // Regressions (issue 11, found by fuzzing): each of these was accepted before.
      {[](draft_config& c) {  // the ordering check's previous + 1 wrapped; stage() then overflowed
         c.max_batch = 1;
         c.buckets = {2147483647, 1};
       },
       "buckets[0]", "2147483647 exceeds max_batch 1"},
      {[](draft_config& c) {
         c.buckets = {1, 8, 64};
       },
       "buckets[2]", "64 exceeds max_batch 32"},
      {[](draft_config& c) { c.max_context_len = 2147483647; }, "max_context_len",
       "2147483647 exceeds the limit 268435456"},
      {[](draft_config& c) {
         c.max_batch = 1 << 20;
         c.topk = 1024;
       },
       "max_batch", "exceeds the limit 16777216"},
      {[](draft_config& c) {  // page ids above int32 were truncated into the tables
         c.page_size = 1;
         c.kv_slots = (std::int64_t{1} << 33) + 2;
       },
       "kv_slots", "above the int32 page-table limit 2147483647"},
      {[](draft_config& c) { c.page_size = 2147483647; }, "page_size",
       "2147483647 exceeds the limit 1048576"},
      {[](draft_config& c) {  // an allocation that cannot succeed is refused by name first
         c.max_batch = 1 << 20;
         c.topk = 1;
         c.max_context_len = 1 << 28;
         c.page_size = 1;
       },
       "max_context_len", "the arena would need"},
  };
  for (const bad& b : cases) {
    draft_config c = config();
    b.mutate(c);
    try {
      (void)make_plan(c);
      ADD_FAILURE() << "expected rejection of " << b.field;
    } catch (const invalid_argument& e) {
      EXPECT_EQ(e.field(), b.field) << e.what();
      EXPECT_NE(std::string(e.what()).find(b.detail), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace specgraph
