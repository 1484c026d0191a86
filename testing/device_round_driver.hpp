// The two ways to drive K rounds from one starting state (testing/device_round_start.hpp), shared
// by the tests (tests/device_round_test.cpp) and the benchmark (bench/bench_device_round.cpp): a
// draft_runtime over the engine's req_to_token and ring with the toy forwards
// (testing/round_forward.hpp): the verify forward writes the tree, the extend forward logs the
// round. The device loop: K launches of the device-round graph with no host work in between; the
// host loop: the round driven from the host with the library's host twins. Each phase is its
// own call, so a benchmark restores the state and times the rounds alone. No GoogleTest here:
// the host loop returns the guard words' violations in its record for the caller to assert.
// Test code, not the library's; every call uses the executor's stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "specgraph/round_ops.hpp"
#include "specgraph/runtime.hpp"
#include "testing/device_round_start.hpp"
#include "testing/dvec.hpp"
#include "testing/round_forward.hpp"

namespace specgraph::testing {

inline constexpr std::int32_t max_logged = 16;

// The counters' difference after - before.
inline executor_counters counters_since(const executor_counters& before,
                                        const executor_counters& after) {
  executor_counters d;
  d.graph_launches = after.graph_launches - before.graph_launches;
  d.kernel_launches = after.kernel_launches - before.kernel_launches;
  d.synchronizations = after.synchronizations - before.synchronizations;
  d.event_waits = after.event_waits - before.event_waits;
  d.copies_to_host = after.copies_to_host - before.copies_to_host;
  d.copies_to_device = after.copies_to_device - before.copies_to_device;
  d.bytes_to_device = after.bytes_to_device - before.bytes_to_device;
  return d;
}

class dr_rig {
 public:
  // `stop`: the stop token the toy verify forward emits now and then; -1: never (no request
  // finishes, the benchmark's full batch).
  dr_rig(executor& ex, const draft_config& cfg, const dr_start& s, std::int32_t stop = stop_id)
      : ex_(ex),
        s_(s),
        r2t(ex, s.req_to_token),
        ring(ex, s.ring),
        tail(ex, std::vector<std::int64_t>{s.tail}),
        counter(ex, 1, 0),
        log(ex, static_cast<std::size_t>(max_logged * s.bucket * (cfg.num_steps + 7)), -1),
        rt(ex, cfg, engine_tables{r2t.data(), 0}) {
    const plan& p = rt.plan();
    S = p.config.num_steps + 1;
    rt.set_verify_forward([this, &p, stop](const verify_view& v) {
      const round_view rv = rt.buffers().round(v.bucket);
      toy_verify_kernel::params k{
          rt.buffers().seq_len(), rt.buffers().req_pool_index(), rv.parent,     rv.draft_token,
          rv.target_predict,      p.config.verify_tokens,        p.config.topk, stop};
      v.ex->launch(make_kernel_launch<toy_verify_kernel>(k, v.bucket, toy_verify_cuda()));
    });
    if (cfg.draft_extend) set_logger();
    in.req_to_token = r2t.data();
    in.ring = ring.data();
    in.ring_capacity = static_cast<std::int64_t>(s.ring.size());
    in.ring_tail = tail.data();
    in.stop_token_count = 1;
    in.budget = !s.budget.empty();
  }

  // device_depth: the staged round's control words (stage_start), and more work the extend
  // forward runs after its log (set before capture).
  std::int32_t max_depth = 0;
  float min_confidence = -std::numeric_limits<float>::infinity();
  std::function<void(const extend_view&)> extend_also;

  // The extend forward: logs each round at the device counter.
  void set_logger() {
    rt.set_extend_forward([this](const extend_view& v) {
      const round_view rv = rt.buffers().round(v.bucket);
      round_log_kernel::params k{
          counter.data(),          max_logged,      v.bucket,     S,         rv.accept.accept_index,
          rv.accept.accept_length, rv.accept.bonus, v.accept_len, v.seq_len, rv.commit.finished,
          v.out_cache_loc,         v.extend_tokens, log.data()};
      v.ex->launch(make_kernel_launch<round_log_kernel>(k, 1, round_log_cuda()));
      if (extend_also) extend_also(v);
    });
  }

