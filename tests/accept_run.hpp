// Runs the library's greedy tree acceptance over an accept_case (tests/accept_reference.hpp)
// into poisoned host buffers with slack past every capacity, in either entry: the host twin
// (run_accept with host_memory) or the launcher on the host executor (the row code the GPU runs,
// optionally reading the real batch from a device word).
#pragma once

#include <cstdint>
#include <vector>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/executor.hpp"
#include "tests/accept_reference.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {

inline constexpr std::int32_t accept_poison = -9;
inline constexpr std::int64_t accept_slack = 4;  // poisoned cells past every buffer's end

// The outputs in accept_params order: accept_index, accept_length, predict, accept_tokens, bonus,
// new_seq_len, select_index.
inline constexpr int accept_output_count = 7;
inline constexpr const char* accept_output_names[accept_output_count] = {
    "accept_index", "accept_length", "predict",     "accept_tokens",
    "bonus",        "new_seq_len",   "select_index"};

struct accept_outputs {
  std::vector<std::int32_t> cells[accept_output_count];
  std::int64_t capacity[accept_output_count] = {};
  std::vector<guard_word> guard;
};

// The exact capacities of c's bucket, in output order.
inline void accept_exact(const accept_case& c, std::int64_t* caps) {
  const std::int64_t B = c.bucket;
  caps[0] = B * (c.steps + 1);
  caps[2] = caps[3] = B * c.nodes;
  caps[1] = caps[4] = caps[5] = caps[6] = B;
}

// caps: the capacity of each output (null: exact).
// The outputs are made in o before the call, so a refusal (an exception) leaves them to inspect.
inline void run_accept_into(accept_outputs& o, executor& ex, const accept_case& c, bool host_twin,
                            bool device_word = false, const std::int64_t* caps = nullptr,
                            const std::int32_t* word_value = nullptr) {
  if (caps == nullptr) {
    accept_exact(c, o.capacity);
  } else {
    for (int i = 0; i < accept_output_count; ++i) o.capacity[i] = caps[i];
  }
  for (int i = 0; i < accept_output_count; ++i) {
    o.cells[i].assign(static_cast<std::size_t>(o.capacity[i] + accept_slack), accept_poison);
  }
  guard_word stale{};
  stale.violations = 77;  // a previous round's words: run_accept resets them
  o.guard.assign(accept_guard_count, stale);
  accept_params p;
  p.parent = c.parent.data();
  p.draft_token = c.draft.data();
  p.target_predict = c.target.data();
  p.seq_len = c.seq_len.data();
  p.idle = c.idle.empty() ? nullptr : c.idle.data();
  p.stall = c.stall.empty() ? nullptr : c.stall.data();
  p.batch = c.bucket;
  p.real_batch = c.real_batch;
  const std::int32_t word = word_value != nullptr ? *word_value : c.real_batch;
  if (device_word) {
    p.real_batch = c.bucket;
    p.real_batch_at = &word;
  }
  p.draft_tokens = c.nodes;
  p.num_steps = c.steps;
  p.accept_index = o.cells[0].data();
  p.accept_index_capacity = o.capacity[0];
  p.accept_length = o.cells[1].data();
  p.accept_length_capacity = o.capacity[1];
  p.predict = o.cells[2].data();
  p.predict_capacity = o.capacity[2];
  p.accept_tokens = o.cells[3].data();
  p.accept_tokens_capacity = o.capacity[3];
  p.bonus = o.cells[4].data();
  p.bonus_capacity = o.capacity[4];
  p.new_seq_len = o.cells[5].data();
  p.new_seq_len_capacity = o.capacity[5];
  p.select_index = o.cells[6].data();
  p.select_index_capacity = o.capacity[6];
  p.guard = o.guard.data();
  run_accept(ex, p, host_twin);
  ex.synchronize();
}

