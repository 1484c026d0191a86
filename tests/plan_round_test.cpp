// The plan's round section (draft_config::round_on_device): every buffer of the round after
// verify exactly the formula's size for the largest bucket, laid out inside the section and
// apart from every other buffer, its seven guard words named, the reserve's default, the report
// against SGLang's sizes, every bucket's view (exact capacities, the in-place state in the
// staged inputs), and the configuration refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/error.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/round_fields.hpp"
#include "tests/next_round_reference.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

draft_config random_config(std::mt19937_64& rng) {
  draft_config c;
  c.max_batch = 1 + static_cast<std::int32_t>(rng() % 48);
  c.topk = 1 + static_cast<std::int32_t>(rng() % 8);
  c.num_steps = 1 + static_cast<std::int32_t>(rng() % 6);
  const std::int32_t sizes[] = {1, 2, 4, 16, 64};
  c.page_size = sizes[rng() % 5];
  c.pool_rows = c.max_batch + 1;
  c.kv_slots = std::int64_t{1} << 22;
  c.formats = static_cast<metadata_formats>(rng() % 3);
  c.slot_stride = c.num_steps + static_cast<std::int32_t>(rng() % 3);
  c.verify_tokens = 1 + static_cast<std::int32_t>(rng() % 64);
  c.draft_extend = rng() % 2 == 0;
  c.round_on_device = true;
  c.round_reserve = rng() % 3 == 0 ? static_cast<std::int32_t>(rng() % 5000) : -1;
  c.max_stop_tokens = static_cast<std::int32_t>(rng() % 5);
  // Rows that hold the reserve past at least one committed token (ceil_page(1 + R), counted in
  // pages), and up to 3000 more; M derived, or one in [1, the largest that fits].
  const std::int64_t ps = c.page_size,
                     r = c.round_reserve >= 0
                             ? c.round_reserve
                             : nr_reserve_formula(c.topk, c.num_steps, c.verify_tokens, ps);
  std::int64_t need = 1 + r;
  while (need % ps != 0) ++need;
  c.max_context_len = static_cast<std::int32_t>(need + static_cast<std::int64_t>(rng() % 3000));
  std::int64_t fit = c.max_context_len;  // the largest M: ceil_page(M + R) <= max_context_len
  while ((fit + r + ps - 1) / ps * ps > c.max_context_len) --fit;
  if (rng() % 3 == 0) c.round_max_seq_len = 1 + static_cast<std::int32_t>(rng() % fit);
  return c;
}

void* aligned(std::vector<unsigned char>& arena) {
  return arena.data() +
         (arena_alignment - reinterpret_cast<std::uintptr_t>(arena.data()) % arena_alignment) %
             arena_alignment;
}

