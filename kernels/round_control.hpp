// Per-row code of the device step counter and the device-decided round depth
// (docs/device-rounds.md). Host+device.
#pragma once

#include <cstdint>

#include "specgraph/conditional.hpp"
#include "specgraph/config.hpp"
#include "specgraph/guard.hpp"

namespace specgraph::kernels {

// The round setup's guard reset as a kernel, so it can be skipped on the device: it runs only
// while *step == 0 (a memset node could not be). One row per guard word reset.
struct reset_guards_kernel {
  struct params {
    guard_word* guards;  // the words to reset
    const std::int32_t* step;
  };
  static constexpr const char* name = "reset_guards";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t i) {
    if (*p.step != 0) return;
    p.guards[i] = guard_word{};
  }
};

// The last node of the step graph: the next launch runs the next step.
struct advance_step_kernel {
  struct params {
    std::int32_t* step;
  };
  static constexpr const char* name = "advance_step";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) { *p.step += 1; }
};

// The round graph's WHILE condition, after a step has run and advanced the counter: another
// step runs while the counter is below the round's max_depth and any real row's confidence
// reaches the round's threshold (EAGLE-2 style early exit). Padded rows never keep a round
// alive. One thread.
struct continue_condition_kernel {
  struct params {
    const std::int32_t* step;
    const std::int32_t* max_depth;
    const float* min_confidence;
    const float* confidence;  // [rows]
    const std::int32_t* real_batch;
    std::int32_t topk;
    conditional_handle handle;
  };
  static constexpr const char* name = "continue_condition";
  SPECGRAPH_HD static bool keep_going(const params& p) {
    if (*p.step >= *p.max_depth) return false;
    const std::int64_t real_rows = static_cast<std::int64_t>(*p.real_batch) * p.topk;
    for (std::int64_t row = 0; row < real_rows; ++row) {
      if (p.confidence[row] >= *p.min_confidence) return true;
    }
    return false;
  }
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    set_condition(p.handle, keep_going(p));
  }
};

}  // namespace specgraph::kernels
