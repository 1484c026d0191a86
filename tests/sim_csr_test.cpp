// The main job's CSR attention path (issue 19 item 5): the simulated engine's ragged decode over
// the kv_indptr / kv_indices the library's ops write, against the same float64 dense reference
// as the FA3 path; with both formats, the two paths against each other. The CSR buffers are
// poisoned before the first round, so a step reading a cell its op did not write fails.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "tests/test_support.hpp"
#include "tools/sim/sim_engine.hpp"
#include "tools/sim/sim_kernels.hpp"

namespace specgraph::testing {
namespace {

struct csr_case {
  const char* name;
  std::int32_t topk, page_size, steps, max_context;
  metadata_formats format;
  bool device_steps, csr_int64;
  // slot_stride - num_steps: the engine's rows and branch regions S = num_steps + this wide
  // (SGLang: S - 1 draft forwards over S slots per branch).
  std::int32_t extra_slots = 0;
};

const csr_case cases[] = {
    {"csr topk 3 ps 8", 3, 8, 4, 80, metadata_formats::csr, false, false},
    {"both topk 3 ps 8", 3, 8, 4, 80, metadata_formats::both, false, false},
    {"both topk 1 ps 1", 1, 1, 3, 40, metadata_formats::both, false, false},
    {"both topk 4 ps 16 int64", 4, 16, 5, 100, metadata_formats::both, false, true},
    {"csr topk 2 ps 4 device steps", 2, 4, 6, 30, metadata_formats::csr, true, false},
    {"both topk 5 ps 2 device steps int64", 5, 2, 3, 50, metadata_formats::both, true, true},
    {"both topk 3 ps 4 slot_stride +1", 3, 4, 3, 60, metadata_formats::both, false, false, 1},
    {"csr topk 2 ps 1 slot_stride +2 device steps", 2, 1, 4, 40, metadata_formats::csr, true, false,
     2},
    {"csr topk 4 ps 16 slot_stride +1 int64", 4, 16, 4, 90, metadata_formats::csr, false, true, 1},
};

sim::sim_options options_for(const csr_case& c, std::uint64_t seed) {
  sim::sim_options o;
  o.max_batch = 6;
  o.topk = c.topk;
  o.num_steps = c.steps;
  o.page_size = c.page_size;
  o.heads = 2;
  o.head_dim = 16;
  o.max_context = c.max_context;
  o.rounds = 10;
  o.seed = seed;
  o.format = c.format;
  o.device_steps = c.device_steps;
  o.csr_int64 = c.csr_int64;
  if (c.extra_slots > 0) o.slot_stride = c.steps + c.extra_slots;
  o.verify = sim::sim_options::verify_mode::all;
  return o;
}

// Every CSR cell of the plan's arena set to a valid but wrong value: kv_indptr 1 (every row
// empty: output 0), kv_indices slot 1 (a real token of some request, not the row's).
void poison_csr(executor& ex, const draft_buffers& b) {
  const plan& p = b.plan();
  const std::size_t indptr_cells =
      static_cast<std::size_t>(p.config.num_steps) * (static_cast<std::size_t>(p.max_rows()) + 1);
  const std::vector<std::int32_t> ones(indptr_cells, 1);
  ex.copy_to_device(b.csr_kv_indptr(), ones.data(), ones.size() * sizeof(std::int32_t));
  for (std::int32_t s = 0; s < p.config.num_steps; ++s) {
    const std::size_t n =
        static_cast<std::size_t>(p.layout.csr_capacity[static_cast<std::size_t>(s)]);
    if (p.config.csr_int64) {
      const std::vector<std::int64_t> slots(n, 1);
      ex.copy_to_device(b.csr_kv_indices(s), slots.data(), n * sizeof(std::int64_t));
    } else {
      const std::vector<std::int32_t> slots(n, 1);
      ex.copy_to_device(b.csr_kv_indices(s), slots.data(), n * sizeof(std::int32_t));
    }
  }
  ex.synchronize();
}

class SimCsr : public ExecutorTest {};

// Each format, topk 1..5, page sizes 1..16, int32 and int64 indices, per-step graphs and the
// device step counter: every real output of every round verifies, on a poisoned arena.
TEST_P(SimCsr, EachFormatVerifiesOnAPoisonedArena) {
  for (const csr_case& c : cases) {
    const std::uint64_t seed = test_seed();
    SCOPED_TRACE(std::string(c.name) + ", seed " + std::to_string(seed));
    sim::sim_options o = options_for(c, seed);
    o.executor = GetParam();
    sim::sim_engine engine(*ex, o);
    const plan& p = engine.runtime().plan();
    ASSERT_EQ(p.config.formats, metadata_formats::both);  // draft_runtime runs no csr-only plan
    // The rows hold the longest prefix and every branch's region, laid out from the S =
    // slot_stride slots per branch (docs/csr.md section 1).
    const std::int32_t S = c.steps + c.extra_slots;
    const std::int32_t nnp = (c.page_size - 1 + S + c.page_size - 1) / c.page_size;
    // And the verify step's tree tokens after the longest prefix (docs/verify.md section 1).
    EXPECT_EQ(p.config.max_context_len,
              std::max(c.max_context + (c.topk - 1) * c.page_size * nnp + c.steps,
                       c.max_context + sim::resolved_verify_tokens(o)));
    engine.capture();
    poison_csr(*ex, engine.runtime().buffers());
    const sim::run_report r = engine.run();
    std::int64_t outputs = 0;
    for (const sim::round_record& rr : r.rounds) outputs += rr.depth * rr.batch * c.topk * 2;
    EXPECT_EQ(r.verified_rounds, 10);
    EXPECT_EQ(r.verified_outputs, outputs);
    EXPECT_GT(r.max_relative_error_csr, 0.0);
    EXPECT_LE(r.max_relative_error_csr, 1e-5);
    if (c.format == metadata_formats::both) {
      EXPECT_GT(r.max_relative_error_fa3, 0.0);
      EXPECT_EQ(r.agreement_rounds, 10);
      EXPECT_EQ(r.agreement_outputs, outputs);
      EXPECT_LE(r.max_relative_difference, 1e-5);
      EXPECT_LE(r.max_abs_difference, 1e-5);
    } else {
      EXPECT_EQ(r.max_relative_error_fa3, 0.0);  // the fa3 path did not run
      EXPECT_EQ(r.agreement_rounds, 0);
    }
  }
}

// A wrong draft position in req_to_token (read by the CSR indices, not by the FA3 tables) fails
// the csr path's verification at step 1 of request 0's first branch, naming the path.
TEST_P(SimCsr, AWrongDraftPositionFailsTheCsrPathNamingIt) {
  sim::sim_options o = options_for(cases[1], 13);
  sim::sim_engine engine(*ex, o);
  engine.capture();
  engine.corrupt_draft_position_at_round(1);
  sim::run_report report;
  report.steps.resize(4);
  engine.run_round(0, 6, 4, true, report);
  try {
    engine.run_round(1, 6, 4, true, report);
    FAIL() << "verification should have failed";
  } catch (const sim::verification_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("round 1, step 1, bucket 6, row 0 (request 0, branch 0), head 0 (csr "
                        "path): relative error"),
              std::string::npos)
        << what;
  }
  engine.run_round(2, 6, 4, true, report);  // the next round rewrites the positions
  EXPECT_EQ(report.verified_rounds, 2);
}

// In a round not verified against the reference, format both still compares the two paths: the
// same wrong position is caught as a disagreement.
TEST_P(SimCsr, TheTwoPathsAreComparedOnRoundsNotVerified) {
  sim::sim_options o = options_for(cases[1], 17);
  o.verify = sim::sim_options::verify_mode::sample;
  sim::sim_engine engine(*ex, o);
  engine.capture();
  engine.corrupt_draft_position_at_round(1);
  sim::run_report report;
  report.steps.resize(4);
  engine.run_round(0, 3, 4, true, report);
  try {
    engine.run_round(1, 3, 4, false, report);
    FAIL() << "the paths should have disagreed";
  } catch (const sim::verification_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("fa3 and csr paths disagree: round 1, step 1, bucket 3, row 0 "),
              std::string::npos)
        << what;
  }
  EXPECT_EQ(report.agreement_rounds, 1);
}

