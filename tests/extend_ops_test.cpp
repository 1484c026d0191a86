// extend_metadata (extend_ops.hpp) over a plan's draft-extend section: staged rounds in random
// buckets (padded requests, idle ranks, accepted lengths 0..W staged or read from the engine's
// buffer, every format, page sizes 1..64) equal the independent reference
// (tests/extend_reference.hpp) cell for cell, with the whole arena poisoned and every byte
// outside what the launch writes unchanged; a stale previous round leaves nothing behind; the
// engine's own output buffers (any subset of layouts) written in place; bad inputs refused by
// name with nothing written.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/extend_ops.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "tests/extend_reference.hpp"
#include "tests/test_support.hpp"
#include "tests/verify_arena_support.hpp"

namespace specgraph::testing {
namespace {

draft_config extend_config(std::mt19937_64& rng) {
  draft_config c;
  c.max_batch = 6;
  c.buckets = {2, 4, 6};
  c.topk = 2;
  c.num_steps = 2;
  const std::int32_t sizes[] = {1, 2, 4, 16, 64};
  c.page_size = sizes[rng() % 5];
  c.max_context_len = 1 + static_cast<std::int32_t>(rng() % 150);
  c.pool_rows = 9;
  c.kv_slots = 1 << 20;
  c.formats = static_cast<metadata_formats>(rng() % 3);
  c.verify_tokens = 1 + static_cast<std::int32_t>(rng() % 12);
  c.draft_extend = true;
  return c;
}

std::vector<unsigned char> download(executor& ex, const draft_buffers& b) {
  std::vector<unsigned char> out(b.bytes());
  ex.copy_to_host(out.data(), b.base(), out.size());
  return out;
}

// A round of `real` requests padded to `bucket` for plan p: pool rows 1.., seq_len in [1, M]
// (a quarter at M, the context edge), accepted lengths in [0, W], req_to_token rows M + W wide.
extend_case plan_extend_case(const plan& p, std::int32_t bucket, std::int32_t real,
                             std::mt19937_64& rng) {
  const draft_config& c = p.config;
  const std::int32_t w = c.verify_tokens, m = c.max_context_len;
  extend_case e;
  e.page_size = c.page_size;
  e.window = w;
  e.bucket = bucket;
  e.real_batch = real;
  e.max_seq_len = m;
  e.pool_rows = c.pool_rows;
  e.width = static_cast<std::int64_t>(m) + w;
  e.req_to_token.resize(static_cast<std::size_t>(e.pool_rows * e.width));
  for (auto& s : e.req_to_token) s = static_cast<std::int32_t>(rng() % c.kv_slots);
  for (std::int32_t r = 0; r < bucket; ++r) {
    e.seq_len.push_back(rng() % 4 == 0 ? m : 1 + static_cast<std::int32_t>(rng() % m));
    e.accept_len.push_back(static_cast<std::int32_t>(rng() % (w + 1)));
    e.req_pool_index.push_back(1 + static_cast<std::int32_t>(rng() % (c.pool_rows - 1)));
  }
  const extend_tables t = extend_exact_tables(bucket, m, c.page_size, w);
  e.page_capacity = t.page_capacity;
  e.prefix_capacity = t.prefix_kv_capacity;
  e.full_capacity = t.full_kv_capacity;
  return e;
}

// The case's requests staged into the arena (stage_round pads them to the bucket), and its
// accepted lengths (stage_accept_len pads them with 1); `other`: lengths that differ from the
// case's in every real row instead (the engine's buffer is then the one to read).
void stage(executor& ex, const draft_buffers& b, const extend_case& c, bool other = false) {
  const draft_config& cfg = b.plan().config;
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
  in.bucket = c.bucket;
  ASSERT_EQ(stage_round(ex, b, in), c.bucket);
  std::vector<std::int32_t> accept(c.accept_len.begin(), c.accept_len.begin() + c.real_batch);
  for (std::int32_t& a : accept) a = other ? (a + 1) % (c.window + 1) : a;
  stage_accept_len(ex, b, c.bucket, accept);
  ex.synchronize();
}

// Writes the reference's cells of field i (the bucket's rows) at `at` in `want`.
void put_field(std::vector<unsigned char>& want, std::size_t at, int i, const extend_case& c,
               const extend_expect& e, std::int64_t page_stride) {
  std::vector<std::int64_t> cells;
  const std::vector<std::int64_t> ones(static_cast<std::size_t>(c.bucket), 1);
  switch (i) {
    case 0: cells = e.position; break;
    case 1: cells = e.out_cache_loc; break;
    case 2: cells = e.select_index; break;
    case 3:
      for (std::size_t r = 0; r < e.page_rows.size(); ++r) {
        for (std::size_t col = 0; col < e.page_rows[r].size(); ++col) {
          const auto v = static_cast<std::int32_t>(e.page_rows[r][col]);
          std::memcpy(want.data() + at + (r * static_cast<std::size_t>(page_stride) + col) * 4, &v,
                      4);
        }
      }
      return;
    case 4: cells = e.cache_seqlen; break;
    case 5:
    case 8:
    case 11: cells = e.cu_q; break;
    case 6: cells = e.cu_k; break;
    case 7: cells = {e.max_k}; break;
    case 9: cells = e.prefix_indptr; break;
    case 10: cells = e.prefix_indices; break;
    case 12: cells = e.full_indptr; break;
    case 13: cells = e.full_indices; break;
    default: cells = ones; break;
  }
  for (std::size_t k = 0; k < cells.size(); ++k) {
    const auto v = static_cast<std::int32_t>(cells[k]);
    std::memcpy(want.data() + at + k * 4, &v, 4);
  }
}

guard_word guard_at(const plan& p, const std::vector<unsigned char>& arena, std::int32_t k) {
  guard_word g{};
  std::memcpy(&g,
              arena.data() + p.layout.guards +
                  static_cast<std::size_t>(p.layout.extend.guard_base + k) * sizeof(guard_word),
              sizeof g);
  return g;
}

// `before` with the section's scratch and guard words as the launch left them (checked apart).
std::vector<unsigned char> with_scratch_and_guards(const plan& p,
                                                   const std::vector<unsigned char>& before,
                                                   const std::vector<unsigned char>& got) {
  std::vector<unsigned char> want = before;
  const plan_layout::extend_section& s = p.layout.extend;
  std::memcpy(want.data() + s.scratch, got.data() + s.scratch,
              static_cast<std::size_t>(s.scratch_words) * 8);
  const std::size_t g =
      p.layout.guards + static_cast<std::size_t>(s.guard_base) * sizeof(guard_word);
  std::memcpy(want.data() + g, got.data() + g, sizeof(guard_word) * extend_guard_count);
  return want;
}

// Exact capacities: no refused store. Accepted lengths of 0 are recorded by the select-index
// pass, which runs with the tokens layout only.
void expect_guards(const plan& p, const std::vector<unsigned char>& got, const extend_expect& e,
                   bool tokens = true) {
  for (int k = 0; k < 4; ++k) ASSERT_EQ(guard_at(p, got, k).violations, 0) << "guard " << k;
  const guard_word a = guard_at(p, got, 4);
  ASSERT_EQ(a.violations, tokens ? e.accept.count : 0);
  if (!tokens) return;
  if (e.accept.count > 0) {
    EXPECT_EQ(a.kind, static_cast<int>(violation_kind::accept_len));
    EXPECT_EQ(a.row, e.accept.row);
  }
}

class ExtendOps : public ExecutorTest {};

TEST_P(ExtendOps, StagedRoundsInTheArenaMatchTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int n = 0; n < property_cases(200); ++n) {
    const draft_config cfg = extend_config(rng);
    const plan p = make_plan(cfg);
    device_buffer arena(*ex, p.total_bytes);
    const draft_buffers b(p, arena.data());
    ex->fill_bytes(b.base(), arena_poison, b.bytes());
    const bool staged_accept = rng() % 2 == 0;  // else the engine's buffer, read in place
    // Two rounds into one arena: the second must leave nothing of the first (stale rows).
    for (int round = 0; round < 2; ++round) {
      const std::int32_t bucket = cfg.buckets[rng() % 3];
      const std::int32_t real = static_cast<std::int32_t>(rng() % (bucket + 1));  // 0: idle
      const extend_case c = plan_extend_case(p, bucket, real, rng);
      SCOPED_TRACE("case " + std::to_string(n) + " round " + std::to_string(round) + ": bucket " +
                   std::to_string(bucket) + " real " + std::to_string(real) + " W " +
                   std::to_string(cfg.verify_tokens) + " M " + std::to_string(cfg.max_context_len) +
                   " ps " + std::to_string(cfg.page_size) + " formats " + to_string(cfg.formats) +
                   (staged_accept ? " staged" : " engine's accept_len"));
      dvec<std::int32_t> rtt(*ex, c.req_to_token);
      stage(*ex, b, c, !staged_accept);
      if (HasFatalFailure()) return;
      dvec<std::int32_t> accept(*ex, c.accept_len);
      const std::vector<unsigned char> before = download(*ex, b);
      extend_inputs in;
      in.tables.req_to_token = rtt.data();
      in.tables.req_to_token_stride = c.width;
      if (!staged_accept) in.accept_len = accept.data();
      extend_metadata(*ex, b, bucket, in);
      ex->synchronize();
      const std::vector<unsigned char> got = download(*ex, b);
      const extend_expect e = extend_reference(c);
      expect_guards(p, got, e);
      if (HasFatalFailure()) return;
      std::vector<unsigned char> want = with_scratch_and_guards(p, before, got);
      const plan_layout::extend_section& s = p.layout.extend;
      for (int i = 0; i < extend_field_count; ++i) {
        if (s.field[i] != 0) put_field(want, s.field[i], i, c, e, s.page_capacity);
      }
      expect_same_arena(p, got, want);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(ExtendOps, TheEnginesBuffersAreWrittenInPlace) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr std::int32_t poison = -7;
  constexpr std::size_t slack = 5;
  for (int n = 0; n < property_cases(80); ++n) {
    const draft_config cfg = extend_config(rng);
    const plan p = make_plan(cfg);
    device_buffer arena(*ex, p.total_bytes);
    const draft_buffers b(p, arena.data());
    ex->fill_bytes(b.base(), arena_poison, b.bytes());
    const std::int32_t bucket = cfg.buckets[rng() % 3];
    const std::int32_t real = static_cast<std::int32_t>(rng() % (bucket + 1));
    extend_case c = plan_extend_case(p, bucket, real, rng);
    // Any non-empty subset of layouts, whatever the plan's formats; spare capacity sometimes.
    unsigned layouts = 0;
    while (layouts == 0) layouts = static_cast<unsigned>(rng() % 16);
    const std::int64_t stride = c.page_capacity + static_cast<std::int64_t>(rng() % 3);
    const std::int64_t prefix_cap = c.prefix_capacity + static_cast<std::int64_t>(rng() % 3);
    const std::int64_t full_cap = c.full_capacity + static_cast<std::int64_t>(rng() % 3);
    SCOPED_TRACE("case " + std::to_string(n) + ": layouts " + std::to_string(layouts));
    dvec<std::int32_t> rtt(*ex, c.req_to_token);
    stage(*ex, b, c);
    if (HasFatalFailure()) return;
    const std::vector<unsigned char> before = download(*ex, b);
    extend_params shape;  // the sizes of each field, from the kernels' own table
    shape.batch = bucket;
    shape.extend_tokens = c.window;
    shape.page_size = c.page_size;
    shape.max_seq_len = c.max_seq_len;
    shape.page_capacity = c.page_capacity;
    shape.prefix_kv_capacity = prefix_cap;
    shape.full_kv_capacity = full_cap;
    std::vector<dvec<std::int32_t>> bufs;
    bufs.reserve(extend_field_count);
    extend_tables o;
    for (int layout = 0; layout < extend_layout_count; ++layout) {
      if ((layouts >> layout & 1u) == 0) continue;
      for (int i = extend_layout_bounds[layout]; i < extend_layout_bounds[layout + 1]; ++i) {
        const extend_field_shape f = extend_shape_of(i, shape);
        const std::int64_t cells = f.table ? f.rows * stride : f.rows;
        bufs.emplace_back(*ex, static_cast<std::size_t>(cells) + slack, poison);
        set_extend_field(o, i, bufs.back().data());
      }
    }
    if ((layouts & 2u) != 0) o.page_stride = stride;
    if ((layouts & 4u) != 0) o.prefix_kv_capacity = prefix_cap;
    if ((layouts & 8u) != 0) o.full_kv_capacity = full_cap;
    extend_inputs in;
    in.tables.req_to_token = rtt.data();
    in.tables.req_to_token_stride = c.width;
    in.outputs = &o;
    extend_metadata(*ex, b, bucket, in);
    ex->synchronize();
    const std::vector<unsigned char> got = download(*ex, b);
    const extend_expect e = extend_reference(c);
    expect_guards(p, got, e, (layouts & 1u) != 0);
    // Each given buffer: the reference's cells, the rest (stride gaps, spare, slack) poisoned.
    std::size_t k = 0;
    for (int layout = 0; layout < extend_layout_count; ++layout) {
      if ((layouts >> layout & 1u) == 0) continue;
      for (int i = extend_layout_bounds[layout]; i < extend_layout_bounds[layout + 1]; ++i, ++k) {
        const std::vector<std::int32_t> cells = bufs[k].download();
        std::vector<unsigned char> want(cells.size() * 4);
        for (std::size_t q = 0; q < cells.size(); ++q) std::memcpy(&want[q * 4], &poison, 4);
        put_field(want, 0, i, c, e, stride);
        std::vector<unsigned char> have(cells.size() * 4);
        std::memcpy(have.data(), cells.data(), have.size());
        ASSERT_EQ(have, want) << extend_field_names[i];
      }
    }
    // The arena's section is not written: only the scratch and the section's guard words.
    expect_same_arena(p, got, with_scratch_and_guards(p, before, got));
    if (HasFatalFailure()) return;
  }
}

// Every refusal names its field, and nothing is written or enqueued.
TEST_P(ExtendOps, BadInputIsRefusedByNameWithNothingWritten) {
  std::mt19937_64 rng(7);
  draft_config cfg = extend_config(rng);
  cfg.formats = metadata_formats::both;
  cfg.max_context_len = 40;
  const plan p = make_plan(cfg);
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  ex->fill_bytes(b.base(), arena_poison, b.bytes());
  const extend_case c = plan_extend_case(p, 4, 3, rng);
  dvec<std::int32_t> rtt(*ex, c.req_to_token), one(*ex, std::vector<std::int32_t>(8, 1));
  const std::vector<unsigned char> before = download(*ex, b);
  auto refused = [&](const std::string& field, const std::string& words, auto&& call) {
    try {
      call();
      ADD_FAILURE() << field << ": accepted";
    } catch (const invalid_argument& e) {
      EXPECT_EQ(e.field(), field) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
    ex->synchronize();
    expect_same_arena(p, download(*ex, b), before);
  };
  extend_inputs in;
  in.tables.req_to_token = rtt.data();
  in.tables.req_to_token_stride = c.width;
  refused("bucket", "3 is not one of the planned buckets", [&] { extend_metadata(*ex, b, 3, in); });
  extend_inputs no_table = in;
  no_table.tables.req_to_token = nullptr;
  refused("req_to_token", "", [&] { extend_metadata(*ex, b, 4, no_table); });
  extend_inputs narrow = in;
  narrow.tables.req_to_token_stride = cfg.max_context_len - 1;
  refused("req_to_token_stride", "", [&] { extend_metadata(*ex, b, 4, narrow); });
  extend_inputs half = in;
  half.req_pool_index = one.data();
  refused("seq_len", "give both (the engine's) or neither",
          [&] { extend_metadata(*ex, b, 4, half); });
  // The engine's outputs: a partial layout, no layout, a short buffer, a narrow stride.
  dvec<std::int32_t> big(*ex, std::vector<std::int32_t>(1 << 16, -7));
  extend_tables o;
  o.position = big.data();
  o.out_cache_loc = big.data();
  extend_inputs eng = in;
  eng.outputs = &o;
  refused("outputs.select_index", "2 of its 3 output pointers set",
          [&] { extend_metadata(*ex, b, 4, eng); });
  extend_tables none;
  eng.outputs = &none;
  refused("outputs", "no layout given", [&] { extend_metadata(*ex, b, 4, eng); });
  extend_tables full;
  full.full_qo_indptr = full.full_kv_indptr = full.full_kv_indices = full.full_kv_last_page_len =
      big.data();
  full.full_kv_capacity = 4LL * (cfg.max_context_len + cfg.verify_tokens) - 1;
  eng.outputs = &full;
  refused("outputs.full_kv_indices",
          "below the " + std::to_string(4LL * (cfg.max_context_len + cfg.verify_tokens)) +
              " bucket 4 needs",
          [&] { extend_metadata(*ex, b, 4, eng); });
  extend_tables fa3;
  fa3.page_table = fa3.cache_seqlen = fa3.cu_seqlens_q = fa3.cu_seqlens_k = fa3.max_seqlen_k =
      big.data();
  fa3.page_stride = p.layout.extend.page_capacity - 1;
  eng.outputs = &fa3;
  refused("outputs.page_stride", "size the page table's rows so",
          [&] { extend_metadata(*ex, b, 4, eng); });
  // Staging the accepted lengths: outside [0, W], too many, no section.
  refused("accept_len[1]", std::to_string(cfg.verify_tokens + 1), [&] {
    stage_accept_len(*ex, b, 4, {1, cfg.verify_tokens + 1});
  });
  refused("accept_len[0]", "-1", [&] { stage_accept_len(*ex, b, 4, {-1}); });
  refused("accept_len", "5 lengths for bucket 4", [&] {
    stage_accept_len(*ex, b, 4, {1, 1, 1, 1, 1});
  });
  draft_config off = cfg;
  off.draft_extend = false;
  const plan q = make_plan(off);
  device_buffer arena_q(*ex, q.total_bytes);
  const draft_buffers bq(q, arena_q.data());
  for (auto* call : {+[](executor&x, const draft_buffers&d, const extend_inputs&i) {
         extend_metadata(x, d, 4, i);
       }}) {
    try {
      call(*ex, bq, in);
      ADD_FAILURE() << "a plan without the section ran the op";
    } catch (const invalid_argument& e) {
      EXPECT_EQ(e.field(), "draft_extend");
    }
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(ExtendOps);

}  // namespace
}  // namespace specgraph::testing
