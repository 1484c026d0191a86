// `specgraph metadata accept` on fresh random rounds against the independent model of
// tests/cli_accept_reference.hpp, output compared byte for byte: page sizes 1, 2, 4; topk 1..3;
// 1..4 steps; chains and random trees (orphans, repeated sibling tokens from a 3-token alphabet);
// buckets 0..4 with padded rows holding junk; stop tokens and budgets; partial last pages; rows
// exactly wide or too narrow; rings exact, long or short; default and explicit reserves; stale
// slots past allocated_len (an unbacked position must read 0, never them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/cli_accept_reference.hpp"
#include "tests/cli_accept_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::tools {
namespace {

using testing_ref::list;
using testing_ref::lists;
using testing_ref::round_case;

std::int64_t pick(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

round_case random_case(std::mt19937_64& rng) {
  round_case c;
  const std::int64_t sizes[] = {1, 2, 4};
  c.ps = sizes[pick(rng, 0, 2)];
  c.topk = pick(rng, 1, 3);
  c.steps = pick(rng, 1, 4);
  c.d = c.topk == 1 && pick(rng, 0, 1) ? c.steps + 1 : pick(rng, 1, 8);
  c.bs = pick(rng, 0, 4);
  c.real = pick(rng, 0, 3) == 0 ? pick(rng, 0, c.bs) : c.bs;
  if (pick(rng, 0, 1)) c.reserve = pick(rng, 0, 12);
  const std::int64_t alphabet = pick(rng, 1, 3);
  for (std::int64_t r = 0; r < c.bs; ++r) {
    std::vector<std::int64_t> par(c.d, -1), depth(c.d, -1), dt(c.d), tp(c.d);
    depth[0] = 0;
    const bool chain = c.topk == 1 && c.d == c.steps + 1;
    for (std::int64_t i = 1; i < c.d; ++i) {
      if (chain) {
        par[i] = i - 1;
      } else if (pick(rng, 0, 7) != 0) {  // else an orphan
        do par[i] = pick(rng, -1, i - 1);
        while (par[i] >= 0 && depth[par[i]] >= c.steps);
      }
      depth[i] = par[i] >= 0 && depth[par[i]] >= 0 ? depth[par[i]] + 1 : -1;
    }
    for (std::int64_t i = 0; i < c.d; ++i) {
      dt[i] = pick(rng, 0, alphabet - 1);
      tp[i] = pick(rng, 0, alphabet - 1);
    }
    c.parent.push_back(par);
    c.draft.push_back(dt);
    c.target.push_back(tp);
  }
  if (pick(rng, 0, 2) == 0) c.stops = {pick(rng, 0, 2)};
  const bool budget = pick(rng, 0, 2) == 0;
  // Real rows on pool rows 1.. with distinct pages, padded rows on row 0.
  std::int64_t next_page = 1, widest = 1;
  std::vector<std::vector<std::int64_t>> pages(c.bs);
  for (std::int64_t r = 0; r < c.bs; ++r) {
    const bool real = r < c.real;
    c.seq.push_back(real ? pick(rng, 1, 20) : pick(rng, 0, 5));
    c.alloc.push_back(real ? c.seq[r] + c.d + pick(rng, 0, 10) : pick(rng, 0, 60));
    c.pool.push_back(real ? r + 1 : 0);
    if (budget) c.budget.push_back(real ? pick(rng, 1, 6) : pick(rng, -3, 3));
    if (real) widest = std::max(widest, c.alloc[r]);
  }
  // The widest row the round can need: nxt <= ceil_page(allocated_len + reserve).
  const std::int64_t r1 = std::max<std::int64_t>(
      {c.steps * c.topk, c.d, (2 * c.ps - 2 + c.steps) / c.ps * c.ps * c.topk});
  const std::int64_t most = widest + (c.reserve < 0 ? r1 : c.reserve) + c.ps;
  c.width = pick(rng, 0, 3) == 0 ? pick(rng, widest, most) : most;
  c.rows.assign(static_cast<std::size_t>(c.bs + 1), std::vector<std::int64_t>(c.width));
  for (std::int64_t p = 0; p < c.width; ++p) c.rows[0][p] = pick(rng, 0, 3);
  for (std::int64_t r = 0; r < c.real; ++r) {
    auto& row = c.rows[r + 1];
    for (std::int64_t p = 0; p < c.width; ++p) {
      if (p % c.ps == 0) pages[r].push_back(next_page++);
      // Backed positions on the row's pages; past allocated_len, stale slots of the same pages.
      row[p] = pages[r].back() * c.ps + p % c.ps;
    }
  }
  std::vector<std::int64_t> free(static_cast<std::size_t>(pick(rng, 0, 3 * c.bs + 2)));
  std::iota(free.begin(), free.end(), next_page);
  std::shuffle(free.begin(), free.end(), rng);
  c.ring = free;
  return c;
}

std::string to_input(const round_case& c) {
  fields f = {{"page_size", std::to_string(c.ps)},
              {"topk", std::to_string(c.topk)},
              {"num_steps", std::to_string(c.steps)},
              {"num_draft_tokens", std::to_string(c.d)},
              {"seq_len", list(c.seq)},
              {"req_pool_index", list(c.pool)},
              {"req_to_token", lists(c.rows)},
              {"parent", lists(c.parent)},
              {"draft_token", lists(c.draft)},
              {"target_predict", lists(c.target)},
              {"allocated_len", list(c.alloc)},
              {"free_pages", list(c.ring)},
              {"real_batch", std::to_string(c.real)}};
  if (c.reserve >= 0) set(f, "reserve", std::to_string(c.reserve));
  if (!c.stops.empty()) set(f, "stop_token_ids", list(c.stops));
  if (!c.budget.empty()) set(f, "max_new_tokens_left", list(c.budget));
  return to_json(f);
}

TEST(CliAcceptRandom, MatchesTheIndependentModel) {
  // A command run parses and prints JSON: 10^4 rounds take about a second.
  // At least 1000 whatever SPECGRAPH_PROPERTY_CASES says: the coverage counts below (finished
  // rows, KV moves, tail copies) need that many to be sure of one each.
  const std::int64_t cases =
      std::max<std::int64_t>(specgraph::testing::property_cases(10000), 1000);
  const std::uint64_t seed = specgraph::testing::test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::int64_t violations = 0, finished = 0, moves = 0, tails = 0;
  for (std::int64_t i = 0; i < cases; ++i) {
    const round_case c = random_case(rng);
    const std::string input = to_input(c);
    const cli_result r = run_accept_cli(input);
    ASSERT_EQ(r.code, 0) << input << "\n" << r.err;
    ASSERT_EQ(r.out, testing_ref::expected_output(c)) << input;
    violations += r.out.find("\"violations\":[]") == std::string::npos;
    finished += r.out.find("\"finished\":[") != std::string::npos &&
                r.out.find("1", r.out.find("\"finished\":[")) < r.out.find("\"emit_len\"");
    moves += r.out.find("\"kv_moves\":[]") == std::string::npos;
    tails += r.out.find("\"tail_copies\":[]") == std::string::npos;
  }
  std::printf(
      "%lld rounds: %lld with violations, %lld with a finished row, %lld with moves, %lld with "
      "tail copies\n",
      static_cast<long long>(cases), static_cast<long long>(violations),
      static_cast<long long>(finished), static_cast<long long>(moves),
      static_cast<long long>(tails));
  // The generator reaches every branch often enough to matter.
  EXPECT_GT(violations, cases / 20);
  EXPECT_GT(finished, cases / 20);
  EXPECT_GT(moves, cases / 20);
  EXPECT_GT(tails, cases / 50);
}

}  // namespace
}  // namespace specgraph::tools
