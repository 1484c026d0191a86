// The round loop's checks (tools/sim/round_loop.hpp): each live request's draft attention
// against a float64 reference that recomputes every token's K/V by position from the toy
// models' closed forms (never through the pool, the page tables or the slots), and the two
// modes' rounds and final state compared cell by cell; run_round_loop.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "tools/sim/round_loop_impl.hpp"
#include "tools/sim/sim_engine.hpp"

namespace specgraph::sim::loop {

// A live row's round from the semantics, not the kernels: it accepts its root; it finished
// exactly when a token it committed (the toy target's prediction at an accepted node) is the
// stop token or, with a budget, when the round's tokens reach it; the client gets the run cut
// after the stop token and at the budget, and the budget runs down by that; and its seq_len is
// its admitted prefix in its first round, then its last live round's advanced by that round's
// accepted run and the bonus (across host steps and stalls). A restaged row left idle breaks
// the first.
bool engine::check_bookkeeping(std::int32_t round, std::int32_t r, const loop_round& rec,
                               std::int64_t want_seq) const {
  const auto u = static_cast<std::size_t>(r);
  const std::string at = "round loop: round " + std::to_string(round) + " row " + std::to_string(r);
  const std::int64_t first = static_cast<std::int64_t>(r) * D;
  const std::int32_t* path = rec.accept_index.data() + static_cast<std::int64_t>(r) * S;
  if (path[0] != first) {
    throw error(at + ": a live request accepted nothing (accept_index[" + std::to_string(r) +
                "][0] = " + std::to_string(path[0]) + ", want its root " + std::to_string(first) +
                "): was a restaged row left idle?");
  }
  const std::int32_t c = rec.accept_length[u];
  if (c < 0 || c >= S) {
    throw error(at + ": accept_length " + std::to_string(c) + " outside [0, num_steps " +
                std::to_string(S - 1) + "]");
  }
  // The committed tokens o_0 .. o_c; e: the first that is the stop token (or none).
  std::int32_t e = -1;
  for (std::int32_t k = 0; k <= c && e < 0; ++k) {
    if (loop_target(rec.salt[u], rec.seq_len[u], path[k] - first, opt.stop_every) ==
        loop_stop_token)
      e = k;
  }
  // The budget m (when set): finished also when the round's c + 1 tokens reach it, and the
  // client gets at most m; what is left is m less what it got.
  const bool budgeted = !rec.budget.empty();
  const std::int64_t m = budgeted ? rec.budget[u] : 0;
  if (budgeted && m < 1) {
    throw error(at + ": a live request's budget is " + std::to_string(m) +
                " (a row that finished by its budget was not left idle?)");
  }
  const bool finished = e >= 0 || (budgeted && c + 1 >= m);
  std::int64_t emit = e >= 0 ? e + 1 : c + 1;
  if (budgeted) emit = std::min(emit, m);
  if (finished != (rec.finished[u] != 0)) {
    throw error(at + ": finished " + std::to_string(rec.finished[u]) + ", but the committed " +
                "tokens " + (e >= 0 ? "hold" : "do not hold") + " the stop token" +
                (budgeted ? " and the round's " + std::to_string(c + 1) + " tokens " +
                                (c + 1 >= m ? "reach" : "stay below") + " the budget " +
                                std::to_string(m)
                          : std::string()));
  }
  if (rec.emit_len[u] != emit) {
    throw error(at + ": emit_len " + std::to_string(rec.emit_len[u]) + ", want " +
                std::to_string(emit) + " (the committed run cut after the stop token" +
                (budgeted ? " or at the budget)" : ")"));
  }
  if (budgeted && rec.left[u] != m - emit) {
    throw error(at + ": budget left " + std::to_string(rec.left[u]) + ", want " +
                std::to_string(m - emit) + " (the budget " + std::to_string(m) + " less emit_len " +
                std::to_string(emit) + ")");
  }
  if (want_seq >= 0 && rec.seq_len[u] != want_seq) {
    throw error(at + ": seq_len " + std::to_string(rec.seq_len[u]) + ", want " +
                std::to_string(want_seq) +
                " (its admitted prefix, or its last live round's seq_len + accept length + 1)");
  }
  return finished && e < 0;
}

// Query (r, t) at step j attends to the committed positions 0 .. seq_len - 1 (K/V
// loop_value(salt, pos, e, loop_k / loop_v)) and its branch's draft tokens 0 .. j (K/V
// loop_value(salt, loop_draft_where(seq_len, t, i), e, loop_dk / loop_dv)).
void engine::verify_round(std::int32_t round, const loop_round& rec, const float* o,
                          loop_report& rep) const {
  const std::int32_t Dh = opt.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dh));
  std::vector<double> scores, acc(static_cast<std::size_t>(Dh));
  std::vector<double> q(static_cast<std::size_t>(Dh));
  bool any = false;
  for (std::int32_t r = 0; r < opt.batch; ++r) {
    if (rec.checked[static_cast<std::size_t>(r)] == 0) continue;
    any = true;
    const std::uint64_t salt = rec.salt[static_cast<std::size_t>(r)];
    const std::int64_t s = rec.seq_len[static_cast<std::size_t>(r)];
    for (std::int32_t t = 0; t < opt.topk; ++t) {
      for (std::int32_t j = 0; j < opt.num_steps; ++j) {
        for (std::int32_t h = 0; h < opt.heads; ++h) {
          const std::int64_t e0 = static_cast<std::int64_t>(h) * Dh;
          for (std::int32_t d = 0; d < Dh; ++d) {
            q[static_cast<std::size_t>(d)] =
                loop_value(salt, loop_draft_where(s, t, j), e0 + d, loop_q);
          }
          // Online softmax in float64 over the prefix, then the branch.
          double m = -INFINITY, l = 0;
          std::fill(acc.begin(), acc.end(), 0.0);
          auto add = [&](std::int64_t where, std::uint64_t kk, std::uint64_t kv) {
            double dot = 0;
            for (std::int32_t d = 0; d < Dh; ++d) {
              dot += q[static_cast<std::size_t>(d)] * loop_value(salt, where, e0 + d, kk);
            }
            dot *= scale;
            const double m2 = std::max(m, dot);
            const double c = std::exp(m - m2), w = std::exp(dot - m2);
            l = l * c + w;
            for (std::int32_t d = 0; d < Dh; ++d) {
              acc[static_cast<std::size_t>(d)] =
                  acc[static_cast<std::size_t>(d)] * c + w * loop_value(salt, where, e0 + d, kv);
            }
            m = m2;
          };
          for (std::int64_t pos = 0; pos < s; ++pos) add(pos, loop_k, loop_v);
          for (std::int32_t i = 0; i <= j; ++i) add(loop_draft_where(s, t, i), loop_dk, loop_dv);
          const std::int64_t row = static_cast<std::int64_t>(r) * opt.topk + t;
          const float* got = o + (static_cast<std::int64_t>(j) * max_rows + row) * hd + e0;
          double big = 0, err = 0;
          for (std::int32_t d = 0; d < Dh; ++d) {
            const double want = acc[static_cast<std::size_t>(d)] / l;
            big = std::max(big, std::fabs(want));
            err = std::max(err, std::fabs(want - static_cast<double>(got[d])));
          }
          const double rel = err / std::max(big, 1e-30);
          rep.max_relative_error = std::max(rep.max_relative_error, rel);
          ++rep.verified_outputs;
          if (!(rel <= opt.tolerance)) {
            std::ostringstream msg;
            msg << (device_mode ? "device loop" : "host-driven") << " round " << round
                << ": request " << r << " (pool row " << rec.pool[static_cast<std::size_t>(r)]
                << ", seq_len " << s << "), branch " << t << ", step " << j << ", head " << h
                << ": draft attention differs from the float64 reference by " << rel
                << " relative (tolerance " << opt.tolerance << ")";
            throw verification_error(msg.str());
          }
        }
      }
    }
  }
  if (any) ++rep.verified_rounds;
}

