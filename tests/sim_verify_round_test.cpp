// The main job's verify step (issue 21 item 4): over random configurations, the target's tree
// attention through the verify metadata matches the float64 reference that applies the tree mask
// by position, the two formats agree, the trees and the accepted paths match an independent
// selection and greedy walk written here, the accepted path grows the request for the next round,
// and every verify buffer, poisoned before the launch, holds exactly the cells the format defines.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/test_support.hpp"
#include "tests/verify_reference.hpp"
#include "tools/sim/sim_engine.hpp"

namespace specgraph::testing {
namespace {

// A random small configuration; format both and every round verified unless changed.
sim::sim_options random_options(std::mt19937_64& rng, std::uint64_t seed) {
  auto pick = [&](std::int32_t lo, std::int32_t hi) {
    return std::uniform_int_distribution<std::int32_t>(lo, hi)(rng);
  };
  sim::sim_options o;
  o.max_batch = pick(1, 6);
  o.topk = pick(1, 4);
  o.num_steps = pick(1, 5);
  const std::int32_t sizes[] = {1, 4, 16, 64};
  o.page_size = sizes[pick(0, 3)];
  o.heads = pick(1, 2);
  o.head_dim = 8 * pick(1, 2);
  o.max_context = pick(1, 90);
  o.depth = -1;  // random depth: the round's D is min(verify_tokens, 1 + topk * depth)
  o.rounds = 8;
  o.seed = seed;
  o.format = metadata_formats::both;
  o.verify = sim::sim_options::verify_mode::all;
  o.verify_tokens = pick(1, 1 + o.topk * o.num_steps);
  o.slot_stride = pick(0, 1) == 0 ? 0 : o.num_steps + pick(0, 3);  // wider out_cache_loc rows
  return o;
}

std::string describe(const sim::sim_options& o) {
  return "max_batch " + std::to_string(o.max_batch) + ", topk " + std::to_string(o.topk) +
         ", steps " + std::to_string(o.num_steps) + ", page " + std::to_string(o.page_size) +
         ", heads " + std::to_string(o.heads) + " x " + std::to_string(o.head_dim) + ", context " +
         std::to_string(o.max_context) + ", D " + std::to_string(o.verify_tokens) + ", seed " +
         std::to_string(o.seed);
}

class SimVerifyRound : public ExecutorTest {};

// Every round's verify forward, both paths, against the reference, and the paths against each
// other; the counts are those of the rounds that ran.
TEST_P(SimVerifyRound, RandomConfigsMatchTheReferenceAndBothFormatsAgree) {
  const std::uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  for (int c = 0; c < 6; ++c) {
    sim::sim_options o = random_options(rng, seed + static_cast<std::uint64_t>(c));
    o.executor = GetParam();
    SCOPED_TRACE(describe(o));
    sim::sim_engine engine(*ex, o);
    engine.capture();
    const sim::run_report r = engine.run();
    std::int64_t requests = 0, outputs = 0;
    for (const sim::round_record& rr : r.rounds) {
      requests += rr.batch;
      outputs += static_cast<std::int64_t>(rr.batch) *
                 std::min(o.verify_tokens, 1 + o.topk * rr.depth) * o.heads;
    }
    const sim::verify_stats& v = r.verify;
    EXPECT_EQ(v.steps, o.rounds);
    EXPECT_EQ(v.requests, requests);
    EXPECT_EQ(v.verified_rounds, o.rounds);
    EXPECT_EQ(v.verified_outputs, outputs);
    EXPECT_EQ(v.agreement_outputs, outputs);
    EXPECT_GT(v.max_relative_error_fa3 + v.max_relative_error_csr, 0.0);
    EXPECT_LE(v.max_relative_error_fa3, 1e-5);
    EXPECT_LE(v.max_relative_error_csr, 1e-5);
    EXPECT_LE(v.max_relative_difference, 1e-5);
    EXPECT_GE(v.accepted, 0);
    EXPECT_LE(v.accepted, requests * o.num_steps);
  }
}

// The tree, written from EAGLE's rule independently of sim_tree.hpp: the D - 1 best draft tokens
// by score (ties: earlier step, lower branch), in (step, branch) order, parent = the same
// branch's previous step or the root.
void expected_tree(const sim::verify_trace& t, std::int32_t r, std::vector<std::int32_t>& parent,
                   std::vector<std::int32_t>& token) {
  const std::int32_t k = t.topk, d = t.depth, D = t.tokens;
  const std::size_t base = static_cast<std::size_t>(r) * k * d;
  struct cand {
    double score;
    std::int32_t step, branch;
  };
  std::vector<cand> all;
  for (std::int32_t b = 0; b < k; ++b) {
    for (std::int32_t j = 0; j < d; ++j) {
      all.push_back({t.draft_score[base + static_cast<std::size_t>(b * d + j)], j, b});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const cand& a, const cand& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.step != b.step ? a.step < b.step : a.branch < b.branch;
  });
  all.resize(static_cast<std::size_t>(D - 1));
  std::sort(all.begin(), all.end(), [](const cand& a, const cand& b) {
    return a.step != b.step ? a.step < b.step : a.branch < b.branch;
  });
  parent.assign(1, -1);
  token.assign(1, t.root_token[static_cast<std::size_t>(r)]);
  for (const cand& c : all) {
    std::int32_t p = 0;
    for (std::size_t n = 0; n < parent.size() - 1 && c.step > 0; ++n) {
      if (all[n].branch == c.branch && all[n].step == c.step - 1)
        p = static_cast<std::int32_t>(n + 1);
    }
    parent.push_back(p);
    token.push_back(t.draft_token[base + static_cast<std::size_t>(c.branch * d + c.step)]);
  }
}

// Trees, masks and acceptance against an independent greedy walk over the float64 reference's
// logits (a request whose walk passes a decision closer than 1e-6 between the two best tokens is
// left out: float32 outputs may rank such a pair either way), and the growth of each request.
TEST_P(SimVerifyRound, TreesAndAcceptanceMatchAnIndependentWalkAndGrowTheRequests) {
  const std::uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  std::int64_t compared = 0, skipped = 0, accepted_total = 0, continued = 0;
  for (int c = 0; c < 4; ++c) {
    sim::sim_options o = random_options(rng, seed + static_cast<std::uint64_t>(c));
    o.executor = GetParam();
    o.trace_verify = true;
    o.replace_probability = 0;  // a pool row keeps its request unless it finishes
    o.format = c % 2 == 0 ? metadata_formats::fa3 : metadata_formats::csr;
    SCOPED_TRACE(describe(o));
    sim::sim_engine engine(*ex, o);
    engine.capture();
    sim::run_report report;
    report.steps.resize(static_cast<std::size_t>(o.num_steps));
    std::vector<std::int32_t> len_after(static_cast<std::size_t>(o.max_batch) + 1, -1);
    for (std::int32_t round = 0; round < 10; ++round) {
      const std::int32_t batch = 1 + static_cast<std::int32_t>(rng() % o.max_batch);
      const std::int32_t depth = 1 + static_cast<std::int32_t>(rng() % o.num_steps);
      engine.run_round(round, batch, depth, true, report);
      const sim::verify_trace& t = engine.last_verify();
      ASSERT_EQ(t.round, round);
      ASSERT_EQ(t.tokens, std::min(o.verify_tokens, 1 + o.topk * depth));
      const std::int32_t D = t.tokens, hd = o.heads * o.head_dim;
      std::size_t block = 0;
      for (std::int32_t r = 0; r < batch; ++r) {
        const std::size_t rs = static_cast<std::size_t>(r);
        std::vector<std::int32_t> parent, token;
        expected_tree(t, r, parent, token);
        ASSERT_EQ(parent, std::vector<std::int32_t>(t.tree_parent.begin() + rs * D,
                                                    t.tree_parent.begin() + (rs + 1) * D));
        ASSERT_EQ(token, std::vector<std::int32_t>(t.tree_token.begin() + rs * D,
                                                   t.tree_token.begin() + (rs + 1) * D));
        // The engine's mask block: prefix cells 1, tree cell (i, j) when j is i or above it.
        const std::int64_t seq = t.seq_len[rs], n = seq + D;
        for (std::int32_t i = 0; i < D; ++i) {
          for (std::int64_t col = 0; col < n; ++col) {
            bool want = col < seq;
            for (std::int32_t a = i; a >= 0 && !want; a = parent[static_cast<std::size_t>(a)]) {
              want = a == col - seq;
            }
            ASSERT_EQ(t.mask[block + static_cast<std::size_t>(i * n + col)], want ? 1 : 0);
          }
        }
        block += static_cast<std::size_t>(D * n);
        // The greedy walk over the reference's logits: bigram[token] + o . head.
        std::int32_t cur = 0, walked = 0;
        bool close = false;
        for (;;) {
          std::vector<double> logit(static_cast<std::size_t>(t.vocab));
          const double* out = t.reference.data() + (rs * D + static_cast<std::size_t>(cur)) * hd;
          for (std::int32_t v = 0; v < t.vocab; ++v) {
            double x = t.lm_bigram[static_cast<std::size_t>(
                token[static_cast<std::size_t>(cur)] * t.vocab + v)];
            for (std::int32_t e = 0; e < hd; ++e) {
              x += out[e] * t.lm_head[static_cast<std::size_t>(e * t.vocab + v)];
            }
            logit[static_cast<std::size_t>(v)] = x;
          }
          std::vector<double> sorted = logit;
          std::sort(sorted.rbegin(), sorted.rend());
          close = close || (sorted.size() > 1 && sorted[0] - sorted[1] < 1e-6);
          const auto best = static_cast<std::int32_t>(std::max_element(logit.begin(), logit.end()) -
                                                      logit.begin());
          std::int32_t next = -1;
          for (std::int32_t ch = 1; ch < D && next < 0; ++ch) {
            if (parent[static_cast<std::size_t>(ch)] == cur &&
                token[static_cast<std::size_t>(ch)] == best) {
              next = ch;
            }
          }
          if (next < 0) break;
          cur = next;
          ++walked;
        }
        if (close) {
          ++skipped;
        } else {
          ++compared;
          EXPECT_EQ(t.accepted[rs], walked) << "round " << round << ", request " << r;
        }
        accepted_total += t.accepted[rs];
        // seq_len grows by accepted + 1; the next round of the same pool row reads it.
        const std::int32_t row = t.pool_index[rs];
        if (len_after[static_cast<std::size_t>(row)] >= 0) {
          EXPECT_EQ(seq, len_after[static_cast<std::size_t>(row)]) << "pool row " << row;
          ++continued;
        }
        const std::int64_t grown = seq + t.accepted[rs] + 1;
        EXPECT_EQ(t.seq_len_after[rs], grown > o.max_context ? -1 : grown);
        len_after[static_cast<std::size_t>(row)] = t.seq_len_after[rs];
      }
    }
    EXPECT_EQ(report.verify.verified_rounds, 10);
  }
  EXPECT_GT(compared, 20 * skipped) << "too many near ties: " << skipped;
  EXPECT_GT(accepted_total, 0) << "no draft token was ever accepted";
  EXPECT_GT(continued, 0) << "no request was verified twice";
}

// Every verify buffer was poisoned before the launch: the cells the format defines for the
// bucket equal the independent reference of tests/verify_reference.hpp, every other cell keeps
// its poison.
TEST_P(SimVerifyRound, PoisonedVerifyTablesAreWrittenExactly) {
  const std::uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  for (int c = 0; c < 4; ++c) {
    sim::sim_options o = random_options(rng, seed + static_cast<std::uint64_t>(c));
    o.executor = GetParam();
    o.trace_verify = true;
    SCOPED_TRACE(describe(o));
    sim::sim_engine engine(*ex, o);
    engine.capture();
    sim::run_report report;
    report.steps.resize(static_cast<std::size_t>(o.num_steps));
    for (std::int32_t round = 0; round < 4; ++round) {
      const std::int32_t batch = 1 + static_cast<std::int32_t>(rng() % o.max_batch);
      engine.run_round(round, batch, o.num_steps, false, report);
      const sim::verify_trace& t = engine.last_verify();
      verify_case vc;
      vc.page_size = t.page_size;
      vc.draft_tokens = t.tokens;
      vc.max_seq_len = t.max_seq_len;
      vc.real_batch = t.batch;
      vc.pool_rows = t.pool_rows;
      vc.width = t.width;
      vc.req_to_token = t.req_to_token;
      vc.req_pool_index = t.pool_index;
      vc.seq_len = t.seq_len;
      vc.mask = t.mask;
      vc.prefix_capacity = t.prefix_capacity;
      vc.kv_capacity = t.kv_capacity;
      vc.packed_capacity = t.packed_capacity;
      vc.prefix_stride = t.prefix_stride;
      vc.expand_stride = t.expand_stride;
      const verify_expected want = verify_reference(vc);
      for (const auto& records : want.records) ASSERT_TRUE(records.empty());
      const std::size_t B = static_cast<std::size_t>(t.bucket),
                        D = static_cast<std::size_t>(t.tokens);
      auto expect_prefix = [&](const std::vector<std::int32_t>& got,
                               const std::vector<std::int32_t>& expect, const char* name) {
        ASSERT_GE(got.size(), expect.size()) << name;
        for (std::size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i], i < expect.size() ? expect[i] : sim::verify_poison)
              << name << " cell " << i;
        }
      };
      expect_prefix(t.prefix_table, want.prefix_table, "prefix page_table");
      expect_prefix(t.prefix_cache_seqlen, want.prefix_cache_seqlen, "prefix cache_seqlen");
      expect_prefix(t.prefix_cu_q, want.prefix_cu_q, "prefix cu_seqlens_q");
      expect_prefix(t.prefix_cu_k, want.prefix_cu_k, "prefix cu_seqlens_k");
      // The expand table's rows are expand_stride (the largest D) wide: columns past the
      // round's D keep their poison.
      std::vector<std::int32_t> expand;
      for (std::size_t e = 0; e < B * D; ++e) {
        for (std::size_t col = 0; col < static_cast<std::size_t>(t.expand_stride); ++col) {
          expand.push_back(col < D ? want.expand_table[e * D + col] : sim::verify_poison);
        }
      }
      expect_prefix(t.expand_table, expand, "expand page_table");
      expect_prefix(t.expand_cache_seqlen, want.expand_cache_seqlen, "expand cache_seqlen");
      expect_prefix(t.expand_cu_q, want.expand_cu_q, "expand cu_seqlens_q");
      expect_prefix(t.expand_cu_k, want.expand_cu_k, "expand cu_seqlens_k");
      expect_prefix(t.qo_indptr, want.qo_indptr, "qo_indptr");
      expect_prefix(t.kv_indptr, want.kv_indptr, "kv_indptr");
      expect_prefix(t.kv_last_page_len, want.kv_last_page_len, "kv_last_page_len");
      expect_prefix(t.mask_indptr, want.mask_indptr, "mask_indptr");
      expect_prefix(t.packed_indptr, want.packed_indptr, "packed_mask_indptr");
      expect_prefix(t.kv_indices, std::vector<std::int32_t>(want.kv_ids.begin(), want.kv_ids.end()),
                    "kv_indices");
      ASSERT_GE(t.packed.size(), want.packed.size());
      for (std::size_t i = 0; i < t.packed.size(); ++i) {
        ASSERT_EQ(t.packed[i], i < want.packed.size() ? want.packed[i] : sim::verify_poison_byte)
            << "packed mask byte " << i;
      }
    }
  }
}

// A cleared bit of the packed mask (query 1's root cell, request 0) changes what the csr path
// attends: the verification names the round, the verify step, the request, the token and path.
TEST_P(SimVerifyRound, ACorruptedPackedMaskFailsTheCsrPathNamingIt) {
  sim::sim_options o;
  o.executor = GetParam();
  o.max_batch = 3;
  o.topk = 2;
  o.num_steps = 3;
  o.page_size = 4;
  o.heads = 1;
  o.head_dim = 8;
  o.max_context = 30;
  o.format = metadata_formats::both;
  o.seed = test_seed();
  sim::sim_engine engine(*ex, o);
  engine.capture();
  engine.corrupt_packed_mask_at_round(1);
  sim::run_report report;
  report.steps.resize(3);
  engine.run_round(0, 3, 3, true, report);
  try {
    engine.run_round(1, 3, 3, true, report);
    FAIL() << "verification should have failed";
  } catch (const sim::verification_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("round 1, verify step (D 7), bucket 3, request 0 (pool row "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("), tree token 1, head 0 (csr path)"), std::string::npos) << what;
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(SimVerifyRound);

}  // namespace
}  // namespace specgraph::testing
