// The prefix table across rounds (docs/metadata.md section 2), against the independent round
// model (testing/reference_round.hpp): a refused request is written as a padded request after a
// good round left its row full (no stale page survives); req_to_token wider than
// max_context_len is read at its own stride (poison in the extra columns never shows); with
// high-water marks a short round after a long one clears exactly the cells the long one left,
// writes no cell past them, and a corrupted mark rewrites the whole row.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "specgraph/metadata.hpp"
#include "testing/reference_round.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t ps_values[] = {1, 4, 16};
constexpr std::int32_t max_context = 96, pool_rows = 9, batch = 6, topk = 2;
constexpr std::int64_t kv_slots = 1 << 20;
constexpr std::int32_t poison = -77;

// One request pool: token pos of pool row `row` on page (shuffled) * ps + pos % ps; `extra`
// columns past max_context hold `extra_value` (an engine's wider table).
std::vector<std::int32_t> make_pool(std::mt19937_64& rng, std::int32_t ps, std::int64_t stride,
                                    std::int32_t extra_value) {
  const std::int32_t per_row = (max_context + ps - 1) / ps;
  std::vector<std::int32_t> pages(static_cast<std::size_t>(pool_rows) * per_row);
  std::iota(pages.begin(), pages.end(), 1);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<std::int32_t> rtt(static_cast<std::size_t>(pool_rows * stride), extra_value);
  for (std::int32_t row = 0; row < pool_rows; ++row) {
    for (std::int32_t pos = 0; pos < max_context; ++pos) {
      rtt[static_cast<std::size_t>(row * stride + pos)] =
          row == 0 ? 0 : pages[static_cast<std::size_t>(row * per_row + pos / ps)] * ps + pos % ps;
    }
  }
  return rtt;
}

// The prefix kernels over device buffers that persist between rounds, like an arena's.
struct prefix_rig {
  executor& ex;
  std::int32_t ps;
  std::int64_t stride;  // of req_to_token
  std::int32_t capacity;
  bool marks;
  dvec<std::int32_t> rtt, pool, seq, lpl, pseq, table, cu, refused, high_water;
  dvec<guard_word> guard;

  prefix_rig(executor& e, std::int32_t page_size, const std::vector<std::int32_t>& r2t,
             std::int64_t r2t_stride, bool with_marks)
      : ex(e),
        ps(page_size),
        stride(r2t_stride),
        capacity((max_context + page_size - 1) / page_size),
        marks(with_marks),
        rtt(e, r2t),
        pool(e, batch, 0),
        seq(e, batch, 1),
        lpl(e, batch, poison),
        pseq(e, batch, poison),
        table(e, static_cast<std::size_t>(batch * capacity), poison),
        cu(e, batch + 1, poison),
        refused(e, batch, 0),
        high_water(e, 2 * batch, capacity),  // the poisoned table: every cell may be non-zero
        guard(e, 1, guard_word{}) {}

  guard_word run(const std::vector<std::int32_t>& pools, const std::vector<std::int32_t>& lens) {
    ex.copy_to_device(pool.data(), pools.data(), pools.size() * 4);
    ex.copy_to_device(seq.data(), lens.data(), lens.size() * 4);
    ex.fill_bytes(guard.data(), 0, sizeof(guard_word));
    prefix_params p;
    p.req_to_token = rtt.data();
    p.req_to_token_stride = stride;
    p.max_seq_len = max_context;
    p.pool_rows = pool_rows;
    p.req_pool_index = pool.data();
    p.seq_len = seq.data();
    p.batch = batch;
    p.topk = topk;
    p.page_size = ps;
    p.last_page_len = lpl.data();
    p.prefix_seqlen = pseq.data();
    p.page_table = table.data();
    p.page_table_stride = capacity;
    p.capacity = capacity;
    p.cu_seqlens_q = cu.data();
    p.guard = guard.data();
    p.slot_limit = kv_slots;
    p.refused = refused.data();
    if (marks) {
      p.high_water = high_water.data();
      p.high_water_before = high_water.data() + batch;
    }
    launch_prefix_metadata(ex, p);
    return guard.download()[0];
  }
};

model_round model_of(std::int32_t ps, const std::vector<std::int32_t>& rtt, std::int64_t stride,
                     const std::vector<std::int32_t>& pools,
                     const std::vector<std::int32_t>& lens) {
  model_config m;
  m.topk = topk;
  m.num_steps = 1;
  m.page_size = ps;
  m.max_context_len = max_context;
  m.buckets = {batch};
  m.pool_rows = pool_rows;
  m.kv_slots = kv_slots;
  m.req_to_token_stride = stride;
  return model_draft_round(m, rtt, batch, pools, lens,
                           std::vector<std::int64_t>(static_cast<std::size_t>(batch * topk), 0),
                           /*depth=*/0);
}

