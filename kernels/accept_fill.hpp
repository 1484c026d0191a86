// Per-request code of greedy tree acceptance (docs/accept.md), part 2: the one pass. Thread r <
// batch checks request r (when real), walks its tree and writes every output cell of its row;
// a padding row (past the real batch, idle, refused by the check, or any row of a stalled round)
// accepts nothing. Thread batch
// records a clamped real-batch word. Each output cell is stored once, through checked_store.
#pragma once

#include <cstdint>

#include "kernels/accept_tree.hpp"

namespace specgraph::kernels {

struct accept_kernel {
  using params = accept_params;
  static constexpr const char* name = "accept";
  static constexpr kernel_id id = kernel_id::accept_metadata;

  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return static_cast<std::int64_t>(p.batch) + 1;
  }

  // Capacities are validated <= INT32_MAX, and every flat index < batch * max(D, S) <= max_rows.
  SPECGRAPH_HD static std::int32_t cap(std::int64_t c) { return static_cast<std::int32_t>(c); }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    const auto r = static_cast<std::int32_t>(row);
    const std::int32_t real = accept_real_batch(p);
    if (r == p.batch) {
      if (p.real_batch_at != nullptr && real != *p.real_batch_at) {
        guard_record(p.guard, violation_kind::bad_input, id, -1, -2, p.batch, *p.real_batch_at);
      }
      return;
    }
    // A stalled round (accept_params::stall) accepts nothing and keeps bonus and new_seq_len.
    const bool stalled = p.stall != nullptr && *p.stall != 0;
    bool padded = stalled || r >= real || (p.idle != nullptr && p.idle[r] != 0);
    if (!padded) {
      const accept_fault f = accept_check(p, r);
      if (f.column != -4) {
        guard_record(p.guard, violation_kind::bad_input, id, r, f.column, f.capacity, f.value);
        padded = true;
      }
    }
    const std::int32_t d = p.draft_tokens, s = p.num_steps + 1;
    const std::int64_t tree_first = static_cast<std::int64_t>(r) * d;
    const std::int64_t path_first = static_cast<std::int64_t>(r) * s;
    guard_word* g = p.guard + 1;
    const kernel_id out = kernel_id::accept_outputs;
    accept_tree t{};
    accept_path a;
    if (!padded) {
      t = accept_tree_of(p, r);
      a = accept_walk(t, p.num_steps);
    }
    // accept_index and accept_tokens: the path in order, a second walk from the root.
    std::int32_t u = 0;
    for (std::int32_t k = 0; k < s || k < d; ++k) {
      const bool on_path = !padded && k <= a.length;
      if (k > 0 && on_path) u = accept_next(t, u);
      if (p.accept_index != nullptr && k < s) {
        const std::int64_t v = on_path ? tree_first + u : -1;
        checked_store(p.accept_index, static_cast<std::int32_t>(path_first + k),
                      cap(p.accept_index_capacity), v, g, out, r);
      }
      if (p.accept_tokens != nullptr && k < d) {
        const std::int32_t v = on_path ? t.predict[u] : 0;
        checked_store(p.accept_tokens, static_cast<std::int32_t>(tree_first + k),
                      cap(p.accept_tokens_capacity), v, g, out, r);
      }
    }
    // predict: node order, a third walk kept one accepted node ahead.
    if (p.predict != nullptr) {
      std::int32_t next = padded ? -1 : 0, taken = 0;
      for (std::int32_t i = 0; i < d; ++i) {
        std::int32_t v = 0;
        if (i == next) {
          v = t.predict[i];
          ++taken;
          next = taken <= a.length ? accept_next(t, i) : -1;
        }
        checked_store(p.predict, static_cast<std::int32_t>(tree_first + i), cap(p.predict_capacity),
                      v, g, out, r);
      }
    }
    if (p.accept_length != nullptr) {
      checked_store(p.accept_length, r, cap(p.accept_length_capacity), a.length, g, out, r);
    }
    if (p.bonus != nullptr && !stalled) {
      const std::int32_t v = padded ? 0 : t.predict[a.last];
      checked_store(p.bonus, r, cap(p.bonus_capacity), v, g, out, r);
    }
    if (p.new_seq_len != nullptr && !stalled) {
      const std::int64_t v = padded ? static_cast<std::int64_t>(p.seq_len[r])
                                    : static_cast<std::int64_t>(p.seq_len[r]) + a.length + 1;
      checked_store(p.new_seq_len, r, cap(p.new_seq_len_capacity), v, g, out, r);
    }
    if (p.select_index != nullptr) {
      const std::int64_t v = tree_first + (padded ? d - 1 : a.length);
      checked_store(p.select_index, r, cap(p.select_index_capacity), v, g, out, r);
    }
  }
};

}  // namespace specgraph::kernels
