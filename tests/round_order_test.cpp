// The round's order (docs/metadata.md section 11): every composable op checks the arena's
// round.progress word. Out of order (a step before setup_round, a setup before any staging, a
// CSR step before setup, a step of a new round before that round's setup) it is refused eagerly
// on the host executor (invalid_argument naming the op, nothing written: the whole arena
// compared byte for byte) and recorded in the round.order guard word everywhere else (a
// deferred host executor, a captured graph replayed, a CUDA stream), where check_guards raises.
// Legitimate orders (any step order once set up, a second setup, inputs read in place) record
// nothing, and their tables match the independent model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/csr_ops.hpp"
#include "specgraph/engine_inputs.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

draft_config order_config(bool device_steps) {
  draft_config c;
  c.max_batch = 6;
  c.topk = 2;
  c.num_steps = 3;
  c.page_size = 4;
  c.max_context_len = 64;
  c.pool_rows = 8;
  c.kv_slots = 1 << 16;
  c.device_steps = device_steps;
  c.formats = metadata_formats::both;
  return c;
}

std::vector<unsigned char> arena_bytes(executor& ex, const draft_buffers& b) {
  std::vector<unsigned char> out(b.bytes());
  ex.copy_to_host(out.data(), b.base(), out.size());
  return out;
}

// One arena over the engine's tables, driven through `ex` (the fixture's, or a deferred host
// executor): the ops an engine composes.
struct composed {
  composed(executor& e, const draft_config& cfg, std::mt19937_64& rng)
      : ex(&e), eng(e, cfg, rng), p(make_plan(cfg)), arena(e, p.total_bytes), b(p, arena.data()) {
    initialize_buffers(e, b);
  }
  // A random round whose requests leave room for every branch's draft region in req_to_token
  // (each region page-rounded: seq_len + topk * (slot_stride + page_size) + page_size <=
  // max_context_len is enough, docs/csr.md), so the CSR kernels refuse
  // nothing and only an order violation can be recorded.
  host_round random_round(std::mt19937_64& rng, std::int32_t batch) const {
    host_round r = eng.random_round(rng, batch);
    const draft_config& k = p.config;
    const std::int32_t most =
        k.max_context_len - k.topk * (k.slot_stride + k.page_size) - k.page_size;
    for (std::int32_t& s : r.seq_len) s = std::min(s, most);
    return r;
  }
  std::int32_t stage(std::mt19937_64& rng, std::int32_t batch) {
    round = random_round(rng, batch);
    pool = std::make_unique<dvec<std::int32_t>>(*ex, round.req_pool_index);
    seq = std::make_unique<dvec<std::int32_t>>(*ex, round.seq_len);
    slots = std::make_unique<dvec<std::int64_t>>(*ex, round.out_cache_loc);
    return stage_round(*ex, b, {batch, pool->data(), seq->data(), slots->data()});
  }
  guard_word order() { return read_guards(*ex, b)[static_cast<std::size_t>(p.layout.guard_order)]; }
  std::int32_t progress() {
    std::int32_t v = -1;
    ex->copy_to_host(&v, b.progress(), sizeof v);
    return v;
  }
  executor* ex;
  sim_engine eng;
  plan p;
  device_buffer arena;
  draft_buffers b;
  host_round round;
  std::unique_ptr<dvec<std::int32_t>> pool, seq;
  std::unique_ptr<dvec<std::int64_t>> slots;
};

// `call` is out of order: op `op` at `step` needing `need`, finding `found`. Eagerly on the host
// executor it throws naming the op and writes nothing; elsewhere the round.order word records
// it (and only it) and check_guards raises naming the word and the op.
void expect_out_of_order(composed& c, const std::function<void()>& call, kernel_id op,
                         std::int32_t step, round_progress need, round_progress found) {
  SCOPED_TRACE(std::string("op ") + to_string(op) + ", step " + std::to_string(step));
  ASSERT_EQ(c.progress(), static_cast<std::int32_t>(found));
  if (c.ex->host_visible()) {
    const std::vector<unsigned char> before = arena_bytes(*c.ex, c.b);
    expect_invalid(call, to_string(op),
                   std::string("expected ") +
                       (need == round_progress::staged ? "a staged round" : "the round set up"));
    EXPECT_TRUE(arena_bytes(*c.ex, c.b) == before) << "a refused op wrote into the arena";
    return;
  }
  call();
  const guard_word g = c.order();
  EXPECT_EQ(g.violations, 1) << describe(g);
  EXPECT_EQ(g.kind, static_cast<std::int32_t>(violation_kind::order));
  EXPECT_EQ(g.kernel, static_cast<std::int32_t>(op));
  EXPECT_EQ(g.column, step);
  EXPECT_EQ(g.capacity, static_cast<std::int32_t>(need));
  EXPECT_EQ(g.value, static_cast<std::int32_t>(found));
  try {
    raise_guard_violations(c.p, read_guards(*c.ex, c.b), 0);
    ADD_FAILURE() << "no guard_violation for an op out of order";
  } catch (const guard_violation& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("round.order"), std::string::npos) << what;
    EXPECT_NE(what.find(std::string("order violation: ") + to_string(op)), std::string::npos)
        << what;
  }
}

