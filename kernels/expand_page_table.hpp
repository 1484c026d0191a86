// Per-row code of the expand page table (docs/metadata.md section 3). Host+device.
//
// Preconditions (checked on the host by validate(expand_params) before any launch; ranges in
// limits.hpp): 1 <= page_size <= 2^20, 1 <= topk, batch * topk <= 2^24, 1 <= decode_length <=
// 1024, 1 <= slots_read <= cache_loc_stride <= 2^31, 1 <= capacity <= page_table_stride <= 2^31,
// slot_limit >= 1, all pointers non-null except layout_check_batch. One call per row in
// [0, batch*topk).
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "kernels/padding_rows.hpp"
#include "specgraph/metadata.hpp"

namespace specgraph::kernels {

struct expand_page_table_kernel {
  using params = expand_params;
  static constexpr const char* name = "expand_page_table";
  static constexpr kernel_id id = kernel_id::expand_page_table;
  static constexpr std::int64_t max_page_id = 0x7fffffff;  // page tables are int32

  static std::int64_t rows(const params& p) { return static_cast<std::int64_t>(p.batch) * p.topk; }

  // slot / page_size and slot % page_size. Every slot reaching here is in [0, slot_limit);
  // when slot_limit <= 2^32 (any pool of up to 4 G slots) both operands fit uint32 and a 32-bit
  // division gives the same quotient for a fraction of a 64-bit division's cost. Which one is a
  // launch parameter (uniform across threads, so it does not diverge), read once per row into
  // a local: the row's stores (int32 cells) may alias the params as far as a compiler knows, so
  // fields read inside the loops would be read again after every store.
  struct pages {
    bool narrow;  // slot_limit <= 2^32
    std::int32_t page_size;
    SPECGRAPH_HD explicit pages(const params& p)
        : narrow(p.slot_limit <= (std::int64_t{1} << 32)), page_size(p.page_size) {}
    SPECGRAPH_HD std::int64_t page(std::int64_t slot) const {
      if (narrow) {
        return static_cast<std::int64_t>(static_cast<std::uint32_t>(slot) /
                                         static_cast<std::uint32_t>(page_size));
      }
      return slot / page_size;
    }
    SPECGRAPH_HD std::int64_t offset(std::int64_t slot) const {
      if (narrow) {
        return static_cast<std::int64_t>(static_cast<std::uint32_t>(slot) %
                                         static_cast<std::uint32_t>(page_size));
      }
      return slot % page_size;
    }
  };

  // Offset of the first slot of branch `branch` of `request` in cache_loc's elements. Offsets:
  // request < 2^24 and strides <= 2^36 (packed: topk * cache_loc_stride <= 2^41, one row's
  // columns): inside int64.
  SPECGRAPH_HD static std::int64_t row_offset(const params& p, std::int32_t request,
                                              std::int32_t branch) {
    const std::int64_t request_stride =
        p.cache_loc_request_stride > 0 ? p.cache_loc_request_stride : p.topk * p.cache_loc_stride;
    return request * request_stride + branch * p.cache_loc_stride;
  }

  // Slot j of branch `branch` of `request`, int32 or int64 as the input holds it, widened to
  // int64 (range-checked by the caller before use). For host-side checks; the kernel reads
  // through row_slots instead.
  SPECGRAPH_HD static std::int64_t slot_at(const params& p, std::int32_t request,
                                           std::int32_t branch, std::int32_t j) {
    return p.cache_loc.load_at(row_offset(p, request, branch) + j * p.cache_loc.stride);
  }

  // The slots of one branch row as the launch's source holds them: T elements (int32 or int64),
  // adjacent when Unit (element stride 1: the arena's staged rows, a contiguous engine tensor),
  // `stride` apart otherwise (0 included). The source's dtype and stride are picked once per
  // launch (run_rows) or per row (run_row), never per element: the loops index a plain pointer.
  template <class T, bool Unit>
  struct row_slots {
    const T* base;
    std::int64_t stride;
    SPECGRAPH_HD std::int64_t operator[](std::int32_t j) const {
      return static_cast<std::int64_t>(Unit ? base[j] : base[j * stride]);
    }
  };

  // Rows [begin, end) with the source's load path picked once: four instantiations, one per
  // (dtype, unit stride) pair. run_rows is what the host executor calls for a launch
  // (row_kernel.hpp); run_row, one GPU thread's row, takes the same path for its one row.
  SPECGRAPH_HD static void run_span(const params& p, std::int64_t begin, std::int64_t end) {
    const bool unit = p.cache_loc.stride == 1;
    if (p.cache_loc.is_int64 != 0) {
      if (unit) {
        rows_as<std::int64_t, true>(p, begin, end);
      } else {
        rows_as<std::int64_t, false>(p, begin, end);
      }
    } else if (unit) {
      rows_as<std::int32_t, true>(p, begin, end);
    } else {
      rows_as<std::int32_t, false>(p, begin, end);
    }
  }
  static void run_rows(const params& p, std::int64_t rows) { run_span(p, 0, rows); }
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row64) {
    run_span(p, row64, row64 + 1);
  }

