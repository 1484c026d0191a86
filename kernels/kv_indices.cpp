// Host-side validation, sizing and launchers of the CSR draft-decode KV indices (kv_indices.hpp).
#include "specgraph/kv_indices.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "device/checks.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/draft_kv_indices.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph {
namespace {

using detail::at_least;
using detail::at_most;
using detail::between;
using detail::in_range;
using detail::indexed;
using detail::not_null;

constexpr std::int64_t int32_max = 0x7fffffff;
// cuda_rows launches ceil(rows / 128) blocks: at most 2^31 - 1 of them.
constexpr std::int64_t max_launch_cells = int32_max * 128;

}  // namespace

std::int64_t kv_kept_max(std::int32_t max_seq_len, std::int32_t window, std::int32_t sink) {
  if (window == 0) return max_seq_len;
  const std::int64_t limit = static_cast<std::int64_t>(window) + sink;
  return max_seq_len < limit ? max_seq_len : limit;
}

std::int64_t kv_indices_step_capacity(std::int64_t rows, std::int64_t kept_max, std::int32_t step) {
  return rows * (kept_max + step + 1);
}

std::int64_t kv_indices_used(const std::int32_t* seq_len, std::int32_t batch, std::int32_t topk,
                             std::int32_t window, std::int32_t sink, std::int32_t step) {
  std::int64_t kept = 0;
  for (std::int32_t r = 0; r < batch; ++r) kept += kv_kept_max(seq_len[r], window, sink);
  return topk * kept + static_cast<std::int64_t>(batch) * topk * (step + 1);
}

void validate(const kv_indices_params& p) {
  between("page_size", p.page_size, 1, limits::max_page_size, "the limit");
  between("entry_page_size", p.entry_page_size, 1, limits::max_page_size, "the limit");
  between("topk", p.topk, 1, limits::max_topk, "the limit");
  between("batch", p.batch, 1, limits::max_batch, "the limit");
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.topk;
  at_most("batch", rows, limits::max_rows, "the row limit (batch * topk)");
  between("num_steps", p.num_steps, 1, limits::max_num_steps, "the limit");
  if (p.slot_stride != 0) {
    between("slot_stride", p.slot_stride, p.num_steps, limits::max_slot_stride,
            "the limit (at least num_steps; 0 means num_steps)");
  }
  in_range("first_step", p.first_step, 0, p.num_steps, "num_steps");
  between("step_count", p.step_count, 1, p.num_steps - p.first_step, "num_steps - first_step");
  between("window", p.window, 0, limits::max_context_len, "the limit");
  between("sink", p.sink, 0, limits::max_context_len, "the limit");
  between("max_seq_len", p.max_seq_len, 0, limits::max_context_len, "the limit");
  between("req_to_token_stride", p.req_to_token_stride, 1, int32_max, "the limit");
  between("pool_rows", p.pool_rows, 1, limits::max_pool_rows, "the limit");
  const std::int64_t d_max = static_cast<std::int64_t>(p.first_step) + p.step_count;
  const std::int64_t span = kv_kept_max(p.max_seq_len, p.window, p.sink) + d_max;
  // kv_indptr is int32: the longest step's entries, rows * (Lmax + d), must fit it.
  SPECGRAPH_EXPECTS(rows * span <= int32_max, "max_seq_len",
                    std::to_string(rows) + " rows x (" + std::to_string(span - d_max) + " kept + " +
                        std::to_string(d_max) + " draft) entries exceeds the int32 " +
                        "kv_indptr limit " + std::to_string(int32_max));
  at_most("step_count", rows * span * p.step_count, max_launch_cells,
          "the launch limit in cells (rows * (Lmax + d) * steps)");
  between("kv_indptr_stride", p.kv_indptr_stride, rows + 1, int32_max, "the limit");
  between("capacity", p.capacity, 0, int32_max, "the limit");
  between("capacity_growth", p.capacity_growth, 0, int32_max, "the limit");
  const std::int64_t last_capacity =
      p.capacity + static_cast<std::int64_t>(p.step_count - 1) * p.capacity_growth;
  at_most("capacity_growth", last_capacity, int32_max, "the int32 capacity limit (last step)");
  between("kv_indices_stride", p.kv_indices_stride, 0, std::int64_t{1} << 40, "the limit");
  if (p.kv_indices_stride > 0) {
    at_most("capacity", last_capacity, p.kv_indices_stride, "kv_indices_stride (last step)");
  }
  at_least("slot_limit", p.slot_limit, 1);
  not_null("req_to_token", p.req_to_token);
  not_null("req_pool_index", p.req_pool_index.data);
  not_null("seq_len", p.seq_len.data);
  between("req_pool_index.stride", p.req_pool_index.stride, 0, limits::max_input_stride,
          "the limit");
  between("seq_len.stride", p.seq_len.stride, 0, limits::max_input_stride, "the limit");
  not_null("kv_indptr", p.kv_indptr);
  SPECGRAPH_EXPECTS((p.kv_indices_i32 == nullptr) != (p.kv_indices_i64 == nullptr), "kv_indices",
                    "exactly one of kv_indices_i32 and kv_indices_i64 must be set");
  not_null("guard", p.guard);
}

