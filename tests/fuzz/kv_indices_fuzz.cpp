// libFuzzer harness: the CSR draft-decode KV indices (docs/csr.md) with arbitrary parameters,
// on every path (eager, deferred, graph replay on the host executor, the *_host entry point).
// Buffers are allocated exactly as the parameters describe, with poisoned canaries around them.
//
// Promises checked:
//   * a rejected call throws invalid_argument naming its field and writes nothing (every output
//     cell, guard word and canary unchanged);
//   * an accepted call leaves its inputs unchanged, writes nothing outside its buffers, and its
//     outputs equal the independent reference of tests/kv_indices_reference.hpp: kv_indptr rows
//     whole, stored indices below each step's capacity, every other cell untouched, each step's
//     guard counting exactly the reference's records and naming the lowest (row, column);
//   * draft_kv_indices_host accepts no input the kernels would refuse as bad input;
//   * with a device step counter (kv_indices_params::device_step), only the step it holds is
//     written, as a launch of that step alone (its reference placed at its offset, its capacity
//     and guard word); a counter outside the launch writes nothing but one bad_input record in
//     guard[0] (row 0, column -1, capacity first_step + step_count, value the counter).
//
// Byte encoding: the select byte (path = select % 4, int64 indices = bit 2, a device step
// counter = bit 3), then the fields in the order read below (tests/fuzz/make_corpus.py writes
// the seeds).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/kv_indices.hpp"
#include "specgraph/limits.hpp"
#include "tests/fuzz/kernels_fuzz.hpp"
#include "tests/kv_indices_reference.hpp"

