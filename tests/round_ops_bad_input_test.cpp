// after_verify (round_ops.hpp): the state it leaves in place is what the next draft round reads
// (the step view's seq_len and out_cache_loc), misuse is refused by name before anything is
// enqueued (the arena and the engine's buffers untouched), and bad content on the device is
// recorded in the section's guard words, named by guard_site_of, the row built as padding.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/round_ops.hpp"
#include "tests/round_chain.hpp"
#include "tests/round_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

class RoundOpsEdges : public ExecutorTest {};

std::vector<unsigned char> download(executor& ex, const draft_buffers& b) {
  std::vector<unsigned char> got(b.bytes());
  ex.copy_to_host(got.data(), b.base(), got.size());
  return got;
}

TEST_P(RoundOpsEdges, TheNextDraftRoundReadsTheStateInPlace) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const scenario& s = scenarios[1];  // topk 2, ps 4, slot_stride 5: tail copies and a wide row
  round_rig rig(*ex, s, rng);
  write_tree(rig.m, s.bucket, s.real, rng);
  const std::int64_t D = rig.p.config.verify_tokens;
  for (std::int32_t f : {round_parent, round_draft_token, round_target_predict}) {
    upload(*ex, rig.b, rig.m, rig.m.field(f), static_cast<std::size_t>(s.bucket * D * 4));
  }
  after_verify(*ex, rig.v, rig.in);
  (void)chain_round(rig.m, rig.e, s.bucket);
  // The draft round's step view points at the very buffers the op wrote: seq_len' for the rows
  // that go on (1 for the others), their draft slots in out_cache_loc at the plan's stride.
  const step_view step = rig.b.view(s.bucket, 0);
  ASSERT_EQ(step.seq_len, rig.v.next.seq_len);
  ASSERT_EQ(step.out_cache_loc, rig.v.next.draft_out_cache_loc);
  ASSERT_EQ(step.cache_loc_stride, rig.v.next.draft_slot_stride);
  const std::int64_t k = rig.p.config.topk, stride = step.cache_loc_stride;
  std::vector<std::int32_t> seq(static_cast<std::size_t>(s.bucket));
  std::vector<std::int64_t> slots(static_cast<std::size_t>(s.bucket * k * stride));
  ex->copy_to_host(seq.data(), step.seq_len, seq.size() * 4);
  ex->copy_to_host(slots.data(), step.out_cache_loc, slots.size() * 8);
  for (std::int64_t r = 0; r < s.bucket; ++r) {
    const bool on = r < s.real && rig.m.get<std::int32_t>(rig.m.field(round_finished), r) == 0;
    const std::int32_t want = on ? rig.m.get<std::int32_t>(rig.m.field(round_new_seq_len), r) : 1;
    EXPECT_EQ(seq[static_cast<std::size_t>(r)], want) << r;
    // Draft token 0 of branch 0 sits at position seq_len' (paged or not): its slot.
    const std::int64_t row = rig.m.get<std::int32_t>(rig.p.layout.req_pool_index, r);
    const std::int64_t slot0 =
        on ? rig.e.req_to_token[static_cast<std::size_t>(row * rig.e.width + want)] : 0;
    EXPECT_EQ(slots[static_cast<std::size_t>(r * k * stride)], slot0) << r;
  }
  // The section's guard words are clean after a round of valid input.
  const std::vector<guard_word> g = read_guards(*ex, rig.b);
  for (std::int32_t w = 0; w < round_guard_count; ++w) {
    EXPECT_EQ(g[static_cast<std::size_t>(rig.p.layout.round.guard_base + w)].violations, 0) << w;
  }
}

