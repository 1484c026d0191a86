// Sparse vertical/slash staging and the capacity-capped fallback (docs/metadata.md section 6).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "kernels/sparse_indices.hpp"
#include "specgraph/error.hpp"
#include "specgraph/metadata.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// Independent reference of one stage for one head: the spec's conditions written out.
struct staged {
  std::vector<std::int32_t> vertical, slash;
  bool vertical_fell_back = false, slash_fell_back = false;
};

std::vector<std::int32_t> reference_fallback(std::int32_t seq_len, std::int32_t max_count) {
  std::vector<std::int32_t> out;
  const std::int32_t count = std::min(max_count, seq_len);
  if (count <= 0) return out;
  const std::int32_t step = std::max(1, static_cast<std::int32_t>((seq_len + count - 1) / count));
  for (std::int32_t x = 0; x < seq_len && static_cast<std::int32_t>(out.size()) < count;
       x += step) {
    out.push_back(x);
  }
  return out;
}

staged reference_stage(const sparse_stage& s, const std::vector<std::int32_t>& vertical,
                       const std::vector<std::int32_t>& slash, std::int32_t vsize,
                       std::int32_t ssize) {
  staged out;
  const std::int32_t prev = s.prev, cl = s.chunk_len, q = s.chunk_q_len, K = s.end;
  for (std::int32_t v : vertical) {
    if (s.kind == stage_kind::intra && v >= prev) out.vertical.push_back(v - prev);
    if (s.kind == stage_kind::succ && prev - cl <= v && v < prev)
      out.vertical.push_back(v - (prev - cl));
    if (s.kind == stage_kind::inter && v < prev - cl) out.vertical.push_back(v);
  }
  for (std::int32_t x : slash) {
    if (s.kind == stage_kind::intra && x >= prev) out.slash.push_back((K - 1) - x);
    if (s.kind == stage_kind::succ && prev - cl <= x && x < prev + q)
      out.slash.push_back((prev + q - 1) - x);
    if (s.kind == stage_kind::inter && x < prev - cl + q)
      out.slash.push_back((prev - cl + q - 1) - x);
  }
  const std::int32_t key_len = s.kind == stage_kind::intra  ? K - prev
                               : s.kind == stage_kind::succ ? cl
                                                            : prev - cl;
  if (out.vertical.empty()) {
    out.vertical = reference_fallback(key_len, std::min(vsize, K));
    out.vertical_fell_back = true;
  }
  if (out.slash.empty()) {
    out.slash = reference_fallback(key_len, std::min(ssize, K));
    out.slash_fell_back = true;
  }
  return out;
}

struct stage_run {
  std::vector<std::int32_t> vertical, vertical_count, slash, slash_count;
  guard_word guard{};
};