TEST(PlanRound, EveryRoundBufferHasTheFormulasSize) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int n = 0; n < property_cases(300); ++n) {
    const draft_config c = random_config(rng);
    const plan p = make_plan(c);
    const plan_layout::round_section& s = p.layout.round;
    const std::int64_t B = p.max_bucket(), D = c.verify_tokens, N = c.num_steps, K = c.topk,
                       ps = c.page_size;
    SCOPED_TRACE("B " + std::to_string(B) + " D " + std::to_string(D) + " steps " +
                 std::to_string(N) + " topk " + std::to_string(K) + " ps " + std::to_string(ps));
    ASSERT_TRUE(s.enabled());
    ASSERT_EQ(s.draft_tokens, D);
    // The reserve: the spec's R1 (5.1, written out in the test's reference) unless given.
    const std::int64_t r1 = nr_reserve_formula(K, N, D, ps);
    ASSERT_EQ(s.reserve, c.round_reserve >= 0 ? c.round_reserve : r1);
    // M: the one given, else the largest whose allocation the narrowest row holds.
    std::int64_t m = c.max_context_len;
    while ((m + s.reserve + ps - 1) / ps * ps > c.max_context_len) --m;
    ASSERT_EQ(s.max_seq_len, c.round_max_seq_len >= 0 ? c.round_max_seq_len : m);
    // name -> (elements, bytes per element), from the spec's section 8, not from plan_round.cpp.
    struct row {
      const char* name;
      std::int64_t elements;
      std::size_t size;
    };
    const std::vector<row> want = {{"parent", B * D, 4},
                                   {"draft_token", B * D, 4},
                                   {"target_predict", B * D, 4},
                                   {"allocated_len", B, 4},
                                   {"tokens_left", B, 4},
                                   {"stop_token_ids", c.max_stop_tokens, 4},
                                   {"accept_index", B * (N + 1), 4},
                                   {"accept_length", B, 4},
                                   {"predict", B * D, 4},
                                   {"accept_tokens", B * D, 4},
                                   {"bonus", B, 4},
                                   {"new_seq_len", B, 4},
                                   {"select_index", B, 4},
                                   {"kv_move", B * N * 2, 4},
                                   {"finished", B, 4},
                                   {"emit_len", B, 4},
                                   {"free_begin", B, 4},
                                   {"free_end", B, 4},
                                   {"active", B, 4},
                                   {"root_token", B, 4},
                                   {"draft_position", B * K, 4},
                                   {"tail_copy", B * (K - 1) * (ps - 1) * 2, 4},
                                   {"verify_slots", B * D, 8},
                                   {"ring_head", 1, 8},
                                   {"stall", 1, 4},
                                   {"scratch", 2 * B + 2, 8}};
    ASSERT_EQ(want.size(), static_cast<std::size_t>(round_field_count));
    std::size_t named = 0;
    for (const buffer_spec& b : p.buffers) named += b.name.rfind("after_verify.", 0) == 0;
    ASSERT_EQ(named, want.size()) << "no other round buffer";
    for (std::size_t i = 0; i < want.size(); ++i) {
      const buffer_spec& b = p.find(std::string("after_verify.") + want[i].name);
      ASSERT_EQ(b.offset, s.field[i]) << want[i].name;
      ASSERT_EQ(b.bytes, static_cast<std::size_t>(want[i].elements) * want[i].size) << want[i].name;
      ASSERT_EQ(b.offset % arena_alignment, 0u) << want[i].name;
      ASSERT_GE(b.offset, s.begin) << want[i].name;
      ASSERT_LE(b.offset + b.bytes, s.end) << want[i].name;
    }
    for (const buffer_spec& b : p.buffers) {
      ASSERT_LE(b.offset + b.bytes, p.total_bytes) << b.name;
      if (b.name.rfind("after_verify.", 0) == 0) continue;
      ASSERT_TRUE(b.offset + b.bytes <= s.begin || b.offset >= s.end) << b.name;
    }
    // Guard words: seven, after the other sections', named; round.order stays last.
    draft_config without = c;
    without.round_on_device = false;
    const plan q = make_plan(without);
    ASSERT_EQ(p.layout.guard_count, q.layout.guard_count + 7);
    ASSERT_EQ(s.guard_base, q.layout.guard_order);
    ASSERT_EQ(p.layout.guard_order, p.layout.guard_count - 1);
    const char* sites[] = {
        "after_verify.accept (input)",          "after_verify.accept (outputs)",
        "after_verify.commit (input)",          "after_verify.commit (outputs)",
        "after_verify.next_round (allocation)", "after_verify.next_round (input)",
        "after_verify.next_round (outputs)"};
    for (int g = 0; g < 7; ++g) ASSERT_EQ(guard_site_of(p, s.guard_base + g).buffer, sites[g]);
    // Off: no section, every other buffer at its offset (the section is appended last).
    ASSERT_FALSE(q.layout.round.enabled());
    ASSERT_EQ(q.our_round_bytes, 0u);
    for (std::size_t i = 0; i + 1 < q.buffers.size(); ++i) {
      ASSERT_EQ(p.buffers[i].name, q.buffers[i].name);
      ASSERT_EQ(p.buffers[i].offset, q.buffers[i].offset) << q.buffers[i].name;
    }
    ASSERT_EQ(p.our_round_bytes, s.end - s.begin);
    ASSERT_EQ(p.round_kv_move_pairs, B * N);
    ASSERT_EQ(p.engine_kv_move_pairs, B * (N + 1));
    ASSERT_EQ(p.engine_reserve_per_request, 2 * r1);
    // Every bucket's view: the section's pointers, the bucket's exact capacities, the state in
    // the staged inputs.
    std::vector<unsigned char> arena(p.total_bytes + arena_alignment);
    unsigned char* base = static_cast<unsigned char*>(aligned(arena));
    const draft_buffers b(p, base);
    for (const std::int32_t bucket : p.config.buckets) {
      const round_view v = b.round(bucket);
      const std::int64_t x = bucket;
      auto at = [&](int f) { return reinterpret_cast<std::int32_t*>(base + s.field[f]); };
      ASSERT_EQ(v.bucket, bucket);
      ASSERT_EQ(v.guard, b.guards() + s.guard_base);
      ASSERT_EQ(v.accept.parent, at(round_parent));
      ASSERT_EQ(v.accept.target_predict, at(round_target_predict));
      ASSERT_EQ(v.accept.seq_len, b.seq_len());
      ASSERT_EQ(v.accept.real_batch_at, b.real_batch());
      ASSERT_EQ(v.accept.accept_index_capacity, x * (N + 1));
      ASSERT_EQ(v.accept.predict_capacity, x * D);
      ASSERT_EQ(v.accept.accept_tokens_capacity, x * D);
      ASSERT_EQ(v.accept.bonus_capacity, x);
      ASSERT_EQ(v.accept.guard, v.guard);
      ASSERT_EQ(v.commit.seq_len, b.seq_len());
      ASSERT_EQ(v.commit.req_pool_index, b.req_pool_index());
      ASSERT_EQ(v.commit.allocated_len, at(round_allocated_len));
      ASSERT_EQ(v.commit.kv_move, at(round_kv_move));
      ASSERT_EQ(v.commit.kv_move_capacity, x * N * 2);
      ASSERT_EQ(v.commit.free_end_capacity, x);
      ASSERT_EQ(v.commit.guard, v.guard + 2);
      ASSERT_EQ(v.next.new_seq_len, at(round_new_seq_len));
      ASSERT_EQ(v.next.bonus, at(round_bonus));
      ASSERT_EQ(v.next.finished, at(round_finished));
      ASSERT_EQ(v.next.seq_len, b.seq_len());
      ASSERT_EQ(v.next.draft_out_cache_loc, b.out_cache_loc());
      ASSERT_EQ(v.next.draft_slot_stride, c.slot_stride);
      ASSERT_EQ(v.next.draft_out_cache_loc_capacity, x * K * c.slot_stride);
      ASSERT_EQ(v.next.tail_copy_capacity, x * (K - 1) * (ps - 1) * 2);
      ASSERT_EQ(v.next.verify_out_cache_loc_capacity, x * D);
      ASSERT_EQ(v.next.reserve, s.reserve);
      ASSERT_EQ(reinterpret_cast<unsigned char*>(v.next.ring_head),
                base + s.field[round_ring_head]);
      ASSERT_EQ(v.next.guard, v.guard + 4);
      ASSERT_EQ(v.stop_capacity, c.max_stop_tokens);
      ASSERT_EQ(v.stop_token_ids == nullptr, c.max_stop_tokens == 0);
    }
  }
}

