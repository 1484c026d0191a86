// The plan's draft-extend section (draft_config::draft_extend): every draft-extend buffer exactly
// the formula's size for the largest bucket at seq_len <= max_context_len with window W =
// verify_tokens, laid out inside the section and apart from every other buffer, its guard words
// named, the report against SGLang's reservations, its views, and draft_extend refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/error.hpp"
#include "specgraph/extend_metadata.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
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
  c.max_context_len = 1 + static_cast<std::int32_t>(rng() % 3000);
  c.pool_rows = c.max_batch + 1;
  c.kv_slots = std::int64_t{1} << 22;
  c.formats = static_cast<metadata_formats>(rng() % 3);
  c.device_steps = rng() % 2 == 0;
  c.verify_tokens = 1 + static_cast<std::int32_t>(rng() % 64);
  c.draft_extend = true;
  return c;
}

TEST(PlanExtend, EveryExtendBufferHasTheFormulasSize) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int n = 0; n < property_cases(300); ++n) {
    const draft_config c = random_config(rng);
    const plan p = make_plan(c);
    const plan_layout::extend_section& e = p.layout.extend;
    const std::int64_t B = p.max_bucket(), W = c.verify_tokens, M = c.max_context_len;
    const bool fa3 = c.formats != metadata_formats::csr, csr = c.formats != metadata_formats::fa3;
    SCOPED_TRACE("B " + std::to_string(B) + " W " + std::to_string(W) + " M " + std::to_string(M) +
                 " ps " + std::to_string(c.page_size) + " formats " + to_string(c.formats));
    ASSERT_EQ(e.extend_tokens, W);
    ASSERT_TRUE(e.tokens);
    ASSERT_EQ(e.fa3, fa3);
    ASSERT_EQ(e.prefix, csr);
    ASSERT_EQ(e.full, csr);
    // name -> (offset in the typed layout, elements, bytes per element), written from the
    // layouts' definitions (docs/extend.md section 5), not from plan_extend.cpp.
    struct row {
      const char* name;
      std::size_t offset;
      std::int64_t elements;
      std::size_t size;
    };
    const std::int64_t cols = (M + W + c.page_size - 1) / c.page_size;
    std::vector<row> want = {
        {"extend.accept_len", e.accept_len, B, 4},
        {"extend.position", e.field[0], B * W, 4},
        {"extend.out_cache_loc", e.field[1], B * W, 4},
        {"extend.select_index", e.field[2], B, 4},
    };
    if (fa3) {
      want.push_back({"extend.page_table", e.field[3], B * cols, 4});
      want.push_back({"extend.cache_seqlen", e.field[4], B, 4});
      want.push_back({"extend.cu_seqlens_q", e.field[5], B + 1, 4});
      want.push_back({"extend.cu_seqlens_k", e.field[6], B + 1, 4});
      want.push_back({"extend.max_seqlen_k", e.field[7], 1, 4});
      ASSERT_EQ(e.page_capacity, cols);
      ASSERT_EQ(p.find("extend.page_table").capacity, cols);
    } else {
      for (int i = 3; i < 8; ++i) ASSERT_EQ(e.field[i], 0u) << i;
      ASSERT_EQ(e.page_capacity, 0);
    }
    if (csr) {
      want.push_back({"extend.prefix_qo_indptr", e.field[8], B + 1, 4});
      want.push_back({"extend.prefix_kv_indptr", e.field[9], B + 1, 4});
      want.push_back({"extend.prefix_kv_indices", e.field[10], B * M, 4});
      want.push_back({"extend.full_qo_indptr", e.field[11], B + 1, 4});
      want.push_back({"extend.full_kv_indptr", e.field[12], B + 1, 4});
      want.push_back({"extend.full_kv_indices", e.field[13], B * (M + W), 4});
      want.push_back({"extend.full_kv_last_page_len", e.field[14], B, 4});
      ASSERT_EQ(e.prefix_kv_capacity, B * M);
      ASSERT_EQ(e.full_kv_capacity, B * (M + W));
    } else {
      for (int i = 8; i < 15; ++i) ASSERT_EQ(e.field[i], 0u) << i;
    }
    want.push_back({"extend.scratch", e.scratch, 4 * B, 8});
    std::size_t named = 0;
    for (const buffer_spec& b : p.buffers) named += b.name.rfind("extend.", 0) == 0;
    ASSERT_EQ(named, want.size()) << "no other extend buffer";
    for (const row& r : want) {
      const buffer_spec& b = p.find(r.name);
      ASSERT_EQ(b.offset, r.offset) << r.name;
      ASSERT_EQ(b.bytes, static_cast<std::size_t>(r.elements) * r.size) << r.name;
      ASSERT_EQ(b.offset % arena_alignment, 0u) << r.name;
      ASSERT_GE(b.offset, e.begin) << r.name;
      ASSERT_LE(b.offset + b.bytes, e.end) << r.name;
    }
    for (const buffer_spec& b : p.buffers) {
      ASSERT_LE(b.offset + b.bytes, p.total_bytes) << b.name;
      if (b.name.rfind("extend.", 0) == 0) continue;
      ASSERT_TRUE(b.offset + b.bytes <= e.begin || b.offset >= e.end)
          << b.name << " [" << b.offset << ", " << b.offset + b.bytes << ") overlaps the section ["
          << e.begin << ", " << e.end << ")";
    }
    // Guard words: after the verify section's, five of them, named; round.order stays last.
    draft_config without = c;
    without.draft_extend = false;
    const plan q = make_plan(without);
    ASSERT_EQ(p.layout.guard_count, q.layout.guard_count + extend_guard_count);
    ASSERT_EQ(e.guard_base, q.layout.verify.guard_base + 3);
    ASSERT_EQ(p.layout.guard_order, p.layout.guard_count - 1);
    const char* sites[] = {"extend (input)", "extend.page_table", "extend.prefix_kv_indices",
                           "extend.full_kv_indices", "extend.accept_len"};
    for (int g = 0; g < extend_guard_count; ++g) {
      ASSERT_EQ(guard_site_of(p, e.guard_base + g).buffer, sites[g]);
    }
    ASSERT_EQ(guard_site_of(p, p.layout.guard_order).buffer, "round.order");
    // draft_extend off: the same plan as before the field existed; every other buffer keeps its
    // offset (the section is appended before the guards).
    ASSERT_FALSE(q.layout.extend.enabled());
    ASSERT_EQ(q.our_extend_bytes, 0u);
    for (const buffer_spec& b : q.buffers) ASSERT_NE(b.name.rfind("extend.", 0), 0u) << b.name;
    for (std::size_t i = 0; i + 1 < q.buffers.size(); ++i) {
      ASSERT_EQ(p.buffers[i].name, q.buffers[i].name);
      ASSERT_EQ(p.buffers[i].offset, q.buffers[i].offset) << q.buffers[i].name;
    }
    ASSERT_EQ(p.our_extend_bytes, e.end - e.begin);
    const std::int64_t mb = c.max_batch;
    ASSERT_EQ(p.engine_extend_fa3_bytes,
              fa3 ? static_cast<std::size_t>(4 * mb * ((M + c.page_size - 1) / c.page_size)) : 0u);
    ASSERT_EQ(p.engine_extend_triton_bytes, csr ? static_cast<std::size_t>(8 * mb * W * M) : 0u);
    ASSERT_EQ(p.engine_extend_flashinfer_bytes,
              csr ? static_cast<std::size_t>(5 * mb * W * M) : 0u);
    // The views: every bucket's pointers inside the section at the planned offsets, its
    // capacities the bucket's exact ones.
    std::vector<unsigned char> arena(p.total_bytes + arena_alignment);
    void* base = arena.data() + (arena_alignment -
                                 reinterpret_cast<std::uintptr_t>(arena.data()) % arena_alignment) %
                                    arena_alignment;
    const draft_buffers b(p, base);
    const std::int32_t bucket =
        c.buckets.empty() ? p.config.buckets[rng() % p.config.buckets.size()] : c.buckets[0];
    const extend_view v = b.extend(bucket);
    ASSERT_EQ(v.bucket, bucket);
    ASSERT_EQ(v.extend_tokens, W);
    for (int i = 0; i < extend_field_count; ++i) {
      const auto* want_at =
          e.field[i] == 0 ? nullptr : static_cast<unsigned char*>(base) + e.field[i];
      ASSERT_EQ(reinterpret_cast<unsigned char*>(extend_field(v, i)), want_at) << i;
    }
    ASSERT_EQ(v.page_capacity, fa3 ? cols : 0);
    ASSERT_EQ(v.page_stride, fa3 ? cols : 0);
    ASSERT_EQ(v.prefix_kv_capacity, csr ? bucket * M : 0);
    ASSERT_EQ(v.full_kv_capacity, csr ? bucket * (M + W) : 0);
    ASSERT_EQ(reinterpret_cast<unsigned char*>(v.accept_len),
              static_cast<unsigned char*>(base) + e.accept_len);
    ASSERT_EQ(v.guard, b.guards() + e.guard_base);
    ASSERT_EQ(v.seq_len, b.seq_len());
    ASSERT_EQ(v.req_pool_index, b.req_pool_index());
    ASSERT_EQ(v.real_batch, b.real_batch());
  }
}

