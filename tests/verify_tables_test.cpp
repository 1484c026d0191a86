// verify_tables (verify_metadata.hpp), the one type of the verify outputs: its fields by index are
// its members in the documented order, the exact capacities and every field's shape follow the
// formulas of docs/verify.md section 6 (written out here, not taken from the library), and the
// one all-or-none rule refuses every partial layout naming its first missing pointer, wherever
// it is reached: verify_layouts_of itself, the kernels' validate (verify_metadata_host) and the
// plan's op over the engine's outputs (verify_metadata, "outputs.<field>"), with nothing written.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/verify_metadata.hpp"
#include "specgraph/verify_ops.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// The members in the documented order, independently of verify_field.
std::vector<const void*> members(const verify_tables& t) {
  return {t.prefix_page_table, t.prefix_cache_seqlen, t.prefix_cu_seqlens_q, t.prefix_cu_seqlens_k,
          t.expand_page_table, t.expand_cache_seqlen, t.expand_cu_seqlens_q, t.expand_cu_seqlens_k,
          t.qo_indptr,         t.kv_indptr,           t.kv_indices,          t.kv_last_page_len,
          t.mask_indptr,       t.packed_mask,         t.packed_mask_indptr};
}

TEST(VerifyTables, FieldsByIndexAreTheMembersInOrder) {
  const std::vector<std::string> names = {
      "prefix_page_table", "prefix_cache_seqlen", "prefix_cu_seqlens_q", "prefix_cu_seqlens_k",
      "expand_page_table", "expand_cache_seqlen", "expand_cu_seqlens_q", "expand_cu_seqlens_k",
      "qo_indptr",         "kv_indptr",           "kv_indices",          "kv_last_page_len",
      "mask_indptr",       "packed_mask",         "packed_mask_indptr"};
  ASSERT_EQ(verify_field_count, 15);
  ASSERT_EQ(verify_fa3_fields, 8);
  std::vector<std::int32_t> cells(verify_field_count);
  verify_tables t;
  for (int i = 0; i < verify_field_count; ++i) {
    EXPECT_EQ(verify_field_names[i], names[static_cast<std::size_t>(i)]);
    set_verify_field(t, i, &cells[static_cast<std::size_t>(i)]);
  }
  const std::vector<const void*> got = members(t);
  for (int i = 0; i < verify_field_count; ++i) {
    EXPECT_EQ(got[static_cast<std::size_t>(i)], &cells[static_cast<std::size_t>(i)]) << names[i];
    EXPECT_EQ(verify_field(t, i), &cells[static_cast<std::size_t>(i)]) << names[i];
  }
}

TEST(VerifyTables, ExactCapacitiesAndShapesFollowTheFormulas) {
  std::mt19937_64 rng(29);
  for (int n = 0; n < 500; ++n) {
    const std::int64_t b = 1 + static_cast<std::int64_t>(rng() % 64);
    const std::int64_t m = 1 + static_cast<std::int64_t>(rng() % 5000);
    const std::int64_t d = 1 + static_cast<std::int64_t>(rng() % 64);
    const std::int64_t ps = 1 + static_cast<std::int64_t>(rng() % 64);
    SCOPED_TRACE("B " + std::to_string(b) + " M " + std::to_string(m) + " D " + std::to_string(d) +
                 " ps " + std::to_string(ps));
    const verify_tables t =
        verify_exact_tables(static_cast<std::int32_t>(b), static_cast<std::int32_t>(m),
                            static_cast<std::int32_t>(ps), static_cast<std::int32_t>(d));
    const std::int64_t cols = (m + ps - 1) / ps, kv = b * (m + d);
    const std::int64_t packed = b * ((d * (m + d) + 7) / 8);
    EXPECT_EQ(t.prefix_capacity, cols);
    EXPECT_EQ(t.prefix_stride, cols);
    EXPECT_EQ(t.expand_stride, d);
    EXPECT_EQ(t.kv_indices_capacity, kv);
    EXPECT_EQ(t.packed_mask_capacity, packed);
    verify_params p;
    static_cast<verify_tables&>(p) = t;
    p.batch = static_cast<std::int32_t>(b);
    p.draft_tokens = static_cast<std::int32_t>(d);
    p.max_seq_len = static_cast<std::int32_t>(m);
    p.page_size = static_cast<std::int32_t>(ps);
    const std::int64_t rows[] = {b,     b,     b + 1, b + 1, b * d, b * d,  b * d + 1, b * d + 1,
                                 b + 1, b + 1, kv,    b,     b + 1, packed, b + 1};
    for (int i = 0; i < verify_field_count; ++i) {
      const verify_field_shape s = verify_shape_of(i, p);
      EXPECT_EQ(s.rows, rows[i]) << verify_field_names[i];
      EXPECT_EQ(s.table, i == 0 || i == 4) << verify_field_names[i];
      if (i == 0) {
        EXPECT_EQ(s.cols, cols);
      }
      if (i == 4) {
        EXPECT_EQ(s.cols, d);
      }
      EXPECT_EQ(s.bytes, i == 13) << verify_field_names[i];
    }
  }
}

