#include "tools/sim/sim_engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <utility>

#include "specgraph/error.hpp"
#include "tools/sim/sim_kernels.hpp"

namespace specgraph::sim {
namespace {

using clock_type = std::chrono::steady_clock;

// Hands out pages in random order from a shuffled free list, as a pool does after hours of
// serving: consecutive allocations are almost never consecutive page ids. Page 0 is reserved.
class page_allocator {
 public:
  page_allocator(std::int64_t pages, std::mt19937_64& rng) : rng_(&rng) {
    free_.resize(static_cast<std::size_t>(pages - 1));
    std::iota(free_.begin(), free_.end(), 1);
    std::shuffle(free_.begin(), free_.end(), rng);
  }
  std::int64_t allocate() {
    if (free_.empty()) throw error("simulated KV pool exhausted");
    const std::size_t i = (*rng_)() % free_.size();
    std::swap(free_[i], free_.back());
    const std::int64_t page = free_.back();
    free_.pop_back();
    return page;
  }
  void release(std::int64_t page) { free_.push_back(page); }

 private:
  std::mt19937_64* rng_;
  std::vector<std::int64_t> free_;
};

struct request {
  std::int32_t pool_row = 0;
  std::int32_t seq_len = 0;
  std::vector<std::int64_t> pages;
  std::vector<float> k, v;  // [seq_len][heads * head_dim]: the ground truth by position
};

}  // namespace

struct sim_engine::impl {
  impl(executor& e, const sim_options& o) : ex(&e), opt(o), rng(o.seed) {}

  executor* ex;
  sim_options opt;
  std::mt19937_64 rng;
  std::int32_t hd = 0;  // heads * head_dim
  std::int64_t kv_slots = 0;
  std::unique_ptr<page_allocator> pages;
  std::vector<request> requests;           // the active set, one per pool row 1..max_batch
  std::vector<std::int32_t> req_to_token;  // host mirror
  device_buffer d_req_to_token, k_pool, v_pool;
  // Engine-owned static buffers read by the captured forward.
  device_buffer q_src, k_src, v_src;  // [max_rows][steps][hd], the "model outputs" of a round
  device_buffer o_prefix, lse_prefix, o_expand, lse_expand;  // scratch per pass
  device_buffer out, out_lse;  // [steps][max_rows][hd], [steps][max_rows][heads]
  std::vector<float> h_q, h_k, h_v;
  std::unique_ptr<draft_runtime> rt;
  std::int32_t max_rows = 0;
  std::int32_t corrupt_round = -1;
  std::int32_t corrupt_layout_round = -1;
  std::int32_t current_round = -1;
  // The current round (begin_round .. end_round).
  std::vector<std::int32_t> round_rows, round_seq_len;
  std::vector<std::int64_t> round_cache_loc, round_branch_pages;
  sim_cuda_launchers cuda = sim_cuda();

  template <class K>
  void launch(const typename K::params& p, std::int64_t rows, cuda_rows_fn fn) {
    ex->launch(make_kernel_launch<K>(p, rows, fn));
  }

  float random_value() { return std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng); }

  // A new request on pool row `row`: random prefix length, fresh (scattered) pages, random K/V
  // written into the pool page by page.
  void admit(std::int32_t row) {
    request r;
    r.pool_row = row;
    r.seq_len = std::uniform_int_distribution<std::int32_t>(opt.min_context, opt.max_context)(rng);
    r.k.resize(static_cast<std::size_t>(r.seq_len) * hd);
    r.v.resize(r.k.size());
    for (auto& x : r.k) x = random_value();
    for (auto& x : r.v) x = random_value();
    const std::int32_t ps = opt.page_size;
    const std::int32_t n_pages = (r.seq_len + ps - 1) / ps;
    std::int32_t* tokens = req_to_token.data() + static_cast<std::size_t>(row) * opt.max_context;
    std::fill(tokens, tokens + opt.max_context, 0);
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
    ex->copy_to_device(
        d_req_to_token.as<std::int32_t>() + static_cast<std::size_t>(row) * opt.max_context, tokens,
        static_cast<std::size_t>(opt.max_context) * sizeof(std::int32_t));
    requests[static_cast<std::size_t>(row - 1)] = std::move(r);
  }

  void retire(std::int32_t row) {
    for (const std::int64_t p : requests[static_cast<std::size_t>(row - 1)].pages)
      pages->release(p);
    requests[static_cast<std::size_t>(row - 1)].pages.clear();
  }

