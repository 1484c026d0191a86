// Internal: where the round's kernels read their inputs: the arena's staged static inputs, or an
// engine's static input tensors read in place (engine_inputs.hpp). ops.cpp and csr_ops.cpp run
// every round op over a round_reads; engine_inputs.cpp makes one from an engine's tensors.
#pragma once

#include <cstdint>
#include <memory>

#include "specgraph/buffers.hpp"
#include "specgraph/conditional.hpp"
#include "specgraph/engine_inputs.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/index_ref.hpp"
#include "specgraph/ops.hpp"

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
// The arena's staged inputs (int32, stride 1; out_cache_loc packed, slot_stride per row).
round_reads staged_reads(const draft_buffers& b);
// An engine's tensors, after check_engine_inputs.
round_reads engine_reads(const plan& p, const engine_inputs& in);

void setup_round_from(executor& ex, const draft_buffers& b, std::int32_t bucket,
                      const engine_tables& tables, const round_reads& in);
void step_metadata_from(executor& ex, const draft_buffers& b, std::int32_t bucket,
                        std::int32_t step, const round_reads& in);
void step_metadata_device_from(executor& ex, const draft_buffers& b, std::int32_t bucket,
                               const round_reads& in);
void continue_condition_from(executor& ex, const draft_buffers& b, std::int32_t bucket,
                             conditional_handle handle, bool limit_only, const round_reads& in);
std::unique_ptr<graph> capture_device_depth_round_from(executor& ex, const draft_buffers& b,
                                                       std::int32_t bucket, const graph& step_body,
                                                       const round_reads& in);

}  // namespace specgraph::detail
