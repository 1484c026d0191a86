// The round's order check (docs/metadata.md section 11): one thread, launched first by every op
// of a round. It records an op run before the round has reached the progress it needs (a step
// before setup_round, a setup before any staging) in the round.order guard word, then moves the
// progress word on. Host+device.
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "specgraph/config.hpp"
#include "specgraph/guard.hpp"

namespace specgraph::kernels {

struct round_order_kernel {
  struct params {
    std::int32_t* progress;     // [1] round_progress
    guard_word* guard;          // the round.order word
    std::int32_t op;            // kernel_id of the op (round_setup, step_metadata, csr_indices)
    std::int32_t step;          // the op's step (-1: the device step, or none)
    std::int32_t need;          // the least progress the op needs (round_progress)
    std::int32_t set;           // the progress after the op (0: unchanged)
    std::int32_t starts_round;  // 1: a round starts here (staging, begin_round): reset the word
  };
  static constexpr const char* name = "round_order";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    const std::int32_t found = *p.progress;
    if (p.starts_round != 0) {  // a round starts whatever came before: nothing to check
      *p.guard = guard_word{};
    } else if (p.need != 0 && found < p.need) {  // need none: whatever the word holds
      guard_record(p.guard, violation_kind::order, static_cast<kernel_id>(p.op), 0, p.step, p.need,
                   found);
    }
    if (p.set != 0) *p.progress = p.set;
  }
};

}  // namespace specgraph::kernels
