// libFuzzer harness: the metadata kernels with arbitrary parameters. Scalars come from the bytes;
// every buffer is allocated by the harness exactly as large as the parameters describe, with
// poisoned canaries before and after it. Each input runs one kernel on one path:
//   kernel: expand page table, prefix metadata, sparse stage, sparse fallback (host only);
//   path:   launch_* on the host executor (eager), on a deferred host executor, recorded into a
//           graph and replayed, or the *_host entry point.
//
// Promises checked:
//   * a rejected call throws invalid_argument naming its field, and writes nothing: every output
//     buffer and every canary is unchanged;
//   * an accepted call never writes outside its buffers (canaries intact; ASan reports any access
//     to them at once), leaves its inputs unchanged, and leaves a consistent guard word: clean and
//     all zero, or a valid kind and the kernel's own id;
//   * no stored page id is negative;
//   * every output equals an independent reference written from docs/metadata.md (sections 2, 3
//     and 6): rows with an out-of-range input keep their previous contents, other rows hold the
//     reference's values, cells past a row's capacity are never written, and a violation is
//     recorded exactly when the reference has one (which one is recorded is not asserted);
//   * the *_host entry points accept no input the kernel would refuse as bad input.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/metadata.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

using specgraph::guard_word;
using specgraph::invalid_argument;
using specgraph::fuzz::guarded;
using specgraph::fuzz::reader;
namespace limits = specgraph::limits;

// The most cells one input may allocate per buffer: keeps each execution to a few ms.
constexpr std::int64_t max_cells = std::int64_t{1} << 15;
constexpr std::int32_t stale = -3;  // what output cells hold before the call

enum class path { eager, deferred, graph, host };

// Saturating product of non-negative sizes (a negative factor counts as 0).
std::int64_t cells(std::int64_t a, std::int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  if (a > max_cells * 4 || b > max_cells * 4) return max_cells * 16;
  return std::min(a * b, max_cells * 16);
}
std::size_t count_of(std::int64_t n) {
  return static_cast<std::size_t>(std::max<std::int64_t>(n, 0));
}

// Runs `launch` on the path's executor (or nothing: the host path calls its own function).
// Returns normally or lets invalid_argument through; any capture is ended either way.
template <class Launch>
void on_path(path how, Launch&& launch) {
  if (how == path::host) return;
  std::unique_ptr<specgraph::executor> ex =
      specgraph::make_host_executor({/*deferred=*/how == path::deferred});
  if (how == path::graph) {
    ex->begin_capture();
    try {
      launch(*ex);
    } catch (...) {
      ex->abort_capture();
      throw;
    }
    std::unique_ptr<specgraph::graph> g = ex->end_capture();
    std::unique_ptr<specgraph::graph_exec> exec = ex->instantiate(*g);
    ex->launch_graph(*exec);
  } else {
    launch(*ex);
  }
  ex->synchronize();
}

void check_guard(const guarded<guard_word>& g, bool expect_violation,
                 std::initializer_list<std::int32_t> kernels, const char* what) {
  FUZZ_CHECK(g.canaries_intact(), "%s: guard canaries overwritten", what);
  const guard_word& w = g[0];
  specgraph::fuzz::check_guard_word(w, what);
  FUZZ_CHECK((w.violations > 0) == expect_violation,
             "%s: %d violations recorded, the reference expects %s", what, w.violations,
             expect_violation ? "some" : "none");
  if (w.violations > 0) {
    bool known = false;
    for (const std::int32_t k : kernels) known = known || w.kernel == k;
    FUZZ_CHECK(known, "%s: violation names kernel %d", what, w.kernel);
  }
}

template <class T>
void check_unchanged(const guarded<T>& b, const std::vector<T>& before, const char* what,
                     const char* name) {
  FUZZ_CHECK(b.canaries_intact(), "%s: canaries around %s overwritten", what, name);
  FUZZ_CHECK(b.same(before), "%s: %s changed", what, name);
}

