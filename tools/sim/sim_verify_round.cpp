// The simulated engine's verify step, after the draft steps of every round (docs/verify.md):
// each request's draft tree (sim_tree.hpp) goes through the target in one forward, with tree
// attention over its prefix and its D tree tokens read through the verify metadata that
// launch_verify_metadata writes on the engine's executor: the FA3 cascade (prefix table, expand
// rows, log-sum-exp merge) and/or FlashInfer's masked prefill over kv_indptr / kv_indices and the
// packed mask. The accepted path (greedy, by the toy model's logits over the forward's outputs)
// is committed: its K/V moved to the positions after the prefix, seq_len + accepted + 1.
#include <chrono>

#include "specgraph/error.hpp"
#include "specgraph/verify_metadata.hpp"
#include "tools/sim/sim_engine.hpp"
#include "tools/sim/sim_engine_impl.hpp"

namespace specgraph::sim {
namespace {

constexpr double draft_noise = 0.7;  // the draft model's logit noise (sim_tree.hpp)

template <class T>
std::vector<T> download(executor& ex, const device_buffer& b) {
  std::vector<T> v(b.size() / sizeof(T));
  ex.copy_to_host(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace

void sim_engine::impl::verify_round(std::int32_t round, std::int32_t batch, std::int32_t depth,
                                    std::int32_t bucket, bool verify, run_report& report) {
  verify_state& S = vs;
  verify_stats& st = report.verify;
  const std::int32_t D = std::min(opt.verify_tokens, 1 + opt.topk * depth);
  const std::int32_t ps = opt.page_size;
  const std::size_t B = static_cast<std::size_t>(batch), rows = B * static_cast<std::size_t>(D);

  // Trees, the engine's mask and the tree tokens' slots (positions seq_len .. seq_len + D - 1 on
  // the request's own pages, extended as needed), then the target's q/k/v of the tree tokens.
  std::vector<draft_proposal> drafts;
  std::vector<draft_tree> trees;
  std::vector<std::uint8_t> mask;
  std::vector<std::int32_t> pool(static_cast<std::size_t>(bucket), 0),
      seq(static_cast<std::size_t>(bucket), 1);  // padding: seq_len 1 on pool row 0
  for (std::size_t r = 0; r < B; ++r) {
    const std::int32_t row = round_rows[r];
    request& req = requests[static_cast<std::size_t>(row - 1)];
    pool[r] = row;
    seq[r] = req.seq_len;
    const std::int32_t root = S.root_token[static_cast<std::size_t>(row)];
    drafts.push_back(propose(S.lm, root, opt.topk, depth, draft_noise, S.rng));
    trees.push_back(build_tree(drafts.back(), root, D));
    for (std::int32_t i = 0; i < D; ++i) {
      mask.insert(mask.end(), static_cast<std::size_t>(req.seq_len), 1);
      for (std::int32_t j = 0; j < D; ++j) mask.push_back(trees.back().attends(i, j) ? 1 : 0);
    }
    const std::int64_t end = static_cast<std::int64_t>(req.seq_len) + D;
    while (static_cast<std::int64_t>(req.pages.size()) * ps < end) {
      req.pages.push_back(pages->allocate());
    }
    std::int32_t* tokens = req_to_token.data() + static_cast<std::size_t>(row) * width;
    for (std::int64_t p = req.seq_len; p < end; ++p) {
      tokens[p] =
          static_cast<std::int32_t>(req.pages[static_cast<std::size_t>(p / ps)] * ps + p % ps);
    }
    ex->copy_to_device(
        d_req_to_token.as<std::int32_t>() + static_cast<std::size_t>(row) * width + req.seq_len,
        tokens + req.seq_len, static_cast<std::size_t>(D) * 4);
  }
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::size_t i = 0; i < rows * hd; ++i) {
    S.h_q[i] = u(S.rng);
    S.h_k[i] = u(S.rng);
    S.h_v[i] = u(S.rng);
  }
  const std::size_t io_bytes = rows * hd * sizeof(float);
  ex->copy_to_device(S.q.data(), S.h_q.data(), io_bytes);
  ex->copy_to_device(S.k.data(), S.h_k.data(), io_bytes);
  ex->copy_to_device(S.v.data(), S.h_v.data(), io_bytes);
  ex->copy_to_device(S.pool_index.data(), pool.data(), pool.size() * 4);
  ex->copy_to_device(S.seq_len.data(), seq.data(), seq.size() * 4);
  ex->copy_to_device(S.mask.data(), mask.data(), mask.size());
  if (opt.trace_verify) {  // every output poisoned: the trace shows which cells the launch wrote
    for (device_buffer* b :
         {&S.prefix_table, &S.prefix_cache, &S.prefix_q, &S.prefix_k, &S.expand_table,
          &S.expand_cache, &S.expand_q, &S.expand_k, &S.qo, &S.kv_indptr, &S.kv_indices,
          &S.last_page, &S.mask_indptr, &S.packed_indptr}) {
      const std::vector<std::int32_t> poison(b->size() / 4, verify_poison);
      ex->copy_to_device(b->data(), poison.data(), b->size());
    }
    ex->fill_bytes(S.packed.data(), verify_poison_byte, S.packed.size());
  }
  ex->fill_bytes(S.guard.data(), 0, S.guard.size());
  ex->synchronize();
  std::vector<std::int32_t> rtt_before;  // the trace's: the commit may replace a request's row
  if (opt.trace_verify) rtt_before = req_to_token;

  // The target's forward: K/V of the tree tokens, the metadata, the attention path(s).
  const auto t0 = clock_type::now();
  verify_kv_write_kernel::params w{d_req_to_token.as<std::int32_t>(),
                                   width,
                                   S.pool_index.as<std::int32_t>(),
                                   S.seq_len.as<std::int32_t>(),
                                   batch,
                                   D,
                                   hd,
                                   S.k.as<float>(),
                                   S.v.as<float>(),
                                   k_pool.as<float>(),
                                   v_pool.as<float>()};
  launch<verify_kv_write_kernel>(w, static_cast<std::int64_t>(bucket) * D, S.cuda.kv_write);
  verify_params p;
  p.req_to_token = d_req_to_token.as<std::int32_t>();
  p.req_to_token_stride = width;
  p.pool_rows = opt.max_batch + 1;
  p.req_pool_index = S.pool_index.as<std::int32_t>();
  p.seq_len = S.seq_len.as<std::int32_t>();
  p.batch = bucket;
  p.real_batch = batch;
  p.draft_tokens = D;
  p.page_size = ps;
  p.max_seq_len = opt.max_context;
  p.custom_mask = S.mask.as<std::uint8_t>();
  p.mask_cells = static_cast<std::int64_t>(mask.size());
  p.slot_limit = kv_slots;
  if (run_fa3) {
    p.prefix_page_table = S.prefix_table.as<std::int32_t>();
    p.prefix_stride = S.prefix_columns;
    p.prefix_capacity = S.prefix_columns;
    p.prefix_cache_seqlen = S.prefix_cache.as<std::int32_t>();
    p.prefix_cu_seqlens_q = S.prefix_q.as<std::int32_t>();
    p.prefix_cu_seqlens_k = S.prefix_k.as<std::int32_t>();
    p.expand_page_table = S.expand_table.as<std::int32_t>();
    p.expand_stride = S.max_tokens;
    p.expand_cache_seqlen = S.expand_cache.as<std::int32_t>();
    p.expand_cu_seqlens_q = S.expand_q.as<std::int32_t>();
    p.expand_cu_seqlens_k = S.expand_k.as<std::int32_t>();
  }
  if (run_csr) {
    p.qo_indptr = S.qo.as<std::int32_t>();
    p.kv_indptr = S.kv_indptr.as<std::int32_t>();
    p.kv_indices = S.kv_indices.as<std::int32_t>();
    p.kv_indices_capacity = S.kv_capacity;
    p.kv_last_page_len = S.last_page.as<std::int32_t>();
    p.mask_indptr = S.mask_indptr.as<std::int32_t>();
    p.packed_mask = S.packed.as<std::uint8_t>();
    p.packed_mask_capacity = S.packed_capacity;
    p.packed_mask_indptr = S.packed_indptr.as<std::int32_t>();
  }
  p.guard = S.guard.as<guard_word>();
  p.scratch = S.scratch.as<std::int64_t>();
  launch_verify_metadata(*ex, p);
  if (round == S.corrupt_mask_round && run_csr && D >= 2) {
    // Cell (1, 0) of request 0: query 1's bit for the root, column seq_len.
    const std::int64_t bit = static_cast<std::int64_t>(seq[0]) + D + seq[0];
    std::uint8_t byte = 0;
    ex->copy_to_host(&byte, S.packed.as<std::uint8_t>() + bit / 8, 1);  // synchronous
    byte = static_cast<std::uint8_t>(byte & ~(1u << (bit % 8)));
    ex->copy_to_device(S.packed.as<std::uint8_t>() + bit / 8, &byte, 1);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(opt.head_dim));
  const std::int64_t cells = static_cast<std::int64_t>(bucket) * D * opt.heads;
  if (run_fa3) {
    paged_attention_kernel::params a{};
    a.q = S.q.as<float>();
    a.steps = 1;
    a.heads = opt.heads;
    a.head_dim = opt.head_dim;
    a.scale = scale;
    a.k_pool = k_pool.as<float>();
    a.v_pool = v_pool.as<float>();
    // Prefix: D queries per request over its pages, the partial last page included.
    a.page_table = S.prefix_table.as<std::int32_t>();
    a.table_stride = S.prefix_columns;
    a.seqlen = S.prefix_cache.as<std::int32_t>();
    a.rows_per_table_row = D;
    a.page_size = ps;
    a.o = S.o_prefix.as<float>();
    a.lse = S.lse_prefix.as<float>();
    launch<paged_attention_kernel>(a, cells, cuda.attention);
    // Expand: one row per query over the tree slots it attends, read at page size 1.
    a.page_table = S.expand_table.as<std::int32_t>();
    a.table_stride = S.max_tokens;
    a.seqlen = S.expand_cache.as<std::int32_t>();
    a.rows_per_table_row = 1;
    a.page_size = 1;
    a.o = S.o_expand.as<float>();
    a.lse = S.lse_expand.as<float>();
    launch<paged_attention_kernel>(a, cells, cuda.attention);
    lse_merge_kernel::params mg{};
    mg.o1 = S.o_prefix.as<float>();
    mg.lse1 = S.lse_prefix.as<float>();
    mg.o2 = S.o_expand.as<float>();
    mg.lse2 = S.lse_expand.as<float>();
    mg.heads = opt.heads;
    mg.head_dim = opt.head_dim;
    mg.out = S.out.as<float>();
    mg.out_lse = S.out_lse.as<float>();
    launch<lse_merge_kernel>(mg, cells, cuda.merge);
  }
  if (run_csr) {
    masked_prefill_kernel::params c{S.q.as<float>(),
                                    opt.heads,
                                    opt.head_dim,
                                    scale,
                                    k_pool.as<float>(),
                                    v_pool.as<float>(),
                                    S.qo.as<std::int32_t>(),
                                    bucket,
                                    S.kv_indptr.as<std::int32_t>(),
                                    S.kv_indices.as<std::int32_t>(),
                                    S.packed.as<std::uint8_t>(),
                                    S.packed_indptr.as<std::int32_t>(),
                                    S.out_csr.as<float>()};
    launch<masked_prefill_kernel>(c, cells, S.cuda.masked_prefill);
  }
  ex->synchronize();
  st.seconds.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  ++st.steps;

  guard_word g[verify_guard_count];
  ex->copy_to_host(g, S.guard.data(), sizeof g);
  for (const guard_word& x : g) {
    if (x.violations != 0) {
      throw guard_violation("round " + std::to_string(round) + ", verify step: " + describe(x));
    }
  }
  std::vector<float> fa3(run_fa3 ? rows * hd : 0), csr(run_csr ? rows * hd : 0);
  if (run_fa3) ex->copy_to_host(fa3.data(), S.out.data(), fa3.size() * sizeof(float));
  if (run_csr) ex->copy_to_host(csr.data(), S.out_csr.data(), csr.size() * sizeof(float));
  std::vector<double> reference;
  check_verify_outputs(round, batch, D, bucket, verify, mask, fa3, csr, reference, report);

  // Acceptance by the target's logits over the forward's outputs, then the commit: the accepted
  // tokens' K/V move to positions seq_len + 1 .. seq_len + accepted (the root's is in place).
  const std::vector<float>& out_used = run_fa3 ? fa3 : csr;
  std::vector<std::int32_t> accepted(B), count(B, 0);
  std::vector<std::int64_t> src(rows, 0), dst(rows, 0);
  std::vector<double> logits;
  std::vector<std::vector<std::int32_t>> paths(B);
  std::vector<std::int32_t> bonus(B);
  for (std::size_t r = 0; r < B; ++r) {
    const draft_tree& tree = trees[r];
    std::vector<std::int32_t> target(static_cast<std::size_t>(D));
    for (std::int32_t i = 0; i < D; ++i) {
      S.lm.logits(tree.token[static_cast<std::size_t>(i)],
                  out_used.data() + (r * D + static_cast<std::size_t>(i)) * hd, logits);
      target[static_cast<std::size_t>(i)] = argmax(logits);
    }
    paths[r] = accept_greedy(tree, target);
    bonus[r] = target[static_cast<std::size_t>(paths[r].empty() ? 0 : paths[r].back())];
    accepted[r] = static_cast<std::int32_t>(paths[r].size());
    const std::int32_t* tokens = req_to_token.data() + static_cast<std::size_t>(pool[r]) * width;
    for (std::size_t k = 0; k < paths[r].size(); ++k) {
      src[r * D + k] = tokens[seq[r] + paths[r][k]];
      dst[r * D + k] = tokens[seq[r] + 1 + static_cast<std::int64_t>(k)];
    }
    count[r] = accepted[r];
  }
  ex->copy_to_device(S.commit_count.data(), count.data(), B * 4);
  ex->copy_to_device(S.commit_src.data(), src.data(), rows * 8);
  ex->copy_to_device(S.commit_dst.data(), dst.data(), rows * 8);
  verify_commit_kernel::params cm{S.commit_count.as<std::int32_t>(),
                                  S.commit_src.as<std::int64_t>(),
                                  S.commit_dst.as<std::int64_t>(),
                                  D,
                                  hd,
                                  k_pool.as<float>(),
                                  v_pool.as<float>()};
  launch<verify_commit_kernel>(cm, batch, S.cuda.commit);
  ex->synchronize();
  if (run_extend) {  // the draft model's extend over the window (sim_extend_round.cpp)
    std::vector<std::int32_t> accept_len(B);
    for (std::size_t r = 0; r < B; ++r) accept_len[r] = 1 + accepted[r];  // the root included
    extend_round(round, batch, bucket, verify, pool, seq, accept_len, report);
  }

  std::vector<std::int32_t> after(B);
  for (std::size_t r = 0; r < B; ++r) {
    const std::int32_t row = pool[r];
    request& req = requests[static_cast<std::size_t>(row - 1)];
    auto append = [&](std::int32_t node) {
      const std::size_t at = (r * D + static_cast<std::size_t>(node)) * hd;
      req.k.insert(req.k.end(), S.h_k.begin() + static_cast<std::ptrdiff_t>(at),
                   S.h_k.begin() + static_cast<std::ptrdiff_t>(at + hd));
      req.v.insert(req.v.end(), S.h_v.begin() + static_cast<std::ptrdiff_t>(at),
                   S.h_v.begin() + static_cast<std::ptrdiff_t>(at + hd));
    };
    append(0);
    for (const std::int32_t node : paths[r]) append(node);
    req.seq_len += 1 + accepted[r];
    const std::size_t keep = static_cast<std::size_t>((req.seq_len + ps - 1) / ps);
    while (req.pages.size() > keep) {
      pages->release(req.pages.back());
      req.pages.pop_back();
    }
    S.root_token[static_cast<std::size_t>(row)] = bonus[r];
    after[r] = req.seq_len;
    if (req.seq_len > opt.max_context) {  // finished: a new request takes the pool row
      retire(row);
      admit(row, S.rng);
      S.root_token[static_cast<std::size_t>(row)] = static_cast<std::int32_t>(S.rng() % S.lm.vocab);
      after[r] = -1;
      ++st.finished;
    }
    st.accepted += accepted[r];
  }
  st.requests += batch;
  st.tree_tokens += static_cast<std::int64_t>(rows);

  if (!opt.trace_verify) return;
  verify_trace& t = S.trace;
  t = verify_trace{};
  t.round = round;
  t.batch = batch;
  t.bucket = bucket;
  t.depth = depth;
  t.tokens = D;
  t.page_size = ps;
  t.max_seq_len = opt.max_context;
  t.width = width;
  t.pool_rows = opt.max_batch + 1;
  t.topk = opt.topk;
  t.pool_index = pool;
  t.seq_len = seq;
  t.mask = mask;
  for (std::size_t r = 0; r < B; ++r) {
    t.root_token.push_back(trees[r].token[0]);
    t.draft_token.insert(t.draft_token.end(), drafts[r].token.begin(), drafts[r].token.end());
    t.draft_score.insert(t.draft_score.end(), drafts[r].score.begin(), drafts[r].score.end());
    t.tree_parent.insert(t.tree_parent.end(), trees[r].parent.begin(), trees[r].parent.end());
    t.tree_token.insert(t.tree_token.end(), trees[r].token.begin(), trees[r].token.end());
  }
  t.reference = reference;
  t.output = out_used;
  t.accepted = accepted;
  t.seq_len_after = after;
  t.lm_bigram = S.lm.bigram;
  t.lm_head = S.lm.head;
  t.vocab = S.lm.vocab;
  t.prefix_stride = S.prefix_columns;
  t.expand_stride = S.max_tokens;
  t.prefix_capacity = S.prefix_columns;
  t.kv_capacity = S.kv_capacity;
  t.packed_capacity = S.packed_capacity;
  t.prefix_table = download<std::int32_t>(*ex, S.prefix_table);
  t.prefix_cache_seqlen = download<std::int32_t>(*ex, S.prefix_cache);
  t.prefix_cu_q = download<std::int32_t>(*ex, S.prefix_q);
  t.prefix_cu_k = download<std::int32_t>(*ex, S.prefix_k);
  t.expand_table = download<std::int32_t>(*ex, S.expand_table);
  t.expand_cache_seqlen = download<std::int32_t>(*ex, S.expand_cache);
  t.expand_cu_q = download<std::int32_t>(*ex, S.expand_q);
  t.expand_cu_k = download<std::int32_t>(*ex, S.expand_k);
  t.qo_indptr = download<std::int32_t>(*ex, S.qo);
  t.kv_indptr = download<std::int32_t>(*ex, S.kv_indptr);
  t.kv_indices = download<std::int32_t>(*ex, S.kv_indices);
  t.kv_last_page_len = download<std::int32_t>(*ex, S.last_page);
  t.mask_indptr = download<std::int32_t>(*ex, S.mask_indptr);
  t.packed_indptr = download<std::int32_t>(*ex, S.packed_indptr);
  t.packed = download<std::uint8_t>(*ex, S.packed);
  t.req_to_token = std::move(rtt_before);
}

}  // namespace specgraph::sim
