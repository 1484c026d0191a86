// Internal: the simulated engine's state, shared by sim_engine.cpp (the pool, requests, the
// forward and the dense reference) and sim_rounds.cpp (rounds, timing and verification).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "specgraph/csr_ops.hpp"
#include "specgraph/error.hpp"
#include "tools/sim/sim_engine.hpp"
#include "tools/sim/sim_extend_state.hpp"
#include "tools/sim/sim_fa3.hpp"
#include "tools/sim/sim_kernels.hpp"
#include "tools/sim/sim_verify_state.hpp"

namespace specgraph::sim {
namespace detail {
using clock_type = std::chrono::steady_clock;

// Hands out pages in random order from a shuffled free list, as a pool does after hours of
// serving: consecutive allocations are almost never consecutive page ids. Page 0 is reserved.
// Its generator is its own (seeded by one draw of the engine's): how many pages the requests'
// growth takes never shifts the engine's draws of batches, depths and requests.
class page_allocator {
 public:
  page_allocator(std::int64_t pages, std::mt19937_64& rng) : rng_(rng()) {
    free_.resize(static_cast<std::size_t>(pages - 1));
    std::iota(free_.begin(), free_.end(), 1);
    std::shuffle(free_.begin(), free_.end(), rng_);
  }
  std::int64_t allocate() {
    if (free_.empty()) throw error("simulated KV pool exhausted");
    const std::size_t i = rng_() % free_.size();
    std::swap(free_[i], free_.back());
    const std::int64_t page = free_.back();
    free_.pop_back();
    return page;
  }
  void release(std::int64_t page) { free_.push_back(page); }

 private:
  std::mt19937_64 rng_;
  std::vector<std::int64_t> free_;
};

struct request {
  std::int32_t pool_row = 0;
  std::int32_t seq_len = 0;
  std::vector<std::int64_t> pages;
  std::vector<float> k, v;    // [seq_len][heads * head_dim]: the ground truth by position
  std::vector<float> dk, dv;  // the draft model's K/V by position (draft extend only)
};
}  // namespace detail

using detail::clock_type;
using detail::page_allocator;
using detail::request;

struct sim_engine::impl {
  impl(executor& e, const sim_options& o) : ex(&e), opt(o), rng(o.seed) {}

  executor* ex;
  sim_options opt;
  std::mt19937_64 rng;
  std::int32_t hd = 0;     // heads * head_dim
  std::int32_t width = 0;  // req_to_token row width: max_context (+ the branch regions, csr)
  bool run_fa3 = true, run_csr = false;  // the attention paths the forward runs (opt.format)
  std::int64_t kv_slots = 0;
  std::unique_ptr<page_allocator> pages;
  std::vector<request> requests;           // the active set, one per pool row 1..max_batch
  std::vector<std::int32_t> req_to_token;  // host mirror
  device_buffer d_req_to_token, k_pool, v_pool;
  // Engine-owned static buffers read by the captured forward.
  device_buffer q_src, k_src, v_src;  // [max_rows][steps][hd], the "model outputs" of a round
  device_buffer o_prefix, lse_prefix, o_expand, lse_expand;  // scratch per pass
  device_buffer out, out_lse;  // [steps][max_rows][hd], [steps][max_rows][heads]
  device_buffer out_csr;       // [steps][max_rows][hd]: the csr path's output
  std::vector<float> h_q, h_k, h_v;
  std::unique_ptr<draft_runtime> rt;
  std::int32_t max_rows = 0;
  std::int32_t corrupt_round = -1;
  std::int32_t corrupt_layout_round = -1;
  std::int32_t corrupt_draft_round = -1;
  std::int32_t current_round = -1;
  // The current round (begin_round .. end_round).
  std::vector<std::int32_t> round_rows, round_seq_len;
  std::vector<std::int64_t> round_cache_loc, round_branch_pages;
  sim_cuda_launchers cuda = sim_cuda();
  verify_state vs;  // the verify step (sim_verify_round.cpp); buffers only with verify_tokens
  extend_state es;  // the draft-extend step (sim_extend_round.cpp); buffers only with it
  bool run_extend = false;
  std::int32_t corrupt_extend_round = -1;

  template <class K>
  void launch(const typename K::params& p, std::int64_t rows, cuda_rows_fn fn) {
    ex->launch(make_kernel_launch<K>(p, rows, fn));
  }

  float random_value() { return std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng); }

