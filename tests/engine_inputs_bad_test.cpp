// Inputs read in place (engine_inputs.hpp): bad values in the engine's own tensors (an int64
// pool row or seq_len that does not fit int32, a pool row, seq_len or slot out of range) refuse
// their rows, which are written as padding rows, counted and named in the guard words (kernel,
// row, column, limit and the value as the engine holds it), in every replay mode; the rows past
// the bucket keep their poison (nothing written out of bounds; the ASan build checks the
// reads). And the host checks of bind_inputs / begin_round, by name.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/engine_inputs.hpp"
#include "specgraph/runtime.hpp"
#include "tests/engine_inputs_support.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int64_t pool_overflow = (std::int64_t{1} << 32) + 3;  // row 0 if narrowed
constexpr std::int64_t seq_overflow = std::int64_t{1} << 40;         // seq_len 0 if narrowed

class EngineInputsBad : public ExecutorTest {};

TEST_P(EngineInputsBad, BadValuesRefuseTheirRowsByNameInEveryMode) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const mode m : all_modes) {
    SCOPED_TRACE(name_of(m));
    const draft_config c = config_for(m, 4, /*csr=*/true);
    input_layout l = random_layout(rng, c.num_steps);
    l.pool64 = l.seq64 = l.slots64 = true;  // values beyond int32 need int64 tensors
    sim_engine eng(*ex, c, rng);
    engine_tensors tensors(*ex, l, eng.rt().plan().max_bucket(), c.topk);
    eng.rt().bind_inputs(tensors.inputs());
    eng.rt().capture();
    model_config mc = eng.model();
    mc.pool_rows = c.pool_rows;
    mc.kv_slots = c.kv_slots;
    host_round r = eng.random_round(rng, 8);
    // Short enough for every branch region to fit req_to_token's rows: the CSR kernels refuse
    // only the planted values below.
    for (std::int32_t& len : r.seq_len) len = 1 + len % 32;
    eng.poison();
    tensors.write(r, c.num_steps);
    tensors.set_pool(1, pool_overflow);
    tensors.set_seq(3, c.max_context_len + 1);
    tensors.set_seq(4, seq_overflow);
    tensors.set_pool(5, -1);
    tensors.set_slot(6, 2, 0, c.kv_slots);                // every step reads slot 0
    tensors.set_slot(7, 0, 2, -(std::int64_t{1} << 40));  // steps 2 and 3 read slot 2
    tensors.reupload();
    // The model's int32 inputs: any out-of-range stand-in is refused the same way.
    r.req_pool_index[1] = c.pool_rows;
    r.seq_len[3] = r.seq_len[4] = c.max_context_len + 1;
    r.req_pool_index[5] = -1;
    r.out_cache_loc[static_cast<std::size_t>((6 * 3 + 2) * 4 + 0)] = c.kv_slots;
    r.out_cache_loc[static_cast<std::size_t>((7 * 3 + 0) * 4 + 2)] = -(std::int64_t{1} << 40);
    eng.rt().begin_round(8);
    run_full_round(eng.rt(), m);
    const model_round want = model_draft_round(mc, eng.req_to_token(), 8, r.req_pool_index,
                                               r.seq_len, r.out_cache_loc, c.num_steps, 8);
    ASSERT_EQ(want.prefix_violations, 4);
    expect_round(eng, want);

    const std::vector<guard_word> g = eng.rt().read_guards();
    EXPECT_EQ(g[plan_layout::guard_stage].violations, 0) << "nothing was staged";
    const guard_word& prefix = g[plan_layout::guard_prefix];
    EXPECT_EQ(prefix.kind, static_cast<std::int32_t>(violation_kind::bad_input));
    EXPECT_EQ(prefix.kernel, static_cast<std::int32_t>(kernel_id::prefix_metadata));
    EXPECT_EQ(prefix.row, 1);
    EXPECT_EQ(prefix.column, -1);
    EXPECT_EQ(prefix.capacity, c.pool_rows);
    EXPECT_EQ(prefix.value, pool_overflow) << "the value as the engine holds it, not narrowed";
    for (std::int32_t s = 0; s < c.num_steps; ++s) {
      const guard_word& e = g[static_cast<std::size_t>(plan_layout::guard_expand(s))];
      EXPECT_EQ(e.violations, s >= 2 ? 2 : 1) << "step " << s;
      EXPECT_EQ(e.kernel, static_cast<std::int32_t>(kernel_id::expand_page_table));
      EXPECT_EQ(e.row, 6 * 3 + 2) << "step " << s;
      EXPECT_EQ(e.column, 0) << "step " << s;
      EXPECT_EQ(e.value, c.kv_slots) << "step " << s;
    }
    // The CSR indices refuse the same requests: the word of the first step computed.
    const plan& p = eng.rt().plan();
    const guard_word& k = g[static_cast<std::size_t>(p.layout.guard_csr(0))];
    EXPECT_EQ(k.violations, 4);
    EXPECT_EQ(k.kernel, static_cast<std::int32_t>(kernel_id::draft_kv_indices));
    EXPECT_EQ(k.row, 1 * c.topk);
    EXPECT_EQ(k.value, pool_overflow);
    try {
      eng.rt().check_guards();
      ADD_FAILURE() << "check_guards raised nothing";
    } catch (const guard_violation& e) {
      EXPECT_NE(std::string(e.what()).find("prefix.page_table"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(pool_overflow)), std::string::npos)
          << e.what();
    }
    if (HasFailure()) return;
  }
}

