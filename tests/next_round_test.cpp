// The next round's inputs (docs/next-round.md) against the independent reference of
// next_round_reference.hpp: the spec's worked examples E1-E3 verbatim, the reserve table, the
// per-round page bound (brute force), then random rounds (tests/next_round_random.hpp) in both
// entries. Every output cell is checked, the poisoned slack past every capacity stays poisoned,
// and req_to_token, allocated_len, the ring head and the stall word come out as the reference's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/executor.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "tests/next_round_random.hpp"
#include "tests/next_round_reference.hpp"
#include "tests/next_round_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

using v64 = std::vector<std::int64_t>;

v64 head_of(const nr_result& o, int i, std::size_t n) {
  return v64(o.cells[i].begin(), o.cells[i].begin() + static_cast<std::ptrdiff_t>(n));
}

std::vector<std::int32_t> row_of(const nr_result& o, std::int64_t w, std::int64_t row,
                                 std::int64_t from, std::int64_t to) {
  return std::vector<std::int32_t>(o.req_to_token.begin() + row * w + from,
                                   o.req_to_token.begin() + row * w + to);
}

// E1: topk 1, ps 1, num_steps 3, D 4; new_seq_len [8, 7], request 1 finished; reserve 8.
nr_case e1() {
  nr_case c;
  c.batch = c.real_batch = 2;
  c.draft_tokens = 4;
  c.num_steps = 3;
  c.topk = 1;
  c.page_size = 1;
  c.reserve = 8;
  c.new_seq_len = {8, 7};
  c.bonus = {9, 3};
  c.has_finished = true;
  c.finished = {0, 1};
  c.req_pool_index = {1, 2};
  c.allocated_len = {13, 11};
  c.width = 16;
  c.pool_rows = 3;
  c.req_to_token.assign(3 * 16, -7);
  for (int p = 0; p < 13; ++p) c.req_to_token[16 + p] = 100 + p;
  for (int p = 0; p < 11; ++p) c.req_to_token[32 + p] = 200 + p;
  c.ring = {300, 301, 302, 303, 304};
  c.tail = 5;
  return c;
}

TEST(NextRoundExamples, E1ChainAndFinishedRow) {
  const nr_case c = e1();
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const nr_result o = nr_run(*ex, c, twin);
    nr_check(c, o);
    EXPECT_EQ(row_of(o, 16, 1, 13, 16), (std::vector<std::int32_t>{300, 301, 302}));
    EXPECT_EQ(o.allocated_len, (std::vector<std::int32_t>{16, 11}));
    EXPECT_EQ(o.head, 3);  // 3 ring pages
    EXPECT_EQ(head_of(o, 0, 2), (v64{1, 0}));
    EXPECT_EQ(head_of(o, 1, 2), (v64{8, 1}));
    EXPECT_EQ(head_of(o, 2, 2), (v64{9, 0}));
    EXPECT_EQ(head_of(o, 3, 2), (v64{8, 0}));
    EXPECT_EQ(head_of(o, 4, 6), (v64{108, 109, 110, 0, 0, 0}));
    EXPECT_EQ(head_of(o, 6, 8), (v64{108, 109, 110, 111, 0, 0, 0, 0}));
    EXPECT_EQ(o.guard[0].violations + o.guard[1].violations + o.guard[2].violations, 0);
  }
}

