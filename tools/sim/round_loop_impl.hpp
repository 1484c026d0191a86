// Internal: one mode's engine of the round loop (tools/sim/round_loop.hpp): the runtime, the KV
// pool, the requests and their admission, the toy forwards, the ring and the round log. Shared
// by round_loop.cpp (set-up, forwards, admission), round_loop_modes.cpp (the two drivers) and
// round_loop_check.cpp (the float64 reference and the comparison).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/round_ops.hpp"
#include "specgraph/runtime.hpp"
#include "tools/sim/loop_kernels.hpp"
#include "tools/sim/round_loop.hpp"
#include "tools/sim/sim_kernels.hpp"

namespace specgraph::sim::loop {

template <class K>
inline void launch_rows(executor& ex, const typename K::params& p, std::int64_t rows,
                        cuda_rows_fn fn) {
  if (rows > 0) ex.launch(make_kernel_launch<K>(p, rows, fn));
}

// One round as the host saw it (device mode: from the round log; host mode: from the twins).
struct loop_round {
  std::vector<std::int32_t> seq_len;                         // [bucket] committed before the round
  std::vector<std::int32_t> pool;                            // [bucket]
  std::vector<std::uint64_t> salt;                           // [bucket] the request on each row
  std::vector<std::int32_t> accept_index;                    // [bucket][S]
  std::vector<std::int32_t> accept_length, bonus, finished;  // [bucket]
  std::vector<std::int32_t> emit_len;  // [bucket] the tokens the client gets (the commit's)
  // [bucket] the length budget before the round (as the host staged it, or the last round left
  // it) and after it (the commit's write-back); empty without a budget.
  std::vector<std::int32_t> budget, left;
  std::vector<std::uint64_t> output_hash;  // [steps][rows]: FNV-1a of each output vector
  std::vector<std::uint8_t> checked;       // [bucket]: a live request (not idling after finishing)
  bool stalled = false;  // queued behind a stall (the word set when the round began): no-op
};

// What both modes must end with identically.
struct final_state {
  std::vector<std::int32_t> seq_len, allocated_len, left, req_to_token;
  std::int64_t ring_head = 0;
};

class engine {
 public:
  engine(executor& ex, const loop_options& o, bool device_mode);
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Runs the mode's rounds; each round's record appended to `rounds`, counts into `stats`.
  void run(std::vector<loop_round>& rounds, loop_mode_stats& stats, loop_report& report);
  final_state read_final();
  std::int32_t bucket() const { return bucket_; }
  std::int64_t arena_bytes() const { return static_cast<std::int64_t>(rt_->plan().total_bytes); }

 private:
  // round_loop.cpp
  void set_forwards();
  void draft_forward(const step_view& v);
  void verify_forward(const verify_view& v);
  void extend_forward(const extend_view& v);
  void admit(std::int32_t r);  // request row r (pool row r + 1): a new request
  void upload_row(std::int32_t r);
  void stage_all();
  void publish_ring(std::int64_t pages_ahead);
  // round_loop_modes.cpp
  void run_device(std::vector<loop_round>& rounds, loop_mode_stats& stats, loop_report& rep);
  void run_host(std::vector<loop_round>& rounds, loop_mode_stats& stats, loop_report& rep);
  void read_outputs(std::int32_t first, std::int32_t count, std::vector<loop_round>& rounds,
                    loop_report& rep);
  // finished_flags: the round section's finished flags [bucket] in the mode's memory (executor
  // memory for the device loop, the host arena for host-driven rounds).
  // rerun (null unless the last round left the stall word set): the engine's refill, clear and
  // rerun of the next round, before any request is replaced.
  void host_step(std::vector<loop_round>& rounds, std::int32_t first, std::int32_t count,
                 loop_mode_stats& stats, loop_report& rep, std::int32_t* finished_flags,
                 const std::function<void()>& rerun);
  void read_staged_state();
  void reset_counter();
  template <class F>
  void device_work(bool is_sync, F&& work);
  // round_loop_check.cpp
  // want_seq: the seq_len the row's last live round left it (-1: none known). Returns whether
  // the row finished by its budget (not on a stop token).
  bool check_bookkeeping(std::int32_t round, std::int32_t r, const loop_round& rec,
                         std::int64_t want_seq) const;
  void verify_round(std::int32_t round, const loop_round& rec, const float* out,
                    loop_report& rep) const;

 public:  // the state, for the drivers above
  executor& ex;
  loop_options opt;
  bool device_mode;
  std::mt19937_64 rng;  // the requests' draws: the same sequence in both modes
  std::int32_t bucket_ = 0, S = 0, D = 0, hd = 0, max_rows = 0, stride = 0, pool_rows = 0;
  std::int64_t width = 0, kv_slots = 0, reserve = 0, pages_per_round = 0;
  std::int64_t tail_pairs = 0;  // per request: (topk - 1) * (page_size - 1), or 0
  std::unique_ptr<draft_runtime> rt_;
  // Pages: admissions take admit_pages in order, the ring ring_pages in order (two sequences,
  // so that when the ring is refilled never changes which page a request gets).
  std::vector<std::int32_t> admit_pages, ring_pages;
  std::int64_t admit_next = 0;
  // Host state of the requests (the host mode's authoritative copy; the device mode's until
  // the first launch and at each host step).
  std::vector<std::int32_t> h_r2t;  // [pool_rows][width]
  std::vector<std::uint64_t> h_salt;
  std::vector<std::int32_t> seq, pool, allocated;  // [bucket]
  std::vector<std::int32_t> left;                  // [bucket] budgets; empty without one
  std::vector<std::int64_t> next_seq;  // [bucket] the seq_len each row's next live round must have
  std::vector<std::int64_t> slots;     // [bucket][topk][stride]
  std::vector<std::int32_t> tail;      // [bucket][tail_pairs][2]
  // Executor memory.
  device_buffer d_r2t, d_salt, k_pool, v_pool, q_src, k_src, v_src;
  device_buffer o_prefix, lse_prefix, o_expand, lse_expand, out, out_lse;
  device_buffer ring, ring_tail, counter, log_int, log_out;
  device_buffer admit_pool, admit_begin, admit_count, admit_real;  // loop_commit_kv at admission
  std::vector<std::int32_t> host_ring;  // the host mode's ring (the twins read host memory)
  std::int64_t tail_published = 0, ring_head_seen = 0;
  std::int32_t corrupt_skip = -1;  // round whose tail copies are skipped (tests)
  bool host_executor = false;      // the host executor runs graphs inside the launch call
  double device_secs = 0;          // device work on this thread (device_work)
  sim_cuda_launchers cuda = sim_cuda();
  loop_cuda_launchers lcuda = loop_cuda();
};

// The device loop's round guard summary after a short ring (round_loop_check.cpp): its
// allocation word must hold exactly `reruns` ring records, then is cleared.
void expect_stalls(const plan& p, std::vector<guard_word>& words, std::int64_t reruns);

// Runs `work` (a launch or a synchronisation) and adds its wall time to device_secs when it is
// device work done on this thread: a synchronisation's wait on any executor; a launch on the
// host executor, which runs the graph or kernel right there (on CUDA a launch is host work: the
// submission).
template <class F>
void engine::device_work(bool is_sync, F&& work) {
  const auto t0 = std::chrono::steady_clock::now();
  work();
  if (is_sync || host_executor)
    device_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace specgraph::sim::loop
