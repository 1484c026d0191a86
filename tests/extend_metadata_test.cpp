// Draft-extend metadata (docs/extend.md) against the independent reference of
// extend_reference.hpp: the worked examples verbatim, then random rounds (W 1..16, page sizes
// 1/2/3/4/16/64, padded buckets, idle ranks, accept lengths 0..W, exact, spare and short
// capacities, buffers poisoned as if a previous round left stale values), in both entries (host
// twin, launcher on the host executor with the device real-batch word). Every output cell is
// checked, and the poisoned slack past every buffer and between page-table rows stays poisoned.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/executor.hpp"
#include "specgraph/extend_metadata.hpp"
#include "tests/extend_reference.hpp"
#include "tests/extend_run.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

void expect_cells(const std::vector<std::int32_t>& got, const std::vector<std::int64_t>& want,
                  const char* name) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << name << "[" << i << "]";
  }
  for (std::size_t i = want.size(); i < got.size(); ++i) {
    ASSERT_EQ(got[i], extend_poison) << name << "[" << i << "] written past the data";
  }
}

void expect_first(const guard_word& g, const extend_first& f, kernel_id k, std::int64_t cap,
                  const char* name) {
  ASSERT_EQ(g.violations, f.count) << name;
  if (f.count == 0) return;
  EXPECT_EQ(g.kernel, static_cast<std::int32_t>(k)) << name;
  EXPECT_EQ(g.row, f.row) << name;
  EXPECT_EQ(g.column, f.column) << name;
  EXPECT_EQ(g.value, f.value) << name;
  EXPECT_EQ(g.capacity, cap) << name;
}

void expect_matches(const extend_case& c, const extend_outputs& o) {
  const extend_expect e = extend_reference(c);
  expect_cells(o.position, e.position, "position");
  expect_cells(o.out_cache_loc, e.out_cache_loc, "out_cache_loc");
  expect_cells(o.select_index, e.select_index, "select_index");
  expect_cells(o.cache_seqlen, e.cache_seqlen, "cache_seqlen");
  expect_cells(o.cu_q, e.cu_q, "cu_seqlens_q");
  expect_cells(o.cu_k, e.cu_k, "cu_seqlens_k");
  expect_cells(o.max_k, {e.max_k}, "max_seqlen_k");
  std::vector<std::int64_t> table;  // the rows at their stride, the gap left poisoned
  for (const auto& row : e.page_rows) {
    table.insert(table.end(), row.begin(), row.end());
    table.insert(table.end(), extend_stride_gap, extend_poison);
  }
  expect_cells(o.page_table, table, "page_table");
  std::vector<std::int64_t> qo(e.cu_q), ones(static_cast<std::size_t>(c.bucket), 1);
  expect_cells(o.prefix_qo, qo, "prefix_qo_indptr");
  expect_cells(o.prefix_kv, e.prefix_indptr, "prefix_kv_indptr");
  expect_cells(o.prefix_indices, e.prefix_indices, "prefix_kv_indices");
  expect_cells(o.full_qo, qo, "full_qo_indptr");
  expect_cells(o.full_kv, e.full_indptr, "full_kv_indptr");
  expect_cells(o.full_indices, e.full_indices, "full_kv_indices");
  expect_cells(o.last_page_len, ones, "full_kv_last_page_len");
  EXPECT_EQ(o.guard[0].violations, 0) << describe(o.guard[0]);
  expect_first(o.guard[1], e.page, kernel_id::extend_page_table, c.page_capacity, "page");
  expect_first(o.guard[2], e.prefix, kernel_id::extend_triton_kv_indices, c.prefix_capacity,
               "prefix");
  expect_first(o.guard[3], e.full, kernel_id::extend_flashinfer_kv_indices, c.full_capacity,
               "full");
  expect_first(o.guard[4], e.accept, kernel_id::extend_select_index, c.window, "accept");
  if (e.accept.count > 0) {
    EXPECT_EQ(o.guard[4].kind, static_cast<int>(violation_kind::accept_len));
  }
}

