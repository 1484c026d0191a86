// The commit (docs/commit.md) on random rounds against the independent reference of
// commit_reference.hpp: topk 1 .. 4 (topk 1: chain paths), page sizes 1, 2, 4, 16, D 1 .. 16,
// num_steps 1 .. 6, buckets with padding rows holding junk, idle ranks, stop tokens / budgets /
// both / neither, rows at the edge of their req_to_token row, exact, spare and short capacities,
// in both entries (host twin, launcher on the host executor with or without the device
// real-batch word). Every output cell is checked, the poisoned slack stays poisoned, and every
// real row's moves are applied to a fake KV array in increasing k.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "specgraph/commit_metadata.hpp"
#include "specgraph/executor.hpp"
#include "tests/commit_check.hpp"
#include "tests/commit_reference.hpp"
#include "tests/commit_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

commit_case random_case(std::mt19937_64& rng) {
  auto pick = [&](std::int64_t lo, std::int64_t hi) {  // [lo, hi]
    return static_cast<std::int32_t>(lo + static_cast<std::int64_t>(rng() % (hi - lo + 1)));
  };
  commit_case c;
  c.steps = pick(1, 6);
  c.topk = pick(1, 4);
  c.nodes = c.topk == 1 ? c.steps + 1 : pick(1, 16);
  const std::int32_t sizes[] = {1, 2, 4, 16};
  c.page_size = sizes[rng() % 4];
  c.bucket = rng() % 16 == 0 ? 0 : pick(1, 5);
  c.real_batch = rng() % 4 == 0 ? pick(0, c.bucket) : c.bucket;
  c.pool_rows = pick(1, 4);
  c.stride = pick(c.nodes + 1, c.nodes + 70);
  // Distinct slots, so the fake KV array tells nodes apart.
  std::vector<std::int32_t> slots(static_cast<std::size_t>(c.pool_rows * c.stride));
  std::iota(slots.begin(), slots.end(), pick(0, 1000));
  std::shuffle(slots.begin(), slots.end(), rng);
  c.req_to_token = slots;
  const int mode = pick(0, 3);  // 0 neither, 1 stop ids, 2 budget, 3 both
  const std::int32_t alphabet = pick(1, 6);
  if (mode & 1) {
    const std::int32_t n = pick(0, 4);
    for (std::int32_t i = 0; i < n; ++i) c.stop_ids.push_back(pick(-2, alphabet + 1));
    c.stop_pointer = n == 0;
  }
  c.has_budget = (mode & 2) != 0;
  const std::int64_t D = c.nodes, S = c.steps + 1;
  // In one case in four, idle flags: a real row with a nonzero flag (one in three) holds junk,
  // a budget of 0 included, and is neither read nor given finish cells; padding rows' flags are
  // junk too, never read.
  const bool flags = rng() % 4 == 0;
  for (std::int32_t r = 0; r < c.bucket && flags; ++r) {
    c.idle.push_back(r >= c.real_batch ? pick(-3, 3) : (rng() % 3 == 0 ? pick(1, 3) : 0));
  }
  // In one case in eight a stall word: nonzero (the round is stalled: every real row holds junk
  // and is padding, or idle) in half of them, else 0 (read, not stalled).
  if (rng() % 8 == 0) c.stall.push_back(rng() % 2 == 0 ? pick(1, 3) : 0);
  const bool stalled = !c.stall.empty() && c.stall[0] != 0;
  for (std::int32_t r = 0; r < c.bucket; ++r) {
    if (r >= c.real_batch || (flags && c.idle[static_cast<std::size_t>(r)] != 0) || stalled) {
      // junk: a padding, idle or stalled row is never read
      for (std::int64_t k = 0; k < S; ++k) c.accept_index.push_back(pick(-5, 100));
      for (std::int64_t j = 0; j < D; ++j) c.accept_tokens.push_back(pick(-5, 100));
      c.accept_length.push_back(pick(-5, 100));
      c.seq_len.push_back(pick(-(1 << 30), 1 << 30));
      c.allocated_len.push_back(pick(-5, 100));
      c.req_pool_index.push_back(pick(-5, 100));
      c.budget.push_back(pick(-5, 5));
      continue;
    }
    const std::int32_t seq = pick(1, c.stride - D);
    c.seq_len.push_back(seq);
    c.allocated_len.push_back(rng() % 4 == 0 ? static_cast<std::int32_t>(c.stride)
                                             : pick(seq + D, c.stride));
    c.req_pool_index.push_back(pick(0, c.pool_rows - 1));
    const std::int32_t c_max = std::min<std::int32_t>(c.steps, c.nodes - 1);
    const std::int32_t acc = pick(0, c_max);
    std::vector<std::int32_t> path = {0};
    // A chain (topk 1 but 1 in 8: a topk-1 round moves nothing whatever the path), or a tree
    // path still in place.
    if ((c.topk == 1 && rng() % 8 != 0) || rng() % 4 == 0) {
      for (std::int32_t k = 1; k <= acc; ++k) path.push_back(k);
    } else {
      std::vector<std::int32_t> nodes(static_cast<std::size_t>(D - 1));
      std::iota(nodes.begin(), nodes.end(), 1);
      std::shuffle(nodes.begin(), nodes.end(), rng);
      nodes.resize(static_cast<std::size_t>(acc));
      std::sort(nodes.begin(), nodes.end());
      path.insert(path.end(), nodes.begin(), nodes.end());
    }
    for (std::int64_t k = 0; k < S; ++k) {
      c.accept_index.push_back(k <= acc ? static_cast<std::int32_t>(r * D + path[k]) : -1);
    }
    c.accept_length.push_back(acc);
    for (std::int64_t j = 0; j < D; ++j) {
      c.accept_tokens.push_back(j <= acc ? pick(0, alphabet - 1) : pick(-5, 100));
    }
    c.budget.push_back(pick(1, c.nodes + 2));
  }
  return c;
}