void expect_no_order_violation(composed& c) {
  const guard_word g = c.order();
  EXPECT_EQ(g.violations, 0) << describe(g);
}

// Each out-of-order sequence, on a fresh arena each, through executor `ex`.
void out_of_order_sequences(executor& ex, std::mt19937_64& rng) {
  const draft_config cfg = order_config(false);
  {  // a step before anything was staged
    composed c(ex, cfg, rng);
    expect_out_of_order(
        c, [&] { step_metadata(ex, c.b, 2, 1); }, kernel_id::step_metadata, 1,
        round_progress::set_up, round_progress::none);
  }
  {  // a setup before any staging (the staged inputs hold no round)
    composed c(ex, cfg, rng);
    expect_out_of_order(
        c, [&] { setup_round(ex, c.b, 2, c.eng.tables()); }, kernel_id::round_setup, -1,
        round_progress::staged, round_progress::none);
  }
  {  // staged, then a step before setup_round (issue 28 B4's case)
    composed c(ex, cfg, rng);
    const std::int32_t bucket = c.stage(rng, 2);
    expect_out_of_order(
        c, [&] { step_metadata(ex, c.b, bucket, 0); }, kernel_id::step_metadata, 0,
        round_progress::set_up, round_progress::staged);
  }
  {  // a CSR step before setup (setup resets its guard word)
    composed c(ex, cfg, rng);
    const std::int32_t bucket = c.stage(rng, 3);
    expect_out_of_order(
        c, [&] { csr_indices(ex, c.b, bucket, 2, c.eng.tables()); }, kernel_id::csr_indices, 2,
        round_progress::set_up, round_progress::staged);
  }
  {  // a whole round, then the next round's step before the next round's setup
    composed c(ex, cfg, rng);
    std::int32_t bucket = c.stage(rng, 2);
    setup_round(ex, c.b, bucket, c.eng.tables());
    for (std::int32_t s = 0; s < cfg.num_steps; ++s) step_metadata(ex, c.b, bucket, s);
    expect_no_order_violation(c);
    bucket = c.stage(rng, 5);
    expect_out_of_order(
        c, [&] { step_metadata(ex, c.b, bucket, 2); }, kernel_id::step_metadata, 2,
        round_progress::set_up, round_progress::staged);
  }
  const draft_config dev = order_config(true);
  {  // device step counter: the counter's step before setup
    composed c(ex, dev, rng);
    const std::int32_t bucket = c.stage(rng, 4);
    expect_out_of_order(
        c, [&] { step_metadata(ex, c.b, bucket, at_device_step); }, kernel_id::step_metadata, -1,
        round_progress::set_up, round_progress::staged);
  }
  {
    composed c(ex, dev, rng);
    const std::int32_t bucket = c.stage(rng, 1);
    expect_out_of_order(
        c, [&] { csr_indices(ex, c.b, bucket, at_device_step, c.eng.tables()); },
        kernel_id::csr_indices, -1, round_progress::set_up, round_progress::staged);
  }
}

class RoundOrder : public ExecutorTest {};

TEST_P(RoundOrder, EveryOutOfOrderOpIsRefusedOrRecorded) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  out_of_order_sequences(*ex, rng);
}

// The same sequences on a host executor that runs its work only when the host waits: nothing
// can be read eagerly, so the device path (the order kernel) records every one.
TEST_P(RoundOrder, DeferredWorkRecordsEveryOutOfOrderOpByName) {
  if (GetParam() != "host") GTEST_SKIP() << "the deferred host executor";
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto deferred = make_host_executor({/*deferred=*/true});
  ASSERT_FALSE(deferred->host_visible());
  out_of_order_sequences(*deferred, rng);
}