TEST_P(RoundOpsEdges, MisuseIsRefusedByNameBeforeAnythingIsEnqueued) {
  std::mt19937_64 rng(test_seed());
  const scenario& s = scenarios[0];
  round_rig rig(*ex, s, rng);
  const std::vector<unsigned char> before = download(*ex, rig.b);
  auto refused = [&](after_verify_inputs in, const std::string& field, const std::string& what) {
    expect_invalid([&] { after_verify(*ex, rig.v, in); }, field, what);
  };
  after_verify_inputs in = rig.in;
  in.ring = nullptr;
  refused(in, "ring", "null pointer");
  in = rig.in;
  in.ring_tail = nullptr;
  refused(in, "ring_tail", "null pointer");
  in = rig.in;
  in.req_to_token = nullptr;
  refused(in, "req_to_token", "null pointer");
  in = rig.in;
  in.ring_capacity = 0;
  refused(in, "ring_capacity", "0");
  in = rig.in;
  in.req_to_token_stride = 127;  // below max_context_len 128
  refused(in, "req_to_token_stride", "127");
  in = rig.in;
  in.real_batch = s.bucket + 1;
  refused(in, "real_batch", "5");
  in = rig.in;
  in.stop_token_count = 3;  // the plan holds 2
  refused(in, "stop_token_count", "3");
  expect_invalid([&] { after_verify(*ex, round_view{}, rig.in); }, "round_view",
                 "build it with draft_buffers::round(bucket)");
  // The wrong bucket, and a plan without the section, at the view.
  expect_invalid([&] { (void)rig.b.round(7); }, "bucket", "7 is not one of the planned buckets");
  draft_config off = rig.p.config;
  off.round_on_device = false;
  const plan q = make_plan(off);
  device_buffer arena(*ex, q.total_bytes);
  const draft_buffers qb(q, arena.data());
  expect_invalid([&] { (void)qb.round(); }, "round_on_device", "this plan has no round section");
  // Nothing was enqueued: the arena and the engine's buffers as staged.
  EXPECT_EQ(download(*ex, rig.b), before);
  EXPECT_EQ(rig.r2t->download(), rig.e.req_to_token);
  EXPECT_EQ(rig.ring->download(), rig.e.ring);
}

TEST_P(RoundOpsEdges, BadContentIsRecordedNamedAndPadded) {
  std::mt19937_64 rng(test_seed());
  const scenario& s = scenarios[0];
  round_rig rig(*ex, s, rng);
  write_tree(rig.m, s.bucket, s.real, rng);
  const std::int64_t D = rig.p.config.verify_tokens;
  for (std::int32_t f : {round_parent, round_draft_token, round_target_predict}) {
    upload(*ex, rig.b, rig.m, rig.m.field(f), static_cast<std::size_t>(s.bucket * D * 4));
  }
  // Row 1's committed length in the staged seq_len is out of range (an engine bug).
  const std::int32_t bad = -3;
  ex->copy_to_device(rig.b.seq_len() + 1, &bad, 4);
  // The other sections' words clean (the arena is poisoned): only the op's may record.
  ex->fill_bytes(rig.b.guards(), 0, sizeof(guard_word) * rig.p.layout.guard_count);
  after_verify(*ex, rig.v, rig.in);
  const std::vector<guard_word> g = read_guards(*ex, rig.b);
  const std::int32_t base = rig.p.layout.round.guard_base;
  // Acceptance and the commit record row 1 as bad input; the next round sees its padded
  // new_seq_len (the copied -3) and records it too.
  for (const std::int32_t w : {0, 2, 5}) {
    const guard_word& x = g[static_cast<std::size_t>(base + w)];
    EXPECT_EQ(x.violations, 1) << guard_site_of(rig.p, base + w).buffer;
    EXPECT_EQ(x.kind, static_cast<std::int32_t>(violation_kind::bad_input)) << w;
    EXPECT_EQ(x.row, 1) << w;
    EXPECT_EQ(x.value, bad) << w;
  }
  for (const std::int32_t w : {1, 3, 4, 6}) {
    EXPECT_EQ(g[static_cast<std::size_t>(base + w)].violations, 0) << w;
  }
  // Row 1 is built as padding: nothing accepted, inactive next round at seq_len 1.
  auto word = [&](std::size_t offset, std::int64_t i) {
    std::int32_t x = 0;
    ex->copy_to_host(&x, rig.b.base() + offset + static_cast<std::size_t>(i) * 4, 4);
    return x;
  };
  EXPECT_EQ(word(rig.m.field(round_accept_length), 1), 0);
  EXPECT_EQ(word(rig.m.field(round_accept_index), 1 * (rig.p.config.num_steps + 1)), -1);
  EXPECT_EQ(word(rig.m.field(round_active), 1), 0);
  EXPECT_EQ(word(rig.p.layout.seq_len, 1), 1);
  // The other rows go on unless they finished (a stop token).
  EXPECT_EQ(word(rig.m.field(round_active), 0), word(rig.m.field(round_finished), 0) == 0 ? 1 : 0);
  // check_guards names the site.
  try {
    raise_guard_violations(rig.p, g, s.bucket, "after_verify");
    ADD_FAILURE() << "no violation raised";
  } catch (const guard_violation& e) {
    EXPECT_NE(std::string(e.what()).find("after_verify.accept (input)"), std::string::npos)
        << e.what();
  }
}

