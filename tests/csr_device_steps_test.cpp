// The CSR draft-decode indices under a device step counter (csr_indices(at_device_step),
// docs/device-rounds.md): one body replayed step after step, or run by a WHILE node whose depth
// the device decides, writes each step's kv_indptr row and kv_indices exactly as the independent
// reference (tests/kv_indices_reference.hpp) says, into the plan's arena and the engine's
// buffers, every other cell left as it was (poisoned); a counter outside the round writes nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "specgraph/csr_ops.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "tests/kv_indices_reference.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t ctx = 256, pool_rows = 9;
constexpr unsigned char poison_byte = 0xA5;
constexpr std::int32_t engine_poison = -5;

struct setup {
  draft_config config;
  std::vector<std::int32_t> req_to_token, pool, seq;  // the real requests
};

// A random device-steps configuration and round: topk 1..4, page size 1/2/4/16, 1..4 steps,
// int32 or int64 indices, FA3 beside CSR or not; seq_len short enough for the branch regions.
setup random_setup(std::mt19937_64& rng, bool device_depth) {
  setup s;
  draft_config& c = s.config;
  const std::int32_t page_sizes[] = {1, 2, 4, 16};
  c.max_batch = 6;
  c.topk = static_cast<std::int32_t>(1 + rng() % 4);
  c.num_steps = static_cast<std::int32_t>(1 + rng() % 4);
  c.page_size = page_sizes[rng() % 4];
  c.max_context_len = ctx;
  c.pool_rows = pool_rows;
  c.kv_slots = std::int64_t{1} << 24;
  c.buckets = {2, 4, 6};
  c.device_steps = true;
  c.device_depth = device_depth;
  c.formats = rng() % 2 == 0 ? metadata_formats::csr : metadata_formats::both;
  c.csr_int64 = rng() % 2 == 0;
  for (std::int32_t i = 0; i < pool_rows * ctx; ++i) {
    s.req_to_token.push_back(static_cast<std::int32_t>((rng() % 4096) * 64 + i % 64));
  }
  const std::int32_t ps = c.page_size;
  const std::int32_t region = (ps - 1 + c.num_steps + ps - 1) / ps * ps;  // the widest ps * nnp
  const std::int32_t longest = ctx - (c.topk - 1) * region - c.num_steps;
  const auto batch = static_cast<std::int32_t>(1 + rng() % 6);
  for (std::int32_t r = 0; r < batch; ++r) {
    s.pool.push_back(static_cast<std::int32_t>(1 + rng() % (pool_rows - 1)));
    s.seq.push_back(static_cast<std::int32_t>(1 + rng() % static_cast<std::uint64_t>(longest)));
  }
  return s;
}

// The reference for the staged bucket: the real requests, then padding (seq_len 1, row 0).
kv_expected expected(const setup& s, std::int32_t bucket) {
  kv_case k;
  k.page_size = s.config.page_size;
  k.topk = s.config.topk;
  k.num_steps = s.config.num_steps;
  k.max_seq_len = ctx;
  k.pool_rows = pool_rows;
  k.width = ctx;
  k.req_to_token = s.req_to_token;
  k.req_pool_index = s.pool;
  k.seq_len = s.seq;
  k.req_pool_index.resize(static_cast<std::size_t>(bucket), 0);
  k.seq_len.resize(static_cast<std::size_t>(bucket), 1);
  k.step_count = s.config.num_steps;
  k.capacity = 0x7fffffff;
  return kv_reference(k);
}

std::int64_t arena_poison(bool int64) {
  return int64 ? static_cast<std::int64_t>(0xA5A5A5A5A5A5A5A5ull)
               : static_cast<std::int32_t>(0xA5A5A5A5u);
}

// kv_indices cells as int64, whatever their type.
std::vector<std::int64_t> read_ids(executor& ex, const void* p, std::size_t n, bool int64) {
  std::vector<std::int64_t> out(n);
  if (int64) {
    ex.copy_to_host(out.data(), p, n * sizeof(std::int64_t));
    return out;
  }
  std::vector<std::int32_t> narrow(n);
  ex.copy_to_host(narrow.data(), p, n * sizeof(std::int32_t));
  for (std::size_t i = 0; i < n; ++i) out[i] = narrow[i];
  return out;
}

