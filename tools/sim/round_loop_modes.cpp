// The round loop's two drivers (tools/sim/round_loop.hpp): the device loop (N launches of the
// device-round graph back to back, then one host step) and the host-driven loop (every round
// the step, verify and extend graphs with the library's host twins in between); the host step
// both share (the log read, the checks, finished requests replaced); run_round_loop.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/error.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "tools/sim/round_loop_impl.hpp"
#include "tools/sim/sim_engine.hpp"

namespace specgraph::sim::loop {
namespace {

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

void add_counters(loop_mode_stats& s, const executor_counters& a, const executor_counters& b) {
  s.graph_launches += b.graph_launches - a.graph_launches;
  s.kernel_launches += b.kernel_launches - a.kernel_launches;
  s.synchronizations += b.synchronizations - a.synchronizations;
  s.copies_to_host += b.copies_to_host - a.copies_to_host;
  s.copies_to_device += b.copies_to_device - a.copies_to_device;
}

template <class T>
std::vector<T> slice(const T* p, std::int64_t n) {
  return std::vector<T>(p, p + n);
}

}  // namespace

// The round log's counter at 0: round k's log lands in slot k % N whatever the capture ran.
void engine::reset_counter() {
  const std::int32_t zero = 0;
  ex.copy_to_device(counter.data(), &zero, 4);
}

void engine::run(std::vector<loop_round>& rounds, loop_mode_stats& stats, loop_report& rep) {
  stats.mode = device_mode ? "device loop" : "host-driven";
  if (device_mode) {
    run_device(rounds, stats, rep);
  } else {
    run_host(rounds, stats, rep);
  }
}

// N rounds per host step: publish the ring, launch_device_rounds(N), read the log.
void engine::run_device(std::vector<loop_round>& rounds, loop_mode_stats& stats, loop_report& rep) {
  after_verify_inputs in;
  in.req_to_token = d_r2t.as<std::int32_t>();
  in.req_to_token_stride = width;
  in.ring = ring.as<std::int32_t>();
  in.ring_capacity = pages_per_round * opt.rounds_per_launch;
  in.ring_tail = ring_tail.as<std::int64_t>();
  in.stop_token_count = 1;
  in.budget = !left.empty();
  rt_->bind_round_ring(in);
  (void)rt_->capture();
  reset_counter();
  for (std::int32_t r = 0; r < opt.batch; ++r) admit(r);
  device_secs = 0;  // the first requests' prefill is outside the timed rounds
  stage_all();
  const round_view v = rt_->buffers().round(bucket_);
  const std::int64_t zero64 = 0;
  const std::int32_t zero = 0, stop = loop_stop_token;
  ex.copy_to_device(v.ring_head, &zero64, 8);
  ex.copy_to_device(v.stall, &zero, 4);
  ex.copy_to_device(v.stop_token_ids, &stop, 4);
  ex.synchronize();
  for (std::int32_t first = 0; first < opt.rounds; first += opt.rounds_per_launch) {
    const std::int32_t n = std::min(opt.rounds_per_launch, opt.rounds - first);
    const executor_counters before = ex.counters();
    const auto t0 = clock_type::now();
    publish_ring(pages_per_round * (opt.short_ring > 0 ? opt.short_ring : n));
    device_work(false, [&] { rt_->launch_device_rounds(n); });
    // The host step: everything below reads the N rounds' results.
    device_work(true, [&] { ex.synchronize(); });
    const std::int64_t b = bucket_, per_round = b * (S + loop_log_kernel::row_fields) + 1;
    std::vector<std::int32_t> log(static_cast<std::size_t>(n * per_round));
    ex.copy_to_host(log.data(), log_int.data(), log.size() * 4);
    ex.copy_to_host(&ring_head_seen, v.ring_head, 8);
    // A short ring: the last round's stall word (the engine's to read at its step).
    std::int32_t stall = 0;
    if (opt.short_ring > 0) ex.copy_to_host(&stall, v.stall, 4);
    for (std::int32_t i = 0; i < n; ++i) {
      const std::int32_t k = first + i;
      const std::int32_t* at = log.data() + (k % opt.rounds_per_launch) * per_round;
      loop_round rec;
      rec.accept_index = slice(at, b * S);
      rec.accept_length = slice(at + b * S, b);
      rec.bonus = slice(at + b * S + b, b);
      rec.finished = slice(at + b * S + 2 * b, b);
      rec.seq_len = slice(at + b * S + 3 * b, b);
      rec.emit_len = slice(at + b * S + 4 * b, b);
      rec.stalled = at[per_round - 1] != 0;
      if (!left.empty()) {
        // Before the round: as the host staged it (the step's first round) or the last left it.
        rec.budget = i == 0 ? left : rounds.back().left;
        rec.left = slice(at + b * S + 5 * b, b);
      }
      rounds.push_back(std::move(rec));
    }
    add_counters(stats, before, ex.counters());
    stats.seconds += since(t0);
    // After a stall: the engine's rerun of the next round once it has refilled the ring and
    // cleared the word (docs/round-graphs.md section 4).
    const auto rerun = [&] {
      publish_ring(pages_per_round * opt.short_ring);
      ex.copy_to_device(v.stall, &zero, 4);
      launch_next_round(ex, after_verify_params(v, in).next);
    };
    host_step(rounds, first, n, stats, rep, v.commit.finished,
              stall != 0 ? std::function<void()>(rerun) : nullptr);
  }
  std::vector<guard_word> words = rt_->read_round_guards();
  expect_stalls(rt_->plan(), words, stats.reruns);
  raise_guard_violations(rt_->plan(), words, bucket_, "device loop");
}

// Every round from the host: stage, the draft steps' graphs, stage_verify + the verify graph,
// the tree read back, the library's host twins (acceptance, the commit), stage_extend + the
// extend graph, the next round's twin, the table written back.
void engine::run_host(std::vector<loop_round>& rounds, loop_mode_stats& stats, loop_report& rep) {
  const plan& p = rt_->plan();
  (void)rt_->capture();
  reset_counter();
  for (std::int32_t r = 0; r < opt.batch; ++r) admit(r);
  device_secs = 0;  // the first requests' prefill is outside the timed rounds
  std::vector<unsigned char> arena(p.total_bytes + arena_alignment, 0);
  const auto base = reinterpret_cast<std::uintptr_t>(arena.data());
  const draft_buffers h(
      p, arena.data() + (arena_alignment - base % arena_alignment) % arena_alignment);
  const round_view hv = h.round(bucket_);
  const round_view dv = rt_->buffers().round(bucket_);
  *hv.stop_token_ids = loop_stop_token;
  *hv.ring_head = 0;
  *hv.stall = 0;
  *h.real_batch() = opt.batch;
  after_verify_inputs hin;
  hin.req_to_token = h_r2t.data();
  hin.req_to_token_stride = width;
  hin.ring = host_ring.data();
  hin.ring_capacity = pages_per_round * opt.rounds_per_launch;
  hin.ring_tail = &tail_published;
  hin.stop_token_count = 1;
  hin.budget = !left.empty();
  hin.real_batch = opt.batch;
  const round_launch l = after_verify_params(hv, hin);
  const std::int64_t b = bucket_;
  // The next round's host twin, then the engine's state from it: seq_len, the draft slots,
  // allocated_len and the tail copies, and the table positions it allocated written back.
  const auto next_round = [&](std::int32_t k) {
    next_round_host(l.next);
    for (std::int32_t w = 0; w < round_guard_count; ++w) {
      if (hv.guard[w].violations != 0 && !(w == round_guard_next && *hv.stall != 0)) {
        throw error("host-driven round " + std::to_string(k) + ": " +
                    guard_site_of(p, p.layout.round.guard_base + w).buffer + ": " +
                    describe(hv.guard[w]));
      }
    }
    if (*hv.stall != 0 && opt.short_ring == 0)
      throw error("host-driven round " + std::to_string(k) + ": the ring ran short");
    seq = slice(h.seq_len(), b);
    slots = slice(h.out_cache_loc(), static_cast<std::int64_t>(slots.size()));
    const std::vector<std::int32_t> old_alloc = allocated;
    allocated = slice(hv.allocated_len, b);
    if (tail_pairs > 0) tail = slice(hv.next.tail_copy, static_cast<std::int64_t>(tail.size()));
    // The positions the next round allocated, [allocated_len before, after) of each row that
    // took pages (the twin writes no other cell): the engine's table as the twin left it.
    for (std::int32_t r = 0; r < opt.batch; ++r) {
      const auto u = static_cast<std::size_t>(r);
      const std::int64_t at = pool[u] * width + old_alloc[u], n = allocated[u] - old_alloc[u];
      if (n <= 0) continue;
      ex.copy_to_device(d_r2t.as<std::int32_t>() + at, h_r2t.data() + at,
                        static_cast<std::size_t>(n) * 4);
    }
  };
  ex.synchronize();
  std::int32_t first = 0;
  for (std::int32_t k = 0; k < opt.rounds; ++k) {
    const executor_counters before = ex.counters();
    const auto t0 = clock_type::now();
    if (opt.short_ring == 0) {
      ring_head_seen = *hv.ring_head;
      publish_ring(pages_per_round);
    } else if (k == first) {  // as the device loop: from the head the last host step read
      publish_ring(pages_per_round * opt.short_ring);
    }
    loop_round rec;
    rec.seq_len = seq;
    rec.stalled = *hv.stall != 0;
    stage_all();
    device_work(false, [&] { rt_->run_round(opt.num_steps); });
    std::int64_t cells = 0;
    for (std::int32_t r = 0; r < opt.batch; ++r)
      cells += static_cast<std::int64_t>(D) * (seq[static_cast<std::size_t>(r)] + D);
    const std::vector<std::uint8_t> mask(static_cast<std::size_t>(cells), 0);
    verify_round_inputs vr;
    vr.batch = opt.batch;
    vr.req_pool_index = pool.data();
    vr.seq_len = seq.data();
    vr.custom_mask = mask.data();
    vr.mask_cells = cells;
    rt_->stage_verify(vr);
    device_work(false, [&] { rt_->replay_verify(); });
    for (std::int32_t* dst : {hv.parent, hv.draft_token, hv.target_predict}) {
      const std::int32_t* src = dst == hv.parent        ? dv.parent
                                : dst == hv.draft_token ? dv.draft_token
                                                        : dv.target_predict;
      ex.copy_to_host(dst, src, static_cast<std::size_t>(b * D) * 4);
    }
    std::memcpy(h.seq_len(), seq.data(), seq.size() * 4);
    std::memcpy(h.req_pool_index(), pool.data(), pool.size() * 4);
    std::memcpy(h.out_cache_loc(), slots.data(), slots.size() * 8);
    std::memcpy(hv.allocated_len, allocated.data(), allocated.size() * 4);
    if (!left.empty()) {
      rec.budget = left;
      std::memcpy(hv.max_new_tokens_left, left.data(), left.size() * 4);
    }
    std::memset(static_cast<void*>(hv.guard), 0, sizeof(guard_word) * round_guard_count);
    accept_host(l.accept);
    commit_host(l.commit);
    rec.accept_index = slice(hv.accept.accept_index, b * S);
    rec.accept_length = slice(hv.accept.accept_length, b);
    rec.bonus = slice(hv.accept.bonus, b);
    rec.finished = slice(hv.commit.finished, b);
    rec.emit_len = slice(hv.commit.emit_len, b);
    if (!left.empty()) {
      left = slice(hv.max_new_tokens_left, b);
      rec.left = left;
    }
    std::vector<std::int32_t> ext(static_cast<std::size_t>(opt.batch));
    for (std::int32_t r = 0; r < opt.batch; ++r)
      ext[static_cast<std::size_t>(r)] = rec.accept_length[static_cast<std::size_t>(r)] + 1;
    rt_->stage_extend(ext);
    device_work(false, [&] { rt_->replay_extend(); });
    next_round(k);
    rounds.push_back(std::move(rec));
    const bool step = (k + 1) % opt.rounds_per_launch == 0 || k + 1 == opt.rounds;
    if (step) device_work(true, [&] { ex.synchronize(); });
    add_counters(stats, before, ex.counters());
    stats.seconds += since(t0);
    if (step) {
      ring_head_seen = *hv.ring_head;
      const auto rerun = [&] {
        publish_ring(pages_per_round * opt.short_ring);
        *hv.stall = 0;
        std::memset(static_cast<void*>(hv.guard), 0, sizeof(guard_word) * round_guard_count);
        next_round(k);
      };
      host_step(rounds, first, k + 1 - first, stats, rep, hv.commit.finished,
                *hv.stall != 0 ? std::function<void()>(rerun) : nullptr);
      first = k + 1;
    }
  }
  ring_head_seen = *hv.ring_head;  // the final state's (a last rerun took pages too)
  const std::vector<guard_word> words = rt_->read_guards();
  raise_guard_violations(p, words, bucket_, "host-driven");
}

// The host step after rounds [first, first + count): their draft outputs read from the log
// (hashed for the comparison, verified against float64 when sampled: instrumentation, not
// counted), then the engine's part, counted and timed: the finished requests replaced by new
// ones, the batch restaged.
void engine::host_step(std::vector<loop_round>& rounds, std::int32_t first, std::int32_t count,
                       loop_mode_stats& stats, loop_report& rep, std::int32_t* finished_flags,
                       const std::function<void()>& rerun) {
  ++stats.host_steps;
  // The checks' instrumentation first, neither counted nor timed: the draft outputs read back,
  // hashed and (sampled rounds) verified. An engine reads none of them.
  const std::int64_t round_elems = static_cast<std::int64_t>(opt.num_steps) * max_rows * hd;
  std::vector<float> outs(static_cast<std::size_t>(count * round_elems));
  for (std::int32_t i = 0; i < count; ++i) {
    const std::int32_t k = first + i;
    ex.copy_to_host(outs.data() + i * round_elems,
                    log_out.as<float>() + (k % opt.rounds_per_launch) * round_elems,
                    static_cast<std::size_t>(round_elems) * 4);
  }
  std::vector<std::uint8_t> idle(static_cast<std::size_t>(bucket_), 0);
  for (std::int32_t i = 0; i < count; ++i) {
    loop_round& rec = rounds[static_cast<std::size_t>(first + i)];
    rec.pool = pool;
    rec.checked.assign(static_cast<std::size_t>(bucket_), 0);
    rec.salt.resize(static_cast<std::size_t>(bucket_));
    stats.stalled_rounds += rec.stalled ? 1 : 0;
    for (std::int32_t r = 0; r < bucket_; ++r) {
      const auto u = static_cast<std::size_t>(r);
      rec.salt[u] = h_salt[static_cast<std::size_t>(pool[u])];
      // A round queued behind a stall runs no request: every row is inactive.
      rec.checked[u] = r < opt.batch && idle[u] == 0 && !rec.stalled;
      if (rec.checked[u] != 0) {
        stats.finished_by_budget += check_bookkeeping(first + i, r, rec, next_seq[u]);
        next_seq[u] = static_cast<std::int64_t>(rec.seq_len[u]) + rec.accept_length[u] + 1;
        stats.accepted += rec.accept_length[u];
        stats.emitted += rec.emit_len[u];
        ++stats.row_rounds;
        if (rec.finished[u] != 0) {
          idle[u] = 1;
          ++stats.finished;
        }
      }
    }
    const float* o = outs.data() + i * round_elems;
    rec.output_hash.resize(static_cast<std::size_t>(opt.num_steps) * max_rows);
    for (std::size_t v = 0; v < rec.output_hash.size(); ++v) {
      std::uint64_t hsh = 1469598103934665603ULL;
      const auto* bytes = reinterpret_cast<const unsigned char*>(o + v * hd);
      for (std::size_t j = 0; j < static_cast<std::size_t>(hd) * 4; ++j) {
        hsh = (hsh ^ bytes[j]) * 1099511628211ULL;
      }
      rec.output_hash[v] = hsh;
    }
    const std::int32_t k = first + i;
    const bool sampled =
        opt.verify == loop_options::verify_mode::all ||
        (opt.verify == loop_options::verify_mode::sample && k % opt.verify_every == 0);
    if (sampled) verify_round(k, rec, o, rep);
  }
  // The engine's host step: after a stall the ring refilled and the next round rerun, then the
  // finished requests replaced and the batch restaged.
  const executor_counters before = ex.counters();
  const auto t0 = clock_type::now();
  if (rerun) {
    rerun();
    ++stats.reruns;
  }
  std::vector<std::int32_t> replaced;
  for (std::int32_t r = 0; r < opt.batch; ++r) {
    if (idle[static_cast<std::size_t>(r)] != 0) replaced.push_back(r);
  }
  // The budgets as the step's last round left them (the host-driven rounds' copy already is).
  if (!left.empty()) left = rounds[static_cast<std::size_t>(first + count - 1)].left;
  if (!replaced.empty() && first + count < opt.rounds) {
    if (device_mode) read_staged_state();
    for (const std::int32_t r : replaced) admit(r);
    stats.replaced += static_cast<std::int64_t>(replaced.size());
    // A finished row stays idle (acceptance and the commit read its flag) until the engine
    // restages it: the new requests' flags cleared, every other flag as the last round left it.
    std::vector<std::int32_t> flags = rounds[static_cast<std::size_t>(first + count - 1)].finished;
    for (const std::int32_t r : replaced) flags[static_cast<std::size_t>(r)] = 0;
    if (device_mode) {
      stage_all();
      ex.copy_to_device(finished_flags, flags.data(), flags.size() * 4);
    } else {
      std::copy(flags.begin(), flags.end(), finished_flags);
    }
  }
  add_counters(stats, before, ex.counters());
  stats.seconds += since(t0);
  stats.rounds += count;
  stats.host_seconds = stats.seconds - device_secs;
}

// The device mode's state at a host step, for restaging: the staged seq_len and draft slots,
// the section's allocated_len, prefix-tail copies and budgets, and req_to_token (the rows that
// finished give their pages back).
void engine::read_staged_state() {
  const round_view v = rt_->buffers().round(bucket_);
  ex.copy_to_host(seq.data(), rt_->buffers().seq_len(), seq.size() * 4);
  ex.copy_to_host(slots.data(), rt_->buffers().out_cache_loc(), slots.size() * 8);
  ex.copy_to_host(allocated.data(), v.allocated_len, allocated.size() * 4);
  if (tail_pairs > 0) ex.copy_to_host(tail.data(), v.next.tail_copy, tail.size() * 4);
  if (!left.empty()) ex.copy_to_host(left.data(), v.max_new_tokens_left, left.size() * 4);
  ex.copy_to_host(h_r2t.data(), d_r2t.data(), h_r2t.size() * 4);
}

final_state engine::read_final() {
  final_state f;
  if (device_mode) {
    read_staged_state();
    ex.copy_to_host(&ring_head_seen, rt_->buffers().round(bucket_).ring_head, 8);
  }
  f.seq_len = seq;
  f.allocated_len = allocated;
  f.left = left;
  f.req_to_token = h_r2t;
  f.ring_head = ring_head_seen;
  return f;
}

}  // namespace specgraph::sim::loop
