// Expand page table (docs/metadata.md section 3): spec vectors, random properties against an
// independent reference, poison/canary checks, the seed bug as a negative control, validation.
#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/metadata.hpp"
#include "testing/branch_layout.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t poison = -7;

// Independent reference: plain loops over the spec's definition, with std::unique for the
// unique-consecutive step. Cells at column >= capacity are not part of the table; they are
// reported as violations instead.
struct expand_reference {
  std::vector<std::int32_t> table;                             // [rows][capacity]
  std::vector<std::int32_t> cache_seqlen;                      // [rows]
  std::set<std::pair<std::int32_t, std::int32_t>> violations;  // (row, column)
};

expand_reference reference_expand(const std::vector<std::int64_t>& cache_loc, std::int64_t stride,
                                  std::int32_t slots_read, std::int32_t d,
                                  const std::vector<std::int32_t>& last_page_len, std::int32_t topk,
                                  std::int32_t ps, std::int32_t capacity) {
  const auto rows = static_cast<std::int32_t>(last_page_len.size()) * topk;
  expand_reference ref;
  ref.table.assign(static_cast<std::size_t>(rows) * capacity, 0);
  for (std::int32_t row = 0; row < rows; ++row) {
    ref.cache_seqlen.push_back(last_page_len[static_cast<std::size_t>(row / topk)] + d);
    std::vector<std::int64_t> pages;
    for (std::int32_t j = 0; j < slots_read; ++j) pages.push_back(cache_loc[row * stride + j] / ps);
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    for (std::size_t i = 0; i < pages.size(); ++i) {
      const auto col = static_cast<std::int32_t>(i);
      if (col < capacity) {
        ref.table[static_cast<std::size_t>(row) * capacity + i] =
            static_cast<std::int32_t>(pages[i]);
      } else {
        ref.violations.insert({row, col});
      }
    }
  }
  return ref;
}

// Runs the kernel on `ex` with canary rows around the table and poison in every cell, then
// returns the whole buffer (canaries included) and the guard.
struct expand_run {
  std::vector<std::int32_t> table_buffer;   // [rows + 2][stride]; row 0 and the last are canaries
  std::vector<std::int32_t> seqlen_buffer;  // [rows + 2]
  guard_word guard{};
  std::int64_t stride = 0;
};

struct expand_case {
  std::vector<std::int64_t> cache_loc;
  std::int64_t cache_loc_stride = 0;
  std::vector<std::int32_t> last_page_len;
  std::int32_t topk = 0, page_size = 0, decode_length = 0, slots_read = 0, capacity = 0;
  std::int64_t table_padding = 0;  // extra columns of stride beyond capacity (must stay poison)
  std::int64_t slot_limit = std::numeric_limits<std::int64_t>::max();
  std::int32_t layout_batch = -1;  // < 0: no layout check
};

expand_run run_expand(executor& ex, const expand_case& c) {
  const auto batch = static_cast<std::int32_t>(c.last_page_len.size());
  const std::int64_t rows = static_cast<std::int64_t>(batch) * c.topk;
  const std::int64_t stride = c.capacity + c.table_padding;
  dvec<std::int64_t> cache_loc(ex, c.cache_loc);
  dvec<std::int32_t> lpl(ex, c.last_page_len);
  dvec<std::int32_t> table(ex, static_cast<std::size_t>((rows + 2) * stride), poison);
  dvec<std::int32_t> seqlen(ex, static_cast<std::size_t>(rows + 2), poison);
  dvec<guard_word> guard(ex, 1, guard_word{});
  dvec<std::int32_t> layout_batch(ex, 1, c.layout_batch);

  expand_params p;
  p.cache_loc = cache_loc.data();
  p.cache_loc_stride = c.cache_loc_stride;
  p.slots_read = c.slots_read;
  p.decode_length = c.decode_length;
  p.last_page_len = lpl.data();
  p.batch = batch;
  p.topk = c.topk;
  p.page_size = c.page_size;
  p.page_table = table.data() + stride;
  p.page_table_stride = stride;
  p.capacity = c.capacity;
  p.cache_seqlen = seqlen.data() + 1;
  p.guard = guard.data();
  p.slot_limit = c.slot_limit;
  p.layout_check_batch = c.layout_batch >= 0 ? layout_batch.data() : nullptr;
  launch_expand_page_table(ex, p);
  ex.synchronize();

  expand_run out;
  out.table_buffer = table.download();
  out.seqlen_buffer = seqlen.download();
  out.guard = guard.download()[0];
  out.stride = stride;
  return out;
}