// A short ring: the round stalls (every row inactive, nothing taken), the commit stands. Two
// rounds queued behind it run first and change nothing. The engine refills the ring, clears the
// stall word and reruns the next round's launch alone over the same section (its inputs,
// new_seq_len, bonus, finished and allocated_len, are intact); then the loop goes on as before.
TEST_P(RoundOpsEdges, AfterAStallTheEngineRefillsClearsAndRerunsTheNextRound) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const scenario& s = scenarios[2];  // ps 1, no refill: three rows outrun one round of pages
  round_rig rig(*ex, s, rng);
  const std::int64_t D = rig.p.config.verify_tokens;
  auto write_round = [&] {
    write_tree(rig.m, s.bucket, s.real, rng);
    for (std::int32_t f : {round_parent, round_draft_token, round_target_predict}) {
      upload(*ex, rig.b, rig.m, rig.m.field(f), static_cast<std::size_t>(s.bucket * D * 4));
    }
  };
  int rounds = 0;
  for (; rounds < 8; ++rounds) {
    write_round();
    after_verify(*ex, rig.v, rig.in);
    expect_round(*ex, rig, chain_round(rig.m, rig.e, s.bucket), s.bucket);
    if (rig.m.get<std::int32_t>(rig.m.field(round_stall), 0) != 0) break;
  }
  ASSERT_LT(rounds, 8) << "the ring never ran short";
  // The stalled round: every row inactive, the staged seq_len all 1.
  for (std::int64_t r = 0; r < s.bucket; ++r) {
    EXPECT_EQ(rig.m.get<std::int32_t>(rig.m.field(round_active), r), 0) << r;
    EXPECT_EQ(rig.m.get<std::int32_t>(rig.p.layout.seq_len, r), 1) << r;
  }
  // The rounds a device loop queued behind the stalled one run before the host steps in: fresh
  // trees, every row inactive (staged seq_len 1). They accept nothing, move no KV, finish
  // nothing and leave what the rerun reads (new_seq_len, bonus, finished, allocated_len) and the
  // rest of the row state as the stalling round left it. Before the stall word was read, they
  // accepted over seq_len 1: new_seq_len lost, KV moves inside the rows' live prefixes.
  const round_mirror stalled = rig.m;
  const std::vector<std::int32_t> table = rig.e.req_to_token;
  const std::int32_t kept[] = {round_new_seq_len,        round_bonus,    round_finished,
                               round_free_begin,         round_free_end, round_allocated_len,
                               round_max_new_tokens_left};
  for (int q = 0; q < 2; ++q) {
    write_round();
    after_verify(*ex, rig.v, rig.in);
    expect_round(*ex, rig, chain_round(rig.m, rig.e, s.bucket), s.bucket);
    for (std::int64_t r = 0; r < s.bucket; ++r) {
      EXPECT_EQ(rig.m.get<std::int32_t>(rig.m.field(round_accept_length), r), 0) << r;
      EXPECT_EQ(rig.m.get<std::int32_t>(rig.m.field(round_accept_index),
                                        r * (rig.p.config.num_steps + 1)),
                -1)
          << r;
      const bool done = stalled.get<std::int32_t>(stalled.field(round_finished), r) != 0;
      EXPECT_EQ(rig.m.get<std::int32_t>(rig.m.field(round_emit_len), r),
                done ? stalled.get<std::int32_t>(stalled.field(round_emit_len), r) : 0)
          << r;
      for (const std::int32_t f : kept) {
        EXPECT_EQ(rig.m.get<std::int32_t>(rig.m.field(f), r),
                  stalled.get<std::int32_t>(stalled.field(f), r))
            << round_field_names[f] << "[" << r << "]";
      }
      for (std::int64_t k = 0; k < 2 * rig.p.config.num_steps; ++k) {
        const std::int64_t at = r * 2 * rig.p.config.num_steps + k;
        EXPECT_EQ(rig.m.get<std::int32_t>(rig.m.field(round_kv_move), at), -1) << r;
      }
    }
    EXPECT_EQ(rig.e.req_to_token, table) << "a stalled round writes no table position";
    EXPECT_EQ(rig.m.get<std::int32_t>(rig.m.field(round_stall), 0), 1);
    EXPECT_EQ(rig.m.get<std::int64_t>(rig.m.field(round_ring_head), 0),
              stalled.get<std::int64_t>(stalled.field(round_ring_head), 0));
  }
  // The engine: refill one round's worst case, publish the tail, clear the stall word.
  const std::int64_t head = rig.m.get<std::int64_t>(rig.m.field(round_ring_head), 0);
  const auto capacity = static_cast<std::int64_t>(rig.e.ring.size());
  for (; rig.e.tail < head + rig.per_round; ++rig.e.tail) {
    rig.e.ring[static_cast<std::size_t>(rig.e.tail % capacity)] = rig.next_page++;
  }
  ex->copy_to_device(rig.ring->data(), rig.e.ring.data(), rig.e.ring.size() * 4);
  ex->copy_to_device(rig.tail->data(), &rig.e.tail, 8);
  const std::int32_t zero = 0;
  ex->copy_to_device(rig.v.stall, &zero, 4);
  rig.m.put<std::int32_t>(rig.m.field(round_stall), 0, 0);
  ex->fill_bytes(rig.v.guard, 0, sizeof(guard_word) * round_guard_count);
  launch_next_round(*ex, after_verify_params(rig.v, rig.in).next);
  expect_round(*ex, rig, chain_next_round(rig.m, rig.e, s.bucket), s.bucket);
  EXPECT_EQ(rig.m.get<std::int32_t>(rig.m.field(round_stall), 0), 0);
  for (std::int64_t r = 0; r < s.real; ++r) {
    EXPECT_EQ(rig.m.get<std::int32_t>(rig.m.field(round_active), r), 1) << r;
  }
  // And the loop goes on.
  write_round();
  after_verify(*ex, rig.v, rig.in);
  expect_round(*ex, rig, chain_round(rig.m, rig.e, s.bucket), s.bucket);
}

