// The simulated engine's draft-extend step, after the verify step of every round (docs/extend.md,
// docs/main-job.md): the draft model runs one extend forward over each request's whole verify
// window of W tokens (positions seq_len .. seq_len + W - 1), its K/V written at the window's
// slots of the draft model's own KV pool, attending causally over the committed prefix and the
// window through the draft-extend metadata that run_extend_metadata writes on the engine's
// executor: FA3's page table (C1) and/or CSR's full layout (C2f) and prefix layout (C2p, the
// window's K/V from the forward's own tensors, merged by log-sum-exp). Each path is checked
// against a float64 dense reference by position (sim_extend_reference.hpp), never through the
// tables; then the accepted tokens' draft K/V (positions seq_len .. seq_len + accept_len - 1)
// are committed to the request.
#include <chrono>
#include <sstream>

#include "specgraph/error.hpp"
#include "specgraph/extend_metadata.hpp"
#include "tools/sim/sim_engine.hpp"
#include "tools/sim/sim_engine_impl.hpp"
#include "tools/sim/sim_extend_reference.hpp"
#include "tools/sim/sim_verify_kernels.hpp"

namespace specgraph::sim {
namespace {

template <class T>
std::vector<T> download(executor& ex, const device_buffer& b, std::size_t n) {
  std::vector<T> v(n);
  ex.copy_to_host(v.data(), b.data(), n * sizeof(T));
  return v;
}

}  // namespace

void sim_engine::impl::init_extend() {
  extend_state& E = es;
  const std::int32_t W = opt.verify_tokens, B = opt.max_batch, M = opt.max_context;
  E.window = W;
  E.rng.seed(opt.seed ^ 0x5851f42d4c957f2dULL);
  const extend_tables t = extend_exact_tables(B, M, opt.page_size, W);
  E.page_columns = t.page_capacity;
  E.prefix_capacity = t.prefix_kv_capacity;
  E.full_capacity = t.full_kv_capacity;
  const std::size_t rows = static_cast<std::size_t>(B) * W, b = static_cast<std::size_t>(B);
  const std::size_t f = sizeof(float), i32 = 4;
  auto make = [&](device_buffer& x, std::size_t bytes) {
    x = device_buffer(*ex, bytes);
    ex->fill_bytes(x.data(), 0, bytes);  // defined from the start, as every sim buffer
  };
  const std::size_t pool_bytes = static_cast<std::size_t>(kv_slots) * hd * f;
  make(E.dk_pool, pool_bytes);
  make(E.dv_pool, pool_bytes);
  for (device_buffer* x :
       {&E.q, &E.k, &E.v, &E.o_fa3, &E.o_full, &E.o_prefix, &E.o_window, &E.out_prefix}) {
    make(*x, rows * hd * f);
  }
  for (device_buffer* x : {&E.lse_prefix, &E.lse_window, &E.lse_out}) {
    make(*x, rows * opt.heads * f);
  }
  E.h_q.assign(rows * hd, 0.0f);
  E.h_k.assign(rows * hd, 0.0f);
  E.h_v.assign(rows * hd, 0.0f);
  make(E.accept_len, b * i32);
  make(E.position, rows * i32);
  make(E.out_cache_loc, rows * i32);
  make(E.select_index, b * i32);
  make(E.page_table, b * static_cast<std::size_t>(E.page_columns) * i32);
  make(E.cache_seqlen, b * i32);
  for (device_buffer* x :
       {&E.cu_seqlens_q, &E.cu_seqlens_k, &E.prefix_qo, &E.prefix_kv, &E.full_qo, &E.full_kv}) {
    make(*x, (b + 1) * i32);
  }
  make(E.max_seqlen_k, i32);
  make(E.prefix_indices, static_cast<std::size_t>(E.prefix_capacity) * i32);
  make(E.full_indices, static_cast<std::size_t>(E.full_capacity) * i32);
  make(E.full_last_page, b * i32);
  make(E.guard, extend_guard_count * sizeof(guard_word));
  make(E.scratch, static_cast<std::size_t>(extend_scratch_words(B)) * 8);
}

void sim_engine::impl::admit_draft_kv(request& r) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  r.dk.resize(static_cast<std::size_t>(r.seq_len) * hd);
  r.dv.resize(r.dk.size());
  for (auto& x : r.dk) x = u(es.rng);
  for (auto& x : r.dv) x = u(es.rng);
  const std::int32_t* tokens = req_to_token.data() + static_cast<std::size_t>(r.pool_row) * width;
  for (std::int32_t p = 0; p < r.seq_len; ++p) {  // page by page would do; per token is simpler
    const std::size_t at = static_cast<std::size_t>(p) * hd, bytes = hd * sizeof(float);
    ex->copy_to_device(es.dk_pool.as<float>() + static_cast<std::size_t>(tokens[p]) * hd,
                       r.dk.data() + at, bytes);
    ex->copy_to_device(es.dv_pool.as<float>() + static_cast<std::size_t>(tokens[p]) * hd,
                       r.dv.data() + at, bytes);
  }
}

