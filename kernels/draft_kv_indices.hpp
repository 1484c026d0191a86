// Per-cell code of the CSR draft-decode KV indices (docs/csr.md). Host+device.
//
// Three passes, each a row kernel, after the launcher zeroed the refused flags:
//   check: one thread per (row q, entry i) of the widest step; validates the request's scalars
//          (cell (r * topk, 0) records them) and the slot of entry i (prefix entries by branch 0
//          only), flags a bad request in `refused` (every writer stores the same 1);
//   scan:  one thread for the whole batch: for every request r the kept-prefix sum and the
//          count of accepted requests before r, a running sum (O(batch) work in all; a thread
//          per request looping over r' < r had the same latency and O(batch^2) work, seconds at
//          limits::max_batch);
//   fill:  one thread per (step k, row q, entry i), entries fastest so stores coalesce: entry 0
//          writes kv_indptr[k][q + 1] (row 0 also kv_indptr[k][0]); entry i < len writes its slot
//          through checked_store against the step's capacity. No atomics on the healthy path.
// A refused request's rows are a padded request's (pool row 0, seq_len 1, docs/csr.md section
// 2), each slot of them out of range stored as the dummy slot 0; only when pool row 0 is too
// narrow even for a padded request are they empty. A request the round's prefix check refused
// is refused here too (its rows padded; the guard records only what this launch finds), and a
// request past the device real batch is read as a padded request to begin with.
// With a device step counter (p.device_step) every pass reads the step from device memory and
// computes that step alone (kv_active_steps); the grids are sized for the widest step.
//
// Preconditions (validate(kv_indices_params); ranges in kv_indices.hpp): rows * (Lmax + d_max)
// <= INT32_MAX, so every kv_indptr value, every flat index and every capacity fits int32;
// positions are int64 (a branch region reaches topk * ps * nnp past seq_len).
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "kernels/padding_rows.hpp"
#include "specgraph/kv_indices.hpp"