SPECGRAPH_INSTANTIATE_EXECUTORS(SimCsr);

// With the csr path too, every byte the simulated engine allocates (the csr output, the wider
// req_to_token rows) is defined before the first round (verification copies whole steps back).
TEST(SimCsrMemory, EveryAllocationIsWrittenBeforeTheFirstRound) {
  write_tracking_executor ex(make_host_executor());
  sim::sim_engine engine(ex, options_for(cases[1], 3));
  EXPECT_EQ(ex.unwritten(), std::vector<std::string>{});
}

// ---- the kernel on its own: hand-made CSR steps, a dense reference computed here -----------
TEST(SimKernels, CsrAttentionMatchesDenseReference) {
  std::mt19937_64 rng(test_seed());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::int32_t heads = 2, dim = 8, slots = 64, hd = heads * dim, rows = 3, steps = 2;
  std::vector<float> k(static_cast<std::size_t>(slots * hd)), v(k.size()),
      q(static_cast<std::size_t>(rows * steps * hd));
  for (auto* vec : {&k, &v, &q})
    for (auto& x : *vec) x = u(rng);
  // Step 0: rows of 3, 0 and 2 slots; step 1: 4, 1, 3 (rows grow by one entry, as draft steps
  // do). The indptr rows are 5 wide (one spare cell, poisoned); step 1's indices start 16 cells
  // after step 0's, the gap poisoned.
  const std::vector<std::int32_t> indptr{0, 3, 3, 5, -7, 0, 4, 5, 8, -7};
  std::vector<std::int64_t> indices(32, 63);
  const std::vector<std::vector<std::int64_t>> want_slots[steps] = {
      {{40, 2, 17}, {}, {9, 33}}, {{40, 2, 17, 5}, {61}, {9, 33, 0}}};
  for (std::int32_t s = 0; s < steps; ++s) {
    std::size_t at = static_cast<std::size_t>(16 * s);
    for (const auto& row : want_slots[s])
      for (const std::int64_t slot : row) indices[at++] = slot;
  }
  const std::vector<std::int32_t> narrow(indices.begin(), indices.end());
  for (const bool wide : {false, true}) {
    for (std::int32_t s = 0; s < steps; ++s) {
      // Odd cases: the step from the device step counter (step field wrong on purpose).
      const bool counter = (s + (wide ? 1 : 0)) % 2 == 1;
      SCOPED_TRACE(std::string(wide ? "int64" : "int32") + ", step " + std::to_string(s) +
                   (counter ? ", device step counter" : ""));
      std::vector<float> o(static_cast<std::size_t>(steps * rows * hd), -5.0f);
      sim::csr_attention_kernel::params p{};
      p.q = q.data();
      p.steps = steps;
      p.step = counter ? 1 - s : s;
      p.device_step = counter ? &s : nullptr;
      p.heads = heads;
      p.head_dim = dim;
      p.scale = 0.5f;
      p.k_pool = k.data();
      p.v_pool = v.data();
      p.kv_indptr = indptr.data();
      p.indptr_stride = 5;
      if (wide) {
        p.indices_i64 = indices.data();
      } else {
        p.indices_i32 = narrow.data();
      }
      p.indices_offset[0] = 0;
      p.indices_offset[1] = 16;
      p.o = o.data();
      p.out_step_elems = rows * hd;
      host_run_rows<sim::csr_attention_kernel>(&p, rows * heads);
      for (std::int32_t row = 0; row < rows; ++row) {
        const auto& tokens = want_slots[s][static_cast<std::size_t>(row)];
        for (std::int32_t h = 0; h < heads; ++h) {
          std::vector<double> scores, ref(static_cast<std::size_t>(dim), 0.0);
          for (const std::int64_t slot : tokens) {
            double dot = 0;
            for (std::int32_t d = 0; d < dim; ++d)
              dot += static_cast<double>(
                         q[static_cast<std::size_t>((row * steps + s) * hd + h * dim + d)]) *
                     k[static_cast<std::size_t>(slot * hd + h * dim + d)];
            scores.push_back(dot * 0.5);
          }
          const double m = scores.empty() ? 0.0 : *std::max_element(scores.begin(), scores.end());
          double l = 0;
          for (std::size_t i = 0; i < tokens.size(); ++i) {
            const double w = std::exp(scores[i] - m);
            l += w;
            for (std::int32_t d = 0; d < dim; ++d)
              ref[static_cast<std::size_t>(d)] +=
                  w * v[static_cast<std::size_t>(tokens[i] * hd + h * dim + d)];
          }
          for (std::int32_t d = 0; d < dim; ++d) {
            const float got = o[static_cast<std::size_t>(s * rows * hd + row * hd + h * dim + d)];
            // An empty row writes 0.
            EXPECT_NEAR(got, l > 0 ? ref[static_cast<std::size_t>(d)] / l : 0.0, 1e-5)
                << "row " << row << " head " << h << " d " << d;
          }
        }
      }
      // Only the step's slice is written.
      const std::int32_t other = 1 - s;
      for (std::int32_t i = 0; i < rows * hd; ++i)
        EXPECT_EQ(o[static_cast<std::size_t>(other * rows * hd + i)], -5.0f);
    }
  }
}

}  // namespace
}  // namespace specgraph::testing