TEST(CommitRandom, EveryCellAgainstTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto ex = make_host_executor();
  const int cases = property_cases(200000);
  std::int64_t rows = 0, finished = 0, moves = 0, chains = 0, short_runs = 0, spare_runs = 0;
  std::int64_t idle_rows = 0, stalled_rows = 0;
  for (int i = 0; i < cases; ++i) {
    const commit_case c = random_case(rng);
    SCOPED_TRACE("case " + std::to_string(i));
    std::int64_t caps[commit_output_count];
    commit_exact(c, caps);
    const std::uint64_t shape = rng() % 8;
    if (shape == 0) {  // one output short of what the commit writes
      const int k = static_cast<int>(rng() % commit_output_count);
      caps[k] =
          caps[k] > 0 ? static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(caps[k])) : 0;
      ++short_runs;
    } else if (shape == 1) {  // spare room: never written
      for (std::int64_t& cap : caps) cap += static_cast<std::int64_t>(rng() % 5);
      ++spare_runs;
    }
    const bool twin = i % 2 == 0;
    const commit_outputs o = run_commit_case(*ex, c, twin, !twin && i % 4 == 1, caps);
    expect_commit_matches(c, o);
    if (HasFatalFailure()) return;
    rows += c.real_batch;
    if (o.capacity[0] >= static_cast<std::int64_t>(c.bucket) * c.steps * 2) {
      for (std::int32_t r = 0; r < c.real_batch; ++r) {
        chains += expect_moves_apply(c, o.cells[0], r) ? 1 : 0;
      }
      for (std::int64_t k = 0; k < o.capacity[0] && k < c.bucket * c.steps * 2; k += 2) {
        moves += o.cells[0][static_cast<std::size_t>(k)] != -1 ? 1 : 0;
      }
    }
    for (std::int32_t r = 0; r < c.real_batch && r < o.capacity[1]; ++r) {
      const bool is_idle = !c.idle.empty() && c.idle[static_cast<std::size_t>(r)] != 0;
      idle_rows += is_idle ? 1 : 0;
      if (!is_idle) finished += o.cells[1][static_cast<std::size_t>(r)];
    }
    if (!c.stall.empty() && c.stall[0] != 0) stalled_rows += c.real_batch;
  }
  // The cases exercised what they claim (at the default case count).
  if (cases >= 100000) {
    EXPECT_GT(chains, 0) << "no round where the order of the moves matters";
    EXPECT_GT(finished, rows / 10);
    EXPECT_LT(finished, rows);
    EXPECT_GT(moves, 0);
    EXPECT_GT(idle_rows, rows / 50) << "too few idle rows";
    EXPECT_GT(stalled_rows, rows / 100) << "too few rows in stalled rounds";
  }
  RecordProperty("rows", std::to_string(rows));
  RecordProperty("finished", std::to_string(finished));
  RecordProperty("moves", std::to_string(moves));
  RecordProperty("idle_rows", std::to_string(idle_rows));
  RecordProperty("stalled_rows", std::to_string(stalled_rows));
  RecordProperty("order_sensitive_rows", std::to_string(chains));
  RecordProperty("short_runs", std::to_string(short_runs));
  RecordProperty("spare_runs", std::to_string(spare_runs));
}

// The launcher on each executor with every buffer in executor memory (cuda: the GPU runs the
// row code) on fresh random rounds, short capacities and the device real-batch word included.
class CommitRandomOnExecutor : public ExecutorTest {};

TEST_P(CommitRandomOnExecutor, EveryCellAgainstTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int cases = property_cases(200000) / 500 + 1;  // each case a few uploads and downloads
  for (int i = 0; i < cases; ++i) {
    const commit_case c = random_case(rng);
    SCOPED_TRACE("case " + std::to_string(i));
    std::int64_t caps[commit_output_count];
    commit_exact(c, caps);
    if (rng() % 8 == 0) {
      const int k = static_cast<int>(rng() % commit_output_count);
      caps[k] =
          caps[k] > 0 ? static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(caps[k])) : 0;
    }
    commit_outputs o;
    run_commit_in_executor_memory(o, *ex, c, i % 2 == 1, caps);
    expect_commit_matches(c, o);
    if (HasFatalFailure()) return;
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(CommitRandomOnExecutor);

}  // namespace
}  // namespace specgraph::testing
