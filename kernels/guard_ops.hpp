// Recording guard violations from host+device per-row code.
#pragma once

#include <cstdint>

#include "specgraph/config.hpp"
#include "specgraph/guard.hpp"

namespace specgraph::kernels {

// Whether (row, column) comes before the recorded violation's (row, column).
SPECGRAPH_HD bool guard_precedes(std::int32_t row, std::int32_t column, std::int32_t other_row,
                                 std::int32_t other_column) {
  return row < other_row || (row == other_row && column < other_column);
}

// Records one violation: every one is counted, and the word keeps the details of the one with
// the lowest (row, column), so the result does not depend on which thread came first. On the GPU
// the count is an atomic and the details are updated under a spin lock in the word (violations
// only happen on bad input, so the lock is never contended in a healthy round; every GPU we
// build for schedules threads independently, so a lock within a warp cannot deadlock). The host
// executor runs rows one after another.
SPECGRAPH_HD void guard_record(guard_word* g, violation_kind kind, kernel_id kernel,
                               std::int32_t row, std::int32_t column, std::int32_t capacity,
                               std::int64_t value) {
  if (g == nullptr) return;
#if defined(__CUDA_ARCH__)
  atomicAdd(&g->violations, 1);
  while (atomicCAS(&g->lock, 0, 1) != 0) {
  }
  __threadfence();
  volatile guard_word* v = g;
  if (v->kind == 0 || guard_precedes(row, column, v->row, v->column)) {
    v->kind = static_cast<std::int32_t>(kind);
    v->kernel = static_cast<std::int32_t>(kernel);
    v->row = row;
    v->column = column;
    v->capacity = capacity;
    v->value = value;
  }
  __threadfence();
  atomicExch(&g->lock, 0);
#else
  ++g->violations;
  if (g->kind == 0 || guard_precedes(row, column, g->row, g->column)) {
    g->kind = static_cast<std::int32_t>(kind);
    g->kernel = static_cast<std::int32_t>(kernel);
    g->row = row;
    g->column = column;
    g->capacity = capacity;
    g->value = value;
  }
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
