// Internal to stage() (runtime.cpp): the range check of a round's slot rows and its copy into a
// staging slot, for int64 or int32 slots. Host code; no executor, no stream.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specgraph::detail {

// Bit 63 is set when one of the first `read` slots of a row is outside [0, last] (stage()).
template <class T>
std::uint64_t slot_range_bits(const T* base, std::size_t rows, std::size_t stride, std::size_t read,
                              std::uint64_t last) {
  std::uint64_t bits = 0;
  if (stride == read) {
    // Packed rows (every slot is read): one flat loop, which vectorises; a loop per row of
    // num_steps (about 5) slots does not, and costs stage() several times more.
    const std::size_t n = rows * read;
    for (std::size_t i = 0; i < n; ++i) {
      const auto slot = static_cast<std::uint64_t>(static_cast<std::int64_t>(base[i]));
      bits |= slot | (last - slot);
    }
    return bits;
  }
  for (std::size_t row = 0; row < rows; ++row) {
    const T* slots = base + row * stride;
    for (std::size_t j = 0; j < read; ++j) {
      const auto slot = static_cast<std::uint64_t>(static_cast<std::int64_t>(slots[j]));
      bits |= slot | (last - slot);
    }
  }
  return bits;
}

// Copies the round's slot rows into the staging slot as int64 (whole rows of `stride`, the
// unread slots past `read` included) and returns slot_range_bits of the same rows from the same
// pass: the engine's slots are read once, not once to check and once to copy.
template <class T>
std::uint64_t copy_slot_rows(std::int64_t* dst, const T* src, std::size_t rows, std::size_t stride,
                             std::size_t read, std::uint64_t last) {
  std::uint64_t bits = 0;
  if (stride == read) {  // packed rows: one flat loop (vectorises)
    const std::size_t n = rows * read;
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = static_cast<std::int64_t>(src[i]);
      dst[i] = v;
      bits |= static_cast<std::uint64_t>(v) | (last - static_cast<std::uint64_t>(v));
    }
    return bits;
  }
  for (std::size_t row = 0; row < rows; ++row) {
    const T* from = src + row * stride;
    std::int64_t* to = dst + row * stride;
    for (std::size_t j = 0; j < read; ++j) {
      const auto v = static_cast<std::int64_t>(from[j]);
      to[j] = v;
      bits |= static_cast<std::uint64_t>(v) | (last - static_cast<std::uint64_t>(v));
    }
    for (std::size_t j = read; j < stride; ++j) to[j] = static_cast<std::int64_t>(from[j]);
  }
  return bits;
}

}  // namespace specgraph::detail
