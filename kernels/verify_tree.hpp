// Per-cell code of the target-verify metadata (docs/verify.md), part 1: the request view and the
// passes that decide and sum. Host+device.
//
//   check:      one thread per (request r, position p < M + D): cell (r, 0) validates the request's
//               scalars (pool row, 1 <= seq_len <= M, seq_len + D <= W), every other cell the slot
//               at position p < seq_len + D; a bad request is flagged (every writer stores 1);
//   scan:       one thread: the mask length against the formula (a mismatch refuses every real
//               request), then running sums per request (prefix keys, kv entries, mask cells,
//               packed bytes): O(batch) work;
//   count:      one thread per expand row e = r * D + i: how many verify tokens query i attends;
//   scan_rows:  one thread: the running sum of the counts, O(batch * D) work.
// The fill passes are in verify_fill.hpp. No atomics on the healthy path.
//
// Ranges (validate(verify_params)): batch * D * (M + D) <= INT32_MAX, so every indptr value, flat
// index, count sum and capacity fits int32; mask offsets are int64 all the same (the offsets come
// from seq_len values the kernels check only here).
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph::kernels {

// Scratch layout (int64 words): flags, then the per-request sums, then the per-row ones.
struct verify_scratch {
  std::int64_t* refused;       // [batch] 1: the request gets empty sequences
  std::int64_t* prefix_keys;   // [batch] sum(seq_len) of accepted requests before r
  std::int64_t* kv_start;      // [batch] sum(seq_len + D) of accepted requests before r
  std::int64_t* mask_offset;   // [batch] sum(D * (seq_len + D)) of real requests before r
  std::int64_t* packed_start;  // [batch] sum(ceil(D * (seq_len + D) / 8)) accepted before r
  std::int64_t* count;         // [batch * D] verify tokens each query attends
  std::int64_t* row_start;     // [batch * D] sum of counts before the row
};

SPECGRAPH_HD verify_scratch verify_scratch_of(const verify_params& p) {
  const std::int64_t b = p.batch, rows = b * p.draft_tokens;
  std::int64_t* s = p.scratch;
  return {s, s + b, s + 2 * b, s + 3 * b, s + 4 * b, s + 5 * b, s + 5 * b + rows};
}

struct verify_request {
  const std::int32_t* entries;  // its row of req_to_token
  std::int32_t seq_len;
  bool padded;
};

// Positions a request's launch may read: the prefix and the D verify tokens (M + D at most).
SPECGRAPH_HD std::int64_t verify_span(const verify_params& p) {
  return static_cast<std::int64_t>(p.max_seq_len) + p.draft_tokens;
}

SPECGRAPH_HD bool verify_seq_len_in_range(const verify_params& p, std::int32_t seq_len) {
  return seq_len >= 1 && seq_len <= p.max_seq_len;
}

// Cells of a real request's mask block, D * (seq_len + D) (int64: seq_len is unchecked here).
SPECGRAPH_HD std::int64_t verify_block_cells(const verify_params& p, std::int64_t seq_len) {
  return static_cast<std::int64_t>(p.draft_tokens) * (seq_len + p.draft_tokens);
}

// The real batch: the launch scalar, or the device word clamped into [0, batch].
SPECGRAPH_HD std::int32_t verify_real_batch(const verify_params& p) {
  if (p.real_batch_at == nullptr) return p.real_batch;
  const std::int32_t v = *p.real_batch_at;
  return v < 0 ? 0 : (v > p.batch ? p.batch : v);
}

// The request's view, or false when a scalar is out of range (pool row, seq_len, row width).
SPECGRAPH_HD bool verify_request_of(const verify_params& p, std::int32_t r, verify_request* out) {
  const std::int32_t pool_row = p.req_pool_index[r];
  const std::int32_t seq_len = p.seq_len[r];
  if (pool_row < 0 || pool_row >= p.pool_rows) return false;
  if (!verify_seq_len_in_range(p, seq_len)) return false;
  out->entries = p.req_to_token + static_cast<std::int64_t>(pool_row) * p.req_to_token_stride;
  out->seq_len = seq_len;
  out->padded = r >= verify_real_batch(p);
  return static_cast<std::int64_t>(seq_len) + p.draft_tokens <= p.req_to_token_stride;
}

SPECGRAPH_HD std::int32_t verify_clamp32(std::int64_t v) {
  return v > 0x7fffffff ? 0x7fffffff : static_cast<std::int32_t>(v);
}

// Records why verify_request_of refused request r (row r, column -1).
SPECGRAPH_HD void verify_record_request(const verify_params& p, std::int32_t r) {
  const std::int32_t pool_row = p.req_pool_index[r];
  const std::int32_t seq_len = p.seq_len[r];
  const kernel_id id = kernel_id::verify_metadata;
  if (pool_row < 0 || pool_row >= p.pool_rows) {
    guard_record(p.guard, violation_kind::bad_input, id, r, -1, p.pool_rows, pool_row);
  } else if (!verify_seq_len_in_range(p, seq_len)) {
    guard_record(p.guard, violation_kind::bad_input, id, r, -1, p.max_seq_len, seq_len);
  } else {  // seq_len + D past the row: capacity = the row width, value = seq_len
    guard_record(p.guard, violation_kind::bad_input, id, r, -1,
                 verify_clamp32(p.req_to_token_stride), seq_len);
  }
}

// The tree bit of query i, verify token j of an accepted request (padded requests: 1).
SPECGRAPH_HD bool verify_bit(const verify_params& p, const verify_scratch& s, std::int32_t r,
                             const verify_request& v, std::int32_t i, std::int32_t j) {
  if (v.padded) return true;
  const std::int64_t width = static_cast<std::int64_t>(v.seq_len) + p.draft_tokens;
  return p.custom_mask[s.mask_offset[r] + i * width + v.seq_len + j] != 0;
}

struct verify_check_kernel {
  using params = verify_params;
  static constexpr const char* name = "verify_metadata_check";
  static constexpr kernel_id id = kernel_id::verify_metadata;

  SPECGRAPH_HD static std::int64_t rows(const params& p) { return p.batch * verify_span(p); }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t cell) {
    const std::int64_t span = verify_span(p);
    const auto r = static_cast<std::int32_t>(cell / span);
    const auto pos = static_cast<std::int32_t>(cell % span);  // span <= INT32_MAX
    verify_request v{};
    if (!verify_request_of(p, r, &v)) {
      if (pos == 0) {
        verify_record_request(p, r);
        p.scratch[r] = 1;
      }
      return;
    }
    if (pos >= v.seq_len + p.draft_tokens) return;
    const std::int64_t slot = v.entries[pos];
    if (slot < 0 || slot >= p.slot_limit) {
      guard_record(p.guard, violation_kind::bad_input, id, r, pos, -1, slot);
      p.scratch[r] = 1;
    }
  }
};

