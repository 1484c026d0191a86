// draft_runtime over plans holding the CSR draft-decode indices (formats csr or both;
// docs/csr.md, docs/device-rounds.md): in every replay mode (per-step graphs, eager steps, the
// whole-round graph, the device step counter, the device-decided depth) each step run writes its
// kv_indptr row and kv_indices exactly as the independent reference says (padded buckets,
// topk > 1, page sizes > 1, int32 and int64), the forward reads that step's CSR buffers through
// its step_view, every cell not written keeps its poison, and a csr-only plan writes no FA3 cell.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "specgraph/plan.hpp"
#include "specgraph/runtime.hpp"
#include "testing/branch_layout.hpp"
#include "testing/csr_probe.hpp"
#include "tests/kv_indices_reference.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t ctx = 128, pool_rows = 16;
constexpr std::int64_t probe_poison = -1;

enum class mode { per_step, eager, round_graph, counter, device_depth };
const char* name_of(mode m) {
  const char* names[] = {"per-step graphs", "eager", "round graph", "device counter",
                         "device depth"};
  return names[static_cast<int>(m)];
}

draft_config random_config(std::mt19937_64& rng, mode m) {
  const std::int32_t page_sizes[] = {1, 2, 4, 16};
  draft_config c;
  c.max_batch = 12;  // buckets 1..8, 10, 12: batches 9 and 11 are padded
  c.topk = static_cast<std::int32_t>(1 + rng() % 3);
  c.num_steps = static_cast<std::int32_t>(1 + rng() % 4);
  c.page_size = page_sizes[rng() % 4];
  c.max_context_len = ctx;
  c.pool_rows = pool_rows;
  c.kv_slots = 1 << 20;
  c.formats = rng() % 2 == 0 ? metadata_formats::csr : metadata_formats::both;
  c.csr_int64 = rng() % 2 == 0;
  c.round_graphs = m == mode::round_graph;
  c.device_steps = m == mode::counter || m == mode::device_depth;
  c.device_depth = m == mode::device_depth;
  return c;
}

// A round laid out as an engine lays it out, seq_len short enough for every branch region of the
// ctx-wide req_to_token rows (docs/csr.md section 1).
host_round csr_round(std::mt19937_64& rng, const draft_config& c, std::int32_t batch) {
  const std::int32_t ps = c.page_size;
  const std::int32_t region = (ps - 1 + c.num_steps + ps - 1) / ps * ps;
  const std::int32_t longest = ctx - (c.topk - 1) * region - c.num_steps;
  const branch_round b = make_branch_round(rng, batch, c.topk, c.num_steps, ps, longest);
  host_round r;
  r.batch = batch;
  r.seq_len = b.seq_len;
  r.out_cache_loc = b.cache_loc;
  std::vector<std::int32_t> rows(static_cast<std::size_t>(pool_rows - 1));
  std::iota(rows.begin(), rows.end(), 1);
  std::shuffle(rows.begin(), rows.end(), rng);
  r.req_pool_index.assign(rows.begin(), rows.begin() + batch);
  return r;
}

kv_expected reference(const sim_engine& eng, const host_round& r, std::int32_t bucket) {
  const draft_config& c = eng.config();
  kv_case k;
  k.page_size = c.page_size;
  k.topk = c.topk;
  k.num_steps = c.num_steps;
  k.max_seq_len = ctx;
  k.pool_rows = pool_rows;
  k.width = ctx;
  k.req_to_token = eng.req_to_token();
  k.req_pool_index = r.req_pool_index;
  k.seq_len = r.seq_len;
  k.req_pool_index.resize(static_cast<std::size_t>(bucket), 0);  // padding: pool row 0
  k.seq_len.resize(static_cast<std::size_t>(bucket), 1);         // and seq_len 1
  k.step_count = c.num_steps;
  k.capacity = 0x7fffffff;
  return kv_reference(k);
}

// What the probe folds for row q of a step, from the reference.
std::int64_t probe_of(const kv_expected& want, std::size_t step, std::size_t q) {
  const auto begin = want.indptr[step][q], end = want.indptr[step][q + 1];
  std::uint64_t h =
      csr_probe_kernel::mix(csr_probe_kernel::mix(csr_probe_kernel::seed, begin), end);
  for (auto f = begin; f < end; ++f) {
    h = csr_probe_kernel::mix(h, want.ids[step][static_cast<std::size_t>(f)]);
  }
  return static_cast<std::int64_t>(h);
}

