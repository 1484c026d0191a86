// Test support for the plan's verify section (verify_ops.hpp, draft_runtime's verify graphs):
// random verify rounds for a plan, their independent reference (tests/verify_reference.hpp), and
// the check of a whole downloaded arena: every cell of the section the bucket's launch writes
// equals the reference, every other byte of the section and of the arena keeps its poison.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "specgraph/plan.hpp"
#include "specgraph/verify_metadata.hpp"
#include "tests/verify_reference.hpp"

namespace specgraph::testing {

inline constexpr unsigned char arena_poison = 0xa5;

// A verify round of `real` requests padded to `bucket` for plan p: random pool rows (1..), seq_len
// in [1, M], random trees (or random masks), req_to_token rows W = M + D wide.
inline verify_case plan_verify_case(const plan& p, std::int32_t bucket, std::int32_t real,
                                    std::mt19937_64& rng) {
  const draft_config& c = p.config;
  const std::int32_t d = c.verify_tokens, m = c.max_context_len;
  verify_case v;
  v.page_size = c.page_size;
  v.draft_tokens = d;
  v.max_seq_len = m;
  v.real_batch = real;
  v.pool_rows = c.pool_rows;
  v.width = static_cast<std::int64_t>(m) + d;
  v.slot_limit = c.kv_slots;
  for (std::int32_t r = 0; r < bucket; ++r) {
    const bool padded = r >= real;
    // Some requests at the longest length, so full rows are exercised.
    const std::int32_t len = rng() % 4 == 0 ? m : 1 + static_cast<std::int32_t>(rng() % m);
    v.seq_len.push_back(padded ? 1 : len);
    v.req_pool_index.push_back(padded ? 0
                                      : 1 + static_cast<std::int32_t>(rng() % (c.pool_rows - 1)));
  }
  v.req_to_token.resize(static_cast<std::size_t>(c.pool_rows * v.width));
  for (auto& s : v.req_to_token) s = static_cast<std::int32_t>(rng() % c.kv_slots);
  const bool trees = rng() % 4 != 0;
  for (std::int32_t r = 0; r < real; ++r) {
    std::vector<std::int32_t> parent(static_cast<std::size_t>(d), -1);
    for (std::int32_t j = 1; j < d; ++j) parent[j] = static_cast<std::int32_t>(rng() % j);
    for (std::int32_t i = 0; i < d; ++i) {
      for (std::int32_t k = 0; k < v.seq_len[r]; ++k) v.mask.push_back(trees ? 1 : rng() % 2);
      const std::size_t row = v.mask.size();
      v.mask.resize(row + d, 0);
      if (trees) {
        for (std::int32_t j = i; j >= 0; j = parent[j]) v.mask[row + j] = 1;
      } else {
        for (std::int32_t j = 0; j < d; ++j) v.mask[row + j] = rng() % 2;
      }
    }
  }
  const plan_layout::verify_section& s = p.layout.verify;
  // A plan without FA3 writes no prefix table: the reference's table is then only not refused.
  v.prefix_capacity = static_cast<std::int32_t>(verify_prefix_columns(m, c.page_size));
  (void)s;
  v.prefix_stride = v.prefix_capacity;
  v.expand_stride = d;
  v.kv_capacity = static_cast<std::int32_t>(verify_kv_indices_capacity(bucket, m, d));
  v.packed_capacity = static_cast<std::int32_t>(verify_packed_mask_capacity(bucket, m, d));
  return v;
}

// Writes `cells` (as T) at `offset` of `want`, marking them as expected.
template <class T, class W>
void expect_at(std::vector<unsigned char>& want, std::size_t offset, const std::vector<W>& cells) {
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const T x = static_cast<T>(cells[i]);
    std::memcpy(want.data() + offset + i * sizeof(T), &x, sizeof(T));
  }
}