// E2: topk 2, ps 1, num_steps 2, D 4; new_seq_len [9, 1], row 1 padded; reserve 8.
TEST(NextRoundExamples, E2TreeAndPaddedRow) {
  nr_case c;
  c.batch = 2;
  c.real_batch = 1;
  c.draft_tokens = 4;
  c.num_steps = 2;
  c.topk = 2;
  c.page_size = 1;
  c.reserve = 8;
  c.new_seq_len = {9, 1};
  c.bonus = {30, 0};
  c.req_pool_index = {1, 0};
  c.allocated_len = {14, 1};
  c.width = 17;
  c.pool_rows = 2;
  c.req_to_token.assign(2 * 17, -7);
  for (int p = 0; p < 14; ++p) c.req_to_token[17 + p] = 100 + p;
  c.ring = {400, 401, 402, 403};
  c.tail = 4;
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const nr_result o = nr_run(*ex, c, twin);
    nr_check(c, o);
    EXPECT_EQ(row_of(o, 17, 1, 14, 17), (std::vector<std::int32_t>{400, 401, 402}));
    EXPECT_EQ(o.allocated_len[0], 17);
    EXPECT_EQ(o.head, 3);
    EXPECT_EQ(head_of(o, 4, 8), (v64{109, 110, 111, 112, 0, 0, 0, 0}));
    EXPECT_EQ(head_of(o, 6, 8), (v64{109, 110, 111, 112, 0, 0, 0, 0}));
    EXPECT_EQ(head_of(o, 0, 2), (v64{1, 0}));  // the padded row is inactive
    EXPECT_EQ(head_of(o, 1, 2), (v64{9, 1}));
    EXPECT_EQ(head_of(o, 2, 2), (v64{30, 0}));
    EXPECT_EQ(head_of(o, 3, 4), (v64{9, 9, 0, 0}));
  }
}

// E3: E2's request at ps 4 on pages 5 9 2 7 3 11, allocated 24, reserve 16, ring 13 4 6.
nr_case e3() {
  nr_case c;
  c.batch = c.real_batch = 1;
  c.draft_tokens = 4;
  c.num_steps = 2;
  c.topk = 2;
  c.page_size = 4;
  c.reserve = 16;
  c.new_seq_len = {9};
  c.bonus = {30};
  c.req_pool_index = {1};
  c.allocated_len = {24};
  c.width = 28;
  c.pool_rows = 2;
  c.req_to_token.assign(2 * 28, -7);
  const int pages[] = {5, 9, 2, 7, 3, 11};
  for (int p = 0; p < 24; ++p) c.req_to_token[28 + p] = pages[p / 4] * 4 + p % 4;
  c.ring = {13, 4, 6};
  c.tail = 3;
  return c;
}

void expect_e3(const nr_result& o) {
  EXPECT_EQ(row_of(o, 28, 1, 24, 28), (std::vector<std::int32_t>{52, 53, 54, 55}));
  EXPECT_EQ(o.allocated_len, (std::vector<std::int32_t>{28}));
  EXPECT_EQ(o.head, 1);  // one page, 13
  EXPECT_EQ(head_of(o, 4, 4), (v64{9, 10, 29, 30}));
  EXPECT_EQ(head_of(o, 5, 6), (v64{28, 8, -1, -1, -1, -1}));
  EXPECT_EQ(head_of(o, 6, 4), (v64{9, 10, 11, 28}));
  EXPECT_EQ(head_of(o, 3, 2), (v64{9, 9}));
}

TEST(NextRoundExamples, E3PagedTreeWithTailCopy) {
  const nr_case c = e3();
  EXPECT_EQ(next_round_reserve(2, 2, 4, 4), c.reserve);  // R1 = 16
  auto ex = make_host_executor();
  for (const bool twin : {true, false}) {
    const nr_result o = nr_run(*ex, c, twin);
    nr_check(c, o);
    expect_e3(o);
  }
}