draft_config engine_config() {
  draft_config c;
  c.max_batch = 256;
  c.topk = 8;
  c.num_steps = 5;
  c.page_size = 16;
  c.max_context_len = 131072;
  c.pool_rows = 257;
  c.kv_slots = std::int64_t{1} << 26;
  c.formats = metadata_formats::both;
  c.verify_tokens = 8;
  c.draft_extend = true;
  return c;
}

TEST(PlanExtend, TheReportShowsTheSectionAgainstTheEnginesReservations) {
  // Engine scale, the figure: bucket 256, W 8, 128k context, page size 16.
  const plan p = make_plan(engine_config());
  const plan_layout::extend_section& e = p.layout.extend;
  // ceil((131072 + 8) / 16) = 8193 columns against SGLang's ceil(131072 / 16) = 8192.
  EXPECT_EQ(e.page_capacity, 8193);
  EXPECT_EQ(e.prefix_kv_capacity, 256LL * 131072);
  EXPECT_EQ(e.full_kv_capacity, 256LL * 131080);
  // SGLang: 256 * 8 * 131072 = 268435456 entries: int64 2 GiB, int32 1 GiB + a 256 MiB mask.
  EXPECT_EQ(p.engine_extend_triton_bytes, 2147483648u);
  EXPECT_EQ(p.engine_extend_flashinfer_bytes, 1073741824u + 268435456u);
  const std::string line = p.extend_report_line();
  std::size_t bytes = 0;
  for (const buffer_spec& b : p.buffers) bytes += b.name.rfind("extend.", 0) == 0 ? b.bytes : 0;
  EXPECT_NE(line.find("extend section (W = 8, bucket 256, M 131072): " + std::to_string(bytes) +
                      " bytes in 17 buffers, " + std::to_string(p.our_extend_bytes) +
                      " with their alignment"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("fa3 page table 256 x 8193 (engine 256 x 8192, 1 column short at the "
                      "context edge); prefix kv_indices 33554432, full kv_indices 33556480 "
                      "(268443648 bytes); engine reservations: triton kv_indices 2147483648 "
                      "bytes (16.0x), flashinfer kv_indices and mask 1342177280 bytes (10.0x)"),
            std::string::npos)
      << line;
  EXPECT_NE(p.report_text().find(line), std::string::npos);
  EXPECT_NE(p.report_json().find("\"extend\":{\"extend_tokens\":8,\"tokens\":true,\"fa3\":true,"
                                 "\"prefix\":true,\"full\":true,\"page_capacity\":8193,"
                                 "\"prefix_kv_capacity\":33554432,\"full_kv_capacity\":33556480,"
                                 "\"bytes\":" +
                                 std::to_string(p.our_extend_bytes) +
                                 ",\"engine_fa3_bytes\":8388608,\"engine_triton_bytes\":"
                                 "2147483648,\"engine_flashinfer_bytes\":1342177280"),
            std::string::npos)
      << p.report_json();
  draft_config off = engine_config();
  off.draft_extend = false;
  EXPECT_EQ(make_plan(off).extend_report_line(), "");
  EXPECT_EQ(make_plan(off).report_json().find("\"extend\""), std::string::npos);
}

void expect_refused(const draft_config& c, const std::string& field, const std::string& message) {
  try {
    (void)make_plan(c);
    ADD_FAILURE() << "accepted: " << message;
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), field);
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(PlanExtend, DraftExtendIsRefusedByNameWithoutItsWindow) {
  draft_config c = engine_config();
  c.verify_tokens = 0;
  expect_refused(c, "draft_extend",
                 "true with verify_tokens 0: the draft-extend window is the "
                 "verify tree's W tokens");
  // Past int32, the verify mask's B * W * (M + W) cells are refused first: they bound the full
  // layout's B * (M + W) entries (plan_extend.cpp relies on it).
  c = engine_config();
  c.formats = metadata_formats::fa3;  // the CSR step capacity is refused before verify's mask
  c.verify_tokens = 1;
  c.max_context_len = 1 << 23;
  expect_refused(c, "verify_tokens", "mask cells exceeds the int32 mask_indptr limit");
  // A buffer access on a plan without the section names the field.
  draft_config off = engine_config();
  off.draft_extend = false;
  off.max_context_len = 64;
  const plan q = make_plan(off);
  std::vector<unsigned char> arena(q.total_bytes + arena_alignment);
  void* base = arena.data() + (arena_alignment -
                               reinterpret_cast<std::uintptr_t>(arena.data()) % arena_alignment) %
                                  arena_alignment;
  const draft_buffers b(q, base);
  try {
    (void)b.extend(1);
    ADD_FAILURE() << "a plan without the section gave a view";
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "draft_extend");
  }
}

}  // namespace
}  // namespace specgraph::testing