// The engine's buffers: one cell wider than check_csr_outputs needs, per step and per row.
struct engine_outputs {
  std::int64_t indptr_stride, indices_stride;
  dvec<std::int32_t> indptr;
  dvec<std::int64_t> indices;  // int32 plans use the first half as int32 cells
  engine_outputs(executor& ex, const plan& p)
      : indptr_stride(p.max_rows() + 2),
        indices_stride(p.layout.csr_capacity.back() + 1),
        indptr(ex, static_cast<std::size_t>(p.config.num_steps * indptr_stride), engine_poison),
        indices(ex, static_cast<std::size_t>(p.config.num_steps * indices_stride),
                p.config.csr_int64 ? engine_poison
                                   : static_cast<std::int64_t>(
                                         (static_cast<std::uint64_t>(std::uint32_t(-5)) << 32) |
                                         std::uint32_t(-5))) {}
  csr_outputs outputs(const plan& p) const {
    csr_outputs o;
    o.kv_indptr = indptr.data();
    o.kv_indptr_stride = indptr_stride;
    o.kv_indptr_size = static_cast<std::int64_t>(indptr.size());
    o.kv_indices = indices.data();
    o.kv_indices_type = p.config.csr_int64 ? index_type::int64 : index_type::int32;
    o.kv_indices_stride = indices_stride;
    o.kv_indices_size = static_cast<std::int64_t>(indices.size());
    return o;
  }
};

// Steps [0, depth) hold the reference, every other cell of both the arena's CSR buffers and the
// engine's its poison; the CSR guard words are clean and the counter ends at `depth`.
void expect_steps_written(executor& ex, const draft_buffers& b, const engine_outputs& eng,
                          const setup& s, std::int32_t bucket, std::int32_t depth) {
  const plan& p = b.plan();
  const bool int64 = p.config.csr_int64;
  const kv_expected want = expected(s, bucket);
  const std::int64_t rows = p.max_rows(), stride = p.layout.csr_kv_indices_stride;
  const auto n = static_cast<std::size_t>(bucket * p.config.topk + 1);
  std::int32_t counter = -1;
  ex.copy_to_host(&counter, b.device_step(), sizeof counter);
  ASSERT_EQ(counter, depth) << "the counter ends at the depth run";
  const auto guards = read_guards(ex, b);
  const std::int64_t poison = arena_poison(int64);
  for (std::int32_t step = 0; step < p.config.num_steps; ++step) {
    SCOPED_TRACE("bucket " + std::to_string(bucket) + " step " + std::to_string(step) + " depth " +
                 std::to_string(depth));
    const bool ran = step < depth;
    const auto st = static_cast<std::size_t>(step);
    std::vector<std::int32_t> indptr(static_cast<std::size_t>(rows + 1));
    ex.copy_to_host(indptr.data(), b.csr_kv_indptr() + step * (rows + 1),
                    indptr.size() * sizeof(std::int32_t));
    const auto engine_indptr = eng.indptr.download();
    for (std::size_t j = 0; j < static_cast<std::size_t>(rows + 2); ++j) {
      const bool cell = ran && j < n;
      if (j < indptr.size()) {
        ASSERT_EQ(indptr[j], cell ? want.indptr[st][j] : static_cast<std::int32_t>(poison))
            << "arena kv_indptr " << j;
      }
      ASSERT_EQ(engine_indptr[st * static_cast<std::size_t>(eng.indptr_stride) + j],
                cell ? want.indptr[st][j] : engine_poison)
          << "engine kv_indptr " << j;
    }
    const std::size_t used = ran ? want.ids[st].size() : 0;
    const auto arena_ids =
        read_ids(ex, b.csr_kv_indices(step), static_cast<std::size_t>(stride), int64);
    for (std::size_t f = 0; f < arena_ids.size(); ++f) {
      ASSERT_EQ(arena_ids[f], f < used ? want.ids[st][f] : poison) << "arena kv_indices " << f;
    }
    const std::size_t width = static_cast<std::size_t>(eng.indices_stride);
    const auto engine_ids =
        read_ids(ex,
                 static_cast<const unsigned char*>(static_cast<const void*>(eng.indices.data())) +
                     st * width * (int64 ? 8 : 4),
                 width, int64);
    for (std::size_t f = 0; f < width; ++f) {
      ASSERT_EQ(engine_ids[f], f < used ? want.ids[st][f] : engine_poison)
          << "engine kv_indices " << f;
    }
    ASSERT_EQ(guards[static_cast<std::size_t>(p.layout.guard_csr(step))].violations, 0);
  }
}

class CsrDeviceSteps : public ExecutorTest {};

