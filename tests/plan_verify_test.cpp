// The plan's verify section (draft_config::verify_tokens): every verify buffer exactly the
// formula's size for the largest bucket at seq_len <= max_context_len, laid out inside the
// section and apart from every other buffer, its guard words named, the report against the
// engines' mask reservation, and verify_tokens refused by name outside its range.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/verify_metadata.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

draft_config random_config(std::mt19937_64& rng) {
  draft_config c;
  c.max_batch = 1 + static_cast<std::int32_t>(rng() % 48);
  c.topk = 1 + static_cast<std::int32_t>(rng() % 8);
  c.num_steps = 1 + static_cast<std::int32_t>(rng() % 6);
  const std::int32_t sizes[] = {1, 4, 16, 64};
  c.page_size = sizes[rng() % 4];
  c.max_context_len = 1 + static_cast<std::int32_t>(rng() % 3000);
  c.pool_rows = c.max_batch + 1;
  c.kv_slots = std::int64_t{1} << 22;
  c.formats = static_cast<metadata_formats>(rng() % 3);
  c.device_steps = rng() % 2 == 0;
  c.verify_tokens = 1 + static_cast<std::int32_t>(rng() % 64);
  return c;
}

TEST(PlanVerify, EveryVerifyBufferHasTheFormulasSize) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int n = 0; n < property_cases(300); ++n) {
    const draft_config c = random_config(rng);
    const plan p = make_plan(c);
    const plan_layout::verify_section& v = p.layout.verify;
    const std::int64_t B = p.max_bucket(), D = c.verify_tokens, M = c.max_context_len;
    const bool fa3 = c.formats != metadata_formats::csr, fi = c.formats != metadata_formats::fa3;
    SCOPED_TRACE("B " + std::to_string(B) + " D " + std::to_string(D) + " M " + std::to_string(M) +
                 " ps " + std::to_string(c.page_size) + " formats " + to_string(c.formats));
    ASSERT_EQ(v.draft_tokens, D);
    ASSERT_EQ(v.fa3, fa3);
    ASSERT_EQ(v.flashinfer, fi);
    // name -> (offset in the typed layout, elements, bytes per element), written from the
    // formats' definitions (docs/verify.md section 6), not from plan_verify.cpp.
    struct row {
      const char* name;
      std::size_t offset;
      std::int64_t elements;
      std::size_t size;
    };
    const std::int64_t cols = (M + c.page_size - 1) / c.page_size;
    std::vector<row> want;
    if (fa3) {
      want.push_back({"verify.prefix.page_table", v.prefix_page_table, B * cols, 4});
      want.push_back({"verify.prefix.cache_seqlen", v.prefix_cache_seqlen, B, 4});
      want.push_back({"verify.prefix.cu_seqlens_q", v.prefix_cu_seqlens_q, B + 1, 4});
      want.push_back({"verify.prefix.cu_seqlens_k", v.prefix_cu_seqlens_k, B + 1, 4});
      want.push_back({"verify.expand.page_table", v.expand_page_table, B * D * D, 4});
      want.push_back({"verify.expand.cache_seqlen", v.expand_cache_seqlen, B * D, 4});
      want.push_back({"verify.expand.cu_seqlens_q", v.expand_cu_seqlens_q, B * D + 1, 4});
      want.push_back({"verify.expand.cu_seqlens_k", v.expand_cu_seqlens_k, B * D + 1, 4});
      ASSERT_EQ(v.prefix_capacity, cols);
    }
    if (fi) {
      want.push_back({"verify.qo_indptr", v.qo_indptr, B + 1, 4});
      want.push_back({"verify.kv_indptr", v.kv_indptr, B + 1, 4});
      want.push_back({"verify.kv_indices", v.kv_indices, B * (M + D), 4});
      want.push_back({"verify.kv_last_page_len", v.kv_last_page_len, B, 4});
      want.push_back({"verify.mask_indptr", v.mask_indptr, B + 1, 4});
      want.push_back({"verify.packed_mask", v.packed_mask, B * ((D * (M + D) + 7) / 8), 1});
      want.push_back({"verify.packed_mask_indptr", v.packed_mask_indptr, B + 1, 4});
      ASSERT_EQ(v.kv_indices_capacity, B * (M + D));
      ASSERT_EQ(v.packed_mask_capacity, B * ((D * (M + D) + 7) / 8));
    }
    want.push_back({"verify.scratch", v.scratch, 5 * B + 2 * B * D, 8});
    std::size_t named = 0;
    for (const buffer_spec& b : p.buffers) named += b.name.rfind("verify.", 0) == 0;
    ASSERT_EQ(named, want.size()) << "no other verify buffer";
    for (const row& r : want) {
      const buffer_spec& b = p.find(r.name);
      ASSERT_EQ(b.offset, r.offset) << r.name;
      ASSERT_EQ(b.bytes, static_cast<std::size_t>(r.elements) * r.size) << r.name;
      ASSERT_EQ(b.offset % arena_alignment, 0u) << r.name;
      ASSERT_GE(b.offset, v.begin) << r.name;
      ASSERT_LE(b.offset + b.bytes, v.end) << r.name;
    }
    // The section overlaps no other buffer, and every buffer fits the arena.
    for (const buffer_spec& b : p.buffers) {
      ASSERT_LE(b.offset + b.bytes, p.total_bytes) << b.name;
      if (b.name.rfind("verify.", 0) == 0) continue;
      ASSERT_TRUE(b.offset + b.bytes <= v.begin || b.offset >= v.end)
          << b.name << " [" << b.offset << ", " << b.offset + b.bytes << ") overlaps the section ["
          << v.begin << ", " << v.end << ")";
    }
    // Guard words: after every other site, three of them, named.
    draft_config without = c;
    without.verify_tokens = 0;
    const plan q = make_plan(without);
    ASSERT_EQ(p.layout.guard_count, q.layout.guard_count + verify_guard_count);
    ASSERT_EQ(v.guard_base, q.layout.guard_order);  // before the last word, round.order
    ASSERT_EQ(guard_site_of(p, v.guard_base).buffer, "verify (input, prefix.page_table)");
    ASSERT_EQ(guard_site_of(p, v.guard_base + 1).buffer, "verify.kv_indices");
    ASSERT_EQ(guard_site_of(p, v.guard_base + 2).buffer, "verify.packed_mask");
    // verify_tokens = 0: the same plan as before the field existed (no verify buffer at all).
    ASSERT_FALSE(q.layout.verify.enabled());
    ASSERT_EQ(q.our_verify_bytes, 0u);
    for (const buffer_spec& b : q.buffers) ASSERT_NE(b.name.rfind("verify.", 0), 0u) << b.name;
    // Every other buffer keeps its offset: the section is appended before the guards.
    for (std::size_t i = 0; i + 1 < q.buffers.size(); ++i) {
      ASSERT_EQ(p.buffers[i].name, q.buffers[i].name);
      ASSERT_EQ(p.buffers[i].offset, q.buffers[i].offset) << q.buffers[i].name;
    }
    ASSERT_EQ(p.engine_verify_mask_bytes, static_cast<std::size_t>(c.max_batch * D * M));
    ASSERT_EQ(p.engine_verify_kv_indices_bytes, static_cast<std::size_t>(c.max_batch * D * M * 4));
  }
}

