// Per-request code of the commit (docs/commit.md): the input check, the KV moves and the finish
// rules of one request, and the one pass. Host+device; one logical thread per request, a few
// registers, no scratch. Thread r < batch checks request r (when real) and writes every output
// cell of its row; a padding row (past the real batch, refused by the check, or not idle in a
// stalled round) moves nothing and does not finish; an idle row (finished earlier, left in place)
// moves nothing and writes only kv_move, so its finish cells keep the round it finished in. Thread
// batch records a clamped real-batch word. Every output cell is stored once, through checked_store;
// the budget (max_new_tokens_left, in-place state) of a real row the check passed is decremented in
// place by its emit_len.
//
// Costs per request: the check reads c + 1 <= D accept_index entries; the moves read at most
// 2 * num_steps req_to_token slots; the finish compares a <= D output tokens with every stop id
// (O(D * stop_token_count), at most 2^20 comparisons).
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/limits.hpp"

namespace specgraph::kernels {

// The real batch: the launch scalar, or the device word clamped into [0, batch].
SPECGRAPH_HD std::int32_t commit_real_batch(const commit_params& p) {
  if (p.real_batch_at == nullptr) return p.real_batch;
  const std::int32_t v = *p.real_batch_at;
  return v < 0 ? 0 : (v > p.batch ? p.batch : v);
}

// The guard's column of each per-request input (accept_index[r][k] records column k >= 0).
enum commit_column : std::int32_t {
  commit_col_seq_len = -1,
  commit_col_req_pool_index = -2,
  commit_col_allocated_len = -3,
  commit_col_accept_length = -4,
  commit_col_max_new_tokens_left = -5,
  commit_col_none = -100,  // no fault
};

// A request's first bad input, in the order the check reads them.
struct commit_fault {
  std::int32_t column = commit_col_none;
  std::int32_t capacity = 0;
  std::int64_t value = 0;
};

SPECGRAPH_HD commit_fault commit_fault_at(std::int32_t column, std::int64_t capacity,
                                          std::int64_t value) {
  commit_fault f;
  f.column = column;
  f.capacity = static_cast<std::int32_t>(capacity);  // every bound below fits int32
  f.value = value;
  return f;
}

// The check, in this order (capacity: the bound the value broke):
//   seq_len in [1, max_context_len]                   column -1, capacity the limit
//   req_pool_index in [0, pool_rows)                  column -2, capacity pool_rows
//   allocated_len in [seq_len + D, stride]            column -3, capacity seq_len + D or stride
//   accept_length in [0, min(num_steps, D - 1)]       column -4, capacity that maximum
//   max_new_tokens_left >= 1 (when set)               column -5, capacity 1
//   accept_index[r][0] == r * D                       column 0, capacity r * D
//   accept_index[r][k], k = 1 .. c: above entry k - 1 column k, capacity entry k - 1 + 1
//     and below r * D + D                                       or r * D + D
// Bounds: seq_len + D <= 2^28 + 2^10, stride < 2^31, r * D + D <= max_rows: all int32.
SPECGRAPH_HD commit_fault commit_check(const commit_params& p, std::int32_t r) {
  const std::int64_t seq_len = p.seq_len[r];
  if (seq_len < 1 || seq_len > limits::max_context_len) {
    return commit_fault_at(commit_col_seq_len, limits::max_context_len, seq_len);
  }
  const std::int32_t row = p.req_pool_index[r];
  if (row < 0 || row >= p.pool_rows) {
    return commit_fault_at(commit_col_req_pool_index, p.pool_rows, row);
  }
  const std::int64_t allocated = p.allocated_len[r];
  const std::int64_t need = seq_len + p.draft_tokens;
  if (allocated < need) return commit_fault_at(commit_col_allocated_len, need, allocated);
  if (allocated > p.req_to_token_stride) {
    return commit_fault_at(commit_col_allocated_len, p.req_to_token_stride, allocated);
  }
  const std::int32_t c = p.accept_length[r];
  const std::int32_t c_max = p.num_steps < p.draft_tokens - 1 ? p.num_steps : p.draft_tokens - 1;
  if (c < 0 || c > c_max) return commit_fault_at(commit_col_accept_length, c_max, c);
  if (p.max_new_tokens_left != nullptr && p.max_new_tokens_left[r] < 1) {
    return commit_fault_at(commit_col_max_new_tokens_left, 1, p.max_new_tokens_left[r]);
  }
  const std::int64_t first = static_cast<std::int64_t>(r) * p.draft_tokens;
  const std::int32_t* index = p.accept_index + static_cast<std::int64_t>(r) * (p.num_steps + 1);
  if (index[0] != first) return commit_fault_at(0, first, index[0]);
  for (std::int32_t k = 1; k <= c; ++k) {
    const std::int64_t v = index[k], prev = index[k - 1];
    if (v <= prev) return commit_fault_at(k, prev + 1, v);
    if (v >= first + p.draft_tokens) return commit_fault_at(k, first + p.draft_tokens, v);
  }
  return {};
}

// The finish of a checked request: whether it finished, the tokens the client gets and the
// positions its row frees.
struct commit_finish {
  std::int32_t finished = 0;
  std::int32_t emit_len = 0;
  std::int32_t free_begin = 0;
  std::int32_t free_end = 0;
};

SPECGRAPH_HD bool commit_is_stop(const commit_params& p, std::int32_t token) {
  for (std::int32_t i = 0; i < p.stop_token_count; ++i) {
    if (p.stop_token_ids[i] == token) return true;
  }
  return false;
}

// a = c + 1 in [1, D]; m >= 1 when set; owned <= seq_len + a <= 2^28 + 2^10, and
// ceil_page(owned) < owned + page_size <= 2^29: int64 holds every step.
SPECGRAPH_HD commit_finish commit_finish_of(const commit_params& p, std::int32_t r) {
  const std::int64_t a = static_cast<std::int64_t>(p.accept_length[r]) + 1;
  const bool budget = p.max_new_tokens_left != nullptr;
  const std::int64_t m = budget ? p.max_new_tokens_left[r] : 0;
  const std::int32_t* tokens = p.accept_tokens + static_cast<std::int64_t>(r) * p.draft_tokens;
  std::int64_t e = -1;
  for (std::int64_t j = 0; j < a && e < 0; ++j) {
    if (commit_is_stop(p, tokens[j])) e = j;
  }
  commit_finish f;
  std::int64_t emit = a;
  if (e >= 0) {
    emit = budget && m < e + 1 ? m : e + 1;
    f.finished = 1;
  } else if (budget && a >= m) {
    emit = m;
    f.finished = 1;
  }
  f.emit_len = static_cast<std::int32_t>(emit);
  if (f.finished != 0) {
    const std::int64_t seq_len = p.seq_len[r];
    const std::int64_t allocated = p.allocated_len[r];
    const std::int64_t owned = seq_len + (a < emit + 1 ? a : emit + 1);
    const std::int64_t ps = p.page_size;
    const std::int64_t page_end = (owned + ps - 1) / ps * ps;
    f.free_begin = static_cast<std::int32_t>(page_end < allocated ? page_end : allocated);
    f.free_end = static_cast<std::int32_t>(allocated);
  }
  return f;
}

struct commit_kernel {
  using params = commit_params;
  static constexpr const char* name = "commit";
  static constexpr kernel_id id = kernel_id::commit_metadata;

  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return static_cast<std::int64_t>(p.batch) + 1;
  }