std::vector<std::int64_t> read_ids(sim_engine& eng, const void* p, std::size_t n, bool int64) {
  if (int64) return eng.read(static_cast<const std::int64_t*>(p), n);
  const auto narrow = eng.read(static_cast<const std::int32_t*>(p), n);
  return {narrow.begin(), narrow.end()};
}

// Steps [0, depth) hold the reference in the arena and in what the forward read; every other
// CSR cell, and every probe output of a step not run, keeps its poison; the guards are clean.
void expect_csr_round(sim_engine& eng, const host_round& r, std::int32_t depth,
                      const dvec<std::int64_t>& probe) {
  const draft_runtime& rt = eng.rt();
  const plan& p = rt.plan();
  const draft_buffers& b = rt.buffers();
  const bool int64 = p.config.csr_int64;
  const std::int32_t bucket = rt.staged_bucket();
  const kv_expected want = reference(eng, r, bucket);
  const std::int64_t max_rows = p.max_rows();
  const auto n = static_cast<std::size_t>(bucket * p.config.topk);
  const std::int64_t poison = int64 ? static_cast<std::int64_t>(0xA5A5A5A5A5A5A5A5ull)
                                    : static_cast<std::int32_t>(0xA5A5A5A5u);
  const auto probe_out = probe.download();
  for (std::int32_t s = 0; s < p.config.num_steps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s) + " of depth " + std::to_string(depth));
    const bool ran = s < depth;
    const auto st = static_cast<std::size_t>(s);
    const auto indptr =
        eng.read(b.csr_kv_indptr() + s * (max_rows + 1), static_cast<std::size_t>(max_rows + 1));
    for (std::size_t j = 0; j < indptr.size(); ++j) {
      ASSERT_EQ(indptr[j], ran && j <= n ? want.indptr[st][j] : static_cast<std::int32_t>(poison))
          << "kv_indptr " << j;
    }
    const std::int64_t cells =
        p.config.device_steps ? p.layout.csr_kv_indices_stride : p.layout.csr_capacity[st];
    const auto ids = read_ids(eng, b.csr_kv_indices(s), static_cast<std::size_t>(cells), int64);
    const std::size_t used = ran ? want.ids[st].size() : 0;
    for (std::size_t f = 0; f < ids.size(); ++f) {
      ASSERT_EQ(ids[f], f < used ? want.ids[st][f] : poison) << "kv_indices " << f;
    }
    for (std::size_t q = 0; q < static_cast<std::size_t>(max_rows); ++q) {
      const std::int64_t got = probe_out[st * static_cast<std::size_t>(max_rows) + q];
      ASSERT_EQ(got, ran && q < n ? probe_of(want, st, q) : probe_poison)
          << "what the forward read, row " << q;
    }
  }
  for (const guard_word& g : eng.rt().read_guards()) ASSERT_EQ(g.violations, 0) << describe(g);
}

// A csr-only plan: the FA3-side buffers a plan keeps anyway (the prefix inputs and scratch) and
// the forward's confidence row keep every poisoned byte.
void expect_no_fa3_cell_written(sim_engine& eng) {
  const plan& p = eng.rt().plan();
  const auto* base = eng.rt().buffers().base();
  for (const buffer_spec& spec : p.buffers) {
    const bool fa3_side = spec.name.rfind("prefix.", 0) == 0 || spec.name.rfind("expand.", 0) == 0;
    if (!fa3_side && spec.name != "round.confidence") continue;
    const auto bytes = eng.read(base + spec.offset, spec.bytes);
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      ASSERT_EQ(bytes[i], 0xA5) << spec.name << " byte " << i << " written by a csr-only plan";
    }
  }
}

class RuntimeCsr : public ExecutorTest {};

