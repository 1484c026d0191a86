// CSR draft-decode KV indices: the worked examples and overflow cases of docs/csr.md, with every
// output cell checked (poison where nothing may be written), and bad inputs refused by name with
// nothing written.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "specgraph/kv_indices.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t poison = -1;
using ints = std::vector<std::int32_t>;

// One launch over host memory: steps first..first+count-1, a stride of `stride` per step (or
// packed by capacities with stride 0), three canary cells after the last step.
struct example {
  kv_indices_params p;
  ints req_to_token, req_pool_index, seq_len;
  ints indptr, indices;
  std::vector<guard_word> guards;

  example(std::int32_t ps, std::int32_t topk, std::int32_t steps, ints seq, ints pool, ints rtt,
          std::int64_t width)
      : req_to_token(std::move(rtt)), req_pool_index(std::move(pool)), seq_len(std::move(seq)) {
    p.page_size = ps;
    p.topk = topk;
    p.num_steps = steps;
    p.step_count = steps;
    p.batch = static_cast<std::int32_t>(seq_len.size());
    p.req_to_token_stride = width;
    p.pool_rows = static_cast<std::int32_t>(static_cast<std::int64_t>(req_to_token.size()) / width);
    p.max_seq_len = 0;
    for (std::int32_t s : seq_len) p.max_seq_len = std::max(p.max_seq_len, s);
  }
  // Sizes every step `capacity` wide (growth 0) unless set before.
  void run(std::int32_t capacity, std::int64_t stride) {
    p.capacity = capacity;
    p.kv_indices_stride = stride;
    const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.topk;
    p.kv_indptr_stride = rows + 1;
    std::int64_t cells = 0;
    for (std::int32_t k = 0; k < p.step_count; ++k) {
      cells += stride > 0 ? stride : p.capacity + k * p.capacity_growth;
    }
    indptr.assign(static_cast<std::size_t>(p.step_count * (rows + 1)), poison);
    indices.assign(static_cast<std::size_t>(cells + 3), poison);
    guards.assign(static_cast<std::size_t>(p.step_count), guard_word{});
    p.req_to_token = req_to_token.data();
    p.req_pool_index = req_pool_index.data();
    p.seq_len = seq_len.data();
    p.kv_indptr = indptr.data();
    p.kv_indices_i32 = indices.data();
    p.guard = guards.data();
    draft_kv_indices_host(p);
  }
  ints step_indptr(std::int32_t k) const {
    const std::size_t n = static_cast<std::size_t>(p.batch * p.topk + 1);
    return ints(indptr.begin() + static_cast<std::ptrdiff_t>(k * n),
                indptr.begin() + static_cast<std::ptrdiff_t>((k + 1) * n));
  }
  ints step_cells(std::int64_t from, std::int64_t n) const {
    return ints(indices.begin() + from, indices.begin() + from + n);
  }
};

