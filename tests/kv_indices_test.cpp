// CSR draft-decode KV indices (docs/csr.md) against the independent reference of
// kv_indices_reference.hpp, over random cases: topk 1..8, page sizes 1/2/4/16/64, entry page size
// 1 or ps, windows with sinks, padded requests, int32/int64 indices, exact, engine-like and short
// capacities, packed and strided steps, sub-ranges of steps, bad pool rows, seq_lens and slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/kv_indices.hpp"
#include "tests/kv_indices_reference.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t poison32 = -7;
constexpr std::int64_t poison64 = -7;

// region -1: every parameter over its whole test range; region 0..3 (small cases): page sizes
// {1, 2} (regions 0, 1) or {4, 16, 64} (2, 3), int32 (even) or int64 (odd) indices.
kv_case random_case(std::mt19937_64& rng, bool allow_bad, bool small, int region = -1) {
  auto pick = [&](std::int64_t lo, std::int64_t hi) {  // [lo, hi]
    return static_cast<std::int32_t>(lo + static_cast<std::int64_t>(rng() % (hi - lo + 1)));
  };
  const std::int32_t page_sizes[] = {1, 2, 4, 16, 64};
  kv_case c;
  c.page_size = region < 0   ? page_sizes[rng() % 5]
                : region < 2 ? page_sizes[rng() % 2]
                             : page_sizes[2 + rng() % 3];
  c.entry_page_size = rng() % 2 == 0 ? 1 : c.page_size;
  c.topk = pick(1, 8);
  const bool large = !small && rng() % 8 == 0;
  c.num_steps = large ? pick(1, 9) : pick(1, small ? 3 : 4);
  // Branch regions laid out from slot_stride: 0 (num_steps), num_steps, or up to 3 more
  // (SGLang's S = num_steps + 1 among them).
  const std::uint64_t stride_draw = rng() % 4;
  c.slot_stride = stride_draw == 0 ? 0 : stride_draw == 1 ? c.num_steps : c.num_steps + pick(1, 3);
  const std::int32_t batch = large ? pick(1, 9) : pick(1, small ? 2 : 3);
  const std::int32_t longest = large ? pick(0, 130) : pick(0, small ? 12 : 20);
  if (rng() % 3 == 0) {
    c.window = pick(1, 12);
    c.sink = pick(0, 4);
  }
  c.pool_rows = batch + pick(0, 2);
  for (std::int32_t r = 0; r < batch; ++r) {
    // Padding as engines do it: seq_len 1 on reserved pool row 0.
    const bool padded = r > 0 && rng() % 6 == 0;
    c.seq_len.push_back(padded ? 1 : pick(0, longest));
    c.req_pool_index.push_back(padded ? 0 : pick(0, c.pool_rows - 1));
  }
  c.max_seq_len = *std::max_element(c.seq_len.begin(), c.seq_len.end()) + pick(0, 2);
  // Rows wide enough for the widest request's branch regions (sometimes one position more).
  const std::int64_t ps = c.page_size, E = c.entry_page_size;
  const std::int64_t S = c.slot_stride == 0 ? c.num_steps : c.slot_stride;
  const std::int64_t nnp = (ps - 1 + S + ps - 1) / ps;  // the largest nnp
  const std::int64_t positions = c.max_seq_len + (c.topk - 1) * ps * nnp + c.num_steps;
  c.width = (positions + E - 1) / E + pick(0, 1);
  c.req_to_token.resize(static_cast<std::size_t>(c.pool_rows * c.width));
  // Distinct-looking entries from two draws (cheap for wide rows): base + 7919 * index.
  const std::int64_t base = pick(0, 1 << 20);
  for (std::size_t i = 0; i < c.req_to_token.size(); ++i) {
    c.req_to_token[i] =
        static_cast<std::int32_t>((base + 7919 * static_cast<std::int64_t>(i)) % (1 << 20));
  }
  if (E == 1 && rng() % 16 == 0) {  // slots at the top of the int32 range
    for (auto& e : c.req_to_token) e = pick(INT32_MAX - 1000, INT32_MAX);
  }
  if (E > 1 && rng() % 8 == 0) {  // page ids whose slots pass INT32_MAX: int32 output refuses
    for (auto& e : c.req_to_token) e = pick(INT32_MAX / E - 3, INT32_MAX / E + 3);
  }
  c.int64_indices = region < 0 ? rng() % 2 == 0 : region % 2 == 1;
  if (rng() % 4 == 0) {
    c.first_step = pick(0, c.num_steps - 1);
    c.step_count = pick(1, c.num_steps - c.first_step);
  } else {
    c.first_step = 0;
    c.step_count = c.num_steps;
  }
  const std::int32_t rows = c.rows();
  const std::int64_t kept_max = kv_kept_max(c.max_seq_len, c.window, c.sink);
  switch (rng() % 4) {
    case 0:  // engine-like: one width for every step, sometimes too short
      c.capacity = pick(0, rows * (kept_max + c.num_steps));
      c.capacity_growth = 0;
      break;
    case 1:  // short
      c.capacity = pick(0, rows * 3);
      c.capacity_growth = pick(0, rows);
      break;
    default:  // exact: C_s
      c.capacity =
          static_cast<std::int32_t>(kv_indices_step_capacity(rows, kept_max, c.first_step));
      c.capacity_growth = rows;
  }
  const std::int64_t last = c.step_capacity(c.step_count - 1);
  c.indices_stride = rng() % 2 == 0 ? 0 : last + pick(0, 2);
  c.indptr_stride = rows + 1 + pick(0, 1);
  if (allow_bad && rng() % 4 == 0) {
    switch (rng() % 4) {
      case 0: c.req_pool_index[rng() % batch] = rng() % 2 ? -1 : c.pool_rows; break;
      case 1: c.seq_len[rng() % batch] = rng() % 2 ? -1 : c.max_seq_len + 1; break;
      case 2: c.req_to_token[rng() % c.req_to_token.size()] = -pick(1, 5); break;
      default: c.slot_limit = pick(1, 1 << 20);
    }
  }
  if (!allow_bad) c.slot_limit = INT64_MAX;
  return c;
}

