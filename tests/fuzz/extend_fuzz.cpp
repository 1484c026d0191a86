// libFuzzer harness: the draft-extend metadata (docs/extend.md) with arbitrary parameters,
// layouts and contents, bad ones included, on every path (eager, deferred, graph replay on the
// host executor, the extend_metadata_host entry point), optionally with the device real-batch
// word. Buffers are allocated exactly as the parameters describe, with poisoned canaries.
//
// Promises checked:
//   * a rejected call throws invalid_argument naming its field and writes nothing (every output
//     cell, guard word and canary unchanged);
//   * an accepted call leaves its inputs unchanged, writes nothing outside its buffers, and its
//     outputs equal the independent reference of tests/extend_reference.hpp cell by cell (the
//     page table's columns past page_capacity untouched, kv_indices below their capacities),
//     each guard counting exactly the reference's records and naming the lowest (row, column)
//     with its capacity and value;
//   * bad input (pool row, seq_len, row width, accept_len, a slot, the pad slot, the device
//     word) is recorded in guard[0] exactly as the harness's own check of docs/extend.md
//     predicts, and each refused request is written as a padded row;
//   * extend_metadata_host accepts no input the kernels would flag, and refuses none they accept.
//
// Byte encoding: the select byte (path = select % 4, device real-batch word = bit 2, layouts =
// bits 3-6: tokens, fa3, prefix, full), a drop byte (>= 0xf0: field drop % 15 left null), then
// the fields in the order read below (tests/fuzz/make_corpus.py writes the seeds).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/extend_metadata.hpp"
#include "specgraph/limits.hpp"
#include "tests/extend_reference.hpp"
#include "tests/fuzz/kernels_fuzz.hpp"

namespace {

using namespace specgraph;           // NOLINT: a harness
using namespace specgraph::fuzz;     // NOLINT
using namespace specgraph::testing;  // NOLINT
namespace kh = specgraph::fuzz::kernels_harness;

constexpr std::int32_t stale32 = kh::stale;
constexpr std::int64_t int32_max = 0x7fffffff;

void check_cells(const guarded<std::int32_t>& got, const std::vector<std::int64_t>& want,
                 const char* name) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::int32_t w = i < want.size() ? static_cast<std::int32_t>(want[i]) : stale32;
    FUZZ_CHECK(got[i] == w, "extend %s cell %zu: %d, expected %d", name, i, got[i], w);
  }
}

// A capacity around its exact value: mode % 4 = exact, exact - 1, exact + 1, small; a mode byte
// >= 0xf0 reads any value.
std::int64_t capacity_near(reader& in, std::int64_t exact) {
  const std::uint8_t mode = in.byte();
  if (mode >= 0xf0) return in.value(0, 16, int32_max);
  switch (mode % 4) {
    case 0: return exact;
    case 1: return std::max<std::int64_t>(0, exact - 1);
    case 2: return exact + 1;
    default: return in.small(0, 8);
  }
}

struct record {  // one expected bad_input record of guard[0]
  std::int32_t row, column;
  std::int64_t capacity, value;
};

void check_first(const guard_word& g, std::int64_t count, std::int32_t row, std::int32_t column,
                 std::int64_t capacity, std::int64_t value, kernel_id kernel, violation_kind kind,
                 int k) {
  check_guard_word(g, "extend guard");
  FUZZ_CHECK(g.violations == count, "extend guard %d: %d violations, expected %lld", k,
             g.violations, static_cast<long long>(count));
  if (count == 0) return;
  FUZZ_CHECK(
      g.kernel == static_cast<std::int32_t>(kernel) && g.kind == static_cast<std::int32_t>(kind),
      "extend guard %d: kernel %d kind %d, expected %d %d", k, g.kernel, g.kind,
      static_cast<int>(kernel), static_cast<int>(kind));
  FUZZ_CHECK(g.row == row && g.column == column && g.capacity == capacity && g.value == value,
             "extend guard %d: (%d, %d) capacity %d value %lld, expected (%d, %d) %lld %lld", k,
             g.row, g.column, g.capacity, static_cast<long long>(g.value), row, column,
             static_cast<long long>(capacity), static_cast<long long>(value));
}

