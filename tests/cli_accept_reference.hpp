// An independent model of one round after verify (the round spec, sections 3 to 7 and 10), for
// tests/cli_accept_random_test.cpp: plain loops over child lists and positions, written from the
// spec, sharing nothing with the library or the command. It prints the output `specgraph
// metadata accept` must print, byte for byte.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace specgraph::testing_ref {

struct round_case {
  std::int64_t ps = 1, topk = 1, steps = 1, d = 1, bs = 0, real = 0, width = 1;
  std::int64_t reserve = -1;                                        // -1: the default R1
  std::vector<std::vector<std::int64_t>> rows;                      // req_to_token
  std::vector<std::int64_t> seq, pool, alloc, ring, stops, budget;  // budget empty: none
  std::vector<std::vector<std::int64_t>> parent, draft, target;
};

inline std::string list(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}
inline std::string lists(const std::vector<std::vector<std::int64_t>>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + list(v[i]);
  return s + "]";
}

inline std::string expected_output(const round_case& c) {
  const std::int64_t ps = c.ps, d = c.d, s_width = c.steps + 1;
  auto up = [&](std::int64_t x) { return (x + ps - 1) / ps * ps; };
  const std::int64_t r1 = (ps == 1 || c.topk == 1)
                              ? std::max(c.steps * c.topk, d)
                              : std::max((ps - 1 + c.steps + ps - 1) / ps * ps * c.topk, d);
  const std::int64_t reserve = c.reserve < 0 ? r1 : c.reserve;
  std::vector<std::vector<std::int64_t>> nodes, aidx, pred, out_tok, hidden, to_free;
  std::vector<std::int64_t> alen, bonus, new_seq, select, finished, emit;
  std::vector<std::vector<std::int64_t>> moves;
  for (std::int64_t r = 0; r < c.bs; ++r) {
    const auto& par = c.parent[r];
    const auto& tp = c.target[r];
    const auto& dt = c.draft[r];
    std::vector<std::int64_t> path;
    if (r < c.real) {
      path.push_back(0);
      while (static_cast<std::int64_t>(path.size()) <= c.steps) {
        const std::int64_t u = path.back();
        std::int64_t next = -1;
        for (std::int64_t v = u + 1; v < d && next < 0; ++v) {
          if (par[v] == u && dt[v] == tp[u]) next = v;
        }
        if (next < 0) break;
        path.push_back(next);
      }
    }
    const auto a = static_cast<std::int64_t>(path.size());  // 0 on padding
    std::vector<std::int64_t> ai(s_width, -1), pr(d, 0), toks, hid;
    for (std::int64_t k = 0; k < a; ++k) {
      ai[k] = r * d + path[k];
      pr[path[k]] = tp[path[k]];
      toks.push_back(tp[path[k]]);
      hid.push_back(r * d + path[k]);
    }
    nodes.push_back(path);
    aidx.push_back(ai);
    pred.push_back(pr);
    out_tok.push_back(toks);
    hidden.push_back(hid);
    alen.push_back(a > 0 ? a - 1 : 0);
    bonus.push_back(a > 0 ? toks.back() : 0);
    new_seq.push_back(c.seq[r] + a);
    select.push_back(a > 0 ? r * d + a - 1 : r * d + d - 1);
    // The commit: moves (topk > 1), the finish, the freed range.
    const auto& row = c.rows[c.pool[r]];
    for (std::int64_t k = 1; k < a && c.topk > 1; ++k) {
      if (path[k] != k) moves.push_back({row[c.seq[r] + k], row[c.seq[r] + path[k]]});
    }
    std::int64_t e = -1;
    for (std::int64_t k = 0; k < a && e < 0; ++k) {
      if (std::find(c.stops.begin(), c.stops.end(), toks[k]) != c.stops.end()) e = k;
    }
    const std::int64_t m = c.budget.empty() ? (std::int64_t{1} << 40) : c.budget[r];
    std::int64_t em = a, fin = 0;
    if (a > 0 && e >= 0) {
      em = std::min(e + 1, m);
      fin = 1;
    } else if (a > 0 && a >= m) {
      em = m;
      fin = 1;
    }
    finished.push_back(fin);
    emit.push_back(em);
    std::vector<std::int64_t> freed;
    if (fin) {
      const std::int64_t owned = c.seq[r] + std::min(a, em + 1);
      for (std::int64_t p = up(owned); p < c.alloc[r]; ++p) freed.push_back(row[p]);
    }
    to_free.push_back(freed);
  }
  // The allocation: all or nothing from the ring, rows too narrow left out.
  std::vector<std::vector<std::int64_t>> rows = c.rows;
  std::vector<std::int64_t> alloc = c.alloc, nxt(c.bs, 0);
  std::vector<std::string> violations;
  std::int64_t need = 0;
  for (std::int64_t r = 0; r < c.bs; ++r) {
    if (r >= c.real || finished[r]) continue;
    nxt[r] = std::max(c.alloc[r], up(new_seq[r] + reserve));
    if (nxt[r] > c.width) {
      violations.push_back(
          "{\"kind\":\"row_width\",\"kernel\":\"accept_alloc\",\"row\":" + std::to_string(r) +
          ",\"need\":" + std::to_string(nxt[r]) + ",\"width\":" + std::to_string(c.width) + "}");
      nxt[r] = c.alloc[r];
      continue;
    }
    need += (nxt[r] + ps - 1) / ps - (c.alloc[r] + ps - 1) / ps;
  }
  const bool stall = need > static_cast<std::int64_t>(c.ring.size());
  if (stall) {
    violations.push_back(
        "{\"kind\":\"ring\",\"kernel\":\"accept_alloc\",\"need\":" + std::to_string(need) +
        ",\"available\":" + std::to_string(c.ring.size()) + "}");
  }
  std::vector<std::vector<std::int64_t>> writes;
  std::int64_t taken = 0;
  for (std::int64_t r = 0; r < c.bs && !stall; ++r) {
    if (r >= c.real || finished[r] || nxt[r] <= c.alloc[r]) continue;
    auto& row = rows[c.pool[r]];
    const std::int64_t cur = c.alloc[r];
    for (std::int64_t p = cur; p < nxt[r]; ++p) {
      if (p < up(cur)) {
        row[p] = row[cur - 1] + 1 + (p - cur);
      } else {
        const std::int64_t page = c.ring[taken + (p - up(cur)) / ps];
        row[p] = page * ps + (p - up(cur)) % ps;
      }
      writes.push_back({c.pool[r], p, row[p]});
    }
    taken += (nxt[r] - up(cur)) / ps;
    alloc[r] = nxt[r];
  }
  // The next round.
  std::vector<std::int64_t> active, nseq, root, tails;
  std::vector<std::vector<std::int64_t>> dpos, vloc, tail_pairs;
  std::string dloc = "[";
  for (std::int64_t r = 0; r < c.bs; ++r) {
    const bool on = r < c.real && !finished[r] && !stall;
    const std::int64_t s = new_seq[r];
    std::int64_t lowest = -1;
    auto slot = [&](std::int64_t p) -> std::int64_t {
      if (!on) return 0;
      if (p < alloc[r]) return rows[c.pool[r]][p];
      if (lowest < 0 || p < lowest) lowest = p;
      return 0;
    };
    active.push_back(on ? 1 : 0);
    nseq.push_back(on ? s : 1);
    root.push_back(on ? bonus[r] : 0);
    dpos.push_back(std::vector<std::int64_t>(c.topk, on ? s : 0));
    const bool paged = ps > 1 && c.topk > 1;
    const std::int64_t nnp = paged ? (s % ps + c.steps + ps - 1) / ps : 0;
    std::vector<std::vector<std::int64_t>> branches;
    for (std::int64_t t = 0; t < c.topk; ++t) {
      std::vector<std::int64_t> b;
      for (std::int64_t j = 0; j < c.steps; ++j) {
        b.push_back(slot(paged ? s + t * ps * nnp + j : s + t * c.steps + j));
      }
      branches.push_back(b);
    }
    dloc += (r ? "," : "") + lists(branches);
    for (std::int64_t t = 1; paged && on && t < c.topk; ++t) {
      for (std::int64_t o = 0; o < s % ps; ++o) {
        const std::int64_t dst = slot(s - s % ps + t * nnp * ps + o);
        tail_pairs.push_back({dst, slot(s - s % ps + o)});
      }
    }
    std::vector<std::int64_t> v;
    for (std::int64_t j = 0; j < d; ++j) v.push_back(slot(s + j));
    vloc.push_back(v);
    if (lowest >= 0) {
      violations.push_back("{\"kind\":\"unbacked\",\"kernel\":\"next_round_slots\",\"row\":" +
                           std::to_string(r) + ",\"position\":" + std::to_string(lowest) +
                           ",\"allocated\":" + std::to_string(alloc[r]) + "}");
    }
  }
  dloc += "]";
  std::string viol = "[";
  for (std::size_t i = 0; i < violations.size(); ++i) viol += (i ? "," : "") + violations[i];
  viol += "]";
  return "{\"accepted_nodes\":" + lists(nodes) + ",\"accept_length\":" + list(alen) +
         ",\"accept_index\":" + lists(aidx) + ",\"predict\":" + lists(pred) +
         ",\"bonus_token\":" + list(bonus) + ",\"output_token\":" + lists(out_tok) +
         ",\"new_seq_len\":" + list(new_seq) + ",\"kv_moves\":" + lists(moves) +
         ",\"extend\":{\"input_id\":" + lists(out_tok) + ",\"hidden_source\":" + lists(hidden) +
         ",\"select_index\":" + list(select) + "},\"finished\":" + list(finished) +
         ",\"emit_len\":" + list(emit) + ",\"slots_to_free\":" + lists(to_free) +
         ",\"allocated_len\":" + list(alloc) + ",\"pages_taken\":" + std::to_string(taken) +
         ",\"req_to_token_writes\":" + lists(writes) +
         ",\"next_round\":{\"active\":" + list(active) + ",\"seq_len\":" + list(nseq) +
         ",\"root_token\":" + list(root) + ",\"draft_position\":" + lists(dpos) +
         ",\"draft_out_cache_loc\":" + dloc + ",\"tail_copies\":" + lists(tail_pairs) +
         ",\"verify_out_cache_loc\":" + lists(vloc) + "},\"violations\":" + viol + "}\n";
}

}  // namespace specgraph::testing_ref