// The request layout of spec example X1..X4: pool row p + 1 holds request p; row 0 all zeros.
extend_case example(std::int32_t ps, std::int32_t w, std::vector<std::int32_t> seq,
                    std::vector<std::int32_t> accept, std::int32_t bucket,
                    const std::vector<std::vector<std::int32_t>>& rows, std::int64_t width) {
  extend_case c;
  c.page_size = ps;
  c.window = w;
  c.bucket = bucket;
  c.real_batch = static_cast<std::int32_t>(seq.size());
  c.width = width;
  c.pool_rows = static_cast<std::int32_t>(rows.size()) + 1;
  c.req_to_token.assign(static_cast<std::size_t>(c.pool_rows * width), 0);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t q = 0; q < rows[r].size(); ++q) {
      c.req_to_token[(r + 1) * width + q] = rows[r][q];
    }
  }
  for (std::int32_t r = 0; r < bucket; ++r) {
    const bool real = r < c.real_batch;
    c.seq_len.push_back(real ? seq[r] : 1);
    c.accept_len.push_back(real ? accept[r] : 0);
    c.req_pool_index.push_back(real ? r + 1 : 0);
    if (real) c.max_seq_len = std::max(c.max_seq_len, seq[r]);
  }
  return c;
}

// Pages (ids) to slots, ps slots per page.
std::vector<std::int32_t> paged(const std::vector<std::int32_t>& pages, std::int32_t ps) {
  std::vector<std::int32_t> slots;
  for (const std::int32_t pg : pages) {
    for (std::int32_t i = 0; i < ps; ++i) slots.push_back(pg * ps + i);
  }
  return slots;
}

extend_outputs run_exact(extend_case& c, bool host_twin = true) {
  const extend_tables t = extend_exact_tables(c.bucket, c.max_seq_len, c.page_size, c.window);
  if (c.page_capacity == 0) c.page_capacity = t.page_capacity;
  if (c.prefix_capacity == 0) c.prefix_capacity = t.prefix_kv_capacity;
  if (c.full_capacity == 0) c.full_capacity = t.full_kv_capacity;
  auto ex = make_host_executor();
  return run_extend(*ex, c, host_twin);
}

TEST(ExtendExamples, X1PaddedBucket) {
  std::vector<std::int32_t> r1, r2;
  for (int q = 0; q < 8; ++q) r1.push_back(100 + q), r2.push_back(200 + q);
  extend_case c = example(1, 3, {4, 2}, {2, 3}, 3, {r1, r2}, 8);
  const extend_outputs o = run_exact(c);
  expect_matches(c, o);
  EXPECT_EQ(std::vector<std::int32_t>(o.position.begin(), o.position.begin() + 9),
            (std::vector<std::int32_t>{4, 5, 6, 2, 3, 4, 0, 0, 0}));
  EXPECT_EQ(std::vector<std::int32_t>(o.out_cache_loc.begin(), o.out_cache_loc.begin() + 9),
            (std::vector<std::int32_t>{104, 105, 106, 202, 203, 204, 0, 0, 0}));
  EXPECT_EQ(std::vector<std::int32_t>(o.select_index.begin(), o.select_index.begin() + 3),
            (std::vector<std::int32_t>{1, 5, 8}));
  EXPECT_EQ(std::vector<std::int32_t>(o.cache_seqlen.begin(), o.cache_seqlen.begin() + 3),
            (std::vector<std::int32_t>{7, 5, 1}));
  EXPECT_EQ(std::vector<std::int32_t>(o.cu_k.begin(), o.cu_k.begin() + 4),
            (std::vector<std::int32_t>{0, 7, 12, 13}));
  EXPECT_EQ(c.page_capacity, 7);  // ceil((M 4 + W 3) / 1)
  EXPECT_EQ(o.page_table[o.page_stride + 4], 204);
  EXPECT_EQ(o.page_table[o.page_stride + 5], 0);  // cleared, not SGLang's 205
  EXPECT_EQ(std::vector<std::int32_t>(o.prefix_kv.begin(), o.prefix_kv.begin() + 4),
            (std::vector<std::int32_t>{0, 4, 6, 6}));
  EXPECT_EQ(std::vector<std::int32_t>(o.prefix_indices.begin(), o.prefix_indices.begin() + 6),
            (std::vector<std::int32_t>{100, 101, 102, 103, 200, 201}));
  EXPECT_EQ(o.full_indices[12], 0);
  EXPECT_EQ(o.max_k[0], 7);
}

