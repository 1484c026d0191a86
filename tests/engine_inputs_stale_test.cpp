// Inputs read in place with a bound real batch (docs/engines.md "Inputs read in place"): the
// rows of the engine's tensors at or past *real_batch are padding rows whatever they hold. Each
// round leaves stale requests there (another random round's pool rows, lengths and slots, and
// sometimes values out of range that a kernel reading them would refuse and record), replays
// it in every mode (per-step graphs, the whole-round graph, eager, the device step counter, the
// device-decided depth) with FA3 and CSR tables, and compares it with the independent round
// model (testing/reference_round.hpp), which pads the rows past the real batch itself, and with
// the same round staged into a second runtime (staging pads them too). Every run starts from a
// poisoned arena.
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

class EngineInputsStale : public ExecutorTest {};

// Rows [batch, max_bucket) of the engine's tensors: a stale request each (from `stale`), a few
// of them out of range (a pool row, a seq_len or a slot no kernel may accept).
void leave_stale_rows(engine_tensors& t, const host_round& stale, std::int32_t batch,
                      const draft_config& c, std::int64_t slots, std::mt19937_64& rng) {
  const std::int32_t stride = c.slot_stride == 0 ? c.num_steps : c.slot_stride;
  for (std::int32_t i = batch; i < stale.batch; ++i) {
    const auto at = static_cast<std::size_t>(i);
    t.set_pool(i, stale.req_pool_index[at]);
    t.set_seq(i, stale.seq_len[at]);
    for (std::int32_t b = 0; b < c.topk; ++b) {
      for (std::int64_t j = 0; j < slots; ++j) {
        const std::int64_t v =
            j < stride
                ? stale.out_cache_loc[(at * c.topk + b) * stride + static_cast<std::size_t>(j)]
                : -5;
        t.set_slot(i, b, j, v);
      }
    }
    switch (rng() % 8) {
      case 0: t.set_pool(i, c.pool_rows + 3); break;
      case 1: t.set_seq(i, c.max_context_len + 7); break;
      case 2: t.set_slot(i, 0, 0, -3); break;
      default: break;
    }
  }
  t.reupload();
}

TEST_P(EngineInputsStale, RowsPastTheBoundRealBatchArePaddingInEveryModeAndFormat) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const mode m : all_modes) {
    for (const std::int32_t ps : {1, 4}) {
      const draft_config c = config_for(m, ps, /*csr=*/true);
      input_layout l = random_layout(rng, c.num_steps);
      l.bind_real_batch = true;
      SCOPED_TRACE(std::string(name_of(m)) + ", page_size " + std::to_string(ps) + ", " +
                   l.describe());
      std::mt19937_64 twin = rng;  // the same req_to_token in both engines
      sim_engine staged(*ex, c, rng);
      sim_engine in_place(*ex, c, twin);
      const std::int32_t max_bucket = in_place.rt().plan().max_bucket();
      engine_tensors tensors(*ex, l, max_bucket, c.topk);
      in_place.rt().bind_inputs(tensors.inputs());
      staged.rt().capture();
      in_place.rt().capture();
      model_config mc = staged.model();
      mc.pool_rows = c.pool_rows;
      mc.kv_slots = c.kv_slots;
      for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        // At least one real row with the device-decided depth (an idle rank stops after one
        // step there, the model runs every step); below the largest bucket, so stale rows exist.
        const std::int32_t least = m == mode::device_depth ? 1 : 0;
        const auto batch = least + static_cast<std::int32_t>(
                                       rng() % static_cast<std::uint64_t>(c.max_batch - least));
        const host_round r = staged.random_round(rng, batch);
        const host_round stale = staged.random_round(rng, max_bucket);
        const std::int32_t bucket = rng() % 2 == 0 ? model_bucket(mc, batch) : max_bucket;
        staged.poison();
        in_place.poison();
        tensors.write(r, c.slot_stride == 0 ? c.num_steps : c.slot_stride);
        leave_stale_rows(tensors, stale, batch, c, l.slots, rng);
        dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
        dvec<std::int64_t> slots(*ex, r.out_cache_loc);
        device_round_inputs in{batch, pool.data(), seq.data(), slots.data()};
        in.bucket = bucket;
        staged.rt().stage_device(in);
        run_full_round(staged.rt(), m);
        in_place.rt().begin_round(bucket);
        run_full_round(in_place.rt(), m);
        const model_round want =
            model_draft_round(mc, staged.req_to_token(), batch, r.req_pool_index, r.seq_len,
                              r.out_cache_loc, c.num_steps, bucket);
        ASSERT_EQ(want.prefix_violations, 0);
        {
          SCOPED_TRACE("staged");
          expect_round(staged, want);
        }
        {
          SCOPED_TRACE("in place, stale rows past the real batch");
          expect_round(in_place, want);
        }
        // Nothing read in a stale row is recorded: the CSR words count what the staged twin's
        // count (its real rows' own refusals, a row too narrow for a long request's regions).
        const std::vector<guard_word> gs = staged.rt().read_guards();
        const std::vector<guard_word> gp = in_place.rt().read_guards();
        for (std::int32_t s = 0; s < c.num_steps; ++s) {
          const auto w = static_cast<std::size_t>(in_place.rt().plan().layout.guard_csr(s));
          EXPECT_EQ(gp[w].violations, gs[w].violations)
              << "csr step " << s << ": " << describe(gp[w]);
        }
        expect_same_csr(staged, in_place, bucket);
        if (HasFailure()) return;
      }
    }
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(EngineInputsStale);

}  // namespace
}  // namespace specgraph::testing
