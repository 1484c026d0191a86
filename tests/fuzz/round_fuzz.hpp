// What round_fuzz's files share: one speculative round as the harness decodes it (round_fuzz.cpp)
// and the three stages it runs chained (round_fuzz_stages.cpp): greedy acceptance
// (docs/accept.md), the commit (docs/commit.md) and the next round's inputs (docs/next-round.md).
#pragma once

#include <cstdint>
#include <vector>

#include "tests/fuzz/kernels_fuzz.hpp"

namespace specgraph::fuzz::round_harness {

using kernels_harness::path;

// The most a decoded round holds (keeps one execution to about a millisecond under ASan).
inline constexpr std::int32_t max_bucket = 8;
inline constexpr std::int32_t max_steps = 5;
inline constexpr std::int32_t max_topk = 4;
inline constexpr std::int32_t max_page = 16;

// One round: the bucket's shape, every request's tree and tokens, its pool row, its window and
// allocation, the stop ids and budgets, the ring. Rows past the real batch hold junk.
struct round {
  path how = path::eager;
  bool word_mode = false;  // the real batch read from a device word holding `word`
  std::int32_t word = 0;
  std::int32_t batch = 0, real_batch = 0, draft_tokens = 1, num_steps = 1, topk = 1, page_size = 1,
               pool_rows = 1, reserve = 0;
  std::int64_t width = 1, slot_stride = 0;                   // W; 0: num_steps
  std::vector<std::int32_t> parent, draft, target;           // [B][D]
  std::vector<std::int32_t> seq_len, allocated, pool_index;  // [B]
  std::vector<std::int32_t> req_to_token;                    // [pool_rows][W]
  std::vector<std::int32_t> stops;
  bool has_budget = false, has_finished = true;
  std::vector<std::int32_t> budget;  // [B] when has_budget
  std::vector<std::int32_t> ring;
  std::int64_t head = 0, tail = 0;
  std::int32_t stall = 0;
  // One byte per stage choosing the output cut short (or none) and how.
  std::uint8_t cut[3] = {}, cut_how[3] = {};
  std::int32_t real() const;  // the real batch the kernels use (the word clamped)
};

// What acceptance hands on (the reference's cells, padding rows included; checked equal to the
// library's wherever it wrote them).
struct accepted {
  std::vector<std::int32_t> accept_index, accept_length, accept_tokens, bonus, new_seq_len;
};

// Each stage returns false when it refused (the twin on bad content, any path on bad scalars):
// the chain stops there.
bool run_accept_stage(const round& c, accepted& out);
bool run_commit_stage(const round& c, const accepted& a, std::vector<std::int32_t>& finished);
void run_next_round_stage(const round& c, const accepted& a,
                          const std::vector<std::int32_t>& finished);

// The capacities of one stage: exact, or one output (cut % n when cut >= 0x80) one short, zero,
// spare or a value in [0, exact].
void cut_capacities(std::uint8_t cut, std::uint8_t how, const std::int64_t* exact, int n,
                    std::int64_t* caps);

// Runs `run` (a run_accept / run_commit / run_next_round call taking the executor and
// host_memory) on c.how: the host twin on path::host, else the launcher on a host executor
// (eager, deferred, or captured and replayed as a graph).
template <class Run>
void on_round_path(path how, Run&& run) {
  if (how == path::host) {
    std::unique_ptr<specgraph::executor> ex = specgraph::make_host_executor({});
    run(*ex, true);
    ex->synchronize();
    return;
  }
  kernels_harness::on_path(how, [&](specgraph::executor& ex) { run(ex, false); });
}

}  // namespace specgraph::fuzz::round_harness