  // Capacities are validated <= INT32_MAX, and every flat index < batch * num_steps * 2 <=
  // 2 * max_rows.
  SPECGRAPH_HD static std::int32_t cap(std::int64_t c) { return static_cast<std::int32_t>(c); }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    const auto r = static_cast<std::int32_t>(row);
    const std::int32_t real = commit_real_batch(p);
    if (r == p.batch) {
      if (p.real_batch_at != nullptr && real != *p.real_batch_at) {
        guard_record(p.guard, violation_kind::bad_input, id, -1, -2, p.batch, *p.real_batch_at);
      }
      return;
    }
    // An idle row reads as padding but keeps its finish cells (commit_params::idle): read
    // before any store, since idle may alias finished.
    const bool idle = r < real && p.idle != nullptr && p.idle[r] != 0;
    // A stalled round (commit_params::stall): every row that is not idle is padding.
    bool padded = r >= real || idle || (p.stall != nullptr && *p.stall != 0);
    if (!padded) {
      const commit_fault f = commit_check(p, r);
      if (f.column != commit_col_none) {
        guard_record(p.guard, violation_kind::bad_input, id, r, f.column, f.capacity, f.value);
        padded = true;
      }
    }
    guard_word* g = p.guard + 1;
    const kernel_id out = kernel_id::commit_outputs;
    if (p.kv_move != nullptr) {
      // Window row k's move; V[i] at req_to_token[row][seq_len + i], seq_len + i < allocated_len
      // <= stride (checked). row * stride < 2^24 * 2^31 fits int64.
      const std::int32_t c = padded ? 0 : p.accept_length[r];
      const std::int64_t first = static_cast<std::int64_t>(r) * p.draft_tokens;
      const std::int32_t* index = p.accept_index + static_cast<std::int64_t>(r) * (p.num_steps + 1);
      const std::int32_t* window =
          padded ? nullptr
                 : p.req_to_token +
                       static_cast<std::int64_t>(p.req_pool_index[r]) * p.req_to_token_stride +
                       p.seq_len[r];
      const std::int64_t base = static_cast<std::int64_t>(r) * p.num_steps * 2;
      for (std::int32_t k = 1; k <= p.num_steps; ++k) {
        std::int64_t dst = -1, src = -1;
        if (!padded && p.topk > 1 && k <= c) {
          const std::int64_t n = index[k] - first;
          if (n != k) {
            dst = window[k];
            src = window[n];
          }
        }
        const auto at = static_cast<std::int32_t>(base + 2 * (k - 1));
        checked_store(p.kv_move, at, cap(p.kv_move_capacity), dst, g, out, r);
        checked_store(p.kv_move, at + 1, cap(p.kv_move_capacity), src, g, out, r);
      }
    }
    commit_finish f;
    if (!padded) f = commit_finish_of(p, r);
    // The budget after the round, in place (in-place state like next_round's allocated_len:
    // cell r < batch, the one the check read): m - emit_len >= 0, emit_len <= m when set.
    if (!padded && p.max_new_tokens_left != nullptr) {
      p.max_new_tokens_left[r] -= f.emit_len;
    }
    if (idle) return;
    if (p.finished != nullptr) {
      checked_store(p.finished, r, cap(p.finished_capacity), f.finished, g, out, r);
    }
    if (p.emit_len != nullptr) {
      checked_store(p.emit_len, r, cap(p.emit_len_capacity), f.emit_len, g, out, r);
    }
    if (p.free_begin != nullptr) {
      checked_store(p.free_begin, r, cap(p.free_begin_capacity), f.free_begin, g, out, r);
    }
    if (p.free_end != nullptr) {
      checked_store(p.free_end, r, cap(p.free_end_capacity), f.free_end, g, out, r);
    }
  }
};

}  // namespace specgraph::kernels
