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

// The start of a round whose inputs are read in place (engine_inputs.hpp): the per-round
// control words staging would reset, and nothing else. One thread.
struct begin_round_kernel {
  struct params {
    std::int32_t* device_step;  // reset to 0
    std::int32_t* iterations;   // reset to 0
    std::int32_t* max_depth;
    float* min_confidence;
    std::int32_t round_max_depth;
    float round_min_confidence;
  };
  static constexpr const char* name = "begin_round";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    *p.device_step = 0;
    *p.iterations = 0;
    *p.max_depth = p.round_max_depth;
    *p.min_confidence = p.round_min_confidence;
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
//
// Whatever the body and the control words hold, a round ends: the kernel counts the bodies run
// this round itself (`iterations`, reset by staging) and stops after num_steps of them, and
// stops when the step counter is outside [0, num_steps), so a body that never advances the
// counter, or a corrupted max_depth, cannot keep the WHILE node (and the GPU) busy forever.
// With limit_only set it leaves the condition to another kernel (an engine's own, run before
// it) and only clears it at that limit.
struct continue_condition_kernel {
  struct params {
    const std::int32_t* step;
    const std::int32_t* max_depth;
    const float* min_confidence;
    const float* confidence;  // [rows]
    // [1] the real batch (the staged one, or an engine's own word read in place), clamped to
    // [0, bucket] before use; null: every row of the bucket is real.
    const std::int32_t* real_batch;
    std::int32_t bucket;
    std::int32_t* iterations;  // [1] bodies run this round before this one
    std::int32_t topk;
    std::int32_t num_steps;  // the plan's: no round runs more bodies
    std::int32_t limit_only;
    conditional_handle handle;
  };
  static constexpr const char* name = "continue_condition";
  // Counts this body and says whether the round has reached its hard limit.
  SPECGRAPH_HD static bool limit_reached(const params& p) {
    const std::int32_t before = *p.iterations;
    // The body just run is number before + 1; a corrupted count (negative, or past the limit)
    // is the limit. No overflow: before + 1 < num_steps <= INT32_MAX here.
    const bool spent = before < 0 || before >= p.num_steps - 1;
    *p.iterations = spent ? p.num_steps : before + 1;
    const std::int32_t step = *p.step;
    return spent || step < 0 || step >= p.num_steps;
  }
  SPECGRAPH_HD static bool keep_going(const params& p) {
    if (*p.step >= *p.max_depth) return false;
    std::int32_t real = p.real_batch != nullptr ? *p.real_batch : p.bucket;
    if (real < 0) real = 0;  // an engine's word may hold anything: never read past the bucket
    if (real > p.bucket) real = p.bucket;
    const std::int64_t real_rows = static_cast<std::int64_t>(real) * p.topk;
    for (std::int64_t row = 0; row < real_rows; ++row) {
      if (p.confidence[row] >= *p.min_confidence) return true;
    }
    return false;
  }
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    const bool limit = limit_reached(p);
    if (p.limit_only != 0) {
      if (limit) set_condition(p.handle, false);
      return;
    }
    set_condition(p.handle, !limit && keep_going(p));
  }
};

}  // namespace specgraph::kernels
