// Plans holding the CSR draft-decode indices (docs/csr.md): per step exactly
// C_s = max_rows * (max_context_len + s + 1) entries, beside or instead of the FA3 tables, and the
// report against today's engine sizing (num_steps x max_bs * topk * max_context_len).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/plan.hpp"
#include "tests/test_support.hpp"
#include "tools/json.hpp"
#include "tools/plan_command.hpp"

namespace specgraph::testing {
namespace {

draft_config config(std::int32_t batch, std::int32_t topk, std::int32_t steps, std::int32_t ctx,
                    metadata_formats formats) {
  draft_config c;
  c.max_batch = batch;
  c.topk = topk;
  c.num_steps = steps;
  c.page_size = 16;
  c.max_context_len = ctx;
  c.pool_rows = batch + 1;
  c.kv_slots = 1 << 24;
  c.formats = formats;
  return c;
}

bool holds(const plan& p, const std::string& name) {
  for (const buffer_spec& b : p.buffers) {
    if (b.name == name) return true;
  }
  return false;
}

// The format's own sizing example: B = 8, topk = 8, num_steps = 5, max_context_len = 4096.
TEST(PlanCsr, SpecSizingExample) {
  const plan p = make_plan(config(8, 8, 5, 4096, metadata_formats::both));
  ASSERT_EQ(p.layout.csr_capacity,
            (std::vector<std::int64_t>{262208, 262272, 262336, 262400, 262464}));
  EXPECT_EQ(p.our_csr_indices_bytes, std::size_t{1311680} * 4);
  EXPECT_EQ(p.today.csr_indices_bytes, std::size_t{5} * 262144 * 4);
  EXPECT_NE(p.report_text().find("262208 .. 262464 entries per step, 5246720 bytes"),
            std::string::npos)
      << p.report_text();
}

// Random configurations: the CSR buffers are exactly the formula's, in the right dtype, present
// only when the formats say so, and the FA3 tables only when they say so.
TEST(PlanCsr, CapacitiesAndBuffersFollowTheFormats) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 300; ++i) {
    const auto formats = static_cast<metadata_formats>(rng() % 3);
    draft_config c =
        config(static_cast<std::int32_t>(1 + rng() % 64), static_cast<std::int32_t>(1 + rng() % 8),
               static_cast<std::int32_t>(1 + rng() % 8),
               static_cast<std::int32_t>(1 + rng() % 5000), formats);
    c.csr_int64 = rng() % 2 == 0;
    c.sparse.reset();
    const plan p = make_plan(c);
    const bool csr = formats != metadata_formats::fa3, fa3 = formats != metadata_formats::csr;
    const std::int64_t rows = static_cast<std::int64_t>(c.max_batch) * c.topk;
    ASSERT_EQ(p.layout.csr_kv_indices.size(), csr ? static_cast<std::size_t>(c.num_steps) : 0u);
    ASSERT_EQ(holds(p, "prefix.page_table"), fa3);
    ASSERT_EQ(holds(p, "expand.page_table"), fa3);
    ASSERT_EQ(p.layout.has_fa3, fa3);
    std::size_t bytes = 0;
    for (std::int32_t s = 0; csr && s < c.num_steps; ++s) {
      const buffer_spec& b = p.find("csr.kv_indices", s);
      const std::int64_t want = rows * (c.max_context_len + s + 1);
      ASSERT_EQ(b.shape, (std::vector<std::int64_t>{want}));
      ASSERT_EQ(b.type, c.csr_int64 ? dtype::int64 : dtype::int32);
      ASSERT_EQ(p.layout.csr_capacity[static_cast<std::size_t>(s)], want);
      ASSERT_EQ(p.layout.csr_kv_indices[static_cast<std::size_t>(s)], b.offset);
      bytes += b.bytes;
    }
    ASSERT_EQ(p.our_csr_indices_bytes, bytes);
    if (csr) {
      ASSERT_EQ(p.find("csr.kv_indptr").shape, (std::vector<std::int64_t>{c.num_steps, rows + 1}));
      ASSERT_EQ(p.find("csr.scratch").shape, (std::vector<std::int64_t>{3 * c.max_batch}));
    }
    ASSERT_EQ(p.today.csr_indices_bytes,
              csr ? static_cast<std::size_t>(c.num_steps * rows * c.max_context_len *
                                             (c.csr_int64 ? 8 : 4))
                  : 0u);
    // ... and the last word, round.order (docs/metadata.md section 11).
    ASSERT_EQ(p.layout.guard_count, 2 + c.num_steps + (csr ? c.num_steps : 0) + 1);
    ASSERT_EQ(p.layout.guard_order, p.layout.guard_count - 1);
    ASSERT_EQ(p.layout.guard_csr(0), 2 + c.num_steps);
  }
}