// Eagerly, then as one captured body replayed depth times: each step the counter reaches.
TEST_P(CsrDeviceSteps, EachStepTheCounterReachesMatchesTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 40; ++i) {
    const setup s = random_setup(rng, false);
    const plan p = make_plan(s.config);
    device_buffer arena(*ex, p.total_bytes);
    const draft_buffers b(p, arena.data());
    ex->fill_bytes(arena.data(), poison_byte, p.total_bytes);
    engine_outputs eng(*ex, p);
    const csr_target out(p, eng.outputs(p));
    dvec<std::int32_t> rtt(*ex, s.req_to_token), pool(*ex, s.pool), seq(*ex, s.seq);
    dvec<std::int64_t> slots(*ex, std::vector<std::int64_t>(s.pool.size() * 16, 0));
    const auto batch = static_cast<std::int32_t>(s.pool.size());
    const std::int32_t bucket = stage_round(*ex, b, {batch, pool.data(), seq.data(), slots.data()});
    const auto depth = static_cast<std::int32_t>(1 + rng() % s.config.num_steps);
    const bool captured = i % 2 == 1;
    SCOPED_TRACE("case " + std::to_string(i) + (captured ? " captured" : " eager"));
    auto body = [&] {
      setup_round(*ex, b, bucket, {rtt.data()});
      csr_indices(*ex, b, bucket, at_device_step, {rtt.data()});
      csr_indices(*ex, b, bucket, at_device_step, {rtt.data()}, out);
      advance_step(*ex, b);
    };
    if (captured) {
      ex->begin_capture();
      body();
      const auto exec = ex->instantiate(*ex->end_capture());
      for (std::int32_t step = 0; step < depth; ++step) ex->launch_graph(*exec);
    } else {
      for (std::int32_t step = 0; step < depth; ++step) body();
    }
    ex->synchronize();
    expect_steps_written(*ex, b, eng, s, bucket, depth);
    if (HasFatalFailure()) return;
  }
}

// device_depth: the body inside a WHILE node whose condition continue_while_confident sets; the
// staged max_depth decides how many steps run, each writing its own CSR step.
TEST_P(CsrDeviceSteps, TheDeviceDecidedRoundWritesEveryStepItRuns) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 20; ++i) {
    const setup s = random_setup(rng, true);
    const plan p = make_plan(s.config);
    device_buffer arena(*ex, p.total_bytes);
    const draft_buffers b(p, arena.data());
    ex->fill_bytes(arena.data(), poison_byte, p.total_bytes);
    engine_outputs eng(*ex, p);
    dvec<std::int32_t> rtt(*ex, s.req_to_token), pool(*ex, s.pool), seq(*ex, s.seq);
    dvec<std::int64_t> slots(*ex, std::vector<std::int64_t>(s.pool.size() * 16, 0));
    const auto batch = static_cast<std::int32_t>(s.pool.size());
    const std::int32_t bucket = p.bucket_for(batch);
    ex->begin_capture();
    const conditional_handle h = ex->begin_while(true);
    setup_round(*ex, b, bucket, {rtt.data()});
    csr_indices(*ex, b, bucket, at_device_step, {rtt.data()});
    csr_indices(*ex, b, bucket, at_device_step, {rtt.data()}, csr_target(p, eng.outputs(p)));
    advance_step(*ex, b);
    continue_while_confident(*ex, b, bucket, h);
    ex->end_while();
    const auto exec = ex->instantiate(*ex->end_capture());
    // The confidence rows hold the poison, a finite float: -inf never stops the round early.
    const auto depth = static_cast<std::int32_t>(1 + rng() % s.config.num_steps);
    device_round_inputs in{batch, pool.data(), seq.data(), slots.data()};
    in.max_depth = depth;
    ASSERT_EQ(stage_round(*ex, b, in), bucket);
    ex->launch_graph(*exec);
    ex->synchronize();
    SCOPED_TRACE("case " + std::to_string(i));
    expect_steps_written(*ex, b, eng, s, bucket, depth);
    if (HasFatalFailure()) return;
  }
}