// ---- expand page table (docs/metadata.md section 3) --------------------------------------------

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
    if (how == path::host) {
      specgraph::expand_page_table_host(p);
    } else {
      on_path(how, [&](specgraph::executor& ex) { specgraph::launch_expand_page_table(ex, p); });
    }
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
      FUZZ_CHECK(how != path::host, "%s accepted a bad input in row %zu", what, row);
      expect_violation = true;
      FUZZ_CHECK(got == old, "%s: row %zu has a bad input but was written", what, row);
      FUZZ_CHECK(cache_seqlen[row] == seqlen0[row], "%s: cache_seqlen[%zu] written for a bad row",
                 what, row);
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

// ---- prefix metadata (docs/metadata.md section 2) ----------------------------------------------

void fuzz_prefix(reader& in, path how) {
  specgraph::prefix_params p;
  p.batch = in.value32(1, 6, limits::max_rows);
  p.topk = in.value32(1, 4, limits::max_topk);
  p.page_size = in.value32(1, 8, limits::max_page_size);
  p.pool_rows = in.value32(1, 5, limits::max_pool_rows);
  p.req_to_token_stride = in.value(1, 48, limits::max_context_len);
  const std::int64_t full = (std::clamp<std::int64_t>(p.req_to_token_stride, 0, 1LL << 40) +
                             std::max(p.page_size, 1) - 1) /
                            std::max(p.page_size, 1);
  const std::uint8_t cap_mode = in.byte();
  p.capacity = cap_mode < 0xa0 ? static_cast<std::int32_t>(std::min<std::int64_t>(full, 1 << 30))
                               : in.value32(1, 8, 1 << 20);
  const std::uint8_t stride_mode = in.byte();
  p.page_table_stride = stride_mode < 0xf0 ? std::int64_t{p.capacity} + stride_mode % 3
                                           : in.value(1, 8, std::int64_t{1} << 31);
  if (in.flag()) p.slot_limit = in.value(1, 4096, std::numeric_limits<std::int64_t>::max());
  const std::uint32_t null_mask = in.byte() == 0xff ? in.u16() & 0x1ffu : 0u;

  const std::int64_t n_rtt = cells(p.pool_rows, p.req_to_token_stride);
  const std::int64_t n_table = cells(p.batch, p.page_table_stride);
  const std::int64_t n_cells = cells(p.batch, p.capacity);  // the kernels' launch shape
  bool small = p.batch > max_cells || p.pool_rows > max_cells || n_rtt > max_cells ||
               n_table > max_cells || n_cells > max_cells;
  if (small) {
    specgraph::prefix_params probe = p;
    static std::int32_t dummy[1];
    probe.req_to_token = probe.req_pool_index = probe.seq_len = dummy;
    probe.last_page_len = probe.prefix_seqlen = probe.page_table = probe.cu_seqlens_q = dummy;
    probe.guard = reinterpret_cast<guard_word*>(dummy);
    try {
      specgraph::validate(probe);
      return;
    } catch (const invalid_argument&) {
    }
  }
  const std::size_t n_req = small ? 1 : count_of(p.batch);
  const std::size_t rtt_stride = small ? 1 : count_of(p.req_to_token_stride);
  const std::size_t n_pool = small ? 1 : count_of(p.pool_rows);
  guarded<std::int32_t> req_to_token(n_pool * rtt_stride);
  guarded<std::int32_t> pool_index(n_req), seq_len(n_req);
  guarded<std::int32_t> last_page_len(n_req, stale), prefix_seqlen(n_req, stale);
  guarded<std::int32_t> table(small ? 1 : count_of(n_table), stale);
  guarded<std::int32_t> cu_seqlens(n_req + 1, stale), refused(n_req, stale);
  guarded<guard_word> guard(1, guard_word{});

  // req_to_token: each pool row either engine-like (pages from a small generator, offsets
  // pos % ps) or with a few bad slots.
  const std::int32_t ps = std::max(p.page_size, 1);
  for (std::size_t row = 0; row < n_pool; ++row) {
    std::uint32_t h = in.u16() * 2654435761u + static_cast<std::uint32_t>(row);
    for (std::size_t pos = 0; pos < rtt_stride; ++pos) {
      if (pos % static_cast<std::size_t>(ps) == 0) h = h * 1664525u + 1013904223u;
      // int64, then wrapped: a huge page size makes garbage slots, never overflow.
      const std::int64_t slot = static_cast<std::int64_t>((h >> 8) % 4096) * ps +
                                static_cast<std::int64_t>(pos % static_cast<std::size_t>(ps));
      req_to_token[row * rtt_stride + pos] =
          static_cast<std::int32_t>(static_cast<std::uint32_t>(slot));
    }
    const std::uint8_t bad = in.byte();
    if (bad >= 0xc0 && rtt_stride > 0) {
      for (int k = 0; k < (bad & 3) + 1; ++k) {
        const std::size_t pos =
            static_cast<std::size_t>(in.below(static_cast<std::int64_t>(rtt_stride)));
        req_to_token[row * rtt_stride + pos] = in.value32(0, 4096, p.slot_limit);
      }
    }
  }
  for (std::size_t r = 0; r < n_req; ++r) {
    pool_index[r] =
        in.value32(0, std::max<std::int64_t>(std::int64_t{p.pool_rows} - 1, 0), p.pool_rows);
    seq_len[r] = in.value32(0, p.req_to_token_stride, p.req_to_token_stride);
  }
  p.req_to_token = (null_mask & 1) ? nullptr : req_to_token.data();
  p.req_pool_index = (null_mask & 2) ? nullptr : pool_index.data();
  p.seq_len = (null_mask & 4) ? nullptr : seq_len.data();
  p.last_page_len = (null_mask & 8) ? nullptr : last_page_len.data();
  p.prefix_seqlen = (null_mask & 16) ? nullptr : prefix_seqlen.data();
  p.page_table = (null_mask & 32) ? nullptr : table.data();
  p.cu_seqlens_q = (null_mask & 64) ? nullptr : cu_seqlens.data();
  p.guard = (null_mask & 128) ? nullptr : guard.data();
  p.refused = (null_mask & 256) ? nullptr : refused.data();

  const auto rtt0 = req_to_token.copy();
  const auto pool0 = pool_index.copy();
  const auto seq0 = seq_len.copy();
  const auto lpl0 = last_page_len.copy();
  const auto pseq0 = prefix_seqlen.copy();
  const auto table0 = table.copy();
  const auto cu0 = cu_seqlens.copy();
  const auto refused0 = refused.copy();
  const auto guard0 = guard.copy();
  const char* what = how == path::host ? "prefix_metadata_host" : "launch_prefix_metadata";
  try {
    if (how == path::host) {
      specgraph::prefix_metadata_host(p);
    } else {
      on_path(how, [&](specgraph::executor& ex) { specgraph::launch_prefix_metadata(ex, p); });
    }
  } catch (const invalid_argument& e) {
    specgraph::fuzz::check_invalid_argument(e, what);
    check_unchanged(last_page_len, lpl0, what, "last_page_len");
    check_unchanged(prefix_seqlen, pseq0, what, "prefix_seqlen");
    check_unchanged(table, table0, what, "page_table");
    check_unchanged(cu_seqlens, cu0, what, "cu_seqlens_q");
    check_unchanged(refused, refused0, what, "refused");
    check_unchanged(guard, guard0, what, "guard");
    return;
  }
  FUZZ_CHECK(!small, "%s accepted parameters that validate() refuses", what);
  check_unchanged(req_to_token, rtt0, what, "req_to_token (an input)");
  check_unchanged(pool_index, pool0, what, "req_pool_index (an input)");
  check_unchanged(seq_len, seq0, what, "seq_len (an input)");
  if (how == path::host) check_unchanged(refused, refused0, what, "refused (unused on the host)");
  FUZZ_CHECK(refused.canaries_intact(), "%s: canaries around refused overwritten", what);
  FUZZ_CHECK(table.canaries_intact() && last_page_len.canaries_intact() &&
                 prefix_seqlen.canaries_intact() && cu_seqlens.canaries_intact(),
             "%s: canaries around an output overwritten", what);

  bool expect_violation = false;
  const std::size_t tstride = count_of(p.page_table_stride);
  for (std::size_t r = 0; r < n_req; ++r) {
    const specgraph::fuzz::prefix_request_result want =
        specgraph::fuzz::prefix_reference(rtt0.data(), p.req_to_token_stride, p.pool_rows, pool0[r],
                                          seq0[r], p.page_size, p.slot_limit);
    const std::vector<std::int32_t> old(
        table0.begin() + static_cast<std::ptrdiff_t>(r * tstride),
        table0.begin() + static_cast<std::ptrdiff_t>((r + 1) * tstride));
    const std::vector<std::int32_t> got(table.data() + r * tstride,
                                        table.data() + (r + 1) * tstride);
    for (std::size_t c = 0; c < tstride; ++c) {
      FUZZ_CHECK(got[c] == old[c] || got[c] >= 0, "%s: negative page id %d stored at [%zu][%zu]",
                 what, got[c], r, c);
    }
    if (want.bad) {
      FUZZ_CHECK(how != path::host, "%s accepted a bad input for request %zu", what, r);
      expect_violation = true;
      FUZZ_CHECK(got == old && last_page_len[r] == lpl0[r] && prefix_seqlen[r] == pseq0[r],
                 "%s: request %zu has a bad input but was written", what, r);
      continue;
    }
    expect_violation = expect_violation || want.pages.size() > static_cast<std::size_t>(p.capacity);
    const std::vector<std::int32_t> row_want =
        specgraph::fuzz::expected_table_row(old, want.pages, p.capacity);
    for (std::size_t c = 0; c < tstride; ++c) {
      FUZZ_CHECK(got[c] == row_want[c], "%s: page_table[%zu][%zu] = %d, reference %d (capacity %d)",
                 what, r, c, got[c], row_want[c], p.capacity);
    }
    FUZZ_CHECK(last_page_len[r] == want.last_page_len && prefix_seqlen[r] == want.prefix_seqlen,
               "%s: request %zu: last_page_len %d prefix_seqlen %d, reference %d %d", what, r,
               last_page_len[r], prefix_seqlen[r], want.last_page_len, want.prefix_seqlen);
  }
  for (std::size_t i = 0; i <= n_req; ++i) {
    FUZZ_CHECK(static_cast<std::int64_t>(cu_seqlens[i]) == static_cast<std::int64_t>(i) * p.topk,
               "%s: cu_seqlens_q[%zu] = %d, expected %lld", what, i, cu_seqlens[i],
               static_cast<long long>(i) * p.topk);
  }
  check_guard(guard, expect_violation, {2}, what);
}