  template <class T, bool Unit>
  SPECGRAPH_HD static void rows_as(const params& p, std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) row_as<T, Unit>(p, row);
  }

  template <class T, bool Unit>
  SPECGRAPH_HD static void row_as(const params& p, std::int64_t row64) {
    if (p.device_step == nullptr) {
      expand_row<T, Unit>(p, row64);
      return;
    }
    // Device step counter: this launch's step comes from device memory.
    const std::int32_t s = *p.device_step;
    if (s < 0 || s >= p.device_steps) {
      if (row64 == 0) {
        guard_record(p.guard, violation_kind::bad_input, id, 0, -1, p.device_steps, s);
      }
      return;
    }
    params q = p;
    q.decode_length = s + 1;  // <= device_steps <= 1024
    q.capacity = s + 2;
    q.slots_read = p.slots_read > 0 ? p.slots_read : s + 1;
    q.guard = p.guard + s;
    expand_row<T, Unit>(q, row64);
  }

  // The cells of a padded request's row (docs/metadata.md section 4: seq_len 1, every slot 0):
  // last_page_len 1 % page_size, every page the dummy page 0.
  SPECGRAPH_HD static void write_padded_row(const params& p, std::int32_t row,
                                            std::int32_t* table_row) {
    p.cache_seqlen[row] = 1 % p.page_size + p.decode_length;  // < 2 + 1024
    for (std::int32_t c = 0; c < p.capacity; ++c) table_row[c] = 0;
  }

  template <class T, bool Unit>
  SPECGRAPH_HD static void expand_row(const params& p, std::int64_t row64) {
    // row < 2^24 and stride <= 2^31: the offsets below stay far inside int64.
    const auto row = static_cast<std::int32_t>(row64);
    const std::int32_t request = row / p.topk;
    const std::int32_t branch = row - request * p.topk;
    std::int32_t* table_row = p.page_table + row64 * p.page_table_stride;

    // A request past the device real batch, or one the round's prefix check refused, is a
    // padded request (every slot 0): its slots are not read, nothing is recorded for it.
    if (padded_request(p.padding_from, p.refused, request)) {
      write_padded_row(p, row, table_row);
      return;
    }

    // The launch's scalars as locals (see pages): read once, not after every store.
    const std::int32_t last_page_len = p.last_page_len[request];
    const std::int32_t slots_read = p.slots_read;
    const std::int32_t capacity = p.capacity;
    const std::int32_t decode_length = p.decode_length;
    guard_word* const guard = p.guard;
    const pages pg(p);
    const row_slots<T, Unit> slots{
        static_cast<const T*>(p.cache_loc.data) + row_offset(p, request, branch),
        p.cache_loc.stride};

    // Input check first, so a row with a bad value is written as a padded row instead (no page
    // id of an earlier round survives in it). A slot whose page id does not fit the int32
    // table is refused too (never truncated to another page): page_of(slot) > max_page_id
    // exactly when slot >= (max_page_id + 1) * page_size (<= 2^31 * 2^20, inside int64), so
    // the check needs no division.
    if (last_page_len < 0 || last_page_len >= pg.page_size) {
      guard_record(guard, violation_kind::bad_input, id, row, -1, pg.page_size, last_page_len);
      write_padded_row(p, row, table_row);
      return;
    }
    const std::int64_t page_limit_slot = (max_page_id + 1) * pg.page_size;
    const std::int64_t slot_end = p.slot_limit < page_limit_slot ? p.slot_limit : page_limit_slot;
    for (std::int32_t j = 0; j < slots_read; ++j) {
      const std::int64_t slot = slots[j];
      if (slot < 0 || slot >= slot_end) {
        guard_record(guard, violation_kind::bad_input, id, row, j, -1, slot);
        write_padded_row(p, row, table_row);
        return;
      }
    }

    // last_page_len < 2^20 and decode_length <= 1024: the sum fits int32.
    p.cache_seqlen[row] = last_page_len + decode_length;

    // Unique-consecutive pages of the first slots_read slots, scattered into the row. The number
    // of runs is at most slots_read, so with slots_read = d and capacity d + 1 the scatter cannot
    // leave the row; any wider read is caught by checked_store instead of corrupting memory.
    std::int32_t runs = 0;
    std::int64_t previous_page = -1;
    for (std::int32_t j = 0; j < slots_read; ++j) {
      const std::int64_t page = pg.page(slots[j]);  // <= max_page_id (checked above)
      if (j == 0 || page != previous_page) {
        checked_store(table_row, runs, capacity, page, guard, id, row);
        ++runs;
        previous_page = page;
      }
    }
    // Every remaining cell gets the reserved dummy page 0, so no page id from an earlier round
    // survives (padded rows read ceil((1 + d) / ps) pages while only one run is theirs).
    for (std::int32_t c = runs; c < capacity; ++c) table_row[c] = 0;

    if (p.layout_check_batch != nullptr && request < *p.layout_check_batch) {
      for (std::int32_t j = 0; j < slots_read; ++j) {
        // int64: last_page_len + j < 2^20 + 2^31.
        const std::int64_t expected_offset =
            (static_cast<std::int64_t>(last_page_len) + j) % pg.page_size;
        const std::int64_t offset = pg.offset(slots[j]);
        if (offset != expected_offset) {
          // "expected" is the in-page offset the allocation of section 1 implies; "found" the
          // slot's actual offset.
          guard_record(guard, violation_kind::layout, id, row, j,
                       static_cast<std::int32_t>(expected_offset), offset);
          return;
        }
      }
      // int64: last_page_len + decode_length + page_size < 2^22.
      const std::int64_t expected_runs =
          (static_cast<std::int64_t>(last_page_len) + decode_length + pg.page_size - 1) /
          pg.page_size;
      if (runs != expected_runs) {
        guard_record(guard, violation_kind::layout, id, row, runs,
                     static_cast<std::int32_t>(expected_runs), runs);
      }
    }
  }
};

}  // namespace specgraph::kernels
