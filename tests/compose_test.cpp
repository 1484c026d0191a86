// Composition with the engine: the capture-safe ops recorded into a capture the engine owns,
// buffers over caller memory, int32 and int64 inputs, and the pinned staging ring. Each compares
// with what draft_runtime produces for the same rounds.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/error.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/runtime.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

draft_config compose_config(std::int32_t page_size = 4) {
  draft_config c;
  c.max_batch = 12;
  c.topk = 3;
  c.num_steps = 4;
  c.page_size = page_size;
  c.max_context_len = 64;
  c.pool_rows = 16;
  c.kv_slots = 1 << 20;
  return c;
}

// Everything a staged round of `bucket` produced up to `depth`, read back from buffers `b`, with
// the probe outputs at probe[s * probe_stride].
struct round_snapshot {
  std::vector<std::int32_t> small_inputs, prefix;
  std::vector<std::int64_t> slots;
  std::vector<std::vector<std::int32_t>> expand;
  std::vector<std::vector<std::int64_t>> probe;
  bool operator==(const round_snapshot& o) const {
    return small_inputs == o.small_inputs && prefix == o.prefix && slots == o.slots &&
           expand == o.expand && probe == o.probe;
  }
};

template <class T>
std::vector<T> read_back(executor& ex, const T* p, std::size_t n) {
  std::vector<T> out(n);
  ex.copy_to_host(out.data(), p, n * sizeof(T));
  return out;
}

round_snapshot snapshot(executor& ex, const draft_buffers& b, std::int32_t bucket,
                        std::int32_t depth, const std::int64_t* probe, std::size_t probe_stride) {
  const draft_config& c = b.plan().config;
  const auto B = static_cast<std::size_t>(bucket);
  const std::size_t rows = B * static_cast<std::size_t>(c.topk);
  round_snapshot s;
  s.small_inputs = read_back(ex, b.real_batch(), 1);
  const auto pool = read_back(ex, b.req_pool_index(), B);
  const auto seq = read_back(ex, b.seq_len(), B);
  s.small_inputs.insert(s.small_inputs.end(), pool.begin(), pool.end());
  s.small_inputs.insert(s.small_inputs.end(), seq.begin(), seq.end());
  s.slots = read_back(ex, b.out_cache_loc(), rows * static_cast<std::size_t>(c.num_steps));
  s.prefix = read_back(ex, b.prefix_page_table(),
                       B * static_cast<std::size_t>(b.plan().layout.prefix_capacity));
  for (const auto x : read_back(ex, b.last_page_len(), B)) s.prefix.push_back(x);
  for (const auto x : read_back(ex, b.prefix_seqlen(), B)) s.prefix.push_back(x);
  for (const auto x : read_back(ex, b.cu_seqlens_q(), B + 1)) s.prefix.push_back(x);
  for (std::int32_t st = 0; st < depth; ++st) {
    auto table = read_back(ex, b.expand_page_table(st), rows * static_cast<std::size_t>(st + 2));
    for (const auto x : read_back(ex, b.expand_cache_seqlen(st), rows)) table.push_back(x);
    s.expand.push_back(table);
    s.probe.push_back(read_back(ex, probe + static_cast<std::size_t>(st) * probe_stride, rows));
  }
  return s;
}

round_snapshot snapshot(executor& ex, sim_engine& eng, std::int32_t depth) {
  const std::size_t stride = static_cast<std::size_t>(eng.rt().plan().max_rows());
  return snapshot(ex, eng.rt().buffers(), eng.rt().staged_bucket(), depth, eng.probe_out(0),
                  stride);
}

class Compose : public ExecutorTest {};

