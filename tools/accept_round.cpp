// `specgraph metadata accept`'s three runs (docs/round-cli.md): greedy acceptance, the commit
// and the next round's inputs, in that order on a host executor, each over buffers of its
// header's exact capacities. The ring is free_pages from head 0 (tail its length, not stalled).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "tools/accept_command.hpp"

namespace specgraph::tools {
namespace {

// n cells (at least one, so data() is never null at B = 0).
template <class T>
std::vector<T> cells(std::int64_t n, T fill = T{}) {
  return std::vector<T>(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)), fill);
}

}  // namespace

accept_round run_accept_round(const accept_case& c) {
  const std::int64_t bs = c.batch, d = c.draft_tokens, s = c.num_steps + 1;
  const std::unique_ptr<executor> ex = make_host_executor();
  accept_round o;
  // 1. Acceptance.
  accept_params a = accept_exact_capacities(c.batch, c.draft_tokens, c.num_steps);
  o.accept_index = cells<std::int32_t>(bs * s);
  o.predict = cells<std::int32_t>(bs * d);
  o.accept_tokens = cells<std::int32_t>(bs * d);
  o.accept_length = cells<std::int32_t>(bs);
  o.bonus = cells<std::int32_t>(bs);
  o.new_seq_len = cells<std::int32_t>(bs);
  o.select_index = cells<std::int32_t>(bs);
  o.accept_guard.assign(accept_guard_count, guard_word{});
  a.parent = c.parent.empty() ? o.predict.data() : c.parent.data();  // non-null at bs 0
  a.draft_token = c.draft_token.empty() ? o.predict.data() : c.draft_token.data();
  a.target_predict = c.target_predict.empty() ? o.predict.data() : c.target_predict.data();
  a.seq_len = c.seq_len.empty() ? o.bonus.data() : c.seq_len.data();
  a.batch = c.batch;
  a.real_batch = c.real_batch;
  a.draft_tokens = c.draft_tokens;
  a.num_steps = c.num_steps;
  a.accept_index = o.accept_index.data();
  a.accept_length = o.accept_length.data();
  a.predict = o.predict.data();
  a.accept_tokens = o.accept_tokens.data();
  a.bonus = o.bonus.data();
  a.new_seq_len = o.new_seq_len.data();
  a.select_index = o.select_index.data();
  a.guard = o.accept_guard.data();
  run_accept(*ex, a, true);

  // 2. The commit.
  const std::vector<std::int32_t> pool =
      c.req_pool_index.empty() ? cells<std::int32_t>(1) : c.req_pool_index;
  const std::vector<std::int32_t> alloc_in =
      c.allocated_len.empty() ? cells<std::int32_t>(1) : c.allocated_len;
  commit_params m = commit_exact_capacities(c.batch, c.num_steps);
  o.kv_move = cells<std::int32_t>(bs * c.num_steps * 2);
  o.finished = cells<std::int32_t>(bs);
  o.emit_len = cells<std::int32_t>(bs);
  o.free_begin = cells<std::int32_t>(bs);
  o.free_end = cells<std::int32_t>(bs);
  o.commit_guard.assign(commit_guard_count, guard_word{});
  m.accept_index = o.accept_index.data();
  m.accept_length = o.accept_length.data();
  m.accept_tokens = o.accept_tokens.data();
  m.seq_len = a.seq_len;
  m.allocated_len = alloc_in.data();
  m.req_pool_index = pool.data();
  m.req_to_token = c.req_to_token.data();
  m.req_to_token_stride = c.width;
  m.pool_rows = c.pool_rows;
  m.stop_token_ids = c.stop_token_ids.empty() ? nullptr : c.stop_token_ids.data();
  m.stop_token_count = static_cast<std::int32_t>(c.stop_token_ids.size());
  // The commit writes the budget back in place: a copy, so the case stays as read.
  o.max_new_tokens_left = c.has_budget && bs > 0 ? c.max_new_tokens_left : cells<std::int32_t>(1);
  m.max_new_tokens_left = c.has_budget && bs > 0 ? o.max_new_tokens_left.data() : nullptr;
  m.batch = c.batch;
  m.real_batch = c.real_batch;
  m.draft_tokens = c.draft_tokens;
  m.num_steps = c.num_steps;
  m.topk = c.topk;
  m.page_size = c.page_size;
  m.kv_move = o.kv_move.data();
  m.finished = o.finished.data();
  m.emit_len = o.emit_len.data();
  m.free_begin = o.free_begin.data();
  m.free_end = o.free_end.data();
  m.guard = o.commit_guard.data();
  run_commit(*ex, m, true);

  // 3. The next round: the ring is free_pages from head 0 (tail its length, never stalled).
  const next_round_sizes sizes =
      next_round_exact_capacities(c.batch, c.draft_tokens, c.num_steps, c.topk, c.page_size);
  next_round_params n = sizes.capacities;
  o.req_to_token = c.req_to_token;
  o.allocated_len = alloc_in;
  const std::vector<std::int32_t> ring =
      c.free_pages.empty() ? cells<std::int32_t>(1) : c.free_pages;
  o.ring_tail = static_cast<std::int64_t>(c.free_pages.size());
  std::vector<std::int64_t> scratch = cells<std::int64_t>(sizes.scratch_capacity);
  o.active = cells<std::int32_t>(bs);
  o.seq_len = cells<std::int32_t>(bs);
  o.root_token = cells<std::int32_t>(bs);
  o.draft_position = cells<std::int32_t>(n.draft_position_capacity);
  o.draft_out_cache_loc = cells<std::int64_t>(bs * c.topk * c.num_steps);
  o.tail_copy = cells<std::int32_t>(n.tail_copy_capacity);
  o.verify_out_cache_loc = cells<std::int64_t>(n.verify_out_cache_loc_capacity);
  o.next_guard.assign(next_round_guard_count, guard_word{});
  n.new_seq_len = o.new_seq_len.data();
  n.bonus = o.bonus.data();
  n.finished = o.finished.data();
  n.req_pool_index = pool.data();
  n.req_to_token = o.req_to_token.data();
  n.req_to_token_stride = c.width;
  n.pool_rows = c.pool_rows;
  n.allocated_len = o.allocated_len.data();
  n.ring = ring.data();
  n.ring_capacity = static_cast<std::int64_t>(ring.size());
  n.ring_head = &o.ring_head;
  n.ring_tail = &o.ring_tail;
  n.stall = &o.stall;
  n.batch = c.batch;
  n.real_batch = c.real_batch;
  n.draft_tokens = c.draft_tokens;
  n.num_steps = c.num_steps;
  n.topk = c.topk;
  n.page_size = c.page_size;
  n.reserve = c.reserve;
  n.active = o.active.data();
  n.seq_len = o.seq_len.data();
  n.root_token = o.root_token.data();
  n.draft_position = o.draft_position.data();
  n.draft_out_cache_loc = o.draft_out_cache_loc.data();
  n.draft_out_cache_loc_capacity = bs * c.topk * c.num_steps;
  n.draft_slot_stride = c.num_steps;
  n.tail_copy = o.tail_copy.data();
  n.verify_out_cache_loc = o.verify_out_cache_loc.data();
  n.scratch = scratch.data();
  n.guard = o.next_guard.data();
  run_next_round(*ex, n, true);
  ex->synchronize();
  return o;
}

}  // namespace specgraph::tools