stage_run run_stage(executor& ex, const sparse_stage& s,
                    const std::vector<std::vector<std::int32_t>>& vertical,
                    const std::vector<std::vector<std::int32_t>>& slash,
                    const std::vector<std::int32_t>& vsizes,
                    const std::vector<std::int32_t>& ssizes, std::int32_t vcap, std::int32_t scap,
                    std::int32_t min_stride = 0) {
  const auto heads = static_cast<std::int32_t>(vertical.size());
  std::int32_t vstride = min_stride, sstride = min_stride;
  for (const auto& v : vertical) vstride = std::max(vstride, static_cast<std::int32_t>(v.size()));
  for (const auto& x : slash) sstride = std::max(sstride, static_cast<std::int32_t>(x.size()));
  std::vector<std::int32_t> vflat(static_cast<std::size_t>(heads * vstride), -1),
      sflat(static_cast<std::size_t>(heads * sstride), -1), vcount, scount;
  for (std::int32_t h = 0; h < heads; ++h) {
    std::copy(vertical[h].begin(), vertical[h].end(), vflat.begin() + h * vstride);
    std::copy(slash[h].begin(), slash[h].end(), sflat.begin() + h * sstride);
    vcount.push_back(static_cast<std::int32_t>(vertical[h].size()));
    scount.push_back(static_cast<std::int32_t>(slash[h].size()));
  }
  dvec<std::int32_t> dv(ex, vflat), ds(ex, sflat), dvc(ex, vcount), dsc(ex, scount),
      dvs(ex, vsizes), dss(ex, ssizes);
  // One extra head's worth of poison after each output: nothing may spill into it.
  dvec<std::int32_t> ov(ex, static_cast<std::size_t>((heads + 1) * vcap), -5),
      os(ex, static_cast<std::size_t>((heads + 1) * scap), -5),
      ovc(ex, static_cast<std::size_t>(heads), -5), osc(ex, static_cast<std::size_t>(heads), -5);
  dvec<guard_word> guard(ex, 1, guard_word{});
  sparse_stage_params p;
  p.vertical = dv.data();
  p.vertical_stride = vstride;
  p.vertical_count = dvc.data();
  p.vertical_size = dvs.data();
  p.slash = ds.data();
  p.slash_stride = sstride;
  p.slash_count = dsc.data();
  p.slash_size = dss.data();
  p.heads = heads;
  p.stage = s;
  p.out_vertical = ov.data();
  p.vertical_capacity = vcap;
  p.out_vertical_count = ovc.data();
  p.out_slash = os.data();
  p.slash_capacity = scap;
  p.out_slash_count = osc.data();
  p.guard = guard.data();
  launch_sparse_stage(ex, p);
  ex.synchronize();
  return {ov.download(), ovc.download(), os.download(), osc.download(), guard.download()[0]};
}

// Checks one head's buffer: the expected entries, then sentinels up to capacity; the spill
// region after the last head stays poison.
void expect_head(const std::vector<std::int32_t>& buffer, std::int32_t head, std::int32_t cap,
                 const std::vector<std::int32_t>& want, std::int32_t count, std::int32_t sentinel) {
  ASSERT_EQ(count, static_cast<std::int32_t>(want.size())) << "head " << head;
  for (std::int32_t c = 0; c < cap; ++c) {
    const std::int32_t got = buffer[static_cast<std::size_t>(head * cap + c)];
    if (c < count) {
      ASSERT_EQ(got, want[static_cast<std::size_t>(c)]) << "head " << head << " entry " << c;
    } else {
      ASSERT_EQ(got, sentinel) << "head " << head << " entry " << c;
    }
  }
}

class SparseStage : public ExecutorTest {};