// The guard word the records imply: all counted, the lowest (row, column) kept.
inline void kv_expect_guard(const guard_word& g, const std::vector<kv_record>& records,
                            std::int64_t capacity, std::int32_t k) {
  ASSERT_EQ(g.violations, static_cast<std::int32_t>(records.size()))
      << "guard of launch step " << k;
  if (records.empty()) {
    ASSERT_EQ(g.kind, 0);
    return;
  }
  const kv_record* first = &records[0];
  for (const kv_record& r : records) {
    if (r.row < first->row || (r.row == first->row && r.column < first->column)) first = &r;
  }
  ASSERT_EQ(static_cast<violation_kind>(g.kind), first->kind) << "step " << k;
  ASSERT_EQ(static_cast<kernel_id>(g.kernel), kernel_id::draft_kv_indices);
  ASSERT_EQ(g.row, first->row) << "step " << k;
  ASSERT_EQ(g.column, first->column) << "step " << k;
  ASSERT_EQ(g.value, first->value) << "step " << k;
  if (first->kind == violation_kind::capacity) {
    ASSERT_EQ(g.capacity, capacity);
  }
}

kv_indices_params params_of(const kv_case& c) {
  return kv_params_of(c, c.batch());
}

struct kv_outputs {
  std::vector<std::int32_t> indptr;
  std::vector<std::int64_t> indices;  // widened from int32 when the case is int32
  std::vector<guard_word> guards;
};

