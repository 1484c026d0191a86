// draft_runtime's draft-extend graphs (runtime.hpp, runtime/runtime_extend.cpp): one graph per
// bucket (extend_metadata + the engine's extend forward), replayed after each verify round for
// fresh random rounds (idle ranks, padded buckets, accepted lengths 0..W) staged with
// stage_verify and stage_extend, equals the eager run and the independent reference
// (tests/extend_reference.hpp) over the poisoned arena; the forward runs after the metadata in
// the graph; the ops out of order and bad accepted lengths are refused with nothing written.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/runtime.hpp"
#include "tests/extend_reference.hpp"
#include "tests/test_support.hpp"
#include "tests/verify_arena_support.hpp"
#include "tests/verify_reference.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t D = 5, M = 30;

draft_config runtime_extend_config(metadata_formats formats) {
  draft_config c;
  c.max_batch = 6;
  c.buckets = {2, 4, 6};
  c.topk = 2;
  c.num_steps = 2;
  c.page_size = 4;
  c.max_context_len = M;
  c.pool_rows = 9;
  c.kv_slots = 1 << 20;
  c.formats = formats;
  c.verify_tokens = D;
  c.draft_extend = true;
  return c;
}

std::vector<unsigned char> download(executor& ex, const draft_buffers& b) {
  std::vector<unsigned char> out(b.bytes());
  ex.copy_to_host(out.data(), b.base(), out.size());
  return out;
}

verify_round_inputs inputs_of(const verify_case& c) {
  verify_round_inputs in;
  in.batch = c.real_batch;
  in.req_pool_index = c.req_pool_index.data();
  in.seq_len = c.seq_len.data();
  in.custom_mask = c.mask.data();
  in.mask_cells = static_cast<std::int64_t>(c.mask.size());
  return in;
}

// The verify round's requests as a draft-extend case of window D.
extend_case extend_of(const plan& p, const verify_case& v, std::int32_t bucket,
                      const std::vector<std::int32_t>& accept) {
  extend_case e;
  e.page_size = p.config.page_size;
  e.window = D;
  e.bucket = bucket;
  e.real_batch = v.real_batch;
  e.max_seq_len = M;
  e.pool_rows = p.config.pool_rows;
  e.width = v.width;
  e.req_to_token = v.req_to_token;
  e.seq_len = v.seq_len;
  e.req_pool_index = v.req_pool_index;
  e.accept_len = accept;
  e.accept_len.resize(static_cast<std::size_t>(bucket), 1);
  const extend_tables t = extend_exact_tables(bucket, M, e.page_size, D);
  e.page_capacity = t.page_capacity;
  e.prefix_capacity = t.prefix_kv_capacity;
  e.full_capacity = t.full_kv_capacity;
  return e;
}

std::vector<std::int32_t> cells_at(const std::vector<unsigned char>& arena, std::size_t offset,
                                   std::size_t n) {
  std::vector<std::int32_t> out(n);
  std::memcpy(out.data(), arena.data() + offset, n * 4);
  return out;
}

class RuntimeExtend : public ExecutorTest {};

