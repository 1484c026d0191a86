// The commit (docs/commit.md) on the spec's worked examples, verbatim, in both entries (host
// twin, launcher on the host executor with or without the device real-batch word), and on the
// cuda executor with the data in executor memory. Random cases are in commit_random_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "specgraph/commit_metadata.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/limits.hpp"
#include "tests/commit_check.hpp"
#include "tests/commit_reference.hpp"
#include "tests/commit_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

using v32 = std::vector<std::int32_t>;

v32 cells(const commit_outputs& o, int i, std::size_t n) {
  return v32(o.cells[i].begin(), o.cells[i].begin() + static_cast<std::ptrdiff_t>(n));
}

// E1: topk 1 chains, ps 1, num_steps 3, D 4, seq_len [5, 3], pool rows 1 and 2
// (req_to_token[1][p] = 100 + p, p < 13; req_to_token[2][p] = 200 + p, p < 11), allocated_len
// [13, 11], stop token 6.
commit_case e1() {
  commit_case c;
  c.bucket = c.real_batch = 2;
  c.nodes = 4;
  c.steps = 3;
  c.topk = 1;
  c.page_size = 1;
  c.stride = 13;
  c.pool_rows = 3;
  c.req_to_token.assign(3 * 13, 0);
  for (int p = 0; p < 13; ++p) c.req_to_token[13 + p] = 100 + p;
  for (int p = 0; p < 11; ++p) c.req_to_token[26 + p] = 200 + p;
  c.accept_index = {0, 1, 2, -1, 4, 5, 6, 7};
  c.accept_length = {2, 3};
  c.accept_tokens = {11, 12, 9, 0, 5, 6, 8, 3};
  c.seq_len = {5, 3};
  c.allocated_len = {13, 11};
  c.req_pool_index = {1, 2};
  c.stop_ids = {6};
  return c;
}

TEST(CommitExamples, E1ChainsAndAStopToken) {
  const commit_case c = e1();
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const commit_outputs o = run_commit_case(*ex, c, twin, !twin);
    expect_commit_matches(c, o);
    EXPECT_EQ(cells(o, 0, 12), v32(12, -1));  // topk 1: no moves
    EXPECT_EQ(cells(o, 1, 2), (v32{0, 1}));   // request 1 stops on 6
    EXPECT_EQ(cells(o, 2, 2), (v32{3, 2}));   // 11 12 9 | 5 6
    // owned 3 + min(4, 3) = 6: positions [6, 11) free, slots 206 .. 210.
    EXPECT_EQ(cells(o, 3, 2), (v32{0, 6}));
    EXPECT_EQ(cells(o, 4, 2), (v32{0, 11}));
    for (int p = 6; p < 11; ++p) EXPECT_EQ(c.req_to_token[26 + p], 200 + p);
  }
}

// E2: topk 2, ps 1, num_steps 2, D 4, seq_len [6, 1] with row 1 padded, req_to_token[1][p] =
// 100 + p (p < 14); accepted 0 1 3, output 11 12 30.
commit_case e2() {
  commit_case c;
  c.bucket = 2;
  c.real_batch = 1;
  c.nodes = 4;
  c.steps = 2;
  c.topk = 2;
  c.page_size = 1;
  c.stride = 14;
  c.pool_rows = 2;
  c.req_to_token.assign(2 * 14, 0);
  for (int p = 0; p < 14; ++p) c.req_to_token[14 + p] = 100 + p;
  c.accept_index = {0, 1, 3, -1, -1, -1};
  c.accept_length = {2, 0};
  c.accept_tokens = {11, 12, 30, 0, 0, 0, 0, 0};
  c.seq_len = {6, 1};
  c.allocated_len = {14, 7};  // row 1: junk, never read
  c.req_pool_index = {1, 0};
  return c;
}

