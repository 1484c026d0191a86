// Per-head code of the sparse vertical/slash stage staging and its capacity-capped fallback
// (docs/metadata.md section 6). Host+device.
//
// Preconditions (validate(sparse_stage_params); ranges in limits.hpp): 1 <= heads <= 2^16,
// strides and capacities in [0, 2^24] (capacities >= 1), a well-formed stage with
// 0 <= prev < end <= 2^30, 1 <= chunk_len <= 2^30, 1 <= chunk_q_len <= end - prev. Input
// contents (counts, sizes, indices) live in device memory and are checked here: a head with an
// out-of-range value is written empty (counts 0, every entry the sentinel: nothing of an earlier
// stage survives) and a bad_input violation is recorded. Every index
// is then in [0, end), so every mapping below is in [0, end) too; it is computed in int64 all
// the same.
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "specgraph/metadata.hpp"

namespace specgraph::kernels {

inline constexpr std::int32_t vertical_sentinel = 0x7fffffff;    // INT32_MAX
inline constexpr std::int32_t slash_sentinel = -0x7fffffff - 1;  // INT32_MIN

// Evenly spaced indices for an empty selection. At most min(max_count, seq_len) indices, and
// never more than `capacity` stored: the bug this prevents wrote five indices into four slots.
SPECGRAPH_HD std::int32_t sparse_fallback(std::int32_t seq_len, std::int32_t max_count,
                                          std::int32_t* out, std::int32_t capacity, guard_word* g,
                                          std::int32_t row) {
  const std::int32_t count = max_count < seq_len ? max_count : seq_len;
  if (count <= 0) return 0;
  // int64: seq_len + count - 1 can exceed int32 for seq_len near INT32_MAX.
  std::int64_t step = (static_cast<std::int64_t>(seq_len) + count - 1) / count;
  if (step < 1) step = 1;
  std::int32_t written = 0;
  for (std::int32_t i = 0; i < count; ++i) {
    const std::int64_t index = static_cast<std::int64_t>(i) * step;
    if (index >= seq_len) break;
    if (written < capacity) {
      out[written++] = static_cast<std::int32_t>(index);
    } else {
      guard_record(g, violation_kind::capacity, kernel_id::sparse_fallback, row, i, capacity,
                   index);
      break;
    }
  }
  return written;
}

struct sparse_stage_kernel {
  using params = sparse_stage_params;
  static constexpr const char* name = "sparse_stage";
  static constexpr kernel_id id = kernel_id::sparse_stage;

  static std::int64_t rows(const params& p) { return p.heads; }

  // Maps one vertical index into the stage, or returns false when it is not selected.
  // The arithmetic is int64 (stage fields and indices are below 2^30, so it never comes near
  // overflow), and a mapped index is stored only when it lies in [0, end).
  SPECGRAPH_HD static bool map_vertical(const sparse_stage& s, std::int64_t v, std::int32_t* out) {
    const std::int64_t prev = s.prev, chunk = s.chunk_len;
    std::int64_t mapped = -1;
    switch (s.kind) {
      case stage_kind::intra:
        if (v >= prev) mapped = v - prev;
        break;
      case stage_kind::succ:
        if (v >= prev - chunk && v < prev) mapped = v - (prev - chunk);
        break;
      case stage_kind::inter:
        if (v < prev - chunk) mapped = v;
        break;
    }
    if (mapped < 0 || mapped >= s.end) return false;
    *out = static_cast<std::int32_t>(mapped);
    return true;
  }

  SPECGRAPH_HD static bool map_slash(const sparse_stage& s, std::int64_t x, std::int32_t* out) {
    const std::int64_t prev = s.prev, chunk = s.chunk_len, q = s.chunk_q_len, end = s.end;
    std::int64_t mapped = -1;
    switch (s.kind) {
      case stage_kind::intra:
        if (x >= prev) mapped = (end - 1) - x;
        break;
      case stage_kind::succ:
        if (x >= prev - chunk && x < prev + q) mapped = (prev + q - 1) - x;
        break;
      case stage_kind::inter:
        if (x < prev - chunk + q) mapped = (prev - chunk + q - 1) - x;
        break;
    }
    if (mapped < 0 || mapped >= end) return false;
    *out = static_cast<std::int32_t>(mapped);
    return true;
  }

  SPECGRAPH_HD static std::int32_t key_length(const sparse_stage& s) {
    switch (s.kind) {
      case stage_kind::intra: return s.end - s.prev;
      case stage_kind::succ: return s.chunk_len;
      case stage_kind::inter: return s.prev - s.chunk_len;
    }
    return 0;
  }

