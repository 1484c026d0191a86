// The next round's inputs (docs/next-round.md): bad input and validation. A bad real row read by
// the kernel is recorded in guard[1] and built inactive without pages (checked cell by cell
// against the reference, which models the same); the host twin refuses the same input naming
// the field before anything is written (outputs, req_to_token, the ring words and the stale
// guard words untouched). Bad ring entries, a narrow row and a short ring are recorded in
// guard[0]; scalars are refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "specgraph/executor.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "tests/next_round_reference.hpp"
#include "tests/next_round_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// Three rows, two real, ps 4, topk 2, num_steps 2, D 4, reserve 16 (E3's request twice).
nr_case base() {
  nr_case c;
  c.batch = 3;
  c.real_batch = 2;
  c.draft_tokens = 4;
  c.num_steps = 2;
  c.topk = 2;
  c.page_size = 4;
  c.reserve = 16;
  c.new_seq_len = {9, 14, 1};
  c.bonus = {30, 31, 0};
  c.req_pool_index = {1, 2, 0};
  c.allocated_len = {24, 30, 0};
  c.width = 36;
  c.pool_rows = 3;
  c.req_to_token.assign(3 * 36, -7);
  for (int p = 0; p < 24; ++p) c.req_to_token[36 + p] = 40 + p;
  for (int p = 0; p < 30; ++p) c.req_to_token[72 + p] = 100 + p;  // 30: a partial page
  c.ring = {13, 14, 15, 16};
  c.tail = 4;
  return c;
}

// The twin refuses (naming field, with detail in the message) and writes nothing; the launcher
// on the host executor records and builds the row inactive, as the reference says.
void expect_refused_and_recorded(const nr_case& c, const std::string& field,
                                 const std::string& detail, bool record_check = true) {
  auto ex = make_host_executor();
  nr_rig rig(*ex, c);
  expect_invalid([&] { run_next_round(*ex, rig.p, true); }, field, detail);
  const nr_result o = rig.collect();
  EXPECT_EQ(o.req_to_token, c.req_to_token);
  EXPECT_EQ(o.allocated_len, c.allocated_len);
  EXPECT_EQ(o.head, c.head);
  EXPECT_EQ(o.stall, c.stall);
  for (const guard_word& g : o.guard) EXPECT_EQ(g.violations, 77);
  for (int i = 0; i < 7; ++i) {
    for (const std::int64_t v : o.cells[i]) ASSERT_EQ(v, nr_poison) << nr_output_names[i];
  }
  if (record_check) nr_check(c, nr_run(*ex, c, false));
}

TEST(NextRoundBadInput, RowContentRecordedAndRefusedByName) {
  const nr_case ok = base();
  {
    auto ex = make_host_executor();
    nr_check(ok, nr_run(*ex, ok, true));
  }
  nr_case c = ok;
  c.new_seq_len[1] = 0;
  expect_refused_and_recorded(c, "new_seq_len[1]", "below the minimum 1");
  c = ok;
  c.new_seq_len[1] = limits::max_context_len + 1;
  expect_refused_and_recorded(c, "new_seq_len[1]", "exceeds the limit");
  c = ok;
  c.req_pool_index[1] = 3;
  expect_refused_and_recorded(c, "req_pool_index[1]", "pool_rows 3");
  c = ok;
  c.req_pool_index[0] = -1;
  expect_refused_and_recorded(c, "req_pool_index[0]", "outside [0, pool_rows 3)");
  c = ok;
  c.allocated_len[1] = 13;  // below new_seq_len 14
  expect_refused_and_recorded(c, "allocated_len[1]", "outside [new_seq_len 14");
  c = ok;
  c.allocated_len[0] = 37;  // past W
  expect_refused_and_recorded(c, "allocated_len[0]", "req_to_token_stride 36");
  c = ok;
  c.req_to_token[72 + 29] = 128;  // (128 + 1) % 4 != 30 % 4
  expect_refused_and_recorded(c, "req_to_token[2][29]", "page_size 4");
  c = ok;
  c.req_to_token[72 + 29] = -1;
  expect_refused_and_recorded(c, "req_to_token[2][29]", "(slot + 1) % page_size must be 2");
}

