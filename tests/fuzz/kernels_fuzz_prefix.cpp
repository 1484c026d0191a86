// kernels_fuzz: the prefix metadata driver (docs/metadata.md section 2), on every path. Pool rows
// of req_to_token come from a small page generator, with a few out-of-range slots in some, so
// most requests are accepted and compared with the reference while bad slots stay reachable.
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
    probe.req_to_token = dummy;
    probe.req_pool_index = probe.seq_len = dummy;
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
    run_kernel(how, p, specgraph::prefix_metadata_host, specgraph::launch_prefix_metadata);
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
      // Written as a padded request (pool row 0, one token).
      FUZZ_CHECK(how != path::host, "%s accepted a bad input for request %zu", what, r);
      expect_violation = true;
      const specgraph::fuzz::prefix_request_result pad =
          specgraph::fuzz::padded_prefix_reference(rtt0.data(), p.page_size, p.slot_limit);
      FUZZ_CHECK(got == specgraph::fuzz::expected_table_row(old, pad.pages, p.capacity) &&
                     last_page_len[r] == pad.last_page_len && prefix_seqlen[r] == pad.prefix_seqlen,
                 "%s: request %zu has a bad input but is not a padded request", what, r);
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

}  // namespace specgraph::fuzz::kernels_harness
