// Prefix metadata (docs/metadata.md section 2) against an independent reference.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/metadata.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t poison = -9;

struct prefix_case {
  std::int32_t pool_rows = 0, max_context = 0, page_size = 0, topk = 0, capacity = 0;
  std::vector<std::int32_t> req_to_token;  // [pool_rows][max_context]
  std::vector<std::int32_t> req_pool_index, seq_len;
};

// Fills req_to_token with paged layouts: token pos of a pool row sits at
// page(pos / ps) * ps + pos % ps, pages drawn from a shuffled pool.
prefix_case make_prefix_case(std::mt19937_64& rng, std::int32_t batch, std::int32_t ps,
                             std::int32_t topk, std::int32_t max_context) {
  prefix_case c;
  c.pool_rows = batch + static_cast<std::int32_t>(rng() % 4);
  c.max_context = max_context;
  c.page_size = ps;
  c.topk = topk;
  c.capacity = (max_context + ps - 1) / ps;
  const std::int32_t pages_per_row = (max_context + ps - 1) / ps;
  std::vector<std::int32_t> pages(static_cast<std::size_t>(c.pool_rows) * pages_per_row);
  std::iota(pages.begin(), pages.end(), 1);
  std::shuffle(pages.begin(), pages.end(), rng);
  c.req_to_token.resize(static_cast<std::size_t>(c.pool_rows) * max_context);
  for (std::int32_t row = 0; row < c.pool_rows; ++row) {
    for (std::int32_t pos = 0; pos < max_context; ++pos) {
      const std::int32_t page = pages[static_cast<std::size_t>(row * pages_per_row + pos / ps)];
      c.req_to_token[static_cast<std::size_t>(row) * max_context + pos] = page * ps + pos % ps;
    }
  }
  std::vector<std::int32_t> rows(static_cast<std::size_t>(c.pool_rows));
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  std::uniform_int_distribution<std::int32_t> len(0, max_context);
  for (std::int32_t r = 0; r < batch; ++r) {
    c.req_pool_index.push_back(rows[static_cast<std::size_t>(r)]);
    c.seq_len.push_back(len(rng));
  }
  return c;
}

class PrefixMetadata : public ExecutorTest {};