// A counter outside [0, num_steps): not one byte of the arena (but guard_csr(0) and the kernels'
// own scratch, csr.scratch) or of the engine's buffers changes; guard_csr(0) records bad_input,
// row 0, capacity num_steps, the counter.
TEST_P(CsrDeviceSteps, ACounterOutsideTheRoundWritesNothing) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const setup s = random_setup(rng, false);
  const plan p = make_plan(s.config);
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  ex->fill_bytes(arena.data(), poison_byte, p.total_bytes);
  engine_outputs eng(*ex, p);
  dvec<std::int32_t> rtt(*ex, s.req_to_token), pool(*ex, s.pool), seq(*ex, s.seq);
  dvec<std::int64_t> slots(*ex, std::vector<std::int64_t>(s.pool.size() * 16, 0));
  const auto batch = static_cast<std::int32_t>(s.pool.size());
  const std::int32_t bucket = stage_round(*ex, b, {batch, pool.data(), seq.data(), slots.data()});
  setup_round(*ex, b, bucket, {rtt.data()});  // resets the guards at step 0
  const std::int32_t n = s.config.num_steps;
  const auto guard_offset = static_cast<std::size_t>(
      reinterpret_cast<unsigned char*>(b.guards() + p.layout.guard_csr(0)) - b.base());
  const std::size_t scratch_offset = p.layout.csr_scratch;
  const std::size_t scratch_bytes = p.find("csr.scratch").bytes;
  for (const std::int32_t counter : {n, n + 1, 2 * n, -1, std::numeric_limits<std::int32_t>::max(),
                                     std::numeric_limits<std::int32_t>::min()}) {
    SCOPED_TRACE("counter " + std::to_string(counter));
    ex->copy_to_device(b.device_step(), &counter, sizeof counter);
    ex->fill_bytes(b.guards() + p.layout.guard_csr(0), 0, sizeof(guard_word));
    std::vector<unsigned char> before(p.total_bytes), after(p.total_bytes);
    ex->copy_to_host(before.data(), b.base(), before.size());
    csr_indices(*ex, b, bucket, at_device_step, {rtt.data()});
    csr_indices(*ex, b, bucket, at_device_step, {rtt.data()}, csr_target(p, eng.outputs(p)));
    ex->copy_to_host(after.data(), b.base(), after.size());
    for (std::size_t i = 0; i < before.size(); ++i) {
      if (i >= guard_offset && i < guard_offset + sizeof(guard_word)) continue;
      if (i >= scratch_offset && i < scratch_offset + scratch_bytes) continue;
      ASSERT_EQ(before[i], after[i]) << "arena byte " << i << " written";
    }
    for (const std::int32_t v : eng.indptr.download()) ASSERT_EQ(v, engine_poison);
    for (const std::int64_t v : eng.indices.download()) {
      ASSERT_EQ(p.config.csr_int64 ? v : static_cast<std::int32_t>(v), engine_poison);
    }
    const guard_word g = read_guards(*ex, b)[static_cast<std::size_t>(p.layout.guard_csr(0))];
    EXPECT_EQ(g.violations, 2) << "one record per call";
    EXPECT_EQ(static_cast<violation_kind>(g.kind), violation_kind::bad_input);
    EXPECT_EQ(static_cast<kernel_id>(g.kernel), kernel_id::draft_kv_indices);
    EXPECT_EQ(g.row, 0);
    EXPECT_EQ(g.column, -1);
    EXPECT_EQ(g.capacity, n) << "the limit: num_steps";
    EXPECT_EQ(g.value, counter);
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(CsrDeviceSteps);

TEST(CsrDeviceStepsMisuse, IsRefusedByName) {
  std::mt19937_64 rng(1);
  setup s = random_setup(rng, false);
  const auto ex = make_executor("host");
  std::int32_t cell = 0;
  for (const bool device_steps : {false, true}) {
    s.config.device_steps = device_steps;
    s.config.formats = device_steps ? metadata_formats::fa3 : metadata_formats::both;
    const plan p = make_plan(s.config);
    device_buffer arena(*ex, p.total_bytes);
    const draft_buffers b(p, arena.data());
    expect_invalid([&] { csr_indices(*ex, b, 2, at_device_step, {&cell}); },
                   device_steps ? "formats" : "device_steps");
  }
  s.config.formats = metadata_formats::csr;
  const plan p = make_plan(s.config);
  device_buffer arena(*ex, p.total_bytes);
  const draft_buffers b(p, arena.data());
  expect_invalid([&] { csr_indices(*ex, b, 3, at_device_step, {&cell}); }, "bucket", "3 is not");
  expect_invalid([&] { csr_indices(*ex, b, 2, at_device_step, {nullptr}); }, "req_to_token");
  csr_outputs short_out;
  short_out.kv_indptr = &cell;
  short_out.kv_indices = &cell;
  short_out.kv_indptr_stride = p.max_rows() + 1;
  short_out.kv_indices_stride = p.max_rows() * ctx;  // engine sizing: no room for drafts
  expect_invalid([&] { csr_indices(*ex, b, 2, at_device_step, {&cell}, csr_target(p, short_out)); },
                 "kv_indices_stride");
}

}  // namespace
}  // namespace specgraph::testing
