// Greedy tree acceptance (docs/accept.md): bad input and validation. A bad request read by the
// kernel is recorded in guard[0] and written as a padding row (checked cell by cell against the
// reference with that row padded); the host twin refuses the same input naming the field before
// anything is written (outputs and guard words still poisoned). Scalars are refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/limits.hpp"
#include "tests/accept_reference.hpp"
#include "tests/accept_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// Three rows (two real), D 5, num_steps 3: row 0 a branching tree, row 1 a chain of depth 3.
accept_case base() {
  accept_case c;
  c.bucket = 3;
  c.real_batch = 2;
  c.nodes = 5;
  c.steps = 3;
  c.parent = {-1, 0, 0, 1, 2, -1, 0, 1, 2, -1, 9, 9, 9, 9, 9};
  c.draft = {1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0};
  c.target = {3, 9, 5, 0, 7, 2, 3, 4, 8, 0, 0, 0, 0, 0, 0};
  c.seq_len = {10, 20, 1};
  return c;
}

void expect_cells(const accept_case& ref, const accept_outputs& o) {
  const accept_expect e = accept_reference(ref);
  for (int i = 0; i < accept_output_count; ++i) {
    const std::vector<std::int64_t>& want = accept_expected(e, i);
    for (std::size_t k = 0; k < o.cells[i].size(); ++k) {
      ASSERT_EQ(o.cells[i][k], k < want.size() ? want[k] : accept_poison)
          << accept_output_names[i] << "[" << k << "]";
    }
  }
}

TEST(AcceptBadInput, KernelRecordsAndPadsHostRefuses) {
  struct bad {
    const char* field;
    int cell;  // index into parent, or -1: seq_len[1]
    std::int32_t value;
    std::int32_t column, capacity;
    std::int64_t recorded;  // the guard's value
  };
  const std::int32_t limit = limits::max_context_len;
  const bad cases[] = {
      {"seq_len[1]", -1, -1, -1, limit, -1}, {"seq_len[1]", -1, limit + 1, -1, limit, limit + 1},
      {"parent[1][0]", 5, 0, 0, -1, 0},      {"parent[1][2]", 7, 2, 2, 2, 2},  // its own parent
      {"parent[1][3]", 8, -2, 3, 3, -2},                                       // below -1
      {"parent[1][4]", 9, 3, 4, 3, 4},  // reachable at depth 4 > num_steps 3
  };
  auto ex = make_host_executor();
  for (const bad& b : cases) {
    SCOPED_TRACE(std::string(b.field) + " = " + std::to_string(b.value));
    accept_case c = base();
    if (b.cell < 0) {
      c.seq_len[1] = b.value;
    } else {
      c.parent[static_cast<std::size_t>(b.cell)] = b.value;
    }
    accept_outputs o;
    try {
      run_accept_into(o, *ex, c, true);
      ADD_FAILURE() << "accepted";
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(b.field), std::string::npos) << e.what();
    }
    for (int i = 0; i < accept_output_count; ++i) {
      for (const std::int32_t v : o.cells[i]) ASSERT_EQ(v, accept_poison) << accept_output_names[i];
    }
    for (const guard_word& g : o.guard) EXPECT_EQ(g.violations, 77);
    const accept_outputs d = run_accept_case(*ex, c, false);
    const guard_word& g = d.guard[0];
    EXPECT_EQ(g.violations, 1) << describe(g);
    EXPECT_EQ(g.kind, static_cast<int>(violation_kind::bad_input));
    EXPECT_EQ(g.kernel, static_cast<int>(kernel_id::accept_metadata));
    EXPECT_EQ(g.row, 1);
    EXPECT_EQ(g.column, b.column);
    EXPECT_EQ(g.capacity, b.capacity);
    EXPECT_EQ(g.value, b.recorded);
    EXPECT_EQ(d.guard[1].violations, 0);
    accept_case padded = c;  // row 1 exactly as a padding row (its seq_len copied)
    padded.real_batch = 1;
    padded.parent[9] = 9;  // past the real batch the reference reads nothing but seq_len
    expect_cells(padded, d);
    EXPECT_EQ(d.cells[6][1], 9);  // select_index 1 * 5 + 4
  }
}