TEST_P(PrefixMetadata, RandomBatchesMatchReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::int32_t page_sizes[] = {1, 2, 4, 16, 64, 256};
  const int cases = property_cases(10000);
  for (int i = 0; i < cases; ++i) {
    const std::int32_t ps = page_sizes[rng() % 6];
    const auto topk = static_cast<std::int32_t>(1 + rng() % 8);
    const auto batch = static_cast<std::int32_t>(1 + (rng() % 4 == 0 ? rng() % 256 : rng() % 16));
    const auto max_context = static_cast<std::int32_t>(1 + rng() % 600);
    const prefix_case c = make_prefix_case(rng, batch, ps, topk, max_context);
    SCOPED_TRACE("case " + std::to_string(i) + ": ps " + std::to_string(ps) + " batch " +
                 std::to_string(batch) + " max_context " + std::to_string(max_context));
    const std::int64_t stride = c.capacity + 1;  // one padding column that must stay poison

    dvec<std::int32_t> rtt(*ex, c.req_to_token), pool_index(*ex, c.req_pool_index),
        seq_len(*ex, c.seq_len);
    dvec<std::int32_t> lpl(*ex, static_cast<std::size_t>(batch), poison),
        prefix_len(*ex, static_cast<std::size_t>(batch), poison),
        table(*ex, static_cast<std::size_t>(batch * stride), poison),
        cu(*ex, static_cast<std::size_t>(batch + 2), poison);
    dvec<guard_word> guard(*ex, 1, guard_word{});
    dvec<std::int32_t> refused(*ex, static_cast<std::size_t>(batch), poison);
    // A quarter of the cases cap the slots, so some requests hold a slot out of range: those are
    // refused whole, every bad slot is counted, and the guard names the lowest (request, column).
    std::int64_t slot_limit = std::numeric_limits<std::int64_t>::max();
    if (rng() % 4 == 0) {
      const std::int32_t top = *std::max_element(c.req_to_token.begin(), c.req_to_token.end());
      slot_limit = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(top + 1));
    }
    prefix_params p;
    p.refused = refused.data();
    p.slot_limit = slot_limit;
    p.req_to_token = rtt.data();
    p.req_to_token_stride = max_context;
    p.pool_rows = c.pool_rows;
    p.req_pool_index = pool_index.data();
    p.seq_len = seq_len.data();
    p.batch = batch;
    p.topk = topk;
    p.page_size = ps;
    p.last_page_len = lpl.data();
    p.prefix_seqlen = prefix_len.data();
    p.page_table = table.data();
    p.page_table_stride = stride;
    p.capacity = c.capacity;
    p.cu_seqlens_q = cu.data();
    p.guard = guard.data();
    launch_prefix_metadata(*ex, p);
    ex->synchronize();

    const auto got_lpl = lpl.download(), got_len = prefix_len.download(),
               got_table = table.download(), got_cu = cu.download();
    std::int32_t bad_slots = 0, first_row = -1, first_column = -1;
    for (std::int32_t r = 0; r < batch; ++r) {
      const std::int32_t seq = c.seq_len[static_cast<std::size_t>(r)];
      const std::int32_t want_lpl = seq % ps;
      const std::int32_t* tokens =
          c.req_to_token.data() +
          static_cast<std::size_t>(c.req_pool_index[static_cast<std::size_t>(r)]) * max_context;
      bool refused_request = false;
      for (std::int32_t j = 0; j < (seq - want_lpl) / ps; ++j) {
        if (tokens[static_cast<std::size_t>(j) * ps] >= slot_limit) {
          ++bad_slots;
          refused_request = true;
          if (first_row < 0) {
            first_row = r;
            first_column = j * ps;
          }
        }
      }
      if (refused_request) {
        // Written as a padded request (pool row 0, one token): no poison survives in the row.
        ASSERT_EQ(got_lpl[static_cast<std::size_t>(r)], 1 % ps) << "refused request " << r;
        ASSERT_EQ(got_len[static_cast<std::size_t>(r)], 1 - 1 % ps) << "refused request " << r;
        const std::int32_t pad_slot = c.req_to_token[0];
        const std::int32_t pad_page = ps == 1 && pad_slot < slot_limit ? pad_slot : 0;
        for (std::int64_t col = 0; col < stride; ++col) {
          ASSERT_EQ(got_table[static_cast<std::size_t>(r * stride + col)], col == stride - 1
                                                                               ? poison
                                                                           : col == 0 ? pad_page
                                                                                      : 0)
              << "refused request " << r << " column " << col;
        }
        continue;
      }
      ASSERT_EQ(got_lpl[static_cast<std::size_t>(r)], want_lpl) << "request " << r;
      ASSERT_EQ(got_len[static_cast<std::size_t>(r)], seq - want_lpl) << "request " << r;
      const std::int32_t pages = (seq - want_lpl) / ps;
      for (std::int64_t col = 0; col < stride; ++col) {
        std::int32_t want = 0;
        if (col == stride - 1) {
          want = poison;
        } else if (col < pages) {
          want = c.req_to_token[static_cast<std::size_t>(
                                    c.req_pool_index[static_cast<std::size_t>(r)]) *
                                    max_context +
                                static_cast<std::size_t>(col * ps)] /
                 ps;
        }
        ASSERT_EQ(got_table[static_cast<std::size_t>(r * stride + col)], want)
            << "request " << r << " column " << col;
      }
    }
    for (std::int32_t r = 0; r <= batch; ++r)
      ASSERT_EQ(got_cu[static_cast<std::size_t>(r)], r * topk);
    ASSERT_EQ(got_cu[static_cast<std::size_t>(batch + 1)], poison);
    // The bad-slot guard names the lowest (request, column) and counts every bad slot (a kernel
    // recording the page index, or the last violation, instead fails here).
    const guard_word g = guard.download()[0];
    ASSERT_EQ(g.violations, bad_slots);
    if (bad_slots > 0) {
      ASSERT_EQ(static_cast<violation_kind>(g.kind), violation_kind::bad_input);
      ASSERT_EQ(g.row, first_row);
      ASSERT_EQ(g.column, first_column);
      ASSERT_GE(g.value, slot_limit);
    }
  }
}

