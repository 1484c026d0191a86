// The simulated engine's rounds: branch allocation, staging, timed replays and checked mode;
// the output checks are in sim_verify.cpp.
#include "tools/sim/sim_engine.hpp"

#include "tools/sim/sim_engine_impl.hpp"

namespace specgraph::sim {

void sim_engine::run_round(std::int32_t round, std::int32_t batch, std::int32_t depth, bool verify,
                           run_report& report) {
  impl& m = *impl_;
  const sim_options& o = m.opt;
  const std::int32_t ps = o.page_size;
  m.current_round = round;
  begin_round(batch);
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

  try {
    m.check_outputs(round, batch, depth, bucket, verify, report);
  } catch (const verification_error&) {
    end_round();
    throw;
  }
  end_round();
  if (o.verify_tokens > 0) m.verify_round(round, batch, depth, bucket, verify, report);
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
  // Rows slot_stride wide (--slot-stride); the slots past num_steps hold an out-of-range slot,
  // which nothing may read (a read is refused and recorded, and the verification fails).
  const auto stride = static_cast<std::size_t>(m.rt->plan().config.slot_stride);
  cache_loc.assign(static_cast<std::size_t>(batch) * o.topk * stride, -1);
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
        cache_loc[(static_cast<std::size_t>(r) * o.topk + t) * stride +
                  static_cast<std::size_t>(j)] = page * ps + offset;
      }
    }
  }
  if (m.current_round == m.corrupt_layout_round && o.num_steps >= 2 && ps >= 2) {
    std::int64_t& slot = cache_loc[1];  // request 0, branch 0, draft token 1
    slot = slot - slot % ps + (slot % ps + 1) % ps;
  }
  if (m.run_csr) m.write_draft_positions(batch);
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
  copy.req_to_token_stride = m.width;
  copy.req_pool_index = v0.req_pool_index;
  copy.seq_len = v0.seq_len;
  copy.cache_loc = v0.out_cache_loc;
  copy.cache_loc_stride = v0.cache_loc_stride;
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
