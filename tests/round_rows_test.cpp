// Rounds in sequence, in every replay mode (per-step graphs, the whole-round graph, eager runs,
// the device step counter, the device-decided depth), without poisoning between them, against
// the independent round model (testing/reference_round.hpp): a long round, a short one (the
// prefix tail the long one left must be cleared, docs/metadata.md section 2's high-water
// marks), a round with refused inputs staged from device memory (each refused request or row
// written as a padded one and counted), and a short one again.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/runtime.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

enum class mode { replay_steps, round_graph, eager, device_steps, device_depth };
const char* name_of(mode m) {
  switch (m) {
    case mode::replay_steps: return "per-step graphs";
    case mode::round_graph: return "whole-round graph";
    case mode::eager: return "eager";
    case mode::device_steps: return "device step counter";
    case mode::device_depth: return "device-decided depth";
  }
  return "?";
}

draft_config config_for(mode m, std::int32_t page_size) {
  draft_config c;
  c.max_batch = 12;
  c.topk = 3;
  c.num_steps = 4;
  c.page_size = page_size;
  c.max_context_len = 64;
  c.pool_rows = 16;
  c.kv_slots = 1 << 20;
  c.round_graphs = m == mode::round_graph;
  c.device_steps = m == mode::device_steps || m == mode::device_depth;
  c.device_depth = m == mode::device_depth;
  return c;
}

void run_full_round(sim_engine& eng, mode m) {
  const std::int32_t steps = eng.config().num_steps;
  switch (m) {
    case mode::replay_steps:
      for (std::int32_t s = 0; s < steps; ++s) eng.rt().replay(s);
      break;
    case mode::eager:
      for (std::int32_t s = 0; s < steps; ++s) eng.rt().run_eager(s);
      break;
    case mode::round_graph:
    case mode::device_steps: eng.rt().run_round(steps); break;
    case mode::device_depth: eng.rt().run_round_on_device(); break;  // depth num_steps
  }
}

// What every step's forward read (the probe folds its expand row, cache_seqlen, prefix row and
// prefix_seqlen), the prefix tables of the bucket's requests, and the guards' counts.
void expect_round(sim_engine& eng, const model_round& want) {
  const draft_buffers& b = eng.rt().buffers();
  const auto B = static_cast<std::size_t>(want.bucket);
  const std::size_t rows = B * static_cast<std::size_t>(eng.config().topk);
  EXPECT_EQ(eng.read(b.prefix_page_table(), want.prefix_table.size()), want.prefix_table)
      << "prefix page table";
  EXPECT_EQ(eng.read(b.last_page_len(), B), want.last_page_len) << "last_page_len";
  EXPECT_EQ(eng.read(b.prefix_seqlen(), B), want.prefix_seqlen) << "prefix_seqlen";
  const std::vector<guard_word> guards = eng.rt().read_guards();
  EXPECT_EQ(guards[plan_layout::guard_prefix].violations, want.prefix_violations)
      << describe(guards[plan_layout::guard_prefix]);
  for (std::int32_t s = 0; s < eng.config().num_steps; ++s) {
    const auto i = static_cast<std::size_t>(s);
    EXPECT_EQ(eng.read(eng.probe_out(s), rows), want.probe[i]) << "forward inputs, step " << s;
    const guard_word& g = guards[static_cast<std::size_t>(plan_layout::guard_expand(s))];
    EXPECT_EQ(g.violations, want.expand_violations[i]) << "step " << s << ": " << describe(g);
  }
}

class RoundRows : public ExecutorTest {};

TEST_P(RoundRows, LongShortRefusedShortMatchTheModelInEveryMode) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const mode m : {mode::replay_steps, mode::round_graph, mode::eager, mode::device_steps,
                       mode::device_depth}) {
    for (const std::int32_t ps : {1, 4}) {
      SCOPED_TRACE(std::string(name_of(m)) + ", page_size " + std::to_string(ps));
      sim_engine eng(*ex, config_for(m, ps), rng);
      eng.rt().capture();
      model_config mc = eng.model();
      mc.pool_rows = eng.config().pool_rows;
      mc.kv_slots = eng.config().kv_slots;
      for (int round = 0; round < 4; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        host_round r = eng.random_round(rng, 12);
        for (std::int32_t& len : r.seq_len) {
          len = round == 0 ? 56 + static_cast<std::int32_t>(rng() % 9)   // long: near 64
                           : 1 + static_cast<std::int32_t>(rng() % 12);  // short
        }
        if (round == 2) {  // refused inputs: only device staging passes them to the kernels
          r.req_pool_index[1] = eng.config().pool_rows;
          r.seq_len[3] = eng.config().max_context_len + 1;
          r.out_cache_loc[static_cast<std::size_t>(5 * 3 * 4 + 1 * 4 + 0)] =  // 5, branch 1
              eng.config().kv_slots;
          r.seq_len[5] = 40;
        }
        dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
        dvec<std::int64_t> slots(*ex, r.out_cache_loc);
        eng.rt().stage_device({r.batch, pool.data(), seq.data(), slots.data()});
        run_full_round(eng, m);
        const model_round want =
            model_draft_round(mc, eng.req_to_token(), r.batch, r.req_pool_index, r.seq_len,
                              r.out_cache_loc, eng.config().num_steps);
        if (round == 2) {
          ASSERT_EQ(want.prefix_violations, 2);
          ASSERT_EQ(want.expand_violations[0], 1);
        }
        expect_round(eng, want);
        if (HasFailure()) return;
      }
    }
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RoundRows);

}  // namespace
}  // namespace specgraph::testing