  void forward(const step_view& v) {
    const std::int32_t s = v.step;
    const std::size_t rows = static_cast<std::size_t>(max_rows);
    kv_write_kernel::params w{};
    w.real_batch = v.real_batch;
    w.topk = v.topk;
    w.cache_loc = v.out_cache_loc;
    w.cache_loc_stride = v.cache_loc_stride;
    w.step = s;
    w.steps = opt.num_steps;
    w.head_elems = hd;
    w.k_src = k_src.as<float>();
    w.v_src = v_src.as<float>();
    w.k_pool = k_pool.as<float>();
    w.v_pool = v_pool.as<float>();
    w.device_step = v.device_step;
    launch<kv_write_kernel>(w, v.rows, cuda.kv_write);

    paged_attention_kernel::params a{};
    a.q = q_src.as<float>();
    a.steps = opt.num_steps;
    a.step = s;
    a.heads = opt.heads;
    a.head_dim = opt.head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(opt.head_dim));
    a.k_pool = k_pool.as<float>();
    a.v_pool = v_pool.as<float>();
    a.page_size = opt.page_size;
    a.device_step = v.device_step;
    // Pass 1: the request's whole prefix pages through the step-invariant prefix table.
    a.page_table = v.prefix_page_table;
    a.table_stride = v.prefix_stride;
    a.seqlen = v.prefix_seqlen;
    a.rows_per_table_row = v.topk;
    a.o = o_prefix.as<float>();
    a.lse = lse_prefix.as<float>();
    launch<paged_attention_kernel>(a, static_cast<std::int64_t>(v.rows) * opt.heads,
                                   cuda.attention);
    // Pass 2: the branch's pages (copied partial page + draft tokens) through the step's table.
    a.page_table = v.expand_page_table;
    a.table_stride = v.expand_stride;
    a.seqlen = v.expand_cache_seqlen;
    a.rows_per_table_row = 1;
    a.o = o_expand.as<float>();
    a.lse = lse_expand.as<float>();
    launch<paged_attention_kernel>(a, static_cast<std::int64_t>(v.rows) * opt.heads,
                                   cuda.attention);