TEST(CommitExamples, E2OneMoveAndAPaddedRow) {
  const commit_case c = e2();
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const commit_outputs o = run_commit_case(*ex, c, twin, !twin);
    expect_commit_matches(c, o);
    // SGLang's pairs (106,106) (107,107) (108,109): one move, [108, 109]; row 1 padded.
    EXPECT_EQ(cells(o, 0, 8), (v32{-1, -1, 108, 109, -1, -1, -1, -1}));
    EXPECT_EQ(cells(o, 1, 2), (v32{0, 0}));
    EXPECT_EQ(cells(o, 2, 2), (v32{3, 0}));
    EXPECT_EQ(cells(o, 3, 2), (v32{0, 0}));
    EXPECT_EQ(cells(o, 4, 2), (v32{0, 0}));
  }
}

// topk 1 never moves, even when the path is not the chain (E2's path 0 1 3 with topk 1).
TEST(CommitExamples, TopkOneMovesNothing) {
  commit_case c = e2();
  c.topk = 1;
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const commit_outputs o = run_commit_case(*ex, c, twin);
    expect_commit_matches(c, o);
    EXPECT_EQ(cells(o, 0, 8), v32(8, -1));
    EXPECT_EQ(cells(o, 2, 2), (v32{3, 0}));
  }
}

// The move order (docs/commit.md section 3): path 0 2 3 gives V[1] <- V[2], V[2] <- V[3]; in
// increasing k node 2's KV reaches position seq_len + 1 before V[2] is overwritten, in
// decreasing k it would not.
TEST(CommitExamples, ChainedMovesApplyInIncreasingK) {
  commit_case c;
  c.bucket = c.real_batch = 1;
  c.nodes = 4;
  c.steps = 3;
  c.topk = 2;
  c.page_size = 1;
  c.stride = 8;
  c.pool_rows = 1;
  for (int p = 0; p < 8; ++p) c.req_to_token.push_back(50 + p);  // V[i] = 51 + i
  c.accept_index = {0, 2, 3, -1};
  c.accept_length = {2};
  c.accept_tokens = {1, 2, 3, 0};
  c.seq_len = {1};
  c.allocated_len = {8};
  c.req_pool_index = {0};
  auto ex = make_host_executor();
  const commit_outputs o = run_commit_case(*ex, c, false);
  expect_commit_matches(c, o);
  EXPECT_EQ(cells(o, 0, 6), (v32{52, 53, 53, 54, -1, -1}));
  EXPECT_TRUE(expect_moves_apply(c, o.cells[0], 0)) << "decreasing k must go wrong here";
}

// E3: E2's request at ps 4 on pages 5 9 2 7 3 11 (positions 4q .. 4q + 3), allocated_len 24:
// verify slots 38 39 8 9, one move [8, 9].
commit_case e3() {
  commit_case c = e2();
  c.bucket = c.real_batch = 1;
  c.page_size = 4;
  c.stride = 24;
  const std::int32_t pages[] = {5, 9, 2, 7, 3, 11};
  c.req_to_token.assign(2 * 24, 0);
  for (int p = 0; p < 24; ++p) c.req_to_token[24 + p] = pages[p / 4] * 4 + p % 4;
  c.accept_index = {0, 1, 3};
  c.accept_length = {2};
  c.accept_tokens = {11, 12, 30, 0};
  c.seq_len = {6};
  c.allocated_len = {24};
  c.req_pool_index = {1};
  return c;
}

TEST(CommitExamples, E3PagedMove) {
  commit_case c = e3();
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const commit_outputs o = run_commit_case(*ex, c, twin);
    expect_commit_matches(c, o);
    EXPECT_EQ(cells(o, 0, 4), (v32{-1, -1, 8, 9}));
    EXPECT_EQ(cells(o, 1, 1), (v32{0}));
    EXPECT_EQ(cells(o, 2, 1), (v32{3}));
  }
  // Not the spec's: a budget of 2 finishes it; owned 6 + min(3, 3) = 9, ceil_page 12: [12, 24).
  c.has_budget = true;
  c.budget = {2};
  for (const bool twin : {true, false}) {
    const commit_outputs o = run_commit_case(*ex, c, twin);
    expect_commit_matches(c, o);
    EXPECT_EQ(cells(o, 0, 4), (v32{-1, -1, 8, 9}));  // the moves do not depend on the finish
    EXPECT_EQ(cells(o, 1, 1), (v32{1}));
    EXPECT_EQ(cells(o, 2, 1), (v32{2}));
    EXPECT_EQ(cells(o, 3, 1), (v32{12}));
    EXPECT_EQ(cells(o, 4, 1), (v32{24}));
    EXPECT_EQ(o.budget[0], 0);  // 2 - emit 2: nothing left
  }
  // A budget of 5: not finished, 5 - 3 left.
  c.budget = {5};
  for (const bool twin : {true, false}) {
    const commit_outputs o = run_commit_case(*ex, c, twin);
    expect_commit_matches(c, o);
    EXPECT_EQ(cells(o, 1, 1), (v32{0}));
    EXPECT_EQ(o.budget[0], 2);
  }
}