namespace specgraph::kernels {

struct kv_request {
  const std::int32_t* entries;  // its row of req_to_token
  std::int32_t seq_len;
  std::int32_t kept;           // Lw
  std::int64_t branch_region;  // positions between two branches' regions (kv_branch_region)
};

// Lw for a seq_len already in range.
SPECGRAPH_HD std::int32_t kv_kept(const kv_indices_params& p, std::int32_t seq_len) {
  if (p.window == 0) return seq_len;
  const std::int32_t limit = p.window + p.sink;  // each <= 2^28: fits int32
  return seq_len < limit ? seq_len : limit;
}

SPECGRAPH_HD std::int32_t kv_max_step_count(const kv_indices_params& p) {
  return p.first_step + p.step_count;  // d of the widest step, <= num_steps
}

// The launch steps [begin, end) the threads compute (launch step k is step first_step + k): all
// of them, or with a device step counter the one it holds, or none (begin == end) when it holds
// a step outside the launch.
struct kv_steps {
  std::int32_t begin, end;
};
SPECGRAPH_HD kv_steps kv_active_steps(const kv_indices_params& p) {
  if (p.device_step == nullptr) return {0, p.step_count};
  const std::int64_t k = static_cast<std::int64_t>(*p.device_step) - p.first_step;  // no overflow
  if (k < 0 || k >= p.step_count) return {0, 0};
  return {static_cast<std::int32_t>(k), static_cast<std::int32_t>(k) + 1};
}

SPECGRAPH_HD std::int64_t kv_span(const kv_indices_params& p) {
  const std::int64_t kept_max = p.window == 0
                                    ? p.max_seq_len
                                    : (p.max_seq_len < static_cast<std::int64_t>(p.window) + p.sink
                                           ? p.max_seq_len
                                           : static_cast<std::int64_t>(p.window) + p.sink);
  return kept_max + kv_max_step_count(p);
}

// Draft slots per branch: slot_stride, or num_steps when it is 0.
SPECGRAPH_HD std::int32_t kv_slot_stride(const kv_indices_params& p) {
  return p.slot_stride == 0 ? p.num_steps : p.slot_stride;
}

// Positions between two branches' regions: with S = kv_slot_stride, ps * nnp where
// nnp = ceil((seq_len % ps + S) / ps); S itself at ps = 1 or topk = 1 (the same at ps = 1; at
// topk = 1 only branch 0 exists). All terms < 2^21: int64 anyway.
SPECGRAPH_HD std::int64_t kv_branch_region(const kv_indices_params& p, std::int32_t seq_len) {
  const std::int32_t s = kv_slot_stride(p);
  if (p.page_size == 1 || p.topk == 1) return s;
  const std::int64_t nnp =
      (static_cast<std::int64_t>(seq_len % p.page_size) + s + p.page_size - 1) / p.page_size;
  return nnp * p.page_size;
}

// Position of draft token j of branch t: seq_len + t * region + j.
SPECGRAPH_HD std::int64_t kv_draft_position(const kv_request& q, std::int32_t t, std::int32_t j) {
  return q.seq_len + t * q.branch_region + j;
}

// Position of the i-th kept prefix entry (i < Lw).
SPECGRAPH_HD std::int64_t kv_kept_position(const kv_indices_params& p, const kv_request& q,
                                           std::int32_t i) {
  if (p.window == 0 || q.seq_len == q.kept || i < p.sink) return i;
  return static_cast<std::int64_t>(q.seq_len) - p.window + (i - p.sink);
}

// Position of entry i of a row of branch t (i < Lw + d).
SPECGRAPH_HD std::int64_t kv_entry_position(const kv_indices_params& p, const kv_request& q,
                                            std::int32_t t, std::int32_t i) {
  return i < q.kept ? kv_kept_position(p, q, i) : kv_draft_position(q, t, i - q.kept);
}

// The slot at a position: entry(p / E) * E + p % E; negative entries give negative slots.
SPECGRAPH_HD std::int64_t kv_slot(const kv_indices_params& p, const kv_request& q,
                                  std::int64_t position) {
  const std::int64_t e = q.entries[position / p.entry_page_size];
  return e * p.entry_page_size + position % p.entry_page_size;
}

SPECGRAPH_HD bool kv_bad_slot(const kv_indices_params& p, std::int64_t slot) {
  if (slot < 0 || slot >= p.slot_limit) return true;
  return p.kv_indices_i32 != nullptr && slot > 0x7fffffff;
}

// The request's pool row and seq_len as the launch reads them: a padded request's (pool row 0,
// seq_len 1) past the device real batch, whatever the inputs hold there.
SPECGRAPH_HD std::int64_t kv_pool_row(const kv_indices_params& p, std::int32_t r) {
  return past_real_batch(p.padding_from, r) ? 0 : p.req_pool_index.load(r);
}
SPECGRAPH_HD std::int64_t kv_seq_len(const kv_indices_params& p, std::int32_t r) {
  return past_real_batch(p.padding_from, r) ? 1 : p.seq_len.load(r);
}

// The view of a request with these scalars, or false when one is out of range (pool row,
// seq_len, row width); d_max: the draft tokens the widest computed step reads.
SPECGRAPH_HD bool kv_request_at(const kv_indices_params& p, std::int64_t pool_row64,
                                std::int64_t seq_len64, std::int32_t d_max, kv_request* out) {
  if (pool_row64 < 0 || pool_row64 >= p.pool_rows) return false;
  if (seq_len64 < 0 || seq_len64 > p.max_seq_len) return false;
  const auto pool_row = static_cast<std::int32_t>(pool_row64);
  const auto seq_len = static_cast<std::int32_t>(seq_len64);
  out->entries = p.req_to_token + static_cast<std::int64_t>(pool_row) * p.req_to_token_stride;
  out->seq_len = seq_len;
  out->kept = kv_kept(p, seq_len);
  out->branch_region = kv_branch_region(p, seq_len);
  // The last position read: branch topk - 1, draft token d_max - 1.
  const std::int64_t last = kv_draft_position(*out, p.topk - 1, d_max - 1);
  return last < p.req_to_token_stride * p.entry_page_size;
}

// Request r's view. The pool row and seq_len are loaded as int64 (int32 or int64 inputs at any
// stride) and range-checked before they are narrowed.
SPECGRAPH_HD bool kv_request_of(const kv_indices_params& p, std::int32_t r, std::int32_t d_max,
                                kv_request* out) {
  return kv_request_at(p, kv_pool_row(p, r), kv_seq_len(p, r), d_max, out);
}

// What a refused request's rows hold: a padded request's (pool row 0, seq_len 1); false when
// even that is out of range (max_seq_len 0, or pool row 0 too narrow): the rows are then empty.
SPECGRAPH_HD bool kv_padding_request(const kv_indices_params& p, std::int32_t d_max,
                                     kv_request* out) {
  return kv_request_at(p, 0, 1, d_max, out);
}

// Records in `g` why kv_request_of refused request r (guard row: the request's first query row).
SPECGRAPH_HD void kv_record_request(const kv_indices_params& p, guard_word* g, std::int32_t r,
                                    kernel_id id) {
  const std::int64_t pool_row = kv_pool_row(p, r);  // as loaded: named unnarrowed
  const std::int64_t seq_len = kv_seq_len(p, r);
  const std::int32_t row = r * p.topk;
  if (pool_row < 0 || pool_row >= p.pool_rows) {
    guard_record(g, violation_kind::bad_input, id, row, -1, p.pool_rows, pool_row);
  } else if (seq_len < 0 || seq_len > p.max_seq_len) {
    guard_record(g, violation_kind::bad_input, id, row, -1, p.max_seq_len, seq_len);
  } else {  // the row is too narrow for the branch regions: value = the seq_len that needs more
    const std::int64_t width = p.req_to_token_stride * p.entry_page_size;
    guard_record(g, violation_kind::bad_input, id, row, -1,
                 width > 0x7fffffff ? 0x7fffffff : static_cast<std::int32_t>(width), seq_len);
  }
}

struct kv_check_kernel {
  using params = kv_indices_params;
  static constexpr const char* name = "draft_kv_indices_check";
  static constexpr kernel_id id = kernel_id::draft_kv_indices;

  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return static_cast<std::int64_t>(p.batch) * p.topk * kv_span(p);
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    const std::int64_t span = kv_span(p);
    const auto q = static_cast<std::int32_t>(cell / span);  // < 2^24
    const auto i = static_cast<std::int32_t>(cell % span);  // span <= INT32_MAX
    const std::int32_t r = q / p.topk;
    const std::int32_t t = q % p.topk;
    const kv_steps steps = kv_active_steps(p);
    if (steps.begin == steps.end) {  // a device counter outside the launch: nothing to compute
      if (cell == 0) {
        guard_record(p.guard, violation_kind::bad_input, id, 0, -1, kv_max_step_count(p),
                     *p.device_step);
      }
      return;
    }
    const std::int32_t d_max = p.first_step + steps.end;
    guard_word* g = p.guard + steps.begin;  // bad input: the first computed step's word
    // Refused by the round's prefix check: padding in every table of the round (its own
    // inputs are still checked below, and recorded, as any request's).
    if (t == 0 && i == 0 && p.refused != nullptr && p.refused[r] != 0) p.scratch[r] = 1;
    kv_request v{};
    if (!kv_request_of(p, r, d_max, &v)) {
      if (t == 0 && i == 0) {
        kv_record_request(p, g, r, id);
        p.scratch[r] = 1;
      }
      return;
    }
    if (i >= v.kept + d_max) return;
    if (i < v.kept && t != 0) return;  // prefix entries are the same for every branch
    const std::int64_t slot = kv_slot(p, v, kv_entry_position(p, v, t, i));
    if (kv_bad_slot(p, slot)) {
      guard_record(g, violation_kind::bad_input, id, q, i, -1, slot);
      p.scratch[r] = 1;
    }
  }
};

