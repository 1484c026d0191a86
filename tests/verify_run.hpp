// Test support for the target-verify metadata: runs a verify_case on an executor with every
// output buffer poisoned (plus canary cells past each), and compares every cell and guard word
// with the independent reference of verify_reference.hpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "specgraph/executor.hpp"
#include "specgraph/verify_metadata.hpp"
#include "tests/test_support.hpp"
#include "tests/verify_reference.hpp"

namespace specgraph::testing {

inline constexpr std::int32_t verify_poison = -7;
inline constexpr std::uint8_t verify_poison_byte = 0xa5;
inline constexpr std::size_t verify_canaries = 3;

struct verify_outputs {
  std::vector<std::int32_t> prefix_table, prefix_cache_seqlen, prefix_cu_q, prefix_cu_k;
  std::vector<std::int32_t> expand_table, expand_cache_seqlen, expand_cu_q, expand_cu_k;
  std::vector<std::int32_t> qo_indptr, kv_indptr, kv_indices, kv_last_page_len, mask_indptr,
      packed_indptr;
  std::vector<std::uint8_t> packed;
  std::vector<guard_word> guards;
};

// A host vector with dvec's interface: the host executor's memory is host memory, so the bulk of
// the random cases runs without per-buffer executor allocations.
template <class T>
class host_vec {
 public:
  host_vec(executor&, const std::vector<T>& host) : v_(host) {
    if (v_.empty()) v_.resize(1);
  }
  host_vec(executor& ex, std::size_t n, T fill) : host_vec(ex, std::vector<T>(n, fill)) {}
  T* data() { return v_.data(); }
  std::vector<T> download() const { return v_; }

 private:
  std::vector<T> v_;
};

// Runs launch_verify_metadata on `ex` (buffers Buf<T>: dvec in executor memory, or host_vec for the
// host executor), or verify_metadata_host when `host_twin` (the twin may throw invalid_argument).
template <template <class> class Buf = dvec>
verify_outputs run_verify(executor& ex, const verify_case& c, bool host_twin = false) {
  const std::size_t bs = static_cast<std::size_t>(c.batch()), d = c.draft_tokens;
  const std::size_t k = verify_canaries;
  Buf<std::int32_t> rtt(ex, c.req_to_token), pool(ex, c.req_pool_index), seq(ex, c.seq_len);
  Buf<std::uint8_t> mask(ex, c.mask);
  auto i32 = [&](std::size_t n) { return Buf<std::int32_t>(ex, n + k, verify_poison); };
  Buf<std::int32_t> prefix_table = i32(bs * static_cast<std::size_t>(c.prefix_stride)),
                    prefix_cache = i32(bs), prefix_q = i32(bs + 1), prefix_k = i32(bs + 1),
                    expand_table = i32(bs * d * static_cast<std::size_t>(c.expand_stride)),
                    expand_cache = i32(bs * d), expand_q = i32(bs * d + 1),
                    expand_k = i32(bs * d + 1), qo = i32(bs + 1), kv_indptr = i32(bs + 1),
                    kv_indices = i32(static_cast<std::size_t>(c.kv_capacity)), last = i32(bs),
                    mask_indptr = i32(bs + 1), packed_indptr = i32(bs + 1);
  Buf<std::uint8_t> packed(ex, static_cast<std::size_t>(c.packed_capacity) + k, verify_poison_byte);
  Buf<guard_word> guards(ex, verify_guard_count, guard_word{});
  Buf<std::int64_t> scratch(
      ex, static_cast<std::size_t>(verify_scratch_words(c.batch(), c.draft_tokens)), 99);
  verify_params p = verify_params_of(c);
  p.req_to_token = rtt.data();
  p.req_pool_index = pool.data();
  p.seq_len = seq.data();
  p.custom_mask = mask.data();
  p.prefix_page_table = prefix_table.data();
  p.prefix_cache_seqlen = prefix_cache.data();
  p.prefix_cu_seqlens_q = prefix_q.data();
  p.prefix_cu_seqlens_k = prefix_k.data();
  p.expand_page_table = expand_table.data();
  p.expand_cache_seqlen = expand_cache.data();
  p.expand_cu_seqlens_q = expand_q.data();
  p.expand_cu_seqlens_k = expand_k.data();
  p.qo_indptr = qo.data();
  p.kv_indptr = kv_indptr.data();
  p.kv_indices = kv_indices.data();
  p.kv_last_page_len = last.data();
  p.mask_indptr = mask_indptr.data();
  p.packed_mask = packed.data();
  p.packed_mask_indptr = packed_indptr.data();
  p.guard = guards.data();
  if (host_twin) {
    verify_metadata_host(p);
  } else {
    p.scratch = scratch.data();
    launch_verify_metadata(ex, p);
    ex.synchronize();
  }
  return {
      prefix_table.download(), prefix_cache.download(),  prefix_q.download(),   prefix_k.download(),
      expand_table.download(), expand_cache.download(),  expand_q.download(),   expand_k.download(),
      qo.download(),           kv_indptr.download(),     kv_indices.download(), last.download(),
      mask_indptr.download(),  packed_indptr.download(), packed.download(),     guards.download()};
}

// Every output of a case as poisoned host vectors wired into verify_params (both layouts), for
// the refusal tests: after a refused call, untouched() says whether every cell kept its poison.
struct verify_host_buffers {
  std::vector<std::int32_t> cells[14];
  std::vector<std::uint8_t> packed;
  std::vector<guard_word> guards;
  std::vector<std::int64_t> scratch;
  verify_params p;

