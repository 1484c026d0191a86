// The round after verify chained on the host (tests/round_ops_test.cpp): a mirror of the whole
// arena as the device must leave it, and one round of the three independent references
// (accept_reference.hpp, commit_reference.hpp, next_round_reference.hpp) applied to it: inputs
// read from the mirror (the staged seq_len and req_pool_index, the section's state), outputs
// written into it at the section's offsets, the in-place state (staged seq_len, out_cache_loc,
// allocated_len, the budget, ring head, stall) and the engine's req_to_token carried to the next
// round.
// Nothing here calls the library's kernels or helpers; offsets come from the plan's layout.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "specgraph/plan.hpp"
#include "specgraph/round_fields.hpp"
#include "tests/accept_reference.hpp"
#include "tests/commit_reference.hpp"
#include "tests/next_round_reference.hpp"

namespace specgraph::testing {

// The expected arena, byte for byte.
struct round_mirror {
  const plan* p = nullptr;
  std::vector<unsigned char> bytes;

  template <class T>
  T get(std::size_t offset, std::int64_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + offset + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
    return v;
  }
  template <class T>
  void put(std::size_t offset, std::int64_t i, T v) {
    std::memcpy(bytes.data() + offset + static_cast<std::size_t>(i) * sizeof(T), &v, sizeof(T));
  }
  std::size_t field(std::int32_t f) const { return p->layout.round.field[f]; }
  std::vector<std::int32_t> i32s(std::size_t offset, std::int64_t n) const {
    std::vector<std::int32_t> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      v[static_cast<std::size_t>(i)] = get<std::int32_t>(offset, i);
    return v;
  }
  template <class T>
  void put_all(std::size_t offset, const std::vector<T>& v) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      put<std::int32_t>(offset, static_cast<std::int64_t>(i), static_cast<std::int32_t>(v[i]));
    }
  }
};

// What the engine holds outside the arena.
struct round_engine {
  std::vector<std::int32_t> req_to_token;  // [pool_rows][W]
  std::int64_t width = 0;
  std::vector<std::int32_t> ring;  // [C]
  std::int64_t tail = 0;
  std::vector<std::int32_t> stop_ids;
  bool budget = true;
  std::int32_t real_batch = 0;  // the real batch the round runs (word or scalar)
};

// The guard words the round must leave: violations per word and the kept (row, column).
struct round_guards {
  std::int32_t violations[round_guard_count] = {};
  std::int32_t row[round_guard_count] = {}, column[round_guard_count] = {};
};

inline round_guards chain_next_round(round_mirror& m, round_engine& e, std::int32_t bucket);

// One round of the references over the mirror for `bucket`; returns the expected guard words.
inline round_guards chain_round(round_mirror& m, round_engine& e, std::int32_t bucket) {
  const plan& p = *m.p;
  const draft_config& c = p.config;
  const std::int64_t B = bucket, D = c.verify_tokens, N = c.num_steps;
  const std::size_t seq_at = p.layout.seq_len, pool_at = p.layout.req_pool_index;
  accept_case a;
  a.bucket = bucket;
  a.real_batch = e.real_batch;
  a.nodes = c.verify_tokens;
  a.steps = c.num_steps;
  a.parent = m.i32s(m.field(round_parent), B * D);
  a.draft = m.i32s(m.field(round_draft_token), B * D);
  a.target = m.i32s(m.field(round_target_predict), B * D);
  a.seq_len = m.i32s(seq_at, B);
  // A finished row left in place is idle: acceptance and the commit read the flags the last
  // commit left (the engine clears a row's flag when it restages it).
  const std::vector<std::int32_t> idle = m.i32s(m.field(round_finished), B);
  a.idle = idle;
  // A round queued after a stall (the word an earlier round set, not yet cleared) accepts
  // nothing and keeps bonus and new_seq_len for the engine's rerun; its commit pads every row
  // that is not idle.
  const std::vector<std::int32_t> stall{m.get<std::int32_t>(m.field(round_stall), 0)};
  a.stall = stall;
  const accept_expect ae = accept_reference(a);
  m.put_all(m.field(round_accept_index), ae.accept_index);
  m.put_all(m.field(round_accept_length), ae.accept_length);
  m.put_all(m.field(round_predict), ae.predict);
  m.put_all(m.field(round_accept_tokens), ae.accept_tokens);
  if (!ae.keeps_next) {
    m.put_all(m.field(round_bonus), ae.bonus);
    m.put_all(m.field(round_new_seq_len), ae.new_seq_len);
  }
  m.put_all(m.field(round_select_index), ae.select_index);

  commit_case k;
  k.bucket = bucket;
  k.real_batch = e.real_batch;
  k.nodes = a.nodes;
  k.steps = a.steps;
  k.topk = c.topk;
  k.page_size = c.page_size;
  k.stride = e.width;
  k.pool_rows = c.pool_rows;
  k.accept_index = m.i32s(m.field(round_accept_index), B * (N + 1));
  k.accept_length = m.i32s(m.field(round_accept_length), B);
  k.accept_tokens = m.i32s(m.field(round_accept_tokens), B * D);
  k.seq_len = a.seq_len;
  k.allocated_len = m.i32s(m.field(round_allocated_len), B);
  k.req_pool_index = m.i32s(pool_at, B);
  k.req_to_token = e.req_to_token;
  k.stop_ids = e.stop_ids;
  k.has_budget = e.budget;
  k.budget = m.i32s(m.field(round_max_new_tokens_left), B);
  k.idle = idle;
  k.stall = stall;
  const commit_expect ke = commit_reference(k);
  m.put_all(m.field(round_kv_move), ke.kv_move);
  std::vector<bool> keep(static_cast<std::size_t>(B), false);
  for (std::int64_t r : ke.idle_rows) keep[static_cast<std::size_t>(r)] = true;
  for (std::int32_t f : {round_finished, round_emit_len, round_free_begin, round_free_end}) {
    const std::vector<std::int64_t>& v = f == round_finished     ? ke.finished
                                         : f == round_emit_len   ? ke.emit_len
                                         : f == round_free_begin ? ke.free_begin
                                                                 : ke.free_end;
    for (std::int64_t r = 0; r < B; ++r) {
      if (!keep[static_cast<std::size_t>(r)]) {
        m.put<std::int32_t>(m.field(f), r,
                            static_cast<std::int32_t>(v[static_cast<std::size_t>(r)]));
      }
    }
  }
  // The budget the commit leaves in place, carried to the next round (an idle row's kept).
  if (e.budget) m.put_all(m.field(round_max_new_tokens_left), ke.budget);

  round_guards g = chain_next_round(m, e, bucket);
  g.violations[round_guard_commit] = static_cast<std::int32_t>(ke.refused.size());
  if (!ke.refused.empty()) {
    g.row[round_guard_commit] = static_cast<std::int32_t>(ke.refused.front());
    g.column[round_guard_commit] = -5;
  }
  return g;
}

