// round_fuzz's stages: acceptance and the commit (the next round: round_fuzz_next.cpp), each run
// on the round's path and checked against its independent reference and the harness's own check
// of the stage's bad input (docs/accept.md section 6, docs/commit.md section 7).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/error.hpp"
#include "specgraph/limits.hpp"
#include "tests/accept_reference.hpp"
#include "tests/commit_reference.hpp"
#include "tests/fuzz/round_fuzz.hpp"
#include "tests/fuzz/round_fuzz_check.hpp"

namespace specgraph::fuzz::round_harness {

namespace {

// docs/accept.md section 6, in the check's order: the first bad input of request r, if any.
bool accept_bad(const round& c, std::int64_t r, record& out) {
  const std::int64_t D = c.draft_tokens, s = c.seq_len[static_cast<std::size_t>(r)];
  const auto ri = static_cast<std::int32_t>(r);
  if (s < 0 || s > limits::max_context_len) {
    out = {ri, -1, limits::max_context_len, s};
    return true;
  }
  const std::int32_t* parent = c.parent.data() + r * D;
  if (parent[0] != -1) {
    out = {ri, 0, -1, parent[0]};
    return true;
  }
  for (std::int64_t i = 1; i < D; ++i) {
    if (parent[i] < -1 || parent[i] >= i) {
      out = {ri, static_cast<std::int32_t>(i), i, parent[i]};
      return true;
    }
  }
  for (std::int64_t i = 1; i < D; ++i) {  // depth by walking up (parents valid now)
    std::int64_t depth = 0, u = i;
    while (u > 0) {
      u = parent[u];
      ++depth;
    }
    if (u == 0 && depth == c.num_steps + 1) {
      out = {ri, static_cast<std::int32_t>(i), c.num_steps, c.num_steps + 1};
      return true;
    }
  }
  return false;
}

// docs/commit.md section 7, in the check's order.
bool commit_bad(const round& c, const accepted& a, std::int64_t r, record& out) {
  const auto ru = static_cast<std::size_t>(r);
  const auto ri = static_cast<std::int32_t>(r);
  const std::int64_t D = c.draft_tokens, S = c.num_steps + 1, s = c.seq_len[ru];
  const std::int64_t row = c.pool_index[ru], alloc = c.allocated[ru], acc = a.accept_length[ru];
  const std::int64_t most = std::min<std::int64_t>(c.num_steps, D - 1);
  if (s < 1 || s > limits::max_context_len) {
    out = {ri, -1, limits::max_context_len, s};
  } else if (row < 0 || row >= c.pool_rows) {
    out = {ri, -2, c.pool_rows, row};
  } else if (alloc < s + D) {
    out = {ri, -3, s + D, alloc};
  } else if (alloc > c.width) {
    out = {ri, -3, c.width, alloc};
  } else if (acc < 0 || acc > most) {
    out = {ri, -4, most, acc};
  } else if (c.has_budget && c.budget[ru] < 1) {
    out = {ri, -5, 1, c.budget[ru]};
  } else if (a.accept_index[ru * static_cast<std::size_t>(S)] != r * D) {
    out = {ri, 0, r * D, a.accept_index[ru * static_cast<std::size_t>(S)]};
  } else {
    for (std::int64_t k = 1; k <= acc; ++k) {
      const std::int64_t prev = a.accept_index[static_cast<std::size_t>(r * S + k - 1)];
      const std::int64_t v = a.accept_index[static_cast<std::size_t>(r * S + k)];
      if (v <= prev) {
        out = {ri, static_cast<std::int32_t>(k), prev + 1, v};
        return true;
      }
      if (v >= r * D + D) {
        out = {ri, static_cast<std::int32_t>(k), r * D + D, v};
        return true;
      }
    }
    return false;
  }
  return true;
}

}  // namespace

bool run_accept_stage(const round& c, accepted& out) {
  const std::int64_t B = c.batch, D = c.draft_tokens, S = c.num_steps + 1;
  const std::int32_t real = c.real();
  std::vector<record> bad;
  if (c.word_mode && real != c.word) bad.push_back({-1, -2, B, c.word});
  std::vector<bool> padded(static_cast<std::size_t>(B), false);
  testing::accept_case ac;
  ac.bucket = c.batch;
  ac.real_batch = real;
  ac.nodes = c.draft_tokens;
  ac.steps = c.num_steps;
  ac.parent = c.parent;
  ac.draft = c.draft;
  ac.target = c.target;
  ac.seq_len = c.seq_len;
  ac.stall = {c.stall};  // a stalled round reads no row (accept_params::stall)
  for (std::int64_t r = 0; r < real && c.stall == 0; ++r) {
    record x{};
    if (!accept_bad(c, r, x)) continue;
    bad.push_back(x);
    padded[static_cast<std::size_t>(r)] = true;
    // The reference takes valid trees only: this row's is replaced (its cells are padding).
    std::fill_n(ac.parent.begin() + r * D, D, -1);
  }
  testing::accept_expect e = testing::accept_reference(ac);
  for (std::int64_t r = 0; r < B; ++r) {  // docs/accept.md section 4
    if (!padded[static_cast<std::size_t>(r)]) continue;
    const auto ru = static_cast<std::size_t>(r);
    std::fill_n(e.accept_index.begin() + r * S, S, -1);
    std::fill_n(e.predict.begin() + r * D, D, 0);
    std::fill_n(e.accept_tokens.begin() + r * D, D, 0);
    e.accept_length[ru] = 0;
    e.bonus[ru] = 0;
    e.new_seq_len[ru] = c.seq_len[ru];
    e.select_index[ru] = r * D + D - 1;
  }
  // A stalled round writes no bonus and no new_seq_len: every cell stays poisoned.
  const std::vector<std::int64_t> unwritten;
  const std::vector<std::int64_t>* want[7] = {&e.accept_index,
                                              &e.accept_length,
                                              &e.predict,
                                              &e.accept_tokens,
                                              e.keeps_next ? &unwritten : &e.bonus,
                                              e.keeps_next ? &unwritten : &e.new_seq_len,
                                              &e.select_index};
  const std::int64_t widths[7] = {S, 1, D, D, 1, 1, 1};
  std::int64_t exact[7], caps[7];
  for (int i = 0; i < 7; ++i) exact[i] = B * widths[i];
  cut_capacities(c.cut[0], c.cut_how[0], exact, 7, caps);

  const auto b = static_cast<std::size_t>(B);
  guarded<std::int32_t> parent(c.parent.size()), draft(c.draft.size()), target(c.target.size()),
      seq(b), word(1), stall(1);
  stall[0] = c.stall;
  copy_in(parent, c.parent);
  copy_in(draft, c.draft);
  copy_in(target, c.target);
  copy_in(seq, c.seq_len);
  word[0] = c.word;
  stage_outputs<std::int32_t> o(caps, 7);
  guarded<guard_word> guards(accept_guard_count, stale_guard());
  accept_params p;
  p.parent = parent.data();
  p.draft_token = draft.data();
  p.target_predict = target.data();
  p.seq_len = seq.data();
  p.stall = stall.data();
  p.batch = c.batch;
  p.real_batch = c.real_batch;
  if (c.word_mode) p.real_batch_at = word.data();
  p.draft_tokens = c.draft_tokens;
  p.num_steps = c.num_steps;
  std::int32_t** cells[7] = {&p.accept_index, &p.accept_length, &p.predict,     &p.accept_tokens,
                             &p.bonus,        &p.new_seq_len,   &p.select_index};
  std::int64_t* capacity[7] = {&p.accept_index_capacity, &p.accept_length_capacity,
                               &p.predict_capacity,      &p.accept_tokens_capacity,
                               &p.bonus_capacity,        &p.new_seq_len_capacity,
                               &p.select_index_capacity};
  for (int i = 0; i < 7; ++i) {
    *cells[i] = o.data(i);
    *capacity[i] = caps[i];
  }
  p.guard = guards.data();
  bool refused = false;
  try {
    on_round_path(c.how, [&](executor& ex, bool host) { run_accept(ex, p, host); });
  } catch (const invalid_argument& e) {
    check_invalid_argument(e, "accept");
    refused = true;
    const bool content = e.field().rfind("seq_len[", 0) == 0 || e.field().rfind("parent[", 0) == 0;
    FUZZ_CHECK(c.how == path::host && content && !bad.empty(),
               "accept refused '%s' (path %d, %zu bad records)", e.what(), static_cast<int>(c.how),
               bad.size());
    // The twin names the lowest bad request (seq_len[r], parent[r][i]).
    const std::string row = "[" + std::to_string(bad.front().row) + "]";
    FUZZ_CHECK(e.field().find(row) != std::string::npos, "accept refused '%s', expected request %d",
               e.what(), bad.front().row);
  }
  check_unchanged(parent, c.parent, "accept", "parent");
  check_unchanged(draft, c.draft, "accept", "draft_token");
  check_unchanged(target, c.target, "accept", "target_predict");
  check_unchanged(seq, c.seq_len, "accept", "seq_len");
  if (refused) {
    o.check_untouched("refused accept");
    check_stale(guards, "refused accept");
    return false;
  }
  FUZZ_CHECK(c.how != path::host || bad.empty(),
             "accept_host accepted an input the kernel flags (%zu records)", bad.size());
  const store_check st = o.check(want, widths, "accept");
  check_record(guards[0], bad, kernel_id::accept_metadata, "accept guard[0]");
  check_stores(guards[1], st, kernel_id::accept_outputs, "accept guard[1]");
  FUZZ_CHECK(guards.canaries_intact(), "accept: guard canaries overwritten");
  auto narrow = [](const std::vector<std::int64_t>& v) {
    return std::vector<std::int32_t>(v.begin(), v.end());
  };
  out.accept_index = narrow(e.accept_index);
  out.accept_length = narrow(e.accept_length);
  out.accept_tokens = narrow(e.accept_tokens);
  out.bonus = narrow(e.bonus);
  out.new_seq_len = narrow(e.new_seq_len);
  return true;
}

bool run_commit_stage(const round& c, const accepted& a, std::vector<std::int32_t>& finished) {
  const std::int64_t B = c.batch, D = c.draft_tokens, S = c.num_steps + 1;
  const std::int32_t real = c.real();
  std::vector<record> bad;
  if (c.word_mode && real != c.word) bad.push_back({-1, -2, B, c.word});
  std::vector<bool> padded(static_cast<std::size_t>(B), false);
  testing::commit_case cc;
  cc.bucket = c.batch;
  cc.real_batch = real;
  cc.nodes = c.draft_tokens;
  cc.steps = c.num_steps;
  cc.topk = c.topk;
  cc.page_size = c.page_size;
  cc.stride = c.width;
  cc.pool_rows = c.pool_rows;
  cc.accept_index = a.accept_index;
  cc.accept_length = a.accept_length;
  cc.accept_tokens = a.accept_tokens;
  cc.seq_len = c.seq_len;
  cc.allocated_len = c.allocated;
  cc.req_pool_index = c.pool_index;
  cc.req_to_token = c.req_to_token;
  cc.stop_ids = c.stops;
  cc.has_budget = c.has_budget;
  cc.budget = c.budget;
  cc.stall = {c.stall};  // a stalled round pads every row (commit_params::stall)
  for (std::int64_t r = 0; r < real && c.stall == 0; ++r) {
    record x{};
    if (!commit_bad(c, a, r, x)) continue;
    bad.push_back(x);
    const auto ru = static_cast<std::size_t>(r);
    padded[ru] = true;
    // The reference takes valid rows only: a root-only row in pool row 0 (cells replaced below).
    cc.accept_length[ru] = 0;
    cc.accept_index[ru * static_cast<std::size_t>(S)] = static_cast<std::int32_t>(r * D);
    cc.seq_len[ru] = 1;
    cc.req_pool_index[ru] = 0;
    cc.allocated_len[ru] = static_cast<std::int32_t>(1 + D);
    if (cc.has_budget) cc.budget[ru] = 1;
  }
  testing::commit_expect e = testing::commit_reference(cc);
  for (std::int64_t r = 0; r < B; ++r) {  // padding rows: docs/commit.md
    const auto ru = static_cast<std::size_t>(r);
    if (!padded[ru]) continue;
    std::fill_n(e.kv_move.begin() + r * c.num_steps * 2, c.num_steps * 2, -1);
    e.finished[ru] = e.emit_len[ru] = e.free_begin[ru] = e.free_end[ru] = 0;
  }
  // The budget the commit leaves in place: m - emit on the real rows it handles, every other
  // cell (padding, a bad row) as it was.
  std::vector<std::int32_t> budget_after = c.budget;
  for (std::int64_t r = 0; c.has_budget && r < real; ++r) {
    const auto ru = static_cast<std::size_t>(r);
    if (!padded[ru]) budget_after[ru] = static_cast<std::int32_t>(e.budget[ru]);
  }
  const std::vector<std::int64_t>* want[5] = {&e.kv_move, &e.finished, &e.emit_len, &e.free_begin,
                                              &e.free_end};
  const std::int64_t widths[5] = {std::int64_t{c.num_steps} * 2, 1, 1, 1, 1};
  std::int64_t exact[5], caps[5];
  for (int i = 0; i < 5; ++i) exact[i] = B * widths[i];
  cut_capacities(c.cut[1], c.cut_how[1], exact, 5, caps);

  const auto b = static_cast<std::size_t>(B);
  guarded<std::int32_t> index(a.accept_index.size()), length(b), tokens(a.accept_tokens.size()),
      seq(b), alloc(b), pool(b), rtt(c.req_to_token.size()), stops(c.stops.size()),
      budget(c.budget.size()), word(1), stall(1);
  stall[0] = c.stall;
  copy_in(index, a.accept_index);
  copy_in(length, a.accept_length);
  copy_in(tokens, a.accept_tokens);
  copy_in(seq, c.seq_len);
  copy_in(alloc, c.allocated);
  copy_in(pool, c.pool_index);
  copy_in(rtt, c.req_to_token);
  copy_in(stops, c.stops);
  copy_in(budget, c.budget);
  word[0] = c.word;
  stage_outputs<std::int32_t> o(caps, 5);
  guarded<guard_word> guards(commit_guard_count, stale_guard());
  commit_params p;
  p.accept_index = index.data();
  p.accept_length = length.data();
  p.accept_tokens = tokens.data();
  p.seq_len = seq.data();
  p.allocated_len = alloc.data();
  p.req_pool_index = pool.data();
  p.req_to_token = rtt.data();
  p.req_to_token_stride = c.width;
  p.pool_rows = c.pool_rows;
  p.stop_token_ids = c.stops.empty() ? nullptr : stops.data();
  p.stop_token_count = static_cast<std::int32_t>(c.stops.size());
  p.max_new_tokens_left = c.has_budget ? budget.data() : nullptr;
  p.stall = stall.data();
  p.batch = c.batch;
  p.real_batch = c.real_batch;
  if (c.word_mode) p.real_batch_at = word.data();
  p.draft_tokens = c.draft_tokens;
  p.num_steps = c.num_steps;
  p.topk = c.topk;
  p.page_size = c.page_size;
  p.kv_move = o.data(0);
  p.kv_move_capacity = caps[0];
  p.finished = o.data(1);
  p.finished_capacity = caps[1];
  p.emit_len = o.data(2);
  p.emit_len_capacity = caps[2];
  p.free_begin = o.data(3);
  p.free_begin_capacity = caps[3];
  p.free_end = o.data(4);
  p.free_end_capacity = caps[4];
  p.guard = guards.data();
  bool refused = false;
  try {
    on_round_path(c.how, [&](executor& ex, bool host) { run_commit(ex, p, host); });
  } catch (const invalid_argument& x) {
    check_invalid_argument(x, "commit");
    refused = true;
    const std::string& f = x.field();
    const bool content = f.find('[') != std::string::npos;
    FUZZ_CHECK(c.how == path::host && content && !bad.empty(),
               "commit refused '%s' (path %d, %zu bad records)", x.what(), static_cast<int>(c.how),
               bad.size());
    if (!bad.empty() && bad.front().row >= 0) {
      // The twin names the lowest bad request's field.
      const std::string row = "[" + std::to_string(bad.front().row) + "]";
      FUZZ_CHECK(f.find(row) != std::string::npos, "commit refused '%s', expected request %d",
                 x.what(), bad.front().row);
    }
  }
  check_unchanged(index, a.accept_index, "commit", "accept_index");
  check_unchanged(length, a.accept_length, "commit", "accept_length");
  check_unchanged(tokens, a.accept_tokens, "commit", "accept_tokens");
  check_unchanged(seq, c.seq_len, "commit", "seq_len");
  check_unchanged(alloc, c.allocated, "commit", "allocated_len");
  check_unchanged(pool, c.pool_index, "commit", "req_pool_index");
  check_unchanged(rtt, c.req_to_token, "commit", "req_to_token");
  check_unchanged(stops, c.stops, "commit", "stop_token_ids");
  check_unchanged(budget, refused ? c.budget : budget_after, "commit", "max_new_tokens_left");
  if (refused) {
    o.check_untouched("refused commit");
    check_stale(guards, "refused commit");
    return false;
  }
  FUZZ_CHECK(c.how != path::host || bad.empty(),
             "commit_host accepted an input the kernel flags (%zu records)", bad.size());
  const store_check st = o.check(want, widths, "commit");
  check_record(guards[0], bad, kernel_id::commit_metadata, "commit guard[0]");
  check_stores(guards[1], st, kernel_id::commit_outputs, "commit guard[1]");
  FUZZ_CHECK(guards.canaries_intact(), "commit: guard canaries overwritten");
  finished.assign(e.finished.begin(), e.finished.end());
  return true;
}

}  // namespace specgraph::fuzz::round_harness