// Runs the launcher on `ex`; buffers in executor memory, poisoned. With `counter`, a device
// step counter holding *counter (kv_indices_params::device_step).
kv_outputs run_launch(executor& ex, const kv_case& c, const std::int32_t* counter = nullptr) {
  dvec<std::int32_t> rtt(ex, c.req_to_token), pool(ex, c.req_pool_index), seq(ex, c.seq_len);
  dvec<std::int32_t> indptr(ex, static_cast<std::size_t>(c.step_count * c.indptr_stride), poison32);
  const auto n = static_cast<std::size_t>(c.indices_size());
  dvec<std::int32_t> i32(ex, c.int64_indices ? 1 : n, poison32);
  dvec<std::int64_t> i64(ex, c.int64_indices ? n : 1, poison64);
  dvec<guard_word> guards(ex, static_cast<std::size_t>(c.step_count), guard_word{});
  dvec<std::int32_t> scratch(ex, static_cast<std::size_t>(kv_indices_scratch_ints(c.batch())), 99);
  kv_indices_params p = params_of(c);
  p.req_to_token = rtt.data();
  p.req_pool_index = pool.data();
  p.seq_len = seq.data();
  p.kv_indptr = indptr.data();
  if (c.int64_indices) {
    p.kv_indices_i64 = i64.data();
  } else {
    p.kv_indices_i32 = i32.data();
  }
  p.guard = guards.data();
  p.scratch = scratch.data();
  dvec<std::int32_t> step(ex, 1, counter != nullptr ? *counter : 0);
  if (counter != nullptr) p.device_step = step.data();
  launch_draft_kv_indices(ex, p);
  ex.synchronize();
  kv_outputs out{indptr.download(), {}, guards.download()};
  if (c.int64_indices) {
    out.indices = i64.download();
  } else {
    for (std::int32_t v : i32.download()) out.indices.push_back(v);
  }
  return out;
}

// Every cell: kv_indptr rows exactly (padding columns poison), stored ids below the capacity,
// poison everywhere else (past used, past capacity, the stride gap, the canaries), the guards.
void expect_matches(const kv_case& c, const kv_outputs& got) {
  const kv_expected want = kv_reference(c);
  const std::int32_t rows = c.rows();
  for (std::int32_t k = 0; k < c.step_count; ++k) {
    for (std::int64_t j = 0; j < c.indptr_stride; ++j) {
      const std::int32_t w = j <= rows ? want.indptr[k][static_cast<std::size_t>(j)] : poison32;
      ASSERT_EQ(got.indptr[static_cast<std::size_t>(k * c.indptr_stride + j)], w)
          << "kv_indptr launch step " << k << " entry " << j;
    }
  }
  std::vector<std::int64_t> cells(static_cast<std::size_t>(c.indices_size()), poison64);
  for (std::int32_t k = 0; k < c.step_count; ++k) {
    const std::size_t stored =
        std::min(want.ids[k].size(), static_cast<std::size_t>(c.step_capacity(k)));
    for (std::size_t f = 0; f < stored; ++f) {
      cells[static_cast<std::size_t>(c.step_offset(k)) + f] = want.ids[k][f];
    }
  }
  for (std::size_t f = 0; f < cells.size(); ++f) {
    std::int64_t w = cells[f];
    if (!c.int64_indices) w = static_cast<std::int32_t>(w);
    ASSERT_EQ(got.indices[f], w) << "kv_indices cell " << f;
  }
  for (std::int32_t k = 0; k < c.step_count; ++k) {
    kv_expect_guard(got.guards[static_cast<std::size_t>(k)], want.records[k], c.step_capacity(k),
                    k);
  }
}

std::string describe_case(int i, const kv_case& c) {
  return "case " + std::to_string(i) + ": ps " + std::to_string(c.page_size) + " E " +
         std::to_string(c.entry_page_size) + " topk " + std::to_string(c.topk) + " steps " +
         std::to_string(c.first_step) + "+" + std::to_string(c.step_count) + "/" +
         std::to_string(c.num_steps) + " slot_stride " + std::to_string(c.slot_stride) + " batch " +
         std::to_string(c.batch()) + " window " + std::to_string(c.window) + "+" +
         std::to_string(c.sink) + " capacity " + std::to_string(c.capacity) + "+" +
         std::to_string(c.capacity_growth) + " stride " + std::to_string(c.indices_stride) +
         (c.int64_indices ? " int64" : " int32");
}

