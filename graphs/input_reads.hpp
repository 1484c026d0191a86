// Internal: where the round's kernels read their inputs: the arena's staged static inputs, or an
// engine's static input tensors read in place (a round_source, round_io.hpp). ops.cpp and
// csr_ops.cpp run every round op over a round_reads, made once per op call by reads_of.
#pragma once

#include <cstdint>

#include "specgraph/buffers.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/index_ref.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/round_io.hpp"

namespace specgraph::detail {

struct round_reads {
  index_ref req_pool_index;
  index_ref seq_len;
  index_ref cache_loc;                        // stride: between slots of a branch row
  std::int64_t cache_loc_branch_stride = 0;   // between branch rows
  std::int64_t cache_loc_request_stride = 0;  // between requests; 0: packed rows (the arena)
  const std::int32_t* real_batch = nullptr;   // null: every row of the bucket is real
  // Whether the inputs are the staged ones: the staging guard word is then staging's (reset by
  // stage_round); read in place, nothing stages and setup_round resets it with the others.
  bool staged = true;
};

// Where the kernels start reading rows as padded requests (pool row 0, seq_len 1, slots 0):
// inputs read in place with a real batch bound, from it (docs/engines.md); staged inputs are
// padded by staging itself, and without a bound real batch every row is read.
inline const std::int32_t* padding_from(const round_reads& in) {
  return in.staged ? nullptr : in.real_batch;
}

// The round's order (round_order.cpp; docs/metadata.md section 11). start_round: a round
// starts (staging, begin_round): the round.order word reset, the progress staged.
// check_round_order: op (at step, -1 for none or the device step) needs at least `need`; on the
// host executor refused eagerly (invalid_argument naming the op), else recorded on the device;
// then the progress becomes `set` (none: unchanged). Call it after every host check of the op.
void start_round(executor& ex, const draft_buffers& b);
void check_round_order(executor& ex, const draft_buffers& b, kernel_id op, std::int32_t step,
                       std::int32_t bucket, round_progress need, round_progress set);

// What the kernels read for `in` over b: the arena's staged inputs (int32, stride 1;
// out_cache_loc packed, slot_stride per row), or the engine's tensors as the source holds them.
// Nothing is re-checked (the source was checked when it was made); a source made for another
// plan than b's is refused (invalid_argument "source"). Host work only: a few pointer copies.
round_reads reads_of(const draft_buffers& b, const round_source& in);
// Refuses (invalid_argument `field`) a value checked against another plan than b's.
void expect_plan_of(const draft_buffers& b, const plan* checked_for, const char* field,
                    const char* remake);

// Test hooks: how many times check_engine_inputs and check_csr_outputs have run in this process
// (a bound source or target is checked once, when it is made, never per op call).
std::int64_t engine_input_checks() noexcept;
std::int64_t csr_output_checks() noexcept;

}  // namespace specgraph::detail
