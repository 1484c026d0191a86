// Target-verify metadata: the worked examples of docs/verify.md (SGLang's own numbers) verbatim,
// the double-counted-D case refused by name with nothing written, capacity refusals with their
// guard fields, and bad inputs refused by name, every output cell checked.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "specgraph/verify_metadata.hpp"
#include "tests/test_support.hpp"
#include "tests/verify_reference.hpp"
#include "tests/verify_run.hpp"

namespace specgraph::testing {
namespace {

using ints = std::vector<std::int32_t>;
using bytes = std::vector<std::uint8_t>;

// Appends pool row `slot(p)` for p < width.
void add_row(verify_case& c, const std::function<std::int32_t(std::int32_t)>& slot) {
  for (std::int32_t p = 0; p < c.width; ++p) c.req_to_token.push_back(slot(p));
  c.pool_rows = static_cast<std::int32_t>(c.req_to_token.size() / c.width);
}

// A real request's mask rows: seq_len prefix ones, then the tree row's bits ("1010").
void add_tree(verify_case& c, std::int32_t seq_len, const std::vector<std::string>& rows) {
  for (const std::string& row : rows) {
    c.mask.insert(c.mask.end(), static_cast<std::size_t>(seq_len), 1);
    for (char bit : row) c.mask.push_back(bit == '1' ? 1 : 0);
  }
}

// Capacities: exactly what the batch uses, unless set before.
void size_exactly(verify_case& c) {
  const std::int64_t d = c.draft_tokens;
  std::int64_t kv = 0, packed = 0;
  for (std::int32_t s : c.seq_len) {
    kv += s + d;
    packed += (d * (s + d) + 7) / 8;
  }
  if (c.prefix_capacity == 0) {
    c.prefix_capacity =
        static_cast<std::int32_t>(verify_prefix_columns(c.max_seq_len, c.page_size));
  }
  if (c.kv_capacity == 0) c.kv_capacity = static_cast<std::int32_t>(kv);
  if (c.packed_capacity == 0) c.packed_capacity = static_cast<std::int32_t>(packed);
  if (c.prefix_stride == 0) c.prefix_stride = c.prefix_capacity;
  if (c.expand_stride == 0) c.expand_stride = c.draft_tokens;
}

// B1: ps 1, D 4, seq_len 5, row 40 + p; tree 0 <- {1, 2}, 1 <- {3}.
verify_case b1() {
  verify_case c;
  c.page_size = 1;
  c.draft_tokens = 4;
  c.max_seq_len = 8;
  c.width = 12;
  c.seq_len = {5};
  c.req_pool_index = {0};
  add_row(c, [](std::int32_t p) { return 40 + p; });
  add_tree(c, 5, {"1000", "1100", "1010", "1101"});
  size_exactly(c);
  return c;
}

template <class T>
std::vector<T> head(const std::vector<T>& v, std::size_t n) {
  return std::vector<T>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
}

// Runs the launcher on the host executor and the host twin: both give the same cells, which the
// reference gives too; returns the launcher's.
verify_outputs run_both(const verify_case& c) {
  const auto ex = make_executor("host");
  const verify_outputs launched = run_verify(*ex, c);
  expect_matches(c, launched);
  expect_matches(c, run_verify(*ex, c, true));
  return launched;
}

TEST(VerifyExamples, B1OneRequestPageSizeOne) {
  const verify_case c = b1();
  const verify_outputs o = run_both(c);
  EXPECT_EQ(head(o.prefix_table, 8), (ints{40, 41, 42, 43, 44, 0, 0, 0}));
  EXPECT_EQ(head(o.prefix_cache_seqlen, 1), (ints{5}));
  EXPECT_EQ(head(o.prefix_cu_q, 2), (ints{0, 4}));
  EXPECT_EQ(head(o.prefix_cu_k, 2), (ints{0, 5}));
  EXPECT_EQ(head(o.expand_table, 16),
            (ints{45, 46, 47, 48, 45, 46, 47, 48, 45, 47, 46, 48, 45, 46, 48, 47}));
  EXPECT_EQ(head(o.expand_cache_seqlen, 4), (ints{1, 2, 2, 3}));
  EXPECT_EQ(head(o.expand_cu_k, 5), (ints{0, 1, 3, 5, 8}));
  EXPECT_EQ(head(o.expand_cu_q, 5), (ints{0, 1, 2, 3, 4}));
  EXPECT_EQ(head(o.kv_indptr, 2), (ints{0, 9}));
  EXPECT_EQ(head(o.kv_indices, 9), (ints{40, 41, 42, 43, 44, 45, 46, 47, 48}));
  EXPECT_EQ(head(o.mask_indptr, 2), (ints{0, 36}));
  EXPECT_EQ(head(o.packed_indptr, 2), (ints{0, 5}));
  EXPECT_EQ(head(o.packed, 5), (bytes{63, 254, 252, 250, 11}));
  EXPECT_EQ(head(o.qo_indptr, 2), (ints{0, 4}));
  EXPECT_EQ(head(o.kv_last_page_len, 1), (ints{1}));
}

TEST(VerifyExamples, B2TwoRequestsPageSizeFour) {
  verify_case c;
  c.page_size = 4;
  c.draft_tokens = 3;
  c.max_seq_len = 6;
  c.width = 12;
  c.seq_len = {6, 3};
  c.req_pool_index = {1, 2};
  c.real_batch = 2;
  c.prefix_capacity = 3;
  add_row(c, [](std::int32_t p) { return p; });
  const ints pages0 = {6, 2, 9}, pages1 = {4, 8, 1};
  add_row(c, [&](std::int32_t p) { return pages0[p / 4] * 4 + p % 4; });
  add_row(c, [&](std::int32_t p) { return pages1[p / 4] * 4 + p % 4; });
  add_tree(c, 6, {"100", "110", "101"});
  add_tree(c, 3, {"100", "110", "111"});
  size_exactly(c);
  const verify_outputs o = run_both(c);
  EXPECT_EQ(head(o.prefix_table, 6), (ints{6, 2, 0, 4, 0, 0}));
  EXPECT_EQ(head(o.prefix_cu_k, 3), (ints{0, 6, 9}));
  EXPECT_EQ(head(o.expand_table, 18),
            (ints{10, 11, 36, 10, 11, 36, 10, 36, 11, 19, 32, 33, 19, 32, 33, 19, 32, 33}));
  EXPECT_EQ(head(o.expand_cache_seqlen, 6), (ints{1, 2, 2, 1, 2, 3}));
  EXPECT_EQ(head(o.kv_indptr, 3), (ints{0, 9, 15}));
  EXPECT_EQ(head(o.mask_indptr, 3), (ints{0, 27, 45}));
  EXPECT_EQ(head(o.packed_indptr, 3), (ints{0, 4, 7}));
  EXPECT_EQ(head(o.packed, 7), (bytes{127, 254, 253, 5, 207, 247, 3}));
}

TEST(VerifyExamples, B3PaddedRequestAttendsEverything) {
  verify_case c;
  c.page_size = 1;
  c.draft_tokens = 3;
  c.max_seq_len = 4;
  c.width = 8;
  c.seq_len = {4, 1};
  c.req_pool_index = {1, 0};
  c.real_batch = 1;
  add_row(c, [](std::int32_t p) { return p; });
  add_row(c, [](std::int32_t p) { return 60 + p; });
  add_tree(c, 4, {"100", "110", "101"});
  size_exactly(c);
  const verify_outputs o = run_both(c);
  EXPECT_EQ(head(o.expand_table, 18),
            (ints{64, 65, 66, 64, 65, 66, 64, 66, 65, 1, 2, 3, 1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(head(o.expand_cache_seqlen, 6), (ints{1, 2, 2, 3, 3, 3}));
  EXPECT_EQ(head(o.expand_cu_k, 7), (ints{0, 1, 3, 5, 8, 11, 14}));
  EXPECT_EQ(head(o.kv_indices, 11), (ints{60, 61, 62, 63, 64, 65, 66, 0, 1, 2, 3}));
  EXPECT_EQ(head(o.packed, 5), (bytes{159, 223, 23, 255, 15}));
}

// An idle rank under data-parallel attention replays verify too: real_batch 0 and the exactly
// sized empty mask are accepted, and every request is written as a padded one (docs/verify.md
// section 4: no mask cells, every cell attended), by the launcher and the host twin alike.
TEST(VerifyExamples, AnIdleRankHasRealBatch0AndAnEmptyMask) {
  verify_case c;
  c.page_size = 4;
  c.draft_tokens = 3;
  c.max_seq_len = 6;
  c.width = 12;
  c.seq_len = {1, 1};
  c.req_pool_index = {0, 0};
  c.real_batch = 0;
  add_row(c, [](std::int32_t p) { return 20 + p; });
  size_exactly(c);
  const verify_outputs o = run_both(c);
  // Each padded request: seq_len 1 on pool row 0, its D tree tokens at positions 1 .. 3.
  EXPECT_EQ(head(o.kv_indptr, 3), (ints{0, 4, 8}));
  EXPECT_EQ(head(o.kv_indices, 8), (ints{20, 21, 22, 23, 20, 21, 22, 23}));
  EXPECT_EQ(head(o.mask_indptr, 3), (ints{0, 12, 24}));
  // 12 cells a request, all attended: one full byte and 4 bits.
  EXPECT_EQ(head(o.packed, 4), (bytes{255, 15, 255, 15}));
  EXPECT_EQ(head(o.expand_cache_seqlen, 6), (ints{3, 3, 3, 3, 3, 3}));
  // The empty mask may have no storage at all.
  verify_host_buffers outputs(c);
  outputs.p.custom_mask = nullptr;
  outputs.p.mask_cells = 0;
  validate(outputs.p);
  verify_metadata_host(outputs.p);
  EXPECT_FALSE(outputs.untouched());
}

// Lengths that already include the D verify tokens (SGLang #32666 at bs 5, D 5): the mask,
// built from the true lengths, is D * D per request shorter than the formula gives. The host
// twin refuses it by name with the fix and writes nothing; the kernels refuse every real request
// (guard[0] names the needed and the given length) and read nothing past the mask.
TEST(VerifyDoubleCount, LengthsIncludingTheVerifyTokensAreRefusedByName) {
  verify_case c;
  c.page_size = 1;
  c.draft_tokens = 5;
  c.width = 40;
  add_row(c, [](std::int32_t p) { return 100 + p; });
  const ints true_len = {7, 3, 12, 5, 9};
  for (std::int32_t s : true_len) {
    add_tree(c, s, {"10000", "11000", "10100", "11010", "10101"});
    c.seq_len.push_back(s + 5);  // the bug: + D already
    c.req_pool_index.push_back(0);
  }
  c.real_batch = 5;
  c.max_seq_len = 17;
  size_exactly(c);
  const std::int64_t needed = verify_mask_cells(c.seq_len.data(), 5, 5);
  ASSERT_EQ(needed - static_cast<std::int64_t>(c.mask.size()), 5 * 5 * 5);
  const auto ex = make_executor("host");
  expect_invalid([&] { run_verify(*ex, c, true); }, "custom_mask",
                 std::to_string(c.mask.size()) +
                     " cells, the formula sum(D * (seq_len + D)) over "
                     "the real requests gives " +
                     std::to_string(needed) +
                     ": seq_len seems to include the D verify tokens already (the mask is D * D "
                     "* real_batch = 125 cells shorter); pass seq_len without the verify tokens");
  // Nothing written: the twin throws before any store (run on poisoned host vectors).
  verify_params p = verify_params_of(c);
  std::vector<std::int32_t> table(64, verify_poison), out(64, verify_poison);
  std::vector<std::uint8_t> packed(64, verify_poison_byte);
  std::vector<guard_word> guards(3, guard_word{});
  p.req_to_token = c.req_to_token.data();
  p.req_pool_index = c.req_pool_index.data();
  p.seq_len = c.seq_len.data();
  p.custom_mask = c.mask.data();
  p.qo_indptr = p.kv_indptr = p.kv_indices = p.kv_last_page_len = p.mask_indptr =
      p.packed_mask_indptr = out.data();
  p.packed_mask = packed.data();
  p.guard = guards.data();
  EXPECT_THROW(verify_metadata_host(p), invalid_argument);
  EXPECT_EQ(out, ints(64, verify_poison));
  EXPECT_EQ(packed, bytes(64, verify_poison_byte));
  EXPECT_EQ(guards[0].violations, 0);
  // The kernels: one bad-input record for the batch, every request empty, nothing read past.
  const verify_outputs o = run_verify(*ex, c);
  expect_matches(c, o);
  EXPECT_EQ(o.guards[0].violations, 1);
  EXPECT_EQ(static_cast<violation_kind>(o.guards[0].kind), violation_kind::bad_input);
  EXPECT_EQ(static_cast<kernel_id>(o.guards[0].kernel), kernel_id::verify_metadata);
  EXPECT_EQ(o.guards[0].row, -1);
  EXPECT_EQ(o.guards[0].capacity, static_cast<std::int32_t>(c.mask.size()));
  EXPECT_EQ(o.guards[0].value, needed);
  EXPECT_EQ(head(o.kv_indptr, 6), ints(6, 0));
  EXPECT_EQ(head(o.packed_indptr, 6), ints(6, 0));
  EXPECT_EQ(o.kv_indices, ints(o.kv_indices.size(), verify_poison));
  // The true lengths are accepted.
  c.seq_len = true_len;
  c.max_seq_len = 12;
  c.kv_capacity = c.packed_capacity = c.prefix_capacity = 0;
  size_exactly(c);
  const verify_outputs fixed = run_both(c);
  EXPECT_EQ(fixed.guards[0].violations, 0);
}

// Short capacities: each refused store is counted in its guard word, naming the kernel, the
// request, the first refused column or flat index, the capacity and the refused value.
TEST(VerifyCapacity, ShortBuffersAreRefusedWithTheirGuardFields) {
  verify_case c = b1();
  c.prefix_capacity = 3;  // pages 3, 4 (ids 43, 44) refused
  c.prefix_stride = 3;
  c.kv_capacity = 7;      // slots 47, 48 refused
  c.packed_capacity = 4;  // byte 4 (11) refused
  const verify_outputs o = run_both(c);
  const struct {
    kernel_id kernel;
    std::int32_t column, capacity;
    std::int64_t value;
    std::int32_t count;
  } want[] = {{kernel_id::verify_prefix_page_table, 3, 3, 43, 2},
              {kernel_id::verify_kv_indices, 7, 7, 47, 2},
              {kernel_id::verify_packed_mask, 4, 4, 11, 1}};
  for (int g = 0; g < 3; ++g) {
    SCOPED_TRACE("guard " + std::to_string(g));
    const guard_word& w = o.guards[static_cast<std::size_t>(g)];
    EXPECT_EQ(static_cast<violation_kind>(w.kind), violation_kind::capacity);
    EXPECT_EQ(static_cast<kernel_id>(w.kernel), want[g].kernel);
    EXPECT_EQ(w.row, 0);
    EXPECT_EQ(w.column, want[g].column);
    EXPECT_EQ(w.capacity, want[g].capacity);
    EXPECT_EQ(w.value, want[g].value);
    EXPECT_EQ(w.violations, want[g].count);
  }
  EXPECT_EQ(o.prefix_table, (ints{40, 41, 42, verify_poison, verify_poison, verify_poison}));
  EXPECT_EQ(o.kv_indices,
            (ints{40, 41, 42, 43, 44, 45, 46, verify_poison, verify_poison, verify_poison}));
  EXPECT_EQ(head(o.kv_indptr, 2), (ints{0, 9}));  // the indptrs stay whole
}

// Bad inputs: named with the value and the limit, nothing written (launcher and host twin).
TEST(VerifyValidation, RefusesByNameAndWritesNothing) {
  const auto ex = make_executor("host");
  auto expect_refused = [&](const std::function<void(verify_case&)>& breakit,
                            const std::string& field, const std::string& detail, bool twin_only) {
    verify_case c = b1();
    breakit(c);
    for (const bool twin : {false, true}) {
      if (!twin && twin_only) continue;
      SCOPED_TRACE(field + (twin ? " (host twin)" : " (launcher)"));
      verify_host_buffers buffers(c);  // poisoned; a refusal leaves every cell so
      expect_invalid(
          [&] {
            if (twin) {
              verify_metadata_host(buffers.p);
            } else {
              launch_verify_metadata(*ex, buffers.p);
              ex->synchronize();
            }
          },
          field, detail);
      EXPECT_TRUE(buffers.untouched());
    }
  };
  {  // the poison check can fail: an accepted call writes
    const verify_case ok = b1();
    verify_host_buffers written(ok);
    verify_metadata_host(written.p);
    EXPECT_FALSE(written.untouched());
  }
  expect_refused([](verify_case& c) { c.page_size = 0; }, "page_size", "0 is below the minimum 1",
                 false);
  expect_refused([](verify_case& c) { c.draft_tokens = 1025; }, "draft_tokens",
                 "1025 exceeds the limit 1024", false);
  expect_refused([](verify_case& c) { c.real_batch = 2; }, "real_batch", "2 exceeds batch 1",
                 false);
  expect_refused([](verify_case& c) { c.expand_stride = 3; }, "expand_stride",
                 "3 is below the minimum 4", false);
  expect_refused([](verify_case& c) { c.prefix_stride = 7; }, "prefix_stride",
                 "7 is below the minimum 8", false);
  expect_refused(
      [](verify_case& c) {
        c.max_seq_len = 1 << 28;  // 8 x (2^28 + 8) cells
        c.draft_tokens = 8;
      },
      "max_seq_len", "mask cells exceeds the int32 mask_indptr limit", false);
  expect_refused([](verify_case& c) { c.seq_len[0] = 9; }, "seq_len[0]", "9 exceeds max_seq_len 8",
                 true);
  expect_refused([](verify_case& c) { c.req_pool_index[0] = 1; }, "req_pool_index[0]",
                 "1 is outside [0, pool_rows 1)", true);
  expect_refused(
      [](verify_case& c) {
        c.seq_len[0] = 8;  // 8 + 4 verify tokens past a row of 11
        c.width = 11;
        c.req_to_token.resize(11);
      },
      "seq_len[0]", "8 + 4 verify tokens needs 12 positions, past the row width", true);
  expect_refused([](verify_case& c) { c.req_to_token[6] = -3; }, "req_to_token[0][6]",
                 "-3 is outside [0, slot_limit", true);
  expect_refused([](verify_case& c) { c.slot_limit = 48; }, "req_to_token[0][8]",
                 "48 is outside [0, slot_limit 48)", true);
  expect_refused([](verify_case& c) { c.mask.push_back(1); }, "custom_mask",
                 "37 cells, the formula sum(D * (seq_len + D)) over the real requests gives 36 "
                 "(the mask's length must equal it)",
                 true);
  expect_refused(
      [](verify_case& c) {
        c.mask_exact = false;
        c.mask.pop_back();
      },
      "custom_mask", "35 cells, the formula", true);
}

// A partial layout (some of its output pointers set) is refused by name.
TEST(VerifyValidation, LayoutsAreAllOrNothing) {
  verify_case c = b1();
  verify_params p = verify_params_of(c);
  std::vector<std::int32_t> cells(64, verify_poison);
  std::vector<std::uint8_t> packed(8, verify_poison_byte);
  std::vector<guard_word> guards(3, guard_word{});
  p.req_to_token = c.req_to_token.data();
  p.req_pool_index = c.req_pool_index.data();
  p.seq_len = c.seq_len.data();
  p.custom_mask = c.mask.data();
  p.guard = guards.data();
  expect_invalid([&] { verify_metadata_host(p); }, "fa3", "no output set");
  p.qo_indptr = p.kv_indptr = cells.data();
  expect_invalid([&] { verify_metadata_host(p); }, "kv_indices",
                 "2 of its 7 output pointers set; set all of them or none (the flashinfer "
                 "layout; missing kv_indices, kv_last_page_len, mask_indptr, packed_mask, "
                 "packed_mask_indptr)");
  EXPECT_EQ(cells, ints(64, verify_poison));
}

}  // namespace
}  // namespace specgraph::testing