  explicit verify_host_buffers(const verify_case& c) : p(verify_params_of(c)) {
    const std::size_t b = static_cast<std::size_t>(c.batch()), k = verify_canaries;
    const std::size_t rows = b * static_cast<std::size_t>(std::max(c.draft_tokens, 0));
    const std::size_t sizes[14] = {
        b * static_cast<std::size_t>(std::max<std::int64_t>(c.prefix_stride, 0)),
        b,
        b + 1,
        b + 1,
        rows * static_cast<std::size_t>(std::max<std::int64_t>(c.expand_stride, 0)),
        rows,
        rows + 1,
        rows + 1,
        b + 1,
        b + 1,
        static_cast<std::size_t>(std::max(c.kv_capacity, 0)),
        b,
        b + 1,
        b + 1};
    std::int32_t** slots[14] = {
        &p.prefix_page_table,   &p.prefix_cache_seqlen, &p.prefix_cu_seqlens_q,
        &p.prefix_cu_seqlens_k, &p.expand_page_table,   &p.expand_cache_seqlen,
        &p.expand_cu_seqlens_q, &p.expand_cu_seqlens_k, &p.qo_indptr,
        &p.kv_indptr,           &p.kv_indices,          &p.kv_last_page_len,
        &p.mask_indptr,         &p.packed_mask_indptr};
    for (int i = 0; i < 14; ++i) {
      cells[i].assign(sizes[i] + k, verify_poison);
      *slots[i] = cells[i].data();
    }
    packed.assign(static_cast<std::size_t>(std::max(c.packed_capacity, 0)) + k, verify_poison_byte);
    guards.assign(verify_guard_count, guard_word{});
    scratch.assign(
        static_cast<std::size_t>(std::max<std::int64_t>(
            verify_scratch_words(std::max(c.batch(), 0), std::max(c.draft_tokens, 0)), 1)),
        0);
    p.req_to_token = c.req_to_token.data();
    p.req_pool_index = c.req_pool_index.data();
    p.seq_len = c.seq_len.data();
    p.custom_mask = c.mask.data();
    p.packed_mask = packed.data();
    p.guard = guards.data();
    p.scratch = scratch.data();
  }
  bool untouched() const {
    for (const auto& v : cells) {
      for (std::int32_t x : v) {
        if (x != verify_poison) return false;
      }
    }
    for (std::uint8_t x : packed) {
      if (x != verify_poison_byte) return false;
    }
    for (const guard_word& g : guards) {
      if (g.violations != 0) return false;
    }
    return true;
  }
};

// `got` = `want` then poison up to got.size() (want's cells are the only ones written).
template <class T, class W>
void expect_cells(const std::vector<T>& got, const std::vector<W>& want, T poison,
                  const char* name) {
  ASSERT_GE(got.size(), want.size()) << name;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const T w = i < want.size() ? static_cast<T>(want[i]) : poison;
    ASSERT_EQ(got[i], w) << name << " cell " << i;
  }
}

