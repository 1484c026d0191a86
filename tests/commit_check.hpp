// Checks of a commit's outputs against the independent reference (tests/commit_reference.hpp):
// every cell below the capacity as the reference says, every cell past it and every finish cell
// of an idle row poisoned; guard[1] the lowest refused store (one output short at most) and
// guard[0] clean. And the move order: the
// pairs applied one at a time in increasing window row to a fake KV array bring node n_k's data
// to position seq_len + k.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "specgraph/commit_metadata.hpp"
#include "tests/commit_reference.hpp"
#include "tests/commit_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {

// Cells per request of each output (the guard's row of a refused store is cell / width).
inline std::int64_t commit_row_width(const commit_case& c, int i) {
  return i == 0 ? static_cast<std::int64_t>(c.steps) * 2 : 1;
}

// The budget written in place, whatever the outputs' capacities: the reference's [B] cells
// (m - emit on the real rows handled, the input junk on padding rows), the slack poisoned.
inline void expect_commit_budget(const commit_case& c, const commit_outputs& o,
                                 const commit_expect& e) {
  if (!c.has_budget) {
    ASSERT_TRUE(o.budget.empty());
    return;
  }
  ASSERT_EQ(o.budget.size(), static_cast<std::size_t>(c.bucket + commit_slack));
  ASSERT_EQ(e.budget.size(), static_cast<std::size_t>(c.bucket));
  for (std::size_t k = 0; k < o.budget.size(); ++k) {
    ASSERT_EQ(o.budget[k], k < e.budget.size() ? e.budget[k] : commit_poison)
        << "max_new_tokens_left[" << k << "]";
  }
}

inline void expect_commit_matches(const commit_case& c, const commit_outputs& o) {
  const commit_expect e = commit_reference(c);
  std::int64_t exact[commit_output_count];
  commit_exact(c, exact);
  std::int64_t refused = 0;
  // The cells the commit stores: every kv_move cell; a finish cell (outputs 1 .. 4, one per
  // request) unless its row is idle.
  std::vector<bool> idle(static_cast<std::size_t>(c.bucket), false);
  for (std::int64_t r : e.idle_rows) idle[static_cast<std::size_t>(r)] = true;
  for (int i = 0; i < commit_output_count; ++i) {
    const std::vector<std::int64_t>& want = commit_expected(e, i);
    ASSERT_EQ(static_cast<std::int64_t>(want.size()), exact[i]) << commit_output_names[i];
    const std::vector<std::int32_t>& got = o.cells[i];
    auto writes = [&](std::int64_t k) {
      return k < exact[i] && (i == 0 || !idle[static_cast<std::size_t>(k)]);
    };
    std::int64_t first_refused = -1, refused_here = 0;
    for (std::size_t k = 0; k < got.size(); ++k) {
      const auto kk = static_cast<std::int64_t>(k);
      const bool stored = writes(kk) && kk < o.capacity[i];
      ASSERT_EQ(got[k], stored ? want[k] : commit_poison)
          << commit_output_names[i] << "[" << k << "]";
    }
    for (std::int64_t k = o.capacity[i]; k < exact[i]; ++k) {
      if (!writes(k)) continue;
      if (first_refused < 0) first_refused = k;
      ++refused_here;
    }
    if (o.capacity[i] < exact[i]) {
      ASSERT_EQ(refused, 0) << "the test shortens one output at most";
      refused = refused_here;
    }
    if (first_refused >= 0) {
      const guard_word& g = o.guard[1];
      const auto at = static_cast<std::size_t>(first_refused);
      EXPECT_EQ(g.kernel, static_cast<int>(kernel_id::commit_outputs));
      EXPECT_EQ(g.kind, static_cast<int>(violation_kind::capacity));
      EXPECT_EQ(g.row, first_refused / commit_row_width(c, i)) << commit_output_names[i];
      EXPECT_EQ(g.column, first_refused) << commit_output_names[i];
      EXPECT_EQ(g.capacity, o.capacity[i]) << commit_output_names[i];
      EXPECT_EQ(g.value, want[at]) << commit_output_names[i];
    }
  }
  EXPECT_EQ(o.guard[1].violations, refused) << describe(o.guard[1]);
  EXPECT_EQ(o.guard[0].violations, 0) << describe(o.guard[0]);
  expect_commit_budget(c, o, e);
}

// Applies row r's pairs (the library's kv_move cells) one at a time in increasing k to a fake
// KV array in which slot V[i] holds node i's data, and checks that positions seq_len + k, k <= c,
// then hold node n_k's data. Returns whether applying them in decreasing k would have gone wrong
// (a chain: some destination is a later pair's source).
inline bool expect_moves_apply(const commit_case& c, const std::vector<std::int32_t>& kv_move,
                               std::int32_t r) {
  const auto ru = static_cast<std::size_t>(r);
  if (c.topk == 1) {  // no moves: the path is in place (or the engine keeps it where it is)
    for (std::int32_t k = 0; k < 2 * c.steps; ++k) {
      EXPECT_EQ(kv_move[ru * static_cast<std::size_t>(c.steps) * 2 + k], -1) << "row " << r;
    }
    return false;
  }
  const commit_expect e = commit_reference(c);
  const std::vector<std::int64_t>& window = e.window[ru];
  const std::vector<std::int64_t>& path = e.path[ru];
  auto apply = [&](bool forward) {
    std::map<std::int64_t, std::int64_t> kv;  // slot -> node data
    for (std::size_t i = 0; i < window.size(); ++i) kv[window[i]] = static_cast<std::int64_t>(i);
    for (std::int32_t n = 0; n < c.steps; ++n) {
      const std::int32_t k = forward ? n : c.steps - 1 - n;
      const std::size_t at = ru * static_cast<std::size_t>(c.steps) * 2 + 2 * k;
      const std::int64_t dst = kv_move[at], src = kv_move[at + 1];
      if (dst == -1 && src == -1) continue;
      kv[dst] = kv.at(src);
    }
    bool right = true;
    for (std::size_t k = 0; k < path.size(); ++k) right = right && kv[window[k]] == path[k];
    return right;
  };
  EXPECT_TRUE(apply(true)) << "row " << r << ": the pairs in increasing k";
  return !apply(false);
}

}  // namespace specgraph::testing
