// index_ref: a read-only index array in executor memory as the round's kernels read it: int32 or
// int64 elements, `stride` elements apart. The staged path points it at the arena's int32 static
// inputs (stride 1); an engine's own static input tensors (engine_inputs.hpp) are read through
// it in place. Trivially copyable (a kernel parameter); load() is host+device code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "specgraph/config.hpp"

namespace specgraph {

struct index_ref {
  const void* data = nullptr;
  std::int32_t is_int64 = 0;  // 1: int64 elements, 0: int32
  std::int64_t stride = 1;    // elements between consecutive indices, [0, limits::max_input_stride]

  index_ref() = default;
  index_ref(std::nullptr_t) {}                          // NOLINT: implicit, as a null pointer
  index_ref(const std::int32_t* p, std::int64_t s = 1)  // NOLINT: implicit, as the pointer
      : data(p), is_int64(0), stride(s) {}
  index_ref(const std::int64_t* p, std::int64_t s = 1)  // NOLINT: implicit, as the pointer
      : data(p), is_int64(1), stride(s) {}

  // The element `offset` elements from data (no stride applied), widened to int64: nothing is
  // narrowed here, the caller range-checks the value before using it.
  SPECGRAPH_HD std::int64_t load_at(std::int64_t offset) const {
    return is_int64 != 0 ? static_cast<const std::int64_t*>(data)[offset]
                         : static_cast<const std::int32_t*>(data)[offset];
  }
  // Index i: the element i * stride elements from data. Offsets stay inside int64: i < 2^24
  // (limits::max_rows) and stride <= 2^36.
  SPECGRAPH_HD std::int64_t load(std::int64_t i) const { return load_at(i * stride); }
};

}  // namespace specgraph
