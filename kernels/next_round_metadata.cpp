// Host-side sizing, validation and launchers of the next round's inputs
// (next_round_metadata.hpp).
#include "specgraph/next_round_metadata.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "device/checks.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/family_run.hpp"
#include "kernels/next_round_alloc.hpp"
#include "kernels/next_round_row.hpp"
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
constexpr std::int64_t max_reserve = std::int64_t{1} << 28;
constexpr std::int64_t max_ring_capacity = std::int64_t{1} << 40;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// The two passes, in order, on `run` (an executor's launch or the host loop); an empty row pass
// is not launched.
template <class Run>
void run_passes(const next_round_params& p, Run&& run) {
  using namespace kernels;
  run(make_kernel_launch<next_round_plan_kernel>(p, 1, cuda_next_round_plan()));
  if (p.batch > 0) {
    run(make_kernel_launch<next_round_row_kernel>(p, next_round_row_kernel::rows(p),
                                                  cuda_next_round_row()));
  }
}

}  // namespace

std::int64_t next_round_reserve(std::int32_t topk, std::int32_t num_steps,
                                std::int32_t draft_tokens, std::int32_t page_size) {
  const std::int64_t k = topk, n = num_steps, d = draft_tokens, ps = page_size;
  const std::int64_t draft = ps == 1 || k == 1 ? n * k : ceil_div(ps - 1 + n, ps) * ps * k;
  return draft > d ? draft : d;
}

std::int64_t next_round_pages_per_request(std::int32_t num_steps, std::int32_t page_size) {
  return ceil_div(static_cast<std::int64_t>(num_steps) + 1, page_size);
}

next_round_sizes next_round_exact_capacities(std::int32_t batch, std::int32_t draft_tokens,
                                             std::int32_t num_steps, std::int32_t topk,
                                             std::int32_t page_size) {
  const std::int64_t b = batch;
  next_round_sizes s;
  next_round_params& p = s.capacities;
  p.batch = batch;
  p.real_batch = batch;
  p.draft_tokens = draft_tokens;
  p.num_steps = num_steps;
  p.topk = topk;
  p.page_size = page_size;
  p.active_capacity = b;
  p.seq_len_capacity = b;
  p.root_token_capacity = b;
  p.draft_position_capacity = b * topk;
  p.draft_slot_stride = num_steps;
  p.draft_out_cache_loc_capacity = b * topk * num_steps;
  p.tail_copy_capacity = b * (topk - 1) * (static_cast<std::int64_t>(page_size) - 1) * 2;
  p.verify_out_cache_loc_capacity = b * draft_tokens;
  s.scratch_capacity = 2 * b + 2;
  return s;
}

void validate_scalars(const next_round_params& p) {
  between("batch", p.batch, 0, limits::max_batch, "the limit");
  between("real_batch", p.real_batch, 0, p.batch, "batch");
  between("draft_tokens", p.draft_tokens, 1, max_accept_tokens, "the limit");
  between("num_steps", p.num_steps, 1, max_accept_steps, "the limit");
  between("topk", p.topk, 1, limits::max_topk, "the limit");
  between("page_size", p.page_size, 1, limits::max_page_size, "the limit");
  between("reserve", p.reserve, 0, max_reserve, "the limit");
  between("req_to_token_stride", p.req_to_token_stride, 1, int32_max, "the limit");
  between("pool_rows", p.pool_rows, 1, limits::max_pool_rows, "the limit");
  between("ring_capacity", p.ring_capacity, 1, max_ring_capacity, "the limit");
  between("draft_slot_stride", p.draft_slot_stride, p.num_steps, limits::max_slot_stride,
          "the limit");
  const std::int64_t b = p.batch, k = p.topk, ps = p.page_size;
  at_most("draft_tokens", b * p.draft_tokens, limits::max_rows,
          "the row limit (batch * draft_tokens)");
  at_most("draft_slot_stride", b * k * p.draft_slot_stride, limits::max_rows,
          "the row limit (batch * topk * draft_slot_stride)");
  if (k > 1 && ps > 1) {
    at_most("page_size", b * (k - 1) * (ps - 1) * 2, limits::max_rows,
            "the row limit (batch * (topk - 1) * (page_size - 1) * 2)");
  }
  const char* names[] = {"active_capacity",
                         "seq_len_capacity",
                         "root_token_capacity",
                         "draft_position_capacity",
                         "draft_out_cache_loc_capacity",
                         "tail_copy_capacity",
                         "verify_out_cache_loc_capacity"};
  const std::int64_t caps[] = {p.active_capacity,
                               p.seq_len_capacity,
                               p.root_token_capacity,
                               p.draft_position_capacity,
                               p.draft_out_cache_loc_capacity,
                               p.tail_copy_capacity,
                               p.verify_out_cache_loc_capacity};
  for (int i = 0; i < 7; ++i) between(names[i], caps[i], 0, int32_max, "the limit");
}