  // The starting state into the runtime: the draft round staged (slots 0), the section's state.
  void stage_start() {
    const plan& p = rt.plan();
    const std::vector<std::int64_t> slots = first_slots(p, s_);
    round_inputs r;
    r.batch = s_.real;
    r.req_pool_index = s_.pool.data();
    r.seq_len = s_.seq_len.data();
    r.out_cache_loc = slots.data();
    r.max_depth = max_depth;
    r.min_confidence = min_confidence;
    rt.stage(r);
    const round_view v = rt.buffers().round(s_.bucket);
    ex_.copy_to_device(v.allocated_len, s_.allocated_len.data(), s_.allocated_len.size() * 4);
    const std::int64_t head = 0;
    const std::int32_t zero = 0;
    ex_.copy_to_device(v.ring_head, &head, sizeof head);
    ex_.copy_to_device(v.stall, &zero, sizeof zero);
    ex_.copy_to_device(v.stop_token_ids, &stop_id, sizeof stop_id);
    if (!s_.budget.empty()) {
      ex_.copy_to_device(v.max_new_tokens_left, s_.budget.data(), s_.budget.size() * 4);
    }
  }

  // One round's worst case of ring pages: B * ceil(S / ps).
  std::int64_t pages_per_round() const {
    const draft_config& c = rt.plan().config;
    return s_.bucket * ((c.num_steps + 1 + c.page_size - 1) / c.page_size);
  }

  // ---- the device loop ----------------------------------------------------------------------
  // Once: the ring bound and every graph captured (synchronous host work).
  void prepare_device() {
    if (device_ready_) return;
    rt.bind_round_ring(in);
    (void)rt.capture();
    device_ready_ = true;
  }
  // Back to the starting state (the engine's table, the log's counter, the staged round, the
  // sticky summary) with the ring's tail published: all of it (mode 0, 1) or one round's worst
  // case (mode 2). Copies only; no synchronisation but reset_round_guards'.
  void restore_device(int mode) {
    ex_.copy_to_device(r2t.data(), s_.req_to_token.data(), s_.req_to_token.size() * 4);
    const std::int32_t zero = 0;
    ex_.copy_to_device(counter.data(), &zero, sizeof zero);
    stage_start();
    rt.reset_round_guards();
    published_ = mode == 2 ? std::min(pages_per_round(), s_.tail) : s_.tail;
    ex_.copy_to_device(tail.data(), &published_, sizeof published_);
  }
  // The K rounds. mode 0: one launch_device_rounds(K); 1: K launch_device_round() calls; 2: K
  // calls with the ring's tail published one round's worst case at a time before each launch
  // (the engine's allocator; its only host work between rounds). No synchronisation.
  void launch_rounds(std::int32_t rounds, int mode) {
    if (mode == 0) {
      rt.launch_device_rounds(rounds);
      return;
    }
    for (std::int32_t k = 0; k < rounds; ++k) {
      if (mode == 2 && k > 0) {
        published_ = std::min(published_ + pages_per_round(), s_.tail);
        ex_.copy_to_device(tail.data(), &published_, sizeof published_);
      }
      rt.launch_device_round();
    }
  }

  // K launches and the executor's counters over them; then the log and the final state read
  // back.
  dr_record run_device(std::int32_t rounds, int mode, executor_counters* during = nullptr) {
    prepare_device();
    restore_device(mode);
    const executor_counters before = ex_.counters();
    launch_rounds(rounds, mode);
    if (during != nullptr) *during = counters_since(before, ex_.counters());
    return read_device(rounds);
  }

  // The log and the final state (synchronises: copies to the host).
  dr_record read_device(std::int32_t rounds) {
    const plan& p = rt.plan();
    const std::int64_t B = s_.bucket;
    const std::vector<std::int32_t> all = log.download();
    dr_record out;
    for (std::int32_t k = 0; k < rounds && k < max_logged; ++k) {
      const std::int32_t* at = all.data() + static_cast<std::int64_t>(k) * B * (S + 6);
      out.accept_index.push_back(slice(at, B * S));
      out.accept_length.push_back(slice(at + B * S, B));
      out.bonus.push_back(slice(at + B * S + B, B));
      out.extend_accept_len.push_back(slice(at + B * S + 2 * B, B));
      out.extend_seq_len.push_back(slice(at + B * S + 3 * B, B));
      if (rt.plan().config.draft_extend) {
        out.finished.push_back(slice(at + B * S + 4 * B, B));
        out.extend_slot.push_back(slice(at + B * S + 5 * B, B));
      }
    }
    const round_view v = rt.buffers().round(s_.bucket);
    out.seq_len.resize(static_cast<std::size_t>(B));
    ex_.copy_to_host(out.seq_len.data(), rt.buffers().seq_len(), out.seq_len.size() * 4);
    out.allocated_len.resize(static_cast<std::size_t>(B));
    ex_.copy_to_host(out.allocated_len.data(), v.allocated_len, out.allocated_len.size() * 4);
    out.out_cache_loc.resize(static_cast<std::size_t>(s_.real * p.config.topk) *
                             static_cast<std::size_t>(p.config.slot_stride));
    ex_.copy_to_host(out.out_cache_loc.data(), rt.buffers().out_cache_loc(),
                     out.out_cache_loc.size() * 8);
    out.req_to_token = r2t.download();
    ex_.copy_to_host(&out.ring_head, v.ring_head, sizeof out.ring_head);
    ex_.copy_to_host(&out.stall, v.stall, sizeof out.stall);
    if (!s_.budget.empty()) {
      out.tokens_left.resize(static_cast<std::size_t>(B));
      ex_.copy_to_host(out.tokens_left.data(), v.max_new_tokens_left, out.tokens_left.size() * 4);
    }
    return out;
  }

