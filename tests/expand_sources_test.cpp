// The fused expand kernel reads its slots through one of four load paths, picked once per launch
// from the source (kernels/expand_page_table.hpp, run_span): int32 or int64 elements, adjacent
// (element stride 1) or strided. Every case here draws each path in turn, with packed rows, an
// engine's wider rows and a slot-major tensor, and compares the whole table, cache_seqlen and
// the guard word with an independent reference over the round's logical slots. Some cases plant
// one bad slot: the check loop reads through the same path, so the refused row (written as a
// padded row) and the recorded (row, column, value) are compared too.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/metadata.hpp"
#include "testing/branch_layout.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t poison = -7;

// Where slot j of branch t of request r lies in the source, in elements.
struct source_layout {
  bool is_int64 = true;
  std::int64_t slot_stride = 1;     // index_ref::stride
  std::int64_t branch_stride = 0;   // expand_params::cache_loc_stride
  std::int64_t request_stride = 0;  // expand_params::cache_loc_request_stride (0: packed)
  std::int64_t elements = 0;
  std::int64_t at(std::int32_t r, std::int32_t t, std::int32_t j, std::int32_t topk) const {
    const std::int64_t rs = request_stride > 0 ? request_stride : topk * branch_stride;
    return r * rs + t * branch_stride + j * slot_stride;
  }
};

// Path `path` (0: int64 stride 1, 1: int64 strided, 2: int32 stride 1, 3: int32 strided) in one
// of three shapes: packed rows, rows `wide` slots wide (an engine's tensor) or slot-major.
source_layout draw_layout(std::mt19937_64& rng, int path, std::int32_t batch, std::int32_t topk,
                          std::int32_t steps) {
  source_layout l;
  l.is_int64 = path < 2;
  const bool unit = path % 2 == 0;
  const auto wide = static_cast<std::int64_t>(steps + rng() % 3);
  const int shape = static_cast<int>(rng() % 3);
  if (unit) {
    l.branch_stride = shape == 0 ? steps : wide;
    l.request_stride = shape == 0 ? 0 : topk * wide + static_cast<std::int64_t>(rng() % 2);
  } else if (shape == 2) {  // slot-major: [batch][steps][topk] (topk 1 would be stride 1)
    l.slot_stride = topk + 1;
    l.branch_stride = 1;
    l.request_stride = (topk + 1) * steps;
  } else {
    l.slot_stride = 2 + static_cast<std::int64_t>(rng() % 2);
    l.branch_stride = l.slot_stride * wide;
    l.request_stride = topk * l.branch_stride;
  }
  l.elements = l.at(batch, 0, 0, topk) + 1;
  return l;
}

struct expected {
  std::vector<std::int32_t> table;   // [rows][capacity]
  std::vector<std::int32_t> seqlen;  // [rows]
};

// Independent reference: pages of the first d logical slots, unique-consecutive, zero-filled to
// d + 1 columns; a row holding a bad slot is a padded row (every cell 0, seqlen 1 % ps + d).
expected reference(const branch_round& b, std::int32_t d, std::int32_t bad_row) {
  const std::int32_t rows = b.batch * b.topk, capacity = d + 1;
  expected e;
  e.table.assign(static_cast<std::size_t>(rows) * capacity, 0);
  for (std::int32_t row = 0; row < rows; ++row) {
    if (row == bad_row) {
      e.seqlen.push_back(1 % b.page_size + d);
      continue;
    }
    e.seqlen.push_back(b.last_page_len[static_cast<std::size_t>(row / b.topk)] + d);
    std::vector<std::int64_t> pages;
    for (std::int32_t j = 0; j < d; ++j) {
      pages.push_back(b.cache_loc[static_cast<std::size_t>(row) * b.num_steps + j] / b.page_size);
    }
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    for (std::size_t i = 0; i < pages.size(); ++i) {
      e.table[static_cast<std::size_t>(row) * capacity + i] = static_cast<std::int32_t>(pages[i]);
    }
  }
  return e;
}

class ExpandSources : public ExecutorTest {};

