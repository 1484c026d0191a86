// Host-side validation, sizing and launchers of the commit (commit_metadata.hpp).
#include "specgraph/commit_metadata.hpp"

#include <cstdint>
#include <string>

#include "device/checks.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/commit_row.hpp"
#include "kernels/family_run.hpp"
#include "specgraph/accept_metadata.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph {
namespace {

using detail::at_most;
using detail::between;
using detail::indexed;
using detail::not_null;

constexpr std::int64_t int32_max = 0x7fffffff;

kernel_launch commit_launch(const commit_params& p) {
  return make_kernel_launch<kernels::commit_kernel>(p, kernels::commit_kernel::rows(p),
                                                    kernels::cuda_commit());
}

}  // namespace

commit_params commit_exact_capacities(std::int32_t batch, std::int32_t num_steps) {
  const std::int64_t b = batch;
  commit_params p;
  p.batch = batch;
  p.num_steps = num_steps;
  p.kv_move_capacity = b * num_steps * 2;
  p.finished_capacity = b;
  p.emit_len_capacity = b;
  p.free_begin_capacity = b;
  p.free_end_capacity = b;
  return p;
}

void validate_scalars(const commit_params& p) {
  between("batch", p.batch, 0, limits::max_batch, "the limit");
  between("real_batch", p.real_batch, 0, p.batch, "batch");  // 0: an idle rank
  between("draft_tokens", p.draft_tokens, 1, max_accept_tokens, "the limit");
  between("num_steps", p.num_steps, 1, max_accept_steps, "the limit");
  between("topk", p.topk, 1, limits::max_topk, "the limit");
  between("page_size", p.page_size, 1, limits::max_page_size, "the limit");
  between("req_to_token_stride", p.req_to_token_stride, 1, int32_max, "the limit");
  between("pool_rows", p.pool_rows, 1, limits::max_pool_rows, "the limit");
  between("stop_token_count", p.stop_token_count, 0, max_stop_tokens, "the limit");
  const std::int64_t b = p.batch;
  at_most("draft_tokens", b * p.draft_tokens, limits::max_rows,
          "the row limit (batch * draft_tokens)");
  at_most("num_steps", b * (static_cast<std::int64_t>(p.num_steps) + 1), limits::max_rows,
          "the row limit (batch * (num_steps + 1))");
  const char* names[] = {"kv_move_capacity", "finished_capacity", "emit_len_capacity",
                         "free_begin_capacity", "free_end_capacity"};
  const std::int64_t caps[] = {p.kv_move_capacity, p.finished_capacity, p.emit_len_capacity,
                               p.free_begin_capacity, p.free_end_capacity};
  for (int i = 0; i < 5; ++i) between(names[i], caps[i], 0, int32_max, "the limit");
}

void validate(const commit_params& p) {
  validate_scalars(p);
  if (p.batch > 0) {
    not_null("accept_index", p.accept_index);
    not_null("accept_length", p.accept_length);
    not_null("accept_tokens", p.accept_tokens);
    not_null("seq_len", p.seq_len);
    not_null("allocated_len", p.allocated_len);
    not_null("req_pool_index", p.req_pool_index);
    not_null("req_to_token", p.req_to_token);
  }
  if (p.stop_token_count > 0) not_null("stop_token_ids", p.stop_token_ids);
  not_null("guard", p.guard);
  const bool any = p.kv_move != nullptr || p.finished != nullptr || p.emit_len != nullptr ||
                   p.free_begin != nullptr || p.free_end != nullptr;
  SPECGRAPH_EXPECTS(any, "kv_move",
                    "no output set: set at least one of kv_move, finished, emit_len, free_begin, "
                    "free_end");
}

void validate_contents_host(const commit_params& p) {
  validate(p);
  if (p.stall != nullptr && *p.stall != 0) return;  // a stalled round reads no row
  const std::int64_t d = p.draft_tokens, s = static_cast<std::int64_t>(p.num_steps) + 1;
  for (std::int32_t r = 0; r < p.real_batch; ++r) {
    if (p.idle != nullptr && p.idle[r] != 0) continue;
    const std::int64_t seq_len = p.seq_len[r];
    between(indexed("seq_len", r), seq_len, 1, limits::max_context_len, "the limit");
    detail::in_range(indexed("req_pool_index", r), p.req_pool_index[r], 0, p.pool_rows,
                     "pool_rows");
    const std::int64_t allocated = p.allocated_len[r];
    if (allocated < seq_len + d) {
      detail::throw_invalid(__FILE__, __LINE__, indexed("allocated_len", r),
                            std::to_string(allocated) + " is below seq_len + draft_tokens " +
                                std::to_string(seq_len + d) + " (the verify window is unbacked)");
    }
    at_most(indexed("allocated_len", r), allocated, p.req_to_token_stride, "req_to_token_stride");
    const std::int64_t c = p.accept_length[r];
    between(indexed("accept_length", r), c, 0, d - 1 < p.num_steps ? d - 1 : p.num_steps,
            "min(num_steps, draft_tokens - 1)");
    if (p.max_new_tokens_left != nullptr) {
      detail::at_least(indexed("max_new_tokens_left", r), p.max_new_tokens_left[r], 1);
    }
    const std::int32_t* index = p.accept_index + r * s;
    const std::int64_t first = r * d;
    if (index[0] != first) {
      detail::throw_invalid(__FILE__, __LINE__, indexed("accept_index", r, 0),
                            std::to_string(index[0]) + " is not r * draft_tokens " +
                                std::to_string(first) + " (the root)");
    }
    for (std::int64_t k = 1; k <= c; ++k) {
      if (index[k] <= index[k - 1] || index[k] >= first + d) {
        detail::throw_invalid(__FILE__, __LINE__, indexed("accept_index", r, k),
                              std::to_string(index[k]) + " is outside (" +
                                  std::to_string(index[k - 1]) + ", " + std::to_string(first + d) +
                                  ") (accepted nodes increase and stay in the request's tree)");
      }
    }
  }
}

namespace {

// The passes without checks (the entries below check first).
void commit_run_here(const commit_params& p) {
  const kernel_launch l = commit_launch(p);
  l.host_run(l.params, l.rows);
}

void commit_enqueue(executor& ex, const commit_params& p) {
  ex.launch(commit_launch(p));
}

}  // namespace

void launch_commit(executor& ex, const commit_params& p) {
  validate(p);
  commit_enqueue(ex, p);
}

void commit_host(const commit_params& p) {
  validate_contents_host(p);
  commit_run_here(p);
}

void run_commit(executor& ex, const commit_params& p, bool host_memory) {
  kernels::run_family(
      ex, p, host_memory, p.guard, commit_guard_count, [](const commit_params& q) { validate(q); },
      [](const commit_params& q) { validate_contents_host(q); }, commit_run_here, commit_enqueue);
}

}  // namespace specgraph
