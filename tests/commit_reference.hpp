// An independent reference of the commit (docs/commit.md), written from the semantics with plain
// loops and no code shared with kernels/commit_row.hpp: the accepted path as a node list, the
// window's slots as a list, the stop ids as a set. It takes only valid inputs (every real
// request's contents in range) and returns every output cell the library must write at exact
// capacity, and the budget the commit leaves in place. One bad input is modelled, because
// chained rounds reach it: a real request whose budget is below 1 (it finished by its budget in
// an earlier round and was left in place, with no idle flags) is refused, written as padding,
// its budget untouched and its row listed in `refused`. An idle row (a nonzero `idle` cell: it
// finished earlier and was left in place) moves nothing, keeps its budget, and is listed in
// `idle_rows`: its finished, emit_len and free cells are not written (the caller keeps them). In a
// stalled round (`stall`) every other real row is padding.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace specgraph::testing {

struct commit_case {
  std::int32_t bucket = 0;  // B
  std::int32_t real_batch = 0;
  std::int32_t nodes = 1;  // D
  std::int32_t steps = 1;  // num_steps
  std::int32_t topk = 1;
  std::int32_t page_size = 1;
  std::int64_t stride = 1;  // W
  std::int32_t pool_rows = 1;
  // Acceptance's outputs: [B][S], [B], [B][D]; rows past the real batch hold junk.
  std::vector<std::int32_t> accept_index, accept_length, accept_tokens;
  std::vector<std::int32_t> seq_len, allocated_len, req_pool_index;  // [B]
  std::vector<std::int32_t> req_to_token;                            // [pool_rows][W]
  std::vector<std::int32_t> stop_ids;
  bool stop_pointer = false;  // pass stop_ids' pointer even when empty
  bool has_budget = false;
  std::vector<std::int32_t> budget;  // [B] when has_budget
  std::vector<std::int32_t> idle;    // [B], or empty: nonzero marks an idle real row
  // [1], or empty (no stall word): a nonzero word stalls the round, and every real row that is
  // not idle is then padding.
  std::vector<std::int32_t> stall;
};

struct commit_expect {
  std::vector<std::int64_t> kv_move, finished, emit_len, free_begin, free_end;
  // The budget after the round ([B] when has_budget): m - emit on the real rows handled, the
  // input cell (junk included) on padding and refused rows.
  std::vector<std::int64_t> budget;
  std::vector<std::int64_t> refused;  // real rows refused for a budget below 1, increasing
  // Idle real rows, increasing: their finished, emit_len, free_begin and free_end cells are not
  // written (the values above are 0 there; the caller keeps the old cells).
  std::vector<std::int64_t> idle_rows;
  // The accepted nodes n_0 .. n_c of each real row (empty for padding).
  std::vector<std::vector<std::int64_t>> path;
  // The window's slots V[0 .. D) of each real row (empty for padding).
  std::vector<std::vector<std::int64_t>> window;
};

inline commit_expect commit_reference(const commit_case& c) {
  const std::int64_t B = c.bucket, D = c.nodes, S = c.steps + 1;
  commit_expect e;
  e.kv_move.assign(static_cast<std::size_t>(B * c.steps * 2), -1);
  e.finished.assign(static_cast<std::size_t>(B), 0);
  e.emit_len.assign(static_cast<std::size_t>(B), 0);
  e.free_begin.assign(static_cast<std::size_t>(B), 0);
  e.free_end.assign(static_cast<std::size_t>(B), 0);
  e.path.resize(static_cast<std::size_t>(B));
  e.window.resize(static_cast<std::size_t>(B));
  if (c.has_budget) e.budget.assign(c.budget.begin(), c.budget.end());
  const std::set<std::int64_t> stops(c.stop_ids.begin(), c.stop_ids.end());
  for (std::int64_t r = 0; r < c.real_batch; ++r) {
    const auto ru = static_cast<std::size_t>(r);
    if (!c.idle.empty() && c.idle[ru] != 0) {
      e.idle_rows.push_back(r);
      continue;
    }
    if (!c.stall.empty() && c.stall[0] != 0)
      continue;  // padding: nothing moves, nothing finishes, the budget kept
    if (c.has_budget && c.budget[ru] < 1) {  // refused: a padding row, nothing written for it
      e.refused.push_back(r);
      continue;
    }
    const std::int64_t accepted = c.accept_length[ru];  // c
    std::vector<std::int64_t>& path = e.path[ru];
    for (std::int64_t k = 0; k <= accepted; ++k) {
      path.push_back(c.accept_index[static_cast<std::size_t>(r * S + k)] - r * D);
    }
    const std::int64_t seq = c.seq_len[ru], row = c.req_pool_index[ru];
    std::vector<std::int64_t>& window = e.window[ru];
    for (std::int64_t i = 0; i < D; ++i) {
      window.push_back(c.req_to_token[static_cast<std::size_t>(row * c.stride + seq + i)]);
    }
    if (c.topk > 1) {
      for (std::size_t k = 1; k < path.size(); ++k) {
        if (path[k] == static_cast<std::int64_t>(k)) continue;
        const std::size_t at = static_cast<std::size_t>(r * c.steps * 2) + 2 * (k - 1);
        e.kv_move[at] = window[k];
        e.kv_move[at + 1] = window[static_cast<std::size_t>(path[k])];
      }
    }
    // The output tokens, cut at the first stop token (kept) and at the budget.
    const auto a = static_cast<std::int64_t>(path.size());
    std::vector<std::int64_t> out;
    bool stopped = false;
    for (std::int64_t j = 0; j < a && !stopped; ++j) {
      const std::int64_t t = c.accept_tokens[static_cast<std::size_t>(r * D + j)];
      out.push_back(t);
      stopped = stops.count(t) > 0;
    }
    const std::int64_t m = c.has_budget ? c.budget[ru] : a + 1;  // no budget: never binds
    bool finished = stopped;
    auto emit = static_cast<std::int64_t>(out.size());
    if (emit > m) emit = m;
    if (!stopped && a >= m) finished = true;
    e.emit_len[ru] = emit;
    if (c.has_budget) e.budget[ru] = m - emit;  // what the request may still produce
    if (finished) {
      const std::int64_t owned = seq + (emit + 1 < a ? emit + 1 : a);
      std::int64_t page_end = owned;
      while (page_end % c.page_size != 0) ++page_end;
      const std::int64_t allocated = c.allocated_len[ru];
      e.finished[ru] = 1;
      e.free_begin[ru] = page_end < allocated ? page_end : allocated;
      e.free_end[ru] = allocated;
    }
  }
  return e;
}

}  // namespace specgraph::testing
