// The whole round as one graph per bucket (draft_runtime::launch_device_round(s),
// docs/round-graphs.md section 6): K = 8 rounds (a) as K launches of the device-round graph back
// to back with no host work in between, (b) driven from the host (stage, run_round,
// stage_verify, replay_verify, the host twins, stage_extend, replay_extend, restage), (c) the
// independent references chained on a mirror (tests/round_chain.hpp). The accepted paths,
// lengths, bonus tokens, draft extend's inputs per round, and the final seq_len, allocated_len,
// draft slots, req_to_token and ring head agree across the three; (a) makes exactly K graph
// launches, no synchronisation and no copy; finished rows, padded rows, a ring that runs short
// (and the sticky guard summary across rounds), misuse refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/runtime.hpp"
#include "testing/device_round_driver.hpp"
#include "tests/device_round_run.hpp"
#include "tests/engine_inputs_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t K = 8;

class DeviceRound : public ExecutorTest {};

// Every configuration, fresh seeds, real batch 1..4 (padded rows in buckets 2 and 4): (a), (b)
// and (c) agree; acceptance reaches 0 and num_steps; some rows finish on the stop token.
TEST_P(DeviceRound, BackToBackLaunchesEqualTheHostDrivenRoundsAndTheReferences) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::int64_t zero_accepts = 0, full_accepts = 0, finished = 0;
  for (const dr_config& d : dr_configs) {
    SCOPED_TRACE(d.name);
    const draft_config cfg = dr_draft_config(d);
    const plan p = make_plan(cfg);
    for (int i = 0; i < property_cases(12); ++i) {
      const std::int32_t real = 1 + static_cast<std::int32_t>(i % 4);
      SCOPED_TRACE("case " + std::to_string(i) + ", real batch " + std::to_string(real));
      const dr_start s = make_start(p, real, K, rng);
      const dr_record want = run_reference(p, s, K);
      dr_rig a(*ex, cfg, s);
      executor_counters during;
      const int mode = i % 3;
      const dr_record got_a = a.run_device(K, mode, &during);
      EXPECT_EQ(during.graph_launches, K);
      EXPECT_EQ(during.synchronizations, 0);
      EXPECT_EQ(during.copies_to_host, 0);
      EXPECT_EQ(during.copies_to_device, mode == 2 ? K - 1 : 0) << "only the ring's tail";
      EXPECT_EQ(during.kernel_launches, 0);
      expect_same(got_a, want, K, "(a) device rounds against the references");
      const std::vector<guard_word> words = a.rt.read_round_guards();
      for (std::size_t w = 0; w < words.size(); ++w) {
        EXPECT_EQ(words[w].violations, 0)
            << guard_site_of(p, static_cast<std::int32_t>(w)).buffer << ": " << describe(words[w]);
      }
      dr_rig b(*ex, cfg, s);
      std::int64_t launches_b = 0;
      const dr_record got_b = b.run_host(K, &launches_b);
      EXPECT_GT(launches_b, K);
      EXPECT_EQ(got_b.guard_violations, 0) << got_b.first_guard;
      expect_same(got_b, want, K, "(b) host-driven against the references");
      for (std::int32_t k = 0; k < K; ++k) {
        for (std::int32_t r = 0; r < real; ++r) {
          const std::int32_t c = want.accept_length[k][r];
          zero_accepts += c == 0;
          full_accepts += c == cfg.num_steps;
          finished += want.finished[k][r];
        }
      }
    }
  }
  EXPECT_GT(zero_accepts, 0);
  EXPECT_GT(full_accepts, 0);
  EXPECT_GT(finished, 0);
}

