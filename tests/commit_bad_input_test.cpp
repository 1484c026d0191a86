// The commit (docs/commit.md): bad input and validation. A bad request read by the kernel is
// recorded in guard[0] and written as a padding row (checked cell by cell against the reference
// with that row padded); the host twin refuses the same input naming the field before anything
// is written (outputs and guard words still poisoned). Scalars are refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/limits.hpp"
#include "tests/commit_reference.hpp"
#include "tests/commit_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// Three rows (two real), D 5, num_steps 3, topk 2, ps 4: row 0 accepts 0 2, row 1 accepts
// 0 1 3 4 (a stop token at its output index 1); row 2 is padding with junk.
commit_case base() {
  commit_case c;
  c.bucket = 3;
  c.real_batch = 2;
  c.nodes = 5;
  c.steps = 3;
  c.topk = 2;
  c.page_size = 4;
  c.stride = 20;
  c.pool_rows = 3;
  c.req_to_token.resize(3 * 20);
  for (int i = 0; i < 60; ++i) c.req_to_token[static_cast<std::size_t>(i)] = 1000 + 7 * i;
  c.accept_index = {0, 2, -1, -1, 5, 6, 8, 9, 99, 99, 99, 99};
  c.accept_length = {1, 3, 50};
  c.accept_tokens = {4, 4, 0, 0, 0, 1, 2, 3, 4, 0, 9, 9, 9, 9, 9};
  c.seq_len = {3, 7, -7};
  c.allocated_len = {12, 20, -1};
  c.req_pool_index = {2, 0, 9};
  c.stop_ids = {2, 8};
  c.has_budget = true;
  c.budget = {9, 4, 0};
  return c;
}

// Every output cell and the budget written in place (a padded or refused row's untouched).
void expect_cells(const commit_case& ref, const commit_outputs& o) {
  const commit_expect e = commit_reference(ref);
  for (int i = 0; i < commit_output_count; ++i) {
    const std::vector<std::int64_t>& want = commit_expected(e, i);
    for (std::size_t k = 0; k < o.cells[i].size(); ++k) {
      ASSERT_EQ(o.cells[i][k], k < want.size() ? want[k] : commit_poison)
          << commit_output_names[i] << "[" << k << "]";
    }
  }
  ASSERT_EQ(o.budget.size(), e.budget.size() + (ref.has_budget ? commit_slack : 0));
  for (std::size_t k = 0; k < o.budget.size(); ++k) {
    ASSERT_EQ(o.budget[k], k < e.budget.size() ? e.budget[k] : commit_poison)
        << "max_new_tokens_left[" << k << "]";
  }
}

TEST(CommitBadInput, BaseIsGood) {
  const commit_case c = base();
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const commit_outputs o = run_commit_case(*ex, c, twin);
    for (const guard_word& g : o.guard) EXPECT_EQ(g.violations, 0) << describe(g);
    expect_cells(c, o);
    EXPECT_EQ(o.cells[1][1], 1);  // row 1 stops on 2: emit 2, owned 7 + 3 = 10, free [12, 20)
    EXPECT_EQ(o.cells[2][1], 2);
    EXPECT_EQ(o.cells[3][1], 12);
    EXPECT_EQ(o.cells[4][1], 20);
    // Row 1, k = 2: (V[2], V[3]), positions 9 and 10 of pool row 0; k = 3: (V[3], V[4]).
    EXPECT_EQ(o.cells[0][8], 1000 + 7 * 9);
    EXPECT_EQ(o.cells[0][9], 1000 + 7 * 10);
    EXPECT_EQ(o.cells[0][10], 1000 + 7 * 10);
    EXPECT_EQ(o.cells[0][11], 1000 + 7 * 11);
    // Row 0, k = 1: (V[1], V[2]), positions 4 and 5 of pool row 2.
    EXPECT_EQ(o.cells[0][0], 1000 + 7 * 44);
    EXPECT_EQ(o.cells[0][1], 1000 + 7 * 45);
    // The budgets left: row 0 9 - 2, row 1 4 - 2; padding row 2 keeps its junk 0.
    EXPECT_EQ(std::vector<std::int32_t>(o.budget.begin(), o.budget.begin() + 3),
              (std::vector<std::int32_t>{7, 2, 0}));
  }
}