// The next round alone over the mirror (after a stall, the engine reruns it): reads
// acceptance's and the commit's outputs from the mirror.
inline round_guards chain_next_round(round_mirror& m, round_engine& e, std::int32_t bucket) {
  const plan& p = *m.p;
  const draft_config& c = p.config;
  const std::int64_t B = bucket;
  const std::size_t seq_at = p.layout.seq_len;
  nr_case n;
  n.batch = bucket;
  n.real_batch = e.real_batch;
  n.draft_tokens = c.verify_tokens;
  n.num_steps = c.num_steps;
  n.topk = c.topk;
  n.page_size = c.page_size;
  n.reserve = p.layout.round.reserve;
  n.new_seq_len = m.i32s(m.field(round_new_seq_len), B);
  n.bonus = m.i32s(m.field(round_bonus), B);
  n.req_pool_index = m.i32s(p.layout.req_pool_index, B);
  n.allocated_len = m.i32s(m.field(round_allocated_len), B);
  n.has_finished = true;
  n.finished = m.i32s(m.field(round_finished), B);
  n.width = e.width;
  n.pool_rows = c.pool_rows;
  n.req_to_token = e.req_to_token;
  n.ring = e.ring;
  n.head = m.get<std::int64_t>(m.field(round_ring_head), 0);
  n.tail = e.tail;
  n.stall = m.get<std::int32_t>(m.field(round_stall), 0);
  n.slot_stride = c.slot_stride;
  const nr_expect ne = nr_reference(n);
  e.req_to_token = ne.req_to_token;
  m.put_all(m.field(round_allocated_len), ne.allocated_len);
  m.put<std::int64_t>(m.field(round_ring_head), 0, ne.head);
  m.put<std::int32_t>(m.field(round_stall), 0, ne.stall);
  // Outputs in params order; seq_len and the draft slots land in the staged inputs.
  const std::size_t at[7] = {m.field(round_active),
                             seq_at,
                             m.field(round_root_token),
                             m.field(round_draft_position),
                             p.layout.out_cache_loc,
                             m.field(round_tail_copy),
                             m.field(round_verify_out_cache_loc)};
  const bool wide[7] = {false, false, false, false, true, false, true};
  for (int o = 0; o < 7; ++o) {
    for (const nr_cell& cell : ne.cells[o]) {
      if (wide[o]) {
        m.put<std::int64_t>(at[o], cell.index, cell.value);
      } else {
        m.put<std::int32_t>(at[o], cell.index, static_cast<std::int32_t>(cell.value));
      }
    }
  }
  round_guards g;
  for (int w = 0; w < 2; ++w) {
    const nr_violation* first = nr_first(ne.guard[w]);
    g.violations[round_guard_next + w] = static_cast<std::int32_t>(ne.guard[w].size());
    if (first != nullptr) {
      g.row[round_guard_next + w] = first->row;
      g.column[round_guard_next + w] = first->column;
    }
  }
  return g;
}

}  // namespace specgraph::testing