void validate_contents_host(const kv_indices_params& p) {
  validate(p);
  const std::int64_t width = p.req_to_token_stride * p.entry_page_size;
  // What the kernels will read: the steps they compute (with a device step counter in host
  // memory, the one it holds; none when it holds a step outside the launch).
  const kernels::kv_steps steps = kernels::kv_active_steps(p);
  if (steps.begin == steps.end) return;
  const std::int32_t d_max = p.first_step + steps.end;
  for (std::int32_t r = 0; r < p.batch; ++r) {
    const std::int64_t pool_row = p.req_pool_index.load(r);
    in_range(indexed("req_pool_index", r), pool_row, 0, p.pool_rows, "pool_rows");
    between(indexed("seq_len", r), p.seq_len.load(r), 0, p.max_seq_len, "max_seq_len");
    kernels::kv_request v{};
    if (!kernels::kv_request_of(p, r, d_max, &v)) {
      const std::int64_t last = kernels::kv_draft_position(v, p.topk - 1, d_max - 1);
      detail::throw_invalid(__FILE__, __LINE__, indexed("seq_len", r),
                            std::to_string(v.seq_len) + " needs position " + std::to_string(last) +
                                " (the last draft token of branch topk - 1), past the row width " +
                                "req_to_token_stride * entry_page_size " + std::to_string(width) +
                                "; the rows need seq_len + (topk - 1) * region " +
                                std::to_string(v.branch_region) + " + num_steps positions " +
                                "(region = page_size * ceil((seq_len % page_size + slot_stride)" +
                                " / page_size), slot_stride at page_size 1): widen them");
    }
    for (std::int32_t t = 0; t < p.topk; ++t) {
      const std::int32_t first = t == 0 ? 0 : v.kept;
      for (std::int32_t i = first; i < v.kept + d_max; ++i) {
        const std::int64_t position = kernels::kv_entry_position(p, v, t, i);
        const std::int64_t slot = kernels::kv_slot(p, v, position);
        if (!kernels::kv_bad_slot(p, slot)) continue;
        const std::int64_t limit =
            p.kv_indices_i32 != nullptr && p.slot_limit > int32_max ? int32_max + 1 : p.slot_limit;
        in_range(indexed("req_to_token", pool_row, position / p.entry_page_size), slot, 0, limit,
                 limit == p.slot_limit ? "slot_limit" : "the int32 kv_indices bound");
      }
    }
  }
}

void launch_draft_kv_indices(executor& ex, const kv_indices_params& p) {
  validate(p);
  not_null("scratch", p.scratch);
  ex.fill_bytes(p.scratch, 0, static_cast<std::size_t>(p.batch) * sizeof(std::int32_t));
  ex.launch(make_kernel_launch<kernels::kv_check_kernel>(p, kernels::kv_check_kernel::rows(p),
                                                         kernels::cuda_kv_check()));
  ex.launch(make_kernel_launch<kernels::kv_scan_kernel>(p, kernels::kv_scan_kernel::rows(p),
                                                        kernels::cuda_kv_scan()));
  ex.launch(make_kernel_launch<kernels::kv_fill_kernel>(p, kernels::kv_fill_kernel::rows(p),
                                                        kernels::cuda_kv_fill()));
}

void draft_kv_indices_host(const kv_indices_params& p) {
  validate_contents_host(p);
  std::vector<std::int32_t> scratch(static_cast<std::size_t>(kv_indices_scratch_ints(p.batch)), 0);
  kv_indices_params q = p;
  q.scratch = scratch.data();
  host_run_rows<kernels::kv_check_kernel>(&q, kernels::kv_check_kernel::rows(q));
  host_run_rows<kernels::kv_scan_kernel>(&q, kernels::kv_scan_kernel::rows(q));
  host_run_rows<kernels::kv_fill_kernel>(&q, kernels::kv_fill_kernel::rows(q));
}

}  // namespace specgraph