// The engine owns the capture: it begins it, calls the ops and its own kernel inside, ends and
// instantiates it, and replays it. The tables and forward inputs equal draft_runtime's.
TEST_P(Compose, OpsRecordedInTheEnginesOwnCaptureEqualDraftRuntime) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const draft_config cfg = compose_config(4);
  sim_engine eng(*ex, cfg, rng);
  eng.rt().capture();

  const plan p = make_plan(cfg);
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  initialize_buffers(*ex, b);
  const auto rows = static_cast<std::size_t>(p.max_rows());
  device_buffer probe(*ex, rows * static_cast<std::size_t>(cfg.num_steps) * sizeof(std::int64_t));
  std::map<std::int32_t, std::vector<std::unique_ptr<graph_exec>>> graphs;
  for (const std::int32_t bucket : p.config.buckets) {
    for (std::int32_t s = 0; s < cfg.num_steps; ++s) {
      ex->begin_capture();
      if (s == 0) setup_round(*ex, b, bucket, eng.tables());
      step_metadata(*ex, b, bucket, s);
      sim_engine::probe_forward(*ex, b.view(bucket, s),
                                probe.as<std::int64_t>() + static_cast<std::size_t>(s) * rows);
      graphs[bucket].push_back(ex->instantiate(*ex->end_capture()));
    }
  }
  const std::vector<std::int32_t>& buckets = p.config.buckets;
  for (int round = 0; round < 40; ++round) {
    const auto i = static_cast<std::size_t>(round);
    const std::int32_t batch = i < buckets.size() ? (i == 0 ? 1 : buckets[i - 1] + 1)
                                                  : static_cast<std::int32_t>(1 + rng() % 12);
    const auto depth = static_cast<std::int32_t>(1 + rng() % 4);
    SCOPED_TRACE("round " + std::to_string(round) + ", batch " + std::to_string(batch));
    const host_round r = eng.random_round(rng, batch);
    eng.rt().stage(r.inputs());
    eng.rt().run_round(depth);

    dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
    dvec<std::int64_t> slots(*ex, r.out_cache_loc);
    const std::int32_t bucket = stage_round(*ex, b, {batch, pool.data(), seq.data(), slots.data()});
    ASSERT_EQ(bucket, eng.rt().staged_bucket());
    for (std::int32_t s = 0; s < depth; ++s)
      ex->launch_graph(*graphs[bucket][static_cast<std::size_t>(s)]);
    EXPECT_TRUE(snapshot(*ex, b, bucket, depth, probe.as<std::int64_t>(), rows) ==
                snapshot(*ex, eng, depth));
    if (HasFailure()) return;
  }
}

// stage_round is capture-safe too: an engine whose batches are padded to the bucket before they
// reach specgraph (batch == bucket) records it into the graph, reading its own static inputs.
TEST_P(Compose, StagingRecordedInsideTheGraphReadsTheEnginesStaticInputs) {
  std::mt19937_64 rng(test_seed());
  const draft_config cfg = compose_config(2);
  sim_engine eng(*ex, cfg, rng);
  eng.rt().capture();
  const plan p = make_plan(cfg);
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  initialize_buffers(*ex, b);
  const std::int32_t bucket = 6;
  const auto per_request = static_cast<std::size_t>(cfg.topk * cfg.num_steps);
  dvec<std::int64_t> pool(*ex, 6, 0), seq(*ex, 6, 1);  // the engine keeps int64 indices
  dvec<std::int64_t> slots(*ex, 6 * per_request, 0);
  const auto rows = static_cast<std::size_t>(p.max_rows());
  device_buffer probe(*ex, rows * 4 * sizeof(std::int64_t));
  ex->begin_capture();
  EXPECT_EQ(stage_round(*ex, b, {bucket, pool.data(), seq.data(), slots.data()}), bucket);
  setup_round(*ex, b, bucket, eng.tables());
  for (std::int32_t s = 0; s < 4; ++s) {
    step_metadata(*ex, b, bucket, s);
    sim_engine::probe_forward(*ex, b.view(bucket, s),
                              probe.as<std::int64_t>() + static_cast<std::size_t>(s) * rows);
  }
  auto round_graph = ex->instantiate(*ex->end_capture());
  for (int round = 0; round < 6; ++round) {
    const host_round r = eng.random_round(rng, bucket);
    const std::vector<std::int64_t> pool64(r.req_pool_index.begin(), r.req_pool_index.end());
    const std::vector<std::int64_t> seq64(r.seq_len.begin(), r.seq_len.end());
    ex->copy_to_device(pool.data(), pool64.data(), 6 * sizeof(std::int64_t));
    ex->copy_to_device(seq.data(), seq64.data(), 6 * sizeof(std::int64_t));
    ex->copy_to_device(slots.data(), r.out_cache_loc.data(), 6 * per_request * 8);
    ex->launch_graph(*round_graph);
    eng.rt().stage(r.inputs());
    eng.rt().run_round(4);
    EXPECT_TRUE(snapshot(*ex, b, bucket, 4, probe.as<std::int64_t>(), rows) ==
                snapshot(*ex, eng, 4))
        << "round " << round;
  }
}