// An orphan's line is never reachable: its depth past num_steps is no fault.
TEST(AcceptBadInput, DeepOrphanLinesAreFine) {
  accept_case c = base();
  c.nodes = 6;
  c.bucket = c.real_batch = 1;
  c.parent = {-1, -1, 1, 2, 3, 4};
  c.draft = {0, 1, 1, 1, 1, 1};
  c.target = {1, 1, 1, 1, 1, 1};
  c.seq_len = {4};
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const accept_outputs o = run_accept_case(*ex, c, twin);
    EXPECT_EQ(o.guard[0].violations, 0) << describe(o.guard[0]);
    expect_cells(c, o);
    EXPECT_EQ(o.cells[1][0], 0);  // the orphan's line is not accepted
  }
}

TEST(AcceptBadInput, RealBatchWordClamped) {
  auto ex = make_host_executor();
  for (const std::int32_t word : {-1, 7}) {
    accept_case c = base();
    c.real_batch = c.bucket;  // clamped to 3: row 2's junk tree is checked
    accept_outputs o;
    run_accept_into(o, *ex, c, false, true, nullptr, &word);
    const guard_word& g = o.guard[0];
    EXPECT_EQ(g.row, -1);
    EXPECT_EQ(g.column, -2);
    EXPECT_EQ(g.capacity, 3);
    EXPECT_EQ(g.value, word);
    EXPECT_EQ(g.violations, word < 0 ? 1 : 2);  // 7: row 2's parent[0] = 9 is bad input too
    accept_case ref = c;
    ref.real_batch = word < 0 ? 0 : 2;
    expect_cells(ref, o);
  }
}

TEST(AcceptValidation, NamesTheFieldAndTheLimit) {
  auto ex = make_host_executor();
  auto expect_refused = [&](const accept_case& c, const std::int64_t* caps, const char* what) {
    accept_outputs o;
    try {
      run_accept_into(o, *ex, c, false, false, caps);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  accept_case c = base();
  accept_case d = c;
  d.nodes = 0;
  expect_refused(d, nullptr, "draft_tokens");
  d = c;
  d.nodes = max_accept_tokens + 1;
  expect_refused(d, nullptr, "draft_tokens");
  d = c;
  d.steps = 0;
  expect_refused(d, nullptr, "num_steps");
  d = c;
  d.steps = max_accept_steps + 1;
  expect_refused(d, nullptr, "num_steps");
  d = c;
  d.real_batch = 4;
  expect_refused(d, nullptr, "real_batch");
  std::int64_t caps[accept_output_count];
  accept_exact(c, caps);
  caps[2] = -1;
  expect_refused(c, caps, "predict_capacity");
  // No output at all.
  accept_params p;
  p.batch = 0;
  p.draft_tokens = 1;
  p.num_steps = 1;
  guard_word g[accept_guard_count] = {};
  p.guard = g;
  try {
    launch_accept(*ex, p);
    ADD_FAILURE() << "accepted no output";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no output set"), std::string::npos) << e.what();
  }
  p.select_index = &g[0].row;
  p.accept_index_capacity = std::int64_t{1} << 31;  // past int32
  try {
    launch_accept(*ex, p);
    ADD_FAILURE() << "accepted a capacity past int32";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("accept_index_capacity"), std::string::npos) << e.what();
  }
  p.accept_index_capacity = 0;
  // batch * D past the row limit.
  p.batch = limits::max_batch;
  p.draft_tokens = 64;
  p.parent = p.draft_token = p.target_predict = p.seq_len = &g[0].kind;
  try {
    launch_accept(*ex, p);
    ADD_FAILURE() << "accepted batch * D past the limit";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("batch * draft_tokens"), std::string::npos) << e.what();
  }
}

TEST(AcceptCapacities, Exact) {
  const accept_params p = accept_exact_capacities(256, 64, 8);
  EXPECT_EQ(p.accept_index_capacity, 256 * 9);
  EXPECT_EQ(p.predict_capacity, 256 * 64);
  EXPECT_EQ(p.accept_tokens_capacity, 256 * 64);
  EXPECT_EQ(p.accept_length_capacity, 256);
  EXPECT_EQ(p.select_index_capacity, 256);
}

}  // namespace
}  // namespace specgraph::testing
