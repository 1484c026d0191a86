// verify_metadata (verify_ops.hpp) over a plan's verify section: staged rounds of random trees
// in random buckets (padded requests, idle ranks, exact and bound masks, every format) equal the
// independent reference (tests/verify_reference.hpp) cell for cell, with the whole arena
// poisoned around the section and every byte outside what the launch writes unchanged; the
// engine's own output buffers written in place; bad inputs refused by name with nothing written.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/verify_ops.hpp"
#include "tests/test_support.hpp"
#include "tests/verify_arena_support.hpp"
#include "tests/verify_reference.hpp"
#include "tests/verify_run.hpp"

namespace specgraph::testing {
namespace {

draft_config verify_config(std::mt19937_64& rng) {
  draft_config c;
  c.max_batch = 6;
  c.buckets = {2, 4, 6};
  c.topk = 2;
  c.num_steps = 2;
  const std::int32_t sizes[] = {1, 4, 16};
  c.page_size = sizes[rng() % 3];
  c.max_context_len = 1 + static_cast<std::int32_t>(rng() % 40);
  c.pool_rows = 9;
  c.kv_slots = 1 << 20;
  c.formats = static_cast<metadata_formats>(rng() % 3);
  c.verify_tokens = 1 + static_cast<std::int32_t>(rng() % 12);
  return c;
}

std::vector<unsigned char> download(executor& ex, const draft_buffers& b) {
  std::vector<unsigned char> out(b.bytes());
  ex.copy_to_host(out.data(), b.base(), out.size());
  return out;
}

// The case's requests staged into the poisoned arena (stage_round pads them to the bucket).
void stage(executor& ex, const draft_buffers& b, const verify_case& c, std::int32_t bucket) {
  const draft_config& cfg = b.plan().config;
  ex.fill_bytes(b.base(), arena_poison, b.bytes());
  std::vector<std::int32_t> pool(c.req_pool_index.begin(), c.req_pool_index.begin() + c.real_batch);
  std::vector<std::int32_t> seq(c.seq_len.begin(), c.seq_len.begin() + c.real_batch);
  dvec<std::int32_t> dpool(ex, pool), dseq(ex, seq);
  dvec<std::int64_t> slots(
      ex, static_cast<std::size_t>(c.real_batch) * cfg.topk * cfg.slot_stride + 1, 0);
  device_round_inputs in;
  in.batch = c.real_batch;
  in.req_pool_index = dpool.data();
  in.seq_len = dseq.data();
  in.out_cache_loc = slots.data();
  in.bucket = bucket;
  ASSERT_EQ(stage_round(ex, b, in), bucket);
  ex.synchronize();
}

class VerifyOps : public ExecutorTest {};

TEST_P(VerifyOps, StagedRoundsInTheArenaMatchTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int n = 0; n < property_cases(150); ++n) {
    draft_config cfg = verify_config(rng);
    const plan p = make_plan(cfg);
    device_buffer arena(*ex, p.total_bytes);
    const draft_buffers b(p, arena.data());
    const std::int32_t bucket = cfg.buckets[rng() % 3];
    const std::int32_t real = static_cast<std::int32_t>(rng() % (bucket + 1));  // 0: idle rank
    verify_case c = plan_verify_case(p, bucket, real, rng);
    const bool bound = rng() % 2 == 0;
    if (bound) {  // a static buffer: the tail holds a previous round's cells
      c.mask.resize(c.mask.size() + rng() % 50, 1);
      c.mask_exact = false;
    }
    SCOPED_TRACE("case " + std::to_string(n) + ": bucket " + std::to_string(bucket) + " real " +
                 std::to_string(real) + " D " + std::to_string(cfg.verify_tokens) + " M " +
                 std::to_string(cfg.max_context_len) + " ps " + std::to_string(cfg.page_size) +
                 " formats " + to_string(cfg.formats) + (bound ? " bound" : " exact"));
    dvec<std::int32_t> rtt(*ex, c.req_to_token);
    dvec<std::uint8_t> mask(*ex, c.mask);
    stage(*ex, b, c, bucket);
    if (HasFatalFailure()) return;
    const std::vector<unsigned char> before = download(*ex, b);
    verify_inputs in;
    in.tables.req_to_token = rtt.data();
    in.tables.req_to_token_stride = c.width;
    in.custom_mask = mask.data();
    in.mask_cells = static_cast<std::int64_t>(c.mask.size());
    in.mask_length_exact = !bound;
    verify_metadata(*ex, b, bucket, in);
    ex->synchronize();
    const std::vector<unsigned char> got = download(*ex, b);
    const verify_expected w = verify_reference(c);
    expect_verify_guards(p, got, w);
    expect_same_arena(p, got, expected_arena(p, c, w, before, got));
    if (HasFatalFailure()) return;
  }
}

TEST_P(VerifyOps, TheEnginesBuffersAreWrittenInPlace) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int n = 0; n < property_cases(60); ++n) {
    draft_config cfg = verify_config(rng);
    cfg.formats = metadata_formats::both;
    const plan p = make_plan(cfg);
    device_buffer arena(*ex, p.total_bytes);
    const draft_buffers b(p, arena.data());
    const std::int32_t bucket = cfg.buckets[rng() % 3];
    const std::int32_t real = 1 + static_cast<std::int32_t>(rng() % bucket);
    verify_case c = plan_verify_case(p, bucket, real, rng);
    // The engine's strides: wider than the exact widths (the gap stays poisoned).
    c.prefix_stride = c.prefix_capacity + static_cast<std::int64_t>(rng() % 3);
    c.expand_stride = cfg.verify_tokens + static_cast<std::int64_t>(rng() % 3);
    SCOPED_TRACE("case " + std::to_string(n));
    dvec<std::int32_t> rtt(*ex, c.req_to_token);
    dvec<std::uint8_t> mask(*ex, c.mask);
    stage(*ex, b, c, bucket);
    if (HasFatalFailure()) return;
    const std::vector<unsigned char> before = download(*ex, b);
    const std::size_t bs = static_cast<std::size_t>(bucket), d = cfg.verify_tokens,
                      k = verify_canaries;
    auto i32 = [&](std::size_t cells) { return dvec<std::int32_t>(*ex, cells + k, verify_poison); };
    dvec<std::int32_t> pt = i32(bs * static_cast<std::size_t>(c.prefix_stride)), pc = i32(bs),
                       pq = i32(bs + 1), pk = i32(bs + 1),
                       et = i32(bs * d * static_cast<std::size_t>(c.expand_stride)),
                       ec = i32(bs * d), eq = i32(bs * d + 1), ek = i32(bs * d + 1),
                       qo = i32(bs + 1), kvp = i32(bs + 1),
                       kvi = i32(static_cast<std::size_t>(c.kv_capacity)), last = i32(bs),
                       mp = i32(bs + 1), pp = i32(bs + 1);
    dvec<std::uint8_t> packed(*ex, static_cast<std::size_t>(c.packed_capacity) + k,
                              verify_poison_byte);
    verify_engine_outputs o;
    o.prefix_page_table = pt.data();
    o.prefix_stride = c.prefix_stride;
    o.prefix_cache_seqlen = pc.data();
    o.prefix_cu_seqlens_q = pq.data();
    o.prefix_cu_seqlens_k = pk.data();
    o.expand_page_table = et.data();
    o.expand_stride = c.expand_stride;
    o.expand_cache_seqlen = ec.data();
    o.expand_cu_seqlens_q = eq.data();
    o.expand_cu_seqlens_k = ek.data();
    o.qo_indptr = qo.data();
    o.kv_indptr = kvp.data();
    o.kv_indices = kvi.data();
    o.kv_indices_capacity = c.kv_capacity;
    o.kv_last_page_len = last.data();
    o.mask_indptr = mp.data();
    o.packed_mask = packed.data();
    o.packed_mask_capacity = c.packed_capacity;
    o.packed_mask_indptr = pp.data();
    verify_inputs in;
    in.tables.req_to_token = rtt.data();
    in.tables.req_to_token_stride = c.width;
    in.custom_mask = mask.data();
    in.mask_cells = static_cast<std::int64_t>(c.mask.size());
    in.mask_length_exact = true;
    in.outputs = &o;
    verify_metadata(*ex, b, bucket, in);
    ex->synchronize();
    const std::vector<unsigned char> got = download(*ex, b);
    std::vector<guard_word> guards(verify_guard_count);
    std::memcpy(guards.data(),
                got.data() + p.layout.guards +
                    static_cast<std::size_t>(p.layout.verify.guard_base) * sizeof(guard_word),
                sizeof(guard_word) * verify_guard_count);
    expect_matches(c, {pt.download(), pc.download(), pq.download(), pk.download(), et.download(),
                       ec.download(), eq.download(), ek.download(), qo.download(), kvp.download(),
                       kvi.download(), last.download(), mp.download(), pp.download(),
                       packed.download(), guards});
    // The arena's section is not written: only the scratch and the section's guard words.
    std::vector<unsigned char> want = before;
    const plan_layout::verify_section& s = p.layout.verify;
    std::memcpy(want.data() + s.scratch, got.data() + s.scratch,
                static_cast<std::size_t>(s.scratch_words) * 8);
    const std::size_t g =
        p.layout.guards + static_cast<std::size_t>(s.guard_base) * sizeof(guard_word);
    std::memcpy(want.data() + g, got.data() + g, sizeof(guard_word) * verify_guard_count);
    expect_same_arena(p, got, want);
    if (HasFatalFailure()) return;
  }
}

