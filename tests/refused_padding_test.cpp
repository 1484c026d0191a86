// A request refused at the prefix (a pool row or seq_len out of range, or a prefix page whose
// slot is) is a padding request in every table of its round (docs/metadata.md section 4): its
// prefix row, its expand rows at every step (their slots not read, nothing counted for them,
// never layout-checked) and its CSR rows (a padded request's: pool row 0, seq_len 1). Staged
// from device memory, replayed in every mode in checked mode with FA3 and CSR tables, and
// compared with the independent round model (testing/reference_round.hpp) and the independent
// CSR reference (tests/kv_indices_reference.hpp), from a poisoned arena.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/kv_indices.hpp"
#include "specgraph/runtime.hpp"
#include "tests/engine_inputs_support.hpp"
#include "tests/kv_indices_reference.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

class RefusedPadding : public ExecutorTest {};

// The round in mode `m`; checked mode raises after a round with refused input, which is
// expected here (the guard words are inspected afterwards).
void run_round_checked(draft_runtime& rt, mode m) {
  const std::int32_t steps = rt.plan().config.num_steps;
  const auto quiet = [](auto&& f) {
    try {
      f();
    } catch (const guard_violation&) {
    }
  };
  switch (m) {
    case mode::replay_steps:
      for (std::int32_t s = 0; s < steps; ++s) quiet([&] { rt.replay(s); });
      break;
    case mode::eager:
      for (std::int32_t s = 0; s < steps; ++s) quiet([&] { rt.run_eager(s); });
      break;
    case mode::round_graph:
    case mode::device_steps: quiet([&] { rt.run_round(steps); }); break;
    case mode::device_depth: quiet([&] { rt.run_round_on_device(); }); break;
  }
}

// Step s's CSR indices in the arena against the reference over the bucket's inputs (padded
// requests: pool row 0, seq_len 1).
void expect_csr_step(sim_engine& eng, const std::vector<std::int32_t>& req_to_token,
                     const model_round& m, std::int32_t s) {
  const plan& p = eng.rt().plan();
  const draft_config& c = p.config;
  kv_case k;
  k.page_size = c.page_size;
  k.topk = c.topk;
  k.num_steps = c.num_steps;
  k.slot_stride = c.slot_stride;
  k.max_seq_len = c.max_context_len;
  k.pool_rows = c.pool_rows;
  k.width = c.max_context_len;
  k.req_to_token = req_to_token;
  k.req_pool_index = m.req_pool_index;
  k.seq_len = m.seq_len;
  k.slot_limit = c.kv_slots;
  k.first_step = s;
  k.capacity = 0x7fffffff;  // the plan's capacities hold the bucket (no capacity record)
  const kv_expected want = kv_reference(k);
  const auto rows = static_cast<std::size_t>(m.bucket * c.topk);
  const std::int32_t* indptr = eng.rt().buffers().csr_kv_indptr() + s * (p.max_rows() + 1);
  EXPECT_EQ(eng.read(indptr, rows + 1), want.indptr[0]) << "kv_indptr, step " << s;
  const auto* indices = static_cast<const std::int32_t*>(eng.rt().buffers().csr_kv_indices(s));
  const std::vector<std::int32_t> got = eng.read(indices, want.ids[0].size());
  EXPECT_EQ(std::vector<std::int64_t>(got.begin(), got.end()), want.ids[0])
      << "kv_indices, step " << s;
  // Bad input is recorded by the launch that computed the step (each request once).
  const guard_word g = eng.rt().read_guards()[static_cast<std::size_t>(p.layout.guard_csr(s))];
  EXPECT_EQ(g.violations, static_cast<std::int32_t>(want.records[0].size())) << describe(g);
}