// Every cell within capacity equals the reference; every other cell (canary rows, stride
// padding) still holds the poison.
void expect_matches(const expand_run& run, const expand_reference& ref, std::int64_t rows,
                    std::int32_t capacity) {
  for (std::int64_t r = -1; r <= rows; ++r) {
    for (std::int64_t c = 0; c < run.stride; ++c) {
      const std::int32_t got = run.table_buffer[static_cast<std::size_t>((r + 1) * run.stride + c)];
      if (r < 0 || r == rows || c >= capacity) {
        ASSERT_EQ(got, poison) << "cell outside the table was written: row " << r << " col " << c;
      } else {
        ASSERT_EQ(got, ref.table[static_cast<std::size_t>(r * capacity + c)])
            << "row " << r << " col " << c;
      }
    }
  }
  ASSERT_EQ(run.seqlen_buffer.front(), poison);
  ASSERT_EQ(run.seqlen_buffer.back(), poison);
  for (std::int64_t r = 0; r < rows; ++r) {
    ASSERT_EQ(run.seqlen_buffer[static_cast<std::size_t>(r + 1)],
              ref.cache_seqlen[static_cast<std::size_t>(r)])
        << "cache_seqlen row " << r;
  }
}

class ExpandPageTable : public ExecutorTest {};

// ---- spec vectors (topk 2, ps 4, function-level: slots_read = the whole given width) ------
struct spec_vector {
  const char* name;
  std::vector<std::int32_t> last_page_len;
  std::int32_t d;
  std::vector<std::vector<std::int64_t>> rows;
  std::vector<std::vector<std::int32_t>> expected_table;
  std::vector<std::int32_t> expected_seqlen;
};

std::vector<spec_vector> spec_vectors() {
  return {
      {"A", {3}, 1, {{23, 24}, {31, 32}}, {{5, 6}, {7, 8}}, {4, 4}},
      {"B",
       {3},
       5,
       {{27, 28, 29, 30, 31, 32}, {35, 36, 37, 38, 39, 40}},
       {{6, 7, 8, 0, 0, 0}, {8, 9, 10, 0, 0, 0}},
       {8, 8}},
      {"page crossing", {3}, 2, {{23, 28}, {31, 36}}, {{5, 7, 0}, {7, 9, 0}}, {5, 5}},
      {"multi batch",
       {1, 3, 0},
       3,
       {{1, 2, 3, 4}, {6, 7, 8, 9}, {3, 8, 9, 10}, {14, 15, 16, 17}, {0, 1, 2, 3}, {4, 5, 6, 7}},
       {{0, 1, 0, 0}, {1, 2, 0, 0}, {0, 2, 0, 0}, {3, 4, 0, 0}, {0, 0, 0, 0}, {1, 0, 0, 0}},
       {4, 4, 6, 6, 3, 3}},
  };
}

TEST_P(ExpandPageTable, SpecVectors) {
  for (const spec_vector& v : spec_vectors()) {
    SCOPED_TRACE(v.name);
    expand_case c;
    c.cache_loc_stride = static_cast<std::int64_t>(v.rows[0].size());
    for (const auto& row : v.rows) c.cache_loc.insert(c.cache_loc.end(), row.begin(), row.end());
    c.last_page_len = v.last_page_len;
    c.topk = 2;
    c.page_size = 4;
    c.decode_length = v.d;
    c.slots_read = static_cast<std::int32_t>(c.cache_loc_stride);
    c.capacity = static_cast<std::int32_t>(v.expected_table[0].size());
    c.table_padding = 1;
    const expand_run run = run_expand(*ex, c);
    EXPECT_EQ(run.guard.violations, 0) << describe(run.guard);
    for (std::size_t r = 0; r < v.rows.size(); ++r) {
      std::vector<std::int32_t> got(
          run.table_buffer.begin() + static_cast<std::ptrdiff_t>((r + 1) * run.stride),
          run.table_buffer.begin() + static_cast<std::ptrdiff_t>((r + 1) * run.stride) +
              c.capacity);
      EXPECT_EQ(got, v.expected_table[r]) << "row " << r;
      EXPECT_EQ(run.seqlen_buffer[r + 1], v.expected_seqlen[r]) << "row " << r;
    }
  }
}