inline accept_outputs run_accept_case(executor& ex, const accept_case& c, bool host_twin,
                                      bool device_word = false,
                                      const std::int64_t* caps = nullptr) {
  accept_outputs o;
  run_accept_into(o, ex, c, host_twin, device_word, caps);
  return o;
}

// The launcher on any executor (the cuda one on a GPU) with every input, output and guard word in
// executor memory: inputs uploaded, outputs uploaded poisoned (slack included) and downloaded
// after the launch, the guard words uploaded stale (run_accept resets them on the stream). With
// device_word the real batch is read from a word in executor memory holding c.real_batch.
inline accept_outputs run_accept_on(executor& ex, const accept_case& c, bool device_word,
                                    const std::int64_t* caps = nullptr) {
  accept_outputs o;
  if (caps == nullptr) {
    accept_exact(c, o.capacity);
  } else {
    for (int i = 0; i < accept_output_count; ++i) o.capacity[i] = caps[i];
  }
  auto nonempty = [](const std::vector<std::int32_t>& v) {
    return v.empty() ? std::vector<std::int32_t>{0} : v;  // B = 0: a valid, never read pointer
  };
  dvec<std::int32_t> parent(ex, nonempty(c.parent)), draft(ex, nonempty(c.draft)),
      target(ex, nonempty(c.target)), seq_len(ex, nonempty(c.seq_len)), idle(ex, nonempty(c.idle)),
      stall(ex, nonempty(c.stall));
  dvec<std::int32_t> word(ex, std::vector<std::int32_t>{c.real_batch});
  std::vector<dvec<std::int32_t>> out;
  for (int i = 0; i < accept_output_count; ++i) {
    out.emplace_back(ex, static_cast<std::size_t>(o.capacity[i] + accept_slack), accept_poison);
  }
  guard_word stale{};
  stale.violations = 77;
  dvec<guard_word> guard(ex, std::vector<guard_word>(accept_guard_count, stale));
  accept_params p;
  p.parent = parent.data();
  p.draft_token = draft.data();
  p.target_predict = target.data();
  p.seq_len = seq_len.data();
  p.idle = c.idle.empty() ? nullptr : idle.data();
  p.stall = c.stall.empty() ? nullptr : stall.data();
  p.batch = c.bucket;
  p.real_batch = device_word ? c.bucket : c.real_batch;
  if (device_word) p.real_batch_at = word.data();
  p.draft_tokens = c.nodes;
  p.num_steps = c.steps;
  std::int32_t* cells[accept_output_count];
  for (int i = 0; i < accept_output_count; ++i) cells[i] = out[static_cast<std::size_t>(i)].data();
  p.accept_index = cells[0];
  p.accept_index_capacity = o.capacity[0];
  p.accept_length = cells[1];
  p.accept_length_capacity = o.capacity[1];
  p.predict = cells[2];
  p.predict_capacity = o.capacity[2];
  p.accept_tokens = cells[3];
  p.accept_tokens_capacity = o.capacity[3];
  p.bonus = cells[4];
  p.bonus_capacity = o.capacity[4];
  p.new_seq_len = cells[5];
  p.new_seq_len_capacity = o.capacity[5];
  p.select_index = cells[6];
  p.select_index_capacity = o.capacity[6];
  p.guard = guard.data();
  run_accept(ex, p, /*host_memory=*/false);
  ex.synchronize();
  for (int i = 0; i < accept_output_count; ++i) {
    o.cells[i] = out[static_cast<std::size_t>(i)].download();
  }
  o.guard = guard.download();
  return o;
}

// The reference's cells in output order.
inline const std::vector<std::int64_t>& accept_expected(const accept_expect& e, int i) {
  switch (i) {
    case 0: return e.accept_index;
    case 1: return e.accept_length;
    case 2: return e.predict;
    case 3: return e.accept_tokens;
    case 4: return e.bonus;
    case 5: return e.new_seq_len;
    default: return e.select_index;
  }
}

}  // namespace specgraph::testing