// Caller memory: the runtime writes only inside [arena, arena + total_bytes), round after round.
TEST_P(Compose, CallerArenaIsWrittenOnlyInsideItsBlock) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  const draft_config cfg = compose_config(2);
  const plan p = make_plan(cfg);
  const std::size_t pad = 4096;
  device_buffer block(*ex, pad + p.total_bytes + pad);
  ex->fill_bytes(block.data(), 0xA5, block.size());
  std::mt19937_64 rng_a(seed), rng_b(seed);
  sim_engine eng(*ex, cfg, rng_a, block.as<unsigned char>() + pad);
  sim_engine reference(*ex, cfg, rng_b);  // same seed: same pool, same rounds
  eng.rt().capture();
  reference.rt().capture();
  for (int round = 0; round < 30; ++round) {
    const auto batch = static_cast<std::int32_t>(1 + rng_a() % 12);
    (void)rng_b();
    const auto depth = static_cast<std::int32_t>(1 + rng_a() % 4);
    (void)rng_b();
    const host_round r = eng.random_round(rng_a, batch);
    (void)reference.random_round(rng_b, batch);
    eng.rt().stage(r.inputs());
    eng.rt().run_round(depth);
    reference.rt().stage(r.inputs());
    reference.rt().run_round(depth);
    ASSERT_TRUE(snapshot(*ex, eng, depth) == snapshot(*ex, reference, depth)) << "round " << round;
  }
  const auto bytes = read_back(*ex, block.as<unsigned char>(), block.size());
  for (std::size_t i = 0; i < pad; ++i) {
    ASSERT_EQ(bytes[i], 0xA5) << "byte " << i << " before the arena was written";
    ASSERT_EQ(bytes[pad + p.total_bytes + i], 0xA5) << "byte " << i << " after the arena";
  }
}

TEST_P(Compose, TwoRuntimesOverTwoHalvesOfOneAllocationDoNotInterfere) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  const draft_config cfg = compose_config(4);
  const plan p = make_plan(cfg);
  device_buffer block(*ex, 2 * p.total_bytes);
  std::mt19937_64 ra(seed), rb(seed + 1), ra_ref(seed), rb_ref(seed + 1);
  sim_engine a(*ex, cfg, ra, block.data());
  sim_engine b(*ex, cfg, rb, block.as<unsigned char>() + p.total_bytes);
  sim_engine a_ref(*ex, cfg, ra_ref), b_ref(*ex, cfg, rb_ref);
  for (sim_engine* e : {&a, &b, &a_ref, &b_ref}) e->rt().capture();
  for (int round = 0; round < 20; ++round) {
    const auto batch_a = static_cast<std::int32_t>(1 + round % 12);
    const auto batch_b = static_cast<std::int32_t>(12 - round % 12);
    const host_round x = a.random_round(ra, batch_a);
    (void)a_ref.random_round(ra_ref, batch_a);
    const host_round y = b.random_round(rb, batch_b);
    (void)b_ref.random_round(rb_ref, batch_b);
    // Interleaved: a's round is staged, then b's, then both replay.
    a.rt().stage(x.inputs());
    b.rt().stage(y.inputs());
    a.rt().run_round(4);
    b.rt().run_round(3);
    a_ref.rt().stage(x.inputs());
    a_ref.rt().run_round(4);
    b_ref.rt().stage(y.inputs());
    b_ref.rt().run_round(3);
    ASSERT_TRUE(snapshot(*ex, a, 4) == snapshot(*ex, a_ref, 4)) << "a, round " << round;
    ASSERT_TRUE(snapshot(*ex, b, 3) == snapshot(*ex, b_ref, 3)) << "b, round " << round;
  }
}