// Budgets on (issue 31: the commit decrements max_new_tokens_left on the device): K launches
// back to back with no host work equal the chained references, the budget carried round to
// round in place. Rows finish by their budget after several rounds (a budget above one round's
// most tokens, S = num_steps + 1, run down to 0); a finished row left in place is idle in the
// later rounds (its finished flag stays set: nothing accepted or committed, its budget of 0 kept,
// no guard word set), as the references model it; padded rows' junk budgets stay untouched.
TEST_P(DeviceRound, BudgetsRunDownOnTheDeviceUntilRowsFinish) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::int64_t by_budget = 0, idled = 0, left_over = 0;
  for (const dr_config& d : dr_configs) {
    SCOPED_TRACE(d.name);
    const draft_config cfg = dr_draft_config(d);
    const plan p = make_plan(cfg);
    const std::int32_t S = cfg.num_steps + 1;
    for (int i = 0; i < property_cases(12); ++i) {
      const std::int32_t real = 1 + static_cast<std::int32_t>(i % 4);
      SCOPED_TRACE("case " + std::to_string(i) + ", real batch " + std::to_string(real));
      dr_start s = make_start(p, real, K, rng);
      for (std::int32_t r = 0; r < s.bucket; ++r) {
        // Real rows: 1 .. 3 rounds' worth of tokens; in odd cases row 0 gets more than K rounds
        // can emit (a round emits at most S), so some row is always left over; padding: junk,
        // never read nor written.
        const bool outlasts = r == 0 && i % 2 == 1;
        s.budget.push_back(r >= real  ? -4 - static_cast<std::int32_t>(rng() % 3)
                           : outlasts ? K * S + 1 + static_cast<std::int32_t>(rng() % S)
                                      : 1 + static_cast<std::int32_t>(rng() % (3 * S)));
      }
      const dr_record want = run_reference(p, s, K);
      dr_rig a(*ex, cfg, s);
      executor_counters during;
      const dr_record got = a.run_device(K, i % 3, &during);
      EXPECT_EQ(during.graph_launches, K);
      EXPECT_EQ(during.synchronizations, 0);
      EXPECT_EQ(during.copies_to_host, 0);
      expect_same(got, want, K, "(a) device rounds with budgets against the references");
      const std::vector<guard_word> g = a.rt.read_round_guards();
      for (std::int32_t w = 0; w < round_guard_count; ++w) {
        EXPECT_EQ(g[static_cast<std::size_t>(p.layout.round.guard_base + w)].violations,
                  want.guard_total[static_cast<std::size_t>(w)])
            << guard_site_of(p, p.layout.round.guard_base + w).buffer;
      }
      for (std::int32_t w : {round_guard_accept, round_guard_commit}) {
        const guard_word& word = g[static_cast<std::size_t>(p.layout.round.guard_base + w)];
        EXPECT_EQ(word.violations, 0) << describe(word);
      }
      // A row that finished before the last round idled through the rounds after it: its flag
      // stays set and it accepts nothing.
      for (std::int32_t k = 0; k + 1 < K; ++k) {
        for (std::int32_t r = 0; r < real; ++r) {
          if (want.finished[k][r] == 0) continue;
          ++idled;
          EXPECT_EQ(want.finished[k + 1][r], 1) << "round " << k + 1 << " row " << r;
          EXPECT_EQ(want.accept_length[k + 1][r], 0) << "round " << k + 1 << " row " << r;
        }
      }
      ASSERT_EQ(want.tokens_left.size(), static_cast<std::size_t>(s.bucket));
      for (std::int32_t r = 0; r < s.bucket; ++r) {
        const std::int32_t left = want.tokens_left[static_cast<std::size_t>(r)];
        const std::int32_t start = s.budget[static_cast<std::size_t>(r)];
        if (r >= real) {
          EXPECT_EQ(left, start) << "padded row " << r;
          continue;
        }
        EXPECT_GE(left, 0) << r;
        EXPECT_LE(left, start) << r;
        EXPECT_GE(left, start - K * S) << r << ": K rounds emit at most K * S tokens";
        by_budget += left == 0 && start > S;  // needed more than one round
        left_over += left > 0;
      }
    }
  }
  EXPECT_GT(by_budget, 0) << "no row ran its budget down over several rounds";
  EXPECT_GT(idled, 0) << "no finished row was left in place";
  EXPECT_GT(left_over, 0) << "no row outlasted the rounds";
}

