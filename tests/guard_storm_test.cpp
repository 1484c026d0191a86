// Guard words under a storm of refused cells (issue 27 item 9): a poisoned req_to_token row and
// scattered bad slots give thousands of violations in one launch, recorded concurrently on the
// GPU without a lock for the ones that cannot be first. The count must stay exact and the
// recorded violation must be the lowest (row, column), on every executor, against the
// independent reference of kv_indices_reference.hpp. Plus the order key itself, at its edges.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/guard_ops.hpp"
#include "specgraph/kv_indices.hpp"
#include "tests/kv_indices_reference.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// Row dominates column, row -1 (a launch-wide input) comes before row 0, a negative column (a
// per-row scalar input) before column 0, and the extremes keep their order; whatever order the
// records arrive in.
TEST(GuardKey, OrdersByRowThenColumnOverTheWholeRange) {
  const std::vector<std::pair<std::int32_t, std::int32_t>> ascending = {{-1, -1},
                                                                        {-1, 7},
                                                                        {0, INT32_MIN + 1},
                                                                        {0, -1},
                                                                        {0, 0},
                                                                        {0, INT32_MAX},
                                                                        {1, -1},
                                                                        {1, 5},
                                                                        {2, 0},
                                                                        {1 << 20, -7},
                                                                        {INT32_MAX - 1, 3},
                                                                        {INT32_MAX, INT32_MAX}};
  for (std::size_t i = 0; i < ascending.size(); ++i) {
    const std::uint64_t k = kernels::guard_key(ascending[i].first, ascending[i].second);
    EXPECT_NE(k, 0u) << "0 means clean";
    EXPECT_EQ(k & kernels::guard_busy, 0u) << "the busy bit stays free";
    if (i > 0) {
      EXPECT_LT(k, kernels::guard_key(ascending[i - 1].first, ascending[i - 1].second))
          << "(" << ascending[i].first << ", " << ascending[i].second << ") must order after ("
          << ascending[i - 1].first << ", " << ascending[i - 1].second << ")";
    }
  }
  std::mt19937_64 rng(test_seed());
  for (int round = 0; round < 20; ++round) {
    std::vector<std::size_t> order(ascending.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    guard_word g{};
    for (std::size_t i : order) {
      kernels::guard_record(&g, violation_kind::bad_input, kernel_id::draft_kv_indices,
                            ascending[i].first, ascending[i].second, 7,
                            static_cast<std::int64_t>(i));
    }
    EXPECT_EQ(g.violations, static_cast<std::int32_t>(ascending.size()));
    EXPECT_EQ(g.row, -1);
    EXPECT_EQ(g.column, -1);
    EXPECT_EQ(g.value, 0);
    EXPECT_EQ(g.first, kernels::guard_key(-1, -1));
  }
}

class GuardStorm : public ExecutorTest {};

// A case with `batch` requests over long contexts, every slot valid, then poisoned: one request's
// whole pool row, and about `fraction` of the other cells at random.
kv_case storm_case(std::mt19937_64& rng, double fraction) {
  kv_case c;
  std::uniform_int_distribution<int> topk(1, 4), batch(8, 24), seq(256, 3000);
  c.topk = topk(rng);
  c.num_steps = 3;
  c.step_count = 3;
  c.max_seq_len = 4096;
  const std::int32_t n = batch(rng);
  c.pool_rows = n + 1;
  c.width = 4096 + 4 * 3 + 8;
  c.req_to_token.resize(static_cast<std::size_t>(c.pool_rows * c.width));
  std::uniform_int_distribution<std::int32_t> slot(1, 1 << 24);
  for (std::int32_t& s : c.req_to_token) s = slot(rng);
  std::vector<std::int32_t> rows(static_cast<std::size_t>(c.pool_rows));
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int32_t>(i);
  std::shuffle(rows.begin(), rows.end(), rng);
  for (std::int32_t r = 0; r < n; ++r) {
    c.req_pool_index.push_back(rows[static_cast<std::size_t>(r)]);
    c.seq_len.push_back(seq(rng));
  }
  // The poisoned row: every entry of a random request's pool row.
  const std::int32_t victim = std::uniform_int_distribution<std::int32_t>(0, n - 1)(rng);
  const auto base = static_cast<std::size_t>(c.req_pool_index[static_cast<std::size_t>(victim)]) *
                    static_cast<std::size_t>(c.width);
  std::fill(c.req_to_token.begin() + static_cast<std::ptrdiff_t>(base),
            c.req_to_token.begin() + static_cast<std::ptrdiff_t>(base + c.width), -3);
  std::bernoulli_distribution poison(fraction);
  for (std::int32_t& s : c.req_to_token) {
    if (poison(rng)) s = -1 - static_cast<std::int32_t>(rng() % 1000);
  }
  c.capacity = (n * c.topk) * (c.max_seq_len + c.num_steps);  // no capacity violation
  c.indptr_stride = c.rows() + 1;
  return c;
}

TEST_P(GuardStorm, ThousandsOfRefusedCellsRecordTheLowestAndCountAll) {
  std::mt19937_64 rng(test_seed());
  for (int round = 0; round < 3; ++round) {
    const kv_case c = storm_case(rng, round == 0 ? 0.0 : 0.02);
    SCOPED_TRACE(::testing::Message()
                 << "round " << round << ": batch " << c.batch() << ", topk " << c.topk);
    const kv_expected want = kv_reference(c);
    ASSERT_GT(want.records[0].size(), 200u) << "the storm must refuse many cells";
    dvec<std::int32_t> rtt(*ex, c.req_to_token), pool(*ex, c.req_pool_index), seq(*ex, c.seq_len);
    dvec<std::int32_t> indptr(*ex, static_cast<std::size_t>(c.step_count * c.indptr_stride), -7);
    dvec<std::int32_t> indices(*ex, static_cast<std::size_t>(c.indices_size()), -7);
    dvec<guard_word> guards(*ex, static_cast<std::size_t>(c.step_count), guard_word{});
    dvec<std::int32_t> scratch(*ex, static_cast<std::size_t>(kv_indices_scratch_ints(c.batch())),
                               99);
    kv_indices_params p = kv_params_of(c, c.batch());
    p.req_to_token = rtt.data();
    p.req_pool_index = pool.data();
    p.seq_len = seq.data();
    p.kv_indptr = indptr.data();
    p.kv_indices_i32 = indices.data();
    p.guard = guards.data();
    p.scratch = scratch.data();
    launch_draft_kv_indices(*ex, p);
    ex->synchronize();
    const std::vector<guard_word> got = guards.download();
    const kv_record* first = &want.records[0][0];
    for (const kv_record& r : want.records[0]) {
      if (r.row < first->row || (r.row == first->row && r.column < first->column)) first = &r;
    }
    const guard_word& g = got[0];
    EXPECT_EQ(g.violations, static_cast<std::int32_t>(want.records[0].size()));
    EXPECT_EQ(static_cast<violation_kind>(g.kind), first->kind);
    EXPECT_EQ(static_cast<kernel_id>(g.kernel), kernel_id::draft_kv_indices);
    EXPECT_EQ(g.row, first->row);
    EXPECT_EQ(g.column, first->column);
    EXPECT_EQ(g.value, first->value);
    EXPECT_EQ(g.first, kernels::guard_key(first->row, first->column)) << "busy bit left set?";
    for (std::size_t k = 1; k < got.size(); ++k) {
      EXPECT_EQ(got[k].violations, 0) << "launch step " << k << ": bad input goes to step 0's";
      EXPECT_EQ(got[k].first, 0u);
    }
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(GuardStorm);

}  // namespace
}  // namespace specgraph::testing
