// The round loop's engine (tools/sim/round_loop.hpp): set-up, the toy forwards captured into the
// library's graphs, admission of requests (their first round's inputs by the library's
// next_round host twin, as after a prefill) and the ring. The drivers are in
// round_loop_modes.cpp, the checks in round_loop_check.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "specgraph/error.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "specgraph/plan.hpp"
#include "tools/sim/round_loop_impl.hpp"
#include "tools/sim/sim_fa3.hpp"

namespace specgraph::sim::loop {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// The tree's depth (loop_parent): the chain D - 1, else the heap's.
std::int32_t tree_depth(std::int32_t nodes, std::int32_t topk) {
  std::int32_t depth = 0;
  for (std::int32_t i = nodes - 1; i > 0; i = loop_parent(i, topk)) ++depth;
  return depth;
}

void check_options(const loop_options& o) {
  auto in = [](const char* name, std::int64_t v, std::int64_t lo, std::int64_t hi) {
    SPECGRAPH_EXPECTS(
        v >= lo && v <= hi, name,
        std::to_string(v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  in("batch", o.batch, 1, limits::max_batch);
  in("topk", o.topk, 1, 63);
  in("num_steps", o.num_steps, 1, 63);
  in("page_size", o.page_size, 1, limits::max_page_size);
  in("head_dim", o.head_dim, 1, max_head_dim);
  in("heads", o.heads, 1, 64);
  in("min_context", o.min_context, 1, o.max_context);
  in("max_context", o.max_context, 1, 1 << 20);
  in("rounds", o.rounds, 1, 1 << 20);
  in("rounds_per_launch", o.rounds_per_launch, 1, o.rounds);
  in("verify_tokens", o.verify_tokens, 1,
     std::min<std::int64_t>(max_draft_tokens, 1 + static_cast<std::int64_t>(o.topk) * o.num_steps));
  const std::int32_t depth = tree_depth(o.verify_tokens, o.topk);
  SPECGRAPH_EXPECTS(depth <= o.num_steps, "verify_tokens",
                    std::to_string(o.verify_tokens) + " nodes make the toy tree " +
                        std::to_string(depth) + " deep, more than num_steps " +
                        std::to_string(o.num_steps) + "; lower it");
  in("verify_every", o.verify_every, 1, 1 << 20);
  in("stop_every", o.stop_every, 0, 1 << 30);
  in("max_new_tokens", o.max_new_tokens, 0, 1 << 30);
  in("short_ring", o.short_ring, 0, o.rounds_per_launch);
}

}  // namespace

engine::engine(executor& e, const loop_options& o, bool dm)
    : ex(e), opt(o), device_mode(dm), rng(o.seed) {
  check_options(o);
  S = o.num_steps + 1;
  D = o.verify_tokens;
  hd = o.heads * o.head_dim;
  stride = o.num_steps;
  for (const std::int32_t b : default_buckets(limits::max_batch)) {
    if (b >= o.batch) {
      bucket_ = b;
      break;
    }
  }
  max_rows = bucket_ * o.topk;
  pool_rows = bucket_ + 1;  // row 0: the padded rows'
  const std::int64_t ps = o.page_size;
  reserve = next_round_reserve(o.topk, o.num_steps, D, o.page_size);
  // A row commits at most S tokens a round and keeps ceil_page(seq_len + R) allocated.
  width = ceil_div(o.max_context + static_cast<std::int64_t>(o.rounds) * S + reserve, ps) * ps + ps;
  SPECGRAPH_EXPECTS(width <= limits::max_context_len, "rounds",
                    std::to_string(o.rounds) + " rounds grow rows to " + std::to_string(width) +
                        " positions, above " + std::to_string(limits::max_context_len));
  pages_per_round = static_cast<std::int64_t>(bucket_) * ceil_div(S, ps);
  tail_pairs = o.topk > 1 && ps > 1 ? (o.topk - 1) * (ps - 1) : 0;
  // Pages: page 0 is the padded rows' dummy; admissions (with room for every request's
  // replacement before its predecessor's pages come back), then the ring's whole run.
  const std::int64_t per_request = ceil_div(o.max_context + reserve, ps) + 1;
  const std::int64_t admission = 2 * bucket_ * per_request;
  const std::int64_t ring_total = pages_per_round * o.rounds;
  const std::int64_t pages = 1 + admission + ring_total;
  kv_slots = pages * ps;
  // The KV pool, req_to_token (host and device) and the round log (N rounds' draft outputs,
  // device and the host's copy), in double: no product can overflow.
  const double bytes =
      2.0 * static_cast<double>(kv_slots) * hd * 4 +
      4.0 * static_cast<double>(pool_rows) * static_cast<double>(width) * 2 +
      2.0 * o.rounds_per_launch * static_cast<double>(bucket_) * o.topk * o.num_steps * hd * 4;
  SPECGRAPH_EXPECTS(bytes <= 16.0 * (1ULL << 30), "rounds",
                    "the KV pool, tables and round log would take " +
                        std::to_string(bytes / (1 << 20)) +
                        " MiB (above 16 GiB); lower rounds, rounds_per_launch, batch, "
                        "max_context or heads");
  std::vector<std::int32_t> perm(static_cast<std::size_t>(pages - 1));
  std::iota(perm.begin(), perm.end(), 1);
  std::mt19937_64 page_rng(rng());
  std::shuffle(perm.begin(), perm.end(), page_rng);  // a fragmented pool
  admit_pages.assign(perm.begin(), perm.begin() + admission);
  ring_pages.assign(perm.begin() + admission, perm.end());

  draft_config c;
  c.max_batch = bucket_;
  c.buckets = {bucket_};
  c.topk = o.topk;
  c.num_steps = o.num_steps;
  c.slot_stride = stride;
  c.page_size = o.page_size;
  c.max_context_len = static_cast<std::int32_t>(width);
  c.pool_rows = pool_rows;
  c.kv_slots = kv_slots;
  c.verify_tokens = D;
  c.draft_extend = true;
  c.round_on_device = true;
  c.max_stop_tokens = 1;
  c.formats = metadata_formats::fa3;
  h_r2t.assign(static_cast<std::size_t>(pool_rows * width), 0);
  d_r2t = device_buffer(ex, h_r2t.size() * 4);
  ex.fill_bytes(d_r2t.data(), 0, d_r2t.size());
  rt_ = std::make_unique<draft_runtime>(ex, c, engine_tables{d_r2t.as<std::int32_t>(), width});

  auto zeroed = [&](std::size_t bytes_) {
    device_buffer b(ex, std::max<std::size_t>(bytes_, 4));
    ex.fill_bytes(b.data(), 0, b.size());
    return b;
  };
  h_salt.assign(static_cast<std::size_t>(pool_rows), 0);
  d_salt = zeroed(h_salt.size() * 8);
  k_pool = zeroed(static_cast<std::size_t>(kv_slots) * hd * 4);
  v_pool = zeroed(static_cast<std::size_t>(kv_slots) * hd * 4);
  const std::size_t src = static_cast<std::size_t>(max_rows) * o.num_steps * hd * 4;
  q_src = zeroed(src);
  k_src = zeroed(src);
  v_src = zeroed(src);
  const std::size_t row_elems = static_cast<std::size_t>(max_rows) * hd * 4;
  const std::size_t row_heads = static_cast<std::size_t>(max_rows) * o.heads * 4;
  o_prefix = zeroed(row_elems);
  o_expand = zeroed(row_elems);
  lse_prefix = zeroed(row_heads);
  lse_expand = zeroed(row_heads);
  out = zeroed(row_elems * o.num_steps);
  out_lse = zeroed(row_heads * o.num_steps);
  const std::int64_t capacity = pages_per_round * o.rounds_per_launch;
  ring = zeroed(static_cast<std::size_t>(capacity) * 4);
  host_ring.assign(static_cast<std::size_t>(capacity), 0);
  ring_tail = zeroed(8);
  counter = zeroed(4);
  log_int = zeroed(static_cast<std::size_t>(o.rounds_per_launch) *
                   (bucket_ * (S + loop_log_kernel::row_fields) + 1) * 4);
  log_out = zeroed(static_cast<std::size_t>(o.rounds_per_launch) * o.num_steps * row_elems);
  admit_pool = zeroed(4);
  admit_begin = zeroed(4);
  admit_count = zeroed(4);
  admit_real = zeroed(4);
  const std::int32_t one = 1;
  ex.copy_to_device(admit_real.data(), &one, 4);
  seq.assign(static_cast<std::size_t>(bucket_), 1);
  pool.assign(static_cast<std::size_t>(bucket_), 0);
  allocated.assign(static_cast<std::size_t>(bucket_), 0);
  next_seq.assign(static_cast<std::size_t>(bucket_), -1);
  if (o.max_new_tokens > 0) left.assign(static_cast<std::size_t>(bucket_), 0);
  slots.assign(static_cast<std::size_t>(bucket_) * o.topk * stride, 0);
  tail.assign(static_cast<std::size_t>(std::max<std::int64_t>(1, bucket_ * tail_pairs * 2)), -1);
  corrupt_skip = device_mode ? o.corrupt_round : -1;
  host_executor = std::string(ex.name()) == "host";
  set_forwards();
}

void engine::set_forwards() {
  rt_->set_forward([this](const step_view& v) { draft_forward(v); });
  rt_->set_verify_forward([this](const verify_view& v) { verify_forward(v); });
  rt_->set_extend_forward([this](const extend_view& v) { extend_forward(v); });
}

// The draft model's step: [the engine's prefix-tail copies, step 0], the step's q/k/v, its K/V
// at the draft slots, then FA3's two passes (the prefix pages, the branch's pages) merged into
// out[step] (the sim's kernels, tools/sim/sim_kernels.hpp).
void engine::draft_forward(const step_view& v) {
  const std::int32_t s = v.step;
  if (s == 0 && tail_pairs > 0) {
    loop_tail_copy_kernel::params t{};
    t.pairs = rt_->buffers().round(v.bucket).next.tail_copy;
    t.head_elems = hd;
    t.k_pool = k_pool.as<float>();
    t.v_pool = v_pool.as<float>();
    t.counter = counter.as<std::int32_t>();
    t.skip_round = corrupt_skip;
    launch_rows<loop_tail_copy_kernel>(ex, t, static_cast<std::int64_t>(v.bucket) * tail_pairs,
                                       lcuda.tail_copy);
  }
  loop_qkv_kernel::params g{
      v.real_batch,  v.seq_len, v.req_pool_index,  d_salt.as<std::uint64_t>(), opt.topk,         s,
      opt.num_steps, hd,        q_src.as<float>(), k_src.as<float>(),          v_src.as<float>()};
  launch_rows<loop_qkv_kernel>(ex, g, v.rows, lcuda.qkv);
  draft_kv_write(ex, cuda, v, *this);
  fa3_draft_attention(ex, cuda, v, fa3_buffers_of(*this));
}

// The target's verify forward, as far as acceptance reads it: the toy tree into the round
// section (the verify metadata the library built before it is not read by the toy).
void engine::verify_forward(const verify_view& v) {
  const round_view rv = rt_->buffers().round(v.bucket);
  loop_tree_kernel::params t{v.seq_len, v.req_pool_index, d_salt.as<std::uint64_t>(),
                             rv.parent, rv.draft_token,   rv.target_predict,
                             D,         opt.topk,         opt.stop_every};
  launch_rows<loop_tree_kernel>(ex, t, v.bucket, lcuda.tree);
}

// The draft model's extend forward: the committed tokens' K/V at their req_to_token slots
// (positions [seq_len, seq_len + accept_len) of each real row), then the round log.
void engine::extend_forward(const extend_view& v) {
  loop_commit_kv_kernel::params c{v.real_batch,
                                  v.req_pool_index,
                                  v.seq_len,
                                  v.accept_len,
                                  d_r2t.as<std::int32_t>(),
                                  width,
                                  d_salt.as<std::uint64_t>(),
                                  hd,
                                  k_pool.as<float>(),
                                  v_pool.as<float>()};
  launch_rows<loop_commit_kv_kernel>(ex, c, v.bucket, lcuda.commit_kv);
  loop_out_log_kernel::params o{counter.as<std::int32_t>(),
                                opt.rounds_per_launch,
                                static_cast<std::int64_t>(opt.num_steps) * max_rows * hd,
                                hd,
                                out.as<float>(),
                                log_out.as<float>()};
  launch_rows<loop_out_log_kernel>(ex, o, static_cast<std::int64_t>(opt.num_steps) * max_rows,
                                   lcuda.out_log);
  const round_view rv = rt_->buffers().round(v.bucket);
  loop_log_kernel::params l{counter.as<std::int32_t>(),
                            opt.rounds_per_launch,
                            v.bucket,
                            S,
                            rv.accept.accept_index,
                            rv.accept.accept_length,
                            rv.accept.bonus,
                            rv.commit.finished,
                            v.seq_len,
                            rv.commit.emit_len,
                            opt.max_new_tokens > 0 ? rv.max_new_tokens_left : nullptr,
                            rv.stall,
                            log_int.as<std::int32_t>()};
  launch_rows<loop_log_kernel>(ex, l, 1, lcuda.log);
}

}  // namespace specgraph::sim::loop