struct kv_scan_kernel {
  using params = kv_indices_params;
  static constexpr const char* name = "draft_kv_indices_scan";

  static std::int64_t rows(const params& p) { return p.batch > 0 ? 1 : 0; }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    const kv_steps steps = kv_active_steps(p);
    if (steps.begin == steps.end) return;  // nothing is filled
    // A refused request's rows are a padded request's, or empty when that does not fit.
    kv_request pad{};
    const bool pad_fits = kv_padding_request(p, p.first_step + steps.end, &pad);
    // int64 running sums: the stored ones (before r) are <= rows * Lmax <= INT32_MAX, the sum
    // after the last request need not be. "Filled": requests whose rows are not empty.
    std::int64_t kept = 0, filled = 0;
    for (std::int32_t r = 0; r < p.batch; ++r) {
      p.scratch[p.batch + r] = static_cast<std::int32_t>(kept);
      p.scratch[2 * p.batch + r] = static_cast<std::int32_t>(filled);
      if (p.scratch[r] != 0) {
        if (pad_fits) {
          kept += pad.kept;
          ++filled;
        }
        continue;
      }
      // Accepted: seq_len in [0, max_seq_len], so the narrowing is exact.
      kept += kv_kept(p, static_cast<std::int32_t>(kv_seq_len(p, r)));
      ++filled;
    }
  }
};

