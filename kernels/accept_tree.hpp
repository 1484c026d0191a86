// Per-request code of greedy tree acceptance (docs/accept.md), part 1: the request's tree view,
// its input check and the walk's step. Host+device; one logical thread per request, no storage
// beyond a few registers: every question about the tree is answered by scanning its parent row.
//
// Costs per request (D nodes, S = num_steps + 1): the check reads each parent once and walks up
// at most S steps from every node (O(D * S)); one walk step scans the nodes after the current one
// (O(D)), so a walk is O(D * S) too.
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "specgraph/accept_metadata.hpp"
#include "specgraph/limits.hpp"

namespace specgraph::kernels {

// The real batch: the launch scalar, or the device word clamped into [0, batch].
SPECGRAPH_HD std::int32_t accept_real_batch(const accept_params& p) {
  if (p.real_batch_at == nullptr) return p.real_batch;
  const std::int32_t v = *p.real_batch_at;
  return v < 0 ? 0 : (v > p.batch ? p.batch : v);
}

// Request r's rows of the [batch][D] inputs.
struct accept_tree {
  const std::int32_t* parent;
  const std::int32_t* token;    // draft_token
  const std::int32_t* predict;  // target_predict
  std::int32_t size;            // D
};

SPECGRAPH_HD accept_tree accept_tree_of(const accept_params& p, std::int32_t r) {
  const std::int64_t first = static_cast<std::int64_t>(r) * p.draft_tokens;
  return {p.parent + first, p.draft_token + first, p.target_predict + first, p.draft_tokens};
}

// A request's first bad input, in the order the check reads them (none: column -4).
struct accept_fault {
  std::int32_t column = -4;  // -1 seq_len; i: parent[i] or node i's depth
  std::int32_t capacity = 0;
  std::int64_t value = 0;
};

// Whether node i lies exactly `steps` levels below the root (steps >= 1). Walks up at most
// `steps` parents; every parent already checked to be in [-1, i).
SPECGRAPH_HD bool accept_at_depth(const accept_tree& t, std::int32_t i, std::int32_t steps) {
  std::int32_t u = i;
  for (std::int32_t k = 0; k < steps; ++k) {
    u = t.parent[u];
    if (u < 0) return false;  // an orphan's line: unreachable
    if (u == 0) return k + 1 == steps;
  }
  return false;  // deeper still, or unreachable past the walked steps (counted at its ancestor)
}

// The check: seq_len in [0, max_context_len] (column -1, capacity the limit); parent[0] = -1
// (column 0, capacity -1, value parent[0]); parent[i] in [-1, i) (column i, capacity i, value
// parent[i]); no reachable node at depth num_steps + 1, which any reachable node deeper than
// num_steps has above it (column the lowest such node, capacity num_steps, value num_steps + 1).
SPECGRAPH_HD accept_fault accept_check(const accept_params& p, std::int32_t r) {
  accept_fault f;
  const std::int32_t seq_len = p.seq_len[r];
  if (seq_len < 0 || seq_len > limits::max_context_len) {
    f.column = -1;
    f.capacity = limits::max_context_len;
    f.value = seq_len;
    return f;
  }
  const accept_tree t = accept_tree_of(p, r);
  for (std::int32_t i = 0; i < t.size; ++i) {
    const std::int32_t q = t.parent[i];
    const bool ok = i == 0 ? q == -1 : (q >= -1 && q < i);
    if (!ok) {
      f.column = i;
      f.capacity = i == 0 ? -1 : i;
      f.value = q;
      return f;
    }
  }
  const std::int32_t too_deep = p.num_steps + 1;
  for (std::int32_t i = 1; i < t.size; ++i) {
    if (accept_at_depth(t, i, too_deep)) {
      f.column = i;
      f.capacity = p.num_steps;
      f.value = too_deep;
      return f;
    }
  }
  return f;
}

// The walk's step from accepted node u: the first child of u (node order) whose draft token is
// the target's prediction at u, or -1. Children have larger indices than their parent.
SPECGRAPH_HD std::int32_t accept_next(const accept_tree& t, std::int32_t u) {
  const std::int32_t want = t.predict[u];
  for (std::int32_t v = u + 1; v < t.size; ++v) {
    if (t.parent[v] == u && t.token[v] == want) return v;
  }
  return -1;
}

// The accepted path's length without the root (c) and its last node (n_c).
struct accept_path {
  std::int32_t length = 0;
  std::int32_t last = 0;
};

// The num_steps bound cannot bind on a tree that passed accept_check (no reachable node lies
// deeper); it keeps the loop finite and the outputs in shape whatever the caller skipped.
SPECGRAPH_HD accept_path accept_walk(const accept_tree& t, std::int32_t num_steps) {
  accept_path a;
  while (a.length < num_steps) {
    const std::int32_t v = accept_next(t, a.last);
    if (v < 0) break;
    a.last = v;
    ++a.length;
  }
  return a;
}

}  // namespace specgraph::kernels
