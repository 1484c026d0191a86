// Internal: `specgraph metadata accept` (docs/round-cli.md) in three parts: the checked case
// (accept_command.cpp reads and checks the JSON), the three kernel families run over it on the
// host executor (acceptance, commit, next round), and the output with every violation listed
// (accept_output.cpp).
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "specgraph/guard.hpp"
#include "tools/json.hpp"

namespace specgraph::tools {

// One round's input, every field checked (section 10 of the round spec): bs requests, each row
// of a [bs][D] input at r * D, req_to_token pool_rows x width.
struct accept_case {
  std::int32_t page_size = 0, topk = 0, num_steps = 0, draft_tokens = 0;
  std::int32_t batch = 0, real_batch = 0, reserve = 0, pool_rows = 0;
  std::int64_t width = 0;  // W, the req_to_token row width
  std::vector<std::int32_t> seq_len, req_pool_index, allocated_len;
  std::vector<std::int32_t> parent, draft_token, target_predict;  // [bs][D]
  std::vector<std::int32_t> req_to_token;                         // [pool_rows][W]
  std::vector<std::int32_t> free_pages, stop_token_ids;
  bool has_budget = false;
  std::vector<std::int32_t> max_new_tokens_left;  // [bs] when has_budget
};

// What the three families wrote, in the exact capacities (every vector at least 1 long so its
// data() is never null).
struct accept_round {
  // Acceptance.
  std::vector<std::int32_t> accept_index, accept_length, predict, accept_tokens, bonus, new_seq_len,
      select_index;
  // Commit.
  std::vector<std::int32_t> kv_move, finished, emit_len, free_begin, free_end;
  // The budget after the commit (it decrements max_new_tokens_left in place: m - emit_len on
  // real rows, padded rows as given); [bs] when has_budget, else one unused cell. Not printed:
  // the spec's output object fixes its fields (docs/round-cli.md).
  std::vector<std::int32_t> max_new_tokens_left;
  // Next round: req_to_token and allocated_len after the allocation, the ring's head.
  std::vector<std::int32_t> req_to_token, allocated_len;
  std::int64_t ring_head = 0, ring_tail = 0;
  std::int32_t stall = 0;
  std::vector<std::int32_t> active, seq_len, root_token, draft_position, tail_copy;
  std::vector<std::int64_t> draft_out_cache_loc, verify_out_cache_loc;
  std::vector<guard_word> accept_guard, commit_guard, next_guard;
};

// Reads and checks the case; throws json_error naming the field before anything is computed.
accept_case read_accept_case(const json& doc);
// Runs acceptance, commit and the next round (in that order) on a host executor.
accept_round run_accept_round(const accept_case& c);
// Writes the output object and a newline.
void write_accept_round(std::ostream& out, const accept_case& c, const accept_round& round);

}  // namespace specgraph::tools