TEST(PlanVerify, TheReportShowsTheSectionAgainstTheEnginesMask) {
  draft_config c;
  c.max_batch = 8;
  c.topk = 8;
  c.num_steps = 5;
  c.page_size = 16;
  c.max_context_len = 4096;
  c.pool_rows = 9;
  c.kv_slots = 1 << 24;
  c.formats = metadata_formats::both;
  c.verify_tokens = 64;
  const plan p = make_plan(c);
  // B 8, D 64, M 4096: the packed mask 8 x ceil(64 x 4160 / 8) = 266240 bytes against SGLang's
  // 8 x 64 x 4096 = 2097152 bytes (7.9x).
  EXPECT_EQ(p.layout.verify.packed_mask_capacity, 266240);
  const std::string line = p.verify_report_line();
  std::size_t bytes = 0;
  for (const buffer_spec& b : p.buffers) bytes += b.name.rfind("verify.", 0) == 0 ? b.bytes : 0;
  EXPECT_NE(line.find("verify section (D = 64, bucket 8, M 4096): " + std::to_string(bytes) +
                      " bytes in 16 buffers, " + std::to_string(p.our_verify_bytes) +
                      " with their alignment"),
            std::string::npos)
      << line;
  EXPECT_NE(
      line.find("fa3 prefix table 8 x 256, expand table 512 x 64; flashinfer kv_indices "
                "33280, packed mask 266240 bytes; engine mask reservation 8 x 64 x 4096 = "
                "2097152 bytes (7.9x the packed mask); engine kv_indices reservation 8 x 64 x "
                "4096 x 4 = 8388608 bytes (63.0x kv_indices)"),
      std::string::npos)
      << line;
  EXPECT_NE(p.report_text().find(line), std::string::npos);
  EXPECT_NE(
      p.report_json().find("\"verify\":{\"draft_tokens\":64,\"fa3\":true,\"flashinfer\":"
                           "true,\"prefix_capacity\":256,\"kv_indices_capacity\":33280,"
                           "\"packed_mask_capacity\":266240,\"bytes\":" +
                           std::to_string(p.our_verify_bytes) +
                           ",\"engine_mask_bytes\":2097152,\"engine_kv_indices_bytes\":8388608"),
      std::string::npos)
      << p.report_json();
  c.verify_tokens = 0;
  EXPECT_EQ(make_plan(c).verify_report_line(), "");
  EXPECT_EQ(make_plan(c).report_json().find("verify"), std::string::npos);
}

void expect_refused(const draft_config& c, const std::string& message) {
  try {
    (void)make_plan(c);
    ADD_FAILURE() << "accepted: " << message;
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "verify_tokens");
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(PlanVerify, VerifyTokensOutsideItsRangeAreRefusedByName) {
  draft_config c;
  c.max_batch = 8;
  c.topk = 2;
  c.num_steps = 2;
  c.page_size = 16;
  c.max_context_len = 4096;
  c.pool_rows = 9;
  c.kv_slots = 1 << 24;
  c.verify_tokens = -1;
  expect_refused(c, "-1 is outside [0, max_draft_tokens 1024]; pass the tree size D");
  c.verify_tokens = 1025;
  expect_refused(c, "1025 is outside [0, max_draft_tokens 1024]");
  c.verify_tokens = 1024;
  EXPECT_EQ(make_plan(c).layout.verify.draft_tokens, 1024);  // the limit itself is accepted
  // 256 x 1024 x (2^20 + 1024) cells do not fit int32 mask_indptr.
  c.max_batch = 256;
  c.pool_rows = 257;
  c.max_context_len = 1 << 20;
  expect_refused(c,
                 "mask cells exceeds the int32 mask_indptr limit 2147483647; lower "
                 "verify_tokens, max_batch or max_context_len");
}

}  // namespace
}  // namespace specgraph::testing