draft_config report_config() {
  // The spec's table row topk 4, num_steps 5, D 32, ps 64: R1 512 (8 pages), SGLang 1024.
  draft_config c;
  c.max_batch = 64;
  c.topk = 4;
  c.num_steps = 5;
  c.page_size = 64;
  c.max_context_len = 4096;
  c.pool_rows = 65;
  c.kv_slots = std::int64_t{1} << 22;
  c.verify_tokens = 32;
  c.round_on_device = true;
  c.max_stop_tokens = 4;
  return c;
}

TEST(PlanRound, TheReportShowsTheSectionAgainstSGLangsSizes) {
  const plan p = make_plan(report_config());
  // Bytes from the spec's capacities: int32 5 x 64 x 32 [B][D] + 12 x 64 [B] + 64 x 6 + 64 x 5
  // x 2 + 64 x 4 + 64 x 3 x 63 x 2 + 4 stop ids + 1 stall = 36485; int64 64 x 32 + 1 + 130.
  const std::size_t bytes = 4 * 36485 + 8 * 2179;
  EXPECT_EQ(p.layout.round.reserve, 512);
  const std::string line = p.round_report_line();
  EXPECT_EQ(line, "round section (D = 32, S = 6, bucket 64, reserve 512, max seq_len 3584): " +
                      std::to_string(bytes) + " bytes in 26 buffers, " +
                      std::to_string(p.our_round_bytes) +
                      " with their alignment; kv move pairs 64 x 5 = 320 (SGLang 64 x 6 = 384); "
                      "standing reserve 512 positions per request (SGLang 2 x 512 = 1024); ring "
                      "pages per round 64 x 1\n");
  EXPECT_NE(p.report_text().find(line), std::string::npos);
  EXPECT_NE(p.report_json().find("\"round\":{\"draft_tokens\":32,\"reserve\":512,"
                                 "\"max_seq_len\":3584,\"stop_capacity\":4,\"bytes\":" +
                                 std::to_string(p.our_round_bytes) +
                                 ",\"kv_move_pairs\":320,\"engine_kv_move_pairs\":384,"
                                 "\"reserve_per_request\":512,\"engine_reserve_per_request\":1024,"
                                 "\"ring_pages_per_round\":64,\"guard_base\":" +
                                 std::to_string(p.layout.round.guard_base) + "}"),
            std::string::npos)
      << p.report_json();
  draft_config off = report_config();
  off.round_on_device = false;
  EXPECT_EQ(make_plan(off).round_report_line(), "");
  EXPECT_EQ(make_plan(off).report_json().find("\"round\""), std::string::npos);
  // A reserve the engine gives is kept (its standing reserve), SGLang's stays 2 x R1.
  draft_config given = report_config();
  given.round_reserve = 700;
  const plan g = make_plan(given);
  EXPECT_EQ(g.layout.round.reserve, 700);
  EXPECT_EQ(g.layout.round.max_seq_len, 4096 - 700);  // rows of 4096 hold 3396 + 700
  EXPECT_EQ(g.round_reserve_per_request, 700);
  EXPECT_EQ(g.engine_reserve_per_request, 1024);
}

