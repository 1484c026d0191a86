// Per-cell code of the draft-extend metadata (docs/extend.md), part 1: the request view, the
// check pass and the scan. Host+device.
//
//   check: one thread per (request r, position p < M + W): cell (r, 0) validates the request's
//          scalars (pool row, 0 <= seq_len <= M, seq_len + W <= the row width, 0 <= accept_len
//          <= W), every other cell the slot at position p < seq_len + W; a bad request is
//          flagged (every writer stores 1) and is then written as a padded row. Rows at or past
//          the real batch are padding whatever they hold and are not checked;
//   scan:  one thread: the real batch word, the padded flags, the running sums per request
//          (FA3 keys, prefix and full kv entries), every per-request vector and indptr
//          (cache_seqlen, cu_seqlens_q/k, max_seqlen_k, both qo/kv indptrs, kv_last_page_len)
//          and select_index: O(batch) work.
// The fill passes over token rows, page-table cells and kv entries are in extend_fill.hpp. No
// atomics on the healthy path.
//
// Ranges (validate(extend_params)): batch * (M + W) <= INT32_MAX, so every indptr value, flat
// index and capacity fits int32; the sums are int64 all the same.
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "specgraph/extend_metadata.hpp"

namespace specgraph::kernels {

// Scratch layout (int64 words, extend_scratch_words(batch) = 4 * batch): the flags, then the
// starts of each request's keys (FA3), prefix kv entries (C2p) and full kv entries (C2f).
struct extend_scratch {
  std::int64_t* padded;        // [batch] 1: refused by the check or past the real batch
  std::int64_t* key_start;     // [batch] sum(L) before r
  std::int64_t* prefix_start;  // [batch] sum(kv_len) before r
  std::int64_t* full_start;    // [batch] sum(L) before r (the C2f stream: the same sums)
};

SPECGRAPH_HD extend_scratch extend_scratch_of(const extend_params& p) {
  const std::int64_t b = p.batch;
  std::int64_t* s = p.scratch;
  return {s, s + b, s + 2 * b, s + 3 * b};
}

// Positions a request's launch may read: the prefix and the W window tokens (M + W at most).
SPECGRAPH_HD std::int64_t extend_span(const extend_params& p) {
  return static_cast<std::int64_t>(p.max_seq_len) + p.extend_tokens;
}

// A real row acceptance accepted nothing for (extend_params::accept_index): written as padding.
SPECGRAPH_HD bool extend_row_idle(const extend_params& p, std::int32_t r) {
  return p.accept_index != nullptr && p.accept_index[r * p.accept_index_stride] < 0;
}

// The real batch: the launch scalar, or the device word clamped into [0, batch].
SPECGRAPH_HD std::int32_t extend_real_batch(const extend_params& p) {
  if (p.real_batch_at == nullptr) return p.real_batch;
  const std::int32_t v = *p.real_batch_at;
  return v < 0 ? 0 : (v > p.batch ? p.batch : v);
}

SPECGRAPH_HD std::int32_t extend_clamp32(std::int64_t v) {
  return v > 0x7fffffff ? 0x7fffffff
                        : (v < -0x7fffffff ? -0x7fffffff : static_cast<std::int32_t>(v));
}

// Why request r's scalars are refused (0: they are fine): 1 pool row, 2 seq_len, 3 row width,
// 4 accept_len.
SPECGRAPH_HD int extend_scalar_fault(const extend_params& p, std::int32_t r) {
  const std::int32_t pool_row = p.req_pool_index[r];
  const std::int32_t seq_len = p.seq_len[r];
  const std::int32_t accept = p.accept_len[r];
  if (pool_row < 0 || pool_row >= p.pool_rows) return 1;
  if (seq_len < 0 || seq_len > p.max_seq_len) return 2;
  if (static_cast<std::int64_t>(seq_len) + p.extend_tokens > p.req_to_token_stride) return 3;
  if (accept < 0 || accept > p.extend_tokens) return 4;
  return 0;
}

SPECGRAPH_HD const std::int32_t* extend_pool_row(const extend_params& p, std::int32_t pool_row) {
  return p.req_to_token + static_cast<std::int64_t>(pool_row) * p.req_to_token_stride;
}

struct extend_check_kernel {
  using params = extend_params;
  static constexpr const char* name = "extend_metadata_check";
  static constexpr kernel_id id = kernel_id::extend_metadata;

  SPECGRAPH_HD static std::int64_t rows(const params& p) { return p.batch * extend_span(p); }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    const std::int64_t span = extend_span(p);
    const auto r = static_cast<std::int32_t>(cell / span);
    const auto pos = static_cast<std::int32_t>(cell % span);         // span <= INT32_MAX
    if (r >= extend_real_batch(p) || extend_row_idle(p, r)) return;  // padding: never read
    const int fault = extend_scalar_fault(p, r);
    if (fault != 0) {
      if (pos != 0) return;
      const std::int32_t seq_len = p.seq_len[r];
      switch (fault) {
        case 1:
          guard_record(p.guard, violation_kind::bad_input, id, r, -1, p.pool_rows,
                       p.req_pool_index[r]);
          break;
        case 2:
          guard_record(p.guard, violation_kind::bad_input, id, r, -1, p.max_seq_len, seq_len);
          break;
        case 3:  // seq_len + W past the row: capacity = the row width, value = seq_len
          guard_record(p.guard, violation_kind::bad_input, id, r, -1,
                       extend_clamp32(p.req_to_token_stride), seq_len);
          break;
        default:  // accept_len outside [0, W]: column -3, capacity W
          guard_record(p.guard, violation_kind::bad_input, id, r, -3, p.extend_tokens,
                       p.accept_len[r]);
          break;
      }
      p.scratch[r] = 1;
      return;
    }
    if (pos >= p.seq_len[r] + p.extend_tokens) return;
    const std::int64_t slot = extend_pool_row(p, p.req_pool_index[r])[pos];
    if (slot < 0 || slot >= p.slot_limit) {
      guard_record(p.guard, violation_kind::bad_input, id, r, pos, -1, slot);
      p.scratch[r] = 1;
    }
  }
};

