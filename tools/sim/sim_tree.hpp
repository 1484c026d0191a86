// The simulated engine's toy language model and its draft tree (host code): what the draft
// steps propose, how the verify tree is chosen from them (as EAGLE does: the D - 1 best draft
// tokens by cumulative score, parents per token, a tree mask) and the greedy acceptance walk.
//
// Toy model over a small vocabulary: next-token logits after token `a` whose attention output
// (heads * head_dim floats) is `o` are bigram[a][v] + sum_d o[d] * head[d][v]. The draft model
// sees only the bigram, plus noise: each branch step proposes from softmax(bigram[a] + noise).
// The target (the verify forward) adds the attention term, so the draft agrees with it often but
// not always, and a wrong attention output changes what is accepted.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

namespace specgraph::sim {

struct toy_lm {
  std::int32_t vocab = 0, head_elems = 0;
  std::vector<float> bigram;  // [vocab][vocab]
  std::vector<float> head;    // [head_elems][vocab]

  toy_lm() = default;
  toy_lm(std::int32_t v, std::int32_t hd, std::mt19937_64& rng) : vocab(v), head_elems(hd) {
    std::normal_distribution<float> n(0.0f, 1.0f);
    bigram.resize(static_cast<std::size_t>(v) * v);
    for (float& x : bigram) x = 2.0f * n(rng);
    head.resize(static_cast<std::size_t>(hd) * v);
    // Attention outputs are averages of values in [-1, 1]; scaled so the term is O(1).
    const float scale = 4.0f / std::sqrt(static_cast<float>(hd));
    for (float& x : head) x = scale * n(rng);
  }

