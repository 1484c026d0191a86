// The sparse fallback (docs/metadata.md section 6): the spec's examples, never past capacity,
// no overflow; the stage list of a chunked sequence; and validation of stage parameters by name.
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/sparse_indices.hpp"
#include "specgraph/error.hpp"
#include "specgraph/metadata.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// ---- fallback ---------------------------------------------------------------------------
std::vector<std::int32_t> fallback(std::int32_t seq_len, std::int32_t max_count, std::int32_t cap) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(cap), -1);
  guard_word g{};
  const std::int32_t n = sparse_fallback_host(seq_len, max_count, out.data(), cap, &g);
  EXPECT_EQ(g.violations, 0);
  for (std::size_t i = static_cast<std::size_t>(n); i < out.size(); ++i) {
    EXPECT_EQ(out[i], -1) << "fallback wrote past its count";
  }
  out.resize(static_cast<std::size_t>(n));
  return out;
}

TEST(SparseFallback, SpecExamples) {
  using v = std::vector<std::int32_t>;
  EXPECT_EQ(fallback(48, 4, 4), (v{0, 12, 24, 36}));
  EXPECT_EQ(fallback(32, 4, 4), (v{0, 8, 16, 24}));
  EXPECT_EQ(fallback(10, 4, 4), (v{0, 3, 6, 9}));
  EXPECT_EQ(fallback(3, 4, 4), (v{0, 1, 2}));
  EXPECT_EQ(fallback(10, 6, 6), (v{0, 2, 4, 6, 8}));
  EXPECT_EQ(fallback(7, 3, 3), (v{0, 3, 6}));
  EXPECT_EQ(fallback(0, 4, 4), v{});
  EXPECT_EQ(fallback(5, 0, 4), v{});
}

// The bug that failed: more indices than the buffer holds. Capped at capacity and recorded.
TEST(SparseFallback, NeverWritesPastCapacity) {
  std::vector<std::int32_t> out(6, -1);
  guard_word g{};
  const std::int32_t n = sparse_fallback_host(50, 5, out.data(), 4, &g);
  EXPECT_EQ(n, 4);
  EXPECT_EQ(out, (std::vector<std::int32_t>{0, 10, 20, 30, -1, -1}));
  ASSERT_EQ(g.violations, 1);
  EXPECT_EQ(static_cast<violation_kind>(g.kind), violation_kind::capacity);
  EXPECT_EQ(g.column, 4);
  EXPECT_EQ(g.capacity, 4);
  EXPECT_EQ(g.value, 40);
}

TEST(SparseFallback, RejectsBadArgumentsByName) {
  std::int32_t out[4];
  try {
    sparse_fallback_host(10, 4, out, 0, nullptr);
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "capacity");
  }
  expect_invalid([&] { sparse_fallback_host(-1, 4, out, 4, nullptr); }, "seq_len",
                 "-1 is below the minimum 0");
  expect_invalid([&] { sparse_fallback_host(10, -4, out, 4, nullptr); }, "max_count",
                 "-4 is below the minimum 0");
}

TEST(SparseStages, SubWindowConfigurationHasTheSpecStages) {
  const auto stages = sparse_stages(128, 64 - 16);
  ASSERT_EQ(stages.size(), 6u);
  EXPECT_EQ(stages[0].prev, 0);
  EXPECT_EQ(stages[0].end, 48);
  EXPECT_EQ(stages[1].prev, 48);
  EXPECT_EQ(stages[1].kind, stage_kind::intra);
  EXPECT_EQ(stages[2].kind, stage_kind::succ);
  EXPECT_EQ(stages[2].end, 96);
  EXPECT_EQ(stages[5].prev, 96);
  EXPECT_EQ(stages[5].kind, stage_kind::inter);
  EXPECT_EQ(stages[5].end, 128);
  EXPECT_EQ(stages[5].chunk_q_len, 32);
  EXPECT_EQ(stage_key_length(stages[3]), 32);  // intra at 96: end - prev
  EXPECT_EQ(stage_key_length(stages[4]), 48);  // succ: chunk_len
  EXPECT_EQ(stage_key_length(stages[5]), 48);  // inter: prev - chunk_len
}

// Regression (issue 11): the fallback's step, (seq_len + count - 1) / count, overflowed int32.
TEST(SparseFallback, StepIsComputedWithoutOverflow) {
  std::vector<std::int32_t> out(2, -1);
  EXPECT_EQ(kernels::sparse_fallback(2147483647, 2, out.data(), 2, nullptr, 0), 2);
  EXPECT_EQ(out, (std::vector<std::int32_t>{0, 1073741824}));
}

TEST(SparseValidation, RejectsBadStagesByName) {
  std::vector<std::int32_t> in{1}, count{1}, sizes{4}, out(4), out_count(1);
  guard_word g{};
  sparse_stage_params p;
  p.vertical = in.data();
  p.vertical_stride = 1;
  p.vertical_count = count.data();
  p.vertical_size = sizes.data();
  p.slash = in.data();
  p.slash_stride = 1;
  p.slash_count = count.data();
  p.slash_size = sizes.data();
  p.heads = 1;
  p.stage = {stage_kind::succ, 10, 20, 48, 10};  // succ needs prev - chunk_len >= 0
  p.out_vertical = out.data();
  p.vertical_capacity = 4;
  p.out_vertical_count = out_count.data();
  p.out_slash = out.data();
  p.slash_capacity = 4;
  p.out_slash_count = out_count.data();
  p.guard = &g;
  try {
    sparse_stage_host(p);
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "stage.prev");
    EXPECT_NE(std::string(e.what()).find("10 is below the minimum 48"), std::string::npos)
        << e.what();
  }
  p.stage = {stage_kind::intra, 0, 48, 48, 48};
  p.vertical_capacity = 0;
  expect_invalid([&] { sparse_stage_host(p); }, "vertical_capacity", "0 is below the minimum 1");
  p.vertical_capacity = 4;
  count[0] = 2;  // more than the stride holds
  try {
    sparse_stage_host(p);
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "vertical_count[0]");
  }
  EXPECT_EQ(out_count[0], 0);
  EXPECT_EQ(g.violations, 0);
}

}  // namespace
}  // namespace specgraph::testing
