// Recording guard violations from host+device per-row code.
#pragma once

#include <cstdint>

#include "specgraph/config.hpp"
#include "specgraph/guard.hpp"

namespace specgraph::kernels {

// Records one violation. The first caller (by the violation counter) fills in the details; later
// callers only count. On the GPU the counter is an atomic, so concurrent rows race only for who
// is first, never for the fields. The host executor runs rows sequentially.
SPECGRAPH_HD void guard_record(guard_word* g, violation_kind kind, kernel_id kernel,
                               std::int32_t row, std::int32_t column, std::int32_t capacity,
                               std::int64_t value) {
  if (g == nullptr) return;
#if defined(__CUDA_ARCH__)
  const int previous = atomicAdd(&g->violations, 1);
#else
  const int previous = g->violations++;
#endif
  if (previous == 0) {
    g->kind = static_cast<std::int32_t>(kind);
    g->kernel = static_cast<std::int32_t>(kernel);
    g->row = row;
    g->column = column;
    g->capacity = capacity;
    g->value = value;
  }
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

}  // namespace specgraph::kernels