void expect_model(prefix_rig& rig, const model_round& want, const std::string& what) {
  EXPECT_EQ(rig.table.download(), want.prefix_table) << what << ": page table";
  EXPECT_EQ(rig.lpl.download(), want.last_page_len) << what << ": last_page_len";
  EXPECT_EQ(rig.pseq.download(), want.prefix_seqlen) << what << ": prefix_seqlen";
  EXPECT_EQ(rig.cu.download(), want.cu_seqlens_q) << what << ": cu_seqlens_q";
}

std::vector<std::int32_t> long_lengths(std::mt19937_64& rng) {
  std::vector<std::int32_t> v;
  for (int r = 0; r < batch; ++r) v.push_back(max_context - static_cast<std::int32_t>(rng() % 8));
  return v;
}
std::vector<std::int32_t> short_lengths(std::mt19937_64& rng) {
  std::vector<std::int32_t> v;
  for (int r = 0; r < batch; ++r) v.push_back(static_cast<std::int32_t>(rng() % 24));
  return v;
}
const std::vector<std::int32_t> pools{1, 2, 3, 4, 5, 6};

class PrefixRows : public ExecutorTest {};

// Round 1 fills every row; round 2 refuses requests 1 (pool row out of range), 3 (length past
// max_context_len) and 4 (a page whose slot is out of range): each must equal a padded row cell
// by cell (the model), and each refusal is counted. With and without high-water marks.
TEST_P(PrefixRows, ARefusedRequestAfterAFullRoundIsWrittenAsAPaddedRow) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const std::int32_t ps : ps_values) {
    for (const bool marks : {false, true}) {
      SCOPED_TRACE("page_size " + std::to_string(ps) + (marks ? ", marks" : ", no marks"));
      std::vector<std::int32_t> rtt = make_pool(rng, ps, max_context, 0);
      prefix_rig rig(*ex, ps, rtt, max_context, marks);
      const std::vector<std::int32_t> lens = long_lengths(rng);
      EXPECT_EQ(rig.run(pools, lens).violations, 0);
      expect_model(rig, model_of(ps, rtt, max_context, pools, lens), "round 1");
      std::vector<std::int32_t> bad_pools = pools, bad_lens = long_lengths(rng);
      bad_pools[1] = pool_rows;  // one past the pool
      bad_lens[3] = max_context + 1;
      rtt[static_cast<std::size_t>(bad_pools[4] * max_context + 2 * ps)] = kv_slots;  // page 2
      rig.ex.copy_to_device(rig.rtt.data(), rtt.data(), rtt.size() * 4);
      const guard_word g = rig.run(bad_pools, bad_lens);
      const model_round want = model_of(ps, rtt, max_context, bad_pools, bad_lens);
      ASSERT_EQ(want.prefix_violations, 3);
      EXPECT_EQ(g.violations, want.prefix_violations) << describe(g);
      EXPECT_EQ(g.row, 1) << describe(g);
      expect_model(rig, want, "round 2");
      const auto table = rig.table.download();
      for (const std::int32_t r : {1, 3, 4}) {
        for (std::int32_t col = 0; col < rig.capacity; ++col) {
          EXPECT_EQ(table[static_cast<std::size_t>(r * rig.capacity + col)], 0)
              << "request " << r << " column " << col << ": a padded row reads the dummy page";
        }
      }
    }
  }
}

// An engine's req_to_token is wider than max_context_len: rows are read at its real stride and
// no value of the extra columns (a recognisable page) appears anywhere.
TEST_P(PrefixRows, AWiderReqToTokenIsReadAtItsOwnStride) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const std::int32_t ps : ps_values) {
    for (const std::int64_t extra : {1, 7, 64}) {
      SCOPED_TRACE("page_size " + std::to_string(ps) + ", extra columns " + std::to_string(extra));
      const std::int32_t poison_slot = 54321 * ps;  // page 54321: no real page is that high
      const std::int64_t stride = max_context + extra;
      const std::vector<std::int32_t> rtt = make_pool(rng, ps, stride, poison_slot);
      prefix_rig rig(*ex, ps, rtt, stride, true);
      const std::vector<std::int32_t> lens = long_lengths(rng);
      EXPECT_EQ(rig.run(pools, lens).violations, 0);
      expect_model(rig, model_of(ps, rtt, stride, pools, lens), "wider table");
      const auto table = rig.table.download();
      EXPECT_EQ(std::count(table.begin(), table.end(), 54321), 0) << "an extra column was read";
    }
  }
}

