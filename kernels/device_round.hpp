// Per-row code of the device-round graph's two small kernels (specgraph/device_round.hpp;
// docs/round-graphs.md section 6): the handoff from acceptance to draft extend, and the fold of
// a round's guard words into a sticky summary. Host+device.
#pragma once

#include <cstdint>

#include "specgraph/config.hpp"
#include "specgraph/device_round.hpp"
#include "specgraph/guard.hpp"

namespace specgraph::kernels {

// One row per request of the bucket (launch_extend_handoff validated batch <= both capacities
// on the host, so no store or load here is past one).
struct extend_handoff_kernel {
  using params = extend_handoff_params;
  static constexpr const char* name = "extend_handoff";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t r) {
    std::int32_t real = *p.real_batch_at;
    real = real < 0 ? 0 : (real > p.batch ? p.batch : real);
    std::int32_t out = 1;  // a padded row
    if (r < real) {
      const std::int32_t c = p.accept_length[r];
      // c in [0, num_steps], num_steps <= 2^10: c + 1 cannot overflow.
      out = c >= 0 && c <= p.num_steps ? c + 1 : 0;
    }
    p.accept_len[r] = out;
  }
};

// One thread, after every kernel of the round (stream order), so no word is being written.
struct guard_fold_kernel {
  using params = guard_fold_params;
  static constexpr const char* name = "guard_fold";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    for (std::int32_t i = 0; i < p.count; ++i) {
      const guard_word w = p.words[i];
      if (w.violations <= 0) continue;
      guard_word& s = p.summary[i];
      // Both counts are int32 (>= 0): their sum < 2^32 fits int64.
      const std::int64_t sum = std::int64_t{s.violations} + w.violations;
      const std::int32_t total = sum > 2147483647 ? 2147483647 : static_cast<std::int32_t>(sum);
      if (s.violations == 0 || w.first > s.first) s = w;  // larger `first` is earlier
      s.violations = total;
    }
  }
};

}  // namespace specgraph::kernels
