// Runs the library's commit over a commit_case (tests/commit_reference.hpp) into poisoned host
// buffers with slack past every capacity, in either entry: the host twin (run_commit with
// host_memory) or the launcher on the host executor (the row code the GPU runs, optionally
// reading the real batch from a device word).
#pragma once

#include <cstdint>
#include <vector>

#include "specgraph/commit_metadata.hpp"
#include "specgraph/executor.hpp"
#include "tests/commit_reference.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {

inline constexpr std::int32_t commit_poison = -9;
inline constexpr std::int64_t commit_slack = 4;  // poisoned cells past every buffer's end

// The outputs in commit_params order: kv_move, finished, emit_len, free_begin, free_end.
inline constexpr int commit_output_count = 5;
inline constexpr const char* commit_output_names[commit_output_count] = {
    "kv_move", "finished", "emit_len", "free_begin", "free_end"};

struct commit_outputs {
  std::vector<std::int32_t> cells[commit_output_count];
  std::int64_t capacity[commit_output_count] = {};
  std::vector<guard_word> guard;
  // The budget the commit read and wrote in place (with a budget): the case's [B] cells, then
  // commit_slack poisoned cells that must stay poisoned; empty without a budget.
  std::vector<std::int32_t> budget;
};

// The budget buffer of a run: the case's cells and poisoned slack (empty without a budget).
inline std::vector<std::int32_t> commit_budget_cells(const commit_case& c) {
  if (!c.has_budget) return {};
  std::vector<std::int32_t> b = c.budget;
  b.insert(b.end(), static_cast<std::size_t>(commit_slack), commit_poison);
  return b;
}

// The exact capacities of c's bucket, in output order.
inline void commit_exact(const commit_case& c, std::int64_t* caps) {
  const std::int64_t B = c.bucket;
  caps[0] = B * c.steps * 2;
  caps[1] = caps[2] = caps[3] = caps[4] = B;
}

// The params over c's host vectors (outputs unset); the budget, read and written in place, is
// the caller's copy (`budget`, used when c.has_budget).
inline commit_params commit_inputs(const commit_case& c, std::int32_t* budget) {
  commit_params p;
  p.accept_index = c.accept_index.data();
  p.accept_length = c.accept_length.data();
  p.accept_tokens = c.accept_tokens.data();
  p.seq_len = c.seq_len.data();
  p.allocated_len = c.allocated_len.data();
  p.req_pool_index = c.req_pool_index.data();
  p.req_to_token = c.req_to_token.data();
  p.req_to_token_stride = c.stride;
  p.pool_rows = c.pool_rows;
  p.stop_token_count = static_cast<std::int32_t>(c.stop_ids.size());
  p.stop_token_ids = c.stop_ids.empty() && !c.stop_pointer ? nullptr : c.stop_ids.data();
  p.max_new_tokens_left = c.has_budget ? budget : nullptr;
  p.idle = c.idle.empty() ? nullptr : c.idle.data();
  p.stall = c.stall.empty() ? nullptr : c.stall.data();
  p.batch = c.bucket;
  p.real_batch = c.real_batch;
  p.draft_tokens = c.nodes;
  p.num_steps = c.steps;
  p.topk = c.topk;
  p.page_size = c.page_size;
  return p;
}

// caps: the capacity of each output (null: exact). The outputs are made in o before the call,
// so a refusal (an exception) leaves them to inspect. word_value: the device real-batch word
// (with device_word; default the case's real batch).
inline void run_commit_into(commit_outputs& o, executor& ex, const commit_case& c, bool host_twin,
                            bool device_word = false, const std::int64_t* caps = nullptr,
                            const std::int32_t* word_value = nullptr) {
  if (caps == nullptr) {
    commit_exact(c, o.capacity);
  } else {
    for (int i = 0; i < commit_output_count; ++i) o.capacity[i] = caps[i];
  }
  for (int i = 0; i < commit_output_count; ++i) {
    o.cells[i].assign(static_cast<std::size_t>(o.capacity[i] + commit_slack), commit_poison);
  }
  guard_word stale{};
  stale.violations = 77;  // a previous round's words: run_commit resets them
  o.guard.assign(commit_guard_count, stale);
  o.budget = commit_budget_cells(c);
  commit_params p = commit_inputs(c, o.budget.data());
  const std::int32_t word = word_value != nullptr ? *word_value : c.real_batch;
  if (device_word) {
    p.real_batch = c.bucket;
    p.real_batch_at = &word;
  }
  p.kv_move = o.cells[0].data();
  p.kv_move_capacity = o.capacity[0];
  p.finished = o.cells[1].data();
  p.finished_capacity = o.capacity[1];
  p.emit_len = o.cells[2].data();
  p.emit_len_capacity = o.capacity[2];
  p.free_begin = o.cells[3].data();
  p.free_begin_capacity = o.capacity[3];
  p.free_end = o.cells[4].data();
  p.free_end_capacity = o.capacity[4];
  p.guard = o.guard.data();
  run_commit(ex, p, host_twin);
  ex.synchronize();
}

