// kernels_fuzz: the sparse drivers (docs/metadata.md section 6): a sparse stage on every path,
// checked against its own reference model below (index mapping per stage kind, then the
// fallback when a head selects nothing), and sparse_fallback_host, which has no executor path.
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

// ---- sparse stage ----------------------------------------------------------------------------

namespace {  // the stage reference: fuzz_sparse's alone

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

}  // namespace

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
    run_kernel(how, p, specgraph::sparse_stage_host, specgraph::launch_sparse_stage);
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
      // Written empty: counts 0, every entry the sentinel.
      FUZZ_CHECK(std::all_of(out_v.data() + h * vcap, out_v.data() + (h + 1) * vcap,
                             [](std::int32_t x) { return x == 0x7fffffff; }) &&
                     std::all_of(out_s.data() + h * scap, out_s.data() + (h + 1) * scap,
                                 [](std::int32_t x) { return x == -0x7fffffff - 1; }) &&
                     out_vc[h] == 0 && out_sc[h] == 0,
                 "%s: head %zu has a bad input but is not written empty", what, h);
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

// ---- sparse fallback (host only) -------------------------------------------------------------

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

}  // namespace specgraph::fuzz::kernels_harness
