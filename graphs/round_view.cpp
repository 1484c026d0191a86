// draft_buffers::round: the round section's launch parameters for a bucket (round_view.hpp),
// pointer arithmetic over plan_layout::round and the draft section's staged inputs.
#include <cstdint>
#include <string>

#include "specgraph/buffers.hpp"
#include "specgraph/error.hpp"
#include "specgraph/round_fields.hpp"

namespace specgraph {

round_view draft_buffers::round(std::int32_t bucket) const {
  const plan_layout::round_section& l = layout().round;
  SPECGRAPH_EXPECTS(l.enabled(), "round_on_device",
                    "false: this plan has no round section (set draft_config::round_on_device "
                    "with verify_tokens = D)");
  if (bucket == 0) bucket = plan_->max_bucket();
  SPECGRAPH_EXPECTS(plan_->has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
  const draft_config& c = plan_->config;
  const std::int32_t d = l.draft_tokens;
  auto i32 = [&](std::int32_t f) { return at<std::int32_t>(l.field[f]); };
  auto i64 = [&](std::int32_t f) { return at<std::int64_t>(l.field[f]); };
  round_view v;
  v.bucket = bucket;
  v.max_context_len = c.max_context_len;
  v.parent = i32(round_parent);
  v.draft_token = i32(round_draft_token);
  v.target_predict = i32(round_target_predict);
  v.allocated_len = i32(round_allocated_len);
  v.max_new_tokens_left = i32(round_max_new_tokens_left);
  v.stop_capacity = l.stop_capacity;
  v.stop_token_ids = l.stop_capacity > 0 ? i32(round_stop_token_ids) : nullptr;
  v.ring_head = i64(round_ring_head);
  v.stall = i32(round_stall);
  v.guard = guards() + l.guard_base;

  // Acceptance: the bucket's exact capacities, the staged seq_len (the committed length).
  accept_params& a = v.accept;
  a = accept_exact_capacities(bucket, d, c.num_steps);
  a.parent = v.parent;
  a.draft_token = v.draft_token;
  a.target_predict = v.target_predict;
  a.seq_len = seq_len();
  a.batch = a.real_batch = bucket;
  a.real_batch_at = real_batch();
  a.idle = i32(round_finished);  // a finished row left in place is idle (section 4)
  a.stall = v.stall;  // rounds queued after a stall accept nothing (the next round's words)
  a.draft_tokens = d;
  a.num_steps = c.num_steps;
  a.accept_index = i32(round_accept_index);
  a.accept_length = i32(round_accept_length);
  a.predict = i32(round_predict);
  a.accept_tokens = i32(round_accept_tokens);
  a.bonus = i32(round_bonus);
  a.new_seq_len = i32(round_new_seq_len);
  a.select_index = i32(round_select_index);
  a.guard = v.guard + round_guard_accept;

  // The commit: acceptance's outputs, the staged seq_len and req_pool_index, the row state.
  commit_params& m = v.commit;
  m = commit_exact_capacities(bucket, c.num_steps);
  m.accept_index = a.accept_index;
  m.accept_length = a.accept_length;
  m.accept_tokens = a.accept_tokens;
  m.seq_len = seq_len();
  m.allocated_len = v.allocated_len;
  m.req_pool_index = req_pool_index();
  m.pool_rows = c.pool_rows;
  m.stop_token_ids = v.stop_token_ids;
  m.max_new_tokens_left = v.max_new_tokens_left;
  m.batch = m.real_batch = bucket;
  m.real_batch_at = real_batch();
  m.idle = i32(round_finished);  // in place: the flags stay until the engine clears them
  m.stall = v.stall;
  m.draft_tokens = d;
  m.num_steps = c.num_steps;
  m.topk = c.topk;
  m.page_size = c.page_size;
  m.kv_move = i32(round_kv_move);
  m.finished = i32(round_finished);
  m.emit_len = i32(round_emit_len);
  m.free_begin = i32(round_free_begin);
  m.free_end = i32(round_free_end);
  m.guard = v.guard + round_guard_commit;

  // The next round: writes seq_len' and the draft slots into the staged inputs themselves.
  next_round_params& n = v.next;
  n = next_round_exact_capacities(bucket, d, c.num_steps, c.topk, c.page_size).capacities;
  n.new_seq_len = a.new_seq_len;
  n.bonus = a.bonus;
  n.finished = m.finished;
  n.req_pool_index = req_pool_index();
  n.pool_rows = c.pool_rows;
  n.allocated_len = v.allocated_len;
  n.ring_head = v.ring_head;
  n.stall = v.stall;
  n.real_batch_at = real_batch();
  n.reserve = l.reserve;
  n.active = i32(round_active);
  n.seq_len = seq_len();
  n.root_token = i32(round_root_token);
  n.draft_position = i32(round_draft_position);
  n.draft_out_cache_loc = out_cache_loc();
  n.draft_slot_stride = c.slot_stride;
  n.draft_out_cache_loc_capacity = std::int64_t{bucket} * c.topk * c.slot_stride;
  n.tail_copy = i32(round_tail_copy);
  n.verify_out_cache_loc = i64(round_verify_out_cache_loc);
  n.scratch = i64(round_scratch);
  n.guard = v.guard + round_guard_next;
  return v;
}

}  // namespace specgraph
