// The plan's row-width check of the round section (issue 31 item 3: a row too narrow is refused
// by name at plan time): every req_to_token row (at least max_context_len wide) must hold
// ceil_page(M + R), M = round_max_seq_len the largest committed length, R the reserve. The
// boundary exactly (M at the limit accepted, M + 1 refused naming round_max_seq_len, for page
// sizes 1 and 16, the default R1 and an explicit reserve), the derived M, the reserve alone too
// wide (named round_reserve), and a brute force over small configurations against an independent
// computation (a search for the largest M with page rounding done by counting, not the plan's
// closed form).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "specgraph/error.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/plan.hpp"
#include "tests/next_round_reference.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// topk 2, num_steps 2, D 3: R1 = 4 at page size 1, 2 * ps * 2 = 4 ps at ps > 1 (two pages per
// branch).
draft_config rows_config(std::int32_t ps, std::int32_t ctx, std::int32_t reserve,
                         std::int32_t max_seq_len) {
  draft_config c;
  c.max_batch = 4;
  c.topk = 2;
  c.num_steps = 2;
  c.page_size = ps;
  c.max_context_len = ctx;
  c.pool_rows = 5;
  c.kv_slots = std::int64_t{1} << 20;
  c.verify_tokens = 3;
  c.round_on_device = true;
  c.round_reserve = reserve;
  c.round_max_seq_len = max_seq_len;
  return c;
}

std::int64_t reserve_of(const draft_config& c) {
  return c.round_reserve >= 0
             ? c.round_reserve
             : nr_reserve_formula(c.topk, c.num_steps, c.verify_tokens, c.page_size);
}

// x rounded up to a page by counting.
std::int64_t page_up(std::int64_t x, std::int64_t ps) {
  while (x % ps != 0) ++x;
  return x;
}

// The largest M >= 1 whose allocation ceil_page(M + R) fits max_context_len; 0 when none does.
std::int64_t largest_fit(const draft_config& c) {
  const std::int64_t r = reserve_of(c);
  for (std::int64_t m = c.max_context_len; m >= 1; --m) {
    if (page_up(m + r, c.page_size) <= c.max_context_len) return m;
  }
  return 0;
}

TEST(PlanRoundRows, TheBoundaryExactly) {
  for (const std::int32_t ps : {1, 16}) {
    for (const std::int32_t reserve : {-1, 37}) {
      for (const std::int32_t ctx : {1000, 1001, 1024, 1040}) {
        SCOPED_TRACE("ps " + std::to_string(ps) + " reserve " + std::to_string(reserve) +
                     " max_context_len " + std::to_string(ctx));
        const draft_config derived = rows_config(ps, ctx, reserve, -1);
        const std::int64_t r = reserve_of(derived), m = largest_fit(derived);
        ASSERT_GE(m, 1);
        ASSERT_LE(page_up(m + r, ps), ctx);
        ASSERT_GT(page_up(m + 1 + r, ps), ctx);
        EXPECT_EQ(make_plan(derived).layout.round.max_seq_len, m) << "the derived M";
        const plan at = make_plan(rows_config(ps, ctx, reserve, static_cast<std::int32_t>(m)));
        EXPECT_EQ(at.layout.round.max_seq_len, m);
        EXPECT_EQ(at.layout.round.reserve, r);
        const std::int64_t need = page_up(m + 1 + r, ps);
        expect_invalid(
            [&] {
              (void)make_plan(rows_config(ps, ctx, reserve, static_cast<std::int32_t>(m + 1)));
            },
            "round_max_seq_len",
            std::to_string(m + 1) + ": a round at this committed length allocates up to " +
                "ceil_page(M + R) = ceil_page(" + std::to_string(m + 1) + " + " +
                std::to_string(r) + ") = " + std::to_string(need) +
                " positions, past max_context_len " + std::to_string(ctx) +
                " (the narrowest req_to_token row); widen the rows to max_context_len >= " +
                std::to_string(need) + ", or lower round_max_seq_len to " + std::to_string(m));
        // The rows widened to the allocation take M + 1.
        EXPECT_EQ(make_plan(rows_config(ps, static_cast<std::int32_t>(need), reserve,
                                        static_cast<std::int32_t>(m + 1)))
                      .layout.round.max_seq_len,
                  m + 1);
      }
    }
  }
}