// chunk_size 64, local_size 16, 4 heads, vertical and slash sizes 4, sequence 128. No stage
// buffer ever holds more than 4 entries; empty selections get exactly the fallback indices,
// the intra slash slot included.
TEST_P(SparseStage, SubWindowConfigurationStaysWithinFourEntries) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::vector<std::int32_t>> vertical(4), slash(4);
    for (int h = 0; h < 4; ++h) {
      // Head 0: indices only in the last chunk, so succ/inter selections are empty;
      // head 1: nothing selected at all (every slot falls back); heads 2-3: random.
      std::vector<std::int32_t> pool(128);
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng);
      if (h == 0) {
        vertical[h] = {100, 127, 96, 110};
        slash[h] = {120, 101, 99, 127};
      } else if (h == 1) {
        vertical[h] = {};
        slash[h] = {};
      } else {
        vertical[h].assign(pool.begin(), pool.begin() + 4);
        slash[h].assign(pool.begin() + 4, pool.begin() + 8);
      }
    }
    std::vector<std::int32_t> sizes{4, 4, 4, 4};
    for (const sparse_stage& s : sparse_stages(128, 48)) {
      // Real per-chunk selections never exceed the keys seen: keep inputs below the stage end.
      std::vector<std::vector<std::int32_t>> v = vertical, x = slash;
      for (auto* lists : {&v, &x}) {
        for (auto& l : *lists)
          l.erase(std::remove_if(l.begin(), l.end(), [&](std::int32_t i) { return i >= s.end; }),
                  l.end());
      }
      const std::int32_t vcap = sparse_capacity(sizes, s.end), scap = sparse_capacity(sizes, s.end);
      ASSERT_EQ(vcap, 4);
      const stage_run run = run_stage(*ex, s, v, x, sizes, sizes, vcap, scap);
      ASSERT_EQ(run.guard.violations, 0) << describe(run.guard);
      for (std::int32_t h = 0; h < 4; ++h) {
        SCOPED_TRACE(std::string(to_string(s.kind)) + " stage at prev " + std::to_string(s.prev) +
                     ", head " + std::to_string(h));
        const staged want = reference_stage(s, v[static_cast<std::size_t>(h)],
                                            x[static_cast<std::size_t>(h)], 4, 4);
        ASSERT_LE(run.vertical_count[static_cast<std::size_t>(h)], 4);
        ASSERT_LE(run.slash_count[static_cast<std::size_t>(h)], 4);
        expect_head(run.vertical, h, vcap, want.vertical,
                    run.vertical_count[static_cast<std::size_t>(h)], INT32_MAX);
        expect_head(run.slash, h, scap, want.slash, run.slash_count[static_cast<std::size_t>(h)],
                    INT32_MIN);
      }
      // Head 1 has no selection anywhere: every slot of it, intra slash included, holds exactly
      // the capacity-capped fallback for the stage's key length.
      const std::vector<std::int32_t> expected_fallback =
          reference_fallback(stage_key_length(s), 4);
      EXPECT_EQ(std::vector<std::int32_t>(run.vertical.begin() + vcap,
                                          run.vertical.begin() + vcap + run.vertical_count[1]),
                expected_fallback);
      EXPECT_EQ(std::vector<std::int32_t>(run.slash.begin() + scap,
                                          run.slash.begin() + scap + run.slash_count[1]),
                expected_fallback);
      EXPECT_EQ(run.vertical_count[1], static_cast<std::int32_t>(expected_fallback.size()));
      // Spill region after the last head untouched.
      for (std::int32_t c = 0; c < vcap; ++c)
        ASSERT_EQ(run.vertical[static_cast<std::size_t>(4 * vcap + c)], -5);
      for (std::int32_t c = 0; c < scap; ++c)
        ASSERT_EQ(run.slash[static_cast<std::size_t>(4 * scap + c)], -5);
    }
  }
}

// An empty intra slash selection falls back (the slot that had no fallback at all).
TEST_P(SparseStage, IntraSlashFallsBackWhenEmpty) {
  sparse_stage s;
  s.kind = stage_kind::intra;
  s.prev = 48;
  s.end = 96;
  s.chunk_len = 48;
  s.chunk_q_len = 48;
  // Slash indices all before prev: nothing selected for intra.
  const stage_run run = run_stage(*ex, s, {{50, 60, 70, 80}}, {{1, 2, 3, 4}}, {4}, {4}, 4, 4);
  ASSERT_EQ(run.guard.violations, 0);
  EXPECT_EQ(run.slash_count[0], 4);
  EXPECT_EQ(std::vector<std::int32_t>(run.slash.begin(), run.slash.begin() + 4),
            (std::vector<std::int32_t>{0, 12, 24, 36}));  // (48, 4)
  EXPECT_EQ(std::vector<std::int32_t>(run.vertical.begin(), run.vertical.begin() + 4),
            (std::vector<std::int32_t>{2, 12, 22, 32}));
}