  // The target's logits after `token` with attention output `o` (float64 arithmetic).
  template <class T>
  void logits(std::int32_t token, const T* o, std::vector<double>& out) const {
    out.assign(static_cast<std::size_t>(vocab), 0.0);
    for (std::int32_t v = 0; v < vocab; ++v) {
      out[static_cast<std::size_t>(v)] = bigram[static_cast<std::size_t>(token) * vocab + v];
    }
    for (std::int32_t d = 0; d < head_elems; ++d) {
      const double x = static_cast<double>(o[d]);
      const float* row = head.data() + static_cast<std::size_t>(d) * vocab;
      for (std::int32_t v = 0; v < vocab; ++v) out[static_cast<std::size_t>(v)] += x * row[v];
    }
  }
};

// The lowest index of the largest value.
inline std::int32_t argmax(const std::vector<double>& x) {
  return static_cast<std::int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
}

// One request's draft: topk branches of `depth` tokens each, token[t * depth + j] and its
// cumulative log-probability score[t * depth + j] (the sum along the branch, so never above
// its parent's). Step 0 takes the topk best tokens after the root (distinct); step j > 0 of
// branch t the best token after step j - 1 of the same branch.
struct draft_proposal {
  std::int32_t topk = 0, depth = 0;
  std::vector<std::int32_t> token;
  std::vector<double> score;
};

inline draft_proposal propose(const toy_lm& lm, std::int32_t root_token, std::int32_t topk,
                              std::int32_t depth, double noise, std::mt19937_64& rng) {
  draft_proposal d{topk, depth, std::vector<std::int32_t>(static_cast<std::size_t>(topk) * depth),
                   std::vector<double>(static_cast<std::size_t>(topk) * depth)};
  std::normal_distribution<double> n(0.0, noise);
  std::vector<double> lp(static_cast<std::size_t>(lm.vocab));
  auto log_softmax_after = [&](std::int32_t a) {
    double m = -INFINITY;
    for (std::int32_t v = 0; v < lm.vocab; ++v) {
      lp[static_cast<std::size_t>(v)] =
          lm.bigram[static_cast<std::size_t>(a) * lm.vocab + v] + n(rng);
      m = std::max(m, lp[static_cast<std::size_t>(v)]);
    }
    double s = 0;
    for (const double x : lp) s += std::exp(x - m);
    const double lse = m + std::log(s);
    for (double& x : lp) x -= lse;
  };
  log_softmax_after(root_token);
  std::vector<std::int32_t> order(static_cast<std::size_t>(lm.vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return lp[static_cast<std::size_t>(a)] > lp[static_cast<std::size_t>(b)];
  });
  for (std::int32_t t = 0; t < topk; ++t) {
    const std::size_t at = static_cast<std::size_t>(t) * depth;
    d.token[at] = order[static_cast<std::size_t>(t)];
    d.score[at] = lp[static_cast<std::size_t>(d.token[at])];
  }
  for (std::int32_t j = 1; j < depth; ++j) {
    for (std::int32_t t = 0; t < topk; ++t) {
      const std::size_t at = static_cast<std::size_t>(t) * depth + j;
      log_softmax_after(d.token[at - 1]);
      d.token[at] = argmax(lp);
      d.score[at] = d.score[at - 1] + lp[static_cast<std::size_t>(d.token[at])];
    }
  }
  return d;
}

// The verify tree of one request: node 0 is the root (the last committed token, not yet in the
// KV cache), nodes 1..D-1 the chosen draft tokens in (step, branch) order, so a parent always
// precedes its children. source[i] = t * depth + j of the draft token (-1 for the root).
struct draft_tree {
  std::vector<std::int32_t> parent, token, source;
  std::int32_t size() const { return static_cast<std::int32_t>(parent.size()); }
  bool attends(std::int32_t i, std::int32_t j) const {  // j is i or an ancestor of i
    for (std::int32_t a = i; a >= 0; a = parent[static_cast<std::size_t>(a)]) {
      if (a == j) return true;
    }
    return false;
  }
};

// The D - 1 best draft tokens by score (ties: the earlier step, then the lower branch, so a
// parent always ranks before its child), then ordered by (step, branch).
inline draft_tree build_tree(const draft_proposal& d, std::int32_t root_token, std::int32_t D) {
  const std::int32_t n = d.topk * d.depth;
  if (D < 1 || D - 1 > n)
    throw std::invalid_argument("build_tree: D outside [1, 1 + topk * depth]");
  std::vector<std::int32_t> cand(static_cast<std::size_t>(n));
  std::iota(cand.begin(), cand.end(), 0);
  auto step_branch = [&](std::int32_t c) { return (c % d.depth) * d.topk + c / d.depth; };
  std::sort(cand.begin(), cand.end(), [&](std::int32_t a, std::int32_t b) {
    const double sa = d.score[static_cast<std::size_t>(a)],
                 sb = d.score[static_cast<std::size_t>(b)];
    return sa != sb ? sa > sb : step_branch(a) < step_branch(b);
  });
  cand.resize(static_cast<std::size_t>(D - 1));
  std::sort(cand.begin(), cand.end(),
            [&](std::int32_t a, std::int32_t b) { return step_branch(a) < step_branch(b); });
  draft_tree tree;
  tree.parent.push_back(-1);
  tree.token.push_back(root_token);
  tree.source.push_back(-1);
  std::vector<std::int32_t> node_of(static_cast<std::size_t>(n), -1);
  for (const std::int32_t c : cand) {
    const std::int32_t j = c % d.depth;
    const std::int32_t parent = j == 0 ? 0 : node_of[static_cast<std::size_t>(c - 1)];
    if (parent < 0) throw std::logic_error("build_tree: a chosen token's parent was not chosen");
    node_of[static_cast<std::size_t>(c)] = tree.size();
    tree.parent.push_back(parent);
    tree.token.push_back(d.token[static_cast<std::size_t>(c)]);
    tree.source.push_back(c);
  }
  return tree;
}

// Greedy acceptance: from the root, follow the child whose token is the target's choice
// (target[i]: the argmax of the logits after node i) while there is one. Returns the accepted
// nodes (root excluded) in order; the target's choice after the last of them is the bonus token.
inline std::vector<std::int32_t> accept_greedy(const draft_tree& tree,
                                               const std::vector<std::int32_t>& target) {
  std::vector<std::int32_t> path;
  std::int32_t cur = 0;
  for (;;) {
    std::int32_t next = -1;
    for (std::int32_t c = cur + 1; c < tree.size() && next < 0; ++c) {
      if (tree.parent[static_cast<std::size_t>(c)] == cur &&
          tree.token[static_cast<std::size_t>(c)] == target[static_cast<std::size_t>(cur)]) {
        next = c;
      }
    }
    if (next < 0) return path;
    path.push_back(next);
    cur = next;
  }
}

}  // namespace specgraph::sim
