// kernels_fuzz: the expand page table driver (docs/metadata.md section 3), on every path. Slots
// are laid out as engines lay them out most of the time, arbitrary otherwise, so the reference
// comparison runs on realistic rows and the bad-input handling still sees garbage.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/metadata.hpp"
#include "tests/fuzz/kernels_fuzz.hpp"

namespace specgraph::fuzz::kernels_harness {

void fuzz_expand(reader& in, path how) {
  specgraph::expand_params p;
  p.batch = in.value32(1, 6, limits::max_rows);
  p.topk = in.value32(1, 4, limits::max_topk);
  p.page_size = in.value32(1, 8, limits::max_page_size);
  p.decode_length = in.value32(1, 6, limits::max_num_steps);
  p.cache_loc_stride = in.value(1, 8, std::int64_t{1} << 31);
  p.slots_read = in.value32(1, 8, 1024);
  p.capacity = in.value32(1, 8, 1 << 20);
  const std::uint8_t stride_mode = in.byte();
  p.page_table_stride = stride_mode < 0xf0 ? std::int64_t{p.capacity} + stride_mode % 3
                                           : in.value(1, 8, std::int64_t{1} << 31);
  if (in.flag()) p.slot_limit = in.value(1, 4096, std::numeric_limits<std::int64_t>::max());
  const std::uint8_t layout_mode = in.byte();
  const std::uint8_t null_mask = in.byte() == 0xff ? in.byte() : 0;

  const std::int64_t rows = cells(p.batch, p.topk);
  const std::int64_t n_loc = cells(rows, p.cache_loc_stride);
  const std::int64_t n_table = cells(rows, p.page_table_stride);
  bool small = p.batch > max_cells || rows > max_cells || n_loc > max_cells || n_table > max_cells;
  if (small) {
    // Too large to allocate: only worth running when it is refused (with tiny buffers, which a
    // refused call must not touch).
    specgraph::expand_params probe = p;
    static std::int64_t dummy[1];
    probe.cache_loc = dummy;
    probe.last_page_len = reinterpret_cast<const std::int32_t*>(dummy);
    probe.page_table = reinterpret_cast<std::int32_t*>(dummy);
    probe.cache_seqlen = reinterpret_cast<std::int32_t*>(dummy);
    probe.guard = reinterpret_cast<guard_word*>(dummy);
    try {
      specgraph::validate(probe);
      return;
    } catch (const invalid_argument&) {
    }
  }
  const std::size_t n_rows = small ? 1 : count_of(rows);
  const std::size_t n_req = small ? 1 : count_of(p.batch);
  guarded<std::int64_t> cache_loc(small ? 1 : count_of(n_loc));
  guarded<std::int32_t> last_page_len(n_req);
  guarded<std::int32_t> table(small ? 1 : count_of(n_table), stale);
  guarded<std::int32_t> cache_seqlen(n_rows, stale);
  guarded<guard_word> guard(1, guard_word{});
  guarded<std::int32_t> layout_batch(1, 0);

  // Contents: last_page_len mostly in range, slots laid out as engines lay them out (fresh page,
  // offset (last_page_len + j) % ps) or arbitrary, per row.
  const std::int32_t ps = std::max(p.page_size, 1);
  for (std::size_t r = 0; r < n_req; ++r) {
    const std::uint8_t m = in.byte();
    last_page_len[r] =
        m < 0xe0 ? static_cast<std::int32_t>(m % ps) : in.value32(0, ps - 1, p.page_size);
  }
  const std::size_t stride = small ? 1 : count_of(p.cache_loc_stride);
  for (std::size_t row = 0; row < n_rows; ++row) {
    std::int64_t* slots = cache_loc.data() + row * stride;
    const std::uint8_t m = in.byte();
    const std::int64_t lpl =
        last_page_len[std::min(row / count_of(std::max(p.topk, 1)), n_req - 1)];
    std::int64_t page = in.u16();
    for (std::size_t j = 0; j < stride; ++j) {
      if (m < 0xa0) {
        const std::int64_t offset = (lpl + static_cast<std::int64_t>(j)) % ps;
        if (j > 0 && offset == 0) page = (m & 1) ? page + 1 : in.u16();
        slots[j] = page * ps + offset;
      } else if (m < 0xe0) {
        slots[j] = in.byte() % (4 * static_cast<std::int64_t>(ps));
      } else {
        slots[j] = in.value(0, 4096, p.slot_limit);
      }
    }
  }
  if (layout_mode >= 0x80) {
    layout_batch[0] = layout_mode >= 0xf0 ? in.value32(0, 8, p.batch) : (layout_mode & 7);
    p.layout_check_batch = layout_batch.data();
  }
  p.cache_loc = (null_mask & 1) ? nullptr : cache_loc.data();
  p.last_page_len = (null_mask & 2) ? nullptr : last_page_len.data();
  p.page_table = (null_mask & 4) ? nullptr : table.data();
  p.cache_seqlen = (null_mask & 8) ? nullptr : cache_seqlen.data();
  p.guard = (null_mask & 16) ? nullptr : guard.data();

  const auto loc0 = cache_loc.copy();
  const auto lpl0 = last_page_len.copy();
  const auto table0 = table.copy();
  const auto seqlen0 = cache_seqlen.copy();
  const auto guard0 = guard.copy();
  const auto layout0 = layout_batch.copy();
  const char* what = how == path::host ? "expand_page_table_host" : "launch_expand_page_table";
  try {
    run_kernel(how, p, specgraph::expand_page_table_host, specgraph::launch_expand_page_table);
  } catch (const invalid_argument& e) {
    specgraph::fuzz::check_invalid_argument(e, what);
    check_unchanged(table, table0, what, "page_table");
    check_unchanged(cache_seqlen, seqlen0, what, "cache_seqlen");
    check_unchanged(guard, guard0, what, "guard");
    check_unchanged(cache_loc, loc0, what, "cache_loc");
    check_unchanged(last_page_len, lpl0, what, "last_page_len");
    return;
  }
  FUZZ_CHECK(!small, "%s accepted parameters that validate() refuses", what);
  check_unchanged(cache_loc, loc0, what, "cache_loc (an input)");
  check_unchanged(last_page_len, lpl0, what, "last_page_len (an input)");
  check_unchanged(layout_batch, layout0, what, "layout_check_batch (an input)");
  FUZZ_CHECK(table.canaries_intact(), "%s: canaries around page_table overwritten", what);
  FUZZ_CHECK(cache_seqlen.canaries_intact(), "%s: canaries around cache_seqlen overwritten", what);

  bool expect_violation = false;
  const std::size_t tstride = count_of(p.page_table_stride);
  for (std::size_t row = 0; row < n_rows; ++row) {
    const std::size_t r = row / count_of(p.topk);
    const bool checked =
        p.layout_check_batch != nullptr && static_cast<std::int64_t>(r) < *p.layout_check_batch;
    const specgraph::fuzz::expand_row_result want =
        specgraph::fuzz::expand_reference(loc0.data() + row * stride, p.slots_read, lpl0[r],
                                          p.page_size, p.decode_length, p.slot_limit, checked);
    const std::vector<std::int32_t> old(
        table0.begin() + static_cast<std::ptrdiff_t>(row * tstride),
        table0.begin() + static_cast<std::ptrdiff_t>((row + 1) * tstride));
    const std::vector<std::int32_t> got(table.data() + row * tstride,
                                        table.data() + (row + 1) * tstride);
    for (std::size_t c = 0; c < tstride; ++c) {
      FUZZ_CHECK(got[c] == old[c] || got[c] >= 0, "%s: negative page id %d stored at [%zu][%zu]",
                 what, got[c], row, c);
    }
    if (want.bad) {
      // Written as a padded request's row: the dummy page in every writable cell.
      FUZZ_CHECK(how != path::host, "%s accepted a bad input in row %zu", what, row);
      expect_violation = true;
      FUZZ_CHECK(got == specgraph::fuzz::expected_table_row(old, {}, p.capacity),
                 "%s: row %zu has a bad input but is not a padded row", what, row);
      FUZZ_CHECK(cache_seqlen[row] == 1 % p.page_size + p.decode_length,
                 "%s: cache_seqlen[%zu] = %d for a bad row, a padded row's is %d", what, row,
                 cache_seqlen[row], 1 % p.page_size + p.decode_length);
      continue;
    }
    expect_violation = expect_violation ||
                       want.pages.size() > static_cast<std::size_t>(p.capacity) ||
                       want.layout_violation;
    const std::vector<std::int32_t> row_want =
        specgraph::fuzz::expected_table_row(old, want.pages, p.capacity);
    for (std::size_t c = 0; c < tstride; ++c) {
      FUZZ_CHECK(got[c] == row_want[c], "%s: page_table[%zu][%zu] = %d, reference %d (capacity %d)",
                 what, row, c, got[c], row_want[c], p.capacity);
    }
    FUZZ_CHECK(cache_seqlen[row] == want.cache_seqlen, "%s: cache_seqlen[%zu] = %d, reference %d",
               what, row, cache_seqlen[row], want.cache_seqlen);
  }
  check_guard(guard, expect_violation, {1}, what);
}

}  // namespace specgraph::fuzz::kernels_harness
