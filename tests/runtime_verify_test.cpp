// draft_runtime's verify graphs (runtime.hpp, runtime/runtime_verify.cpp): one graph per bucket
// (verify_metadata + the engine's verify forward), replayed for fresh random rounds staged with
// stage_verify (and after whole draft rounds), equals the eager run and the independent reference
// (tests/verify_reference.hpp) over the poisoned arena; the forward runs after the metadata in
// the graph; stage_verify refuses bad inputs by name with nothing written.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/runtime.hpp"
#include "tests/test_support.hpp"
#include "tests/verify_arena_support.hpp"
#include "tests/verify_reference.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t D = 5, M = 30;

draft_config runtime_verify_config() {
  draft_config c;
  c.max_batch = 6;
  c.buckets = {2, 4, 6};
  c.topk = 2;
  c.num_steps = 2;
  c.page_size = 4;
  c.max_context_len = M;
  c.pool_rows = 9;
  c.kv_slots = 1 << 20;
  c.formats = metadata_formats::both;
  c.verify_tokens = D;
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

class RuntimeVerify : public ExecutorTest {};

TEST_P(RuntimeVerify, GraphsFollowEveryRoundAndEqualEagerAndTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const draft_config cfg = runtime_verify_config();
  const std::int64_t W = M + D;
  dvec<std::int32_t> rtt(*ex, static_cast<std::size_t>(cfg.pool_rows * W), 0);
  draft_runtime rt(*ex, cfg, {rtt.data(), W});
  const plan& p = rt.plan();
  // The forward copies the kv_indptr and the expand cache_seqlen it sees into its own buffer:
  // in the graph it must run after the metadata of the same replay.
  const std::size_t seen_cells = (p.max_bucket() + 1) + p.max_bucket() * D;
  dvec<std::int32_t> seen(*ex, seen_cells, 0);
  std::vector<std::int32_t> forwarded;
  rt.set_verify_forward([&](const verify_view& v) {
    forwarded.push_back(v.bucket);
    v.ex->copy_on_device(seen.data(), v.kv_indptr, (v.bucket + 1) * 4);
    v.ex->copy_on_device(seen.data() + p.max_bucket() + 1, v.expand_cache_seqlen,
                         static_cast<std::size_t>(v.bucket) * D * 4);
  });
  const capture_report report = rt.capture();
  EXPECT_EQ(report.verify_graphs, 3);
  EXPECT_EQ(report.graphs, 3 * cfg.num_steps + 3);
  EXPECT_EQ(forwarded, (std::vector<std::int32_t>{6, 4, 2}));  // largest first
  for (std::size_t i = 0; i < report.per_graph.size(); ++i) {
    EXPECT_EQ(report.per_graph[i].step == verify_graph_step, i >= 6u) << i;
  }
  {  // one DOT file per verify graph, beside the draft ones
    const auto dir =
        std::filesystem::temp_directory_path() / ("specgraph_verify_dot_" + std::to_string(seed));
    std::filesystem::create_directories(dir);
    rt.write_dot(dir.string());
    for (const std::int32_t bucket : cfg.buckets) {
      const auto path = dir / ("bucket" + std::to_string(bucket) + "_verify.dot");
      std::ifstream in(path);
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      EXPECT_NE(text.find("digraph"), std::string::npos) << path;
      if (GetParam() == "host") {
        EXPECT_NE(text.find("verify"), std::string::npos) << path;
      }
    }
    std::filesystem::remove_all(dir);
  }
  for (int n = 0; n < property_cases(120); ++n) {
    const std::int32_t real = static_cast<std::int32_t>(rng() % 7);  // 0: an idle rank
    const std::int32_t bucket = p.round_bucket(real, 0);
    verify_case c = plan_verify_case(p, bucket, real, rng);
    const bool whole_round = n % 3 == 0;
    SCOPED_TRACE("round " + std::to_string(n) + ": real " + std::to_string(real) + " bucket " +
                 std::to_string(bucket) + (whole_round ? " after a draft round" : ""));
    ex->copy_to_device(rtt.data(), c.req_to_token.data(), c.req_to_token.size() * 4);
    ex->fill_bytes(rt.buffers().base(), arena_poison, p.total_bytes);
    if (whole_round) {  // the draft steps of the same requests first, then the verify
      std::vector<std::int64_t> slots(static_cast<std::size_t>(real) * cfg.topk * cfg.num_steps +
                                      1);
      for (auto& x : slots) x = static_cast<std::int64_t>(rng() % cfg.kv_slots);
      round_inputs draft;
      draft.batch = real;
      draft.req_pool_index = c.req_pool_index.data();
      draft.seq_len = c.seq_len.data();
      draft.out_cache_loc = slots.data();
      rt.stage(draft);
      rt.run_round(cfg.num_steps);
    }
    rt.stage_verify(inputs_of(c));
    EXPECT_EQ(rt.staged_verify_bucket(), bucket);
    const std::vector<unsigned char> before = download(*ex, rt.buffers());
    const verify_expected w = verify_reference(c);
    for (int eager = 0; eager < 2; ++eager) {
      SCOPED_TRACE(eager ? "eager" : "graph");
      ex->copy_to_device(rt.buffers().base(), before.data(), before.size());
      const std::vector<std::int32_t> zeros(seen_cells, 0);
      ex->copy_to_device(seen.data(), zeros.data(), zeros.size() * 4);
      if (eager) {
        rt.run_verify_eager();
      } else {
        rt.replay_verify();
      }
      ex->synchronize();
      const std::vector<unsigned char> got = download(*ex, rt.buffers());
      expect_verify_guards(p, got, w);
      expect_same_arena(p, got, expected_arena(p, c, w, before, got));
      const std::vector<std::int32_t> f = seen.download();
      for (std::int32_t r = 0; r <= bucket; ++r) ASSERT_EQ(f[r], w.kv_indptr[r]) << r;
      for (std::int32_t e = 0; e < bucket * D; ++e) {
        ASSERT_EQ(f[p.max_bucket() + 1 + e], w.expand_cache_seqlen[e]) << e;
      }
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(RuntimeVerify, StageVerifyRefusesBadInputsByNameWithNothingWritten) {
  std::mt19937_64 rng(11);
  const draft_config cfg = runtime_verify_config();
  const std::int64_t W = M + D;
  dvec<std::int32_t> rtt(*ex, static_cast<std::size_t>(cfg.pool_rows * W), 0);
  draft_runtime rt(*ex, cfg, {rtt.data(), W});
  const plan& p = rt.plan();
  EXPECT_THROW(rt.replay_verify(), error);  // nothing captured, nothing staged
  verify_case c = plan_verify_case(p, 4, 3, rng);
  c.seq_len[0] = 7;
  c.seq_len[1] = 3;
  c.seq_len[2] = 12;
  c.mask.assign(static_cast<std::size_t>(D * (7 + D) + D * (3 + D) + D * (12 + D)), 1);
  ex->fill_bytes(rt.buffers().base(), arena_poison, p.total_bytes);
  ex->fill_bytes(const_cast<std::uint8_t*>(rt.verify_mask()), 0x5a,
                 static_cast<std::size_t>(rt.verify_mask_capacity()));
  const std::vector<unsigned char> before = download(*ex, rt.buffers());
  std::vector<std::uint8_t> mask_before(static_cast<std::size_t>(rt.verify_mask_capacity()));
  ex->copy_to_host(mask_before.data(), rt.verify_mask(), mask_before.size());
  struct bad {
    const char* field;
    const char* message;
    verify_round_inputs in;
  };
  std::vector<bad> cases;
  // The engine passes lengths that already count the D verify tokens: named, with the fix.
  std::vector<std::int32_t> doubled = {7 + D, 3 + D, 12 + D};
  verify_round_inputs in = inputs_of(c);
  in.seq_len = doubled.data();
  cases.push_back({"custom_mask",
                   "seq_len seems to include the D verify tokens already (the mask is D * D * "
                   "batch = 75 cells shorter); pass seq_len without the verify tokens",
                   in});
  in = inputs_of(c);
  in.mask_cells -= 1;
  cases.push_back({"custom_mask", "the mask's length must equal it", in});
  std::vector<std::int32_t> long_seq = {7, M + 1, 12};
  in = inputs_of(c);
  in.seq_len = long_seq.data();
  cases.push_back({"seq_len[1]", "31 is outside [1, max_context_len 30]", in});
  std::vector<std::int64_t> pool64 = {1, 2, 9};
  in = inputs_of(c);
  in.req_pool_index = pool64.data();
  cases.push_back({"req_pool_index[2]", "9 is outside [0, pool_rows 9)", in});
  in = inputs_of(c);
  in.batch = 7;
  cases.push_back({"batch", "7 exceeds max_batch 6", in});
  in = inputs_of(c);
  in.bucket = 3;
  cases.push_back({"bucket", "3 is not a planned bucket", in});
  in = inputs_of(c);
  in.custom_mask = nullptr;
  cases.push_back({"custom_mask", "null pointer", in});
  for (const bad& x : cases) {
    SCOPED_TRACE(x.field);
    try {
      rt.stage_verify(x.in);
      ADD_FAILURE() << "accepted";
    } catch (const invalid_argument& e) {
      EXPECT_EQ(e.field(), x.field) << e.what();
      EXPECT_NE(std::string(e.what()).find(x.message), std::string::npos) << e.what();
    }
    ex->synchronize();
    expect_same_arena(p, download(*ex, rt.buffers()), before);
    std::vector<std::uint8_t> mask_after(mask_before.size());
    ex->copy_to_host(mask_after.data(), rt.verify_mask(), mask_after.size());
    EXPECT_EQ(mask_after, mask_before);
  }
  // The good inputs are accepted; a draft stage() afterwards needs stage_verify again.
  rt.set_verify_forward([](const verify_view&) {});
  (void)rt.capture();
  rt.stage_verify(inputs_of(c));
  rt.replay_verify();
  std::vector<std::int64_t> slots(3 * cfg.topk * cfg.num_steps, 0);
  round_inputs draft;
  draft.batch = 3;
  draft.req_pool_index = c.req_pool_index.data();
  draft.seq_len = c.seq_len.data();
  draft.out_cache_loc = slots.data();
  rt.stage(draft);
  EXPECT_THROW(rt.replay_verify(), error);
}

TEST_P(RuntimeVerify, WithoutAVerifyForwardOrSectionTheDraftGraphsAreUnchanged) {
  draft_config cfg = runtime_verify_config();
  const std::int64_t W = M + D;
  dvec<std::int32_t> rtt(*ex, static_cast<std::size_t>(cfg.pool_rows * W), 0);
  draft_runtime with(*ex, cfg, {rtt.data(), W});
  const capture_report a = with.capture();  // a verify section, no verify forward
  EXPECT_EQ(a.verify_graphs, 0);
  EXPECT_EQ(a.graphs, 3 * cfg.num_steps);
  EXPECT_THROW(with.replay_verify(), error);
  cfg.verify_tokens = 0;
  draft_runtime without(*ex, cfg, {rtt.data(), W});
  EXPECT_EQ(without.verify_mask_capacity(), 0);
  try {
    without.set_verify_forward([](const verify_view&) {});
    ADD_FAILURE() << "a verify forward accepted without a verify section";
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "verify_tokens");
  }
  EXPECT_EQ(without.capture().graphs, 3 * cfg.num_steps);
}

// Checked mode: a slot the kernels refuse (stage_verify checks pool rows and lengths on the host;
// the slots live in req_to_token, read on the device) raises guard_violation from
// replay_verify, naming the verify site, the bucket and the request.
TEST_P(RuntimeVerify, CheckedModeNamesABadSlotAfterTheReplay) {
  std::mt19937_64 rng(3);
  draft_config cfg = runtime_verify_config();
  cfg.checked = true;
  const std::int64_t W = M + D;
  dvec<std::int32_t> rtt(*ex, static_cast<std::size_t>(cfg.pool_rows * W), 0);
  draft_runtime rt(*ex, cfg, {rtt.data(), W});
  rt.set_verify_forward([](const verify_view&) {});
  (void)rt.capture();
  verify_case c = plan_verify_case(rt.plan(), 4, 3, rng);
  ex->copy_to_device(rtt.data(), c.req_to_token.data(), c.req_to_token.size() * 4);
  rt.stage_verify(inputs_of(c));
  rt.replay_verify();  // clean
  // Request 1's last verify token on a slot past the KV pool.
  std::vector<std::int32_t> bad = c.req_to_token;
  bad[static_cast<std::size_t>(c.req_pool_index[1] * W + c.seq_len[1] + D - 1)] =
      static_cast<std::int32_t>(cfg.kv_slots);
  ex->copy_to_device(rtt.data(), bad.data(), bad.size() * 4);
  rt.stage_verify(inputs_of(c));
  try {
    rt.replay_verify();
    ADD_FAILURE() << "a slot past kv_slots passed checked mode";
  } catch (const guard_violation& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("verify: verify (input, prefix.page_table) (all steps, bucket 4, row 1)"),
              std::string::npos)
        << what;
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RuntimeVerify);

}  // namespace
}  // namespace specgraph::testing