TEST(PlanCsr, RefusesCapacitiesBeyondInt32AndUnknownFormats) {
  expect_invalid([] { make_plan(config(256, 8, 5, 1 << 20, metadata_formats::csr)); },
                 "max_context_len", "exceeds the int32 kv_indptr limit 2147483647");
  make_plan(config(256, 8, 5, 1 << 20, metadata_formats::fa3));  // FA3 alone has no such limit
  expect_invalid([] { make_plan(config(8, 1, 1, 64, static_cast<metadata_formats>(3))); },
                 "formats", "3 exceeds the last format (both = 2) 2");
}

TEST(PlanCsr, CsrOnlyBuffersHaveNoFa3Tables) {
  const plan p = make_plan(config(4, 2, 3, 64, metadata_formats::csr));
  void* base = std::aligned_alloc(arena_alignment, p.total_bytes);
  ASSERT_NE(base, nullptr);
  const draft_buffers b(p, base);
  expect_invalid([&] { b.expand_page_table(0); }, "formats", "no FA3 expand tables");
  EXPECT_EQ(b.view(4, 1).expand_page_table, nullptr);
  EXPECT_EQ(b.view(4, 1).prefix_page_table, nullptr);
  std::free(base);
}

// device_steps: one kv_indices buffer, a row per step as wide as the widest step, so the kernel
// that reads the step on the device finds step s at s * stride; the capacities stay C_s.
TEST(PlanCsr, DeviceStepsHoldEveryStepAtOneStride) {
  for (const bool int64 : {false, true}) {
    draft_config c = config(6, 3, 4, 100, metadata_formats::both);
    c.device_steps = true;
    c.csr_int64 = int64;
    const plan p = make_plan(c);
    const std::int64_t rows = 18, widest = rows * (100 + 4);
    const buffer_spec& b = p.find("csr.kv_indices");
    ASSERT_EQ(b.shape, (std::vector<std::int64_t>{4, widest}));
    EXPECT_EQ(p.layout.csr_kv_indices_stride, widest);
    EXPECT_EQ(p.our_csr_indices_bytes, static_cast<std::size_t>(4 * widest * (int64 ? 8 : 4)));
    for (std::int32_t s = 0; s < 4; ++s) {
      EXPECT_EQ(p.layout.csr_capacity[static_cast<std::size_t>(s)], rows * (100 + s + 1));
      EXPECT_EQ(p.layout.csr_kv_indices[static_cast<std::size_t>(s)],
                b.offset + static_cast<std::size_t>(s * widest * (int64 ? 8 : 4)));
    }
    const tools::json doc = tools::json::parse(p.report_json());
    EXPECT_EQ(tools::as_int(doc.members.at("csr").members.at("kv_indices_stride"), "s"), widest);
    c.device_steps = false;
    EXPECT_EQ(make_plan(c).layout.csr_kv_indices_stride, 0) << "per-step: a buffer per step";
  }
}

TEST(PlanCsr, PlanCommandReportsCsrBesideEngineSizing) {
  std::ostringstream out, err;
  ASSERT_EQ(tools::plan_command({"--max-batch", "256", "--topk", "8", "--steps", "5",
                                 "--max-context", "131072", "--format", "csr", "--json"},
                                out, err),
            0)
      << err.str();
  const tools::json doc = tools::json::parse(out.str());
  const auto& csr = doc.members.at("csr").members;
  EXPECT_EQ(tools::as_int(csr.at("capacity").items[0], "c"), 2048LL * 131073);
  EXPECT_EQ(tools::as_int(csr.at("capacity").items[4], "c"), 2048LL * 131077);
  EXPECT_EQ(tools::as_int(csr.at("today_kv_indices_bytes"), "t"), 5LL * 2048 * 131072 * 4);
  EXPECT_EQ(doc.members.at("formats").text, "csr");
  std::ostringstream bad_out, bad_err;
  EXPECT_EQ(tools::plan_command({"--format", "flashinfer"}, bad_out, bad_err), 2);
  EXPECT_NE(bad_err.str().find("--format: 'flashinfer' is not one of fa3, csr, both"),
            std::string::npos)
      << bad_err.str();
}

}  // namespace
}  // namespace specgraph::testing