// Case B sliced to d = 5 columns (what the runtime does) gives exactly the two pages the 8
// tokens occupy; the slice is expressed by slots_read = d on the same 6-wide rows.
TEST_P(ExpandPageTable, CaseBSlicedToDecodeLength) {
  expand_case c;
  c.cache_loc = {27, 28, 29, 30, 31, 32, 35, 36, 37, 38, 39, 40};
  c.cache_loc_stride = 6;
  c.last_page_len = {3};
  c.topk = 2;
  c.page_size = 4;
  c.decode_length = 5;
  c.slots_read = 5;
  c.capacity = 6;
  const expand_run run = run_expand(*ex, c);
  EXPECT_EQ(run.guard.violations, 0);
  const std::vector<std::int32_t> row0(run.table_buffer.begin() + 6, run.table_buffer.begin() + 12);
  const std::vector<std::int32_t> row1(run.table_buffer.begin() + 12,
                                       run.table_buffer.begin() + 18);
  EXPECT_EQ(row0, (std::vector<std::int32_t>{6, 7, 0, 0, 0, 0}));
  EXPECT_EQ(row1, (std::vector<std::int32_t>{8, 9, 0, 0, 0, 0}));
}

// The bug that crashed engines, as a negative control: num_steps-wide rows read into a
// d + 1 = 2 wide step-0 table. The store to column 2 is refused and recorded; the canary row
// after the table and the stride padding are untouched.
TEST_P(ExpandPageTable, SeedBugIsCaughtNotWritten) {
  expand_case c;
  c.cache_loc = {1, 2, 3, 4, 5};  // ps 2, last_page_len 1: pages 0,1,1,2,2 -> 3 runs
  c.cache_loc_stride = 5;
  c.last_page_len = {1};
  c.topk = 1;
  c.page_size = 2;
  c.decode_length = 1;
  c.slots_read = 5;  // num_steps: the unsliced read
  c.capacity = 2;    // d + 1
  const expand_run run = run_expand(*ex, c);
  ASSERT_EQ(run.guard.violations, 1);
  EXPECT_EQ(static_cast<violation_kind>(run.guard.kind), violation_kind::capacity);
  EXPECT_EQ(static_cast<kernel_id>(run.guard.kernel), kernel_id::expand_page_table);
  EXPECT_EQ(run.guard.row, 0);
  EXPECT_EQ(run.guard.column, 2);
  EXPECT_EQ(run.guard.capacity, 2);
  EXPECT_EQ(run.guard.value, 2);
  EXPECT_NE(describe(run.guard).find("row 0, column 2, capacity 2"), std::string::npos)
      << describe(run.guard);
  // Row 0 holds the two runs that fit; the canary row after it is untouched.
  EXPECT_EQ(run.table_buffer[2], 0);
  EXPECT_EQ(run.table_buffer[3], 1);
  EXPECT_EQ(run.table_buffer[4], poison);
  EXPECT_EQ(run.table_buffer[5], poison);
  EXPECT_EQ(run.seqlen_buffer[1], 2);

  // Sliced to d = 1: one run [0], cache_seqlen 2, no violation.
  c.slots_read = 1;
  const expand_run sliced = run_expand(*ex, c);
  EXPECT_EQ(sliced.guard.violations, 0);
  EXPECT_EQ(sliced.table_buffer[2], 0);
  EXPECT_EQ(sliced.table_buffer[3], 0);
  EXPECT_EQ(sliced.seqlen_buffer[1], 2);
}