class KvIndices : public ExecutorTest {};

// Fresh random cases, bad inputs included, on every executor.
TEST_P(KvIndices, RandomCasesMatchReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int cases = property_cases(5000);
  for (int i = 0; i < cases; ++i) {
    const kv_case c = random_case(rng, true, false);
    SCOPED_TRACE(describe_case(i, c));
    expect_matches(c, run_launch(*ex, c));
  }
}

// Branch regions wider than the round (slot_stride > num_steps, SGLang's S - 1 forwards over
// S-wide rows), topk > 1, page sizes 1, 4 and 16: the reference places them from slot_stride, and
// the positions differ from a layout from num_steps in the cases the test counts.
TEST_P(KvIndices, SlotStrideWiderThanTheRoundMatchesReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int cases = property_cases(2000);
  int differ = 0;
  for (int i = 0; i < cases; ++i) {
    kv_case c = random_case(rng, false, false);
    if (c.slot_stride <= c.num_steps || c.topk == 1) continue;  // redraw below
    const std::int32_t sizes[] = {1, 4, 16};
    if (c.page_size != sizes[i % 3]) continue;
    SCOPED_TRACE(describe_case(i, c));
    const kv_outputs got = run_launch(*ex, c);
    expect_matches(c, got);
    if (::testing::Test::HasFatalFailure()) return;
    kv_case narrow = c;
    narrow.slot_stride = c.num_steps;
    if (kv_reference(narrow).ids != kv_reference(c).ids) ++differ;
  }
  ASSERT_GT(differ, 0) << "no case where slot_stride moved a draft position";
}

