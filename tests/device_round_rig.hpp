// The runtime side of the device-round tests (tests/device_round_test.cpp): a draft_runtime
// over the engine's req_to_token and ring with the toy forwards (testing/round_forward.hpp):
// the verify forward writes the tree, the extend forward logs the round. run_device: (a), K
// launches of the device-round graph with no host work in between; run_host: (b), the round
// driven from the host with the library's host twins.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "specgraph/round_ops.hpp"
#include "specgraph/runtime.hpp"
#include "testing/round_forward.hpp"
#include "tests/device_round_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {

inline constexpr std::int32_t max_logged = 16;

class dr_rig {
 public:
  dr_rig(executor& ex, const draft_config& cfg, const dr_start& s)
      : ex_(ex),
        s_(s),
        r2t(ex, s.req_to_token),
        ring(ex, s.ring),
        tail(ex, std::vector<std::int64_t>{s.tail}),
        counter(ex, 1, 0),
        log(ex, static_cast<std::size_t>(max_logged * 4 * (cfg.num_steps + 6)), -1),
        rt(ex, cfg, engine_tables{r2t.data(), 0}) {
    const plan& p = rt.plan();
    S = p.config.num_steps + 1;
    rt.set_verify_forward([this, &p](const verify_view& v) {
      const round_view rv = rt.buffers().round(v.bucket);
      toy_verify_kernel::params k{
          rt.buffers().seq_len(), rt.buffers().req_pool_index(), rv.parent,     rv.draft_token,
          rv.target_predict,      p.config.verify_tokens,        p.config.topk, stop_id};
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

  // The extend forward: logs each round at the device counter.
  void set_logger() {
    rt.set_extend_forward([this](const extend_view& v) {
      const round_view rv = rt.buffers().round(v.bucket);
      round_log_kernel::params k{counter.data(),
                                 max_logged,
                                 v.bucket,
                                 S,
                                 rv.accept.accept_index,
                                 rv.accept.accept_length,
                                 rv.accept.bonus,
                                 v.accept_len,
                                 v.seq_len,
                                 rv.commit.finished,
                                 log.data()};
      v.ex->launch(make_kernel_launch<round_log_kernel>(k, 1, round_log_cuda()));
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

  // (a): K launches and the executor's counters over them; then the log and the final state
  // read back. mode 0: one launch_device_rounds(K); 1: K launch_device_round() calls; 2: K
  // calls with the ring's tail published one round's worst case at a time before each launch
  // (the engine's allocator; its only host work between rounds).
  dr_record run_device(std::int32_t rounds, int mode, executor_counters* during = nullptr) {
    rt.bind_round_ring(in);
    (void)rt.capture();
    stage_start();
    const plan& p = rt.plan();
    const std::int64_t per_round =
        s_.bucket * ((p.config.num_steps + 1 + p.config.page_size - 1) / p.config.page_size);
    std::int64_t published = mode == 2 ? std::min(per_round, s_.tail) : s_.tail;
    ex_.copy_to_device(tail.data(), &published, sizeof published);
    const executor_counters before = ex_.counters();
    if (mode == 0) {
      rt.launch_device_rounds(rounds);
    } else {
      for (std::int32_t k = 0; k < rounds; ++k) {
        if (mode == 2 && k > 0) {
          published = std::min(published + per_round, s_.tail);
          ex_.copy_to_device(tail.data(), &published, sizeof published);
        }
        rt.launch_device_round();
      }
    }
    if (during != nullptr) {
      const executor_counters& after = ex_.counters();
      during->graph_launches = after.graph_launches - before.graph_launches;
      during->synchronizations = after.synchronizations - before.synchronizations;
      during->copies_to_host = after.copies_to_host - before.copies_to_host;
      during->copies_to_device = after.copies_to_device - before.copies_to_device;
      during->kernel_launches = after.kernel_launches - before.kernel_launches;
    }
    return read_device(rounds);
  }

  dr_record read_device(std::int32_t rounds) {
    const plan& p = rt.plan();
    const std::int64_t B = s_.bucket;
    const std::vector<std::int32_t> all = log.download();
    dr_record out;
    for (std::int32_t k = 0; k < rounds && k < max_logged; ++k) {
      const std::int32_t* at = all.data() + static_cast<std::int64_t>(k) * B * (S + 5);
      out.accept_index.push_back(slice(at, B * S));
      out.accept_length.push_back(slice(at + B * S, B));
      out.bonus.push_back(slice(at + B * S + B, B));
      out.extend_accept_len.push_back(slice(at + B * S + 2 * B, B));
      out.extend_seq_len.push_back(slice(at + B * S + 3 * B, B));
      if (rt.plan().config.draft_extend) out.finished.push_back(slice(at + B * S + 4 * B, B));
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

  // (b): per round stage() -> run_round -> stage_verify -> replay_verify -> the host twins on a
  // host copy of the state -> stage_extend -> replay_extend; the next round restaged from the
  // twins' outputs. Every guard word the runtime's graphs and the twins leave is clean.
  dr_record run_host(std::int32_t rounds, std::int64_t* graph_launches = nullptr) {
    (void)rt.capture();
    const plan& p = rt.plan();
    const draft_config& c = p.config;
    const std::int64_t B = s_.bucket, D = c.verify_tokens, row = c.topk * c.slot_stride;
    std::vector<unsigned char> hb(p.total_bytes + arena_alignment, 0);
    const auto base = reinterpret_cast<std::uintptr_t>(hb.data());
    const draft_buffers h(p,
                          hb.data() + (arena_alignment - base % arena_alignment) % arena_alignment);
    const round_view hv = h.round(s_.bucket);
    std::memcpy(h.seq_len(), s_.seq_len.data(), s_.seq_len.size() * 4);
    std::memcpy(h.req_pool_index(), s_.pool.data(), s_.pool.size() * 4);
    std::memcpy(hv.allocated_len, s_.allocated_len.data(), s_.allocated_len.size() * 4);
    *h.real_batch() = s_.real;
    const std::vector<std::int64_t> slots = first_slots(p, s_);
    std::memcpy(h.out_cache_loc(), slots.data(), slots.size() * 8);
    *hv.stop_token_ids = stop_id;
    // A budget: the twin refuses a real row whose budget ran out (by name), so (b) runs only
    // while every real row has some left.
    if (!s_.budget.empty()) {
      std::memcpy(hv.max_new_tokens_left, s_.budget.data(), s_.budget.size() * 4);
    }
    std::vector<std::int32_t> host_r2t = s_.req_to_token;
    std::int64_t host_tail = s_.tail;
    after_verify_inputs hin = in;
    hin.req_to_token = host_r2t.data();
    hin.ring = s_.ring.data();
    hin.ring_tail = &host_tail;
    hin.real_batch = s_.real;  // the twins' content checks scan the rows below this bound
    const round_view dv = rt.buffers().round(s_.bucket);
    const std::int64_t launches0 = ex_.counters().graph_launches;
    dr_record out;
    for (std::int32_t k = 0; k < rounds; ++k) {
      const std::vector<std::int32_t> seq = slice(h.seq_len(), B);
      round_inputs r;
      r.batch = s_.real;
      r.req_pool_index = h.req_pool_index();
      r.seq_len = h.seq_len();
      r.out_cache_loc = h.out_cache_loc();
      rt.stage(r);
      rt.run_round(c.num_steps);
      std::int64_t cells = 0;
      for (std::int32_t i = 0; i < s_.real; ++i) cells += D * (seq[i] + D);
      const std::vector<std::uint8_t> mask(static_cast<std::size_t>(cells), 0);
      verify_round_inputs vr;
      vr.batch = s_.real;
      vr.req_pool_index = h.req_pool_index();
      vr.seq_len = h.seq_len();
      vr.custom_mask = mask.data();
      vr.mask_cells = cells;
      rt.stage_verify(vr);
      rt.replay_verify();
      ex_.copy_to_host(hv.parent, dv.parent, static_cast<std::size_t>(B * D) * 4);
      ex_.copy_to_host(hv.draft_token, dv.draft_token, static_cast<std::size_t>(B * D) * 4);
      ex_.copy_to_host(hv.target_predict, dv.target_predict, static_cast<std::size_t>(B * D) * 4);
      std::memset(static_cast<void*>(hv.guard), 0, sizeof(guard_word) * round_guard_count);
      const round_launch l = after_verify_params(hv, hin);
      accept_host(l.accept);
      commit_host(l.commit);
      std::vector<std::int32_t> ext;
      for (std::int32_t i = 0; i < s_.real; ++i) ext.push_back(hv.accept.accept_length[i] + 1);
      rt.stage_extend(ext);
      rt.replay_extend();
      out.accept_index.push_back(slice(hv.accept.accept_index, B * S));
      out.accept_length.push_back(slice(hv.accept.accept_length, B));
      out.bonus.push_back(slice(hv.accept.bonus, B));
      out.finished.push_back(slice(hv.commit.finished, B));
      ext.resize(static_cast<std::size_t>(B), 1);
      out.extend_accept_len.push_back(ext);
      out.extend_seq_len.push_back(seq);
      next_round_host(l.next);
      // The engine's table as the twin left it (the new positions of the rows that allocate).
      ex_.copy_to_device(r2t.data(), host_r2t.data(), host_r2t.size() * 4);
      for (std::int32_t w = 0; w < round_guard_count; ++w) {
        EXPECT_EQ(hv.guard[w].violations, 0) << "round " << k << " word " << w;
      }
      const std::vector<guard_word> words = rt.read_guards();
      for (std::size_t w = 0; w < words.size(); ++w) {
        EXPECT_EQ(words[w].violations, 0)
            << "round " << k << ": " << guard_site_of(p, static_cast<std::int32_t>(w)).buffer
            << ": " << describe(words[w]);
      }
    }
    if (graph_launches != nullptr) *graph_launches = ex_.counters().graph_launches - launches0;
    out.seq_len = slice(h.seq_len(), B);
    out.allocated_len = slice(hv.allocated_len, B);
    out.out_cache_loc = slice(h.out_cache_loc(), s_.real * row);
    out.req_to_token = host_r2t;
    out.ring_head = *hv.ring_head;
    out.stall = *hv.stall;
    if (!s_.budget.empty()) out.tokens_left = slice(hv.max_new_tokens_left, B);
    return out;
  }

  executor& ex_;
  dr_start s_;
  dvec<std::int32_t> r2t, ring;
  dvec<std::int64_t> tail;
  dvec<std::int32_t> counter, log;
  draft_runtime rt;
  after_verify_inputs in;
  std::int32_t S = 0;
};

}  // namespace specgraph::testing