// Tables with every pointer of both layouts set, but `missing` (-1: none missing).
verify_tables all_but(int missing, std::vector<std::int32_t>& cells) {
  verify_tables t;
  for (int i = 0; i < verify_field_count; ++i) {
    if (i != missing) set_verify_field(t, i, cells.data());
  }
  return t;
}

TEST(VerifyTables, EveryPartialLayoutIsRefusedNamingItsFirstMissingPointer) {
  std::vector<std::int32_t> cells(4096, -7);
  EXPECT_NO_THROW(verify_layouts_of(all_but(-1, cells)));
  for (int i = 0; i < verify_field_count; ++i) {
    SCOPED_TRACE(verify_field_names[i]);
    const std::string layout = i < verify_fa3_fields ? "the fa3 layout" : "the flashinfer layout";
    const int n =
        i < verify_fa3_fields ? verify_fa3_fields : verify_field_count - verify_fa3_fields;
    const std::string count = std::to_string(n - 1) + " of its " + std::to_string(n);
    expect_invalid([&] { verify_layouts_of(all_but(i, cells)); }, verify_field_names[i],
                   count + " output pointers set; set all of them or none (" + layout +
                       "; missing " + verify_field_names[i] + ")");
    expect_invalid([&] { verify_layouts_of(all_but(i, cells), "outputs."); },
                   std::string("outputs.") + verify_field_names[i], count);
    // Only this pointer of its layout set: the first other one is named.
    verify_tables one;
    set_verify_field(one, i, cells.data());
    const int first = i < verify_fa3_fields ? 0 : verify_fa3_fields;
    expect_invalid([&] { verify_layouts_of(one); },
                   verify_field_names[i == first ? first + 1 : first], "1 of its");
  }
  EXPECT_EQ(cells, std::vector<std::int32_t>(4096, -7));
}

// The rule as the kernels' validate and the plan's op reach it: refused, nothing written.
TEST(VerifyTables, TheOpsRefuseAPartialLayoutByNameWritingNothing) {
  std::vector<std::int32_t> cells(4096, -7);
  std::vector<std::int32_t> req_to_token(64, 3), pool(1, 0), seq(1, 5);
  std::vector<std::uint8_t> mask(36, 1);
  std::vector<guard_word> guards(verify_guard_count, guard_word{});
  guards[0].violations = 5;  // a reset would clear it
  draft_config c;
  c.max_batch = 2;
  c.buckets = {1, 2};
  c.topk = 1;
  c.num_steps = 1;
  c.page_size = 1;
  c.max_context_len = 8;
  c.pool_rows = 2;
  c.kv_slots = 1 << 20;
  c.formats = metadata_formats::both;
  c.verify_tokens = 4;
  const plan pl = make_plan(c);
  const auto ex = make_executor("host");
  std::vector<unsigned char> arena(pl.total_bytes + arena_alignment, 0x5a);
  auto* base = arena.data() +
               (arena_alignment - reinterpret_cast<std::uintptr_t>(arena.data()) % arena_alignment);
  const draft_buffers b(pl, base);
  const std::vector<unsigned char> before = arena;
  for (int i = 0; i < verify_field_count; ++i) {
    SCOPED_TRACE(verify_field_names[i]);
    verify_params p;
    static_cast<verify_tables&>(p) = all_but(i, cells);
    p.prefix_capacity = 8;
    p.prefix_stride = 8;
    p.expand_stride = 4;
    p.kv_indices_capacity = 12;
    p.packed_mask_capacity = 6;
    p.req_to_token = req_to_token.data();
    p.req_to_token_stride = 16;
    p.pool_rows = 4;
    p.req_pool_index = pool.data();
    p.seq_len = seq.data();
    p.batch = p.real_batch = 1;
    p.draft_tokens = 4;
    p.page_size = 1;
    p.max_seq_len = 8;
    p.custom_mask = mask.data();
    p.mask_cells = 36;
    p.guard = guards.data();
    expect_invalid([&] { verify_metadata_host(p); }, verify_field_names[i], "output pointers set");
    expect_invalid([&] { run_verify_metadata(*ex, p, /*host_memory=*/true); },
                   verify_field_names[i], "output pointers set");
    verify_engine_outputs o = all_but(i, cells);
    o.prefix_stride = 8;
    o.expand_stride = 4;
    o.kv_indices_capacity = 4096;
    o.packed_mask_capacity = 4096;
    verify_inputs in;
    in.tables.req_to_token = req_to_token.data();
    in.tables.req_to_token_stride = 16;
    in.outputs = &o;
    expect_invalid([&] { verify_metadata(*ex, b, 1, in); },
                   std::string("outputs.") + verify_field_names[i], "output pointers set");
  }
  ex->synchronize();
  EXPECT_EQ(cells, std::vector<std::int32_t>(4096, -7));
  EXPECT_EQ(guards[0].violations, 5);
  EXPECT_EQ(arena, before);
}

}  // namespace
}  // namespace specgraph::testing