// The launcher on each executor with every buffer in executor memory (cuda: the GPU runs the
// row code), E2 with a stop token on its bonus and the real batch read from a device word.
class CommitOnExecutor : public ExecutorTest {};

TEST_P(CommitOnExecutor, E2InExecutorMemory) {
  commit_case c = e2();
  c.stop_ids = {30, 4};
  c.has_budget = true;
  c.budget = {7, -3};  // row 1 (padding): junk, never read nor written
  const commit_expect e = commit_reference(c);
  dvec<std::int32_t> accept_index(*ex, c.accept_index), accept_length(*ex, c.accept_length),
      accept_tokens(*ex, c.accept_tokens), seq_len(*ex, c.seq_len),
      allocated_len(*ex, c.allocated_len), pool_index(*ex, c.req_pool_index),
      req_to_token(*ex, c.req_to_token), stops(*ex, c.stop_ids), word(*ex, v32{1}),
      budget(*ex, commit_budget_cells(c));
  std::int64_t caps[commit_output_count];
  commit_exact(c, caps);
  std::vector<dvec<std::int32_t>> out;
  for (int i = 0; i < commit_output_count; ++i) {
    out.emplace_back(*ex, static_cast<std::size_t>(caps[i] + commit_slack), commit_poison);
  }
  dvec<guard_word> guard(*ex, commit_guard_count, guard_word{});
  commit_params p = commit_inputs(c, budget.data());
  p.accept_index = accept_index.data();
  p.accept_length = accept_length.data();
  p.accept_tokens = accept_tokens.data();
  p.seq_len = seq_len.data();
  p.allocated_len = allocated_len.data();
  p.req_pool_index = pool_index.data();
  p.req_to_token = req_to_token.data();
  p.stop_token_ids = stops.data();
  p.real_batch = c.bucket;
  p.real_batch_at = word.data();
  std::int32_t** ptrs[] = {&p.kv_move, &p.finished, &p.emit_len, &p.free_begin, &p.free_end};
  std::int64_t* cap_fields[] = {&p.kv_move_capacity, &p.finished_capacity, &p.emit_len_capacity,
                                &p.free_begin_capacity, &p.free_end_capacity};
  for (int i = 0; i < commit_output_count; ++i) {
    *ptrs[i] = out[static_cast<std::size_t>(i)].data();
    *cap_fields[i] = caps[i];
  }
  p.guard = guard.data();
  run_commit(*ex, p, false);
  ex->synchronize();
  for (int i = 0; i < commit_output_count; ++i) {
    const v32 got = out[static_cast<std::size_t>(i)].download();
    const std::vector<std::int64_t>& want = commit_expected(e, i);
    for (std::size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k], k < want.size() ? want[k] : commit_poison)
          << commit_output_names[i] << "[" << k << "]";
    }
  }
  // The bonus 30 is a stop id: finished at emit 3, owned 6 + min(3, 4) = 9, free [9, 14).
  EXPECT_EQ(e.finished[0], 1);
  EXPECT_EQ(e.emit_len[0], 3);
  EXPECT_EQ(e.free_begin[0], 9);
  EXPECT_EQ(e.free_end[0], 14);
  // The budget in place: 7 - 3 on the real row, the padding row's junk and the slack untouched.
  EXPECT_EQ(budget.download(),
            (v32{4, -3, commit_poison, commit_poison, commit_poison, commit_poison}));
  for (const guard_word& g : guard.download()) EXPECT_EQ(g.violations, 0) << describe(g);
}