TEST(CommitBadInput, KernelRecordsAndPadsHostRefuses) {
  struct bad {
    const char* field;
    std::function<void(commit_case&)> set;
    std::int32_t column, capacity;
    std::int64_t recorded;  // the guard's value
  };
  const std::int32_t limit = limits::max_context_len;
  const bad cases[] = {
      {"seq_len[1]", [](commit_case& c) { c.seq_len[1] = 0; }, -1, limit, 0},
      {"seq_len[1]", [&](commit_case& c) { c.seq_len[1] = limit + 1; }, -1, limit, limit + 1},
      {"req_pool_index[1]", [](commit_case& c) { c.req_pool_index[1] = -1; }, -2, 3, -1},
      {"req_pool_index[1]", [](commit_case& c) { c.req_pool_index[1] = 3; }, -2, 3, 3},
      {"allocated_len[1]", [](commit_case& c) { c.allocated_len[1] = 11; }, -3, 12, 11},
      {"allocated_len[1]", [](commit_case& c) { c.allocated_len[1] = 21; }, -3, 20, 21},
      {"accept_length[1]", [](commit_case& c) { c.accept_length[1] = -1; }, -4, 3, -1},
      {"accept_length[1]", [](commit_case& c) { c.accept_length[1] = 4; }, -4, 3, 4},
      {"max_new_tokens_left[1]", [](commit_case& c) { c.budget[1] = 0; }, -5, 1, 0},
      {"accept_index[1][0]", [](commit_case& c) { c.accept_index[4] = 0; }, 0, 5, 0},
      {"accept_index[1][2]", [](commit_case& c) { c.accept_index[6] = 6; }, 2, 7, 6},
      {"accept_index[1][3]", [](commit_case& c) { c.accept_index[7] = 10; }, 3, 10, 10},
  };
  auto ex = make_host_executor();
  for (const bad& b : cases) {
    SCOPED_TRACE(b.field);
    commit_case c = base();
    b.set(c);
    commit_outputs o;
    try {
      run_commit_into(o, *ex, c, true);
      ADD_FAILURE() << "accepted";
    } catch (const invalid_argument& e) {
      EXPECT_EQ(e.field(), b.field) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(b.recorded)), std::string::npos)
          << e.what();
    }
    for (int i = 0; i < commit_output_count; ++i) {
      for (const std::int32_t v : o.cells[i]) ASSERT_EQ(v, commit_poison) << commit_output_names[i];
    }
    EXPECT_EQ(o.budget, commit_budget_cells(c)) << "the refused twin wrote a budget";
    for (const guard_word& g : o.guard) EXPECT_EQ(g.violations, 77);
    const commit_outputs d = run_commit_case(*ex, c, false);
    const guard_word& g = d.guard[0];
    EXPECT_EQ(g.violations, 1) << describe(g);
    EXPECT_EQ(g.kind, static_cast<int>(violation_kind::bad_input));
    EXPECT_EQ(g.kernel, static_cast<int>(kernel_id::commit_metadata));
    EXPECT_EQ(g.row, 1);
    EXPECT_EQ(g.column, b.column);
    EXPECT_EQ(g.capacity, b.capacity);
    EXPECT_EQ(g.value, b.recorded);
    EXPECT_EQ(d.guard[1].violations, 0);
    commit_case padded = c;  // row 1 exactly as a padding row
    padded.real_batch = 1;
    expect_cells(padded, d);
  }
}

// Entries past accept_length are not read; without a budget its pointer is not read either.
TEST(CommitBadInput, UnreadCellsAreFree) {
  commit_case c = base();
  c.accept_index[2] = c.accept_index[3] = 1234;  // row 0 past c = 1
  c.accept_tokens[2] = 2;                        // a stop id past row 0's output
  c.has_budget = false;
  c.budget.clear();
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const commit_outputs o = run_commit_case(*ex, c, twin);
    for (const guard_word& g : o.guard) EXPECT_EQ(g.violations, 0) << describe(g);
    expect_cells(c, o);
    EXPECT_EQ(o.cells[1][0], 0);
  }
}

TEST(CommitBadInput, LowestRowKeptEveryOneCounted) {
  commit_case c = base();
  c.seq_len[1] = -3;
  c.accept_length[0] = 9;
  const commit_outputs d = run_commit_case(*make_host_executor(), c, false);
  EXPECT_EQ(d.guard[0].violations, 2);
  EXPECT_EQ(d.guard[0].row, 0);
  EXPECT_EQ(d.guard[0].column, -4);
  commit_case padded = c;
  padded.real_batch = 0;
  expect_cells(padded, d);
}

TEST(CommitBadInput, RealBatchWordClamped) {
  auto ex = make_host_executor();
  for (const std::int32_t word : {-1, 7}) {
    SCOPED_TRACE(word);
    commit_case c = base();
    commit_outputs o;
    run_commit_into(o, *ex, c, false, true, nullptr, &word);
    const guard_word& g = o.guard[0];
    EXPECT_EQ(g.row, -1);
    EXPECT_EQ(g.column, -2);
    EXPECT_EQ(g.capacity, 3);
    EXPECT_EQ(g.value, word);
    EXPECT_EQ(g.violations, word < 0 ? 1 : 2);  // 7: row 2's junk seq_len is bad input too
    commit_case ref = c;
    ref.real_batch = word < 0 ? 0 : 2;
    expect_cells(ref, o);
  }
  const std::int32_t two = 2;  // in range: nothing recorded
  commit_outputs o;
  run_commit_into(o, *ex, base(), false, true, nullptr, &two);
  for (const guard_word& g : o.guard) EXPECT_EQ(g.violations, 0) << describe(g);
  expect_cells(base(), o);
}

}  // namespace
}  // namespace specgraph::testing