// SGLang keeps req_pool_indices and seq_lens as int64: the same values give the same tables,
// through host staging and device staging; a value that does not fit int32 is refused by name.
TEST_P(Compose, Int32AndInt64IndicesGiveIdenticalTablesAndNothingIsNarrowed) {
  std::mt19937_64 rng(test_seed());
  draft_config cfg = compose_config(4);
  sim_engine eng(*ex, cfg, rng);
  eng.rt().capture();
  for (int round = 0; round < 8; ++round) {
    const host_round r = eng.random_round(rng, static_cast<std::int32_t>(1 + rng() % 12));
    const std::vector<std::int64_t> pool64(r.req_pool_index.begin(), r.req_pool_index.end());
    const std::vector<std::int64_t> seq64(r.seq_len.begin(), r.seq_len.end());
    eng.rt().stage(r.inputs());
    eng.rt().run_round(4);
    const round_snapshot want = snapshot(*ex, eng, 4);
    round_inputs wide{r.batch, pool64.data(), seq64.data(), r.out_cache_loc.data()};
    eng.rt().stage(wide);
    eng.rt().run_round(4);
    EXPECT_TRUE(snapshot(*ex, eng, 4) == want) << "host staging, round " << round;
    dvec<std::int64_t> pool(*ex, pool64), seq(*ex, seq64), slots(*ex, r.out_cache_loc);
    dvec<std::int32_t> seq32(*ex, r.seq_len);
    eng.rt().stage_device({r.batch, pool.data(), seq32.data(), slots.data()});  // mixed widths
    eng.rt().run_round(4);
    EXPECT_TRUE(snapshot(*ex, eng, 4) == want) << "device staging, round " << round;
  }

  host_round r = eng.random_round(rng, 5);
  eng.rt().stage(r.inputs());
  const auto before = read_back(*ex, eng.rt().buffers().base(), eng.rt().plan().total_bytes);
  std::vector<std::int64_t> pool64(r.req_pool_index.begin(), r.req_pool_index.end());
  pool64[2] = (std::int64_t{1} << 32) + 1;  // would narrow to pool row 1
  try {
    eng.rt().stage({r.batch, pool64.data(), r.seq_len.data(), r.out_cache_loc.data()});
    ADD_FAILURE() << "an int64 pool index above int32 must be rejected";
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "req_pool_index[2]") << e.what();
    EXPECT_NE(std::string(e.what()).find("4294967297 is outside [0, pool_rows 16)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_back(*ex, eng.rt().buffers().base(), eng.rt().plan().total_bytes), before);

  // On the device the kernel refuses it: the request is staged as a padded one (pool row 0,
  // one token, every slot 0; nothing of the earlier round survives) and the guard names it.
  std::vector<std::int64_t> seq64(r.seq_len.begin(), r.seq_len.end());
  seq64[4] = -(std::int64_t{1} << 40);
  dvec<std::int64_t> pool(*ex, pool64), seq(*ex, seq64), slots(*ex, r.out_cache_loc);
  eng.rt().stage_device({r.batch, pool.data(), seq.data(), slots.data()});
  eng.rt().run_round(1);
  const guard_word g = eng.rt().read_guards()[plan_layout::guard_stage];
  EXPECT_EQ(g.violations, 2);
  EXPECT_EQ(g.kind, static_cast<std::int32_t>(violation_kind::bad_input));
  EXPECT_EQ(g.kernel, static_cast<std::int32_t>(kernel_id::stage_inputs));
  EXPECT_EQ(g.row, 2);
  EXPECT_EQ(g.column, 0) << "column 0 names req_pool_index";
  EXPECT_EQ(g.value, (std::int64_t{1} << 32) + 1);
  const draft_buffers& b = eng.rt().buffers();
  for (const std::size_t refused : {std::size_t{2}, std::size_t{4}}) {
    EXPECT_EQ(read_back(*ex, b.req_pool_index(), 5)[refused], 0) << "request " << refused;
    EXPECT_EQ(read_back(*ex, b.seq_len(), 5)[refused], 1) << "request " << refused;
    const auto slots_staged = read_back(*ex, b.out_cache_loc(), 5 * 12);
    for (std::size_t j = 0; j < 12; ++j) EXPECT_EQ(slots_staged[refused * 12 + j], 0);
  }
}

// The non-syncing production check: the violation total lands in an engine-owned int32 on the
// stream, recordable in a graph, with no read-back.
TEST_P(Compose, ViolationCountIsWrittenOnTheStreamWithoutASync) {
  std::mt19937_64 rng(test_seed());
  sim_engine eng(*ex, compose_config(4), rng);
  eng.rt().capture();
  dvec<std::int32_t> flag(*ex, 1, -1);
  host_round r = eng.random_round(rng, 3);
  r.out_cache_loc[0] = -1;
  r.out_cache_loc[4] = -2;  // row 1, draft token 0
  dvec<std::int32_t> pool(*ex, r.req_pool_index), seq(*ex, r.seq_len);
  dvec<std::int64_t> slots(*ex, r.out_cache_loc);
  eng.rt().stage_device({r.batch, pool.data(), seq.data(), slots.data()});
  eng.rt().run_round(1);
  const std::int64_t syncs = ex->counters().synchronizations;
  const std::int64_t reads = ex->counters().copies_to_host;
  count_violations(*ex, eng.rt().buffers(), flag.data());
  EXPECT_EQ(ex->counters().synchronizations, syncs);
  EXPECT_EQ(ex->counters().copies_to_host, reads);
  EXPECT_EQ(flag.download()[0], 2);  // rows 0 and 1 of step 0 refused
  eng.rt().stage(eng.random_round(rng, 3).inputs());
  eng.rt().run_round(4);
  count_violations(*ex, eng.rt().buffers(), flag.data());
  EXPECT_EQ(flag.download()[0], 0);
}

SPECGRAPH_INSTANTIATE_EXECUTORS(Compose);

// The pinned staging ring, on a host executor whose work runs only when the host waits for it
// (a slow device): stage() never waits while a slot is free, waits exactly when all are in
// flight, and every round's replay sees that round's inputs. Fails if a slot in flight is
// rewritten (e.g. a ring without the event wait, or a single slot).
TEST(StagingRing, NeverRewritesASlotInFlightAndWaitsOnlyWhenFull) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  auto slow = make_host_executor({/*deferred=*/true});
  auto immediate = make_host_executor();
  const draft_config cfg = compose_config(4);
  std::mt19937_64 rng(seed), rng_ref(seed);
  sim_engine eng(*slow, cfg, rng);
  sim_engine ref(*immediate, cfg, rng_ref);
  eng.rt().capture();
  ref.rt().capture();
  const std::size_t rows = static_cast<std::size_t>(eng.rt().plan().max_rows());
  const int rounds = 9;
  // Per-round copies of what the replay produced, taken by stream-ordered device copies.
  std::vector<std::unique_ptr<device_buffer>> kept;
  std::vector<round_snapshot> want;
  std::vector<std::int32_t> buckets;
  const std::int64_t waits_before = slow->counters().event_waits;
  for (int round = 0; round < rounds; ++round) {
    const auto batch = static_cast<std::int32_t>(1 + rng() % 12);
    (void)rng_ref();
    const host_round r = eng.random_round(rng, batch);
    (void)ref.random_round(rng_ref, batch);
    eng.rt().stage(r.inputs());
    EXPECT_EQ(slow->counters().event_waits - waits_before,
              std::max(0, round + 1 - draft_runtime::staging_slots))
        << "round " << round;
    eng.rt().run_round(4);
    const auto& b = eng.rt().buffers();
    auto copy = std::make_unique<device_buffer>(*slow, eng.rt().plan().total_bytes + rows * 4 * 8);
    slow->copy_on_device(copy->data(), b.base(), eng.rt().plan().total_bytes);
    slow->copy_on_device(copy->as<unsigned char>() + eng.rt().plan().total_bytes, eng.probe_out(0),
                         rows * 4 * 8);
    kept.push_back(std::move(copy));
    buckets.push_back(eng.rt().staged_bucket());
    ref.rt().stage(r.inputs());
    ref.rt().run_round(4);
    want.push_back(snapshot(*immediate, ref, 4));
  }
  slow->synchronize();
  for (int round = 0; round < rounds; ++round) {
    const device_buffer& copy = *kept[static_cast<std::size_t>(round)];
    const draft_buffers b(eng.rt().plan(), copy.data());
    const auto* probe = reinterpret_cast<const std::int64_t*>(copy.as<unsigned char>() +
                                                              eng.rt().plan().total_bytes);
    EXPECT_TRUE(snapshot(*slow, b, buckets[static_cast<std::size_t>(round)], 4, probe, rows) ==
                want[static_cast<std::size_t>(round)])
        << "round " << round << " replayed with another round's inputs";
  }
}

TEST(Errors, InvalidArgumentNamesFieldAndTheCheckingLocation) {
  draft_config c = compose_config();
  c.topk = 0;
  try {
    (void)make_plan(c);
    FAIL() << "topk 0 must be rejected";
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "topk");
    EXPECT_EQ(std::string(e.what()),
              "topk: 0 is below the minimum 1 (the range is 1 to the limit 1024)");
    EXPECT_NE(e.location().find("graphs/plan.cpp:"), std::string::npos) << e.location();
  }
}

}  // namespace
}  // namespace specgraph::testing