// A device step counter (docs/device-rounds.md): the launch computes the step the counter holds
// and nothing else, exactly as a launch of that step alone (the reference of a one-step case,
// placed at that step's offset, with that step's capacity and guard word); a counter outside the
// launch's steps writes nothing and records bad_input (row 0, the launch's end, the counter) in
// guard[0]. Every cell of every output is checked (poison where nothing is written).
TEST_P(KvIndices, DeviceStepCounterComputesThatStepAlone) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int cases = property_cases(3000);
  for (int i = 0; i < cases; ++i) {
    const kv_case c = random_case(rng, true, false);
    const std::int32_t end = c.first_step + c.step_count;
    const std::int32_t outside[] = {c.first_step - 1, end, end + 1, -1, INT32_MIN, INT32_MAX};
    const std::int32_t counter =
        rng() % 4 == 0 ? outside[rng() % 6]
                       : c.first_step + static_cast<std::int32_t>(rng() % c.step_count);
    SCOPED_TRACE(describe_case(i, c) + " counter " + std::to_string(counter));
    const kv_outputs got = run_launch(*ex, c, &counter);
    const bool inside = counter >= c.first_step && counter < end;
    const std::int32_t k = inside ? counter - c.first_step : -1;
    kv_case one = c;  // the step alone
    one.first_step = inside ? counter : 0;
    one.step_count = 1;
    one.capacity = static_cast<std::int32_t>(c.step_capacity(inside ? k : 0));  // validated
    one.capacity_growth = 0;
    const kv_expected want = kv_reference(one);
    for (std::int32_t s = 0; s < c.step_count; ++s) {
      for (std::int64_t j = 0; j < c.indptr_stride; ++j) {
        const bool written = s == k && j <= c.rows();
        ASSERT_EQ(got.indptr[static_cast<std::size_t>(s * c.indptr_stride + j)],
                  written ? want.indptr[0][static_cast<std::size_t>(j)] : poison32)
            << "kv_indptr launch step " << s << " entry " << j;
      }
    }
    std::vector<std::int64_t> cells(static_cast<std::size_t>(c.indices_size()), poison64);
    if (inside) {
      const std::size_t stored =
          std::min(want.ids[0].size(), static_cast<std::size_t>(one.capacity));
      for (std::size_t f = 0; f < stored; ++f) {
        cells[static_cast<std::size_t>(c.step_offset(k)) + f] = want.ids[0][f];
      }
    }
    for (std::size_t f = 0; f < cells.size(); ++f) {
      const std::int64_t w = c.int64_indices ? cells[f] : static_cast<std::int32_t>(cells[f]);
      ASSERT_EQ(got.indices[f], w) << "kv_indices cell " << f;
    }
    for (std::int32_t s = 0; s < c.step_count; ++s) {
      const guard_word& g = got.guards[static_cast<std::size_t>(s)];
      if (s == k) {
        kv_expect_guard(g, want.records[0], one.capacity, s);
      } else if (!inside && s == 0) {
        ASSERT_EQ(g.violations, 1);
        ASSERT_EQ(static_cast<violation_kind>(g.kind), violation_kind::bad_input);
        ASSERT_EQ(static_cast<kernel_id>(g.kernel), kernel_id::draft_kv_indices);
        ASSERT_EQ(g.row, 0);
        ASSERT_EQ(g.column, -1);
        ASSERT_EQ(g.capacity, end) << "the limit: the launch's last step + 1";
        ASSERT_EQ(g.value, counter);
      } else {
        ASSERT_EQ(g.violations, 0) << "guard of launch step " << s;
      }
    }
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(KvIndices);

// Runs the launcher on the host executor over host vectors (its memory is host memory), without
// per-case executor allocations: the bulk of the random cases.
kv_outputs run_host_vectors(executor& ex, const kv_case& c) {
  kv_outputs out;
  out.indptr.assign(static_cast<std::size_t>(c.step_count * c.indptr_stride), poison32);
  out.guards.assign(static_cast<std::size_t>(c.step_count), guard_word{});
  const auto n = static_cast<std::size_t>(c.indices_size());
  std::vector<std::int32_t> i32(c.int64_indices ? 0 : n, poison32);
  out.indices.assign(c.int64_indices ? n : 0, poison64);
  std::vector<std::int32_t> scratch(static_cast<std::size_t>(kv_indices_scratch_ints(c.batch())),
                                    99);
  kv_indices_params p = params_of(c);
  p.req_to_token = c.req_to_token.data();
  p.req_pool_index = c.req_pool_index.data();
  p.seq_len = c.seq_len.data();
  p.kv_indptr = out.indptr.data();
  if (c.int64_indices) {
    p.kv_indices_i64 = out.indices.data();
  } else {
    p.kv_indices_i32 = i32.data();
  }
  p.guard = out.guards.data();
  p.scratch = scratch.data();
  launch_draft_kv_indices(ex, p);
  ex.synchronize();
  if (!c.int64_indices) out.indices.assign(i32.begin(), i32.end());
  return out;
}

// 10^6 small cases in all (batch <= 2, seq_len <= 14, steps <= 3; every other parameter over its
// full test range, bad inputs included) on the host executor, split in four regions of the
// parameter space (page sizes x index type) so ctest runs them side by side.
class KvIndicesHost : public ::testing::TestWithParam<int> {};

TEST_P(KvIndicesHost, SmallCasesMatchReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto ex = make_executor("host");
  const int cases = property_cases(1000000) / 4;
  for (int i = 0; i < cases; ++i) {
    const kv_case c = random_case(rng, true, true, GetParam());
    expect_matches(c, run_host_vectors(*ex, c));
    if (::testing::Test::HasFatalFailure()) {
      ADD_FAILURE() << describe_case(i, c);
      return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Regions, KvIndicesHost, ::testing::Values(0, 1, 2, 3));

}  // namespace
}  // namespace specgraph::testing