// The spec's 5.2 table: (topk, num_steps, D, ps) -> R1 and ring pages per request per round.
TEST(NextRoundSizes, ReserveTable) {
  struct line {
    std::int32_t topk, steps, d, ps;
    std::int64_t r1, pages;
  };
  const line table[] = {{1, 3, 4, 1, 4, 4},   {1, 3, 4, 64, 4, 1},  {4, 5, 8, 1, 20, 6},
                        {8, 5, 64, 1, 64, 6}, {2, 3, 8, 16, 64, 1}, {4, 5, 32, 64, 512, 1}};
  for (const line& l : table) {
    EXPECT_EQ(next_round_reserve(l.topk, l.steps, l.d, l.ps), l.r1) << l.topk << " " << l.steps;
    EXPECT_EQ(nr_reserve_formula(l.topk, l.steps, l.d, l.ps), l.r1);
    EXPECT_EQ(next_round_pages_per_request(l.steps, l.ps), l.pages) << l.steps << " " << l.ps;
  }
  EXPECT_EQ(next_round_reserve(4, 5, 32, 64) / 64, 8);  // 8 pages
  for (std::int32_t k = 1; k <= 4; ++k) {
    for (std::int32_t n = 1; n <= 6; ++n) {
      for (std::int32_t ps : {1, 2, 3, 4, 16}) {
        for (std::int32_t d = 1; d <= 30; d += 7) {
          EXPECT_EQ(next_round_reserve(k, n, d, ps), nr_reserve_formula(k, n, d, ps));
        }
      }
    }
  }
}

TEST(NextRoundSizes, ExactCapacities) {
  const next_round_sizes s = next_round_exact_capacities(6, 8, 3, 4, 16);
  EXPECT_EQ(s.capacities.active_capacity, 6);
  EXPECT_EQ(s.capacities.seq_len_capacity, 6);
  EXPECT_EQ(s.capacities.root_token_capacity, 6);
  EXPECT_EQ(s.capacities.draft_position_capacity, 24);
  EXPECT_EQ(s.capacities.draft_slot_stride, 3);
  EXPECT_EQ(s.capacities.draft_out_cache_loc_capacity, 72);
  EXPECT_EQ(s.capacities.tail_copy_capacity, 6 * 3 * 15 * 2);
  EXPECT_EQ(s.capacities.verify_out_cache_loc_capacity, 48);
  EXPECT_EQ(s.scratch_capacity, 14);
  EXPECT_EQ(next_round_exact_capacities(5, 4, 2, 1, 8).capacities.tail_copy_capacity, 0);
  EXPECT_EQ(next_round_exact_capacities(5, 4, 2, 3, 1).capacities.tail_copy_capacity, 0);
}

// With a fixed reserve, a request that holds ceil_page(s + R) positions and commits a in
// [1, S] takes at most ceil(S / ps) pages, and some (s, a) takes exactly that many.
TEST(NextRoundSizes, PagesPerRequestBoundBruteForce) {
  auto ex = make_host_executor();
  std::int64_t runs = 0;
  for (std::int32_t ps : {1, 2, 3, 4, 16}) {
    for (std::int32_t n = 1; n <= 5; ++n) {
      const std::int64_t bound = next_round_pages_per_request(n, ps);
      ASSERT_EQ(bound, (n + 1 + ps - 1) / ps);
      // R >= S: the request holds its verify window [s', s' + D) with D >= S.
      for (std::int32_t reserve : {n + 1, n + 3, std::max(n + 1, 2 * ps + 1), 4 * n + 5}) {
        std::int64_t most = 0;
        for (std::int32_t s = 1; s <= 2 * ps + 2; ++s) {
          for (std::int32_t a = 1; a <= n + 1; ++a) {
            nr_case c;
            c.batch = c.real_batch = 1;
            c.num_steps = n;
            c.draft_tokens = 1;
            c.page_size = ps;
            c.reserve = reserve;
            c.new_seq_len = {s + a};
            c.bonus = {1};
            c.req_pool_index = {0};
            const std::int64_t held = nr_round_up(s + reserve, ps);
            c.allocated_len = {static_cast<std::int32_t>(std::max<std::int64_t>(held, s + a))};
            c.width = held + 4 * ps + 8;
            c.req_to_token.assign(static_cast<std::size_t>(c.width), 0);
            for (std::int64_t p = 0; p < c.allocated_len[0]; ++p) {
              c.req_to_token[p] = static_cast<std::int32_t>(p);
            }
            c.ring.assign(8, 1000);
            c.tail = 8;
            std::int64_t caps[7] = {1, -1, -1, -1, -1, -1, -1};
            const nr_result o = nr_run(*ex, c, runs % 2 == 0, caps);
            ++runs;
            ASSERT_LE(o.head, bound) << "ps " << ps << " n " << n << " s " << s << " a " << a;
            most = std::max(most, o.head);
          }
        }
        EXPECT_EQ(most, bound) << "ps " << ps << " n " << n << " reserve " << reserve;
      }
    }
  }
  RecordProperty("runs", std::to_string(runs));
}