void run_mode(executor& ex, mode m, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int config = 0; config < 4; ++config) {
    const draft_config c = random_config(rng, m);
    SCOPED_TRACE(std::string(name_of(m)) + ", config " + std::to_string(config) + ": topk " +
                 std::to_string(c.topk) + " ps " + std::to_string(c.page_size) + " steps " +
                 std::to_string(c.num_steps) + " " + to_string(c.formats) +
                 (c.csr_int64 ? " int64" : " int32"));
    sim_engine eng(ex, c, rng);
    const plan& p = eng.rt().plan();
    const bool fa3 = p.layout.has_fa3;
    const std::int64_t max_rows = p.max_rows();
    dvec<std::int64_t> probe(ex, static_cast<std::size_t>(max_rows * c.num_steps), probe_poison);
    eng.rt().set_forward([&](const step_view& v) {
      if (fa3) eng.probe_forward(v);  // the FA3 tables, beside the CSR ones
      launch_csr_probe(*v.ex, v, c.num_steps, probe.data() + v.step * max_rows, max_rows);
    });
    eng.rt().capture();
    for (int round = 0; round < 6; ++round) {
      const auto batch = static_cast<std::int32_t>(1 + rng() % 12);
      const auto depth =
          m == mode::round_graph ? c.num_steps : static_cast<std::int32_t>(1 + rng() % c.num_steps);
      SCOPED_TRACE("round " + std::to_string(round) + ", batch " + std::to_string(batch) +
                   ", depth " + std::to_string(depth));
      const host_round r = csr_round(rng, c, batch);
      eng.poison();
      ex.fill_bytes(probe.data(), 0xFF, probe.size() * sizeof(std::int64_t));  // -1
      round_inputs in = r.inputs();
      in.max_depth = m == mode::device_depth ? depth : 0;
      eng.rt().stage(in);
      if (m == mode::device_depth) {
        eng.rt().run_round_on_device();
        ASSERT_EQ(eng.rt().read_round_depth(), depth);
      } else if (m == mode::eager) {
        for (std::int32_t s = 0; s < depth; ++s) eng.rt().run_eager(s);
      } else {
        eng.rt().run_round(depth);
      }
      expect_csr_round(eng, r, depth, probe);
      if (fa3 && !c.device_steps) {
        expect_matches_model(eng, eng.model_of(r, depth), depth);
      } else if (fa3) {  // the shared expand table: what the forward read at each step
        const model_round want = eng.model_of(r, depth);
        const auto rows = static_cast<std::size_t>(want.bucket * c.topk);
        for (std::int32_t s = 0; s < depth; ++s) {
          ASSERT_EQ(eng.read(eng.probe_out(s), rows), want.probe[static_cast<std::size_t>(s)]);
        }
      } else {
        expect_no_fa3_cell_written(eng);
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST_P(RuntimeCsr, EveryStepRunWritesTheReferenceAndTheForwardReadsIt) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  for (const mode m :
       {mode::per_step, mode::eager, mode::round_graph, mode::counter, mode::device_depth}) {
    run_mode(*ex, m, seed);
    if (HasFailure()) return;
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RuntimeCsr);

// A request whose req_to_token row has no room for its branch regions (seq_len near
// max_context_len, topk 2: staging accepts it, the CSR kernels cannot read its draft positions):
// its rows are a padded request's (docs/csr.md section 2), the other request's rows are whole,
// and checked mode names the CSR buffer, the step, the bucket and the request's first row.
TEST(RuntimeCsrChecked, ARowWithoutRoomForTheBranchesIsRefusedByName) {
  const auto ex = make_executor("host");
  std::mt19937_64 rng(7);
  draft_config c = random_config(rng, mode::per_step);
  c.topk = 2;
  c.num_steps = 3;
  c.page_size = 4;
  c.formats = metadata_formats::csr;
  c.checked = true;
  sim_engine eng(*ex, c, rng);
  eng.rt().set_forward([](const step_view&) {});
  eng.rt().capture();
  host_round r = csr_round(rng, c, 2);
  r.seq_len[1] = ctx - 1;  // needs position ctx - 1 + 4 * 1 + 2 (branch 1, draft token 2)
  eng.rt().stage(r.inputs());
  try {
    eng.rt().run_round(1);
    ADD_FAILURE() << "expected guard_violation";
  } catch (const guard_violation& e) {
    EXPECT_NE(std::string(e.what()).find("csr.kv_indices (step 0, bucket 2, row 2)"),
              std::string::npos)
        << e.what();
  }
  const kv_expected want = reference(eng, r, 2);
  const auto indptr = eng.read(eng.rt().buffers().csr_kv_indptr(), 5);
  EXPECT_EQ(indptr, want.indptr[0]);
  // Step 0 of a padded request: its one prefix position and draft token 0, per branch.
  EXPECT_EQ(indptr[4] - indptr[2], 2 * (1 + 1)) << "request 1's rows are a padded request's";
  EXPECT_EQ(indptr[2], 2 * (r.seq_len[0] + 1)) << "request 0's rows are whole";
}

}  // namespace
}  // namespace specgraph::testing
