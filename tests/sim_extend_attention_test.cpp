// The toy draft model's extend attention (tools/sim/sim_extend_kernels.hpp) through both layouts
// the draft-extend metadata writes, FA3 (C1: page table + cache_seqlen) and the CSR full layout
// (C2f: kv_indptr + kv_indices), and the prefix layout's two passes (C2p: the prefix's
// kv_indices, the window from the forward's own K/V, merged by log-sum-exp), against the float64
// reference by position (tools/sim/sim_extend_reference.hpp). The tables here are built by the test
// from the spec (draft-extend.md sections 2, 3 and 5) over a fragmented pool of random pages; the
// reference never sees them. Padded rows (L = 1 on page 0) give slot 0's value exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "tools/sim/sim_extend_kernels.hpp"
#include "tools/sim/sim_extend_reference.hpp"

namespace specgraph::sim {
namespace {

TEST(SimExtendAttention, BothLayoutsMatchTheReferenceByPosition) {
  std::mt19937_64 rng(3005);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  double worst = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const std::int32_t ps = std::vector<std::int32_t>{1, 2, 4, 16}[rng() % 4];
    const std::int32_t W = 1 + static_cast<std::int32_t>(rng() % 8);
    const std::int32_t heads = 2, dim = 8, hd = heads * dim;
    const std::int32_t bs = static_cast<std::int32_t>(rng() % 4);
    const std::int32_t B = bs + static_cast<std::int32_t>(rng() % 3);
    const std::int32_t pages_total = 64;
    std::vector<std::int32_t> free_pages(pages_total - 1);
    std::iota(free_pages.begin(), free_pages.end(), 1);  // page 0: the padded rows' dummy page
    std::shuffle(free_pages.begin(), free_pages.end(), rng);
    std::vector<float> k_pool(static_cast<std::size_t>(pages_total) * ps * hd),
        v_pool(k_pool.size());
    for (float& x : k_pool) x = u(rng);
    for (float& x : v_pool) x = u(rng);
    std::vector<std::int32_t> seq(B, 0), L(B, 1);
    std::vector<std::vector<std::int32_t>> pages(B);
    std::size_t next = 0;
    for (std::int32_t r = 0; r < bs; ++r) {
      seq[r] = static_cast<std::int32_t>(rng() % 20);
      L[r] = seq[r] + W;
      for (std::int32_t c = 0; c < (L[r] + ps - 1) / ps; ++c)
        pages[r].push_back(free_pages[next++]);
    }
    for (std::int32_t r = bs; r < B; ++r) pages[r] = {0};
    const std::int32_t cols = std::max<std::int32_t>(1, (20 + W + ps - 1) / ps);
    // FA3 table: each row's pages, the tail cleared (0); CSR full layout: slots of 0 .. L).
    std::vector<std::int32_t> table(static_cast<std::size_t>(B) * cols, 0), indptr(B + 1, 0),
        indices;
    for (std::int32_t r = 0; r < B; ++r) {
      std::copy(pages[r].begin(), pages[r].end(),
                table.begin() + static_cast<std::ptrdiff_t>(r) * cols);
      for (std::int32_t i = 0; i < L[r]; ++i) indices.push_back(pages[r][i / ps] * ps + i % ps);
      indptr[r + 1] = static_cast<std::int32_t>(indices.size());
    }
    std::vector<float> q(static_cast<std::size_t>(B) * W * hd);
    for (float& x : q) x = u(rng);
    // C2p: the prefix's slots only (padded rows none), the window's K/V as the forward's tensors
    // (copied from the pool at the window's slots: what the forward wrote there).
    std::vector<std::int32_t> pre_indptr(B + 1, 0), pre_indices;
    std::vector<float> win_k(q.size(), 0.0f), win_v(q.size(), 0.0f);
    for (std::int32_t r = 0; r < B; ++r) {
      for (std::int32_t i = 0; i < (r < bs ? seq[r] : 0); ++i) {
        pre_indices.push_back(pages[r][i / ps] * ps + i % ps);
      }
      pre_indptr[r + 1] = static_cast<std::int32_t>(pre_indices.size());
      for (std::int32_t j = 0; r < bs && j < W; ++j) {
        const std::int32_t i = seq[r] + j;
        const std::size_t s = static_cast<std::size_t>(pages[r][i / ps] * ps + i % ps) * hd;
        const std::size_t t = (static_cast<std::size_t>(r) * W + j) * hd;
        std::copy(k_pool.begin() + s, k_pool.begin() + s + hd, win_k.begin() + t);
        std::copy(v_pool.begin() + s, v_pool.begin() + s + hd, win_v.begin() + t);
      }
    }
    extend_attention_kernel::params p{q.data(),      W,       heads, dim, 0.35f,    k_pool.data(),
                                      v_pool.data(), nullptr, 0,     ps,  L.data(), nullptr,
                                      nullptr,       nullptr};
    std::vector<float> fa3(q.size(), NAN), csr(q.size(), NAN);
    const std::int64_t cells = static_cast<std::int64_t>(B) * W * heads;
    p.page_table = table.data();
    p.table_stride = cols;
    p.o = fa3.data();
    for (std::int64_t i = 0; i < cells; ++i) extend_attention_kernel::run_row(p, i);
    p.page_table = nullptr;
    p.kv_indptr = indptr.data();
    p.kv_indices = indices.data();
    p.o = csr.data();
    for (std::int64_t i = 0; i < cells; ++i) extend_attention_kernel::run_row(p, i);
    std::vector<float> o1(q.size()), o2(q.size()), prefix(q.size(), NAN);
    std::vector<float> l1(static_cast<std::size_t>(cells)), l2(l1.size()), lo(l1.size());
    extend_two_pass_kernel::params tp{q.data(),
                                      W,
                                      heads,
                                      dim,
                                      0.35f,
                                      true,
                                      k_pool.data(),
                                      v_pool.data(),
                                      pre_indptr.data(),
                                      pre_indices.data(),
                                      o1.data(),
                                      l1.data()};
    for (std::int64_t i = 0; i < cells; ++i) extend_two_pass_kernel::run_row(tp, i);
    tp.prefix = false;
    tp.k = win_k.data();
    tp.v = win_v.data();
    tp.o = o2.data();
    tp.lse = l2.data();
    for (std::int64_t i = 0; i < cells; ++i) extend_two_pass_kernel::run_row(tp, i);
    lse_merge_kernel::params mg{o1.data(),     l1.data(), o2.data(), l2.data(), heads, dim,
                                prefix.data(), lo.data(), nullptr,   0,         0};
    for (std::int64_t i = 0; i < cells; ++i) lse_merge_kernel::run_row(mg, i);
    for (std::int32_t r = 0; r < B; ++r) {
      const std::size_t base = static_cast<std::size_t>(r) * W * hd;
      if (r >= bs) {  // padded: one key, page 0's slot 0
        for (std::int32_t c = 0; c < W * hd; ++c) {
          EXPECT_FLOAT_EQ(fa3[base + c], v_pool[c % hd]);
          EXPECT_FLOAT_EQ(csr[base + c], v_pool[c % hd]);
        }
        continue;
      }
      // The request's own K/V by position: prefix 0 .. seq, window seq .. seq + W.
      std::vector<float> pk, pv, wk, wv;
      for (std::int32_t i = 0; i < L[r]; ++i) {
        const std::size_t s = static_cast<std::size_t>(pages[r][i / ps] * ps + i % ps) * hd;
        auto& kk = i < seq[r] ? pk : wk;
        auto& vv = i < seq[r] ? pv : wv;
        kk.insert(kk.end(), k_pool.begin() + s, k_pool.begin() + s + hd);
        vv.insert(vv.end(), v_pool.begin() + s, v_pool.begin() + s + hd);
      }
      extend_reference_input in{heads,     dim,       seq[r],          W,         0.35,
                                pk.data(), pv.data(), q.data() + base, wk.data(), wv.data()};
      std::vector<double> ref;
      extend_reference(in, ref);
      for (std::int32_t c = 0; c < W * hd; ++c) {
        for (const float got : {fa3[base + c], csr[base + c], prefix[base + c]}) {
          const double err = std::abs(static_cast<double>(got) - ref[c]);
          worst = std::max(worst, err);
          ASSERT_LE(err, 1e-5) << "trial " << trial << " request " << r << " cell " << c;
        }
      }
    }
  }
  EXPECT_LT(worst, 1e-5);
}

}  // namespace
}  // namespace specgraph::sim