struct kv_fill_kernel {
  using params = kv_indices_params;
  static constexpr const char* name = "draft_kv_indices_fill";
  static constexpr kernel_id id = kernel_id::draft_kv_indices;

  // One step's cells with a device step counter (the step is decided on the device).
  static std::int64_t rows(const params& p) {
    const std::int32_t steps = p.device_step != nullptr ? 1 : p.step_count;
    return static_cast<std::int64_t>(steps) * kv_check_kernel::rows(p);
  }

  template <class T>
  SPECGRAPH_HD static T* step_indices(const params& p, T* base, std::int32_t k) {
    if (p.kv_indices_stride > 0) return base + k * p.kv_indices_stride;
    // Packed: the capacities of steps 0 .. k - 1, k * capacity + growth * k (k - 1) / 2.
    const std::int64_t kk = k;
    return base + kk * p.capacity + p.capacity_growth * (kk * (kk - 1) / 2);
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    const kv_steps steps = kv_active_steps(p);
    const std::int64_t per_step = kv_check_kernel::rows(p);
    const std::int32_t k = steps.begin + static_cast<std::int32_t>(cell / per_step);
    if (k >= steps.end) return;  // a device counter outside the launch writes nothing
    const std::int64_t rest = cell % per_step;
    const std::int64_t span = kv_span(p);
    const auto q = static_cast<std::int32_t>(rest / span);
    const auto i = static_cast<std::int32_t>(rest % span);
    const std::int32_t r = q / p.topk;
    const std::int32_t t = q % p.topk;
    const std::int32_t d = p.first_step + k + 1;
    const bool accepted = p.scratch[r] == 0;
    kv_request v{};
    // Accepted: true (the check accepted it); refused: a padded request's rows if they fit.
    const bool fits = accepted ? kv_request_of(p, r, p.first_step + steps.end, &v)
                               : kv_padding_request(p, p.first_step + steps.end, &v);
    const std::int32_t len = fits ? v.kept + d : 0;
    // topk * (sum of Lw before r + filled requests before r * d) + t * len: <= INT32_MAX.
    const std::int32_t start =
        p.topk * (p.scratch[p.batch + r] + p.scratch[2 * p.batch + r] * d) + t * len;
    const std::int32_t rows_plus_one = p.batch * p.topk + 1;
    std::int32_t* indptr = p.kv_indptr + k * p.kv_indptr_stride;
    guard_word* g = p.guard + k;
    if (i == 0) {
      if (q == 0) checked_store(indptr, 0, rows_plus_one, 0, g, id, q);
      checked_store(indptr, q + 1, rows_plus_one, start + len, g, id, q);
    }
    if (i >= len) return;
    std::int64_t slot = kv_slot(p, v, kv_entry_position(p, v, t, i));
    // A refused request's padded rows were not checked: an out-of-range slot of pool row 0 is
    // stored as the dummy slot 0 (the refusal is already recorded).
    if (!accepted && kv_bad_slot(p, slot)) slot = 0;
    const std::int32_t capacity = p.capacity + k * p.capacity_growth;  // validated <= INT32_MAX
    if (p.kv_indices_i32 != nullptr) {
      checked_store(step_indices(p, p.kv_indices_i32, k), start + i, capacity, slot, g, id, q);
    } else {
      checked_store(step_indices(p, p.kv_indices_i64, k), start + i, capacity, slot, g, id, q);
    }
  }
};

}  // namespace specgraph::kernels