// The real batch read on the device: a word outside [0, bucket] (a corrupted or unstaged
// arena) is clamped into the range, the launch stays inside its buffers, and guard 0 records it
// (row -1, column -2, capacity the bucket, value the word).
TEST_P(VerifyOps, ADeviceRealBatchOutsideTheBucketIsClampedAndRecorded) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int n = 0; n < property_cases(40); ++n) {
    draft_config cfg = verify_config(rng);
    const plan p = make_plan(cfg);
    device_buffer arena(*ex, p.total_bytes);
    const draft_buffers b(p, arena.data());
    const std::int32_t bucket = cfg.buckets[rng() % 3];
    const bool high = rng() % 2 == 0;  // above the bucket: every request real; below 0: none
    verify_case c = plan_verify_case(p, bucket, high ? bucket : 0, rng);
    dvec<std::int32_t> rtt(*ex, c.req_to_token);
    dvec<std::uint8_t> mask(*ex, c.mask);
    stage(*ex, b, c, bucket);
    if (HasFatalFailure()) return;
    const std::int32_t word = high ? bucket + 1 + static_cast<std::int32_t>(rng() % 1000)
                                   : -1 - static_cast<std::int32_t>(rng() % 1000);
    dvec<std::int32_t> real(*ex, std::vector<std::int32_t>{word});
    const std::vector<unsigned char> before = download(*ex, b);
    verify_inputs in;
    in.tables.req_to_token = rtt.data();
    in.tables.req_to_token_stride = c.width;
    in.custom_mask = mask.data();
    in.mask_cells = static_cast<std::int64_t>(c.mask.size());
    in.real_batch = real.data();
    verify_metadata(*ex, b, bucket, in);
    ex->synchronize();
    const std::vector<unsigned char> got = download(*ex, b);
    verify_expected w = verify_reference(c);
    SCOPED_TRACE("bucket " + std::to_string(bucket) + " word " + std::to_string(word));
    expect_same_arena(p, got, expected_arena(p, c, w, before, got));
    guard_word g{};
    std::memcpy(&g,
                got.data() + p.layout.guards +
                    static_cast<std::size_t>(p.layout.verify.guard_base) * sizeof(guard_word),
                sizeof g);
    ASSERT_EQ(g.violations, 1 + static_cast<std::int32_t>(w.records[0].size()));
    ASSERT_EQ(static_cast<violation_kind>(g.kind), violation_kind::bad_input);
    ASSERT_EQ(g.row, -1);
    ASSERT_EQ(g.column, -2);
    ASSERT_EQ(g.capacity, bucket);
    ASSERT_EQ(g.value, word);
  }
}