// Random rounds laid out as engines lay them out, against the reference. Mostly the runtime's
// sliced read into a d + 1 table (never a violation); sometimes an arbitrary read width and
// capacity (violations exactly where the reference puts columns past capacity).
TEST_P(ExpandPageTable, RandomRoundsMatchReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::int32_t page_sizes[] = {1, 2, 4, 16, 64, 256};
  const int cases = property_cases(10000);
  int violating_cases = 0;
  for (int i = 0; i < cases; ++i) {
    const std::int32_t ps = page_sizes[rng() % 6];
    const auto topk = static_cast<std::int32_t>(1 + rng() % 8);
    const auto steps = static_cast<std::int32_t>(1 + rng() % 8);
    // Batches 1..256, weighted towards small ones so 10,000 cases stay fast.
    const auto batch = static_cast<std::int32_t>(1 + (rng() % 4 == 0 ? rng() % 256 : rng() % 16));
    const branch_round round = make_branch_round(rng, batch, topk, steps, ps, 4096);
    expand_case c;
    c.cache_loc = round.cache_loc;
    c.cache_loc_stride = steps;
    c.last_page_len = round.last_page_len;
    c.topk = topk;
    c.page_size = ps;
    c.decode_length = static_cast<std::int32_t>(1 + rng() % steps);
    c.table_padding = static_cast<std::int64_t>(rng() % 3);
    c.slot_limit = round.pages_in_pool * ps;
    const bool arbitrary = rng() % 5 == 0;
    if (arbitrary) {
      c.slots_read = static_cast<std::int32_t>(1 + rng() % steps);
      c.capacity = static_cast<std::int32_t>(1 + rng() % (steps + 1));
    } else {
      c.slots_read = c.decode_length;
      c.capacity = c.decode_length + 1;
      c.layout_batch = static_cast<std::int32_t>(rng() % (batch + 1));
    }
    SCOPED_TRACE("case " + std::to_string(i) + ": ps " + std::to_string(ps) + " topk " +
                 std::to_string(topk) + " batch " + std::to_string(batch) + " d " +
                 std::to_string(c.decode_length) + " slots_read " + std::to_string(c.slots_read) +
                 " capacity " + std::to_string(c.capacity));
    const expand_reference ref = reference_expand(c.cache_loc, steps, c.slots_read, c.decode_length,
                                                  c.last_page_len, topk, ps, c.capacity);
    const expand_run run = run_expand(*ex, c);
    expect_matches(run, ref, static_cast<std::int64_t>(batch) * topk, c.capacity);
    if (HasFatalFailure()) return;
    ASSERT_EQ(run.guard.violations, static_cast<std::int32_t>(ref.violations.size()))
        << describe(run.guard);
    if (!ref.violations.empty()) {
      ++violating_cases;
      ASSERT_EQ(static_cast<violation_kind>(run.guard.kind), violation_kind::capacity);
      ASSERT_TRUE(ref.violations.count({run.guard.row, run.guard.column})) << describe(run.guard);
    }
  }
  if (cases >= 1000) {
    EXPECT_GT(violating_cases, 0) << "the random mix never exercised a violation";
  }
}

// Layout check: a real row whose slot breaks the section-1 offsets is reported; padded rows
// (requests >= the staged real batch) are exempt.
TEST_P(ExpandPageTable, LayoutCheckFlagsMisplacedSlotAndSkipsPaddedRows) {
  expand_case c;
  // ps 4, last_page_len 3, d 2: slots at offsets 3, 0 of a new page: 23, 28 (pages 5, 7).
  c.cache_loc = {23, 28, 31, 36, 0, 0, 0, 0};
  c.cache_loc_stride = 2;
  c.last_page_len = {3, 0};
  c.topk = 2;
  c.page_size = 4;
  c.decode_length = 2;
  c.slots_read = 2;
  c.capacity = 3;
  c.layout_batch = 1;  // request 1 is padding (all slots 0, reads page 0)
  EXPECT_EQ(run_expand(*ex, c).guard.violations, 0);

  c.cache_loc[1] = 29;  // offset 1 where offset 0 is due
  const expand_run bad = run_expand(*ex, c);
  ASSERT_EQ(bad.guard.violations, 1);
  EXPECT_EQ(static_cast<violation_kind>(bad.guard.kind), violation_kind::layout);
  EXPECT_EQ(bad.guard.row, 0);
  EXPECT_EQ(bad.guard.column, 1);
  EXPECT_EQ(bad.guard.capacity, 0);  // expected offset
  EXPECT_EQ(bad.guard.value, 1);     // found offset
}

