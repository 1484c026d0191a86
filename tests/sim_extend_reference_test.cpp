// The draft-extend forward's float64 reference (tools/sim/sim_extend_reference.hpp) against
// values worked by hand and against the spec's causal rule (query j of the window sees keys
// [0, seq_len + j], draft-extend.md section 1): a key past a query's edge changes nothing of it,
// the key at its edge changes it, and heads do not mix.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tools/sim/sim_extend_reference.hpp"

namespace specgraph::sim {
namespace {

TEST(SimExtendReference, OneKeyGivesItsValue) {
  const std::vector<float> q = {0.3f, -2.0f}, k = {1.5f, 0.25f}, v = {-4.0f, 9.0f};
  extend_reference_input in{1, 2, 0, 1, 0.7, nullptr, nullptr, q.data(), k.data(), v.data()};
  std::vector<double> out;
  extend_reference(in, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], -4.0);
  EXPECT_EQ(out[1], 9.0);
}

TEST(SimExtendReference, PrefixAndWindowWeightsByHand) {
  // scale 1, q 1: scores 0 (prefix key) and ln 3 (window key): weights 1/4 and 3/4.
  const float l3 = static_cast<float>(std::log(3.0));
  const std::vector<float> pk = {0.0f}, pv = {4.0f}, q = {1.0f}, k = {l3}, v = {8.0f};
  extend_reference_input in{1, 1, 1, 1, 1.0, pk.data(), pv.data(), q.data(), k.data(), v.data()};
  std::vector<double> out;
  extend_reference(in, out);
  ASSERT_EQ(out.size(), 1u);
  const double e = std::exp(static_cast<double>(l3));
  EXPECT_NEAR(out[0], (4.0 + 8.0 * e) / (1.0 + e), 1e-12);
  EXPECT_NEAR(out[0], 7.0, 1e-6);
}

TEST(SimExtendReference, CausalEdgeAndHeadsByPerturbation) {
  std::mt19937_64 rng(30);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int trial = 0; trial < 50; ++trial) {
    const std::int32_t heads = 1 + static_cast<std::int32_t>(rng() % 3), dim = 4;
    const std::int32_t seq = static_cast<std::int32_t>(rng() % 6),
                       W = 1 + static_cast<std::int32_t>(rng() % 5);
    const std::size_t hd = static_cast<std::size_t>(heads) * dim;
    std::vector<float> pk(seq * hd), pv(seq * hd), q(W * hd), k(W * hd), v(W * hd);
    for (auto* x : {&pk, &pv, &q, &k, &v}) {
      for (float& f : *x) f = u(rng);
    }
    extend_reference_input in{heads,     dim,       seq,      W,        0.5,
                              pk.data(), pv.data(), q.data(), k.data(), v.data()};
    std::vector<double> base, moved;
    extend_reference(in, base);
    ASSERT_EQ(base.size(), W * hd);
    // Window token e's value changed in head 0: queries j < e unchanged, j >= e changed (head 0
    // only; the other heads unchanged everywhere).
    const std::size_t e = rng() % static_cast<std::size_t>(W);
    std::vector<float> v2 = v;
    for (std::int32_t d = 0; d < dim; ++d) v2[e * hd + d] += 5.0f;
    in.v = v2.data();
    extend_reference(in, moved);
    for (std::size_t j = 0; j < static_cast<std::size_t>(W); ++j) {
      for (std::size_t c = 0; c < hd; ++c) {
        const bool may_change = j >= e && c < static_cast<std::size_t>(dim);
        if (!may_change) {
          EXPECT_EQ(moved[j * hd + c], base[j * hd + c]) << "trial " << trial << " j " << j;
        }
      }
      if (j >= e) {
        double diff = 0;
        for (std::int32_t d = 0; d < dim; ++d)
          diff += std::abs(moved[j * hd + d] - base[j * hd + d]);
        EXPECT_GT(diff, 0.0) << "trial " << trial << ": query " << j << " misses key " << e;
      }
    }
  }
}

TEST(SimExtendReference, RangeErrorsNameTheField) {
  const std::vector<float> x = {1.0f};
  extend_reference_input in{1, 1, 0, 0, 1.0, nullptr, nullptr, x.data(), x.data(), x.data()};
  std::vector<double> out;
  try {
    extend_reference(in, out);
    FAIL() << "window 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "extend_reference: window 0 must be >= 1");
  }
  in.window = 1;
  in.seq_len = 2;
  EXPECT_THROW(extend_reference(in, out), std::invalid_argument);  // no prefix vectors
}

}  // namespace
}  // namespace specgraph::sim
