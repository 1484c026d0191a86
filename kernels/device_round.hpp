// Per-row code of the device-round graph's two small kernels (docs/round-graphs.md section 6):
// the handoff from acceptance to draft extend, and the fold of a round's guard words into the
// runtime's sticky summary. Host+device.
#pragma once

#include <cstdint>

#include "specgraph/config.hpp"
#include "specgraph/guard.hpp"

namespace specgraph::kernels {

// Draft extend's accepted lengths from acceptance: row r < real gets accept_length[r] + 1 (the
// committed run, bonus included), a padded row 1. An accept_length outside [0, max_accept]
// (never from acceptance: its padded and bad rows have 0) is written as 0, which draft
// extend's own check records (its accept_len word) and pads: nothing out of range is passed
// on. One row per request of the bucket; the host checks rows <= capacity before launching.
struct extend_handoff_kernel {
  struct params {
    const std::int32_t* accept_length;  // [rows] acceptance's output
    std::int32_t* accept_len;           // [capacity] draft extend's input
    std::int32_t capacity;              // accept_len's capacity (the largest bucket)
    const std::int32_t* real_batch_at;  // [1], clamped to [0, rows]
    std::int32_t rows;                  // the bucket
    std::int32_t max_accept;            // num_steps
  };
  static constexpr const char* name = "extend_handoff";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t r) {
    if (r >= p.capacity) return;  // the host refuses rows > capacity; never stored past it
    std::int32_t real = *p.real_batch_at;
    real = real < 0 ? 0 : (real > p.rows ? p.rows : real);
    std::int32_t out = 1;
    if (r < real) {
      const std::int32_t c = p.accept_length[r];
      // c in [0, num_steps], num_steps < 2^20: c + 1 cannot overflow.
      out = c >= 0 && c <= p.max_accept ? c + 1 : 0;
    }
    p.accept_len[r] = out;
  }
};

// The last node of a device round: every word of [words, words + count) that holds a violation
// is merged into summary[i]: the counts added (saturating at 2^31 - 1), the details of the
// earlier (lowest row, column) violation kept (guard_word::first: larger is earlier). One
// thread, after every kernel of the round (stream order), so no word is being written.
struct guard_fold_kernel {
  struct params {
    const guard_word* words;
    guard_word* summary;
    std::int32_t count;
  };
  static constexpr const char* name = "guard_fold";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    for (std::int32_t i = 0; i < p.count; ++i) {
      const guard_word w = p.words[i];
      if (w.violations <= 0) continue;
      guard_word& s = p.summary[i];
      const std::int64_t sum = std::int64_t{s.violations} + w.violations;  // < 2^32
      const std::int32_t total = sum > 2147483647 ? 2147483647 : static_cast<std::int32_t>(sum);
      if (s.violations == 0 || w.first > s.first) s = w;
      s.violations = total;
    }
  }
};

}  // namespace specgraph::kernels