  // Selects (in input order) and maps one head's indices into `out`, then falls back when the
  // selection is empty. Unused entries get the sentinel. Returns the number of valid entries.
  template <bool Vertical>
  SPECGRAPH_HD static std::int32_t stage_one(const params& p, std::int32_t head,
                                             const std::int32_t* in, std::int32_t in_count,
                                             std::int32_t size, std::int32_t* out,
                                             std::int32_t capacity, std::int32_t sentinel) {
    std::int32_t written = 0;
    for (std::int32_t i = 0; i < in_count; ++i) {
      std::int32_t mapped = 0;
      const bool selected =
          Vertical ? map_vertical(p.stage, in[i], &mapped) : map_slash(p.stage, in[i], &mapped);
      if (!selected) continue;
      if (written < capacity) {
        out[written++] = mapped;
      } else {
        guard_record(p.guard, violation_kind::capacity, id, head, written, capacity, mapped);
      }
    }
    const std::int32_t keys = key_length(p.stage);
    if (written == 0) {
      // The head's (clamped) size caps the fallback; the intra slash slot falls back too.
      const std::int32_t max_count = size < p.stage.end ? size : p.stage.end;
      written = sparse_fallback(keys, max_count, out, capacity, p.guard, head);
    }
    for (std::int32_t c = written; c < capacity; ++c) out[c] = sentinel;
    return written;
  }

  // A refused head: no index of an earlier stage survives. Both counts 0, every entry the
  // sentinel (docs/metadata.md section 6).
  SPECGRAPH_HD static void write_empty_head(const params& p, std::int64_t row64) {
    const auto h = static_cast<std::int32_t>(row64);
    p.out_vertical_count[h] = 0;
    p.out_slash_count[h] = 0;
    std::int32_t* v = p.out_vertical + row64 * p.vertical_capacity;
    for (std::int32_t c = 0; c < p.vertical_capacity; ++c) v[c] = vertical_sentinel;
    std::int32_t* sl = p.out_slash + row64 * p.slash_capacity;
    for (std::int32_t c = 0; c < p.slash_capacity; ++c) sl[c] = slash_sentinel;
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row64) {
    const auto h = static_cast<std::int32_t>(row64);
    const std::int32_t vcount = p.vertical_count[h];
    const std::int32_t scount = p.slash_count[h];
    if (vcount < 0 || vcount > p.vertical_stride) {
      guard_record(p.guard, violation_kind::bad_input, id, h, -1, p.vertical_stride, vcount);
      write_empty_head(p, row64);
      return;
    }
    if (scount < 0 || scount > p.slash_stride) {
      guard_record(p.guard, violation_kind::bad_input, id, h, -1, p.slash_stride, scount);
      write_empty_head(p, row64);
      return;
    }
    const std::int32_t vsize = p.vertical_size[h];
    const std::int32_t ssize = p.slash_size[h];
    if (vsize < 0 || ssize < 0) {
      guard_record(p.guard, violation_kind::bad_input, id, h, -1, 0, vsize < 0 ? vsize : ssize);
      write_empty_head(p, row64);
      return;
    }
    // The engine's selected indices are key positions: each must lie in [0, end) (the keys this
    // stage has seen). Columns: vertical entries as is, slash entries after vertical_stride.
    const std::int32_t* vin = p.vertical + row64 * p.vertical_stride;
    const std::int32_t* sin = p.slash + row64 * p.slash_stride;
    for (std::int32_t i = 0; i < vcount; ++i) {
      if (vin[i] < 0 || vin[i] >= p.stage.end) {
        guard_record(p.guard, violation_kind::bad_input, id, h, i, p.stage.end, vin[i]);
        write_empty_head(p, row64);
        return;
      }
    }
    for (std::int32_t i = 0; i < scount; ++i) {
      if (sin[i] < 0 || sin[i] >= p.stage.end) {
        guard_record(p.guard, violation_kind::bad_input, id, h, p.vertical_stride + i, p.stage.end,
                     sin[i]);
        write_empty_head(p, row64);
        return;
      }
    }
    p.out_vertical_count[h] =
        stage_one<true>(p, h, vin, vcount, vsize, p.out_vertical + row64 * p.vertical_capacity,
                        p.vertical_capacity, vertical_sentinel);
    p.out_slash_count[h] =
        stage_one<false>(p, h, sin, scount, ssize, p.out_slash + row64 * p.slash_capacity,
                         p.slash_capacity, slash_sentinel);
  }
};

}  // namespace specgraph::kernels