namespace specgraph::testing {
namespace {

// Scalars and pointers: refused by name before anything is written.
TEST(CommitValidation, NamesTheFieldAndTheLimit) {
  auto ex = make_host_executor();
  const commit_case c = base();
  std::vector<std::int32_t> out(64, commit_poison), budget = c.budget;
  guard_word guard[commit_guard_count] = {};
  auto params = [&] {
    commit_params p = commit_inputs(c, budget.data());
    p.finished = out.data();
    p.finished_capacity = c.bucket;
    p.guard = guard;
    return p;
  };
  struct refusal {
    const char* field;
    const char* detail;
    std::function<void(commit_params&)> set;
  };
  const refusal cases[] = {
      {"batch", "below the minimum 0", [](commit_params& p) { p.batch = -1; }},
      {"batch", "exceeds the limit", [](commit_params& p) { p.batch = limits::max_batch + 1; }},
      {"real_batch", "exceeds batch 3", [](commit_params& p) { p.real_batch = 4; }},
      {"draft_tokens", "below the minimum 1", [](commit_params& p) { p.draft_tokens = 0; }},
      {"draft_tokens", "exceeds the limit",
       [](commit_params& p) { p.draft_tokens = max_accept_tokens + 1; }},
      {"num_steps", "below the minimum 1", [](commit_params& p) { p.num_steps = 0; }},
      {"num_steps", "exceeds the limit",
       [](commit_params& p) { p.num_steps = max_accept_steps + 1; }},
      {"topk", "below the minimum 1", [](commit_params& p) { p.topk = 0; }},
      {"topk", "exceeds the limit", [](commit_params& p) { p.topk = limits::max_topk + 1; }},
      {"page_size", "below the minimum 1", [](commit_params& p) { p.page_size = 0; }},
      {"page_size", "exceeds the limit",
       [](commit_params& p) { p.page_size = limits::max_page_size + 1; }},
      {"req_to_token_stride", "below the minimum 1",
       [](commit_params& p) { p.req_to_token_stride = 0; }},
      {"req_to_token_stride", "exceeds the limit 2147483647",
       [](commit_params& p) { p.req_to_token_stride = std::int64_t{1} << 31; }},
      {"pool_rows", "below the minimum 1", [](commit_params& p) { p.pool_rows = 0; }},
      {"pool_rows", "exceeds the limit",
       [](commit_params& p) { p.pool_rows = limits::max_pool_rows + 1; }},
      {"stop_token_count", "below the minimum 0",
       [](commit_params& p) { p.stop_token_count = -1; }},
      {"stop_token_count", "exceeds the limit 1024",
       [](commit_params& p) { p.stop_token_count = max_stop_tokens + 1; }},
      {"kv_move_capacity", "below the minimum 0",
       [](commit_params& p) { p.kv_move_capacity = -1; }},
      {"free_end_capacity", "exceeds the limit 2147483647",
       [](commit_params& p) { p.free_end_capacity = std::int64_t{1} << 31; }},
      {"draft_tokens", "batch * draft_tokens",
       [](commit_params& p) {
         p.batch = p.real_batch = limits::max_batch;
         p.draft_tokens = 17;
       }},
      {"num_steps", "batch * (num_steps + 1)",
       [](commit_params& p) {
         p.batch = p.real_batch = limits::max_batch;
         p.draft_tokens = 16;
         p.num_steps = 16;
       }},
      {"stop_token_ids", "null", [](commit_params& p) { p.stop_token_ids = nullptr; }},
      {"req_to_token", "null", [](commit_params& p) { p.req_to_token = nullptr; }},
      {"accept_index", "null", [](commit_params& p) { p.accept_index = nullptr; }},
      {"guard", "null", [](commit_params& p) { p.guard = nullptr; }},
      {"kv_move", "no output set", [](commit_params& p) { p.finished = nullptr; }},
  };
  for (const refusal& r : cases) {
    SCOPED_TRACE(r.field);
    commit_params p = params();
    r.set(p);
    guard[0].violations = guard[1].violations = 77;
    expect_invalid([&] { run_commit(*ex, p, false); }, r.field, r.detail);
    expect_invalid([&] { run_commit(*ex, p, true); }, r.field, r.detail);
    expect_invalid([&] { launch_commit(*ex, p); }, r.field, r.detail);
    for (const std::int32_t v : out) ASSERT_EQ(v, commit_poison);
    EXPECT_EQ(budget, c.budget);
    EXPECT_EQ(guard[0].violations, 77);
    EXPECT_EQ(guard[1].violations, 77);
  }
  // Batch 0 (an idle rank) needs no inputs; stop ids with count 0 need no pointer.
  commit_params idle;
  idle.batch = idle.real_batch = 0;
  idle.draft_tokens = idle.num_steps = idle.topk = idle.page_size = idle.pool_rows = 1;
  idle.req_to_token_stride = 1;
  idle.emit_len = out.data();
  idle.guard = guard;
  run_commit(*ex, idle, false);
  ex->synchronize();
  EXPECT_EQ(out[0], commit_poison);
  EXPECT_EQ(guard[0].violations, 0);
}

}  // namespace
}  // namespace specgraph::testing
