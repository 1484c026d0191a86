// The CSR draft-decode index operations (csr_ops.hpp) over a plan's buffers.
#include "specgraph/csr_ops.hpp"

#include <atomic>
#include <cstdint>
#include <string>

#include "device/checks.hpp"
#include "graphs/input_reads.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/kv_indices.hpp"

namespace specgraph {
namespace {

std::atomic<std::int64_t> output_checks{0};

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

// The one pointer block: where launch steps first_step, first_step + 1, ... write. The arena:
// kv_indptr rows max_rows + 1 apart, step s's own kv_indices buffer (with device_steps the
// steps csr_kv_indices_stride apart, else 0: one step per launch); the engine's buffers: rows
// and steps at their strides, in their index type.
void point_outputs(kv_indices_params& k, const draft_buffers& b, const csr_target& out) {
  const plan& p = b.plan();
  const std::int64_t s = k.first_step;
  std::int32_t* indptr = nullptr;
  void* indices = nullptr;
  bool int64 = false;
  if (out.arena()) {
    k.kv_indptr_stride = p.max_rows() + 1;
    k.kv_indices_stride = p.layout.csr_kv_indices_stride;
    indptr = b.csr_kv_indptr();
    indices = b.csr_kv_indices(k.first_step);  // already step s's
    int64 = p.config.csr_int64;
  } else {
    const csr_outputs& o = out.outputs();  // checked when the target was made
    k.kv_indptr_stride = o.kv_indptr_stride;
    k.kv_indices_stride = o.kv_indices_stride;
    indptr = o.kv_indptr;
    int64 = o.kv_indices_type == index_type::int64;
    indices = static_cast<unsigned char*>(o.kv_indices) +
              s * o.kv_indices_stride * (int64 ? sizeof(std::int64_t) : sizeof(std::int32_t));
  }
  k.kv_indptr = indptr + s * k.kv_indptr_stride;
  if (int64) {
    k.kv_indices_i64 = static_cast<std::int64_t*>(indices);
  } else {
    k.kv_indices_i32 = static_cast<std::int32_t*>(indices);
  }
}

}  // namespace

void check_csr_outputs(const plan& p, const csr_outputs& out) {
  output_checks.fetch_add(1, std::memory_order_relaxed);
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

csr_target::csr_target(const plan& p, const csr_outputs& out) : plan_(&p), outputs_(out) {
  check_csr_outputs(p, out);
}

std::int64_t detail::csr_output_checks() noexcept {
  return output_checks.load(std::memory_order_relaxed);
}

void csr_indices(executor& ex, const draft_buffers& b, std::int32_t bucket, round_step step,
                 const engine_tables& tables, const csr_target& out, const round_source& source) {
  const detail::round_reads in = detail::reads_of(b, source);
  detail::expect_plan_of(b, out.checked_for(), "target", "csr_target(b.plan(), outputs)");
  const std::int32_t steps = b.plan().config.num_steps;
  if (step.is_device()) {  // the whole round's launch computing only the counter's step
    SPECGRAPH_EXPECTS(b.plan().config.device_steps, "device_steps",
                      "false: the plan has a CSR buffer per step (use a fixed step or "
                      "whole_round)");
    kv_indices_params k = csr_params(b, bucket, 0, steps, tables, in);
    k.device_step = b.device_step();
    point_outputs(k, b, out);
    launch_checked(ex, b, k);
  } else if (step.is_whole_round() && out.arena()) {
    // The arena's steps are separate, aligned buffers: one launch per step.
    for (std::int32_t s = 0; s < steps; ++s) {
      kv_indices_params k = csr_params(b, bucket, s, 1, tables, in);
      point_outputs(k, b, out);
      launch_checked(ex, b, k);
    }
  } else {
    const bool whole = step.is_whole_round();
    kv_indices_params k =
        csr_params(b, bucket, whole ? 0 : step.index(), whole ? steps : 1, tables, in);
    point_outputs(k, b, out);
    launch_checked(ex, b, k);
  }
}

}  // namespace specgraph