// A short ring's stalls are the run's, not faults: the round section's allocation word must hold
// one ring record per stall (the host reran the next round once for each), and nothing else;
// it is then cleared so that the check of every other word stands.
void expect_stalls(const plan& p, std::vector<guard_word>& words, std::int64_t reruns) {
  guard_word& g = words[static_cast<std::size_t>(p.layout.round.guard_base + round_guard_next)];
  if (reruns == 0) return;
  if (g.violations != reruns || g.kind != static_cast<std::int32_t>(violation_kind::ring)) {
    throw error("device loop: " + std::to_string(reruns) + " stalls, but the allocation word " +
                "says " + describe(g));
  }
  g = guard_word{};
}

namespace {

template <class T>
void same(const std::vector<T>& a, const std::vector<T>& b, const std::string& what,
          std::int64_t& cells) {
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) {
      std::ostringstream msg;
      msg << "device loop vs host-driven: " << what << " cell " << i << ": " << a[i] << " vs "
          << b[i];
      throw verification_error(msg.str());
    }
  }
  if (a.size() != b.size()) {
    throw verification_error("device loop vs host-driven: " + what + ": " +
                             std::to_string(a.size()) + " vs " + std::to_string(b.size()) +
                             " cells");
  }
  cells += static_cast<std::int64_t>(a.size());
}

}  // namespace
}  // namespace specgraph::sim::loop