// after_verify's parts (round_ops.hpp): accept_commit then next leaves the arena and the
// engine's buffers byte for byte as all does, accept_commit leaves the next round's outputs
// alone, next resets no guard word; a name that is no part is refused, nothing enqueued.
TEST_P(RoundOpsEdges, ThePartsInOrderEqualTheWholeOpAndOtherNamesAreRefused) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  const scenario& s = scenarios[1];
  std::mt19937_64 rng_whole(seed), rng_parts(seed);
  round_rig whole(*ex, s, rng_whole), parts(*ex, s, rng_parts);
  const std::int64_t D = whole.p.config.verify_tokens;
  for (round_rig* rig : {&whole, &parts}) {
    std::mt19937_64 tree_rng(seed + 1);
    write_tree(rig->m, s.bucket, s.real, tree_rng);
    for (std::int32_t f : {round_parent, round_draft_token, round_target_predict}) {
      upload(*ex, rig->b, rig->m, rig->m.field(f), static_cast<std::size_t>(s.bucket * D * 4));
    }
  }
  EXPECT_EQ(download(*ex, whole.b), download(*ex, parts.b));
  for (const char* bad : {"commit", "ALL", ""}) {
    expect_invalid([&] { (void)after_verify_part_of(bad); }, "part",
                   std::string("\"") + bad + "\" is not a part of after_verify");
  }
  EXPECT_EQ(after_verify_part_of("all"), after_verify_part::all);
  after_verify(*ex, whole.v, whole.in);  // the default part: all
  const std::vector<unsigned char> staged = download(*ex, parts.b);
  after_verify(*ex, parts.v, parts.in, after_verify_part_of("accept_commit"));
  // The next round's outputs and the staged seq_len are as staged (the arena was poisoned).
  const std::vector<unsigned char> mid = download(*ex, parts.b);
  const auto same = [&](std::size_t offset, std::size_t bytes) {
    for (std::size_t i = offset; i < offset + bytes; ++i) {
      if (mid[i] != staged[i]) return false;
    }
    return true;
  };
  EXPECT_TRUE(same(parts.p.layout.seq_len, static_cast<std::size_t>(s.bucket) * 4));
  EXPECT_TRUE(same(parts.m.field(round_active), static_cast<std::size_t>(s.bucket) * 4));
  EXPECT_TRUE(same(parts.m.field(round_root_token), static_cast<std::size_t>(s.bucket) * 4));
  EXPECT_EQ(parts.ring->download(), whole.ring->download());  // read only
  // next alone resets no guard word: a word set now is still set after it.
  guard_word* first = parts.v.guard;
  guard_word marked{};
  ex->copy_to_host(&marked, first, sizeof(marked));
  const std::int32_t five = 5;
  ex->copy_to_device(first, &five, 4);
  after_verify(*ex, parts.v, parts.in, after_verify_part::next);
  std::int32_t kept = 0;
  ex->copy_to_host(&kept, first, 4);
  EXPECT_EQ(kept, 5);
  ex->copy_to_device(first, &marked, sizeof(marked));
  EXPECT_EQ(download(*ex, parts.b), download(*ex, whole.b));
  EXPECT_EQ(parts.r2t->download(), whole.r2t->download());
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RoundOpsEdges);

}  // namespace
}  // namespace specgraph::testing
