// round_fuzz's last stage: the next round's inputs (docs/next-round.md) from acceptance's
// new_seq_len and bonus and the commit's finished flags, on the round's path, against
// tests/next_round_reference.hpp (cells, req_to_token, allocated_len, ring head, stall word and
// the three guard words).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "tests/fuzz/round_fuzz.hpp"
#include "tests/fuzz/round_fuzz_check.hpp"
#include "tests/next_round_reference.hpp"

namespace specgraph::fuzz::round_harness {

namespace {

std::vector<record> records(const std::vector<testing::nr_violation>& v, std::int32_t kind) {
  std::vector<record> out;
  for (const testing::nr_violation& x : v) {
    FUZZ_CHECK(x.kind == kind || kind < 0, "next round: reference kind %d", x.kind);
    out.push_back({x.row, x.column, x.capacity, x.value});
  }
  return out;
}

// Output i of the reference against its buffer; refused stores counted into s (the lowest
// (row, flat index) kept, as guard[2] keeps it).
template <class T>
void check_output(const guarded<T>& g, const std::vector<testing::nr_cell>& cells, int i,
                  store_check& s, bool& any) {
  FUZZ_CHECK(g.canaries_intact(), "next round: canaries past output %d overwritten", i);
  std::vector<T> want(g.size(), T{poison});
  const auto cap = static_cast<std::int64_t>(g.size());
  for (const testing::nr_cell& x : cells) {
    if (x.index < cap) {
      want[static_cast<std::size_t>(x.index)] = static_cast<T>(x.value);
      continue;
    }
    ++s.refused;
    if (!any || x.row < s.first.row || (x.row == s.first.row && x.index < s.first.column)) {
      s.first = {x.row, static_cast<std::int32_t>(x.index), cap, x.value};
      any = true;
    }
  }
  for (std::size_t k = 0; k < want.size(); ++k) {
    FUZZ_CHECK(g[k] == want[k], "next round: output %d cell %zu: %lld, expected %lld", i, k,
               static_cast<long long>(g[k]), static_cast<long long>(want[k]));
  }
}

}  // namespace

void run_next_round_stage(const round& c, const accepted& a,
                          const std::vector<std::int32_t>& finished) {
  testing::nr_case n;
  n.batch = c.batch;
  n.real_batch = c.real_batch;
  n.device_word = c.word_mode;
  n.word_value = c.word;
  n.draft_tokens = c.draft_tokens;
  n.num_steps = c.num_steps;
  n.topk = c.topk;
  n.page_size = c.page_size;
  n.reserve = c.reserve;
  n.new_seq_len = a.new_seq_len;
  n.bonus = a.bonus;
  n.req_pool_index = c.pool_index;
  n.allocated_len = c.allocated;
  n.has_finished = c.has_finished;
  n.finished = finished;
  n.width = c.width;
  n.pool_rows = c.pool_rows;
  n.req_to_token = c.req_to_token;
  n.ring = c.ring;
  n.head = c.head;
  n.tail = c.tail;
  n.stall = c.stall;
  n.slot_stride = c.slot_stride;
  const testing::nr_expect e = testing::nr_reference(n);
  std::int64_t exact[7], caps[7];
  testing::nr_exact(n, exact);
  cut_capacities(c.cut[2], c.cut_how[2], exact, 7, caps);
  // The twin refuses bad content: a bad row, a bad ring page this round would take.
  bool bad_content = false;
  for (const auto& x : e.guard[1]) bad_content = bad_content || x.kind == 3;
  for (const auto& x : e.guard[0]) bad_content = bad_content || (x.kind == 7 && x.column >= 0);

  const auto b = static_cast<std::size_t>(c.batch);
  guarded<std::int32_t> seq(b), bonus(b), fin(finished.size()), pool(b), rtt(c.req_to_token.size()),
      alloc(b), ring(c.ring.size()), stall(1), word(1);
  guarded<std::int64_t> head(1), tail(1), scratch(2 * b + 2, -1);
  copy_in(seq, a.new_seq_len);
  copy_in(bonus, a.bonus);
  copy_in(fin, finished);
  copy_in(pool, c.pool_index);
  copy_in(rtt, c.req_to_token);
  copy_in(alloc, c.allocated);
  copy_in(ring, c.ring);
  stall[0] = c.stall;
  word[0] = c.word;
  head[0] = c.head;
  tail[0] = c.tail;
  const std::int64_t c32[5] = {caps[0], caps[1], caps[2], caps[3], caps[5]};
  const std::int64_t c64[2] = {caps[4], caps[6]};
  stage_outputs<std::int32_t> o32(c32, 5);
  stage_outputs<std::int64_t> o64(c64, 2);
  guarded<guard_word> guards(next_round_guard_count, stale_guard());
  next_round_params p;
  p.new_seq_len = seq.data();
  p.bonus = bonus.data();
  p.finished = c.has_finished ? fin.data() : nullptr;
  p.req_pool_index = pool.data();
  p.req_to_token = rtt.data();
  p.req_to_token_stride = c.width;
  p.pool_rows = c.pool_rows;
  p.allocated_len = alloc.data();
  p.ring = ring.data();
  p.ring_capacity = static_cast<std::int64_t>(c.ring.size());
  p.ring_head = head.data();
  p.ring_tail = tail.data();
  p.stall = stall.data();
  p.batch = c.batch;
  p.real_batch = c.real_batch;
  if (c.word_mode) p.real_batch_at = word.data();
  p.draft_tokens = c.draft_tokens;
  p.num_steps = c.num_steps;
  p.topk = c.topk;
  p.page_size = c.page_size;
  p.reserve = c.reserve;
  p.active = o32.data(0);
  p.active_capacity = caps[0];
  p.seq_len = o32.data(1);
  p.seq_len_capacity = caps[1];
  p.root_token = o32.data(2);
  p.root_token_capacity = caps[2];
  p.draft_position = o32.data(3);
  p.draft_position_capacity = caps[3];
  p.draft_out_cache_loc = o64.data(0);
  p.draft_out_cache_loc_capacity = caps[4];
  p.draft_slot_stride = testing::nr_stride(n);
  p.tail_copy = o32.data(4);
  p.tail_copy_capacity = caps[5];
  p.verify_out_cache_loc = o64.data(1);
  p.verify_out_cache_loc_capacity = caps[6];
  p.scratch = scratch.data();
  p.guard = guards.data();
  bool refused = false;
  try {
    on_round_path(c.how, [&](executor& ex, bool host) { run_next_round(ex, p, host); });
  } catch (const invalid_argument& x) {
    check_invalid_argument(x, "next round");
    refused = true;
    FUZZ_CHECK(c.how == path::host && bad_content, "next round refused '%s' (path %d)", x.what(),
               static_cast<int>(c.how));
  }
  check_unchanged(seq, a.new_seq_len, "next round", "new_seq_len");
  check_unchanged(bonus, a.bonus, "next round", "bonus");
  check_unchanged(fin, finished, "next round", "finished");
  check_unchanged(pool, c.pool_index, "next round", "req_pool_index");
  check_unchanged(ring, c.ring, "next round", "ring");
  check_unchanged(tail, std::vector<std::int64_t>{c.tail}, "next round", "ring_tail");
  FUZZ_CHECK(scratch.canaries_intact(), "next round: scratch canaries overwritten");
  if (refused) {
    check_unchanged(rtt, c.req_to_token, "refused next round", "req_to_token");
    check_unchanged(alloc, c.allocated, "refused next round", "allocated_len");
    check_unchanged(head, std::vector<std::int64_t>{c.head}, "refused next round", "ring_head");
    check_unchanged(stall, std::vector<std::int32_t>{c.stall}, "refused next round", "stall");
    o32.check_untouched("refused next round");
    o64.check_untouched("refused next round");
    check_stale(guards, "refused next round");
    return;
  }
  FUZZ_CHECK(c.how != path::host || !bad_content,
             "next_round_host accepted an input the kernels flag");
  check_unchanged(rtt, e.req_to_token, "next round", "req_to_token (the reference's)");
  check_unchanged(alloc, e.allocated_len, "next round", "allocated_len (the reference's)");
  FUZZ_CHECK(head[0] == e.head, "next round: ring head %lld, expected %lld",
             static_cast<long long>(head[0]), static_cast<long long>(e.head));
  FUZZ_CHECK(stall[0] == e.stall, "next round: stall %d, expected %d", stall[0], e.stall);
  store_check s;
  bool any = false;
  const int slot32[5] = {0, 1, 2, 3, 5};
  for (int i = 0; i < 5; ++i) {
    const int k = slot32[i];
    check_output(o32.buffer(i), e.cells[k], k, s, any);
  }
  check_output(o64.buffer(0), e.cells[4], 4, s, any);
  check_output(o64.buffer(1), e.cells[6], 6, s, any);
  check_record(guards[0], records(e.guard[0], -1), kernel_id::next_round_alloc, "next guard[0]",
               e.guard[0].empty()
                   ? violation_kind::bad_input
                   : static_cast<violation_kind>(testing::nr_first(e.guard[0])->kind));
  check_record(guards[1], records(e.guard[1], -1), kernel_id::next_round_slots, "next guard[1]",
               e.guard[1].empty()
                   ? violation_kind::bad_input
                   : static_cast<violation_kind>(testing::nr_first(e.guard[1])->kind));
  check_stores(guards[2], s, kernel_id::next_round_outputs, "next guard[2]");
  FUZZ_CHECK(guards.canaries_intact(), "next round: guard canaries overwritten");
}

}  // namespace specgraph::fuzz::round_harness