TEST_P(VerifyOps, BadInputsAreRefusedByNameWithNothingWritten) {
  std::mt19937_64 rng(7);
  draft_config cfg = verify_config(rng);
  cfg.formats = metadata_formats::both;
  cfg.max_context_len = 24;
  cfg.verify_tokens = 4;
  const plan p = make_plan(cfg);
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  verify_case c = plan_verify_case(p, 4, 3, rng);
  dvec<std::int32_t> rtt(*ex, c.req_to_token);
  dvec<std::uint8_t> mask(*ex, c.mask);
  stage(*ex, b, c, 4);
  if (HasFatalFailure()) return;
  const std::vector<unsigned char> before = download(*ex, b);
  verify_inputs good;
  good.tables.req_to_token = rtt.data();
  good.tables.req_to_token_stride = c.width;
  good.custom_mask = mask.data();
  good.mask_cells = static_cast<std::int64_t>(c.mask.size());
  dvec<std::int32_t> small(*ex, 8, verify_poison);
  verify_engine_outputs partial;
  partial.prefix_page_table = small.data();
  auto full = [&](verify_engine_outputs o) {
    std::int32_t* x = small.data();
    o.prefix_page_table = o.prefix_cache_seqlen = o.prefix_cu_seqlens_q = o.prefix_cu_seqlens_k =
        o.expand_page_table = o.expand_cache_seqlen = o.expand_cu_seqlens_q =
            o.expand_cu_seqlens_k = x;
    o.prefix_stride = 64;
    o.expand_stride = 4;
    o.qo_indptr = o.kv_indptr = o.kv_indices = o.kv_last_page_len = o.mask_indptr =
        o.packed_mask_indptr = x;
    o.packed_mask = reinterpret_cast<std::uint8_t*>(x);
    o.kv_indices_capacity = 4 * (24 + 4);
    o.packed_mask_capacity = 4 * ((4 * 28 + 7) / 8);
    return o;
  };
  verify_engine_outputs kv_short = full({});
  kv_short.kv_indices_capacity -= 1;  // one below the bucket's exact 4 * (M + D)
  verify_engine_outputs packed_short = full({});
  packed_short.packed_mask_capacity -= 1;
  verify_engine_outputs narrow = full({});
  narrow.expand_stride = 3;  // below D
  struct bad {
    const char* field;
    std::int32_t bucket;
    verify_inputs in;
    const char* message;
  };
  std::vector<bad> cases;
  auto with = [&](auto edit) {
    verify_inputs in = good;
    edit(in);
    return in;
  };
  cases.push_back({"bucket", 3, good, "3 is not one of the planned buckets"});
  cases.push_back({"req_to_token", 4,
                   with([](verify_inputs& in) { in.tables.req_to_token = nullptr; }),
                   "null pointer"});
  cases.push_back({"custom_mask", 4, with([](verify_inputs& in) { in.custom_mask = nullptr; }),
                   "null pointer"});
  cases.push_back(
      {"mask_cells", 4, with([](verify_inputs& in) { in.mask_cells = -1; }), "-1 is below"});
  cases.push_back({"seq_len", 4, with([&](verify_inputs& in) { in.req_pool_index = small.data(); }),
                   "null while req_pool_index is given"});
  cases.push_back({"req_to_token_stride", 4,
                   with([](verify_inputs& in) { in.tables.req_to_token_stride = 5; }), "5"});
  cases.push_back({"outputs.prefix_cache_seqlen", 4,
                   with([&](verify_inputs& in) { in.outputs = &partial; }),
                   "1 of its 8 output pointers set; set all of them or none"});
  cases.push_back({"outputs.kv_indices", 4,
                   with([&](verify_inputs& in) { in.outputs = &kv_short; }),
                   "111 elements, below the 112 bucket 4 needs"});
  cases.push_back({"outputs.packed_mask", 4,
                   with([&](verify_inputs& in) { in.outputs = &packed_short; }),
                   "55 bytes, below the 56 bucket 4 needs"});
  cases.push_back({"outputs.expand_stride", 4,
                   with([&](verify_inputs& in) { in.outputs = &narrow; }), "3 is below"});
  for (const bad& x : cases) {
    SCOPED_TRACE(x.field);
    try {
      verify_metadata(*ex, b, x.bucket, x.in);
      ADD_FAILURE() << "accepted";
    } catch (const invalid_argument& e) {
      EXPECT_EQ(e.field(), x.field) << e.what();
      EXPECT_NE(std::string(e.what()).find(x.message), std::string::npos) << e.what();
    }
    ex->synchronize();
    expect_same_arena(p, download(*ex, b), before);
    EXPECT_EQ(small.download(), std::vector<std::int32_t>(8, verify_poison));
  }
  // A plan without a verify section refuses the op by its field.
  cfg.verify_tokens = 0;
  const plan q = make_plan(cfg);
  device_buffer arena2(*ex, q.total_bytes);
  try {
    verify_metadata(*ex, draft_buffers(q, arena2.data()), 4, good);
    ADD_FAILURE() << "accepted without a verify section";
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "verify_tokens");
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(VerifyOps);

}  // namespace
}  // namespace specgraph::testing