// The entry a padded row reads, req_to_token[0][0] (pool row 0, reserved by the engine), or 0
// when that slot is out of range (recorded by the scan).
SPECGRAPH_HD std::int64_t extend_pad_slot(const extend_params& p) {
  const std::int64_t slot = p.req_to_token[0];
  return slot < 0 || slot >= p.slot_limit ? 0 : slot;
}

struct extend_scan_kernel {
  using params = extend_params;
  static constexpr const char* name = "extend_metadata_scan";
  static constexpr kernel_id id = kernel_id::extend_metadata;

  // One thread, also for an empty bucket: the indptrs' single 0 and max_seqlen_k = 0.
  static std::int64_t rows(const params&) { return 1; }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    const extend_scratch s = extend_scratch_of(p);
    const std::int32_t real = extend_real_batch(p);
    if (p.real_batch_at != nullptr && real != *p.real_batch_at) {
      guard_record(p.guard, violation_kind::bad_input, id, -1, -2, p.batch, *p.real_batch_at);
    }
    const std::int64_t pad = p.req_to_token[0];
    bool padding = p.batch > real;  // a padded or idle row reads pad
    for (std::int32_t r = 0; r < real && !padding; ++r) padding = extend_row_idle(p, r);
    if (padding && (pad < 0 || pad >= p.slot_limit)) {
      guard_record(p.guard, violation_kind::bad_input, id, -1, 0, -1, pad);
    }
    const std::int32_t w = p.extend_tokens, n = p.batch + 1;
    const bool fa3 = p.cache_seqlen != nullptr, prefix = p.prefix_kv_indptr != nullptr;
    const bool full = p.full_kv_indptr != nullptr;
    guard_word* g = p.guard;
    std::int64_t keys = 0, prefix_kv = 0, max_k = 0;
    for (std::int32_t r = 0; r < p.batch; ++r) {
      const bool padded = r >= real || s.padded[r] != 0 || extend_row_idle(p, r);
      s.padded[r] = padded ? 1 : 0;
      const std::int64_t seq_len = padded ? 0 : p.seq_len[r];
      const std::int64_t len = padded ? 1 : seq_len + w;  // L: the post-write length
      s.key_start[r] = keys;
      s.full_start[r] = keys;
      s.prefix_start[r] = prefix_kv;
      const std::int64_t first = static_cast<std::int64_t>(r) * w;
      if (p.select_index != nullptr) {
        std::int64_t select = first + w - 1;
        if (!padded) {
          const std::int32_t a = p.accept_len[r];
          select = a >= 1 ? first + a - 1 : first;
          if (a == 0) {
            guard_record(g + 4, violation_kind::accept_len, kernel_id::extend_select_index, r, 0, w,
                         0);
          }
        }
        checked_store(p.select_index, r, p.batch, select, g, id, r);
      }
      if (fa3) {
        checked_store(p.cache_seqlen, r, p.batch, len, g, id, r);
        checked_store(p.cu_seqlens_q, r, n, first, g, id, r);
        checked_store(p.cu_seqlens_k, r, n, keys, g, id, r);
      }
      if (prefix) {
        checked_store(p.prefix_qo_indptr, r, n, first, g, id, r);
        checked_store(p.prefix_kv_indptr, r, n, prefix_kv, g, id, r);
      }
      if (full) {
        checked_store(p.full_qo_indptr, r, n, first, g, id, r);
        checked_store(p.full_kv_indptr, r, n, keys, g, id, r);
        checked_store(p.full_kv_last_page_len, r, p.batch, 1, g, id, r);
      }
      keys += len;
      prefix_kv += seq_len;
      max_k = len > max_k ? len : max_k;
    }
    const std::int64_t last = static_cast<std::int64_t>(p.batch) * w;
    if (fa3) {
      checked_store(p.cu_seqlens_q, p.batch, n, last, g, id, p.batch);
      checked_store(p.cu_seqlens_k, p.batch, n, keys, g, id, p.batch);
      checked_store(p.max_seqlen_k, 0, 1, max_k, g, id, -1);
    }
    if (prefix) {
      checked_store(p.prefix_qo_indptr, p.batch, n, last, g, id, p.batch);
      checked_store(p.prefix_kv_indptr, p.batch, n, prefix_kv, g, id, p.batch);
    }
    if (full) {
      checked_store(p.full_qo_indptr, p.batch, n, last, g, id, p.batch);
      checked_store(p.full_kv_indptr, p.batch, n, keys, g, id, p.batch);
    }
  }
};

}  // namespace specgraph::kernels