// Inside a graph: a step graph captured without the setup (the engine forgot it in step 0's
// graph) and replayed after staging records the violation; the order word survives a later
// setup_round (only a round's start resets it) and the next staging clears it.
TEST_P(RoundOrder, AGraphReplayedOutOfOrderRecordsItUntilTheNextRound) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  composed c(*ex, order_config(false), rng);
  const std::int32_t bucket = c.stage(rng, 3);
  ex->begin_capture();
  step_metadata(*ex, c.b, bucket, 1);
  csr_indices(*ex, c.b, bucket, 1, c.eng.tables());
  const std::unique_ptr<graph> g = ex->end_capture();
  const std::unique_ptr<graph_exec> exec = ex->instantiate(*g);
  ex->launch_graph(*exec);
  guard_word w = c.order();
  EXPECT_EQ(w.violations, 2) << describe(w);
  EXPECT_EQ(w.kind, static_cast<std::int32_t>(violation_kind::order));
  EXPECT_EQ(w.kernel, static_cast<std::int32_t>(kernel_id::step_metadata)) << describe(w);
  EXPECT_EQ(w.column, 1);
  setup_round(*ex, c.b, bucket, c.eng.tables());
  w = c.order();
  EXPECT_EQ(w.violations, 2) << "setup_round reset the round.order word: " << describe(w);
  c.stage(rng, 3);
  expect_no_order_violation(c);
  setup_round(*ex, c.b, bucket, c.eng.tables());
  ex->launch_graph(*exec);  // now in order: set up
  expect_no_order_violation(c);
}

// Legitimate use never trips it: steps in any order once set up (no step reads another's
// output), a step repeated, a second setup, CSR in one launch; the tables match the model.
TEST_P(RoundOrder, LegitimateOrdersRecordNothingAndMatchTheModel) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  composed c(*ex, order_config(false), rng);
  for (std::int32_t round = 0; round < 4; ++round) {
    const auto batch = static_cast<std::int32_t>(1 + rng() % 6);
    const std::int32_t bucket = c.stage(rng, batch);
    setup_round(*ex, c.b, bucket, c.eng.tables());
    if (round % 2 == 1) setup_round(*ex, c.b, bucket, c.eng.tables());
    for (const std::int32_t s : {2, 0, 1, 0}) step_metadata(*ex, c.b, bucket, s);
    csr_indices(*ex, c.b, bucket, whole_round, c.eng.tables());
    for (const guard_word& g : read_guards(*ex, c.b)) ASSERT_EQ(g.violations, 0) << describe(g);
    const model_round m = c.eng.model_of(c.round, c.p.config.num_steps);
    ASSERT_EQ(m.bucket, bucket);
    for (std::int32_t s = 0; s < c.p.config.num_steps; ++s) {
      const std::size_t rows = static_cast<std::size_t>(bucket) * c.p.config.topk;
      EXPECT_EQ(c.eng.read(c.b.expand_cache_seqlen(s), rows),
                m.cache_seqlen[static_cast<std::size_t>(s)])
          << "step " << s;
    }
  }
}

// Inputs read in place: setup needs no staging; a step before the first setup is out of order,
// and so is one after begin_round (the round's start) before that round's setup.
TEST_P(RoundOrder, InputsReadInPlaceStartARoundAtBeginRound) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  composed c(*ex, order_config(false), rng);
  const std::int32_t bucket = 4;
  const host_round r = c.random_round(rng, bucket);
  dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
  dvec<std::int64_t> slots(*ex, r.out_cache_loc);
  engine_inputs tensors;
  tensors.req_pool_index = {pool.data(), index_type::int32, 1};
  tensors.seq_len = {seq.data(), index_type::int32, 1};
  const std::int64_t s = c.p.config.slot_stride;
  tensors.out_cache_loc = {slots.data(), index_type::int64, c.p.config.topk * s, s, 1, s};
  const round_source in(c.p, tensors);
  expect_out_of_order(
      c, [&] { step_metadata(*ex, c.b, bucket, 0, in); }, kernel_id::step_metadata, 0,
      round_progress::set_up, round_progress::none);
  if (HasFailure()) return;
  begin_round(*ex, c.b);
  setup_round(*ex, c.b, bucket, c.eng.tables(), in);
  step_metadata(*ex, c.b, bucket, 0, in);
  csr_indices(*ex, c.b, bucket, 0, c.eng.tables(), {}, in);
  expect_no_order_violation(c);
  begin_round(*ex, c.b);
  expect_out_of_order(
      c, [&] { step_metadata(*ex, c.b, bucket, 1, in); }, kernel_id::step_metadata, 1,
      round_progress::set_up, round_progress::staged);
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RoundOrder);

}  // namespace
}  // namespace specgraph::testing
