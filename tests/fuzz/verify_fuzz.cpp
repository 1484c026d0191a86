// libFuzzer harness: the target-verify metadata (docs/verify.md) with arbitrary parameters and
// contents, on every path (eager, deferred, graph replay on the host executor, the *_host entry
// point). Buffers are allocated exactly as the parameters describe, with poisoned canaries.
//
// Promises checked:
//   * a rejected call throws invalid_argument naming its field and writes nothing (every output
//     cell, guard word and canary unchanged);
//   * an accepted call leaves its inputs unchanged, writes nothing outside its buffers, and its
//     outputs equal the independent reference of tests/verify_reference.hpp: every table row and
//     indptr, the stored kv_indices and packed bytes below their capacities, every other cell
//     untouched, each guard counting exactly the reference's records and naming the lowest
//     (row, column);
//   * verify_metadata_host accepts no input the kernels would refuse as bad input.
//
// Byte encoding: the select byte (path = select % 4, bound-only mask = bit 2), then the fields in
// the order read below (tests/fuzz/make_corpus.py writes the seeds).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/verify_metadata.hpp"
#include "tests/fuzz/kernels_fuzz.hpp"
#include "tests/verify_reference.hpp"

namespace {

using namespace specgraph;           // NOLINT: a harness
using namespace specgraph::fuzz;     // NOLINT
using namespace specgraph::testing;  // NOLINT
namespace kh = specgraph::fuzz::kernels_harness;

constexpr std::int32_t stale32 = kh::stale;
constexpr std::uint8_t stale8 = 0x3c;

template <class T>
void check_cells(const guarded<T>& got, const std::vector<std::int64_t>& want, T stale,
                 const char* name) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const T w = i < want.size() ? static_cast<T>(want[i]) : stale;
    FUZZ_CHECK(got[i] == w, "verify %s cell %zu: %lld, expected %lld", name, i,
               static_cast<long long>(got[i]), static_cast<long long>(w));
  }
}
template <class T>
std::vector<std::int64_t> wide(const std::vector<T>& v) {
  return std::vector<std::int64_t>(v.begin(), v.end());
}