TEST_P(RuntimeExtend, GraphsFollowEveryVerifyRoundAndEqualEagerAndTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const metadata_formats formats :
       {metadata_formats::fa3, metadata_formats::csr, metadata_formats::both}) {
    SCOPED_TRACE(to_string(formats));
    const draft_config cfg = runtime_extend_config(formats);
    const std::int64_t W = M + D;
    dvec<std::int32_t> rtt(*ex, static_cast<std::size_t>(cfg.pool_rows * W), 0);
    draft_runtime rt(*ex, cfg, {rtt.data(), W});
    const plan& p = rt.plan();
    const plan_layout::extend_section& s = p.layout.extend;
    // The forward copies the select index and cache_seqlen (fa3) or full kv_indptr (csr) it
    // sees: in the graph it must run after the metadata of the same replay.
    const std::size_t B = static_cast<std::size_t>(p.max_bucket());
    dvec<std::int32_t> seen(*ex, 2 * B + 1, 0);
    std::vector<std::int32_t> forwarded;
    rt.set_verify_forward([](const verify_view&) {});
    rt.set_extend_forward([&](const extend_view& v) {
      forwarded.push_back(v.bucket);
      const auto n = static_cast<std::size_t>(v.bucket);
      v.ex->copy_on_device(seen.data(), v.select_index, n * 4);
      if (v.cache_seqlen != nullptr) {
        v.ex->copy_on_device(seen.data() + B, v.cache_seqlen, n * 4);
      } else {
        v.ex->copy_on_device(seen.data() + B, v.full_kv_indptr, (n + 1) * 4);
      }
    });
    const capture_report report = rt.capture();
    EXPECT_EQ(report.extend_graphs, 3);
    EXPECT_EQ(report.verify_graphs, 3);
    EXPECT_EQ(report.graphs, 3 * cfg.num_steps + 3 + 3);
    EXPECT_EQ(forwarded, (std::vector<std::int32_t>{6, 4, 2}));  // largest first
    for (std::size_t i = 0; i < report.per_graph.size(); ++i) {
      EXPECT_EQ(report.per_graph[i].step == extend_graph_step, i >= 9u) << i;
    }
    {  // one DOT file per extend graph
      const auto dir =
          std::filesystem::temp_directory_path() / ("specgraph_extend_dot_" + std::to_string(seed));
      std::filesystem::create_directories(dir);
      rt.write_dot(dir.string());
      for (const std::int32_t bucket : cfg.buckets) {
        EXPECT_TRUE(
            std::filesystem::exists(dir / ("bucket" + std::to_string(bucket) + "_extend.dot")));
      }
      std::filesystem::remove_all(dir);
    }
    for (int n = 0; n < property_cases(60); ++n) {
      const std::int32_t real = static_cast<std::int32_t>(rng() % 7);  // 0: an idle rank
      const std::int32_t bucket = p.round_bucket(real, 0);
      const verify_case v = plan_verify_case(p, bucket, real, rng);
      std::vector<std::int32_t> accept(static_cast<std::size_t>(real));
      for (auto& a : accept) a = static_cast<std::int32_t>(rng() % (D + 1));  // 0 included
      SCOPED_TRACE("round " + std::to_string(n) + ": real " + std::to_string(real) + " bucket " +
                   std::to_string(bucket));
      ex->copy_to_device(rtt.data(), v.req_to_token.data(), v.req_to_token.size() * 4);
      ex->fill_bytes(rt.buffers().base(), arena_poison, p.total_bytes);
      rt.stage_verify(inputs_of(v));
      rt.replay_verify();
      rt.stage_extend(accept);
      EXPECT_EQ(rt.staged_extend_bucket(), bucket);
      const std::vector<unsigned char> before = download(*ex, rt.buffers());
      const extend_expect e = extend_reference(extend_of(p, v, bucket, accept));
      for (int eager = 0; eager < 2; ++eager) {
        SCOPED_TRACE(eager ? "eager" : "graph");
        ex->copy_to_device(rt.buffers().base(), before.data(), before.size());
        const std::vector<std::int32_t> zeros(2 * B + 1, 0);
        ex->copy_to_device(seen.data(), zeros.data(), zeros.size() * 4);
        if (eager) {
          rt.run_extend_eager();
        } else {
          rt.replay_extend();
        }
        ex->synchronize();
        const std::vector<unsigned char> got = download(*ex, rt.buffers());
        const auto nb = static_cast<std::size_t>(bucket);
        const std::vector<std::int32_t> select = cells_at(got, s.field[2], nb);
        const std::vector<std::int32_t> position = cells_at(got, s.field[0], nb * D);
        for (std::size_t r = 0; r < nb; ++r) ASSERT_EQ(select[r], e.select_index[r]) << r;
        for (std::size_t t = 0; t < nb * D; ++t) ASSERT_EQ(position[t], e.position[t]) << t;
        const std::vector<std::int32_t> f = seen.download();
        for (std::size_t r = 0; r < nb; ++r) ASSERT_EQ(f[r], e.select_index[r]) << r;
        if (s.fa3) {
          const std::vector<std::int32_t> seq = cells_at(got, s.field[4], nb);
          for (std::size_t r = 0; r < nb; ++r) {
            ASSERT_EQ(seq[r], e.cache_seqlen[r]) << r;
            ASSERT_EQ(f[B + r], e.cache_seqlen[r]) << r;
            const std::vector<std::int32_t> row =
                cells_at(got, s.field[3] + r * static_cast<std::size_t>(s.page_capacity) * 4,
                         static_cast<std::size_t>(s.page_capacity));
            for (std::size_t col = 0; col < row.size(); ++col) {
              ASSERT_EQ(row[col], e.page_rows[r][col]) << r << "," << col;
            }
          }
        } else {
          const std::vector<std::int32_t> indptr = cells_at(got, s.field[12], nb + 1);
          const std::vector<std::int32_t> idx = cells_at(got, s.field[13], e.full_indices.size());
          for (std::size_t r = 0; r <= nb; ++r) {
            ASSERT_EQ(indptr[r], e.full_indptr[r]) << r;
            ASSERT_EQ(f[B + r], e.full_indptr[r]) << r;
          }
          for (std::size_t k = 0; k < idx.size(); ++k) ASSERT_EQ(idx[k], e.full_indices[k]) << k;
        }
        guard_word g{};
        std::memcpy(&g,
                    got.data() + p.layout.guards +
                        static_cast<std::size_t>(s.guard_base + 4) * sizeof(guard_word),
                    sizeof g);
        ASSERT_EQ(g.violations, e.accept.count);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(RuntimeExtend, OpsOutOfOrderAndBadLengthsAreRefusedWithNothingWritten) {
  std::mt19937_64 rng(5);
  const draft_config cfg = runtime_extend_config(metadata_formats::both);
  const std::int64_t W = M + D;
  dvec<std::int32_t> rtt(*ex, static_cast<std::size_t>(cfg.pool_rows * W), 0);
  draft_runtime rt(*ex, cfg, {rtt.data(), W});
  const plan& p = rt.plan();
  EXPECT_THROW(rt.replay_extend(), error);       // nothing captured
  EXPECT_THROW(rt.run_extend_eager(), error);    // nothing staged
  EXPECT_THROW(rt.stage_extend({1, 2}), error);  // no verify round staged
  const verify_case v = plan_verify_case(p, 4, 3, rng);
  rt.stage_verify(inputs_of(v));
  ex->synchronize();
  const std::vector<unsigned char> before = download(*ex, rt.buffers());
  auto refused = [&](const std::string& field, const std::vector<std::int32_t>& accept) {
    try {
      rt.stage_extend(accept);
      ADD_FAILURE() << field << ": accepted";
    } catch (const invalid_argument& e) {
      EXPECT_EQ(e.field(), field) << e.what();
    }
    ex->synchronize();
    expect_same_arena(p, download(*ex, rt.buffers()), before);
  };
  refused("accept_len", {1, 2});  // the verify round has 3 requests
  refused("accept_len", {1, 2, 3, 4});
  refused("accept_len[2]", {1, 2, D + 1});  // above W
  refused("accept_len[0]", {-1, 2, 3});
  EXPECT_EQ(rt.staged_extend_bucket(), 0);
  rt.stage_extend({0, D, 2});
  EXPECT_EQ(rt.staged_extend_bucket(), 4);
  // A new round staged: the extend round is gone (its requests changed).
  rt.stage_verify(inputs_of(v));
  EXPECT_EQ(rt.staged_extend_bucket(), 0);
  EXPECT_THROW(rt.run_extend_eager(), error);
  // No section: the extend calls name the field.
  draft_config off = cfg;
  off.draft_extend = false;
  draft_runtime rt2(*ex, off, {rtt.data(), W});
  try {
    rt2.set_extend_forward([](const extend_view&) {});
    ADD_FAILURE() << "a plan without the section took an extend forward";
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "draft_extend");
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RuntimeExtend);

}  // namespace
}  // namespace specgraph::testing