TEST(ExtendExamples, X2WindowCrossesAPage) {
  extend_case c = example(4, 4, {6}, {2}, 1, {paged({5, 9, 2, 7}, 4)}, 16);
  const extend_outputs o = run_exact(c);
  expect_matches(c, o);
  EXPECT_EQ(std::vector<std::int32_t>(o.out_cache_loc.begin(), o.out_cache_loc.begin() + 4),
            (std::vector<std::int32_t>{38, 39, 8, 9}));
  EXPECT_EQ(o.select_index[0], 1);
  EXPECT_EQ(o.cache_seqlen[0], 10);
  EXPECT_EQ(std::vector<std::int32_t>(o.page_table.begin(), o.page_table.begin() + 3),
            (std::vector<std::int32_t>{5, 9, 2}));
  EXPECT_EQ(std::vector<std::int32_t>(o.full_indices.begin(), o.full_indices.begin() + 10),
            (std::vector<std::int32_t>{20, 21, 22, 23, 36, 37, 38, 39, 8, 9}));
}

TEST(ExtendExamples, X3IdleRank) {
  extend_case c = example(4, 3, {}, {}, 2, {}, 4);
  c.max_seq_len = 0;
  const extend_outputs o = run_exact(c);
  expect_matches(c, o);
  EXPECT_EQ(std::vector<std::int32_t>(o.select_index.begin(), o.select_index.begin() + 2),
            (std::vector<std::int32_t>{2, 5}));
  EXPECT_EQ(std::vector<std::int32_t>(o.cu_k.begin(), o.cu_k.begin() + 3),
            (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(std::vector<std::int32_t>(o.prefix_kv.begin(), o.prefix_kv.begin() + 3),
            (std::vector<std::int32_t>{0, 0, 0}));
  EXPECT_EQ(std::vector<std::int32_t>(o.full_kv.begin(), o.full_kv.begin() + 3),
            (std::vector<std::int32_t>{0, 1, 2}));
}

TEST(ExtendExamples, X4ContextEdgeAndAcceptZero) {
  extend_case c = example(4, 4, {14, 3}, {0, 4}, 2,
                          {paged({3, 8, 1, 6, 4}, 4), paged({9, 2, 7, 5, 10}, 4)}, 20);
  c.page_capacity = 4;  // SGLang's table at max_context_len 16
  const extend_outputs o = run_exact(c);
  expect_matches(c, o);
  EXPECT_EQ(o.guard[1].violations, 1);
  EXPECT_EQ(o.guard[1].row, 0);
  EXPECT_EQ(o.guard[1].column, 4);
  EXPECT_EQ(o.guard[1].value, 4);
  EXPECT_EQ(o.guard[4].row, 0);
  EXPECT_EQ(std::vector<std::int32_t>(o.select_index.begin(), o.select_index.begin() + 2),
            (std::vector<std::int32_t>{0, 7}));
  EXPECT_EQ(std::vector<std::int32_t>(o.cache_seqlen.begin(), o.cache_seqlen.begin() + 2),
            (std::vector<std::int32_t>{18, 7}));
  EXPECT_EQ(std::vector<std::int32_t>(o.prefix_kv.begin(), o.prefix_kv.begin() + 3),
            (std::vector<std::int32_t>{0, 14, 17}));
  EXPECT_EQ(std::vector<std::int32_t>(o.full_kv.begin(), o.full_kv.begin() + 3),
            (std::vector<std::int32_t>{0, 18, 25}));
}

extend_case random_case(std::mt19937_64& rng) {
  auto pick = [&](std::int64_t lo, std::int64_t hi) {  // [lo, hi]
    return static_cast<std::int32_t>(lo + static_cast<std::int64_t>(rng() % (hi - lo + 1)));
  };
  const std::int32_t page_sizes[] = {1, 2, 3, 4, 16, 64};
  extend_case c;
  c.page_size = page_sizes[rng() % 6];
  c.window = rng() % 4 == 0 ? pick(1, 16) : pick(1, 5);
  c.bucket = pick(0, 4);
  c.real_batch = rng() % 3 == 0 ? pick(0, c.bucket) : c.bucket;
  const std::int32_t longest = rng() % 8 == 0 ? pick(0, 140) : pick(0, 12);
  c.max_seq_len = longest + pick(0, 2);
  c.pool_rows = c.bucket + 1 + pick(0, 1);
  c.width = c.max_seq_len + c.window + pick(0, 2);
  c.req_to_token.resize(static_cast<std::size_t>(c.pool_rows * c.width));
  for (auto& e : c.req_to_token) e = pick(0, rng() % 16 == 0 ? INT32_MAX : 1 << 20);
  // In one case in four acceptance's accept_index: a real row with a negative first entry (one
  // in three) accepted nothing and holds junk like a padded row.
  if (rng() % 4 == 0) {
    c.accept_stride = pick(1, 5);
    for (std::int64_t i = 0; i < c.bucket * c.accept_stride; ++i) {
      c.accept_index.push_back(i % c.accept_stride != 0 ? pick(-9, 99)
                               : rng() % 3 == 0         ? pick(-3, -1)
                                                        : pick(0, 99));
    }
  }
  for (std::int32_t r = 0; r < c.bucket; ++r) {
    const bool real = r < c.real_batch &&  // padded rows hold stale junk: never read
                      (c.accept_index.empty() ||
                       c.accept_index[static_cast<std::size_t>(r * c.accept_stride)] >= 0);
    c.seq_len.push_back(real ? pick(0, longest) : pick(-5, 1 << 20));
    c.accept_len.push_back(real ? pick(0, c.window) : pick(-5, 99));
    c.req_pool_index.push_back(real ? pick(1, c.pool_rows - 1) : pick(-3, 99));
  }
  const extend_tables t = extend_exact_tables(c.bucket, c.max_seq_len, c.page_size, c.window);
  // Capacities: exact (most), spare, or short of what this round uses.
  auto vary = [&](std::int64_t exact) {
    const std::uint64_t k = rng() % 8;
    return k < 5   ? exact
           : k < 6 ? exact + pick(1, 3)
                   : std::max<std::int64_t>(0, exact - pick(1, 40));
  };
  c.page_capacity = static_cast<std::int32_t>(std::max<std::int64_t>(1, vary(t.page_capacity)));
  c.prefix_capacity = vary(t.prefix_kv_capacity);
  c.full_capacity = vary(t.full_kv_capacity);
  return c;
}

TEST(ExtendRandom, EveryCellAgainstTheReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto ex = make_host_executor();
  const int cases = property_cases(1000000);
  std::int64_t cells = 0, unaccepted = 0;
  for (int i = 0; i < cases; ++i) {
    const extend_case c = random_case(rng);
    SCOPED_TRACE("case " + std::to_string(i));
    const bool twin = i % 2 == 0;
    const extend_outputs o = run_extend(*ex, c, twin, !twin && i % 4 == 1);
    expect_matches(c, o);
    if (HasFatalFailure()) return;
    cells += static_cast<std::int64_t>(o.page_table.size() + o.full_indices.size() +
                                       o.prefix_indices.size() + o.position.size());
    for (std::int32_t r = 0; r < c.real_batch && !c.accept_index.empty(); ++r) {
      unaccepted += c.accept_index[static_cast<std::size_t>(r * c.accept_stride)] < 0;
    }
  }
  if (cases >= 1000) {
    EXPECT_GT(unaccepted, 0) << "no real row that acceptance accepted nothing for";
  }
  RecordProperty("cells", std::to_string(cells));
  RecordProperty("unaccepted_rows", std::to_string(unaccepted));
}

// A bad request read on the device is recorded in guard[0] and written as a padded row; the
// host twin refuses the same input before writing anything, naming the field.
TEST(ExtendBadInput, DeviceRecordsAndPadsHostRefuses) {
  std::vector<std::int32_t> r1, r2;
  for (int q = 0; q < 8; ++q) r1.push_back(100 + q), r2.push_back(200 + q);
  struct bad {
    const char* field;
    int which;  // 0 pool row, 1 seq_len, 2 accept_len, 3 slot
    std::int32_t value;
    std::int32_t column, capacity;
  };
  const bad cases[] = {{"req_pool_index[1]", 0, 9, -1, 3},
                       {"seq_len[1]", 1, 5, -1, 4},
                       {"accept_len[1]", 2, 4, -3, 3},
                       {"req_to_token[2][3]", 3, -2, 3, -1}};
  auto ex = make_host_executor();
  for (const bad& b : cases) {
    SCOPED_TRACE(b.field);
    extend_case c = example(1, 3, {4, 2}, {2, 3}, 3, {r1, r2}, 8);
    const extend_tables t = extend_exact_tables(3, 4, 1, 3);
    c.page_capacity = t.page_capacity;
    c.prefix_capacity = t.prefix_kv_capacity;
    c.full_capacity = t.full_kv_capacity;
    extend_case good = c;
    if (b.which == 0) c.req_pool_index[1] = b.value;
    if (b.which == 1) c.seq_len[1] = b.value;
    if (b.which == 2) c.accept_len[1] = b.value;
    if (b.which == 3) c.req_to_token[2 * 8 + 3] = b.value;
    try {
      run_extend(*ex, c, true);
      ADD_FAILURE() << "accepted";
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(b.field), std::string::npos) << e.what();
    }
    const extend_outputs o = run_extend(*ex, c, false);
    EXPECT_EQ(o.guard[0].violations, 1) << describe(o.guard[0]);
    EXPECT_EQ(o.guard[0].kind, static_cast<int>(violation_kind::bad_input));
    EXPECT_EQ(o.guard[0].row, 1);
    EXPECT_EQ(o.guard[0].column, b.column);
    EXPECT_EQ(o.guard[0].capacity, b.capacity);
    EXPECT_EQ(o.guard[0].value, b.value);
    good.real_batch = 1;  // request 1 written exactly as a padded row
    const extend_expect e = extend_reference(good);
    EXPECT_EQ(o.select_index[1], e.select_index[1]);
    EXPECT_EQ(o.cache_seqlen[1], 1);
    EXPECT_EQ(o.position[3], 0);
    EXPECT_EQ(o.out_cache_loc[4], 0);
    EXPECT_EQ(o.full_kv[2], 8);  // 7 keys + the padded row's one
  }
}

TEST(ExtendValidation, NamesTheFieldAndTheLimit) {
  auto ex = make_host_executor();
  std::vector<std::int32_t> r1(8, 1);
  extend_case c = example(1, 3, {4}, {2}, 1, {r1}, 8);
  const extend_tables t = extend_exact_tables(1, 4, 1, 3);
  c.page_capacity = t.page_capacity;
  c.prefix_capacity = t.prefix_kv_capacity;
  c.full_capacity = t.full_kv_capacity;
  auto expect_refused = [&](extend_case bad, const char* what) {
    try {
      run_extend(*ex, bad, true);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  extend_case w = c;
  w.window = max_extend_tokens + 1;
  expect_refused(w, "extend_tokens");
  extend_case ps = c;
  ps.page_size = 0;
  expect_refused(ps, "page_size: 0 is below the minimum 1");
  extend_case narrow = c;
  narrow.width = 6;  // seq_len 4 + W 3 = 7 positions
  narrow.req_to_token.resize(12);
  expect_refused(narrow, "past the row width req_to_token_stride 6");
  extend_case big = c;
  big.max_seq_len = 0x7fffffff / 2;
  expect_refused(big, "max_seq_len");
  // The layouts rule: a layout partly given is refused, naming the missing pointer.
  extend_params p;
  p.cache_seqlen = c.seq_len.data();
  try {
    extend_layouts_of(p, "outputs.");
    ADD_FAILURE() << "accepted a partial fa3 layout";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("outputs.page_table"), std::string::npos) << e.what();
  }
}

TEST(ExtendCapacities, TheSpecsSizingTable) {
  // Bucket 256, W 8, M 131072 (docs/extend.md).
  EXPECT_EQ(extend_prefix_kv_capacity(256, 131072), 33554432);
  EXPECT_EQ(extend_full_kv_capacity(256, 131072, 8), 33556480);
  EXPECT_EQ(extend_page_columns(131072, 1, 8), 131080);
  EXPECT_EQ(extend_page_columns(131072, 64, 8), 2049);
  const extend_engine_reservation e = extend_engine_reservations(256, 131072, 64, 8);
  EXPECT_EQ(e.triton_kv_indices, 268435456);
  EXPECT_EQ(e.flashinfer_kv_indices, 268435456);
  EXPECT_EQ(e.flashinfer_mask_bytes, 268435456);
  EXPECT_EQ(e.fa3_page_table, 256 * 2048);
}

}  // namespace
}  // namespace specgraph::testing