// ---- sparse stage (docs/metadata.md section 6) --------------------------------------------------

std::int64_t key_length(const specgraph::sparse_stage& s) {
  switch (s.kind) {
    case specgraph::stage_kind::intra: return std::int64_t{s.end} - s.prev;
    case specgraph::stage_kind::succ: return s.chunk_len;
    case specgraph::stage_kind::inter: return std::int64_t{s.prev} - s.chunk_len;
  }
  return 0;
}

// The mapped index of a selected entry, or -1 when the stage does not select it.
std::int64_t map_index(const specgraph::sparse_stage& s, bool vertical, std::int64_t x) {
  const std::int64_t prev = s.prev, chunk = s.chunk_len, q = s.chunk_q_len, end = s.end;
  std::int64_t m = -1;
  switch (s.kind) {
    case specgraph::stage_kind::intra:
      if (x >= prev) m = vertical ? x - prev : (end - 1) - x;
      break;
    case specgraph::stage_kind::succ:
      if (vertical) {
        if (x >= prev - chunk && x < prev) m = x - (prev - chunk);
      } else if (x >= prev - chunk && x < prev + q) {
        m = (prev + q - 1) - x;
      }
      break;
    case specgraph::stage_kind::inter:
      if (vertical) {
        if (x < prev - chunk) m = x;
      } else if (x < prev - chunk + q) {
        m = (prev - chunk + q - 1) - x;
      }
      break;
  }
  return m >= 0 && m < end ? m : -1;
}