  // ---- the host loop ------------------------------------------------------------------------
  // Once: the step, verify and extend graphs captured (no ring bound: no device-round graph).
  void prepare_host() {
    if (host_ready_) return;
    (void)rt.capture();
    host_ready_ = true;
  }
  // The starting state into a host copy of the arena and the engine's table (re-uploaded), an
  // empty record.
  void restore_host() {
    const plan& p = rt.plan();
    hb_.assign(p.total_bytes + arena_alignment, 0);
    const auto base = reinterpret_cast<std::uintptr_t>(hb_.data());
    h_ =
        draft_buffers(p, hb_.data() + (arena_alignment - base % arena_alignment) % arena_alignment);
    hv_ = h_.round(s_.bucket);
    std::memcpy(h_.seq_len(), s_.seq_len.data(), s_.seq_len.size() * 4);
    std::memcpy(h_.req_pool_index(), s_.pool.data(), s_.pool.size() * 4);
    std::memcpy(hv_.allocated_len, s_.allocated_len.data(), s_.allocated_len.size() * 4);
    *h_.real_batch() = s_.real;
    const std::vector<std::int64_t> slots = first_slots(p, s_);
    std::memcpy(h_.out_cache_loc(), slots.data(), slots.size() * 8);
    *hv_.stop_token_ids = stop_id;
    // A budget: the twin refuses a real row whose budget ran out (by name), so (b) runs only
    // while every real row has some left.
    if (!s_.budget.empty()) {
      std::memcpy(hv_.max_new_tokens_left, s_.budget.data(), s_.budget.size() * 4);
    }
    host_r2t_ = s_.req_to_token;
    host_tail_ = s_.tail;
    hin_ = in;
    hin_.req_to_token = host_r2t_.data();
    hin_.ring = s_.ring.data();
    hin_.ring_tail = &host_tail_;
    hin_.real_batch = s_.real;  // the twins' content checks scan the rows below this bound
    ex_.copy_to_device(r2t.data(), host_r2t_.data(), host_r2t_.size() * 4);
    host_out_ = dr_record{};
  }