inline commit_outputs run_commit_case(executor& ex, const commit_case& c, bool host_twin,
                                      bool device_word = false,
                                      const std::int64_t* caps = nullptr) {
  commit_outputs o;
  run_commit_into(o, ex, c, host_twin, device_word, caps);
  return o;
}

// The launcher on ex with every buffer in executor memory (the cuda executor: the GPU runs the
// row code), the outputs downloaded into o (poisoned slack included). device_word: the real
// batch read from an executor-memory word.
inline void run_commit_in_executor_memory(commit_outputs& o, executor& ex, const commit_case& c,
                                          bool device_word, const std::int64_t* caps) {
  using v32 = std::vector<std::int32_t>;
  for (int i = 0; i < commit_output_count; ++i) o.capacity[i] = caps[i];
  auto up = [&](const v32& v) { return dvec<std::int32_t>(ex, v); };
  const dvec<std::int32_t> accept_index = up(c.accept_index), accept_length = up(c.accept_length),
                           accept_tokens = up(c.accept_tokens), seq_len = up(c.seq_len),
                           allocated_len = up(c.allocated_len), pool = up(c.req_pool_index),
                           req_to_token = up(c.req_to_token), stops = up(c.stop_ids),
                           budget = up(commit_budget_cells(c)), word = up(v32{c.real_batch}),
                           idle = up(c.idle.empty() ? v32{0} : c.idle),
                           stall = up(c.stall.empty() ? v32{0} : c.stall);
  std::vector<dvec<std::int32_t>> out;
  for (int i = 0; i < commit_output_count; ++i) {
    out.emplace_back(ex, static_cast<std::size_t>(caps[i] + commit_slack), commit_poison);
  }
  guard_word stale{};
  stale.violations = 77;
  dvec<guard_word> guard(ex, commit_guard_count, stale);
  commit_params p = commit_inputs(c, budget.data());
  p.accept_index = accept_index.data();
  p.accept_length = accept_length.data();
  p.accept_tokens = accept_tokens.data();
  p.seq_len = seq_len.data();
  p.allocated_len = allocated_len.data();
  p.req_pool_index = pool.data();
  p.req_to_token = req_to_token.data();
  if (p.stop_token_ids != nullptr) p.stop_token_ids = stops.data();
  if (p.idle != nullptr) p.idle = idle.data();
  if (p.stall != nullptr) p.stall = stall.data();
  if (device_word) {
    p.real_batch = c.bucket;
    p.real_batch_at = word.data();
  }
  std::int32_t** ptrs[] = {&p.kv_move, &p.finished, &p.emit_len, &p.free_begin, &p.free_end};
  std::int64_t* cap_fields[] = {&p.kv_move_capacity, &p.finished_capacity, &p.emit_len_capacity,
                                &p.free_begin_capacity, &p.free_end_capacity};
  for (int i = 0; i < commit_output_count; ++i) {
    *ptrs[i] = out[static_cast<std::size_t>(i)].data();
    *cap_fields[i] = caps[i];
  }
  p.guard = guard.data();
  run_commit(ex, p, false);
  ex.synchronize();
  for (int i = 0; i < commit_output_count; ++i)
    o.cells[i] = out[static_cast<std::size_t>(i)].download();
  o.guard = guard.download();
  o.budget = c.has_budget ? budget.download() : std::vector<std::int32_t>{};
}

// The reference's cells in output order.
inline const std::vector<std::int64_t>& commit_expected(const commit_expect& e, int i) {
  switch (i) {
    case 0: return e.kv_move;
    case 1: return e.finished;
    case 2: return e.emit_len;
    case 3: return e.free_begin;
    default: return e.free_end;
  }
}

}  // namespace specgraph::testing
