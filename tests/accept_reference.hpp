// An independent reference of greedy tree acceptance (docs/accept.md), written from the
// semantics with plain loops: explicit child lists and depths, the walk over the lists, no code
// shared with kernels/accept_*. It takes only valid inputs (every real request's seq_len and
// tree in range) and returns every output cell the library must write at exact capacity.
#pragma once

#include <cstdint>
#include <vector>

namespace specgraph::testing {

struct accept_case {
  std::int32_t bucket = 0;  // B
  std::int32_t real_batch = 0;
  std::int32_t nodes = 1;  // D
  std::int32_t steps = 1;  // num_steps
  // [B][D]; rows past the real batch hold junk (never read but seq_len, copied).
  std::vector<std::int32_t> parent, draft, target;
  std::vector<std::int32_t> seq_len;  // [B]
  // [B], or empty: a real row with a nonzero cell is idle (finished earlier, left in place) and
  // written as padding.
  std::vector<std::int32_t> idle;
  // [1], or empty (no stall word): a nonzero word stalls the round. Every row is then padding,
  // and bonus and new_seq_len are not written (accept_expect::keeps_next).
  std::vector<std::int32_t> stall;
  bool stalled() const { return !stall.empty() && stall[0] != 0; }
};

struct accept_expect {
  std::vector<std::vector<std::int32_t>> path;  // the accepted nodes of each row, root first
  std::vector<std::int64_t> accept_index, accept_length, predict, accept_tokens, bonus, new_seq_len,
      select_index;
  // A stalled round: bonus and new_seq_len are not written (the values above are padding's; the
  // caller expects the old cells).
  bool keeps_next = false;
};

inline accept_expect accept_reference(const accept_case& c) {
  const std::int64_t B = c.bucket, D = c.nodes, S = c.steps + 1;
  accept_expect e;
  e.keeps_next = c.stalled();
  e.path.resize(static_cast<std::size_t>(B));
  e.accept_index.assign(static_cast<std::size_t>(B * S), -1);
  e.predict.assign(static_cast<std::size_t>(B * D), 0);
  e.accept_tokens.assign(static_cast<std::size_t>(B * D), 0);
  for (std::int64_t r = 0; r < B; ++r) {
    std::vector<std::int32_t>& path = e.path[static_cast<std::size_t>(r)];
    const bool idle = !c.idle.empty() && c.idle[static_cast<std::size_t>(r)] != 0;
    if (r < c.real_batch && !idle && !c.stalled()) {
      // children[u]: the nodes whose parent is u, in increasing order.
      std::vector<std::vector<std::int64_t>> children(static_cast<std::size_t>(D));
      for (std::int64_t i = 1; i < D; ++i) {
        const std::int32_t q = c.parent[static_cast<std::size_t>(r * D + i)];
        if (q >= 0) children[static_cast<std::size_t>(q)].push_back(i);
      }
      std::int64_t u = 0;
      path.push_back(0);
      while (static_cast<std::int64_t>(path.size()) < S) {
        std::int64_t chosen = -1;
        for (const std::int64_t v : children[static_cast<std::size_t>(u)]) {
          if (c.draft[static_cast<std::size_t>(r * D + v)] ==
              c.target[static_cast<std::size_t>(r * D + u)]) {
            chosen = v;
            break;
          }
        }
        if (chosen < 0) break;
        path.push_back(static_cast<std::int32_t>(chosen));
        u = chosen;
      }
    }
    const auto n = static_cast<std::int64_t>(path.size());  // a = c + 1, 0 for padding
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t node = path[static_cast<std::size_t>(k)];
      const std::int64_t tp = c.target[static_cast<std::size_t>(r * D + node)];
      e.accept_index[static_cast<std::size_t>(r * S + k)] = r * D + node;
      e.predict[static_cast<std::size_t>(r * D + node)] = tp;
      e.accept_tokens[static_cast<std::size_t>(r * D + k)] = tp;
    }
    const std::int64_t seq = c.seq_len[static_cast<std::size_t>(r)];
    if (n == 0) {  // padding
      e.accept_length.push_back(0);
      e.bonus.push_back(0);
      e.new_seq_len.push_back(seq);
      e.select_index.push_back(r * D + D - 1);
    } else {
      const std::int64_t last = path.back();
      e.accept_length.push_back(n - 1);
      e.bonus.push_back(c.target[static_cast<std::size_t>(r * D + last)]);
      e.new_seq_len.push_back(seq + n);
      e.select_index.push_back(r * D + n - 1);
    }
  }
  return e;
}

}  // namespace specgraph::testing