// A refused row is written as a padded request's row (docs/metadata.md section 3): every page
// the dummy page 0, cache_seqlen 1 % ps + d; nothing of what the buffer held survives.
TEST_P(ExpandPageTable, BadInputValueInDeviceMemoryWritesThePaddedRow) {
  expand_case c;
  c.cache_loc = {23, -4, 31, 32};
  c.cache_loc_stride = 2;
  c.last_page_len = {3};
  c.topk = 2;
  c.page_size = 4;
  c.decode_length = 2;
  c.slots_read = 2;
  c.capacity = 3;
  const expand_run run = run_expand(*ex, c);
  ASSERT_EQ(run.guard.violations, 1);
  EXPECT_EQ(static_cast<violation_kind>(run.guard.kind), violation_kind::bad_input);
  EXPECT_EQ(run.guard.row, 0);
  EXPECT_EQ(run.guard.column, 1);
  EXPECT_EQ(run.guard.value, -4);
  for (int col = 0; col < 3; ++col)
    EXPECT_EQ(run.table_buffer[static_cast<std::size_t>(3 + col)], 0) << "column " << col;
  EXPECT_EQ(run.seqlen_buffer[1], 1 % 4 + 2);
  EXPECT_EQ(run.table_buffer[6], 7);  // row 1 is fine and written
  EXPECT_EQ(run.seqlen_buffer[2], 3 + 2);
}

// Regression (issue 11): a slot whose page id does not fit the int32 table was truncated into a
// wrong page with no violation (slot 2^33 + 1 at page size 1 gave page 1).
TEST_P(ExpandPageTable, SlotWhosePageDoesNotFitInt32IsRefusedNotTruncated) {
  expand_case c;
  c.cache_loc = {(std::int64_t{1} << 33) + 1, 5};
  c.cache_loc_stride = 1;
  c.last_page_len = {0};
  c.topk = 2;
  c.page_size = 1;
  c.decode_length = 1;
  c.slots_read = 1;
  c.capacity = 2;
  const expand_run run = run_expand(*ex, c);
  ASSERT_EQ(run.guard.violations, 1);
  EXPECT_EQ(static_cast<violation_kind>(run.guard.kind), violation_kind::bad_input);
  EXPECT_EQ(run.guard.row, 0);
  EXPECT_EQ(run.guard.value, (std::int64_t{1} << 33) + 1);
  EXPECT_EQ(run.table_buffer[2], 0) << "row 0 is a padded row: the dummy page";
  EXPECT_EQ(run.table_buffer[3], 0) << "row 0 is a padded row: the dummy page";
  EXPECT_EQ(run.seqlen_buffer[1], 1 % 1 + 1) << "row 0 is a padded row";
  EXPECT_EQ(run.table_buffer[4], 5) << "row 1 is fine";
}

// Regression (issue 11): at the largest page size a valid round passes the layout check (the
// expected run count overflowed int32 for huge page sizes and raised a false violation).
TEST_P(ExpandPageTable, LayoutCheckAtTheLargestPageSizeHasNoFalseViolation) {
  const std::int32_t ps = 1 << 20, d = 1024, lpl = ps - 1;
  expand_case c;
  c.cache_loc_stride = d;
  for (std::int32_t j = 0; j < d; ++j) {  // j = 0 fills page 7's last slot, the rest page 3
    c.cache_loc.push_back(j == 0 ? std::int64_t{7} * ps + lpl : std::int64_t{3} * ps + (j - 1));
  }
  c.last_page_len = {lpl};
  c.topk = 1;
  c.page_size = ps;
  c.decode_length = d;
  c.slots_read = d;
  c.capacity = d + 1;
  c.layout_batch = 1;
  const expand_run run = run_expand(*ex, c);
  EXPECT_EQ(run.guard.violations, 0) << describe(run.guard);
  EXPECT_EQ(run.table_buffer[static_cast<std::size_t>(run.stride)], 7);
  EXPECT_EQ(run.table_buffer[static_cast<std::size_t>(run.stride) + 1], 3);
  EXPECT_EQ(run.seqlen_buffer[1], lpl + d);
}

SPECGRAPH_INSTANTIATE_EXECUTORS(ExpandPageTable);

}  // namespace
}  // namespace specgraph::testing