// The arena `before` with the bucket's verify outputs of reference `w` written over it (and,
// unless skip_guards, the section's guard words); the scratch is taken from `got` (the kernels'
// own working memory, not an output).
inline std::vector<unsigned char> expected_arena(const plan& p, const verify_case& c,
                                                 const verify_expected& w,
                                                 const std::vector<unsigned char>& before,
                                                 const std::vector<unsigned char>& got) {
  const plan_layout::verify_section& s = p.layout.verify;
  std::vector<unsigned char> want = before;
  if (s.fa3) {
    expect_at<std::int32_t>(want, s.prefix_page_table, w.prefix_table);
    expect_at<std::int32_t>(want, s.prefix_cache_seqlen, w.prefix_cache_seqlen);
    expect_at<std::int32_t>(want, s.prefix_cu_seqlens_q, w.prefix_cu_q);
    expect_at<std::int32_t>(want, s.prefix_cu_seqlens_k, w.prefix_cu_k);
    expect_at<std::int32_t>(want, s.expand_page_table, w.expand_table);
    expect_at<std::int32_t>(want, s.expand_cache_seqlen, w.expand_cache_seqlen);
    expect_at<std::int32_t>(want, s.expand_cu_seqlens_q, w.expand_cu_q);
    expect_at<std::int32_t>(want, s.expand_cu_seqlens_k, w.expand_cu_k);
  }
  if (s.flashinfer) {
    expect_at<std::int32_t>(want, s.qo_indptr, w.qo_indptr);
    expect_at<std::int32_t>(want, s.kv_indptr, w.kv_indptr);
    std::vector<std::int64_t> ids(
        w.kv_ids.begin(),
        w.kv_ids.begin() + std::min<std::ptrdiff_t>(c.kv_capacity, w.kv_ids.size()));
    expect_at<std::int32_t>(want, s.kv_indices, ids);
    expect_at<std::int32_t>(want, s.kv_last_page_len, w.kv_last_page_len);
    expect_at<std::int32_t>(want, s.mask_indptr, w.mask_indptr);
    std::vector<std::int64_t> bytes(
        w.packed.begin(),
        w.packed.begin() + std::min<std::ptrdiff_t>(c.packed_capacity, w.packed.size()));
    expect_at<std::uint8_t>(want, s.packed_mask, bytes);
    expect_at<std::int32_t>(want, s.packed_mask_indptr, w.packed_indptr);
  }
  const std::size_t scratch_bytes = static_cast<std::size_t>(s.scratch_words) * 8;
  std::memcpy(want.data() + s.scratch, got.data() + s.scratch, scratch_bytes);
  // The section's guard words: checked against the records by expect_verify_guards.
  const std::size_t guards =
      p.layout.guards + static_cast<std::size_t>(s.guard_base) * sizeof(guard_word);
  std::memcpy(want.data() + guards, got.data() + guards, verify_guard_count * sizeof(guard_word));
  return want;
}

// Compares the section's guard words with the reference's records.
inline void expect_verify_guards(const plan& p, const std::vector<unsigned char>& arena,
                                 const verify_expected& w) {
  for (int g = 0; g < verify_guard_count; ++g) {
    guard_word word{};
    std::memcpy(&word,
                arena.data() + p.layout.guards +
                    static_cast<std::size_t>(p.layout.verify.guard_base + g) * sizeof(guard_word),
                sizeof word);
    ASSERT_EQ(word.violations, static_cast<std::int32_t>(w.records[g].size())) << "guard " << g;
    if (!w.records[g].empty()) {
      ASSERT_EQ(word.row, w.records[g].front().row) << "guard " << g;
      ASSERT_EQ(word.value, w.records[g].front().value) << "guard " << g;
    }
  }
}

// Every byte equal, else the first differing byte named by its buffer.
inline void expect_same_arena(const plan& p, const std::vector<unsigned char>& got,
                              const std::vector<unsigned char>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    std::string where = "padding";
    for (const buffer_spec& b : p.buffers) {
      if (i >= b.offset && i < b.offset + b.bytes) {
        where = b.name + " byte " + std::to_string(i - b.offset);
      }
    }
    FAIL() << "arena byte " << i << " (" << where << "): got " << int{got[i]} << ", want "
           << int{want[i]};
  }
}

}  // namespace specgraph::testing
