// Recording guard violations from host+device per-row code.
#pragma once

#include <climits>
#include <cstdint>

#include "specgraph/config.hpp"
#include "specgraph/guard.hpp"

namespace specgraph::kernels {

// The order key of a violation at (row, column): the earlier (row, column) has the larger key,
// so the recorded violation is the one whose key is the maximum. Rows are -1 (a launch-wide
// input, as the verify kernels record) or more and take 31 bits as row + 1 (a row below -1
// orders as -1, INT32_MAX as INT32_MAX - 1); the column is any int32 (-1 for a per-row scalar
// input; INT32_MIN orders as INT32_MIN + 1), mapped order-preserving to 32 bits. The key is in
// [1, 2^63 - 1]: 0 stays "clean" and bit 63 is free for guard_busy.
SPECGRAPH_HD std::uint64_t guard_key(std::int32_t row, std::int32_t column) {
  const std::int32_t clamped = row < -1 ? -1 : (row == INT32_MAX ? INT32_MAX - 1 : row);
  const auto r = static_cast<std::uint64_t>(static_cast<std::int64_t>(clamped) + 1);
  const std::uint32_t c =
      (static_cast<std::uint32_t>(column) ^ 0x80000000u) | 1u * (column == INT32_MIN);
  return (std::uint64_t{1} << 63) - ((r << 32) | c);
}
constexpr std::uint64_t guard_busy = std::uint64_t{1} << 63;

// Records one violation: every one is counted, and the word keeps the details of the one with
// the lowest (row, column), so the result does not depend on which thread came first.
// On the GPU, lock-free for every violation that cannot be the first: the count is an atomic
// add, and a thread whose key is not above the word's key returns after one load. A thread with
// an earlier (row, column) claims the key word with a compare-and-swap that also sets
// guard_busy, writes the details and clears the bit; one arriving while the bit is set waits
// only if it is earlier still. So a poisoned row of a million cells costs a million atomic adds
// and a handful of claims (one per new minimum), not a million turns of a lock. Independent
// thread scheduling (sm_70 and later, every GPU built for) keeps a wait inside a warp from
// deadlocking. The host executor runs rows one after another: the same rule, no atomics.
SPECGRAPH_HD void guard_record(guard_word* g, violation_kind kind, kernel_id kernel,
                               std::int32_t row, std::int32_t column, std::int32_t capacity,
                               std::int64_t value) {
  if (g == nullptr) return;
  const std::uint64_t mine = guard_key(row, column);
#if defined(__CUDA_ARCH__)
  atomicAdd(&g->violations, 1);
  auto* word = reinterpret_cast<unsigned long long*>(&g->first);
  const volatile unsigned long long* seen_word = word;
  unsigned long long seen = *seen_word;
  for (;;) {
    if ((seen & ~guard_busy) >= mine) return;  // an earlier (row, column) is (being) recorded
    if ((seen & guard_busy) != 0) {            // a later one is writing its details: wait
      seen = *seen_word;
      continue;
    }
    const unsigned long long old = atomicCAS(word, seen, mine | guard_busy);
    if (old == seen) break;
    seen = old;
  }
  volatile guard_word* v = g;
  v->kind = static_cast<std::int32_t>(kind);
  v->kernel = static_cast<std::int32_t>(kernel);
  v->row = row;
  v->column = column;
  v->capacity = capacity;
  v->value = value;
  __threadfence();
  atomicExch(word, static_cast<unsigned long long>(mine));
#else
  ++g->violations;
  if (g->first >= mine) return;
  g->first = mine;
  g->kind = static_cast<std::int32_t>(kind);
  g->kernel = static_cast<std::int32_t>(kernel);
  g->row = row;
  g->column = column;
  g->capacity = capacity;
  g->value = value;
#endif
}

// Stores `value` at row[column] when column < capacity; otherwise skips the store and records a
// capacity violation. This is the only way the metadata kernels write into a static buffer.
template <class T, class V>
SPECGRAPH_HD void checked_store(T* row_ptr, std::int32_t column, std::int32_t capacity, V value,
                                guard_word* g, kernel_id kernel, std::int32_t row) {
  if (column >= 0 && column < capacity) {
    row_ptr[column] = static_cast<T>(value);
  } else {
    guard_record(g, violation_kind::capacity, kernel, row, column, capacity,
                 static_cast<std::int64_t>(value));
  }
}

// One thread: the sum of the guard words' violation counts (saturating at INT32_MAX), for a
// check the engine asserts on the device without synchronising.
struct count_violations_kernel {
  struct params {
    const guard_word* guards;
    std::int32_t count;
    std::int32_t* out;
  };
  static constexpr const char* name = "count_violations";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    std::int64_t total = 0;
    for (std::int32_t i = 0; i < p.count; ++i) total += p.guards[i].violations;
    *p.out = static_cast<std::int32_t>(total > 0x7fffffff ? 0x7fffffff : total);
  }
};

}  // namespace specgraph::kernels