// A ring holding one round's worst case: a later round runs short and stalls (every row built
// inactive), the rounds after it stay padding until the host clears the word; (a) equals the
// references, and the sticky summary holds the round section's violations summed over the
// rounds as the references count them.
TEST_P(DeviceRound, AShortRingStallsTheLaterRounds) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const dr_config& d : dr_configs) {
    SCOPED_TRACE(d.name);
    const draft_config cfg = dr_draft_config(d);
    const plan p = make_plan(cfg);
    const dr_start s = make_start(p, 4, 1, rng);
    const dr_record want = run_reference(p, s, K);
    ASSERT_EQ(want.stall, 1) << "the ring must run short within K rounds";
    dr_rig a(*ex, cfg, s);
    const dr_record got = a.run_device(K, 0);
    expect_same(got, want, K, "(a) against the references");
    const std::vector<guard_word> g = a.rt.read_round_guards();
    for (std::int32_t w = 0; w < round_guard_count; ++w) {
      EXPECT_EQ(g[static_cast<std::size_t>(p.layout.round.guard_base + w)].violations,
                want.guard_total[static_cast<std::size_t>(w)])
          << guard_site_of(p, p.layout.round.guard_base + w).buffer;
    }
    EXPECT_GT(want.guard_total[round_guard_next], 0) << "the stall is recorded";
  }
}

// Guard words across rounds: each round's setup resets the live words, the graph's last node
// folds them into the sticky summary. A padded row reading junk in pool row 0 (1 bad-input
// violation of prefix.page_table per round): the live word says 1, the summary K, row 1 (the
// padded row); reset_round_guards empties the summary; the results are unaffected.
TEST_P(DeviceRound, TheSummaryKeepsEveryRoundsViolationsUntilTheHostResetsIt) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const draft_config cfg = dr_draft_config(dr_configs[0]);
  const plan p = make_plan(cfg);
  dr_start s = make_start(p, 1, K, rng);
  s.req_to_token[0] = -9;
  const dr_record want = run_reference(p, s, K);
  dr_rig a(*ex, cfg, s);
  const dr_record got = a.run_device(K, 0);
  expect_same(got, want, K, "(a) against the references");
  const auto prefix = static_cast<std::size_t>(plan_layout::guard_prefix);
  const std::vector<guard_word> live = a.rt.read_guards();
  const std::vector<guard_word> summary = a.rt.read_round_guards();
  EXPECT_EQ(live[prefix].violations, 1);
  EXPECT_EQ(summary[prefix].violations, K) << describe(summary[prefix]);
  EXPECT_EQ(summary[prefix].row, 1);
  EXPECT_EQ(summary[prefix].kind, static_cast<std::int32_t>(violation_kind::bad_input));
  try {
    raise_guard_violations(p, summary, 2, "round");
    ADD_FAILURE() << "the summary must raise";
  } catch (const guard_violation& e) {
    EXPECT_NE(std::string(e.what()).find("prefix.page_table"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(8 in total)"), std::string::npos) << e.what();
  }
  a.rt.reset_round_guards();
  const std::vector<guard_word> cleared = a.rt.read_round_guards();
  EXPECT_EQ(cleared[prefix].violations, 0);
  // One more round: the summary holds exactly that round's.
  a.rt.launch_device_round();
  EXPECT_EQ(a.rt.read_round_guards()[prefix].violations, 1);
}

// Without draft_extend the graph holds no handoff and no extend: the round's state after K
// launches equals the references all the same.
TEST_P(DeviceRound, WithoutDraftExtendTheStateEqualsTheReferences) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const dr_config& d : dr_configs) {
    SCOPED_TRACE(d.name);
    draft_config cfg = dr_draft_config(d);
    cfg.draft_extend = false;
    const plan p = make_plan(cfg);
    const dr_start s = make_start(p, 3, K, rng);
    dr_rig a(*ex, cfg, s);
    executor_counters during;
    const dr_record got = a.run_device(K, 0, &during);
    EXPECT_EQ(during.graph_launches, K);
    expect_same(got, run_reference(p, s, K), 0, "(a) final state against the references");
    for (const guard_word& g : a.rt.read_round_guards()) EXPECT_EQ(g.violations, 0);
  }
}