TEST_P(EngineInputsBad, HostChecksNameTheField) {
  std::mt19937_64 rng(7);
  const draft_config c = config_for(mode::replay_steps, 1, false);
  sim_engine eng(*ex, c, rng);
  input_layout l;
  l.slots = c.num_steps;
  engine_tensors tensors(*ex, l, eng.rt().plan().max_bucket(), c.topk);
  engine_inputs in = tensors.inputs();
  in.out_cache_loc.slots = c.num_steps - 1;
  expect_invalid([&] { eng.rt().bind_inputs(in); }, "out_cache_loc.slots", "minimum 4");
  in = tensors.inputs();
  in.req_pool_index.data = nullptr;
  expect_invalid([&] { eng.rt().bind_inputs(in); }, "req_pool_index", "null");
  in = tensors.inputs();
  in.seq_len.stride = -1;
  expect_invalid([&] { eng.rt().bind_inputs(in); }, "seq_len.stride", "-1");
  in = tensors.inputs();
  in.out_cache_loc.type = static_cast<index_type>(2);
  expect_invalid([&] { eng.rt().bind_inputs(in); }, "out_cache_loc.type", "int32");
  in = tensors.inputs();
  in.out_cache_loc.request_stride = 0;
  expect_invalid([&] { eng.rt().bind_inputs(in); }, "out_cache_loc.request_stride", "0");
  expect_invalid([&] { eng.rt().begin_round(eng.rt().plan().max_bucket()); }, "inputs", "bind");
  eng.rt().bind_inputs(tensors.inputs());
  expect_invalid([&] { eng.rt().begin_round(9); }, "bucket", "9");
  expect_invalid([&] { eng.rt().begin_round(8, c.num_steps + 1); }, "max_depth");
  const host_round r = eng.random_round(rng, 2);
  expect_invalid([&] { eng.rt().stage(r.inputs()); }, "inputs", "begin_round");
  eng.rt().capture();
  expect_invalid([&] { eng.rt().bind_inputs(tensors.inputs()); }, "inputs", "capture");
  // begin_round over the free functions: its range checks, nothing enqueued.
  expect_invalid([&] { begin_round(*ex, eng.rt().buffers(), -1); }, "max_depth");
}

SPECGRAPH_INSTANTIATE_EXECUTORS(EngineInputsBad);

}  // namespace
}  // namespace specgraph::testing