// Random stages and selections against the reference. A quarter of the cases shrink the stage
// buffers below the largest selection (the surplus must be refused and counted, the lowest
// (head, column) named), and a quarter put one out-of-range index into one head's selection
// (that head must be left unwritten and reported as bad input).
TEST_P(SparseStage, RandomSelectionsMatchReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int cases = property_cases(10000);
  for (int i = 0; i < cases; ++i) {
    const auto heads = static_cast<std::int32_t>(1 + rng() % 8);
    const auto chunk_len = static_cast<std::int32_t>(1 + rng() % 64);
    const auto seq = static_cast<std::int32_t>(1 + rng() % 400);
    const auto stages = sparse_stages(seq, chunk_len);
    const sparse_stage s = stages[rng() % stages.size()];
    const int mode = static_cast<int>(rng() % 4);  // 0, 1: plain; 2: small buffers; 3: bad input
    std::vector<std::int32_t> vsizes, ssizes;
    std::vector<std::vector<std::int32_t>> vertical, slash;
    for (std::int32_t h = 0; h < heads; ++h) {
      vsizes.push_back(static_cast<std::int32_t>(rng() % 9));
      ssizes.push_back(static_cast<std::int32_t>(rng() % 9));
      std::vector<std::int32_t> pool(static_cast<std::size_t>(s.end));
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng);
      const auto nv = std::min<std::size_t>(static_cast<std::size_t>(vsizes.back()), pool.size());
      vertical.emplace_back(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(nv));
      std::shuffle(pool.begin(), pool.end(), rng);
      const auto ns = std::min<std::size_t>(static_cast<std::size_t>(ssizes.back()), pool.size());
      slash.emplace_back(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(ns));
    }
    std::int32_t vcap = sparse_capacity(vsizes, s.end), scap = sparse_capacity(ssizes, s.end);
    std::int32_t bad_head = -1;
    if (mode == 2) {
      vcap = std::max(1, vcap / 2);
      scap = std::max(1, scap / 2);
    } else if (mode == 3) {
      bad_head = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(heads));
      auto& list = vertical[static_cast<std::size_t>(bad_head)];
      const std::int32_t bad = rng() % 2 == 0 ? -1 - static_cast<std::int32_t>(rng() % 100)
                                              : s.end + static_cast<std::int32_t>(rng() % 100);
      list.insert(list.begin() + static_cast<std::ptrdiff_t>(rng() % (list.size() + 1)), bad);
    }
    SCOPED_TRACE("case " + std::to_string(i) + ": " + to_string(s.kind) + " prev " +
                 std::to_string(s.prev) + " end " + std::to_string(s.end) + " chunk_len " +
                 std::to_string(chunk_len) + " mode " + std::to_string(mode));
    const stage_run run = run_stage(*ex, s, vertical, slash, vsizes, ssizes, vcap, scap);
    std::int64_t surplus = 0;
    std::int32_t first_head = -1, first_column = -1;
    for (std::int32_t h = 0; h < heads; ++h) {
      const auto hh = static_cast<std::size_t>(h);
      if (h == bad_head) {
        // The head is written empty: counts 0, every entry the sentinel; no poison survives.
        for (std::int32_t c = 0; c < vcap; ++c)
          ASSERT_EQ(run.vertical[static_cast<std::size_t>(h * vcap + c)], INT32_MAX);
        for (std::int32_t c = 0; c < scap; ++c)
          ASSERT_EQ(run.slash[static_cast<std::size_t>(h * scap + c)], INT32_MIN);
        ASSERT_EQ(run.vertical_count[hh], 0);
        ASSERT_EQ(run.slash_count[hh], 0);
        continue;
      }
      staged want = reference_stage(s, vertical[hh], slash[hh], vsizes[hh], ssizes[hh]);
      // Selected entries beyond a stage buffer are refused, each counted; a fallback beyond it
      // stops at its first refused index (one violation).
      const struct {
        std::vector<std::int32_t>* list;
        std::int32_t cap;
        bool fell_back;
      } kinds[] = {{&want.vertical, vcap, want.vertical_fell_back},
                   {&want.slash, scap, want.slash_fell_back}};
      for (const auto& k : kinds) {
        std::vector<std::int32_t>* list = k.list;
        const std::int32_t cap = k.cap;
        if (static_cast<std::int32_t>(list->size()) > cap) {
          surplus += k.fell_back ? 1 : static_cast<std::int32_t>(list->size()) - cap;
          if (first_head < 0 || h < first_head || (h == first_head && cap < first_column)) {
            first_head = h;
            first_column = cap;
          }
          list->resize(static_cast<std::size_t>(cap));
        }
      }
      expect_head(run.vertical, h, vcap, want.vertical, run.vertical_count[hh], INT32_MAX);
      expect_head(run.slash, h, scap, want.slash, run.slash_count[hh], INT32_MIN);
      if (HasFatalFailure()) return;
    }
    if (bad_head >= 0) {
      ASSERT_EQ(run.guard.violations, 1) << describe(run.guard);
      ASSERT_EQ(static_cast<violation_kind>(run.guard.kind), violation_kind::bad_input);
      ASSERT_EQ(run.guard.row, bad_head);
    } else {
      ASSERT_EQ(run.guard.violations, surplus) << describe(run.guard);
      if (surplus > 0) {
        ASSERT_EQ(static_cast<violation_kind>(run.guard.kind), violation_kind::capacity);
        ASSERT_EQ(run.guard.row, first_head);
        ASSERT_EQ(run.guard.column, first_column);
      }
    }
    for (std::int32_t c = 0; c < vcap; ++c)
      ASSERT_EQ(run.vertical[static_cast<std::size_t>(heads * vcap + c)], -5);
    for (std::int32_t c = 0; c < scap; ++c)
      ASSERT_EQ(run.slash[static_cast<std::size_t>(heads * scap + c)], -5);
  }
}