    lse_merge_kernel::params m{};
    m.o1 = o_prefix.as<float>();
    m.lse1 = lse_prefix.as<float>();
    m.o2 = o_expand.as<float>();
    m.lse2 = lse_expand.as<float>();
    m.heads = opt.heads;
    m.head_dim = opt.head_dim;
    m.out = out.as<float>() + static_cast<std::size_t>(s) * rows * hd;
    m.out_lse = out_lse.as<float>() + static_cast<std::size_t>(s) * rows * opt.heads;
    m.device_step = v.device_step;  // step 0's view then: the slice follows the device step
    m.out_step_elems = static_cast<std::int64_t>(rows) * hd;
    m.lse_step_elems = static_cast<std::int64_t>(rows) * opt.heads;
    launch<lse_merge_kernel>(m, static_cast<std::int64_t>(v.rows) * opt.heads, cuda.merge);
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

sim_engine::sim_engine(executor& ex, const sim_options& o) : impl_(std::make_unique<impl>(ex, o)) {
  impl& m = *impl_;
  SPECGRAPH_EXPECTS(o.min_context >= 1 && o.min_context <= o.max_context, "min_context",
                    std::to_string(o.min_context) + " is outside [1, max_context " +
                        std::to_string(o.max_context) + "]");
  SPECGRAPH_EXPECTS(
      o.head_dim >= 1 && o.head_dim <= max_head_dim, "head_dim",
      std::to_string(o.head_dim) + " is outside [1, " + std::to_string(max_head_dim) + "]");
  m.hd = o.heads * o.head_dim;
  m.max_rows = o.max_batch * o.topk;  // buckets end at max_batch (default_buckets)
  const std::int64_t ps = o.page_size;
  const std::int64_t request_pages =
      static_cast<std::int64_t>(o.max_batch) * ((o.max_context + ps - 1) / ps);
  const std::int64_t branch_pages =
      static_cast<std::int64_t>(m.max_rows) * ((ps - 1 + o.num_steps + ps - 1) / ps);
  // Half again as many pages as ever live at once: the free list stays fragmented.
  const std::int64_t total_pages = 1 + (request_pages + branch_pages) * 3 / 2 + 1;
  m.kv_slots = total_pages * ps;
  m.pages = std::make_unique<page_allocator>(total_pages, m.rng);

  const std::size_t pool_bytes = static_cast<std::size_t>(m.kv_slots) * m.hd * sizeof(float);
  m.k_pool = device_buffer(ex, pool_bytes);
  m.v_pool = device_buffer(ex, pool_bytes);
  ex.fill_bytes(m.k_pool.data(), 0, pool_bytes);
  ex.fill_bytes(m.v_pool.data(), 0, pool_bytes);
  const std::int32_t pool_rows = o.max_batch + 1;  // row 0: the padding target
  m.req_to_token.assign(static_cast<std::size_t>(pool_rows) * o.max_context, 0);
  m.d_req_to_token = device_buffer(ex, m.req_to_token.size() * sizeof(std::int32_t));
  ex.fill_bytes(m.d_req_to_token.data(), 0, m.d_req_to_token.size());

  const std::size_t src_elems = static_cast<std::size_t>(m.max_rows) * o.num_steps * m.hd;
  for (device_buffer* b : {&m.q_src, &m.k_src, &m.v_src}) {
    *b = device_buffer(ex, src_elems * sizeof(float));
    ex.fill_bytes(b->data(), 0, b->size());
  }
  m.h_q.assign(src_elems, 0.0f);
  m.h_k.assign(src_elems, 0.0f);
  m.h_v.assign(src_elems, 0.0f);
  const std::size_t row_elems = static_cast<std::size_t>(m.max_rows) * m.hd;
  const std::size_t row_heads = static_cast<std::size_t>(m.max_rows) * o.heads;
  m.o_prefix = device_buffer(ex, row_elems * sizeof(float));
  m.o_expand = device_buffer(ex, row_elems * sizeof(float));
  m.lse_prefix = device_buffer(ex, row_heads * sizeof(float));
  m.lse_expand = device_buffer(ex, row_heads * sizeof(float));
  m.out = device_buffer(ex, row_elems * o.num_steps * sizeof(float));
  m.out_lse = device_buffer(ex, row_heads * o.num_steps * sizeof(float));

  m.requests.resize(static_cast<std::size_t>(o.max_batch));
  for (std::int32_t row = 1; row <= o.max_batch; ++row) m.admit(row);

  draft_config c;
  c.max_batch = o.max_batch;
  c.topk = o.topk;
  c.num_steps = o.num_steps;
  c.page_size = o.page_size;
  c.max_context_len = o.max_context;
  c.pool_rows = pool_rows;
  c.kv_slots = m.kv_slots;
  c.checked = o.checked;
  c.device_steps = o.device_steps;
  m.rt = std::make_unique<draft_runtime>(ex, c, engine_tables{m.d_req_to_token.as<std::int32_t>()});
  m.rt->set_forward([&m](const step_view& v) { m.forward(v); });
  ex.synchronize();
}

sim_engine::~sim_engine() = default;

draft_runtime& sim_engine::runtime() {
  return *impl_->rt;
}
const sim_options& sim_engine::options() const {
  return impl_->opt;
}

capture_report sim_engine::capture(const std::function<void(int, int)>& progress) {
  return impl_->rt->capture(progress);
}

void sim_engine::corrupt_prefix_table_at_round(std::int32_t round) {
  impl_->corrupt_round = round;
}
void sim_engine::corrupt_branch_layout_at_round(std::int32_t round) {
  impl_->corrupt_layout_round = round;
}

void sim_engine::run_round(std::int32_t round, std::int32_t batch, std::int32_t depth, bool verify,
                           run_report& report) {
  impl& m = *impl_;
  const sim_options& o = m.opt;
  const std::int32_t ps = o.page_size;
  m.current_round = round;
  begin_round(batch);
  const std::vector<std::int32_t>& rows = m.round_rows;
  const std::vector<std::int32_t>& seq_len = m.round_seq_len;
  const std::vector<std::int64_t>& branch_pages = m.round_branch_pages;
  const std::int32_t bucket = m.rt->staged_bucket();
  const step_view v0 = m.rt->view(bucket, 0);
  for (std::int32_t s = 0; s < depth; ++s) {
    const auto t0 = clock_type::now();
    step(s, false);
    m.ex->synchronize();  // per-step timing: each replay is waited for
    const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
    step_stats& st = report.steps[static_cast<std::size_t>(s)];
    st.seconds.push_back(secs);
    ++st.replays;
    st.draft_tokens += static_cast<std::int64_t>(batch) * o.topk;
    if (s == 0 && round == m.corrupt_round) {
      // Point the first prefix page of a real request with whole pages at another page.
      for (std::int32_t r = 0; r < batch; ++r) {
        if (seq_len[static_cast<std::size_t>(r)] < ps) continue;
        const std::int32_t wrong = static_cast<std::int32_t>(branch_pages.front());
        m.ex->copy_to_device(m.rt->buffers().prefix_page_table() + r * v0.prefix_stride, &wrong,
                             sizeof wrong);
        break;
      }
    }
  }
  if (o.checked) {
    try {
      m.rt->check_guards();
    } catch (const guard_violation& e) {
      end_round();
      throw guard_violation("round " + std::to_string(round) + ": " + e.what());
    }
  }

  if (verify) {
    const std::size_t rows_total = static_cast<std::size_t>(m.max_rows);
    std::vector<float> got(static_cast<std::size_t>(depth) * rows_total * m.hd);
    m.ex->copy_to_host(got.data(), m.out.data(), got.size() * sizeof(float));
    std::vector<double> ref;
    for (std::int32_t s = 0; s < depth; ++s) {
      for (std::int32_t r = 0; r < batch; ++r) {
        const request& req =
            m.requests[static_cast<std::size_t>(rows[static_cast<std::size_t>(r)] - 1)];
        for (std::int32_t t = 0; t < o.topk; ++t) {
          const std::size_t row = static_cast<std::size_t>(r) * o.topk + t;
          for (std::int32_t h = 0; h < o.heads; ++h) {
            m.reference(req, row, s, h, ref);
            const float* o_got = got.data() +
                                 (static_cast<std::size_t>(s) * rows_total + row) * m.hd +
                                 h * o.head_dim;
            double max_diff = 0, max_ref = 0;
            for (std::int32_t d = 0; d < o.head_dim; ++d) {
              max_diff = std::max(max_diff, std::abs(o_got[d] - ref[static_cast<std::size_t>(d)]));
              max_ref = std::max(max_ref, std::abs(ref[static_cast<std::size_t>(d)]));
            }
            const double rel = max_diff / std::max(max_ref, 1e-30);
            report.max_relative_error = std::max(report.max_relative_error, rel);
            ++report.verified_outputs;
            if (!(rel <= o.tolerance)) {
              std::ostringstream msg;
              msg << "verification failed: round " << round << ", step " << s << ", bucket "
                  << bucket << ", row " << row << " (request " << r << ", branch " << t
                  << "), head " << h << ": relative error " << rel << " exceeds " << o.tolerance;
              end_round();
              throw verification_error(msg.str());
            }
          }
        }
      }
    }
    ++report.verified_rounds;
  }
  end_round();
  report.rounds.push_back({batch, bucket, depth, verify});
}

void sim_engine::begin_round(std::int32_t batch) {
  impl& m = *impl_;
  const sim_options& o = m.opt;
  const std::int32_t ps = o.page_size;
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  for (std::int32_t row = 1; row <= o.max_batch; ++row) {
    if (coin(m.rng) < o.replace_probability) {
      m.retire(row);
      m.admit(row);
    }
  }
  // This round's requests: a random subset of the active set.
  std::vector<std::int32_t>& rows = m.round_rows;
  rows.resize(static_cast<std::size_t>(o.max_batch));
  std::iota(rows.begin(), rows.end(), 1);
  std::shuffle(rows.begin(), rows.end(), m.rng);
  rows.resize(static_cast<std::size_t>(batch));

  // Branch allocation (section 1): a fresh page per branch holding a copy of the request's last
  // partial page, then the draft slots at offsets (last_page_len + j) % ps.
  std::vector<std::int32_t>& seq_len = m.round_seq_len;
  seq_len.clear();
  std::vector<std::int64_t>& cache_loc = m.round_cache_loc;
  cache_loc.assign(static_cast<std::size_t>(batch) * o.topk * o.num_steps, 0);
  std::vector<std::int64_t>& branch_pages = m.round_branch_pages;
  branch_pages.clear();
  for (std::int32_t r = 0; r < batch; ++r) {
    const request& req =
        m.requests[static_cast<std::size_t>(rows[static_cast<std::size_t>(r)] - 1)];
    seq_len.push_back(req.seq_len);
    const std::int32_t lpl = req.seq_len % ps;
    for (std::int32_t t = 0; t < o.topk; ++t) {
      std::int64_t page = m.pages->allocate();
      branch_pages.push_back(page);
      for (std::int32_t j = 0; j < o.num_steps; ++j) {
        const std::int32_t offset = (lpl + j) % ps;
        if (j > 0 && offset == 0) {
          page = m.pages->allocate();
          branch_pages.push_back(page);
        }
        cache_loc[(static_cast<std::size_t>(r) * o.topk + t) * o.num_steps + j] =
            page * ps + offset;
      }
    }
  }
  if (m.current_round == m.corrupt_layout_round && o.num_steps >= 2 && ps >= 2) {
    std::int64_t& slot = cache_loc[1];  // request 0, branch 0, draft token 1
    slot = slot - slot % ps + (slot % ps + 1) % ps;
  }
  // The round's draft-model outputs (queries and K/V of each draft token), real rows only.
  const std::size_t real_elems = static_cast<std::size_t>(batch) * o.topk * o.num_steps * m.hd;
  for (std::size_t i = 0; i < real_elems; ++i) {
    m.h_q[i] = m.random_value();
    m.h_k[i] = m.random_value();
    m.h_v[i] = m.random_value();
  }
  m.ex->copy_to_device(m.q_src.data(), m.h_q.data(), real_elems * sizeof(float));
  m.ex->copy_to_device(m.k_src.data(), m.h_k.data(), real_elems * sizeof(float));
  m.ex->copy_to_device(m.v_src.data(), m.h_v.data(), real_elems * sizeof(float));

  round_inputs in;
  in.batch = batch;
  in.req_pool_index = rows.data();
  in.seq_len = seq_len.data();
  in.out_cache_loc = cache_loc.data();
  m.rt->stage(in);
  const step_view v0 = m.rt->view(m.rt->staged_bucket(), 0);
  branch_page_copy_kernel::params copy{};
  copy.req_to_token = m.d_req_to_token.as<std::int32_t>();
  copy.req_to_token_stride = o.max_context;
  copy.req_pool_index = v0.req_pool_index;
  copy.seq_len = v0.seq_len;
  copy.cache_loc = v0.out_cache_loc;
  copy.cache_loc_stride = o.num_steps;
  copy.topk = o.topk;
  copy.page_size = ps;
  copy.head_elems = m.hd;
  copy.k_pool = m.k_pool.as<float>();
  copy.v_pool = m.v_pool.as<float>();
  m.launch<branch_page_copy_kernel>(copy, static_cast<std::int64_t>(batch) * o.topk,
                                    m.cuda.branch_copy);
}

void sim_engine::step(std::int32_t s, bool eager) {
  if (eager) {
    impl_->rt->run_eager(s);
  } else {
    impl_->rt->replay(s);
  }
}

void sim_engine::end_round() {
  impl& m = *impl_;
  for (const std::int64_t p : m.round_branch_pages) m.pages->release(p);
  m.round_branch_pages.clear();
}

run_report sim_engine::run(const std::function<void(int, int)>& progress) {
  impl& m = *impl_;
  const sim_options& o = m.opt;
  run_report report;
  report.executor = m.ex->name();
  report.steps.resize(static_cast<std::size_t>(o.num_steps));
  for (std::int32_t s = 0; s < o.num_steps; ++s) report.steps[static_cast<std::size_t>(s)].step = s;
  const auto start = clock_type::now();
  std::uniform_int_distribution<std::int32_t> batches(o.min_batch, o.max_batch);
  std::uniform_int_distribution<std::int32_t> depths(1, o.num_steps);
  for (std::int32_t round = 0; round < o.rounds; ++round) {
    const std::int32_t batch = batches(m.rng);
    const std::int32_t depth = o.depth == 0 ? o.num_steps : o.depth < 0 ? depths(m.rng) : o.depth;
    const bool verify =
        o.verify == sim_options::verify_mode::all ||
        (o.verify == sim_options::verify_mode::sample && round % o.verify_every == 0);
    run_round(round, batch, depth, verify, report);
    if (progress) progress(round + 1, o.rounds);
  }
  report.run_seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  return report;
}

}  // namespace specgraph::sim
