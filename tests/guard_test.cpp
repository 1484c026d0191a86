// Guard words: every violation counted, the one with the lowest (row, column) kept, whatever
// order they arrive in, so host and GPU report the same details.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/guard_ops.hpp"
#include "specgraph/metadata.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// A guard keeping the first or the last violation instead of the lowest fails here.
TEST(GuardWord, KeepsTheLowestRowAndColumnAndCountsAll) {
  guard_word g{};
  kernels::guard_record(&g, violation_kind::capacity, kernel_id::expand_page_table, 5, 0, 2, 50);
  kernels::guard_record(&g, violation_kind::bad_input, kernel_id::expand_page_table, 2, 7, -1, 27);
  kernels::guard_record(&g, violation_kind::layout, kernel_id::expand_page_table, 2, 3, 1, 23);
  kernels::guard_record(&g, violation_kind::capacity, kernel_id::expand_page_table, 9, -1, 4, 9);
  EXPECT_EQ(g.violations, 4);
  EXPECT_EQ(g.row, 2);
  EXPECT_EQ(g.column, 3);
  EXPECT_EQ(static_cast<violation_kind>(g.kind), violation_kind::layout);
  EXPECT_EQ(g.capacity, 1);
  EXPECT_EQ(g.value, 23);
  EXPECT_EQ(g.first, kernels::guard_key(2, 3));
}

class GuardOnExecutors : public ExecutorTest {};

// Many rows violate at once (the seed bug on every row, several columns each): the recorded one
// is row 0's first refused column on every executor, and the count covers them all.
TEST_P(GuardOnExecutors, ConcurrentViolationsRecordTheLowestDeterministically) {
  const std::int32_t batch = 64, topk = 4, width = 5;
  std::vector<std::int64_t> cache_loc(static_cast<std::size_t>(batch * topk * width));
  for (std::size_t i = 0; i < cache_loc.size(); ++i) cache_loc[i] = static_cast<std::int64_t>(i);
  dvec<std::int64_t> slots(*ex, cache_loc);
  dvec<std::int32_t> lpl(*ex, static_cast<std::size_t>(batch), 0);
  dvec<std::int32_t> table(*ex, static_cast<std::size_t>(batch * topk * 2), -1);
  dvec<std::int32_t> seqlen(*ex, static_cast<std::size_t>(batch * topk), -1);
  dvec<guard_word> guard(*ex, 1, guard_word{});
  expand_params p;
  p.cache_loc = slots.data();
  p.cache_loc_stride = width;
  p.slots_read = width;  // the unsliced read: 5 runs into a 2-wide table
  p.decode_length = 1;
  p.last_page_len = lpl.data();
  p.batch = batch;
  p.topk = topk;
  p.page_size = 1;
  p.page_table = table.data();
  p.page_table_stride = 2;
  p.capacity = 2;
  p.cache_seqlen = seqlen.data();
  p.guard = guard.data();
  launch_expand_page_table(*ex, p);
  const guard_word g = guard.download()[0];
  EXPECT_EQ(g.violations, batch * topk * 3);  // columns 2, 3, 4 of every row
  EXPECT_EQ(g.row, 0);
  EXPECT_EQ(g.column, 2);
  EXPECT_EQ(g.value, 2);
  EXPECT_EQ(g.capacity, 2);
  EXPECT_EQ(g.first, kernels::guard_key(0, 2)) << "the busy bit must be clear at rest";
}

SPECGRAPH_INSTANTIATE_EXECUTORS(GuardOnExecutors);

}  // namespace
}  // namespace specgraph::testing