namespace specgraph::sim {

using loop::engine;
using loop::final_state;
using loop::loop_round;
using loop::same;

loop_report run_round_loop(executor& ex, const loop_options& o) {
  loop_report rep;
  rep.executor = ex.name();
  std::vector<loop_round> host_rounds, device_rounds;
  final_state host_final, device_final;
  {
    engine h(ex, o, false);
    rep.bucket = h.bucket();
    rep.arena_bytes = h.arena_bytes();
    h.run(host_rounds, rep.host, rep);
    host_final = h.read_final();
  }
  {
    engine d(ex, o, true);
    d.run(device_rounds, rep.device, rep);
    device_final = d.read_final();
  }
  for (std::size_t k = 0; k < host_rounds.size() && k < device_rounds.size(); ++k) {
    const loop_round& a = device_rounds[k];
    const loop_round& b = host_rounds[k];
    const std::string at = "round " + std::to_string(k) + " ";
    same(a.accept_index, b.accept_index, at + "accept_index", rep.compared_cells);
    same(a.accept_length, b.accept_length, at + "accept_length", rep.compared_cells);
    same(a.bonus, b.bonus, at + "bonus", rep.compared_cells);
    same(a.finished, b.finished, at + "finished", rep.compared_cells);
    same(a.seq_len, b.seq_len, at + "seq_len", rep.compared_cells);
    same(a.emit_len, b.emit_len, at + "emit_len", rep.compared_cells);
    same(a.left, b.left, at + "budget left", rep.compared_cells);
    same(a.output_hash, b.output_hash, at + "draft outputs (hash per step and query row)",
         rep.compared_cells);
    ++rep.compared_rounds;
  }
  if (host_rounds.size() != device_rounds.size()) {
    throw verification_error("device loop vs host-driven: " + std::to_string(device_rounds.size()) +
                             " vs " + std::to_string(host_rounds.size()) + " rounds");
  }
  same(device_final.seq_len, host_final.seq_len, "final seq_len", rep.compared_cells);
  same(device_final.allocated_len, host_final.allocated_len, "final allocated_len",
       rep.compared_cells);
  same(device_final.left, host_final.left, "final budgets", rep.compared_cells);
  same(device_final.req_to_token, host_final.req_to_token, "final req_to_token",
       rep.compared_cells);
  if (device_final.ring_head != host_final.ring_head) {
    throw verification_error("device loop vs host-driven: ring head " +
                             std::to_string(device_final.ring_head) + " vs " +
                             std::to_string(host_final.ring_head));
  }
  rep.identical = true;
  return rep;
}

}  // namespace specgraph::sim