// A short round after a long one: the tail the long one left is cleared (the model's zeros,
// exact cells), and with the marks no cell past max(previous mark, new pages) is written: a
// value planted there (where the table is zero by the marks' account) survives.
TEST_P(PrefixRows, AShortRoundAfterALongOneClearsExactlyTheCellsItLeft) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const std::int32_t ps : ps_values) {
    SCOPED_TRACE("page_size " + std::to_string(ps));
    const std::vector<std::int32_t> rtt = make_pool(rng, ps, max_context, 0);
    prefix_rig rig(*ex, ps, rtt, max_context, true);
    const std::vector<std::int32_t> lens1 = long_lengths(rng), lens2 = short_lengths(rng);
    (void)rig.run(pools, lens1);
    expect_model(rig, model_of(ps, rtt, max_context, pools, lens1), "long round");
    const auto marks1 = rig.high_water.download();
    (void)rig.run(pools, lens2);
    expect_model(rig, model_of(ps, rtt, max_context, pools, lens2), "short round");
    const auto marks2 = rig.high_water.download();
    for (std::int32_t r = 0; r < batch; ++r) {
      EXPECT_EQ(marks1[static_cast<std::size_t>(r)], lens1[static_cast<std::size_t>(r)] / ps);
      EXPECT_EQ(marks2[static_cast<std::size_t>(r)], lens2[static_cast<std::size_t>(r)] / ps);
    }
    // Plant a value in every cell the marks say is zero; a third short round must not touch
    // them (bytes written follow the lengths), and must write every cell below.
    std::vector<std::int32_t> table = rig.table.download();
    for (std::int32_t r = 0; r < batch; ++r) {
      for (std::int32_t col = marks2[static_cast<std::size_t>(r)]; col < rig.capacity; ++col) {
        table[static_cast<std::size_t>(r * rig.capacity + col)] = poison;
      }
    }
    rig.ex.copy_to_device(rig.table.data(), table.data(), table.size() * 4);
    const std::vector<std::int32_t> lens3 = short_lengths(rng);
    (void)rig.run(pools, lens3);
    const model_round want = model_of(ps, rtt, max_context, pools, lens3);
    const auto got = rig.table.download();
    for (std::int32_t r = 0; r < batch; ++r) {
      const std::int32_t written =
          std::max(marks2[static_cast<std::size_t>(r)], lens3[static_cast<std::size_t>(r)] / ps);
      for (std::int32_t col = 0; col < rig.capacity; ++col) {
        const auto i = static_cast<std::size_t>(r * rig.capacity + col);
        EXPECT_EQ(got[i], col < written ? want.prefix_table[i] : poison)
            << "request " << r << " column " << col << " (cells written: " << written << ")";
      }
    }
  }
}

// A corrupted mark (negative, past the capacity) counts as the whole row: every cell is
// rewritten, and the mark is set right again.
TEST_P(PrefixRows, ACorruptedMarkRewritesTheWholeRow) {
  std::mt19937_64 rng(test_seed());
  const std::int32_t ps = 4;
  const std::vector<std::int32_t> rtt = make_pool(rng, ps, max_context, 0);
  prefix_rig rig(*ex, ps, rtt, max_context, true);
  const std::vector<std::int32_t> bad{
      -1, rig.capacity + 1, 0x7fffffff, -0x7fffffff - 1, rig.capacity, 0};
  std::vector<std::int32_t> marks = bad;
  marks.resize(2 * batch, 5);
  rig.ex.copy_to_device(rig.high_water.data(), marks.data(), marks.size() * 4);
  const std::vector<std::int32_t> lens = short_lengths(rng);
  (void)rig.run(pools, lens);
  const model_round want = model_of(ps, rtt, max_context, pools, lens);
  const auto got = rig.table.download();
  for (std::int32_t r = 0; r < 5; ++r) {  // request 5's mark 0 is taken at its word: not checked
    for (std::int32_t col = 0; col < rig.capacity; ++col) {
      const auto i = static_cast<std::size_t>(r * rig.capacity + col);
      EXPECT_EQ(got[i], want.prefix_table[i]) << "request " << r << " column " << col;
    }
  }
  const auto after = rig.high_water.download();
  for (std::int32_t r = 0; r < batch; ++r) {
    EXPECT_EQ(after[static_cast<std::size_t>(r)], lens[static_cast<std::size_t>(r)] / ps);
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(PrefixRows);

}  // namespace
}  // namespace specgraph::testing