void sim_engine::impl::extend_round(std::int32_t round, std::int32_t batch, std::int32_t bucket,
                                    bool verify, const std::vector<std::int32_t>& pool,
                                    const std::vector<std::int32_t>& seq,
                                    const std::vector<std::int32_t>& accept_len,
                                    run_report& report) {
  extend_state& E = es;
  extend_stats& st = report.extend;
  const std::int32_t W = E.window, ps = opt.page_size;
  const std::size_t B = static_cast<std::size_t>(batch), rows = B * static_cast<std::size_t>(W);
  // The window's slots (positions seq_len .. seq_len + W - 1 on the request's own pages,
  // extended as needed; the verify step placed the first D), then the draft model's q/k/v.
  for (std::size_t r = 0; r < B; ++r) {
    request& req = requests[static_cast<std::size_t>(pool[r] - 1)];
    const std::int64_t end = static_cast<std::int64_t>(seq[r]) + W;
    while (static_cast<std::int64_t>(req.pages.size()) * ps < end) {
      req.pages.push_back(pages->allocate());
    }
    std::int32_t* tokens = req_to_token.data() + static_cast<std::size_t>(pool[r]) * width;
    for (std::int64_t p = seq[r]; p < end; ++p) {
      tokens[p] =
          static_cast<std::int32_t>(req.pages[static_cast<std::size_t>(p / ps)] * ps + p % ps);
    }
    ex->copy_to_device(
        d_req_to_token.as<std::int32_t>() + static_cast<std::size_t>(pool[r]) * width + seq[r],
        tokens + seq[r], static_cast<std::size_t>(W) * 4);
  }
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::size_t i = 0; i < rows * hd; ++i) {
    E.h_q[i] = u(E.rng);
    E.h_k[i] = u(E.rng);
    E.h_v[i] = u(E.rng);
  }
  const std::size_t io_bytes = rows * hd * sizeof(float);
  ex->copy_to_device(E.q.data(), E.h_q.data(), io_bytes);
  ex->copy_to_device(E.k.data(), E.h_k.data(), io_bytes);
  ex->copy_to_device(E.v.data(), E.h_v.data(), io_bytes);
  std::vector<std::int32_t> accept(static_cast<std::size_t>(bucket), 1);  // padding: 1
  for (std::size_t r = 0; r < B; ++r) accept[r] = accept_len[r];
  ex->copy_to_device(E.accept_len.data(), accept.data(), accept.size() * 4);
  ex->fill_bytes(E.guard.data(), 0, E.guard.size());
  ex->synchronize();

  // The draft model's extend forward: the window's K/V, the metadata, the attention path(s).
  const auto t0 = clock_type::now();
  verify_kv_write_kernel::params w{d_req_to_token.as<std::int32_t>(),
                                   width,
                                   vs.pool_index.as<std::int32_t>(),
                                   vs.seq_len.as<std::int32_t>(),
                                   batch,
                                   W,
                                   hd,
                                   E.k.as<float>(),
                                   E.v.as<float>(),
                                   E.dk_pool.as<float>(),
                                   E.dv_pool.as<float>()};
  launch<verify_kv_write_kernel>(w, static_cast<std::int64_t>(bucket) * W, vs.cuda.kv_write);
  extend_params p;
  p.req_to_token = d_req_to_token.as<std::int32_t>();
  p.req_to_token_stride = width;
  p.pool_rows = opt.max_batch + 1;
  p.req_pool_index = vs.pool_index.as<std::int32_t>();
  p.seq_len = vs.seq_len.as<std::int32_t>();
  p.accept_len = E.accept_len.as<std::int32_t>();
  p.batch = bucket;
  p.real_batch = batch;
  p.extend_tokens = W;
  p.page_size = ps;
  p.max_seq_len = opt.max_context;
  p.slot_limit = kv_slots;
  p.position = E.position.as<std::int32_t>();
  p.out_cache_loc = E.out_cache_loc.as<std::int32_t>();
  p.select_index = E.select_index.as<std::int32_t>();
  if (run_fa3) {
    p.page_table = E.page_table.as<std::int32_t>();
    p.page_stride = p.page_capacity = E.page_columns;
    p.cache_seqlen = E.cache_seqlen.as<std::int32_t>();
    p.cu_seqlens_q = E.cu_seqlens_q.as<std::int32_t>();
    p.cu_seqlens_k = E.cu_seqlens_k.as<std::int32_t>();
    p.max_seqlen_k = E.max_seqlen_k.as<std::int32_t>();
  }
  if (run_csr) {
    p.prefix_qo_indptr = E.prefix_qo.as<std::int32_t>();
    p.prefix_kv_indptr = E.prefix_kv.as<std::int32_t>();
    p.prefix_kv_indices = E.prefix_indices.as<std::int32_t>();
    p.prefix_kv_capacity = extend_prefix_kv_capacity(bucket, opt.max_context);
    p.full_qo_indptr = E.full_qo.as<std::int32_t>();
    p.full_kv_indptr = E.full_kv.as<std::int32_t>();
    p.full_kv_indices = E.full_indices.as<std::int32_t>();
    p.full_kv_capacity = extend_full_kv_capacity(bucket, opt.max_context, W);
    p.full_kv_last_page_len = E.full_last_page.as<std::int32_t>();
  }
  p.guard = E.guard.as<guard_word>();
  p.scratch = E.scratch.as<std::int64_t>();
  run_extend_metadata(*ex, p, /*host_memory=*/false);
  if (round == corrupt_extend_round && batch > 0) {
    // A planted bug: request 0's first key read from another slot (the page table's first
    // column, the full layout's first index), as a stale table would.
    std::int32_t cell = 0;
    if (run_fa3) {
      ex->copy_to_host(&cell, E.page_table.data(), 4);  // synchronous
      cell = static_cast<std::int32_t>((cell + 1) % (kv_slots / ps));
      ex->copy_to_device(E.page_table.data(), &cell, 4);
    }
    if (run_csr) {
      ex->copy_to_host(&cell, E.full_indices.data(), 4);
      cell = static_cast<std::int32_t>((cell + 1) % kv_slots);
      ex->copy_to_device(E.full_indices.data(), &cell, 4);
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(opt.head_dim));
  const std::int64_t cells = static_cast<std::int64_t>(bucket) * W * opt.heads;
  extend_attention_kernel::params a{};
  a.q = E.q.as<float>();
  a.window = W;
  a.heads = opt.heads;
  a.head_dim = opt.head_dim;
  a.scale = scale;
  a.k_pool = E.dk_pool.as<float>();
  a.v_pool = E.dv_pool.as<float>();
  if (run_fa3) {
    a.page_table = E.page_table.as<std::int32_t>();
    a.table_stride = E.page_columns;
    a.page_size = ps;
    a.cache_seqlen = E.cache_seqlen.as<std::int32_t>();
    a.o = E.o_fa3.as<float>();
    launch<extend_attention_kernel>(a, cells, E.cuda.attention);
  }
  if (run_csr) {
    a.page_table = nullptr;
    a.kv_indptr = E.full_kv.as<std::int32_t>();
    a.kv_indices = E.full_indices.as<std::int32_t>();
    a.o = E.o_full.as<float>();
    launch<extend_attention_kernel>(a, cells, E.cuda.attention);
    extend_two_pass_kernel::params t{};
    t.q = E.q.as<float>();
    t.window = W;
    t.heads = opt.heads;
    t.head_dim = opt.head_dim;
    t.scale = scale;
    t.prefix = true;
    t.k = E.dk_pool.as<float>();
    t.v = E.dv_pool.as<float>();
    t.kv_indptr = E.prefix_kv.as<std::int32_t>();
    t.kv_indices = E.prefix_indices.as<std::int32_t>();
    t.o = E.o_prefix.as<float>();
    t.lse = E.lse_prefix.as<float>();
    launch<extend_two_pass_kernel>(t, cells, E.cuda.two_pass);
    t.prefix = false;
    t.k = E.k.as<float>();
    t.v = E.v.as<float>();
    t.o = E.o_window.as<float>();
    t.lse = E.lse_window.as<float>();
    launch<extend_two_pass_kernel>(t, cells, E.cuda.two_pass);
    lse_merge_kernel::params mg{};
    mg.o1 = E.o_prefix.as<float>();
    mg.lse1 = E.lse_prefix.as<float>();
    mg.o2 = E.o_window.as<float>();
    mg.lse2 = E.lse_window.as<float>();
    mg.heads = opt.heads;
    mg.head_dim = opt.head_dim;
    mg.out = E.out_prefix.as<float>();
    mg.out_lse = E.lse_out.as<float>();
    launch<lse_merge_kernel>(mg, cells, cuda.merge);
  }
  ex->synchronize();
  st.seconds.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  ++st.steps;

  guard_word g[extend_guard_count];
  ex->copy_to_host(g, E.guard.data(), sizeof g);
  for (const guard_word& x : g) {
    if (x.violations != 0) {
      throw guard_violation("round " + std::to_string(round) + ", extend step: " + describe(x));
    }
  }
  check_extend_outputs(round, batch, bucket, verify, pool, seq, accept_len, report);

  // The commit: the accepted window tokens' draft K/V are the request's draft K/V at positions
  // seq_len .. seq_len + accept_len - 1 (already at those slots of the draft pool).
  for (std::size_t r = 0; r < B; ++r) {
    request& req = requests[static_cast<std::size_t>(pool[r] - 1)];
    const std::size_t at = r * static_cast<std::size_t>(W) * hd;
    const std::size_t n = static_cast<std::size_t>(accept_len[r]) * hd;
    req.dk.insert(req.dk.end(), E.h_k.begin() + static_cast<std::ptrdiff_t>(at),
                  E.h_k.begin() + static_cast<std::ptrdiff_t>(at + n));
    req.dv.insert(req.dv.end(), E.h_v.begin() + static_cast<std::ptrdiff_t>(at),
                  E.h_v.begin() + static_cast<std::ptrdiff_t>(at + n));
    st.accepted += accept_len[r];
  }
  st.requests += batch;
  st.window_tokens += static_cast<std::int64_t>(rows);
}

}  // namespace specgraph::sim