void run(reader& in) {
  const std::uint8_t select = in.byte();
  const auto how = static_cast<kh::path>(select % 4);
  verify_case c;
  c.mask_exact = ((select >> 2) & 1) == 0;
  c.page_size = in.value32(1, 8, limits::max_page_size);
  c.draft_tokens = in.value32(1, 8, max_draft_tokens);
  const std::int32_t batch = in.value32(1, 4, limits::max_batch);
  c.real_batch = in.value32(1, std::max(batch, 1), limits::max_batch);
  c.pool_rows = in.value32(1, 4, limits::max_pool_rows);
  c.width = in.value(1, 64, std::int64_t{1} << 31);
  c.max_seq_len = in.value32(1, 24, limits::max_context_len);
  c.prefix_capacity = in.value32(0, 8, 0x7fffffff);
  const std::uint8_t stride_mode = in.byte();
  c.prefix_stride = stride_mode < 0xf0 ? std::int64_t{c.prefix_capacity} + stride_mode % 3
                                       : in.value(0, 16, std::int64_t{1} << 40);
  const std::uint8_t expand_mode = in.byte();
  c.expand_stride = expand_mode < 0xf0 ? std::int64_t{c.draft_tokens} + expand_mode % 2
                                       : in.value(0, 16, 0x7fffffff);
  c.kv_capacity = in.value32(0, 64, 0x7fffffff);
  c.packed_capacity = in.value32(0, 32, 0x7fffffff);
  if (in.flag()) c.slot_limit = in.value(1, 4096, std::numeric_limits<std::int64_t>::max());

  const std::int64_t span = std::int64_t{std::max(c.max_seq_len, 0)} + c.draft_tokens;
  const std::int64_t d = std::max(c.draft_tokens, 0);
  const std::int64_t pages =
      c.page_size >= 1 ? (std::int64_t{std::max(c.max_seq_len, 0)} + c.page_size - 1) / c.page_size
                       : 0;
  const std::int64_t n_rtt = kh::cells(c.pool_rows, c.width);
  const std::int64_t n_mask = kh::cells(kh::cells(batch, d), span);
  const std::int64_t n_prefix =
      kh::cells(batch, std::max({c.prefix_stride, std::int64_t{c.prefix_capacity}, pages}));
  const std::int64_t n_expand = kh::cells(kh::cells(batch, d), c.expand_stride);
  const bool sized = batch >= 1 && batch <= kh::max_cells && c.pool_rows >= 1 && d >= 1 &&
                     n_rtt <= kh::max_cells && n_mask <= kh::max_cells &&
                     n_prefix <= kh::max_cells && n_expand <= kh::max_cells &&
                     kh::cells(batch, d) <= kh::max_cells && c.kv_capacity <= kh::max_cells &&
                     c.packed_capacity <= kh::max_cells && c.prefix_stride >= 0 &&
                     c.expand_stride >= 0 && c.prefix_capacity >= 0 && c.kv_capacity >= 0 &&
                     c.packed_capacity >= 0;
  verify_params p = verify_params_of(c);
  p.batch = batch;
  if (!sized) {
    static std::int32_t dummy[1];
    static std::uint8_t dummy8[1];
    static guard_word dummy_guard[verify_guard_count];
    verify_params probe = p;
    probe.req_to_token = probe.req_pool_index = probe.seq_len = dummy;
    probe.custom_mask = dummy8;
    probe.qo_indptr = probe.kv_indptr = probe.kv_indices = probe.kv_last_page_len =
        probe.mask_indptr = probe.packed_mask_indptr = dummy;
    probe.packed_mask = dummy8;
    probe.guard = dummy_guard;
    try {
      validate(probe);
    } catch (const invalid_argument& e) {
      check_invalid_argument(e, "verify probe");
    }
    return;
  }

  for (std::int32_t r = 0; r < batch; ++r) {
    c.seq_len.push_back(in.value32(1, std::max(c.max_seq_len, 1), limits::max_context_len));
    c.req_pool_index.push_back(in.value32(0, c.pool_rows - 1, limits::max_pool_rows));
  }
  fill_req_to_token(in, c.req_to_token, static_cast<std::size_t>(n_rtt));
  // The mask: the formula's length over the in-range real requests, then a length mode byte:
  // < 0xe0 exact, < 0xf0 the double-counted D (shorter by D * D per real request), else + 1. A
  // bound-only mask gets extra cells instead.
  std::int64_t needed = 0;
  for (std::int32_t r = 0; r < std::min(c.real_batch, batch); ++r) {
    if (c.seq_len[r] >= 1 && c.seq_len[r] <= c.max_seq_len) needed += d * (c.seq_len[r] + d);
  }
  const std::uint8_t length_mode = in.byte();
  std::int64_t length = needed;
  if (!c.mask_exact) {
    length += length_mode % 32;
  } else if (length_mode >= 0xf0) {
    length += 1;
  } else if (length_mode >= 0xe0) {
    length = std::max<std::int64_t>(0, needed - d * d * std::max(c.real_batch, 0));
  }
  if (length > kh::max_cells * 4) return;
  const std::uint16_t density = in.u16();
  std::uint32_t m = in.u16() * 2246822519u;
  c.mask.resize(static_cast<std::size_t>(length));
  for (auto& cell : c.mask) {
    m = m * 1664525u + 1013904223u;
    cell = ((m >> 16) & 0xffff) < density ? 1 : 0;
  }

  const auto b = static_cast<std::size_t>(batch), rows = b * static_cast<std::size_t>(d);
  guarded<std::int32_t> rtt(c.req_to_token.size()), pool(b), seq(b);
  guarded<std::uint8_t> mask(c.mask.size());
  std::copy(c.req_to_token.begin(), c.req_to_token.end(), rtt.data());
  std::copy(c.req_pool_index.begin(), c.req_pool_index.end(), pool.data());
  std::copy(c.seq_len.begin(), c.seq_len.end(), seq.data());
  std::copy(c.mask.begin(), c.mask.end(), mask.data());
  auto i32 = [](std::size_t n) { return guarded<std::int32_t>(n, stale32); };
  guarded<std::int32_t> prefix_table = i32(b * static_cast<std::size_t>(c.prefix_stride)),
                        prefix_cache = i32(b), prefix_q = i32(b + 1), prefix_k = i32(b + 1),
                        expand_table = i32(rows * static_cast<std::size_t>(c.expand_stride)),
                        expand_cache = i32(rows), expand_q = i32(rows + 1),
                        expand_k = i32(rows + 1), qo = i32(b + 1), kv_indptr = i32(b + 1),
                        kv_indices = i32(static_cast<std::size_t>(c.kv_capacity)), last = i32(b),
                        mask_indptr = i32(b + 1), packed_indptr = i32(b + 1);
  guarded<std::uint8_t> packed(static_cast<std::size_t>(c.packed_capacity), stale8);
  guarded<guard_word> guards(verify_guard_count, guard_word{});
  guarded<std::int64_t> scratch(
      static_cast<std::size_t>(verify_scratch_words(batch, c.draft_tokens)), stale32);
  p.req_to_token = rtt.data();
  p.req_pool_index = pool.data();
  p.seq_len = seq.data();
  p.custom_mask = mask.data();
  p.mask_cells = length;
  p.prefix_page_table = prefix_table.data();
  p.prefix_cache_seqlen = prefix_cache.data();
  p.prefix_cu_seqlens_q = prefix_q.data();
  p.prefix_cu_seqlens_k = prefix_k.data();
  p.expand_page_table = expand_table.data();
  p.expand_cache_seqlen = expand_cache.data();
  p.expand_cu_seqlens_q = expand_q.data();
  p.expand_cu_seqlens_k = expand_k.data();
  p.qo_indptr = qo.data();
  p.kv_indptr = kv_indptr.data();
  p.kv_indices = kv_indices.data();
  p.kv_last_page_len = last.data();
  p.mask_indptr = mask_indptr.data();
  p.packed_mask = packed.data();
  p.packed_mask_indptr = packed_indptr.data();
  p.guard = guards.data();
  p.scratch = scratch.data();
  const std::vector<std::int32_t> table_before = prefix_table.copy(), kv_before = kv_indices.copy();
  const std::vector<std::uint8_t> packed_before = packed.copy();
  bool accepted = true;
  try {
    kh::run_kernel(how, p, &verify_metadata_host, &launch_verify_metadata);
  } catch (const invalid_argument& e) {
    check_invalid_argument(e, "verify");
    accepted = false;
  }
  kh::check_unchanged(rtt, c.req_to_token, "verify", "req_to_token");
  kh::check_unchanged(pool, c.req_pool_index, "verify", "req_pool_index");
  kh::check_unchanged(seq, c.seq_len, "verify", "seq_len");
  kh::check_unchanged(mask, c.mask, "verify", "custom_mask");
  if (!accepted) {
    kh::check_unchanged(prefix_table, table_before, "refused verify", "prefix page_table");
    kh::check_unchanged(kv_indices, kv_before, "refused verify", "kv_indices");
    kh::check_unchanged(packed, packed_before, "refused verify", "packed_mask");
    for (const auto* g : {&prefix_cache, &prefix_q, &expand_cache, &expand_k, &qo, &kv_indptr,
                          &last, &mask_indptr, &packed_indptr}) {
      FUZZ_CHECK(g->same(std::vector<std::int32_t>(g->size(), stale32)),
                 "refused verify: an indptr or vector written");
    }
    for (std::size_t k = 0; k < verify_guard_count; ++k) {
      FUZZ_CHECK(guards[k].violations == 0, "refused verify: guard %zu written", k);
    }
    return;
  }
  for (const auto* g :
       {&prefix_table, &prefix_cache, &prefix_q, &prefix_k, &expand_table, &expand_cache, &expand_q,
        &expand_k, &qo, &kv_indptr, &kv_indices, &last, &mask_indptr, &packed_indptr}) {
    FUZZ_CHECK(g->canaries_intact(), "verify: canaries around an output overwritten");
  }
  FUZZ_CHECK(packed.canaries_intact() && guards.canaries_intact() && scratch.canaries_intact(),
             "verify: canaries around the packed mask, the guards or the scratch overwritten");
  c.mask_cells_declared = length;
  const verify_expected w = verify_reference(c);
  std::vector<std::int64_t> table;
  for (std::size_t r = 0; r < b; ++r) {
    for (std::int64_t j = 0; j < c.prefix_stride; ++j) {
      table.push_back(j < c.prefix_capacity ? w.prefix_table[r * c.prefix_capacity + j] : stale32);
    }
  }
  check_cells(prefix_table, table, stale32, "prefix page_table");
  table.clear();
  for (std::size_t e = 0; e < rows; ++e) {
    for (std::int64_t j = 0; j < c.expand_stride; ++j) {
      table.push_back(j < d ? w.expand_table[e * d + j] : stale32);
    }
  }
  check_cells(expand_table, table, stale32, "expand page_table");
  check_cells(prefix_cache, wide(w.prefix_cache_seqlen), stale32, "prefix cache_seqlen");
  check_cells(prefix_q, wide(w.prefix_cu_q), stale32, "prefix cu_seqlens_q");
  check_cells(prefix_k, wide(w.prefix_cu_k), stale32, "prefix cu_seqlens_k");
  check_cells(expand_cache, wide(w.expand_cache_seqlen), stale32, "expand cache_seqlen");
  check_cells(expand_q, wide(w.expand_cu_q), stale32, "expand cu_seqlens_q");
  check_cells(expand_k, wide(w.expand_cu_k), stale32, "expand cu_seqlens_k");
  check_cells(qo, wide(w.qo_indptr), stale32, "qo_indptr");
  check_cells(kv_indptr, wide(w.kv_indptr), stale32, "kv_indptr");
  check_cells(last, wide(w.kv_last_page_len), stale32, "kv_last_page_len");
  check_cells(mask_indptr, wide(w.mask_indptr), stale32, "mask_indptr");
  check_cells(packed_indptr, wide(w.packed_indptr), stale32, "packed_mask_indptr");
  check_cells(kv_indices, w.kv_ids, stale32, "kv_indices");
  check_cells(packed, w.packed, stale8, "packed_mask");
  for (std::size_t k = 0; k < verify_guard_count; ++k) {
    const guard_word& g = guards[k];
    check_guard_word(g, "verify guard");
    const auto& records = w.records[k];
    FUZZ_CHECK(g.violations == static_cast<std::int32_t>(records.size()),
               "verify guard %zu: %d violations, the reference has %zu", k, g.violations,
               records.size());
    for (const verify_record& r : records) {
      FUZZ_CHECK(g.row < r.row || (g.row == r.row && g.column <= r.column),
                 "verify guard %zu: names (%d, %d), not the lowest (%d, %d)", k, g.row, g.column,
                 r.row, r.column);
      FUZZ_CHECK(how != kh::path::host || r.kind != violation_kind::bad_input,
                 "verify_metadata_host accepted an input the kernel refuses (row %d)", r.row);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in(data, size);
  run(in);
  return 0;
}