  // A new request on pool row `row`: random prefix length, fresh (scattered) pages, random K/V
  // written into the pool page by page; drawn from `g` (the verify step's own generator when a
  // request finishes there).
  void admit(std::int32_t row) { admit(row, rng); }
  void admit(std::int32_t row, std::mt19937_64& g) {
    request r;
    r.pool_row = row;
    r.seq_len = std::uniform_int_distribution<std::int32_t>(opt.min_context, opt.max_context)(g);
    r.k.resize(static_cast<std::size_t>(r.seq_len) * hd);
    r.v.resize(r.k.size());
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& x : r.k) x = u(g);
    for (auto& x : r.v) x = u(g);
    const std::int32_t ps = opt.page_size;
    const std::int32_t n_pages = (r.seq_len + ps - 1) / ps;
    std::int32_t* tokens = req_to_token.data() + static_cast<std::size_t>(row) * width;
    std::fill(tokens, tokens + width, 0);
    for (std::int32_t j = 0; j < n_pages; ++j) {
      const std::int64_t page = pages->allocate();
      r.pages.push_back(page);
      const std::int32_t first = j * ps;
      const std::int32_t count = std::min(ps, r.seq_len - first);
      for (std::int32_t i = 0; i < count; ++i) {
        tokens[first + i] = static_cast<std::int32_t>(page * ps + i);
      }
      const std::size_t bytes = static_cast<std::size_t>(count) * hd * sizeof(float);
      ex->copy_to_device(k_pool.as<float>() + page * ps * hd,
                         r.k.data() + static_cast<std::size_t>(first) * hd, bytes);
      ex->copy_to_device(v_pool.as<float>() + page * ps * hd,
                         r.v.data() + static_cast<std::size_t>(first) * hd, bytes);
    }
    ex->copy_to_device(d_req_to_token.as<std::int32_t>() + static_cast<std::size_t>(row) * width,
                       tokens, static_cast<std::size_t>(width) * sizeof(std::int32_t));
    if (run_extend) admit_draft_kv(r);
    requests[static_cast<std::size_t>(row - 1)] = std::move(r);
  }

  void retire(std::int32_t row) {
    for (const std::int64_t p : requests[static_cast<std::size_t>(row - 1)].pages)
      pages->release(p);
    requests[static_cast<std::size_t>(row - 1)].pages.clear();
  }

  // The forward captured into graph(B, s): the step's K/V into the pool, then the attention
  // path(s) of opt.format.
  void forward(const step_view& v) {
    draft_kv_write(*ex, cuda, v, *this);
    if (run_csr) csr_forward(v);
    if (run_fa3) fa3_forward(v);
  }

  // The fa3 path (tools/sim/sim_fa3.hpp): the prefix pages, then the branch's, merged into `out`.
  void fa3_forward(const step_view& v) { fa3_draft_attention(*ex, cuda, v, fa3_buffers_of(*this)); }

  // The csr path: draft_runtime has written the step's kv_indptr / kv_indices into the plan's
  // arena before this forward (the step's graph body, in every replay mode: docs/csr.md), so
  // the engine only reads them: one ragged decode pass into `out_csr`.
  void csr_forward(const step_view& v) {
    const draft_buffers& b = rt->buffers();
    csr_attention_kernel::params c{};
    c.q = q_src.as<float>();
    c.steps = opt.num_steps;
    c.step = v.step;
    c.heads = opt.heads;
    c.head_dim = opt.head_dim;
    c.scale = 1.0f / std::sqrt(static_cast<float>(opt.head_dim));
    c.k_pool = k_pool.as<float>();
    c.v_pool = v_pool.as<float>();
    c.kv_indptr = b.csr_kv_indptr();
    c.indptr_stride = static_cast<std::int64_t>(max_rows) + 1;
    const auto* base = static_cast<const unsigned char*>(b.csr_kv_indices(0));
    const std::int64_t elem = opt.csr_int64 ? 8 : 4;
    for (std::int32_t s = 0; s < opt.num_steps; ++s) {
      c.indices_offset[s] = (static_cast<const unsigned char*>(b.csr_kv_indices(s)) - base) / elem;
    }
    if (opt.csr_int64) {
      c.indices_i64 = reinterpret_cast<const std::int64_t*>(base);
    } else {
      c.indices_i32 = reinterpret_cast<const std::int32_t*>(base);
    }
    c.o = out_csr.as<float>();
    c.out_step_elems = static_cast<std::int64_t>(max_rows) * hd;
    c.device_step = v.device_step;
    launch<csr_attention_kernel>(c, static_cast<std::int64_t>(v.rows) * opt.heads,
                                 cuda.csr_attention);
  }

  // The round's outputs against the reference (verify) and, with both paths, against each
  // other; throws verification_error naming round, step, bucket, row, head and path
  // (sim_verify.cpp).
  void check_outputs(std::int32_t round, std::int32_t batch, std::int32_t depth,
                     std::int32_t bucket, bool verify, run_report& report);

  // The verify step after the draft steps of a round (sim_verify_round.cpp): trees, the target's
  // forward with tree attention over the verify metadata, its checks, and the accepted paths
  // committed. init_verify allocates its buffers (constructor).
  void init_verify();
  // The draft-extend step after the verify step (sim_extend_round.cpp): the draft model's extend
  // forward over each request's W window tokens (its K/V written at the window's slots of the
  // draft pool), the metadata of every layout the format reads, each attention path against the
  // float64 reference by position and, with both, fa3 against csr; then the accepted tokens'
  // draft K/V committed. `pool` and `seq` are the verify round's padded requests, `accept_len`
  // its accepted lengths (root included, in [1, D]). init_extend allocates its buffers
  // (constructor); admit_draft_kv draws a new request's draft K/V and writes it to the pool.
  void init_extend();
  void admit_draft_kv(request& r);
  void extend_round(std::int32_t round, std::int32_t batch, std::int32_t bucket, bool verify,
                    const std::vector<std::int32_t>& pool, const std::vector<std::int32_t>& seq,
                    const std::vector<std::int32_t>& accept_len, run_report& report);
  // Its checks (sim_extend_check.cpp): the tokens layout against the engine's own state, each
  // path's outputs against the float64 reference by position (verify) and, with both, fa3
  // against csr; throws verification_error naming round, bucket, request, token, head and path.
  void check_extend_outputs(std::int32_t round, std::int32_t batch, std::int32_t bucket,
                            bool verify, const std::vector<std::int32_t>& pool,
                            const std::vector<std::int32_t>& seq,
                            const std::vector<std::int32_t>& accept_len, run_report& report);
  void verify_round(std::int32_t round, std::int32_t batch, std::int32_t depth, std::int32_t bucket,
                    bool verify, run_report& report);
  // Its output checks (sim_verify_tree_check.cpp): each path against the float64 reference over
  // the tree mask by position, and fa3 against csr; `reference` gets [batch][D][hd].
  void check_verify_outputs(std::int32_t round, std::int32_t batch, std::int32_t D,
                            std::int32_t bucket, bool verify, const std::vector<std::uint8_t>& mask,
                            const std::vector<float>& fa3, const std::vector<float>& csr,
                            std::vector<double>& reference, run_report& report) const;

  // The round's draft slots at their req_to_token positions P(r, t, j) = seq_len + t * region
  // + j (docs/csr.md section 1), which the CSR indices read, uploaded per request. The engine
  // lays each branch's region out from its row width S = slot_stride (--slot-stride), as SGLang
  // does: S positions at page size 1, else ps * ceil((seq_len % ps + S) / ps).
  void write_draft_positions(std::int32_t batch) {
    const std::int32_t ps = opt.page_size, steps = opt.num_steps;
    // round_cache_loc's rows are slot_stride wide (--slot-stride), not num_steps.
    const std::int64_t slots = rt->plan().config.slot_stride;
    const auto stride = static_cast<std::size_t>(slots);
    for (std::int32_t r = 0; r < batch; ++r) {
      const std::int64_t row = round_rows[static_cast<std::size_t>(r)];
      const std::int64_t seq = round_seq_len[static_cast<std::size_t>(r)];
      const std::int64_t region = ps == 1 ? slots : ps * ((seq % ps + slots + ps - 1) / ps);
      std::int32_t* tokens = req_to_token.data() + row * width;
      for (std::int32_t t = 0; t < opt.topk; ++t) {
        for (std::int32_t j = 0; j < steps; ++j) {
          tokens[seq + t * region + j] = static_cast<std::int32_t>(
              round_cache_loc[(static_cast<std::size_t>(r) * opt.topk + t) * stride + j]);
        }
      }
      if (current_round == corrupt_draft_round && r == 0 && steps >= 2) tokens[seq + 1] = tokens[0];
      const std::int64_t span = (opt.topk - 1) * region + steps;
      ex->copy_to_device(d_req_to_token.as<std::int32_t>() + row * width + seq, tokens + seq,
                         static_cast<std::size_t>(span) * sizeof(std::int32_t));
    }
  }

  // Dense float64 attention of one (row, step, head) over the tokens gathered by position: the
  // request's prefix 0..seq_len-1 and the branch's draft tokens 0..step.
  void reference(const request& r, std::size_t row, std::int32_t step, std::int32_t h,
                 std::vector<double>& o) const {
    const std::int32_t D = opt.head_dim;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const float* q =
        h_q.data() + (row * opt.num_steps + static_cast<std::size_t>(step)) * hd + h * D;
    std::vector<double> scores;
    std::vector<const float*> values;
    auto add = [&](const float* k, const float* v) {
      double s = 0;
      for (std::int32_t d = 0; d < D; ++d) s += static_cast<double>(q[d]) * k[d];
      scores.push_back(s * scale);
      values.push_back(v);
    };
    for (std::int32_t pos = 0; pos < r.seq_len; ++pos) {
      add(r.k.data() + static_cast<std::size_t>(pos) * hd + h * D,
          r.v.data() + static_cast<std::size_t>(pos) * hd + h * D);
    }
    for (std::int32_t j = 0; j <= step; ++j) {
      const std::size_t src = (row * opt.num_steps + static_cast<std::size_t>(j)) * hd +
                              static_cast<std::size_t>(h * D);
      add(h_k.data() + src, h_v.data() + src);
    }
    const double m = *std::max_element(scores.begin(), scores.end());
    double l = 0;
    o.assign(static_cast<std::size_t>(D), 0.0);
    for (std::size_t i = 0; i < scores.size(); ++i) {
      const double w = std::exp(scores[i] - m);
      l += w;
      for (std::int32_t d = 0; d < D; ++d) o[static_cast<std::size_t>(d)] += w * values[i][d];
    }
    for (double& x : o) x /= l;
  }
};

}  // namespace specgraph::sim