ints pool_row(std::int32_t base, std::int32_t width) {
  ints row;
  for (std::int32_t p = 0; p < width; ++p) row.push_back(base + p);
  return row;
}
ints concat(std::initializer_list<ints> parts) {
  ints out;
  for (const ints& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

TEST(KvIndicesExamples, A1TwoRequestsTwoBranchesPageSizeOne) {
  const std::int32_t w = 16;
  example e(1, 2, 3, {3, 2}, {1, 2}, concat({pool_row(0, w), pool_row(100, w), pool_row(200, w)}),
            w);
  e.run(30, 30);
  EXPECT_EQ(e.step_indptr(0), (ints{0, 4, 8, 11, 14}));
  EXPECT_EQ(e.step_indptr(1), (ints{0, 5, 10, 14, 18}));
  EXPECT_EQ(e.step_indptr(2), (ints{0, 6, 12, 17, 22}));
  ints step0 = {100, 101, 102, 103, 100, 101, 102, 106, 200, 201, 202, 200, 201, 205};
  step0.resize(30, poison);  // cells 14.. of the step's 30 untouched
  EXPECT_EQ(e.step_cells(0, 30), step0);
  EXPECT_EQ(e.step_cells(60 + 17, 5), (ints{200, 201, 205, 206, 207}));
  EXPECT_EQ(e.step_cells(60 + 22, 8 + 3), ints(11, poison));  // past used, and the canaries
  for (const guard_word& g : e.guards) EXPECT_EQ(g.violations, 0);
}

// A2 and A4: the page-aligned branch regions of ps = 4, topk = 2, from a token table and from
// the page-granular table (E = 4) holding the same pages.
TEST(KvIndicesExamples, A2A4BranchRegionsOnPagesTokenAndPageTables) {
  const ints pages = {5, 9, 2, 7, 3, 11};
  ints tokens;
  for (std::int32_t page : pages) {
    for (std::int32_t o = 0; o < 4; ++o) tokens.push_back(page * 4 + o);
  }
  for (const std::int32_t entry_page_size : {1, 4}) {
    SCOPED_TRACE("entry_page_size " + std::to_string(entry_page_size));
    example e(4, 2, 2, {6}, {0}, entry_page_size == 1 ? tokens : pages,
              entry_page_size == 1 ? 24 : 6);
    e.p.entry_page_size = entry_page_size;
    e.run(16, 16);
    EXPECT_EQ(e.step_indptr(0), (ints{0, 7, 14}));
    EXPECT_EQ(e.step_indptr(1), (ints{0, 8, 16}));
    EXPECT_EQ(e.step_cells(0, 16),
              (ints{20, 21, 22, 23, 36, 37, 38, 20, 21, 22, 23, 36, 37, 10, poison, poison}));
    EXPECT_EQ(e.step_cells(16, 19), (ints{20, 21, 22, 23, 36, 37, 38, 39, 20, 21, 22, 23, 36, 37,
                                          10, 11, poison, poison, poison}));
  }
}

// A2's request with branch regions laid out from slot_stride 3 = num_steps + 1 (SGLang's
// S = 3 slots per branch, S - 1 = 2 draft forwards). By hand: pages {5, 9, 2, 7, 3, 11},
// seq_len 6, ps 4: seq_len % ps = 2, nnp = ceil((2 + 3) / 4) = 2, region = 4 * 2 = 8 (from
// num_steps 2 it is 4 * ceil(4 / 4) = 4: A2). Prefix positions 0..5 -> slots 20 21 22 23 36 37;
// branch 0 drafts at 6, 7 (page 9) -> 38, 39; branch 1 at 6 + 8 = 14, 15 (page 7) -> 30, 31
// (A2 has 10, 11 from page 2). Positions read: 6 + 8 + 2 = 16, so a 15-wide row is refused.
TEST(KvIndicesExamples, SlotStrideWiderThanTheRoundMovesBranchRegions) {
  const ints pages = {5, 9, 2, 7, 3, 11};
  ints tokens;
  for (std::int32_t page : pages) {
    for (std::int32_t o = 0; o < 4; ++o) tokens.push_back(page * 4 + o);
  }
  for (const std::int32_t entry_page_size : {1, 4}) {
    SCOPED_TRACE("entry_page_size " + std::to_string(entry_page_size));
    example e(4, 2, 2, {6}, {0}, entry_page_size == 1 ? tokens : pages,
              entry_page_size == 1 ? 24 : 6);
    e.p.entry_page_size = entry_page_size;
    e.p.slot_stride = 3;
    e.run(16, 16);
    EXPECT_EQ(e.step_indptr(0), (ints{0, 7, 14}));
    EXPECT_EQ(e.step_indptr(1), (ints{0, 8, 16}));
    EXPECT_EQ(e.step_cells(0, 16),
              (ints{20, 21, 22, 23, 36, 37, 38, 20, 21, 22, 23, 36, 37, 30, poison, poison}));
    EXPECT_EQ(e.step_cells(16, 19), (ints{20, 21, 22, 23, 36, 37, 38, 39, 20, 21, 22, 23, 36, 37,
                                          30, 31, poison, poison, poison}));
    for (const guard_word& g : e.guards) EXPECT_EQ(g.violations, 0);
  }
  ints narrow(tokens.begin(), tokens.begin() + 15);
  example e(4, 2, 2, {6}, {0}, narrow, 15);
  e.p.slot_stride = 3;
  expect_invalid([&] { e.run(16, 16); }, "seq_len[0]",
                 "6 needs position 15 (the last draft token of branch topk - 1), past the row "
                 "width req_to_token_stride * entry_page_size 15; the rows need seq_len + "
                 "(topk - 1) * region 8 + num_steps positions");
  EXPECT_EQ(e.indptr, ints(e.indptr.size(), poison));
  EXPECT_EQ(e.indices, ints(e.indices.size(), poison));
}

TEST(KvIndicesExamples, A3WindowAndSink) {
  example e(1, 1, 2, {10}, {0}, pool_row(300, 16), 16);
  e.p.window = 4;
  e.p.sink = 2;
  e.p.capacity_growth = 1;
  e.run(7, 0);  // exact: C_s = 1 * (6 + s + 1), packed
  EXPECT_EQ(e.step_indptr(0), (ints{0, 7}));
  EXPECT_EQ(e.step_indptr(1), (ints{0, 8}));
  EXPECT_EQ(e.indices, (ints{300, 301, 306, 307, 308, 309, 310, 300, 301, 306, 307, 308, 309, 310,
                             311, poison, poison, poison}));
}

// Padded rows (seq_len 1 on pool row 0): their kv_indptr follows seq_len, where their indices are.
TEST(KvIndicesExamples, PaddedRowsIndptrFollowsSeqLen) {
  example e(1, 2, 1, {5, 1}, {1, 0}, concat({pool_row(0, 8), pool_row(50, 8)}), 8);
  e.run(16, 16);
  EXPECT_EQ(e.step_indptr(0), (ints{0, 6, 12, 14, 16}));
  EXPECT_EQ(e.step_cells(12, 4), (ints{0, 1, 0, 2}));  // padded branches 0 and 1: slot 0, draft
}

// SGLang #27338: per-step rows of max_bs * max_context_len = 32 without the topk factor. The
// steps need 184, 200, 216 entries; every store past 32 is refused and counted (504 in all),
// kv_indptr is complete, and nothing lands in the next step's row or past the buffer.
TEST(KvIndicesOverflow, Sglang27338RowsWithoutTopkAreRefusedAndReported) {
  const std::int32_t w = 40;
  example e(1, 8, 3, {12, 9}, {1, 2}, concat({pool_row(0, w), pool_row(100, w), pool_row(200, w)}),
            w);
  e.p.max_seq_len = 16;  // max_context_len
  e.run(32, 32);
  const std::int32_t used[] = {184, 200, 216};
  std::int32_t refused = 0;
  for (std::int32_t k = 0; k < 3; ++k) {
    SCOPED_TRACE("step " + std::to_string(k));
    EXPECT_EQ(e.step_indptr(k).back(), used[k]);
    const guard_word& g = e.guards[static_cast<std::size_t>(k)];
    EXPECT_EQ(g.violations, used[k] - 32);
    EXPECT_EQ(static_cast<violation_kind>(g.kind), violation_kind::capacity);
    EXPECT_EQ(static_cast<kernel_id>(g.kernel), kernel_id::draft_kv_indices);
    EXPECT_EQ(g.column, 32);
    EXPECT_EQ(g.capacity, 32);
    // Row lengths 12 + d: entry 32 lies in row 2 (request 0, branch 2) at its entry 32 - 2 * len.
    const std::int32_t len = 12 + k + 1;
    EXPECT_EQ(g.row, 32 / len);
    const std::int32_t i = 32 - (32 / len) * len;
    // Request 0's branch 2 drafts start at 12 + 2 * 3 (ps 1: nnp = num_steps).
    EXPECT_EQ(g.value, i < 12 ? 100 + i : 100 + 12 + 2 * 3 + (i - 12));
    refused += g.violations;
  }
  EXPECT_EQ(refused, 504);
  EXPECT_EQ(e.step_cells(96, 3), ints(3, poison));  // the canaries past the buffer
  // The row-0 prefix of every step is intact (step 1 was not overwritten by step 0's spill).
  for (std::int32_t k = 0; k < 3; ++k) EXPECT_EQ(e.indices[static_cast<std::size_t>(32 * k)], 100);
  // The exact capacities C_s = 16 * (16 + s + 1) hold it.
  e.p.capacity_growth = 16;
  e.run(16 * 17, 0);
  for (const guard_word& g : e.guards) EXPECT_EQ(g.violations, 0);
}

// At the context limit: one request at seq_len 15 of max_context_len 16, rows 16 wide. Step 0
// fits (16), step 1 refuses entry 16, step 2 entries 16 and 17; C_s = 17, 18, 19 holds all.
TEST(KvIndicesOverflow, ContextLimitHasNoRoomForDraftsInEngineRows) {
  example e(1, 1, 3, {15}, {0}, pool_row(500, 20), 20);
  e.p.max_seq_len = 16;
  e.run(16, 16);
  EXPECT_EQ(e.guards[0].violations, 0);
  EXPECT_EQ(e.guards[1].violations, 1);
  EXPECT_EQ(e.guards[1].column, 16);
  EXPECT_EQ(e.guards[1].value, 516);  // draft token 1 at position 16
  EXPECT_EQ(e.guards[2].violations, 2);
  EXPECT_EQ(e.guards[2].value, 516);                   // the first refused: entry 16
  EXPECT_EQ(e.step_cells(16, 16), pool_row(500, 16));  // step 1 holds only its first 16
  EXPECT_EQ(e.step_cells(48, 3), ints(3, poison));
  e.p.capacity_growth = 1;
  e.run(17, 0);
  for (const guard_word& g : e.guards) EXPECT_EQ(g.violations, 0);
  EXPECT_EQ(e.step_cells(17 + 18, 19), concat({pool_row(500, 15), {515, 516, 517}, {poison}}));
}

// Bad inputs: named, nothing written.
TEST(KvIndicesValidation, RefusesByNameAndWritesNothing) {
  const ints rtt = concat({pool_row(0, 12), pool_row(40, 12)});
  auto expect_refused = [&](const std::function<void(example&)>& breakit, const std::string& field,
                            const std::string& detail) {
    example e(2, 2, 2, {3, 1}, {1, 0}, rtt, 12);
    breakit(e);
    expect_invalid([&] { e.run(e.p.capacity > 0 ? e.p.capacity : 20, 20); }, field, detail);
    EXPECT_EQ(e.indptr, ints(e.indptr.size(), poison)) << field;
    EXPECT_EQ(e.indices, ints(e.indices.size(), poison)) << field;
  };
  expect_refused([](example& e) { e.p.page_size = 0; }, "page_size", "0 is below the minimum 1");
  expect_refused([](example& e) { e.p.topk = 0; }, "topk", "0 is below the minimum 1");
  expect_refused([](example& e) { e.p.first_step = 2; }, "first_step", "outside [0, num_steps 2)");
  expect_refused([](example& e) { e.p.step_count = 3; }, "step_count", "exceeds num_steps");
  expect_refused([](example& e) { e.p.capacity = 21; }, "capacity", "exceeds kv_indices_stride");
  expect_refused([](example& e) { e.p.window = -1; }, "window", "-1 is below the minimum 0");
  expect_refused([](example& e) { e.p.slot_stride = 1; }, "slot_stride",
                 "1 is below the minimum 2");
  expect_refused([](example& e) { e.p.slot_stride = (1 << 16) + 1; }, "slot_stride",
                 "65537 exceeds the limit (at least num_steps; 0 means num_steps) 65536");
  expect_refused([](example& e) { e.seq_len[0] = 4; }, "seq_len[0]", "4 exceeds max_seq_len 3");
  expect_refused([](example& e) { e.req_pool_index[1] = 2; }, "req_pool_index[1]",
                 "2 is outside [0, pool_rows 2)");
  // Branch 1 of seq_len 3 (ps 2, nnp 2) needs position 3 + 4 + 1 = 8: past an 8-wide row.
  expect_refused(
      [](example& e) {
        e.p.req_to_token_stride = 8;
        e.p.pool_rows = 3;
      },
      "seq_len[0]", "3 needs position 8 (the last draft token of branch topk - 1), past the row");
  expect_refused([](example& e) { e.req_to_token[12 + 1] = -5; }, "req_to_token[1][1]",
                 "-5 is outside [0, the int32 kv_indices bound");
  expect_refused([](example& e) { e.p.slot_limit = 42; }, "req_to_token[1][2]",
                 "42 is outside [0, slot_limit 42)");
  expect_refused(
      [](example& e) {
        e.p.max_seq_len = 1 << 28;
        e.p.topk = 8;
      },
      "max_seq_len", "exceeds the int32 kv_indptr limit");
}

}  // namespace
}  // namespace specgraph::testing