TEST_P(RefusedPadding, ARequestRefusedAtThePrefixIsPaddingInEveryTableInEveryMode) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const mode m : all_modes) {
    for (const std::int32_t ps : {1, 4}) {
      SCOPED_TRACE(std::string(name_of(m)) + ", page_size " + std::to_string(ps));
      draft_config c = config_for(m, ps, /*csr=*/true);
      c.checked = true;  // the layout check runs on real rows
      sim_engine eng(*ex, c, rng);
      eng.rt().capture();
      model_config mc = eng.model();
      mc.pool_rows = c.pool_rows;
      mc.kv_slots = c.kv_slots;
      const std::int32_t batch = 8, stride = c.num_steps;
      host_round r = eng.random_round(rng, batch);
      // Request 5 holds at least one whole page (its lengths may change: it is refused, never
      // layout-checked; the others keep the lengths their slots were laid out for).
      r.seq_len[5] = ps + r.seq_len[5] % 16;
      r.req_pool_index[1] = c.pool_rows + 2;  // pool row out of range
      r.seq_len[3] = c.max_context_len + 1;   // seq_len out of range
      const std::int32_t row5 = r.req_pool_index[5];
      std::vector<std::int32_t> rtt = eng.req_to_token();
      const auto slot5 = static_cast<std::size_t>(row5) * c.max_context_len;
      rtt[slot5] = -1;  // the slot of request 5's first prefix page
      // Slots of the refused requests that would be refused (and counted) were they read.
      r.out_cache_loc[static_cast<std::size_t>((1 * c.topk + 0) * stride)] = c.kv_slots;
      r.out_cache_loc[static_cast<std::size_t>((3 * c.topk + 1) * stride + 1)] = -7;
      eng.poison();
      ex->copy_to_device(const_cast<std::int32_t*>(eng.tables().req_to_token) + slot5, &rtt[slot5],
                         sizeof(std::int32_t));
      dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
      dvec<std::int64_t> slots(*ex, r.out_cache_loc);
      device_round_inputs in{batch, pool.data(), seq.data(), slots.data()};
      in.bucket = eng.rt().plan().max_bucket();  // padded requests after the refused ones
      eng.rt().stage_device(in);
      run_round_checked(eng.rt(), m);
      const model_round want = model_draft_round(mc, rtt, batch, r.req_pool_index, r.seq_len,
                                                 r.out_cache_loc, c.num_steps, in.bucket);
      ASSERT_EQ(want.prefix_violations, 3);
      for (const std::int32_t v : want.expand_violations) ASSERT_EQ(v, 0);
      // Prefix and expand rows (the refused requests' too), every step's guard words: no
      // expand violation of any kind (bad input or layout) for the refused requests.
      expect_round(eng, want);
      for (std::int32_t s = 0; s < c.num_steps; ++s) expect_csr_step(eng, rtt, want, s);
      eng.restore_req_to_token();
      if (HasFailure()) return;
    }
  }
}

// launch_draft_kv_indices given the round's prefix refusal flags: a flagged request whose own
// inputs are fine is refused by the CSR launch too (docs/csr.md section 4) and gets a padded
// request's rows, as the reference writes a refused request's; the launch records nothing for
// it (the prefix did).
TEST_P(RefusedPadding, CsrRowsOfARequestThePrefixRefusedAreAPaddedRequests) {
  std::mt19937_64 rng(test_seed());
  kv_case k;
  k.page_size = 4;
  k.topk = 2;
  k.num_steps = 2;
  k.max_seq_len = 16;
  k.pool_rows = 3;
  k.width = 40;
  k.slot_limit = 1 << 12;
  k.step_count = 2;
  k.capacity = 200;
  k.indices_stride = 200;
  k.indptr_stride = 7;
  for (std::int64_t i = 0; i < k.pool_rows * k.width; ++i) {
    k.req_to_token.push_back(static_cast<std::int32_t>(1 + rng() % 4095));
  }
  k.req_pool_index = {1, 2, 1};
  k.seq_len = {9, 5, 12};
  dvec<std::int32_t> rtt(*ex, k.req_to_token), pool(*ex, k.req_pool_index), seq(*ex, k.seq_len);
  dvec<std::int32_t> indptr(*ex, 14, -3), indices(*ex, 400, -3), refused(*ex, {0, 1, 0});
  dvec<guard_word> guards(*ex, 2, guard_word{});
  dvec<std::int32_t> scratch(*ex, static_cast<std::size_t>(kv_indices_scratch_ints(3)), 99);
  kv_indices_params p = kv_params_of(k, 3);
  p.req_to_token = rtt.data();
  p.req_pool_index = pool.data();
  p.seq_len = seq.data();
  p.kv_indptr = indptr.data();
  p.kv_indices_i32 = indices.data();
  p.guard = guards.data();
  p.scratch = scratch.data();
  p.refused = refused.data();
  launch_draft_kv_indices(*ex, p);
  kv_case want_case = k;
  want_case.req_pool_index[1] = -1;  // a request the reference refuses: its rows padded
  const kv_expected want = kv_reference(want_case);
  const std::vector<std::int32_t> got_indptr = indptr.download(), got = indices.download();
  for (std::int32_t s = 0; s < 2; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    EXPECT_EQ(std::vector<std::int32_t>(got_indptr.begin() + s * 7, got_indptr.begin() + s * 7 + 7),
              want.indptr[static_cast<std::size_t>(s)]);
    const std::vector<std::int64_t>& ids = want.ids[static_cast<std::size_t>(s)];
    EXPECT_EQ(
        std::vector<std::int64_t>(got.begin() + s * 200,
                                  got.begin() + s * 200 + static_cast<std::ptrdiff_t>(ids.size())),
        ids);
    EXPECT_EQ(guards.download()[static_cast<std::size_t>(s)].violations, 0);
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RefusedPadding);

}  // namespace
}  // namespace specgraph::testing