void run(reader& in) {
  const std::uint8_t select = in.byte();
  const auto how = static_cast<kh::path>(select % 4);
  const bool word_mode = ((select >> 2) & 1) != 0 && how != kh::path::host;
  const int layouts = (select >> 3) & 15;
  const std::uint8_t drop = in.byte();
  extend_case c;
  c.page_size = in.value32(1, 8, limits::max_page_size);
  c.window = in.value32(1, 8, max_extend_tokens);
  c.bucket = in.value32(0, 4, limits::max_batch);
  c.real_batch = in.value32(0, std::max(c.bucket, 0), limits::max_batch);
  c.pool_rows = in.value32(1, 4, limits::max_pool_rows);
  c.width = in.value(1, 64, std::int64_t{1} << 31);
  c.max_seq_len = in.value32(0, 24, limits::max_context_len);
  std::int64_t slot_limit = std::numeric_limits<std::int64_t>::max();
  if (in.flag()) slot_limit = in.value(1, 8192, std::numeric_limits<std::int64_t>::max());
  const std::int64_t B = c.bucket, W = c.window, M = c.max_seq_len, ps = c.page_size;
  const bool shaped = B >= 0 && W >= 1 && M >= 0 && ps >= 1;
  const std::int64_t pages = shaped ? (M + W + ps - 1) / ps : 0;
  const std::int64_t page_capacity = capacity_near(in, pages);
  const std::uint8_t stride_mode = in.byte();
  const std::int64_t page_stride = stride_mode < 0xf0 && page_capacity <= int32_max
                                       ? page_capacity + stride_mode % 3
                                       : in.value(0, 16, std::int64_t{1} << 40);
  c.prefix_capacity = capacity_near(in, shaped ? B * M : 0);
  c.full_capacity = capacity_near(in, shaped ? B * (M + W) : 0);
  c.page_capacity =
      static_cast<std::int32_t>(std::clamp<std::int64_t>(page_capacity, -1, int32_max));

  const std::int64_t n_rtt = kh::cells(c.pool_rows, c.width);
  const bool sized =
      shaped && B <= kh::max_cells && c.pool_rows >= 1 && c.width >= 1 && n_rtt <= kh::max_cells &&
      kh::cells(B, W) <= kh::max_cells && kh::cells(B, M + W) <= kh::max_cells * 4 &&
      page_capacity >= 0 && page_capacity <= kh::max_cells && page_stride >= 0 &&
      kh::cells(B, page_stride) <= kh::max_cells && kh::cells(B, pages) <= kh::max_cells * 4 &&
      c.prefix_capacity >= 0 && c.prefix_capacity <= kh::max_cells && c.full_capacity >= 0 &&
      c.full_capacity <= kh::max_cells;
  extend_params p;
  p.page_stride = page_stride;
  p.page_capacity = c.page_capacity;
  p.prefix_kv_capacity = c.prefix_capacity;
  p.full_kv_capacity = c.full_capacity;
  p.req_to_token_stride = c.width;
  p.pool_rows = c.pool_rows;
  p.batch = c.bucket;
  p.real_batch = c.real_batch;
  p.extend_tokens = c.window;
  p.page_size = c.page_size;
  p.max_seq_len = c.max_seq_len;
  p.slot_limit = slot_limit;
  auto set_layouts = [&](std::int32_t* const* buffers) {
    for (int i = 0; i < extend_field_count; ++i) {
      const int layout = i < 3 ? 0 : (i < 8 ? 1 : (i < 11 ? 2 : 3));
      const bool keep = ((layouts >> layout) & 1) != 0 && !(drop >= 0xf0 && drop % 15 == i);
      set_extend_field(p, i, keep ? buffers[i] : nullptr);
    }
  };
  if (!sized) {
    static std::int32_t dummy[1];
    static guard_word dummy_guard[extend_guard_count];
    std::int32_t* dummies[extend_field_count];
    std::int32_t* const cell = dummy;
    std::fill(dummies, dummies + extend_field_count, cell);
    set_layouts(dummies);
    p.req_to_token = p.req_pool_index = p.seq_len = p.accept_len = dummy;
    p.guard = dummy_guard;
    try {
      validate(p);
    } catch (const invalid_argument& e) {
      check_invalid_argument(e, "extend probe");
    }
    return;
  }

  for (std::int64_t r = 0; r < B; ++r) {
    c.seq_len.push_back(in.value32(0, M, limits::max_context_len));
    c.accept_len.push_back(in.value32(1, W, max_extend_tokens));
    c.req_pool_index.push_back(in.value32(0, c.pool_rows - 1, limits::max_pool_rows));
  }
  fill_req_to_token(in, c.req_to_token, static_cast<std::size_t>(n_rtt));
  const std::int32_t word = word_mode ? in.value32(0, c.bucket, limits::max_batch) : 0;

  const auto b = static_cast<std::size_t>(B), rows = b * static_cast<std::size_t>(W);
  guarded<std::int32_t> rtt(c.req_to_token.size()), pool(b), seq(b), accept(b), word_at(1);
  std::copy(c.req_to_token.begin(), c.req_to_token.end(), rtt.data());
  std::copy(c.req_pool_index.begin(), c.req_pool_index.end(), pool.data());
  std::copy(c.seq_len.begin(), c.seq_len.end(), seq.data());
  std::copy(c.accept_len.begin(), c.accept_len.end(), accept.data());
  word_at[0] = word;
  const std::size_t sizes[extend_field_count] = {rows,
                                                 rows,
                                                 b,
                                                 b * static_cast<std::size_t>(page_stride),
                                                 b,
                                                 b + 1,
                                                 b + 1,
                                                 1,
                                                 b + 1,
                                                 b + 1,
                                                 static_cast<std::size_t>(c.prefix_capacity),
                                                 b + 1,
                                                 b + 1,
                                                 static_cast<std::size_t>(c.full_capacity),
                                                 b};
  std::vector<std::unique_ptr<guarded<std::int32_t>>> out;
  std::int32_t* buffers[extend_field_count];
  for (int i = 0; i < extend_field_count; ++i) {
    out.push_back(std::make_unique<guarded<std::int32_t>>(sizes[i], stale32));
    buffers[i] = out.back()->data();
  }
  set_layouts(buffers);
  guarded<guard_word> guards(extend_guard_count, guard_word{});
  guarded<std::int64_t> scratch(static_cast<std::size_t>(extend_scratch_words(c.bucket)), -1);
  p.req_to_token = rtt.data();
  p.req_pool_index = pool.data();
  p.seq_len = seq.data();
  p.accept_len = accept.data();
  if (word_mode) {
    p.real_batch = c.bucket;
    p.real_batch_at = word_at.data();
  }
  p.guard = guards.data();
  p.scratch = scratch.data();
  bool accepted = true;
  try {
    kh::run_kernel(how, p, &extend_metadata_host, &launch_extend_metadata);
  } catch (const invalid_argument& e) {
    check_invalid_argument(e, "extend");
    accepted = false;
  }
  kh::check_unchanged(rtt, c.req_to_token, "extend", "req_to_token");
  kh::check_unchanged(pool, c.req_pool_index, "extend", "req_pool_index");
  kh::check_unchanged(seq, c.seq_len, "extend", "seq_len");
  kh::check_unchanged(accept, c.accept_len, "extend", "accept_len");
  kh::check_unchanged(word_at, std::vector<std::int32_t>{word}, "extend", "real_batch_at");

  // The harness's own check of the inputs (docs/extend.md): the real batch, each real request's
  // scalars then its slots, the pad slot. Its records, in guard[0]'s (row, column) order.
  std::int32_t real = c.real_batch;
  std::vector<record> bad;
  if (word_mode) {
    real = std::clamp(word, 0, c.bucket);
    if (real != word) bad.push_back({-1, -2, B, word});
  }
  c.refused.assign(b, 0);
  auto slot_bad = [&](std::int64_t s) { return s < 0 || s >= slot_limit; };
  // Bounded by the bucket: a real_batch outside [0, batch] is refused by validate() anyway.
  for (std::int32_t r = 0; r < std::clamp(real, 0, c.bucket); ++r) {
    const std::int32_t row = c.req_pool_index[r], s = c.seq_len[r], a = c.accept_len[r];
    const std::size_t before = bad.size();
    if (row < 0 || row >= c.pool_rows) {
      bad.push_back({r, -1, c.pool_rows, row});
    } else if (s < 0 || s > M) {
      bad.push_back({r, -1, M, s});
    } else if (s + W > c.width) {
      bad.push_back({r, -1, std::min(c.width, int32_max), s});
    } else if (a < 0 || a > W) {
      bad.push_back({r, -3, W, a});
    } else {
      for (std::int64_t q = 0; q < s + W; ++q) {
        const std::int32_t v = c.req_to_token[static_cast<std::size_t>(row * c.width + q)];
        if (slot_bad(v)) bad.push_back({r, static_cast<std::int32_t>(q), -1, v});
      }
    }
    c.refused[static_cast<std::size_t>(r)] = bad.size() > before ? 1 : 0;
  }
  const std::int32_t pad = c.req_to_token[0];
  if (B > real && slot_bad(pad)) bad.push_back({-1, 0, -1, pad});
  bool valid_scalars = true;
  try {
    validate(p);
  } catch (const invalid_argument&) {
    valid_scalars = false;
  }

  if (!accepted) {
    FUZZ_CHECK(how == kh::path::host || !valid_scalars,
               "extend launcher refused parameters validate() accepts");
    FUZZ_CHECK(how != kh::path::host || !valid_scalars || !bad.empty(),
               "extend_metadata_host refused an input the kernels accept");
    for (int i = 0; i < extend_field_count; ++i) {
      kh::check_unchanged(*out[static_cast<std::size_t>(i)],
                          std::vector<std::int32_t>(sizes[i], stale32), "refused extend",
                          extend_field_names[i]);
    }
    for (int k = 0; k < extend_guard_count; ++k) {
      FUZZ_CHECK(guards[k].violations == 0, "refused extend: guard %d written", k);
    }
    return;
  }
  FUZZ_CHECK(valid_scalars, "extend accepted parameters validate() refuses");
  FUZZ_CHECK(how != kh::path::host || bad.empty(),
             "extend_metadata_host accepted an input the kernels flag (%zu records)", bad.size());
  FUZZ_CHECK(guards.canaries_intact() && scratch.canaries_intact(),
             "extend: canaries around the guards or the scratch overwritten");
  for (const auto& g : out) FUZZ_CHECK(g->canaries_intact(), "extend: output canaries overwritten");

  c.real_batch = real;
  if (slot_bad(pad)) c.req_to_token[0] = 0;  // what a padded row reads then (extend_pad_slot)
  const extend_expect e = extend_reference(c);
  const extend_layouts set = extend_layouts_of(p);
  const std::vector<std::int64_t> none;
  auto want = [&](bool on, const std::vector<std::int64_t>& v) -> const std::vector<std::int64_t>& {
    return on ? v : none;
  };
  std::vector<std::int64_t> table, ones(b, 1), max_k{e.max_k};
  for (const auto& row : set.fa3 ? e.page_rows : std::vector<std::vector<std::int64_t>>{}) {
    table.insert(table.end(), row.begin(), row.end());
    table.insert(table.end(), static_cast<std::size_t>(page_stride - c.page_capacity), stale32);
  }
  const std::vector<std::int64_t>* expected[extend_field_count] = {
      &e.position,       &e.out_cache_loc, &e.select_index, &table,          &e.cache_seqlen,
      &e.cu_q,           &e.cu_k,          &max_k,          &e.cu_q,         &e.prefix_indptr,
      &e.prefix_indices, &e.cu_q,          &e.full_indptr,  &e.full_indices, &ones};
  const bool on[4] = {set.tokens, set.fa3, set.prefix, set.full};
  for (int i = 0; i < extend_field_count; ++i) {
    const int layout = i < 3 ? 0 : (i < 8 ? 1 : (i < 11 ? 2 : 3));
    check_cells(*out[static_cast<std::size_t>(i)], want(on[layout], *expected[i]),
                extend_field_names[i]);
  }

  const auto lowest =
      std::min_element(bad.begin(), bad.end(), [](const record& x, const record& y) {
        return x.row < y.row || (x.row == y.row && x.column < y.column);
      });
  const record first = bad.empty() ? record{0, 0, 0, 0} : *lowest;
  check_first(guards[0], static_cast<std::int64_t>(bad.size()), first.row, first.column,
              first.capacity, first.value, kernel_id::extend_metadata, violation_kind::bad_input,
              0);
  const extend_first empty;
  const extend_first* f[4] = {set.fa3 ? &e.page : &empty, set.prefix ? &e.prefix : &empty,
                              set.full ? &e.full : &empty, set.tokens ? &e.accept : &empty};
  const std::int64_t caps[4] = {c.page_capacity, c.prefix_capacity, c.full_capacity, W};
  const kernel_id ids[4] = {kernel_id::extend_page_table, kernel_id::extend_triton_kv_indices,
                            kernel_id::extend_flashinfer_kv_indices,
                            kernel_id::extend_select_index};
  for (int k = 0; k < 4; ++k) {
    check_first(guards[k + 1], f[k]->count, f[k]->row, f[k]->column, caps[k], f[k]->value, ids[k],
                k == 3 ? violation_kind::accept_len : violation_kind::capacity, k + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in(data, size);
  run(in);
  return 0;
}