TEST_P(ExpandSources, EveryLoadPathMatchesTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int cases = 4 * property_cases(100);
  for (int i = 0; i < cases; ++i) {
    const int path = i % 4;  // every path, in turn
    const std::int32_t page_sizes[] = {1, 4, 16};
    const std::int32_t ps = page_sizes[rng() % 3];
    const auto topk = static_cast<std::int32_t>(1 + rng() % 8);
    const auto steps = static_cast<std::int32_t>(1 + rng() % 6);
    const auto batch = static_cast<std::int32_t>(1 + rng() % 24);
    const auto d = static_cast<std::int32_t>(1 + rng() % steps);
    const branch_round b = make_branch_round(rng, batch, topk, steps, ps, 4096);
    const source_layout l = draw_layout(rng, path, batch, topk, steps);
    const std::int32_t rows = batch * topk;
    // One bad slot in a third of the cases: below 0 or at slot_limit, one of the d slots read.
    const std::int64_t slot_limit = b.pages_in_pool * ps;
    const std::int32_t bad_row = rng() % 3 == 0 ? static_cast<std::int32_t>(rng() % rows) : -1;
    const auto bad_j = static_cast<std::int32_t>(rng() % d);
    const std::int64_t bad_value =
        rng() % 2 == 0 ? -1 - static_cast<std::int64_t>(rng() % 9) : slot_limit;
    SCOPED_TRACE("case " + std::to_string(i) + ": path " + std::to_string(path) + " ps " +
                 std::to_string(ps) + " topk " + std::to_string(topk) + " batch " +
                 std::to_string(batch) + " d " + std::to_string(d) + " strides " +
                 std::to_string(l.slot_stride) + "/" + std::to_string(l.branch_stride) + "/" +
                 std::to_string(l.request_stride) + " bad row " + std::to_string(bad_row));

    // The source: the round's slots at their layout, poison (never read) everywhere else.
    std::vector<std::int64_t> source(static_cast<std::size_t>(l.elements), -3);
    for (std::int32_t row = 0; row < rows; ++row) {
      for (std::int32_t j = 0; j < steps; ++j) {
        const std::int64_t v = row == bad_row && j == bad_j
                                   ? bad_value
                                   : b.cache_loc[static_cast<std::size_t>(row) * steps + j];
        source[static_cast<std::size_t>(l.at(row / topk, row % topk, j, topk))] = v;
      }
    }
    std::vector<std::int32_t> source32(source.begin(), source.end());  // every value fits
    dvec<std::int64_t> src64(*ex, l.is_int64 ? source : std::vector<std::int64_t>{0});
    dvec<std::int32_t> src32(*ex, l.is_int64 ? std::vector<std::int32_t>{0} : source32);
    dvec<std::int32_t> lpl(*ex, b.last_page_len);
    dvec<std::int32_t> table(*ex, static_cast<std::size_t>(rows) * (d + 1), poison);
    dvec<std::int32_t> seqlen(*ex, static_cast<std::size_t>(rows), poison);
    dvec<guard_word> guard(*ex, 1, guard_word{});
    dvec<std::int32_t> layout_batch(*ex, 1, batch);

    expand_params p;
    p.cache_loc = l.is_int64 ? index_ref(src64.data(), l.slot_stride)
                             : index_ref(src32.data(), l.slot_stride);
    p.cache_loc_stride = l.branch_stride;
    p.cache_loc_request_stride = l.request_stride;
    p.slots_read = d;
    p.decode_length = d;
    p.last_page_len = lpl.data();
    p.batch = batch;
    p.topk = topk;
    p.page_size = ps;
    p.page_table = table.data();
    p.page_table_stride = d + 1;
    p.capacity = d + 1;
    p.cache_seqlen = seqlen.data();
    p.guard = guard.data();
    p.slot_limit = slot_limit;
    p.layout_check_batch = layout_batch.data();  // the round is laid out as section 1 says
    launch_expand_page_table(*ex, p);
    ex->synchronize();

    const expected want = reference(b, d, bad_row);
    ASSERT_EQ(table.download(), want.table);
    ASSERT_EQ(seqlen.download(), want.seqlen);
    const guard_word g = guard.download()[0];
    if (bad_row < 0) {
      ASSERT_EQ(g.violations, 0) << describe(g);
    } else {
      ASSERT_EQ(g.violations, 1) << describe(g);
      EXPECT_EQ(static_cast<violation_kind>(g.kind), violation_kind::bad_input);
      EXPECT_EQ(g.row, bad_row);
      EXPECT_EQ(g.column, bad_j);
      EXPECT_EQ(g.value, bad_value);
    }
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(ExpandSources);

}  // namespace
}  // namespace specgraph::testing
