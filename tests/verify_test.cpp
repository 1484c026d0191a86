// Target-verify metadata (docs/verify.md) against the independent reference of
// verify_reference.hpp, over random trees: D 2..64, page sizes 1/4/16/64, padded buckets, tree
// masks and arbitrary 0/1 masks, exact, used and short capacities, strided tables, static mask
// buffers (a bound, not an exact length), bad pool rows, seq_lens, row widths, slots and mask
// lengths. Every output cell is checked (poison where nothing may be written) with every guard.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/verify_metadata.hpp"
#include "tests/test_support.hpp"
#include "tests/verify_reference.hpp"
#include "tests/verify_run.hpp"

namespace specgraph::testing {
namespace {

// region: the page size (1, 4, 16, 64), so ctest runs four regions side by side.
verify_case random_case(std::mt19937_64& rng, bool allow_bad, int region) {
  auto pick = [&](std::int64_t lo, std::int64_t hi) {  // [lo, hi]
    return static_cast<std::int32_t>(lo + static_cast<std::int64_t>(rng() % (hi - lo + 1)));
  };
  const std::int32_t page_sizes[] = {1, 4, 16, 64};
  verify_case c;
  c.page_size = page_sizes[region];
  // Mostly small trees (the bulk of 10^6 cases), sometimes up to 64 tokens.
  const std::uint64_t size_class = rng() % 32;
  c.draft_tokens = size_class < 24 ? pick(2, 6) : size_class < 31 ? pick(7, 16) : pick(17, 64);
  const std::int32_t batch = pick(1, 3);
  c.real_batch = rng() % 2 == 0 ? batch : pick(1, batch);
  const std::int32_t longest = rng() % 16 == 0 ? pick(1, 150) : pick(1, 12);
  c.pool_rows = batch + pick(0, 1);
  for (std::int32_t r = 0; r < batch; ++r) {
    const bool padded = r >= c.real_batch;  // as the graph runners pad: seq_len 1, pool row 0
    c.seq_len.push_back(padded ? 1 : pick(1, longest));
    c.req_pool_index.push_back(padded ? 0 : pick(0, c.pool_rows - 1));
  }
  c.max_seq_len = *std::max_element(c.seq_len.begin(), c.seq_len.end()) + pick(0, 2);
  c.width = c.max_seq_len + c.draft_tokens + pick(0, 1);
  c.req_to_token.resize(static_cast<std::size_t>(c.pool_rows * c.width));
  const std::int64_t base = pick(0, 1 << 20);
  for (std::size_t i = 0; i < c.req_to_token.size(); ++i) {
    c.req_to_token[i] =
        static_cast<std::int32_t>((base + 7919 * static_cast<std::int64_t>(i)) % (1 << 20));
  }
  if (rng() % 16 == 0) {  // slots at the top of the int32 range
    for (auto& e : c.req_to_token) e = pick(INT32_MAX - 1000, INT32_MAX);
  }
  // The mask: a tree (self and ancestors, prefix columns 1) or any 0/1 matrix.
  const std::int64_t D = c.draft_tokens;
  for (std::int32_t r = 0; r < c.real_batch; ++r) {
    const std::int64_t seq = c.seq_len[r], width = seq + D;
    if (rng() % 2 == 0) {
      std::vector<std::int64_t> parent(static_cast<std::size_t>(D), -1);
      for (std::int64_t j = 1; j < D; ++j) parent[j] = pick(0, j - 1);
      for (std::int64_t i = 0; i < D; ++i) {
        std::vector<std::uint8_t> row(static_cast<std::size_t>(width), 0);
        std::fill_n(row.begin(), seq, std::uint8_t{1});
        for (std::int64_t j = i; j >= 0; j = parent[j]) row[seq + j] = 1;
        c.mask.insert(c.mask.end(), row.begin(), row.end());
      }
    } else {
      const std::uint64_t density = rng() % 5;  // 0: all 0 .. 4: all 1 (two bits per cell)
      std::uint64_t bits = 0;
      for (std::int64_t cell = 0; cell < D * width; ++cell, bits >>= 2) {
        if (cell % 32 == 0) bits = rng();
        c.mask.push_back(density == 0 ? 0 : density == 4 ? 1 : ((bits & 3) < density ? 1 : 0));
      }
    }
  }
  // A static mask buffer (graph replay): a bound with unused cells after the data.
  if (rng() % 4 == 0) {
    c.mask_exact = false;
    c.mask.resize(c.mask.size() + static_cast<std::size_t>(pick(0, 40)), 1);
  }
  const std::int64_t pages = verify_prefix_columns(c.max_seq_len, c.page_size);
  std::int64_t kv_used = 0, bytes_used = 0;
  for (std::int32_t s : c.seq_len) {
    kv_used += s + D;
    bytes_used += (D * (s + D) + 7) / 8;
  }
  switch (rng() % 4) {
    case 0:  // short
      c.prefix_capacity = pick(0, pages);
      c.kv_capacity = pick(0, kv_used);
      c.packed_capacity = pick(0, bytes_used);
      break;
    case 1:  // what this batch uses
      c.prefix_capacity = static_cast<std::int32_t>(pages);
      c.kv_capacity = static_cast<std::int32_t>(kv_used);
      c.packed_capacity = static_cast<std::int32_t>(bytes_used);
      break;
    default:  // exact for the bucket
      c.prefix_capacity = static_cast<std::int32_t>(pages);
      c.kv_capacity = static_cast<std::int32_t>(
          verify_kv_indices_capacity(batch, c.max_seq_len, c.draft_tokens));
      c.packed_capacity = static_cast<std::int32_t>(
          verify_packed_mask_capacity(batch, c.max_seq_len, c.draft_tokens));
  }
  c.prefix_stride = c.prefix_capacity + pick(0, 2);
  c.expand_stride = c.draft_tokens + pick(0, 1);
  if (allow_bad && rng() % 4 == 0) {
    switch (rng() % 7) {
      case 0: c.req_pool_index[rng() % batch] = rng() % 2 ? -1 : c.pool_rows; break;
      case 1: c.seq_len[rng() % batch] = rng() % 2 ? 0 : c.max_seq_len + 1; break;
      case 2: c.req_to_token[rng() % c.req_to_token.size()] = -pick(1, 5); break;
      case 3: c.slot_limit = pick(1, 1 << 20); break;
      case 4: c.width = c.max_seq_len + c.draft_tokens - 1; break;  // rows one too narrow
      case 5: c.mask.push_back(1); break;  // one cell more: refused unless the mask is a bound
      default:  // lengths that already include D: the mask is D * D per real request short
        for (std::int32_t r = 0; r < c.real_batch; ++r) c.seq_len[r] += c.draft_tokens;
        c.max_seq_len += c.draft_tokens;
    }
    if (c.width < c.max_seq_len + c.draft_tokens - 1) c.width = c.max_seq_len + c.draft_tokens;
    c.req_to_token.resize(static_cast<std::size_t>(c.pool_rows * c.width), 0);
  }
  return c;
}

std::string describe_case(int i, const verify_case& c) {
  std::string s = "case " + std::to_string(i) + ": ps " + std::to_string(c.page_size) + " D " +
                  std::to_string(c.draft_tokens) + " batch " + std::to_string(c.batch()) +
                  " real " + std::to_string(c.real_batch) + " M " + std::to_string(c.max_seq_len) +
                  " seq_len";
  for (std::int32_t s_ : c.seq_len) s += " " + std::to_string(s_);
  return s + " capacities " + std::to_string(c.prefix_capacity) + "/" +
         std::to_string(c.kv_capacity) + "/" + std::to_string(c.packed_capacity) +
         (c.mask_exact ? " exact mask" : " mask bound");
}

class VerifyMetadata : public ExecutorTest {};

// Fresh random cases, bad inputs included, on every executor.
TEST_P(VerifyMetadata, RandomTreesMatchReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int cases = property_cases(2000);
  for (int i = 0; i < cases; ++i) {
    const verify_case c = random_case(rng, true, static_cast<int>(rng() % 4));
    SCOPED_TRACE(describe_case(i, c));
    expect_matches(c, run_verify(*ex, c));
    if (HasFatalFailure()) return;
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(VerifyMetadata);

// 10^6 random trees in all (requests of small cases; each tree goes through the FA3 and the
// FlashInfer kernels) on the host executor over host vectors, one page size per region so ctest
// runs them side by side. SPECGRAPH_PROPERTY_CASES sets the number of trees.
class VerifyMetadataHost : public ::testing::TestWithParam<int> {};

TEST_P(VerifyMetadataHost, SmallTreesMatchReference) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto ex = make_executor("host");
  const std::int64_t trees = property_cases(1000000) / 4;
  int i = 0;
  for (std::int64_t done = 0; done < trees; ++i) {
    const verify_case c = random_case(rng, true, GetParam());
    done += c.batch();
    expect_matches(c, run_verify<host_vec>(*ex, c));
    if (HasFatalFailure()) {
      ADD_FAILURE() << describe_case(i, c);
      return;
    }
  }
  RecordProperty("cases", std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(PageSizes, VerifyMetadataHost, ::testing::Values(0, 1, 2, 3));

// The host twin accepts exactly the valid cases (and then equals the kernels' reference); it
// refuses every case with bad input by invalid_argument, writing nothing.
TEST(VerifyMetadataHostTwin, AcceptsValidAndRefusesBadInputWritingNothing) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto ex = make_executor("host");
  for (int i = 0; i < property_cases(20000); ++i) {
    const verify_case c = random_case(rng, true, static_cast<int>(rng() % 4));
    SCOPED_TRACE(describe_case(i, c));
    const verify_expected want = verify_reference(c);
    bool bad = false;
    for (const verify_record& r : want.records[0]) bad |= r.kind == violation_kind::bad_input;
    if (!bad) {
      expect_matches(c, run_verify(*ex, c, true));
    } else {  // nothing written: VerifyValidation.* (tests/verify_cases_test.cpp)
      EXPECT_THROW(run_verify(*ex, c, true), invalid_argument);
    }
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace specgraph::testing