// The guard word the records imply: all counted, the lowest (row, column) kept.
inline void expect_guard(const guard_word& g, const std::vector<verify_record>& records,
                         int which) {
  ASSERT_EQ(g.violations, static_cast<std::int32_t>(records.size())) << "guard " << which;
  if (records.empty()) {
    ASSERT_EQ(g.kind, 0) << "guard " << which;
    return;
  }
  const verify_record* first = &records[0];
  for (const verify_record& r : records) {
    if (r.row < first->row || (r.row == first->row && r.column < first->column)) first = &r;
  }
  ASSERT_EQ(static_cast<violation_kind>(g.kind), first->kind) << "guard " << which;
  ASSERT_EQ(static_cast<kernel_id>(g.kernel), first->kernel) << "guard " << which;
  ASSERT_EQ(g.row, first->row) << "guard " << which;
  ASSERT_EQ(g.column, first->column) << "guard " << which;
  ASSERT_EQ(g.capacity, first->capacity) << "guard " << which;
  ASSERT_EQ(g.value, first->value) << "guard " << which;
}

inline void expect_matches(const verify_case& c, const verify_outputs& got) {
  const verify_expected w = verify_reference(c);
  const std::int32_t poison = verify_poison;
  // The prefix table: prefix_capacity cells per row written, the stride's gap untouched.
  std::vector<std::int32_t> table;
  for (std::int32_t r = 0; r < c.batch(); ++r) {
    for (std::int64_t j = 0; j < c.prefix_stride; ++j) {
      table.push_back(j < c.prefix_capacity
                          ? w.prefix_table[static_cast<std::size_t>(r * c.prefix_capacity + j)]
                          : poison);
    }
  }
  expect_cells(got.prefix_table, table, poison, "prefix page_table");
  expect_cells(got.prefix_cache_seqlen, w.prefix_cache_seqlen, poison, "prefix cache_seqlen");
  expect_cells(got.prefix_cu_q, w.prefix_cu_q, poison, "prefix cu_seqlens_q");
  expect_cells(got.prefix_cu_k, w.prefix_cu_k, poison, "prefix cu_seqlens_k");
  table.clear();
  for (std::size_t e = 0; e < w.expand_cache_seqlen.size(); ++e) {
    for (std::int64_t j = 0; j < c.expand_stride; ++j) {
      table.push_back(j < c.draft_tokens ? w.expand_table[e * c.draft_tokens + j] : poison);
    }
  }
  expect_cells(got.expand_table, table, poison, "expand page_table");
  expect_cells(got.expand_cache_seqlen, w.expand_cache_seqlen, poison, "expand cache_seqlen");
  expect_cells(got.expand_cu_q, w.expand_cu_q, poison, "expand cu_seqlens_q");
  expect_cells(got.expand_cu_k, w.expand_cu_k, poison, "expand cu_seqlens_k");
  expect_cells(got.qo_indptr, w.qo_indptr, poison, "qo_indptr");
  expect_cells(got.kv_indptr, w.kv_indptr, poison, "kv_indptr");
  expect_cells(got.kv_last_page_len, w.kv_last_page_len, poison, "kv_last_page_len");
  expect_cells(got.mask_indptr, w.mask_indptr, poison, "mask_indptr");
  expect_cells(got.packed_indptr, w.packed_indptr, poison, "packed_mask_indptr");
  std::vector<std::int64_t> ids(
      w.kv_ids.begin(),
      w.kv_ids.begin() + std::min<std::ptrdiff_t>(c.kv_capacity, w.kv_ids.size()));
  expect_cells(got.kv_indices, ids, poison, "kv_indices");
  std::vector<std::int64_t> bytes(
      w.packed.begin(),
      w.packed.begin() + std::min<std::ptrdiff_t>(c.packed_capacity, w.packed.size()));
  expect_cells(got.packed, bytes, verify_poison_byte, "packed_mask");
  for (int g = 0; g < verify_guard_count; ++g) {
    expect_guard(got.guards[static_cast<std::size_t>(g)], w.records[g], g);
  }
}

}  // namespace specgraph::testing