void expect_refused(const draft_config& c, const std::string& field, const std::string& message) {
  expect_invalid([&] { (void)make_plan(c); }, field, message);
}

TEST(PlanRound, TheConfigurationIsRefusedByName) {
  draft_config c = report_config();
  c.verify_tokens = 0;
  expect_refused(c, "round_on_device",
                 "true with verify_tokens 0: the round's tree is the verify tree of D nodes");
  c = report_config();
  c.round_reserve = -2;
  expect_refused(c, "round_reserve", "-2 is outside [0, 2^28]");
  c.round_reserve = (1 << 28) + 1;
  expect_refused(c, "round_reserve", "268435457 is outside [0, 2^28]");
  // 2^28 is in range but the rows (4096 wide) cannot hold it: refused by name
  // (tests/plan_round_rows_test.cpp has the exact boundary, 2^28 included at rows of 2^28).
  c.round_reserve = 1 << 28;
  expect_refused(c, "round_reserve",
                 "268435456: the reserve alone does not fit the rows: a request at committed "
                 "length 1 allocates up to ceil_page(1 + R) = 268435520 positions, past "
                 "max_context_len 4096");
  c.round_reserve = 4095;  // the largest these rows hold: M = 1, ceil_page(1 + 4095) = 4096
  EXPECT_EQ(make_plan(c).layout.round.reserve, 4095);
  EXPECT_EQ(make_plan(c).layout.round.max_seq_len, 1);
  c = report_config();
  c.max_stop_tokens = -1;
  expect_refused(c, "max_stop_tokens", "-1");
  c.max_stop_tokens = 1025;
  expect_refused(c, "max_stop_tokens", "1025");
  c.max_stop_tokens = 1024;
  EXPECT_EQ(make_plan(c).layout.round.stop_capacity, 1024);
  // B * S past the row limit: named by num_steps (B * D fits: D = 1).
  c = report_config();
  c.max_batch = 1 << 20;
  c.pool_rows = 1 << 20;
  c.topk = 1;
  c.num_steps = 16;
  c.verify_tokens = 1;
  c.max_context_len = 16;
  expect_refused(c, "num_steps", "accepted-path entries exceeds the row limit 16777216");
  // A view of a plan without the section, or of an unplanned bucket, names the field.
  draft_config off = report_config();
  off.round_on_device = false;
  const plan q = make_plan(off);
  std::vector<unsigned char> arena(q.total_bytes + arena_alignment);
  const draft_buffers b(q, aligned(arena));
  expect_invalid([&] { (void)b.round(1); }, "round_on_device", "this plan has no round section");
  const plan p = make_plan(report_config());
  std::vector<unsigned char> arena2(p.total_bytes + arena_alignment);
  const draft_buffers b2(p, aligned(arena2));
  expect_invalid([&] { (void)b2.round(9); }, "bucket", "9 is not one of the planned buckets");
}

}  // namespace
}  // namespace specgraph::testing