// What the guard word says for each bad row (the reference's details, spelled out once).
TEST(NextRoundBadInput, GuardDetails) {
  struct bad {
    std::function<void(nr_case&)> make;
    std::int32_t column, capacity;
    std::int64_t value;
  };
  const bad cases[] = {
      {[](nr_case& c) { c.new_seq_len[1] = -3; }, -1, limits::max_context_len, -3},
      {[](nr_case& c) { c.req_pool_index[1] = 7; }, -2, 3, 7},
      {[](nr_case& c) { c.allocated_len[1] = 40; }, -3, 36, 40},
      {[](nr_case& c) { c.req_to_token[72 + 29] = 130; }, -4, 2, 130},
  };
  auto ex = make_host_executor();
  for (const bad& b : cases) {
    nr_case c = base();
    b.make(c);
    const nr_result o = nr_run(*ex, c, false);
    nr_check(c, o);
    const guard_word& g = o.guard[1];
    EXPECT_EQ(g.violations, 1) << describe(g);
    EXPECT_EQ(g.kind, static_cast<int>(violation_kind::bad_input));
    EXPECT_EQ(g.kernel, static_cast<int>(kernel_id::next_round_slots));
    EXPECT_EQ(g.row, 1);
    EXPECT_EQ(g.column, b.column);
    EXPECT_EQ(g.capacity, b.capacity);
    EXPECT_EQ(g.value, b.value);
    EXPECT_EQ(o.cells[0][1], 0);  // inactive
    EXPECT_EQ(o.cells[0][0], 1);
    EXPECT_EQ(o.allocated_len[1], c.allocated_len[1]);  // no pages
  }
  // A page run whose last slot would pass INT32_MAX (ps 3: not a power of two).
  nr_case c = base();
  c.page_size = 3;
  c.allocated_len = {24, 28, 0};             // 28 % 3 = 1: the slot at 27 must be 0 mod 3
  c.req_to_token[72 + 27] = 0x7fffffff - 1;  // 0 mod 3, but its page ends at slot + 2
  const nr_result o = nr_run(*ex, c, false);
  EXPECT_EQ(o.guard[1].row, 1) << describe(o.guard[1]);
  EXPECT_EQ(o.guard[1].column, -4) << describe(o.guard[1]);
  EXPECT_EQ(o.guard[1].value, 0x7fffffff - 1);
  EXPECT_EQ(o.cells[0][1], 0);
  expect_invalid([&] { nr_run(*ex, c, true); }, "req_to_token[2][27]", "INT32_MAX");
}

TEST(NextRoundBadInput, RingNarrowRowAndStall) {
  auto ex = make_host_executor();
  // A bad entry among those about to be taken: the twin refuses it, the launcher records the
  // first (its offset from the head as the column, the entry as the value) and stalls.
  nr_case c = base();
  c.head = c.tail = 3;  // entry 3 (ring[3]) is the one this round takes
  c.tail = 5;
  c.ring[3] = -4;
  expect_refused_and_recorded(c, "ring[3]", "is not a page id");
  nr_result o = nr_run(*ex, c, false);
  EXPECT_EQ(o.guard[0].kind, static_cast<int>(violation_kind::ring));
  EXPECT_EQ(o.guard[0].column, 0);
  EXPECT_EQ(o.guard[0].value, -4);
  EXPECT_EQ(o.stall, 1);
  EXPECT_EQ(o.head, 3);
  // Entries past those taken are never read.
  c = base();
  c.ring[3] = -4;
  nr_check(c, nr_run(*ex, c, true));
  // Short: row 0 takes 1 page, row 1 (allocated 30 -> 32) none but the partial page.
  c = base();
  c.tail = 0;
  o = nr_run(*ex, c, true);
  nr_check(c, o);
  EXPECT_EQ(o.guard[0].kind, static_cast<int>(violation_kind::ring));
  EXPECT_EQ(o.guard[0].row, -1);
  EXPECT_EQ(o.guard[0].column, -1);
  EXPECT_EQ(o.guard[0].capacity, 0);
  EXPECT_EQ(o.guard[0].value, 1);
  EXPECT_EQ(o.stall, 1);
  EXPECT_EQ(o.cells[0][0] + o.cells[0][1], 0);  // every row inactive
  // A stall word already set: nothing taken, nothing recorded, every row inactive.
  c = base();
  c.stall = 1;
  o = nr_run(*ex, c, true);
  nr_check(c, o);
  EXPECT_EQ(o.guard[0].violations, 0);
  EXPECT_EQ(o.head, 0);
  EXPECT_EQ(o.cells[1][0], 1);  // seq_len of an inactive row
  // A row too narrow: row 0 (nxt 28) with W 27... W must hold allocated_len 30, so row 1 instead.
  c = base();
  c.new_seq_len[1] = 29;  // nxt = ceil_page(29 + 16) = 48 > 36
  o = nr_run(*ex, c, false);
  nr_check(c, o);
  EXPECT_EQ(o.guard[0].kind, static_cast<int>(violation_kind::row_width));
  EXPECT_EQ(o.guard[0].row, 1);
  EXPECT_EQ(o.guard[0].column, -1);
  EXPECT_EQ(o.guard[0].capacity, 36);
  EXPECT_EQ(o.guard[0].value, 48);
  EXPECT_EQ(o.cells[0][1], 1);  // still active: its unbacked positions are reported
  EXPECT_EQ(o.guard[1].kind, static_cast<int>(violation_kind::unbacked));
  EXPECT_EQ(o.guard[1].row, 1);
  EXPECT_EQ(o.guard[1].column, 30);  // draft branch 0 reads 29, 30
  EXPECT_EQ(o.guard[1].capacity, 30);
  EXPECT_EQ(o.allocated_len[0], 28);  // row 0 proceeds
}