// Checked mode: launch_device_round synchronises and raises the summary's first set word, here
// a padded row's junk slot in pool row 0; the events are waited on and recorded; K clean rounds
// keep every word clean, the draft slots' layout checks included.
TEST_P(DeviceRound, CheckedModeRaisesTheSummaryAfterTheLaunch) {
  std::mt19937_64 rng(9);
  draft_config cfg = dr_draft_config(dr_configs[0]);
  cfg.checked = true;
  const plan p = make_plan(cfg);
  dr_start s = make_start(p, 1, K, rng);
  dr_rig clean(*ex, cfg, s);
  const event_handle ready(*ex), done(*ex);
  ex->record_event(ready.get());
  clean.rt.bind_round_ring(clean.in);
  (void)clean.rt.capture();
  clean.stage_start();
  clean.rt.launch_device_round({ready.get(), done.get()});  // clean: no throw
  EXPECT_TRUE(ex->event_complete(done.get()));
  // The rounds after it draft on the slots the next round wrote: checked mode's layout checks
  // of the draft metadata hold in every round.
  clean.rt.launch_device_rounds(K - 1);
  const std::vector<guard_word> words = clean.rt.read_round_guards();
  for (std::size_t w = 0; w < words.size(); ++w) {
    EXPECT_EQ(words[w].violations, 0)
        << guard_site_of(p, static_cast<std::int32_t>(w)).buffer << ": " << describe(words[w]);
  }
  s.req_to_token[0] = -9;
  dr_rig a(*ex, cfg, s);
  a.rt.bind_round_ring(a.in);
  (void)a.rt.capture();
  a.stage_start();
  try {
    a.rt.launch_device_round();
    ADD_FAILURE() << "checked mode must raise the summary";
  } catch (const guard_violation& e) {
    EXPECT_NE(std::string(e.what()).find("prefix.page_table"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("row 1"), std::string::npos) << e.what();
  }
}

// docs/round-graphs.md section 6.3's example, as pasted, over the rig's runtime and buffers;
// the rounds equal the references and every guard word is clean.
TEST_P(DeviceRound, TheDocsExampleRuns) {
  std::mt19937_64 rng(11);
  const draft_config cfg = dr_draft_config(dr_configs[1]);
  const plan p = make_plan(cfg);
  const dr_start s = make_start(p, 3, K, rng);
  dr_rig a(*ex, cfg, s);
  draft_runtime& rt = a.rt;
  std::int32_t* req_to_token = a.r2t.data();
  const std::int32_t* pages = a.ring.data();
  const std::int64_t capacity = static_cast<std::int64_t>(s.ring.size());
  const std::int64_t* tail = a.tail.data();
  const std::vector<std::int64_t> slots(static_cast<std::size_t>(3 * cfg.topk * cfg.slot_stride));
  round_inputs first_round;
  first_round.batch = 3;
  first_round.req_pool_index = s.pool.data();
  first_round.seq_len = s.seq_len.data();
  first_round.out_cache_loc = slots.data();
  const round_view v = rt.buffers().round(s.bucket);
  ex->copy_to_device(v.allocated_len, s.allocated_len.data(), s.allocated_len.size() * 4);
  ex->copy_to_device(v.stop_token_ids, &stop_id, sizeof stop_id);
  // --- the example ---
  after_verify_inputs ring;
  ring.req_to_token = req_to_token;  // the runtime's engine_tables::req_to_token
  ring.ring = pages;                 // page ids the engine's allocator publishes
  ring.ring_capacity = capacity;
  ring.ring_tail = tail;      // the engine's tail counter, executor memory
  ring.stop_token_count = 1;  // stop ids in buffers().round().stop_token_ids
  ring.budget = false;
  rt.bind_round_ring(ring);
  (void)rt.capture();          // step, verify, extend and device-round graphs
  rt.stage(first_round);       // once; allocated_len etc. written into the section
  rt.launch_device_rounds(8);  // 8 graph launches, no sync
  const std::vector<guard_word> words = rt.read_round_guards();  // synchronises
  raise_guard_violations(rt.plan(), words, rt.staged_bucket(), "round");
  rt.reset_round_guards();
  // --- end of the example ---
  expect_same(a.read_device(K), run_reference(p, s, K), K, "the docs example");
}

// Misuse: a plan without the round section, no ring bound, no capture, no staged round, a
// binding that does not match the runtime's tables, a binding after capture: refused by name
// (or as an error), nothing launched.
TEST_P(DeviceRound, MisuseIsRefusedByName) {
  std::mt19937_64 rng(5);
  const draft_config cfg = dr_draft_config(dr_configs[1]);
  const plan p = make_plan(cfg);
  const dr_start s = make_start(p, 3, K, rng);
  {
    draft_config without = cfg;
    without.round_on_device = false;
    dvec<std::int32_t> r2t(*ex, s.req_to_token);
    draft_runtime rt(*ex, without, engine_tables{r2t.data(), 0});
    expect_invalid([&] { rt.launch_device_round(); }, "round_on_device");
    expect_invalid([&] { rt.bind_round_ring(after_verify_inputs{}); }, "round_on_device");
  }
  dr_rig a(*ex, cfg, s);
  const std::int64_t launches = ex->counters().graph_launches;
  expect_invalid([&] { a.rt.launch_device_round(); }, "ring", "bind_round_ring");
  expect_invalid([&] { a.rt.launch_device_rounds(2); }, "ring");
  after_verify_inputs other = a.in;
  dvec<std::int32_t> copy(*ex, s.req_to_token);
  other.req_to_token = copy.data();
  expect_invalid([&] { a.rt.bind_round_ring(other); }, "req_to_token");
  other = a.in;
  other.ring = nullptr;
  expect_invalid([&] { a.rt.bind_round_ring(other); }, "ring");
  other = a.in;
  other.real_batch = 2;
  expect_invalid([&] { a.rt.bind_round_ring(other); }, "real_batch");
  {  // inputs read in place: the round's state would never reach them
    dr_rig bound(*ex, cfg, s);
    input_layout l;
    l.slots = cfg.num_steps;
    engine_tensors tensors(*ex, l, p.max_bucket(), cfg.topk);
    bound.rt.bind_inputs(tensors.inputs());
    expect_invalid([&] { bound.rt.bind_round_ring(bound.in); }, "inputs", "stage()");
  }
  a.rt.bind_round_ring(a.in);
  EXPECT_THROW(a.rt.launch_device_round(), error);  // before capture
  const capture_report report = a.rt.capture();
  EXPECT_EQ(report.device_round_graphs, 2);
  EXPECT_EQ(report.per_graph.back().step, device_round_graph_step);
  EXPECT_EQ(report.per_graph.back().bucket, 2);     // largest first
  EXPECT_THROW(a.rt.launch_device_round(), error);  // before stage()
  expect_invalid([&] { a.rt.bind_round_ring(a.in); }, "bind_round_ring");
  a.stage_start();
  expect_invalid([&] { a.rt.launch_device_rounds(0); }, "k");
  EXPECT_EQ(ex->counters().graph_launches, launches);
  a.rt.launch_device_round();
  EXPECT_EQ(ex->counters().graph_launches, launches + 1);
}

SPECGRAPH_INSTANTIATE_EXECUTORS(DeviceRound);

}  // namespace
}  // namespace specgraph::testing