  // Round k: stage() -> run_round -> stage_verify -> replay_verify -> the host twins on the host
  // copy of the state -> stage_extend -> replay_extend; the engine's table uploaded; every guard
  // word the runtime's graphs and the twins left added to the record. `keep`: the round's
  // acceptance kept in the record. `mark(k, phase)`, when set, is called at the four edges of
  // the round's two GPU phases (0 before stage, 1 after replay_verify, 2 before stage_extend, 3
  // after the table's upload): the benchmark records timing events there.
  void host_round(std::int32_t k, bool keep = true,
                  const std::function<void(int, int)>& mark = {}) {
    const plan& p = rt.plan();
    const draft_config& c = p.config;
    const std::int64_t B = s_.bucket, D = c.verify_tokens;
    const std::vector<std::int32_t> seq = slice(h_.seq_len(), B);
    round_inputs r;
    r.batch = s_.real;
    r.req_pool_index = h_.req_pool_index();
    r.seq_len = h_.seq_len();
    r.out_cache_loc = h_.out_cache_loc();
    if (mark) mark(k, 0);
    rt.stage(r);
    rt.run_round(c.num_steps);
    std::int64_t cells = 0;
    for (std::int32_t i = 0; i < s_.real; ++i) cells += D * (seq[i] + D);
    const std::vector<std::uint8_t> mask(static_cast<std::size_t>(cells), 0);
    verify_round_inputs vr;
    vr.batch = s_.real;
    vr.req_pool_index = h_.req_pool_index();
    vr.seq_len = h_.seq_len();
    vr.custom_mask = mask.data();
    vr.mask_cells = cells;
    rt.stage_verify(vr);
    rt.replay_verify();
    if (mark) mark(k, 1);
    const round_view dv = rt.buffers().round(s_.bucket);
    ex_.copy_to_host(hv_.parent, dv.parent, static_cast<std::size_t>(B * D) * 4);
    ex_.copy_to_host(hv_.draft_token, dv.draft_token, static_cast<std::size_t>(B * D) * 4);
    ex_.copy_to_host(hv_.target_predict, dv.target_predict, static_cast<std::size_t>(B * D) * 4);
    std::memset(static_cast<void*>(hv_.guard), 0, sizeof(guard_word) * round_guard_count);
    const round_launch l = after_verify_params(hv_, hin_);
    accept_host(l.accept);
    commit_host(l.commit);
    std::vector<std::int32_t> ext;
    for (std::int32_t i = 0; i < s_.real; ++i) ext.push_back(hv_.accept.accept_length[i] + 1);
    if (mark) mark(k, 2);
    rt.stage_extend(ext);
    rt.replay_extend();
    if (keep) {
      host_out_.accept_index.push_back(slice(hv_.accept.accept_index, B * S));
      host_out_.accept_length.push_back(slice(hv_.accept.accept_length, B));
      host_out_.bonus.push_back(slice(hv_.accept.bonus, B));
      host_out_.finished.push_back(slice(hv_.commit.finished, B));
      ext.resize(static_cast<std::size_t>(B), 1);
      host_out_.extend_accept_len.push_back(ext);
      host_out_.extend_seq_len.push_back(seq);
    }
    next_round_host(l.next);
    // The engine's table as the twin left it (the new positions of the rows that allocate).
    ex_.copy_to_device(r2t.data(), host_r2t_.data(), host_r2t_.size() * 4);
    if (mark) mark(k, 3);
    for (std::int32_t w = 0; w < round_guard_count; ++w) {
      note_guard(k, "round section word " + std::to_string(w), hv_.guard[w]);
    }
    const std::vector<guard_word> words = rt.read_guards();
    for (std::size_t w = 0; w < words.size(); ++w) {
      note_guard(k, guard_site_of(p, static_cast<std::int32_t>(w)).buffer, words[w]);
    }
  }

  // The record with the final state (host memory; no executor work).
  dr_record finish_host() {
    const std::int64_t B = s_.bucket;
    const std::int64_t row =
        static_cast<std::int64_t>(rt.plan().config.topk) * rt.plan().config.slot_stride;
    dr_record out = host_out_;
    out.seq_len = slice(h_.seq_len(), B);
    out.allocated_len = slice(hv_.allocated_len, B);
    out.out_cache_loc = slice(h_.out_cache_loc(), s_.real * row);
    out.req_to_token = host_r2t_;
    out.ring_head = *hv_.ring_head;
    out.stall = *hv_.stall;
    if (!s_.budget.empty()) out.tokens_left = slice(hv_.max_new_tokens_left, B);
    return out;
  }

  // The whole host loop; `graph_launches`: the graph launches it made.
  dr_record run_host(std::int32_t rounds, std::int64_t* graph_launches = nullptr) {
    prepare_host();
    restore_host();
    const std::int64_t launches0 = ex_.counters().graph_launches;
    for (std::int32_t k = 0; k < rounds; ++k) host_round(k);
    if (graph_launches != nullptr) *graph_launches = ex_.counters().graph_launches - launches0;
    return finish_host();
  }

  executor& ex_;
  dr_start s_;
  dvec<std::int32_t> r2t, ring;
  dvec<std::int64_t> tail;
  dvec<std::int32_t> counter, log;
  draft_runtime rt;
  after_verify_inputs in;
  std::int32_t S = 0;

 private:
  void note_guard(std::int32_t k, const std::string& where, const guard_word& g) {
    if (g.violations == 0) return;
    if (host_out_.guard_violations == 0) {
      host_out_.first_guard = "round " + std::to_string(k) + ": " + where + ": " + describe(g);
    }
    host_out_.guard_violations += g.violations;
  }

  bool device_ready_ = false, host_ready_ = false;
  std::int64_t published_ = 0;
  std::vector<unsigned char> hb_;
  draft_buffers h_;
  round_view hv_;
  std::vector<std::int32_t> host_r2t_;
  std::int64_t host_tail_ = 0;
  after_verify_inputs hin_;
  dr_record host_out_;
};

}  // namespace specgraph::testing