struct verify_scan_kernel {
  using params = verify_params;
  static constexpr const char* name = "verify_metadata_scan";
  static constexpr kernel_id id = kernel_id::verify_metadata;

  static std::int64_t rows(const params& p) { return p.batch > 0 ? 1 : 0; }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    const verify_scratch s = verify_scratch_of(p);
    // The formula's mask length over the real requests (a seq_len out of range adds nothing:
    // that request is refused already). int64: up to real_batch * D * (2^31 + D).
    const std::int32_t real = verify_real_batch(p);
    if (p.real_batch_at != nullptr && real != *p.real_batch_at) {
      guard_record(p.guard, violation_kind::bad_input, id, -1, -2, p.batch, *p.real_batch_at);
    }
    std::int64_t needed = 0;
    for (std::int32_t r = 0; r < real; ++r) {
      if (verify_seq_len_in_range(p, p.seq_len[r])) needed += verify_block_cells(p, p.seq_len[r]);
    }
    const bool fits = p.mask_length_exact ? needed == p.mask_cells : needed <= p.mask_cells;
    if (!fits) {
      guard_record(p.guard, violation_kind::bad_input, id, -1, -1, verify_clamp32(p.mask_cells),
                   needed);
      for (std::int32_t r = 0; r < real; ++r) s.refused[r] = 1;
    }
    std::int64_t keys = 0, kv = 0, mask = 0, packed = 0;
    for (std::int32_t r = 0; r < p.batch; ++r) {
      s.prefix_keys[r] = keys;
      s.kv_start[r] = kv;
      s.mask_offset[r] = mask;
      s.packed_start[r] = packed;
      const std::int64_t seq_len = p.seq_len[r];
      if (r < real && verify_seq_len_in_range(p, p.seq_len[r])) {
        mask += verify_block_cells(p, seq_len);
      }
      if (s.refused[r] != 0) continue;
      keys += seq_len;
      kv += seq_len + p.draft_tokens;
      packed += (verify_block_cells(p, seq_len) + 7) / 8;
    }
  }
};

struct verify_count_kernel {
  using params = verify_params;
  static constexpr const char* name = "verify_metadata_count";

  SPECGRAPH_HD static std::int64_t rows(const params& p) {
    return static_cast<std::int64_t>(p.batch) * p.draft_tokens;
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t e) {
    const verify_scratch s = verify_scratch_of(p);
    const auto r = static_cast<std::int32_t>(e / p.draft_tokens);
    const auto i = static_cast<std::int32_t>(e % p.draft_tokens);
    std::int64_t count = 0;
    verify_request v{};
    if (s.refused[r] == 0 && verify_request_of(p, r, &v)) {
      for (std::int32_t j = 0; j < p.draft_tokens; ++j) count += verify_bit(p, s, r, v, i, j);
    }
    s.count[e] = count;
  }
};

struct verify_scan_rows_kernel {
  using params = verify_params;
  static constexpr const char* name = "verify_metadata_scan_rows";

  static std::int64_t rows(const params& p) { return p.batch > 0 ? 1 : 0; }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    const verify_scratch s = verify_scratch_of(p);
    const std::int64_t n = static_cast<std::int64_t>(p.batch) * p.draft_tokens;
    std::int64_t sum = 0;
    for (std::int64_t e = 0; e < n; ++e) {
      s.row_start[e] = sum;
      sum += s.count[e];
    }
  }
};

}  // namespace specgraph::kernels