struct head_result {
  std::vector<std::int64_t> stored;  // what the buffer holds before the sentinels
  bool overflow = false;
};

head_result stage_reference(const specgraph::sparse_stage& s, bool vertical,
                            const std::int32_t* in_idx, std::int32_t count, std::int32_t size,
                            std::int32_t capacity) {
  head_result r;
  for (std::int32_t i = 0; i < count; ++i) {
    const std::int64_t m = map_index(s, vertical, in_idx[i]);
    if (m >= 0) r.stored.push_back(m);
  }
  if (r.stored.empty()) {
    r.stored = specgraph::fuzz::fallback_reference(key_length(s), std::min(size, s.end),
                                                   std::int64_t{capacity} + 1);
  }
  if (r.stored.size() > static_cast<std::size_t>(capacity)) {
    r.overflow = true;
    r.stored.resize(static_cast<std::size_t>(capacity));
  }
  return r;
}

void fuzz_sparse(reader& in, path how) {
  specgraph::sparse_stage_params p;
  p.heads = in.value32(1, 4, limits::max_heads);
  p.vertical_stride = in.value32(0, 6, limits::max_sparse_size);
  p.slash_stride = in.value32(0, 6, limits::max_sparse_size);
  p.vertical_capacity = in.value32(1, 6, limits::max_sparse_size);
  p.slash_capacity = in.value32(1, 6, limits::max_sparse_size);
  specgraph::sparse_stage& s = p.stage;
  const std::uint8_t kind = in.byte();
  s.kind = kind >= 0xfc ? static_cast<specgraph::stage_kind>(kind)
                        : static_cast<specgraph::stage_kind>(kind % 3);
  s.chunk_len = in.value32(1, 24, limits::max_keys);
  const std::uint8_t prev_mode = in.byte();
  const std::int64_t chunk = std::max(s.chunk_len, 1);
  s.prev = prev_mode < 0xc0 ? static_cast<std::int32_t>(
                                  std::min<std::int64_t>(chunk * (prev_mode % 5), limits::max_keys))
                            : in.value32(0, 64, limits::max_keys);
  const std::uint8_t end_mode = in.byte();
  s.end = end_mode < 0xc0 ? static_cast<std::int32_t>(std::min<std::int64_t>(
                                std::int64_t{s.prev} + 1 + end_mode % chunk, limits::max_keys))
                          : in.value32(1, 96, limits::max_keys);
  const std::uint8_t q_mode = in.byte();
  s.chunk_q_len = q_mode < 0xc0 ? static_cast<std::int32_t>(std::clamp<std::int64_t>(
                                      std::int64_t{s.end} - s.prev, -1, limits::max_keys))
                                : in.value32(1, 24, limits::max_keys);
  const std::uint32_t null_mask = in.byte() == 0xff ? in.u16() & 0x7ffu : 0u;

  const std::int64_t n_v = cells(p.heads, p.vertical_stride);
  const std::int64_t n_s = cells(p.heads, p.slash_stride);
  const std::int64_t n_ov = cells(p.heads, p.vertical_capacity);
  const std::int64_t n_os = cells(p.heads, p.slash_capacity);
  const bool small = p.heads > max_cells || n_v > max_cells || n_s > max_cells ||
                     n_ov > max_cells || n_os > max_cells;
  if (small) {
    specgraph::sparse_stage_params probe = p;
    static std::int32_t dummy[1];
    probe.vertical = probe.vertical_count = probe.vertical_size = dummy;
    probe.slash = probe.slash_count = probe.slash_size = dummy;
    probe.out_vertical = probe.out_vertical_count = probe.out_slash = probe.out_slash_count = dummy;
    probe.guard = reinterpret_cast<guard_word*>(dummy);
    try {
      specgraph::validate(probe);
      return;
    } catch (const invalid_argument&) {
    }
  }
  const std::size_t heads = small ? 1 : count_of(p.heads);
  const std::size_t vstride = small ? 1 : count_of(p.vertical_stride);
  const std::size_t sstride = small ? 1 : count_of(p.slash_stride);
  const std::size_t vcap = small ? 1 : count_of(p.vertical_capacity);
  const std::size_t scap = small ? 1 : count_of(p.slash_capacity);
  guarded<std::int32_t> vertical(heads * vstride), slash(heads * sstride);
  guarded<std::int32_t> vcount(heads), scount(heads), vsize(heads), ssize(heads);
  guarded<std::int32_t> out_v(heads * vcap, stale), out_s(heads * scap, stale);
  guarded<std::int32_t> out_vc(heads, stale), out_sc(heads, stale);
  guarded<guard_word> guard(1, guard_word{});

  const std::int32_t end = std::max(s.end, 1);
  for (std::size_t h = 0; h < heads; ++h) {
    vsize[h] = in.value32(0, 6, limits::max_sparse_size);
    ssize[h] = in.value32(0, 6, limits::max_sparse_size);
    const std::uint8_t counts = in.byte();
    vcount[h] = counts < 0xf0 ? static_cast<std::int32_t>(counts % (vstride + 1))
                              : in.value32(0, p.vertical_stride, p.vertical_stride);
    scount[h] = counts < 0xf0 ? static_cast<std::int32_t>((counts >> 4) % (sstride + 1))
                              : in.value32(0, p.slash_stride, p.slash_stride);
    for (std::size_t i = 0; i < vstride; ++i)
      vertical[h * vstride + i] = in.value32(0, end - 1, end);
    for (std::size_t i = 0; i < sstride; ++i) slash[h * sstride + i] = in.value32(0, end - 1, end);
  }
  p.vertical = (null_mask & 1) ? nullptr : vertical.data();
  p.vertical_count = (null_mask & 2) ? nullptr : vcount.data();
  p.vertical_size = (null_mask & 4) ? nullptr : vsize.data();
  p.slash = (null_mask & 8) ? nullptr : slash.data();
  p.slash_count = (null_mask & 16) ? nullptr : scount.data();
  p.slash_size = (null_mask & 32) ? nullptr : ssize.data();
  p.out_vertical = (null_mask & 64) ? nullptr : out_v.data();
  p.out_vertical_count = (null_mask & 128) ? nullptr : out_vc.data();
  p.out_slash = (null_mask & 256) ? nullptr : out_s.data();
  p.out_slash_count = (null_mask & 512) ? nullptr : out_sc.data();
  p.guard = (null_mask & 1024) ? nullptr : guard.data();

  const auto v0 = vertical.copy(), s0 = slash.copy();
  const auto vc0 = vcount.copy(), sc0 = scount.copy(), vs0 = vsize.copy(), ss0 = ssize.copy();
  const auto ov0 = out_v.copy(), os0 = out_s.copy(), ovc0 = out_vc.copy(), osc0 = out_sc.copy();
  const auto guard0 = guard.copy();
  const char* what = how == path::host ? "sparse_stage_host" : "launch_sparse_stage";
  try {
    if (how == path::host) {
      specgraph::sparse_stage_host(p);
    } else {
      on_path(how, [&](specgraph::executor& ex) { specgraph::launch_sparse_stage(ex, p); });
    }
  } catch (const invalid_argument& e) {
    specgraph::fuzz::check_invalid_argument(e, what);
    check_unchanged(out_v, ov0, what, "out_vertical");
    check_unchanged(out_s, os0, what, "out_slash");
    check_unchanged(out_vc, ovc0, what, "out_vertical_count");
    check_unchanged(out_sc, osc0, what, "out_slash_count");
    check_unchanged(guard, guard0, what, "guard");
    return;
  }
  FUZZ_CHECK(!small, "%s accepted parameters that validate() refuses", what);
  check_unchanged(vertical, v0, what, "vertical (an input)");
  check_unchanged(slash, s0, what, "slash (an input)");
  check_unchanged(vcount, vc0, what, "vertical_count (an input)");
  check_unchanged(scount, sc0, what, "slash_count (an input)");
  check_unchanged(vsize, vs0, what, "vertical_size (an input)");
  check_unchanged(ssize, ss0, what, "slash_size (an input)");
  FUZZ_CHECK(out_v.canaries_intact() && out_s.canaries_intact() && out_vc.canaries_intact() &&
                 out_sc.canaries_intact(),
             "%s: canaries around an output overwritten", what);

  bool expect_violation = false;
  for (std::size_t h = 0; h < heads; ++h) {
    const bool bad = vc0[h] < 0 || vc0[h] > p.vertical_stride || sc0[h] < 0 ||
                     sc0[h] > p.slash_stride || vs0[h] < 0 || ss0[h] < 0 ||
                     std::any_of(v0.begin() + static_cast<std::ptrdiff_t>(h * vstride),
                                 v0.begin() + static_cast<std::ptrdiff_t>(h * vstride) +
                                     std::clamp<std::int32_t>(vc0[h], 0, p.vertical_stride),
                                 [&](std::int32_t x) { return x < 0 || x >= s.end; }) ||
                     std::any_of(s0.begin() + static_cast<std::ptrdiff_t>(h * sstride),
                                 s0.begin() + static_cast<std::ptrdiff_t>(h * sstride) +
                                     std::clamp<std::int32_t>(sc0[h], 0, p.slash_stride),
                                 [&](std::int32_t x) { return x < 0 || x >= s.end; });
    if (bad) {
      FUZZ_CHECK(how != path::host, "%s accepted a bad input for head %zu", what, h);
      expect_violation = true;
      FUZZ_CHECK(std::equal(ov0.begin() + static_cast<std::ptrdiff_t>(h * vcap),
                            ov0.begin() + static_cast<std::ptrdiff_t>((h + 1) * vcap),
                            out_v.data() + h * vcap) &&
                     std::equal(os0.begin() + static_cast<std::ptrdiff_t>(h * scap),
                                os0.begin() + static_cast<std::ptrdiff_t>((h + 1) * scap),
                                out_s.data() + h * scap) &&
                     out_vc[h] == ovc0[h] && out_sc[h] == osc0[h],
                 "%s: head %zu has a bad input but was written", what, h);
      continue;
    }
    const head_result v =
        stage_reference(s, true, v0.data() + h * vstride, vc0[h], vs0[h], p.vertical_capacity);
    const head_result x =
        stage_reference(s, false, s0.data() + h * sstride, sc0[h], ss0[h], p.slash_capacity);
    expect_violation = expect_violation || v.overflow || x.overflow;
    FUZZ_CHECK(out_vc[h] == static_cast<std::int32_t>(v.stored.size()) &&
                   out_sc[h] == static_cast<std::int32_t>(x.stored.size()),
               "%s: head %zu counts %d %d, reference %zu %zu", what, h, out_vc[h], out_sc[h],
               v.stored.size(), x.stored.size());
    for (std::size_t c = 0; c < vcap; ++c) {
      const std::int64_t want =
          c < v.stored.size() ? v.stored[c] : std::numeric_limits<std::int32_t>::max();
      FUZZ_CHECK(out_v[h * vcap + c] == want, "%s: vertical[%zu][%zu] = %d, reference %lld", what,
                 h, c, out_v[h * vcap + c], static_cast<long long>(want));
    }
    for (std::size_t c = 0; c < scap; ++c) {
      const std::int64_t want =
          c < x.stored.size() ? x.stored[c] : std::numeric_limits<std::int32_t>::min();
      FUZZ_CHECK(out_s[h * scap + c] == want, "%s: slash[%zu][%zu] = %d, reference %lld", what, h,
                 c, out_s[h * scap + c], static_cast<long long>(want));
    }
  }
  check_guard(guard, expect_violation, {3, 4}, what);
}