TEST(NextRoundBadInput, RealBatchWord) {
  auto ex = make_host_executor();
  nr_case c = base();
  c.device_word = true;
  c.word_value = 5;
  const nr_result o = nr_run(*ex, c, false);
  nr_check(c, o);
  EXPECT_EQ(o.guard[1].row, -1);
  EXPECT_EQ(o.guard[1].column, -2);
  EXPECT_EQ(o.guard[1].capacity, 3);
  EXPECT_EQ(o.guard[1].value, 5);
  expect_invalid([&] { nr_run(*ex, c, true); }, "real_batch_at", "batch 3");
}

TEST(NextRoundValidation, NamesTheFieldAndTheLimit) {
  auto ex = make_host_executor();
  const nr_case ok = base();
  auto refused = [&](const std::function<void(next_round_params&)>& edit, const char* field,
                     const std::string& detail = {}) {
    nr_rig rig(*ex, ok);
    edit(rig.p);
    expect_invalid([&] { run_next_round(*ex, rig.p, false); }, field, detail);
    for (const guard_word& g : rig.collect().guard) EXPECT_EQ(g.violations, 77) << field;
  };
  refused([](next_round_params& p) { p.batch = -1; }, "batch");
  refused([](next_round_params& p) { p.real_batch = 4; }, "real_batch", "batch 3");
  refused([](next_round_params& p) { p.draft_tokens = 0; }, "draft_tokens");
  refused([](next_round_params& p) { p.num_steps = 0; }, "num_steps");
  refused([](next_round_params& p) { p.topk = limits::max_topk + 1; }, "topk", "the limit");
  refused([](next_round_params& p) { p.page_size = 0; }, "page_size");
  refused([](next_round_params& p) { p.reserve = -1; }, "reserve");
  refused([](next_round_params& p) { p.reserve = (1 << 28) + 1; }, "reserve", "the limit");
  refused([](next_round_params& p) { p.req_to_token_stride = 0; }, "req_to_token_stride");
  refused([](next_round_params& p) { p.pool_rows = 0; }, "pool_rows");
  refused([](next_round_params& p) { p.ring_capacity = 0; }, "ring_capacity");
  refused([](next_round_params& p) { p.ring_capacity = (std::int64_t{1} << 40) + 1; },
          "ring_capacity");
  refused([](next_round_params& p) { p.draft_slot_stride = 1; }, "draft_slot_stride",
          "below the minimum 2");
  refused([](next_round_params& p) { p.tail_copy_capacity = std::int64_t{1} << 31; },
          "tail_copy_capacity");
  refused([](next_round_params& p) { p.verify_out_cache_loc_capacity = -1; },
          "verify_out_cache_loc_capacity");
  refused([](next_round_params& p) { p.ring = nullptr; }, "ring", "null");
  refused([](next_round_params& p) { p.ring_tail = nullptr; }, "ring_tail", "null");
  refused([](next_round_params& p) { p.stall = nullptr; }, "stall", "null");
  refused([](next_round_params& p) { p.scratch = nullptr; }, "scratch", "null");
  refused([](next_round_params& p) { p.bonus = nullptr; }, "bonus", "null");
  refused(
      [](next_round_params& p) {
        p.active = p.seq_len = p.root_token = p.draft_position = p.tail_copy = nullptr;
        p.draft_out_cache_loc = p.verify_out_cache_loc = nullptr;
      },
      "active", "no output set");
  refused(
      [](next_round_params& p) {
        p.batch = limits::max_batch;
        p.real_batch = 0;
        p.draft_tokens = 64;
      },
      "draft_tokens", "batch * draft_tokens");
}

}  // namespace
}  // namespace specgraph::testing