void validate(const next_round_params& p) {
  validate_scalars(p);
  if (p.batch > 0) {
    not_null("new_seq_len", p.new_seq_len);
    not_null("bonus", p.bonus);
    not_null("req_pool_index", p.req_pool_index);
    not_null("allocated_len", p.allocated_len);
  }
  not_null("req_to_token", p.req_to_token);
  not_null("ring", p.ring);
  not_null("ring_head", p.ring_head);
  not_null("ring_tail", p.ring_tail);
  not_null("stall", p.stall);
  not_null("scratch", p.scratch);
  not_null("guard", p.guard);
  const bool any = p.active != nullptr || p.seq_len != nullptr || p.root_token != nullptr ||
                   p.draft_position != nullptr || p.draft_out_cache_loc != nullptr ||
                   p.tail_copy != nullptr || p.verify_out_cache_loc != nullptr;
  SPECGRAPH_EXPECTS(any, "active",
                    "no output set: set at least one of active, seq_len, root_token, "
                    "draft_position, draft_out_cache_loc, tail_copy, verify_out_cache_loc");
}

void validate_contents_host(const next_round_params& p) {
  validate(p);
  std::int32_t real = p.real_batch;
  if (p.real_batch_at != nullptr) {
    between("real_batch_at", *p.real_batch_at, 0, p.batch, "batch");
    real = *p.real_batch_at;
  }
  const std::int64_t w = p.req_to_token_stride, ps = p.page_size;
  std::int64_t total = 0;
  for (std::int32_t r = 0; r < real; ++r) {
    if (p.finished != nullptr && p.finished[r] != 0) continue;
    const std::int64_t s = p.new_seq_len[r];
    between(indexed("new_seq_len", r), s, 1, limits::max_context_len, "the limit");
    const std::int32_t row = p.req_pool_index[r];
    detail::in_range(indexed("req_pool_index", r), row, 0, p.pool_rows, "pool_rows");
    const std::int64_t alloc = p.allocated_len[r];
    if (alloc < s || alloc > w) {
      detail::throw_invalid(__FILE__, __LINE__, indexed("allocated_len", r),
                            std::to_string(alloc) + " is outside [new_seq_len " +
                                std::to_string(s) + ", req_to_token_stride " + std::to_string(w) +
                                "]");
    }
    const std::int64_t part = alloc % ps;
    if (part != 0) {
      const std::int64_t slot = p.req_to_token[row * w + alloc - 1];
      if (slot < 0 || (slot + 1) % ps != part || slot + ps - part > int32_max) {
        detail::throw_invalid(__FILE__, __LINE__, indexed("req_to_token", row, alloc - 1),
                              std::to_string(slot) +
                                  " does not end the partial page of allocated_len " +
                                  std::to_string(alloc) + " (page_size " + std::to_string(ps) +
                                  ": (slot + 1) % page_size must be " + std::to_string(part) +
                                  ", the page's last slot at most INT32_MAX)");
      }
    }
    const std::int64_t nxt = kernels::next_round_target(p, r);
    if (nxt <= w) total += kernels::next_round_pages(alloc, nxt, ps);
  }
  // The ring entries this round takes (none when stalled or short: those are run-time states
  // the guard word records, not bad input).
  const std::int64_t head = *p.ring_head;
  if (*p.stall != 0 || total > kernels::next_round_available(head, *p.ring_tail)) return;
  for (std::int64_t k = 0; k < total; ++k) {
    const std::int64_t e = (head + k) % p.ring_capacity;
    if (!kernels::next_round_page_ok(p.ring[e], ps)) {
      detail::throw_invalid(__FILE__, __LINE__, indexed("ring", e),
                            std::to_string(p.ring[e]) + " is not a page id (outside [0, " +
                                std::to_string(limits::max_page_id) +
                                "], or its last slot page * page_size + page_size - 1 past "
                                "INT32_MAX at page_size " +
                                std::to_string(ps) + ")");
    }
  }
}

namespace {

// The passes without checks (the entries below check first). On the calling thread the plan
// lives in a scratch of the twin's own.
void next_round_run_here(const next_round_params& p) {
  std::vector<std::int64_t> scratch(static_cast<std::size_t>(2 * std::int64_t{p.batch} + 2), 0);
  next_round_params q = p;
  q.scratch = scratch.data();
  run_passes(q, [](const kernel_launch& l) { l.host_run(l.params, l.rows); });
}

void next_round_enqueue(executor& ex, const next_round_params& p) {
  run_passes(p, [&](const kernel_launch& l) { ex.launch(l); });
}

}  // namespace

void launch_next_round(executor& ex, const next_round_params& p) {
  validate(p);
  next_round_enqueue(ex, p);
}

void next_round_host(const next_round_params& p) {
  validate_contents_host(p);
  next_round_run_here(p);
}

void run_next_round(executor& ex, const next_round_params& p, bool host_memory) {
  kernels::run_family(
      ex, p, host_memory, p.guard, next_round_guard_count,
      [](const next_round_params& q) { validate(q); },
      [](const next_round_params& q) { validate_contents_host(q); }, next_round_run_here,
      next_round_enqueue);
}

}  // namespace specgraph