// ---- sparse fallback (host only) ---------------------------------------------------------------

void fuzz_fallback(reader& in) {
  const std::int32_t seq_len = in.value32(0, 64, limits::max_keys);
  const std::int32_t max_count = in.value32(0, 8, limits::max_sparse_size);
  const std::int32_t capacity = in.value32(1, 8, limits::max_sparse_size);
  const std::uint8_t null_mask = in.byte() == 0xff ? in.byte() : 0;
  // Sized as documented: min(count, capacity) entries (at least one).
  std::int64_t n = std::max<std::int64_t>(1, std::min({seq_len, max_count, capacity}));
  const bool valid = seq_len >= 0 && seq_len <= limits::max_keys && max_count >= 0 &&
                     max_count <= limits::max_sparse_size && capacity >= 1 &&
                     capacity <= limits::max_sparse_size && (null_mask & 1) == 0;
  if (n > max_cells) {
    if (valid) return;
    n = 1;
  }
  guarded<std::int32_t> out(static_cast<std::size_t>(n), stale);
  guarded<guard_word> guard(1, guard_word{});
  const auto out0 = out.copy();
  const auto guard0 = guard.copy();
  std::int32_t written = -1;
  try {
    written =
        specgraph::sparse_fallback_host(seq_len, max_count, (null_mask & 1) ? nullptr : out.data(),
                                        capacity, (null_mask & 2) ? nullptr : guard.data());
  } catch (const invalid_argument& e) {
    specgraph::fuzz::check_invalid_argument(e, "sparse_fallback_host");
    FUZZ_CHECK(!valid, "sparse_fallback_host refused (%d, %d, %d): %s", seq_len, max_count,
               capacity, e.what());
    check_unchanged(out, out0, "sparse_fallback_host", "out");
    check_unchanged(guard, guard0, "sparse_fallback_host", "guard");
    return;
  }
  FUZZ_CHECK(valid, "sparse_fallback_host accepted (%d, %d, %d)", seq_len, max_count, capacity);
  FUZZ_CHECK(out.canaries_intact(), "sparse_fallback_host wrote outside min(count, capacity)");
  std::vector<std::int64_t> want =
      specgraph::fuzz::fallback_reference(seq_len, max_count, std::int64_t{capacity} + 1);
  const bool overflow = want.size() > static_cast<std::size_t>(capacity);
  if (overflow) want.resize(static_cast<std::size_t>(capacity));
  FUZZ_CHECK(written == static_cast<std::int32_t>(want.size()),
             "sparse_fallback_host(%d, %d, %d) wrote %d, reference %zu", seq_len, max_count,
             capacity, written, want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    FUZZ_CHECK(out[i] == want[i], "fallback index %zu = %d, reference %lld", i, out[i],
               static_cast<long long>(want[i]));
  }
  if ((null_mask & 2) == 0) check_guard(guard, overflow, {3}, "sparse_fallback_host");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in(data, size);
  const std::uint8_t select = in.byte();
  const path how = static_cast<path>((select >> 2) % 4);
  switch (select % 4) {
    case 0: fuzz_expand(in, how); break;
    case 1: fuzz_prefix(in, how); break;
    case 2: fuzz_sparse(in, how); break;
    default: fuzz_fallback(in); break;
  }
  return 0;
}