// More selected indices than the stage buffer holds: the surplus is refused and recorded.
TEST_P(SparseStage, OverfullSelectionIsCappedAndRecorded) {
  sparse_stage s;
  s.kind = stage_kind::intra;
  s.prev = 0;
  s.end = 48;
  s.chunk_len = 48;
  s.chunk_q_len = 48;
  const stage_run run = run_stage(*ex, s, {{1, 2, 3, 4, 5}}, {{0}}, {4}, {1}, 4, 1);
  ASSERT_EQ(run.guard.violations, 1);
  EXPECT_EQ(static_cast<kernel_id>(run.guard.kernel), kernel_id::sparse_stage);
  EXPECT_EQ(run.guard.column, 4);
  EXPECT_EQ(run.guard.capacity, 4);
  EXPECT_EQ(run.guard.value, 5);
  EXPECT_EQ(run.vertical_count[0], 4);
  EXPECT_EQ(run.vertical[4], -5);  // the next head's (spill) region is untouched
}

SPECGRAPH_INSTANTIATE_EXECUTORS(SparseStage);

// Regression (issue 11): the stage kernel stored negative indices from the engine's selection
// (slash INT32_MIN mapped to 14 - INT32_MIN, vertical -5) and left the guard clean. Indices are
// key positions in [0, end): anything else is bad input and the head is written empty (issue 20:
// never left holding an earlier stage's indices).
TEST_P(SparseStage, OutOfRangeSelectedIndicesAreRefusedAndTheHeadWrittenEmpty) {
  sparse_stage s;
  s.kind = stage_kind::intra;
  s.prev = 0;
  s.end = 15;
  s.chunk_len = 15;
  s.chunk_q_len = 15;
  const struct {
    std::vector<std::int32_t> vertical, slash;
    std::int32_t column;
    std::int64_t value;
  } cases[] = {
      {{1, 2}, {3, INT32_MIN}, 4 + 1, INT32_MIN},  // slash entries follow vertical_stride 4
      {{1, -5}, {3}, 1, -5},
      {{15}, {}, 0, 15},  // == end: not a key this stage has seen
  };
  for (const auto& c : cases) {
    const stage_run run =
        run_stage(*ex, s, {{0, 1}, c.vertical}, {{2}, c.slash}, {4, 4}, {4, 4}, 4, 4, /*stride=*/4);
    ASSERT_EQ(run.guard.violations, 1) << describe(run.guard);
    EXPECT_EQ(static_cast<violation_kind>(run.guard.kind), violation_kind::bad_input);
    EXPECT_EQ(run.guard.row, 1);
    EXPECT_EQ(run.guard.column, c.column);
    EXPECT_EQ(run.guard.value, c.value);
    for (std::int32_t col = 0; col < 4; ++col) {
      EXPECT_EQ(run.vertical[static_cast<std::size_t>(4 + col)], INT32_MAX) << "head 1 not empty";
      EXPECT_EQ(run.slash[static_cast<std::size_t>(4 + col)], INT32_MIN) << "head 1 not empty";
    }
    EXPECT_EQ(run.vertical_count[1], 0) << "head 1 not empty";
    EXPECT_EQ(run.slash_count[1], 0) << "head 1 not empty";
    EXPECT_EQ(run.vertical[0], 0) << "head 0 is fine and staged";
  }
}

}  // namespace
}  // namespace specgraph::testing
