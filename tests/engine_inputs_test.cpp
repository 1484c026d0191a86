// Inputs read in place (engine_inputs.hpp): random rounds whose inputs an engine keeps in its own
// static tensors (int32 or int64 each, strides > 1, slot rows wider than num_steps, branch- or
// slot-major, padded buckets, with and without a bound real_batch), replayed in every mode
// (per-step graphs, the whole-round graph, eager, the device step counter, the device-decided
// depth) by a runtime bound to them, against the same rounds staged into a second runtime and
// against the independent round model (testing/reference_round.hpp). Every run starts from a
// poisoned arena: the cells a round writes are compared exactly, and the cells past the bucket
// must still hold the poison. No byte is copied per in-place round.
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

class EngineInputs : public ExecutorTest {};

TEST_P(EngineInputs, InPlaceRoundsMatchStagedRoundsAndTheModelInEveryMode) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const mode m : all_modes) {
    for (const std::int32_t ps : {1, 4}) {
      const bool csr = rng() % 2 == 0;
      const draft_config c = config_for(m, ps, csr);
      const input_layout l = random_layout(rng, c.num_steps);
      SCOPED_TRACE(std::string(name_of(m)) + ", page_size " + std::to_string(ps) +
                   (csr ? ", fa3 + csr, " : ", fa3, ") + l.describe());
      std::mt19937_64 twin = rng;  // the same req_to_token in both engines
      sim_engine staged(*ex, c, rng);
      sim_engine in_place(*ex, c, twin);
      engine_tensors tensors(*ex, l, in_place.rt().plan().max_bucket(), c.topk);
      in_place.rt().bind_inputs(tensors.inputs());
      staged.rt().capture();
      in_place.rt().capture();
      model_config mc = staged.model();
      mc.pool_rows = c.pool_rows;
      mc.kv_slots = c.kv_slots;
      for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        // 0: an idle rank; not with the device-decided depth, where a round without real rows
        // stops after its first step (the model runs every step).
        const std::int32_t least = m == mode::device_depth ? 1 : 0;
        const auto batch = least + static_cast<std::int32_t>(
                                       rng() % static_cast<std::uint64_t>(c.max_batch + 1 - least));
        const host_round r = staged.random_round(rng, batch);
        // A padded bucket: the smallest holding the batch, or sometimes a larger one.
        const std::vector<std::int32_t>& buckets = staged.rt().plan().config.buckets;
        std::int32_t bucket = model_bucket(mc, batch);
        if (rng() % 3 == 0) bucket = buckets.back();
        staged.poison();
        in_place.poison();
        tensors.write(r, c.slot_stride == 0 ? c.num_steps : c.slot_stride);
        dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
        dvec<std::int64_t> slots(*ex, r.out_cache_loc);
        device_round_inputs in{batch, pool.data(), seq.data(), slots.data()};
        in.bucket = bucket;
        const executor_counters before_staged = ex->counters();
        staged.rt().stage_device(in);
        run_full_round(staged.rt(), m);
        const executor_counters after_staged = ex->counters();
        in_place.rt().begin_round(bucket);
        run_full_round(in_place.rt(), m);
        const executor_counters after = ex->counters();
        // Bytes copied per round: the staged round's static inputs, none in place.
        EXPECT_GT(after_staged.input_bytes_staged - before_staged.input_bytes_staged, 0);
        EXPECT_EQ(after.input_bytes_staged - after_staged.input_bytes_staged, 0);
        EXPECT_EQ(after.bytes_to_device - after_staged.bytes_to_device, 0);
        const model_round want =
            model_draft_round(mc, staged.req_to_token(), batch, r.req_pool_index, r.seq_len,
                              r.out_cache_loc, c.num_steps, bucket);
        {
          SCOPED_TRACE("staged");
          expect_round(staged, want);
        }
        {
          SCOPED_TRACE("in place");
          expect_round(in_place, want);
        }
        expect_same_csr(staged, in_place, bucket);
        if (HasFailure()) return;
      }
    }
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(EngineInputs);

}  // namespace
}  // namespace specgraph::testing
