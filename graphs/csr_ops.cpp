// The CSR draft-decode index operations (csr_ops.hpp) over a plan's buffers.
#include "specgraph/csr_ops.hpp"

#include <cstdint>
#include <string>

#include "device/checks.hpp"
#include "graphs/input_reads.hpp"
#include "specgraph/engine_inputs.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/kv_indices.hpp"

namespace specgraph {
namespace {

void check_csr_plan(const plan& p, std::int32_t bucket) {
  SPECGRAPH_EXPECTS(!p.layout.csr_kv_indices.empty(), "formats",
                    std::string(to_string(p.config.formats)) +
                        ": this plan holds no CSR indices (use csr or both)");
  SPECGRAPH_EXPECTS(p.has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
}

// The launch over steps [first, first + count) of `bucket`; outputs set by the caller.
kv_indices_params csr_params(const draft_buffers& b, std::int32_t bucket, std::int32_t first,
                             std::int32_t count, const engine_tables& tables,
                             const detail::round_reads& in) {
  const plan& p = b.plan();
  const draft_config& c = p.config;
  check_csr_plan(p, bucket);
  detail::in_range("step", first, 0, c.num_steps, "num_steps");
  detail::not_null("req_to_token", tables.req_to_token);
  kv_indices_params k;
  k.req_to_token = tables.req_to_token;
  k.req_to_token_stride = req_to_token_stride(c, tables);
  k.pool_rows = c.pool_rows;
  k.req_pool_index = in.req_pool_index;
  k.seq_len = in.seq_len;
  k.batch = bucket;
  k.topk = c.topk;
  k.num_steps = c.num_steps;
  k.slot_stride = c.slot_stride;  // the branch regions' layout (filled in by make_plan)
  k.page_size = c.page_size;
  k.max_seq_len = c.max_context_len;
  k.first_step = first;
  k.step_count = count;
  k.slot_limit = c.kv_slots;
  k.guard = b.guards() + p.layout.guard_csr(first);
  k.scratch = b.csr_scratch();
  // Rows past a bound real batch, and (a plan with FA3 tables, whose prefix check runs first in
  // the round) requests the prefix refused, are read as padded requests.
  k.padding_from = detail::padding_from(in);
  k.refused = p.layout.has_fa3 ? b.prefix_refused() : nullptr;
  // The plan's exact capacities, for the bucket's rows: C_s = rows * (M + s + 1) <= the plan's.
  const std::int64_t rows = static_cast<std::int64_t>(bucket) * c.topk;
  k.capacity =
      static_cast<std::int32_t>(rows * (static_cast<std::int64_t>(c.max_context_len) + first + 1));
  k.capacity_growth = static_cast<std::int32_t>(rows);
  return k;
}

// The launch, after every host check: first the round's order (the CSR ops need the round set
// up: setup_round resets their guard words and, with staged inputs, follows the staging).
void launch_checked(executor& ex, const draft_buffers& b, const kv_indices_params& k) {
  const std::int32_t step = k.device_step != nullptr || k.step_count != 1 ? -1 : k.first_step;
  detail::check_round_order(ex, b, kernel_id::csr_indices, step, k.batch, round_progress::set_up,
                            round_progress::none);
  launch_draft_kv_indices(ex, k);
}

// One step into the plan's arena: kv_indptr row `first_step` (max_rows + 1 wide) and that
// step's own kv_indices buffer (the plan's steps are separate, aligned buffers).
void launch_into_arena(executor& ex, const draft_buffers& b, kv_indices_params k) {
  const std::int64_t max_rows = b.plan().max_rows();
  k.kv_indptr = b.csr_kv_indptr() + k.first_step * (max_rows + 1);
  k.kv_indptr_stride = max_rows + 1;
  void* indices = b.csr_kv_indices(k.first_step);
  if (b.plan().config.csr_int64) {
    k.kv_indices_i64 = static_cast<std::int64_t*>(indices);
  } else {
    k.kv_indices_i32 = static_cast<std::int32_t*>(indices);
  }
  launch_checked(ex, b, k);
}

}  // namespace

void check_csr_outputs(const plan& p, const csr_outputs& out) {
  const draft_config& c = p.config;
  const std::int64_t rows = p.max_rows();
  const std::int64_t widest = rows * (static_cast<std::int64_t>(c.max_context_len) + c.num_steps);
  detail::not_null("kv_indptr", out.kv_indptr);
  detail::not_null("kv_indices", out.kv_indices);
  detail::at_least("kv_indptr_stride", out.kv_indptr_stride, rows + 1);
  detail::at_least("kv_indices_stride", out.kv_indices_stride, widest);
  const std::int64_t indptr_needed = (c.num_steps - 1) * out.kv_indptr_stride + rows + 1;
  SPECGRAPH_EXPECTS(out.kv_indptr_size >= indptr_needed, "kv_indptr",
                    std::to_string(out.kv_indptr_size) + " elements, below the " +
                        std::to_string(indptr_needed) + " needed (num_steps rows of max_rows + 1)");
  const std::int64_t indices_needed = (c.num_steps - 1) * out.kv_indices_stride + widest;
  SPECGRAPH_EXPECTS(out.kv_indices_size >= indices_needed, "kv_indices",
                    std::to_string(out.kv_indices_size) + " elements, below the " +
                        std::to_string(indices_needed) +
                        " needed (step s holds max_rows * (max_context_len + s + 1))");
}

namespace {

using detail::round_reads;

void step_into_arena(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                     const engine_tables& tables, const round_reads& in) {
  launch_into_arena(ex, b, csr_params(b, bucket, step, 1, tables, in));
}

void step_into(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
               const engine_tables& tables, const csr_outputs& out, const round_reads& in) {
  kv_indices_params k = csr_params(b, bucket, step, 1, tables, in);
  check_csr_outputs(b.plan(), out);
  k.kv_indptr = out.kv_indptr + step * out.kv_indptr_stride;
  k.kv_indptr_stride = out.kv_indptr_stride;
  if (out.kv_indices_type == index_type::int64) {
    k.kv_indices_i64 = static_cast<std::int64_t*>(out.kv_indices) + step * out.kv_indices_stride;
  } else {
    k.kv_indices_i32 = static_cast<std::int32_t*>(out.kv_indices) + step * out.kv_indices_stride;
  }
  launch_checked(ex, b, k);
}

void round_into_arena(executor& ex, const draft_buffers& b, std::int32_t bucket,
                      const engine_tables& tables, const round_reads& in) {
  // The arena's steps are separate, aligned buffers: one launch per step.
  for (std::int32_t s = 0; s < b.plan().config.num_steps; ++s) {
    step_into_arena(ex, b, bucket, s, tables, in);
  }
}

void round_into(executor& ex, const draft_buffers& b, std::int32_t bucket,
                const engine_tables& tables, const csr_outputs& out, const round_reads& in) {
  kv_indices_params k = csr_params(b, bucket, 0, b.plan().config.num_steps, tables, in);
  check_csr_outputs(b.plan(), out);
  k.kv_indptr = out.kv_indptr;
  k.kv_indptr_stride = out.kv_indptr_stride;
  k.kv_indices_stride = out.kv_indices_stride;
  if (out.kv_indices_type == index_type::int64) {
    k.kv_indices_i64 = static_cast<std::int64_t*>(out.kv_indices);
  } else {
    k.kv_indices_i32 = static_cast<std::int32_t*>(out.kv_indices);
  }
  launch_checked(ex, b, k);
}

// The whole round's launch (steps 0 .. num_steps - 1) computing only the counter's step.
kv_indices_params device_step_params(const draft_buffers& b, std::int32_t bucket,
                                     const engine_tables& tables, const round_reads& in) {
  SPECGRAPH_EXPECTS(b.plan().config.device_steps, "device_steps",
                    "false: the plan has a CSR buffer per step (use csr_step_indices)");
  kv_indices_params k = csr_params(b, bucket, 0, b.plan().config.num_steps, tables, in);
  k.device_step = b.device_step();
  return k;
}

void device_into_arena(executor& ex, const draft_buffers& b, std::int32_t bucket,
                       const engine_tables& tables, const round_reads& in) {
  kv_indices_params k = device_step_params(b, bucket, tables, in);
  const plan& p = b.plan();
  k.kv_indptr = b.csr_kv_indptr();
  k.kv_indptr_stride = p.max_rows() + 1;
  k.kv_indices_stride = p.layout.csr_kv_indices_stride;  // C_(num_steps - 1) of the plan's rows
  void* indices = b.csr_kv_indices(0);
  if (p.config.csr_int64) {
    k.kv_indices_i64 = static_cast<std::int64_t*>(indices);
  } else {
    k.kv_indices_i32 = static_cast<std::int32_t*>(indices);
  }
  launch_checked(ex, b, k);
}

void device_into(executor& ex, const draft_buffers& b, std::int32_t bucket,
                 const engine_tables& tables, const csr_outputs& out, const round_reads& in) {
  kv_indices_params k = device_step_params(b, bucket, tables, in);
  check_csr_outputs(b.plan(), out);
  k.kv_indptr = out.kv_indptr;
  k.kv_indptr_stride = out.kv_indptr_stride;
  k.kv_indices_stride = out.kv_indices_stride;
  if (out.kv_indices_type == index_type::int64) {
    k.kv_indices_i64 = static_cast<std::int64_t*>(out.kv_indices);
  } else {
    k.kv_indices_i32 = static_cast<std::int32_t*>(out.kv_indices);
  }
  launch_checked(ex, b, k);
}

}  // namespace

// The staged inputs (ops.hpp's round) and the engine's read in place (engine_inputs.hpp).
void csr_step_indices(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                      const engine_tables& tables) {
  step_into_arena(ex, b, bucket, step, tables, detail::staged_reads(b));
}
void csr_step_indices(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                      const engine_tables& tables, const csr_outputs& out) {
  step_into(ex, b, bucket, step, tables, out, detail::staged_reads(b));
}
void csr_round_indices(executor& ex, const draft_buffers& b, std::int32_t bucket,
                       const engine_tables& tables) {
  round_into_arena(ex, b, bucket, tables, detail::staged_reads(b));
}
void csr_round_indices(executor& ex, const draft_buffers& b, std::int32_t bucket,
                       const engine_tables& tables, const csr_outputs& out) {
  round_into(ex, b, bucket, tables, out, detail::staged_reads(b));
}
void csr_indices_at_device_step(executor& ex, const draft_buffers& b, std::int32_t bucket,
                                const engine_tables& tables) {
  device_into_arena(ex, b, bucket, tables, detail::staged_reads(b));
}
void csr_indices_at_device_step(executor& ex, const draft_buffers& b, std::int32_t bucket,
                                const engine_tables& tables, const csr_outputs& out) {
  device_into(ex, b, bucket, tables, out, detail::staged_reads(b));
}

void csr_step_indices(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                      const engine_tables& tables, const engine_inputs& in) {
  step_into_arena(ex, b, bucket, step, tables, detail::engine_reads(b.plan(), in));
}
void csr_step_indices(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                      const engine_tables& tables, const csr_outputs& out,
                      const engine_inputs& in) {
  step_into(ex, b, bucket, step, tables, out, detail::engine_reads(b.plan(), in));
}
void csr_round_indices(executor& ex, const draft_buffers& b, std::int32_t bucket,
                       const engine_tables& tables, const engine_inputs& in) {
  round_into_arena(ex, b, bucket, tables, detail::engine_reads(b.plan(), in));
}
void csr_round_indices(executor& ex, const draft_buffers& b, std::int32_t bucket,
                       const engine_tables& tables, const csr_outputs& out,
                       const engine_inputs& in) {
  round_into(ex, b, bucket, tables, out, detail::engine_reads(b.plan(), in));
}
void csr_indices_at_device_step(executor& ex, const draft_buffers& b, std::int32_t bucket,
                                const engine_tables& tables, const engine_inputs& in) {
  device_into_arena(ex, b, bucket, tables, detail::engine_reads(b.plan(), in));
}
void csr_indices_at_device_step(executor& ex, const draft_buffers& b, std::int32_t bucket,
                                const engine_tables& tables, const csr_outputs& out,
                                const engine_inputs& in) {
  device_into(ex, b, bucket, tables, out, detail::engine_reads(b.plan(), in));
}

}  // namespace specgraph