SPECGRAPH_INSTANTIATE_EXECUTORS(CommitOnExecutor);

// Lengths at their limits: seq_len 2^28, allocated_len and the row width 2^31 - 1, page size
// 2^20, no kv_move (req_to_token is then never read: a one-cell stand-in). The finish sums reach
// past int32 only in int64: owned 2^28 + 3, ceil_page 2^28 + 2^20.
TEST(CommitEdges, LengthsAtTheLimits) {
  const std::int32_t big = 0x7fffffff, seq = limits::max_context_len;
  const v32 index = {0, 1, 2, -1, 4, 5, -1, -1}, length = {2, 1}, tokens = {1, 2, 3, 0, 7, 9, 0, 0},
            seq_len = {seq, seq}, allocated = {big, seq + 4}, pool = {0, 0}, one = {0};
  v32 budget;  // read and written in place: reset before each run
  v32 out[4];
  for (v32& o : out) o.assign(2 + commit_slack, commit_poison);
  guard_word guard[commit_guard_count] = {};
  commit_params p;
  p.accept_index = index.data();
  p.accept_length = length.data();
  p.accept_tokens = tokens.data();
  p.seq_len = seq_len.data();
  p.allocated_len = allocated.data();
  p.req_pool_index = pool.data();
  p.req_to_token = one.data();
  p.req_to_token_stride = big;
  p.pool_rows = 1;
  p.stop_token_ids = &tokens[2];  // stop id 3: request 0's bonus
  p.stop_token_count = 1;
  p.batch = p.real_batch = 2;
  p.draft_tokens = 4;
  p.num_steps = 3;
  p.topk = 4;
  p.page_size = limits::max_page_size;
  std::int32_t** ptrs[] = {&p.finished, &p.emit_len, &p.free_begin, &p.free_end};
  std::int64_t* caps[] = {&p.finished_capacity, &p.emit_len_capacity, &p.free_begin_capacity,
                          &p.free_end_capacity};
  for (int i = 0; i < 4; ++i) {
    *ptrs[i] = out[i].data();
    *caps[i] = 2;
  }
  p.guard = guard;
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    for (v32& o : out) o.assign(2 + commit_slack, commit_poison);
    budget = {big, 1};
    p.max_new_tokens_left = budget.data();
    run_commit(*ex, p, twin);
    ex->synchronize();
    const v32 tail(commit_slack, commit_poison);
    // Request 0 stops on its bonus: emit 3, owned 2^28 + 3, free [2^28 + 2^20, 2^31 - 1).
    // Request 1's budget 1 finishes it at 1 token: owned 2^28 + 2, clamped to allocated_len.
    const v32 want[4] = {{1, 1}, {3, 1}, {seq + limits::max_page_size, seq + 4}, {big, seq + 4}};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(v32(out[i].begin(), out[i].begin() + 2), want[i]) << i;
      EXPECT_EQ(v32(out[i].begin() + 2, out[i].end()), tail) << i;
    }
    // The budgets left: 2^31 - 1 - 3 and 1 - 1.
    EXPECT_EQ(budget, (v32{big - 3, 0}));
    for (const guard_word& g : guard) EXPECT_EQ(g.violations, 0) << describe(g);
  }
}

TEST(CommitCapacities, Exact) {
  const commit_params p = commit_exact_capacities(256, 7);
  EXPECT_EQ(p.kv_move_capacity, 256 * 7 * 2);
  EXPECT_EQ(p.finished_capacity, 256);
  EXPECT_EQ(p.emit_len_capacity, 256);
  EXPECT_EQ(p.free_begin_capacity, 256);
  EXPECT_EQ(p.free_end_capacity, 256);
  EXPECT_EQ(p.batch, 256);
  EXPECT_EQ(p.num_steps, 7);
  EXPECT_EQ(p.kv_move, nullptr);
}

}  // namespace
}  // namespace specgraph::testing