// The reserve alone too wide for the rows: the derived M would be below 1, refused naming
// round_reserve; the largest reserve that fits leaves M = 1. At page size 64 and at the context
// limit 2^28.
TEST(PlanRoundRows, AReserveTheRowsCannotHoldIsRefused) {
  struct edge {
    std::int32_t ps, ctx;
  };
  for (const edge e : {edge{64, 4096}, edge{1, 4096}, edge{16, 1000},
                       edge{limits::max_page_size, limits::max_context_len}}) {
    SCOPED_TRACE("ps " + std::to_string(e.ps) + " max_context_len " + std::to_string(e.ctx));
    draft_config c = rows_config(e.ps, e.ctx, 0, -1);
    c.topk = 1;  // no tail copies at the widest page
    c.num_steps = 1;
    c.verify_tokens = 1;  // the verify mask of rows 2^28 wide stays within int32
    c.max_batch = 1;
    const std::int64_t rows = e.ctx / e.ps * e.ps;  // the widest a page-aligned allocation fits
    c.round_reserve = static_cast<std::int32_t>(rows - 1);
    const plan p = make_plan(c);
    EXPECT_EQ(p.layout.round.max_seq_len, 1);
    EXPECT_EQ(p.layout.round.reserve, rows - 1);
    c.round_reserve = static_cast<std::int32_t>(rows);
    const std::int64_t need = page_up(rows + 1, e.ps);
    expect_invalid(
        [&] { (void)make_plan(c); }, "round_reserve",
        std::to_string(rows) +
            ": the reserve alone does not fit the rows: a request at committed length "
            "1 allocates up to ceil_page(1 + R) = " +
            std::to_string(need) + " positions, past max_context_len " + std::to_string(e.ctx) +
            " (the narrowest req_to_token row); widen the rows to max_context_len >= " +
            std::to_string(need) + ", or lower round_reserve to " + std::to_string(rows - 1));
  }
  // The default R1 too wide: named round_reserve, "(the default R1)". topk 2, num_steps 2, D 3 at
  // ps 16: R1 = 64 positions, rows of 64.
  expect_invalid([&] { (void)make_plan(rows_config(16, 64, -1, -1)); }, "round_reserve",
                 "64 (the default R1): the reserve alone does not fit the rows");
  // max_context_len below a page: nothing fits, the only fix is wider rows.
  expect_invalid([&] { (void)make_plan(rows_config(16, 15, 0, -1)); }, "round_reserve",
                 "widen the rows to max_context_len >= 16");
  // Out of range, with or without the section.
  for (const bool on : {true, false}) {
    draft_config c = rows_config(1, 100, -1, 0);
    c.round_on_device = on;
    expect_invalid([&] { (void)make_plan(c); }, "round_max_seq_len", "0 is outside [1, 2^28]");
    c.round_max_seq_len = limits::max_context_len + 1;
    expect_invalid([&] { (void)make_plan(c); }, "round_max_seq_len",
                   "268435457 is outside [1, 2^28]");
    c.round_max_seq_len = -2;
    expect_invalid([&] { (void)make_plan(c); }, "round_max_seq_len", "-2 is outside");
  }
}

// Every small configuration: accepted exactly when the independent computation says the rows
// hold ceil_page(M + R) with M >= 1 (explicit, or the largest that fits), refused otherwise
// naming round_max_seq_len (explicit M) or round_reserve (derived M below 1); the plan's
// resolved M is the independent one.
TEST(PlanRoundRows, BruteForceAgainstAnIndependentComputation) {
  std::int64_t accepted = 0, refused_m = 0, refused_r = 0;
  for (const std::int32_t ps : {1, 2, 4, 16}) {
    for (std::int32_t ctx = 1; ctx <= 48; ++ctx) {
      for (const std::int32_t reserve : {-1, 0, 1, 2, 5, 8, 15, 16, 17, 33}) {
        const std::int64_t fit = largest_fit(rows_config(ps, ctx, reserve, -1));
        for (std::int32_t m = -1; m <= ctx + 1; ++m) {
          if (m == 0) continue;
          const draft_config c = rows_config(ps, ctx, reserve, m);
          const std::int64_t r = reserve_of(c);
          const bool fits = m < 0 ? fit >= 1 : page_up(m + r, ps) <= ctx;
          SCOPED_TRACE("ps " + std::to_string(ps) + " max_context_len " + std::to_string(ctx) +
                       " reserve " + std::to_string(reserve) + " M " + std::to_string(m));
          try {
            const plan p = make_plan(c);
            ASSERT_TRUE(fits) << "accepted";
            ASSERT_EQ(p.layout.round.max_seq_len, m < 0 ? fit : m);
            ++accepted;
          } catch (const invalid_argument& e) {
            ASSERT_FALSE(fits) << e.what();
            ASSERT_EQ(e.field(), m < 0 ? "round_reserve" : "round_max_seq_len") << e.what();
            ++(m < 0 ? refused_r : refused_m);
          }
        }
      }
    }
  }
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(refused_m, 1000);
  EXPECT_GT(refused_r, 100);
}

}  // namespace
}  // namespace specgraph::testing