TEST(NextRoundRandom, EveryCellAgainstTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto ex = make_host_executor();
  const int cases = property_cases(100000);
  std::int64_t pages = 0, stalls = 0, refused = 0, unbacked = 0, narrow = 0;
  for (int i = 0; i < cases; ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const bool twin = i % 2 == 0;
    const nr_case c = nr_random_case(rng, twin);
    std::int64_t caps[7];
    nr_random_caps(rng, c, caps);
    const nr_result o = nr_run(*ex, c, twin, caps);
    refused += nr_check(c, o);
    if (HasFailure()) return;
    pages += o.head - c.head;
    stalls += o.stall != 0;
    unbacked += o.guard[1].violations;
    for (const nr_violation& v : nr_reference(c).guard[0]) narrow += v.kind == 6;
  }
  RecordProperty("narrow_rows", std::to_string(narrow));
  RecordProperty("pages", std::to_string(pages));
  RecordProperty("stalls", std::to_string(stalls));
  RecordProperty("refused", std::to_string(refused));
  RecordProperty("unbacked_or_bad", std::to_string(unbacked));
}

// Several rounds in a row: allocated_len and req_to_token carried over, the ring consumed across
// rounds and refilled by the engine's protocol (fill, then publish the tail; clear the stall).
TEST(NextRoundRandom, RoundsInARow) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto ex = make_host_executor();
  const int sequences = property_cases(100000) / 50 + 1;
  std::int64_t rounds = 0, pages = 0;
  for (int i = 0; i < sequences; ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    nr_sequence q = nr_sequence_start(rng);
    for (int k = 0; k < 8; ++k) {
      SCOPED_TRACE("round " + std::to_string(k));
      const nr_result o = nr_run(*ex, q.c, (i + k) % 2 == 0);
      nr_check(q.c, o);
      if (HasFailure()) return;
      const std::int64_t bound = next_round_pages_per_request(q.c.num_steps, q.c.page_size);
      const std::int64_t ps = q.c.page_size;
      for (std::int32_t r = 0; r < q.c.batch; ++r) {
        const std::int64_t took =
            (o.allocated_len[r] + ps - 1) / ps - (q.c.allocated_len[r] + ps - 1) / ps;
        ASSERT_LE(took, bound) << "row " << r;
      }
      pages += o.head - q.c.head;
      ++rounds;
      nr_sequence_next(rng, q, o);
    }
  }
  RecordProperty("rounds", std::to_string(rounds));
  RecordProperty("pages", std::to_string(pages));
}

// The launcher on either executor with every buffer in its memory: E3 and random rounds.
class NextRoundExecutor : public ExecutorTest {};

TEST_P(NextRoundExecutor, ExamplesAndRandomRounds) {
  const nr_case c = e3();
  const nr_result o = nr_run(*ex, c, false);
  nr_check(c, o);
  expect_e3(o);
  std::mt19937_64 rng(test_seed());
  for (int i = 0; i < 300; ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const nr_case r = nr_random_case(rng, false);
    std::int64_t caps[7];
    nr_random_caps(rng, r, caps);
    nr_check(r, nr_run(*ex, r, false, caps));
    if (HasFailure()) return;
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(NextRoundExecutor);

}  // namespace
}  // namespace specgraph::testing