// The refused request is written as a padded one (pool row 0, seq_len 1): ps 4 gives
// last_page_len 1, no whole page, the dummy page in every cell.
TEST_P(PrefixMetadata, OutOfPoolIndexIsReportedAndTheRowWrittenAsAPaddedRow) {
  dvec<std::int32_t> rtt(*ex, std::vector<std::int32_t>{4, 5, 6, 7, 8, 9, 10, 11});
  dvec<std::int32_t> pool_index(*ex, std::vector<std::int32_t>{0, 3});  // 3 >= pool_rows 1
  dvec<std::int32_t> seq_len(*ex, std::vector<std::int32_t>{6, 4});
  dvec<std::int32_t> lpl(*ex, 2, poison), prefix_len(*ex, 2, poison), table(*ex, 4, poison),
      cu(*ex, 3, poison);
  dvec<guard_word> guard(*ex, 1, guard_word{});
  dvec<std::int32_t> refused(*ex, 2, poison);
  prefix_params p;
  p.refused = refused.data();
  p.req_to_token = rtt.data();
  p.req_to_token_stride = 8;
  p.pool_rows = 1;
  p.req_pool_index = pool_index.data();
  p.seq_len = seq_len.data();
  p.batch = 2;
  p.topk = 1;
  p.page_size = 4;
  p.last_page_len = lpl.data();
  p.prefix_seqlen = prefix_len.data();
  p.page_table = table.data();
  p.page_table_stride = 2;
  p.capacity = 2;
  p.cu_seqlens_q = cu.data();
  p.guard = guard.data();
  launch_prefix_metadata(*ex, p);
  const guard_word g = guard.download()[0];
  ASSERT_EQ(g.violations, 1);
  EXPECT_EQ(static_cast<violation_kind>(g.kind), violation_kind::bad_input);
  EXPECT_EQ(g.row, 1);
  EXPECT_EQ(g.value, 3);
  EXPECT_EQ(table.download(), (std::vector<std::int32_t>{1, 0, 0, 0}));
  EXPECT_EQ(lpl.download(), (std::vector<std::int32_t>{2, 1}));
  EXPECT_EQ(prefix_len.download(), (std::vector<std::int32_t>{4, 0}));
}

SPECGRAPH_INSTANTIATE_EXECUTORS(PrefixMetadata);

TEST(PrefixValidation, RejectsBadValuesByNameBeforeWriting) {
  std::vector<std::int32_t> rtt{4, 5, 6, 7, 8, 9, 10, 11}, pool_index{0}, seq_len{6};
  std::vector<std::int32_t> lpl(1, poison), prefix_len(1, poison), table(2, poison), cu(2, poison);
  guard_word guard{};
  prefix_params p;
  p.req_to_token = rtt.data();
  p.req_to_token_stride = 8;
  p.pool_rows = 1;
  p.req_pool_index = pool_index.data();
  p.seq_len = seq_len.data();
  p.batch = 1;
  p.topk = 2;
  p.page_size = 4;
  p.last_page_len = lpl.data();
  p.prefix_seqlen = prefix_len.data();
  p.page_table = table.data();
  p.page_table_stride = 2;
  p.capacity = 2;
  p.cu_seqlens_q = cu.data();
  p.guard = &guard;
  auto expect_field = [&](prefix_params q, const std::string& field, const std::string& detail) {
    try {
      prefix_metadata_host(q);
      ADD_FAILURE() << "expected rejection of " << field;
    } catch (const invalid_argument& e) {
      EXPECT_EQ(e.field(), field);
      EXPECT_NE(std::string(e.what()).find(detail), std::string::npos) << e.what();
    }
    EXPECT_EQ(table, std::vector<std::int32_t>(2, poison));
    EXPECT_EQ(cu, std::vector<std::int32_t>(2, poison));
  };
  prefix_params q = p;
  q.page_size = 0;
  expect_field(q, "page_size", "0 is below the minimum 1");
  q = p;
  q.capacity = 0;
  expect_field(q, "capacity", "0 is below the minimum 1");
  q = p;
  q.topk = 0;
  expect_field(q, "topk", "0");
  seq_len[0] = 9;
  expect_field(p, "seq_len[0]", "9 exceeds max_context_len 8");
  seq_len[0] = 6;
  pool_index[0] = 1;
  expect_field(p, "req_pool_index[0]", "1 is outside [0, pool_rows 1)");
  pool_index[0] = 0;
  rtt[0] = -3;
  expect_field(p, "req_to_token[0][0]", "-3 is outside [0,");
  rtt[0] = 4;
  prefix_metadata_host(p);  // and the repaired input goes through
  EXPECT_EQ(table, (std::vector<std::int32_t>{1, 0}));
  EXPECT_EQ(cu, (std::vector<std::int32_t>{0, 2}));
}

}  // namespace
}  // namespace specgraph::testing
