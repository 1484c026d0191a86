// The simulated engine: the paged KV pool, requests, the forward captured into every graph and
// the dense float64 reference. Rounds and timing are in sim_rounds.cpp, the output checks in
// sim_verify.cpp.
#include "tools/sim/sim_engine.hpp"

#include "specgraph/limits.hpp"
#include "specgraph/verify_metadata.hpp"
#include "tools/sim/sim_engine_impl.hpp"

namespace specgraph::sim {

sim_engine::sim_engine(executor& ex, const sim_options& o) : impl_(std::make_unique<impl>(ex, o)) {
  impl& m = *impl_;
  SPECGRAPH_EXPECTS(o.min_context >= 1 && o.min_context <= o.max_context, "min_context",
                    std::to_string(o.min_context) + " is outside [1, max_context " +
                        std::to_string(o.max_context) + "]");
  SPECGRAPH_EXPECTS(
      o.head_dim >= 1 && o.head_dim <= max_head_dim, "head_dim",
      std::to_string(o.head_dim) + " is outside [1, " + std::to_string(max_head_dim) + "]");
  m.opt.verify_tokens = resolved_verify_tokens(o);
  m.hd = o.heads * o.head_dim;
  m.max_rows = o.max_batch * o.topk;  // buckets end at max_batch (default_buckets)
  m.run_fa3 = o.format != metadata_formats::csr;
  m.run_csr = o.format != metadata_formats::fa3;
  SPECGRAPH_EXPECTS(!m.run_csr || o.num_steps <= max_csr_steps, "num_steps",
                    std::to_string(o.num_steps) + " exceeds " + std::to_string(max_csr_steps) +
                        " (the CSR path's per-step offsets)");
  const std::int64_t ps = o.page_size;
  // req_to_token row width: the longest prefix, plus (CSR) every branch's page-aligned region
  // of nnp <= ceil((ps - 1 + S) / ps) pages, S = slot_stride (docs/csr.md section 1).
  const std::int64_t slots = o.slot_stride == 0 ? o.num_steps : o.slot_stride;
  const std::int64_t max_nnp = (ps - 1 + slots + ps - 1) / ps;
  // The verify step: D tree tokens after the prefix (docs/verify.md section 1), D in
  // [0, 1 + topk * num_steps] (0: no verify step), the mask's cells within int32.
  const std::int64_t max_tree =
      std::min<std::int64_t>(max_draft_tokens, 1 + static_cast<std::int64_t>(o.topk) * o.num_steps);
  SPECGRAPH_EXPECTS(m.opt.verify_tokens >= 0 && m.opt.verify_tokens <= max_tree, "verify_tokens",
                    std::to_string(m.opt.verify_tokens) + " is outside [0, " +
                        std::to_string(max_tree) +
                        "] (at most the root and every draft token: 1 + topk * num_steps)");
  if (m.opt.verify_tokens > 0) {
    const std::int64_t cells =
        verify_mask_cells_capacity(o.max_batch, o.max_context, m.opt.verify_tokens);
    SPECGRAPH_EXPECTS(cells <= 0x7fffffff, "verify_tokens",
                      std::to_string(m.opt.verify_tokens) + " with max_batch " +
                          std::to_string(o.max_batch) + " and max_context " +
                          std::to_string(o.max_context) + " gives " + std::to_string(cells) +
                          " tree-mask cells, above the int32 limit; lower one of them");
  }
  const std::int64_t width = std::max<std::int64_t>(
      o.max_context + (m.run_csr ? (o.topk - 1) * ps * max_nnp + o.num_steps : 0),
      static_cast<std::int64_t>(o.max_context) + m.opt.verify_tokens);
  SPECGRAPH_EXPECTS(width <= limits::max_context_len, "max_context",
                    std::to_string(o.max_context) + " with the branch regions gives rows " +
                        std::to_string(width) + " wide, above " +
                        std::to_string(limits::max_context_len));
  m.width = static_cast<std::int32_t>(width);
  // A request's pages: its prefix, then (verify step) its tree tokens' positions.
  const std::int64_t request_pages = static_cast<std::int64_t>(o.max_batch) *
                                     ((o.max_context + m.opt.verify_tokens + ps - 1) / ps);
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
  m.req_to_token.assign(static_cast<std::size_t>(pool_rows) * m.width, 0);
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
  m.out_csr =  // one float without CSR: every buffer stays allocated and defined
      device_buffer(ex, (m.run_csr ? row_elems * o.num_steps : 1) * sizeof(float));
  // Defined from the start: a round writes only its bucket's rows and the steps it ran, and
  // verification copies whole steps back (a read of never-written memory, otherwise).
  for (device_buffer* b :
       {&m.o_prefix, &m.o_expand, &m.lse_prefix, &m.lse_expand, &m.out, &m.out_lse, &m.out_csr}) {
    ex.fill_bytes(b->data(), 0, b->size());
  }

  if (m.opt.verify_tokens > 0) m.init_verify();
  m.run_extend = m.opt.draft_extend && m.opt.verify_tokens > 0;
  if (m.run_extend) m.init_extend();
  m.requests.resize(static_cast<std::size_t>(o.max_batch));
  for (std::int32_t row = 1; row <= o.max_batch; ++row) m.admit(row);

  draft_config c;
  c.max_batch = o.max_batch;
  c.topk = o.topk;
  c.num_steps = o.num_steps;
  c.slot_stride = o.slot_stride;
  c.page_size = o.page_size;
  c.max_context_len = m.width;
  c.pool_rows = pool_rows;
  c.kv_slots = m.kv_slots;
  c.checked = o.checked;
  c.device_steps = o.device_steps;
  // csr runs on a both plan: the simulated forward writes each step's CSR indices itself, as
  // an engine composing the ops would, and draft_runtime (which writes CSR since it learned
  // the format) writes the same values again; left as is, a known double write.
  c.formats = m.run_csr ? metadata_formats::both : metadata_formats::fa3;
  c.csr_int64 = o.csr_int64;
  m.rt = std::make_unique<draft_runtime>(ex, c, engine_tables{m.d_req_to_token.as<std::int32_t>()});
  m.rt->set_forward([&m](const step_view& v) { m.forward(v); });
  ex.synchronize();
}

// The verify step's state (sim_verify_round.cpp): the toy model and every buffer, each sized for
// (max_batch, max_context, D) by the verify_* capacity functions.
void sim_engine::impl::init_verify() {
  verify_state& S = vs;
  const std::int32_t D = opt.verify_tokens, B = opt.max_batch, M = opt.max_context;
  S.max_tokens = D;
  S.rng.seed(opt.seed ^ 0x9e3779b97f4a7c15ULL);
  S.lm = toy_lm(std::max(32, opt.topk), hd, S.rng);  // a 32-token vocabulary (topk distinct)
  S.root_token.resize(static_cast<std::size_t>(B) + 1);
  for (std::int32_t& t : S.root_token) t = static_cast<std::int32_t>(S.rng() % S.lm.vocab);
  S.prefix_columns = static_cast<std::int32_t>(verify_prefix_columns(M, opt.page_size));
  S.kv_capacity = static_cast<std::int32_t>(verify_kv_indices_capacity(B, M, D));
  S.packed_capacity = static_cast<std::int32_t>(verify_packed_mask_capacity(B, M, D));
  S.mask_capacity = verify_mask_cells_capacity(B, M, D);
  const std::size_t rows = static_cast<std::size_t>(B) * D, f = sizeof(float), i32 = 4;
  auto make = [&](device_buffer& b, std::size_t bytes) {
    b = device_buffer(*ex, bytes);
    ex->fill_bytes(b.data(), 0, bytes);  // defined from the start, as every sim buffer
  };
  for (device_buffer* b : {&S.q, &S.k, &S.v, &S.o_prefix, &S.o_expand, &S.out}) {
    make(*b, rows * hd * f);
  }
  make(S.out_csr, (run_csr ? rows * hd : 1) * f);
  for (device_buffer* b : {&S.lse_prefix, &S.lse_expand, &S.out_lse}) {
    make(*b, rows * opt.heads * f);
  }
  S.h_q.assign(rows * hd, 0.0f);
  S.h_k.assign(rows * hd, 0.0f);
  S.h_v.assign(rows * hd, 0.0f);
  const std::size_t b = static_cast<std::size_t>(B);
  make(S.pool_index, b * i32);
  make(S.seq_len, b * i32);
  make(S.mask, static_cast<std::size_t>(S.mask_capacity));
  make(S.prefix_table, b * static_cast<std::size_t>(S.prefix_columns) * i32);
  make(S.prefix_cache, b * i32);
  make(S.prefix_q, (b + 1) * i32);
  make(S.prefix_k, (b + 1) * i32);
  make(S.expand_table, rows * static_cast<std::size_t>(D) * i32);
  make(S.expand_cache, rows * i32);
  make(S.expand_q, (rows + 1) * i32);
  make(S.expand_k, (rows + 1) * i32);
  for (device_buffer* x : {&S.qo, &S.kv_indptr, &S.mask_indptr, &S.packed_indptr}) {
    make(*x, (b + 1) * i32);
  }
  make(S.kv_indices, static_cast<std::size_t>(S.kv_capacity) * i32);
  make(S.last_page, b * i32);
  make(S.packed, static_cast<std::size_t>(S.packed_capacity));
  make(S.guard, verify_guard_count * sizeof(guard_word));
  make(S.scratch, static_cast<std::size_t>(verify_scratch_words(B, D)) * 8);
  make(S.commit_count, b * i32);
  make(S.commit_src, rows * 8);
  make(S.commit_dst, rows * 8);
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
void sim_engine::corrupt_draft_position_at_round(std::int32_t round) {
  impl_->corrupt_draft_round = round;
}
void sim_engine::corrupt_packed_mask_at_round(std::int32_t round) {
  impl_->vs.corrupt_mask_round = round;
}
void sim_engine::corrupt_extend_table_at_round(std::int32_t round) {
  impl_->corrupt_extend_round = round;
}
const verify_trace& sim_engine::last_verify() const {
  return impl_->vs.trace;
}

}  // namespace specgraph::sim