namespace {

using namespace specgraph;           // NOLINT: a harness
using namespace specgraph::fuzz;     // NOLINT
using namespace specgraph::testing;  // NOLINT
namespace kh = specgraph::fuzz::kernels_harness;

constexpr std::int32_t stale32 = kh::stale;

void run(reader& in) {
  const std::uint8_t select = in.byte();
  const auto how = static_cast<kh::path>(select % 4);
  kv_case c;
  c.int64_indices = (select >> 2) & 1;
  const bool device_counter = ((select >> 3) & 1) != 0;
  c.page_size = in.value32(1, 8, limits::max_page_size);
  const std::uint8_t e_mode = in.byte();
  c.entry_page_size = e_mode < 0x80 ? 1 : e_mode < 0xf0 ? c.page_size : in.value32(1, 4, 1 << 20);
  c.topk = in.value32(1, 4, limits::max_topk);
  c.num_steps = in.value32(1, 4, limits::max_num_steps);
  const std::int32_t batch = in.value32(1, 4, limits::max_batch);
  c.pool_rows = in.value32(1, 4, limits::max_pool_rows);
  c.width = in.value(1, 64, std::int64_t{1} << 31);
  if (in.flag()) {
    c.window = in.value32(0, 8, limits::max_context_len);
    c.sink = in.value32(0, 3, limits::max_context_len);
  }
  c.max_seq_len = in.value32(0, 24, limits::max_context_len);
  // int64: the fuzzed num_steps and first_step may be INT32_MIN or INT32_MAX.
  c.first_step = in.value32(0, std::max<std::int64_t>(std::int64_t{c.num_steps} - 1, 0),
                            limits::max_num_steps);
  c.step_count = in.value32(1, std::max<std::int64_t>(std::int64_t{c.num_steps} - c.first_step, 1),
                            limits::max_num_steps);
  c.capacity = in.value32(0, 64, 0x7fffffff);
  c.capacity_growth = in.value32(0, 16, 0x7fffffff);
  const std::uint8_t stride_mode = in.byte();
  c.indices_stride = stride_mode < 0x80 ? 0 : in.value(0, 160, std::int64_t{1} << 40);
  const std::int64_t rows = kh::cells(batch, c.topk);
  c.indptr_stride = in.byte() < 0xf0 ? rows + 1 : in.value(0, 16, 0x7fffffff);
  if (in.flag()) c.slot_limit = in.value(1, 4096, std::numeric_limits<std::int64_t>::max());
  // The counter: mostly one of the launch's steps, sometimes an edge or anything.
  const std::int32_t counter =
      device_counter
          ? in.value32(c.first_step, static_cast<std::int64_t>(c.first_step) + c.step_count - 1,
                       limits::max_num_steps)
          : 0;

  // Sizes: too large for one input to allocate, or out of range. Such parameters must be
  // refused by validate() (checked on a probe with placeholder pointers), or the input is skipped.
  const std::int64_t n_rtt = kh::cells(c.pool_rows, c.width);
  const std::int64_t span =
      kv_kept_max(std::max(c.max_seq_len, 0), std::max(c.window, 0), std::max(c.sink, 0)) +
      c.num_steps;
  const std::int64_t n_cells = kh::cells(kh::cells(rows, span), std::max(c.step_count, 1));
  const std::int64_t n_indptr = kh::cells(std::max(c.step_count, 1), c.indptr_stride);
  std::int64_t n_indices = 0;
  for (std::int32_t k = 0; k < std::min(c.step_count, 1 << 12); ++k) {
    n_indices +=
        c.indices_stride > 0
            ? std::min<std::int64_t>(c.indices_stride, kh::max_cells * 16)
            : std::max<std::int64_t>(
                  0, std::min<std::int64_t>(c.capacity + std::int64_t{k} * c.capacity_growth,
                                            kh::max_cells * 16));
  }
  const bool sized = batch >= 1 && batch <= kh::max_cells && c.pool_rows >= 1 &&
                     n_rtt <= kh::max_cells && n_cells <= kh::max_cells &&
                     n_indptr <= kh::max_cells && n_indices <= kh::max_cells && c.step_count >= 1 &&
                     c.step_count <= (1 << 12);
  kv_indices_params p = kv_params_of(c, batch);
  if (!sized) {
    static std::int32_t dummy[1];
    static std::int64_t dummy64[1];
    kv_indices_params probe = p;
    probe.req_to_token = probe.kv_indptr = dummy;
    probe.req_pool_index = probe.seq_len = dummy;
    probe.kv_indices_i64 = dummy64;
    probe.guard = reinterpret_cast<guard_word*>(dummy64);
    try {
      validate(probe);
    } catch (const invalid_argument& e) {
      check_invalid_argument(e, "kv_indices probe");
    }
    return;
  }

  // Inputs: requests in range mostly; req_to_token from a generator, a few bad entries at times.
  for (std::int32_t r = 0; r < batch; ++r) {
    c.seq_len.push_back(in.value32(0, std::max(c.max_seq_len, 0), limits::max_context_len));
    c.req_pool_index.push_back(in.value32(0, c.pool_rows - 1, limits::max_pool_rows));
  }
  fill_req_to_token(in, c.req_to_token, static_cast<std::size_t>(n_rtt));

  guarded<std::int32_t> rtt(c.req_to_token.size()), pool(c.req_pool_index.size()),
      seq(c.seq_len.size());
  std::copy(c.req_to_token.begin(), c.req_to_token.end(), rtt.data());
  std::copy(c.req_pool_index.begin(), c.req_pool_index.end(), pool.data());
  std::copy(c.seq_len.begin(), c.seq_len.end(), seq.data());
  guarded<std::int32_t> indptr(static_cast<std::size_t>(n_indptr), stale32);
  guarded<std::int32_t> i32(c.int64_indices ? 1 : static_cast<std::size_t>(n_indices), stale32);
  guarded<std::int64_t> i64(c.int64_indices ? static_cast<std::size_t>(n_indices) : 1, stale32);
  guarded<guard_word> guards(static_cast<std::size_t>(c.step_count), guard_word{});
  guarded<std::int32_t> scratch(static_cast<std::size_t>(kv_indices_scratch_ints(batch)), stale32);
  guarded<std::int32_t> step_word(1, counter);
  if (device_counter) p.device_step = step_word.data();
  p.req_to_token = rtt.data();
  p.req_pool_index = pool.data();
  p.seq_len = seq.data();
  p.kv_indptr = indptr.data();
  if (c.int64_indices) {
    p.kv_indices_i64 = i64.data();
  } else {
    p.kv_indices_i32 = i32.data();
  }
  p.guard = guards.data();
  p.scratch = scratch.data();
  const std::vector<std::int32_t> indptr_before = indptr.copy(), i32_before = i32.copy();
  const std::vector<std::int64_t> i64_before = i64.copy();
  const std::vector<guard_word> guards_before = guards.copy();
  bool accepted = true;
  try {
    kh::run_kernel(how, p, &draft_kv_indices_host, &launch_draft_kv_indices);
  } catch (const invalid_argument& e) {
    check_invalid_argument(e, "kv_indices");
    accepted = false;
  }
  kh::check_unchanged(rtt, c.req_to_token, "kv_indices", "req_to_token");
  kh::check_unchanged(pool, c.req_pool_index, "kv_indices", "req_pool_index");
  kh::check_unchanged(seq, c.seq_len, "kv_indices", "seq_len");
  if (!accepted) {
    kh::check_unchanged(indptr, indptr_before, "refused kv_indices", "kv_indptr");
    kh::check_unchanged(i32, i32_before, "refused kv_indices", "kv_indices (int32)");
    kh::check_unchanged(i64, i64_before, "refused kv_indices", "kv_indices (int64)");
    FUZZ_CHECK(guards.canaries_intact(), "refused kv_indices: guard canaries");
    for (std::size_t k = 0; k < guards_before.size(); ++k) {
      FUZZ_CHECK(guards[k].violations == 0, "refused kv_indices: guard %zu written", k);
    }
    return;
  }
  FUZZ_CHECK(indptr.canaries_intact() && i32.canaries_intact() && i64.canaries_intact() &&
                 guards.canaries_intact(),
             "kv_indices: canaries overwritten");
  kh::check_unchanged(step_word, std::vector<std::int32_t>{counter}, "kv_indices", "device_step");
  // What each launch step holds: every step, or with a counter the one it holds (the reference
  // of that step alone, at its offset) or none.
  const bool spent = device_counter && (counter < c.first_step ||
                                        static_cast<std::int64_t>(counter) >=
                                            static_cast<std::int64_t>(c.first_step) + c.step_count);
  const std::int32_t only = device_counter && !spent ? counter - c.first_step : -1;
  std::vector<bool> written(static_cast<std::size_t>(c.step_count), !device_counter);
  kv_expected want;
  if (!device_counter) {
    want = kv_reference(c);
  } else {
    want.indptr.assign(static_cast<std::size_t>(c.step_count), {});
    want.ids.assign(static_cast<std::size_t>(c.step_count), {});
    want.records.assign(static_cast<std::size_t>(c.step_count), {});
    if (spent) {
      want.records[0].push_back({violation_kind::bad_input, 0, -1, counter});
      const guard_word& g = guards[0];
      FUZZ_CHECK(g.value == counter && g.capacity == c.first_step + c.step_count,
                 "kv_indices spent counter %d: guard value %lld capacity %d", counter,
                 static_cast<long long>(g.value), g.capacity);
    } else {
      kv_case one = c;
      one.first_step = counter;
      one.step_count = 1;
      one.capacity = static_cast<std::int32_t>(c.step_capacity(only));  // accepted: fits
      one.capacity_growth = 0;
      const kv_expected step = kv_reference(one);
      const auto k = static_cast<std::size_t>(only);
      written[k] = true;
      want.indptr[k] = step.indptr[0];
      want.ids[k] = step.ids[0];
      want.records[k] = step.records[0];
    }
  }
  for (std::int32_t k = 0; k < c.step_count; ++k) {
    const bool holds = written[static_cast<std::size_t>(k)];
    for (std::int64_t j = 0; j < c.indptr_stride; ++j) {
      const std::int32_t w =
          holds && j <= rows ? want.indptr[k][static_cast<std::size_t>(j)] : stale32;
      FUZZ_CHECK(indptr[static_cast<std::size_t>(k * c.indptr_stride + j)] == w,
                 "kv_indptr step %d entry %lld", k, static_cast<long long>(j));
    }
    const std::int64_t offset = c.step_offset(k);
    const std::int64_t room = c.indices_stride > 0 ? c.indices_stride : c.step_capacity(k);
    for (std::int64_t f = 0; f < room; ++f) {
      const bool stored =
          holds && f < c.step_capacity(k) && f < static_cast<std::int64_t>(want.ids[k].size());
      const std::int64_t w = stored ? want.ids[k][static_cast<std::size_t>(f)] : stale32;
      const auto cell = static_cast<std::size_t>(offset + f);
      const std::int64_t got = c.int64_indices ? i64[cell] : i32[cell];
      FUZZ_CHECK(got == (c.int64_indices ? w : static_cast<std::int32_t>(w)),
                 "kv_indices step %d cell %lld: %lld", k, static_cast<long long>(f),
                 static_cast<long long>(got));
    }
    const guard_word& g = guards[static_cast<std::size_t>(k)];
    check_guard_word(g, "kv_indices guard");
    const auto& records = want.records[k];
    FUZZ_CHECK(g.violations == static_cast<std::int32_t>(records.size()),
               "kv_indices step %d: %d violations, the reference has %zu", k, g.violations,
               records.size());
    for (const kv_record& r : records) {
      FUZZ_CHECK(g.row < r.row || (g.row == r.row && g.column <= r.column),
                 "kv_indices step %d: guard names (%d, %d), not the lowest (%d, %d)", k, g.row,
                 g.column, r.row, r.column);
      FUZZ_CHECK(how != kh::path::host || r.kind != violation_kind::bad_input || spent,
                 "draft_kv_indices_host accepted an input the kernel refuses (row %d)", r.row);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in(data, size);
  run(in);
  return 0;
}
