// runtime_fuzz: the checks a world makes after an operation ran and at the end: guard words
// (never a capacity violation), a round staged by stage() against the independent references of
// docs/metadata.md sections 2-4, and nothing written outside the arena or into the inputs.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "specgraph/guard.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/runtime.hpp"
#include "tests/fuzz/runtime_fuzz.hpp"

namespace specgraph::fuzz::runtime_harness {

void world::finish() {
  op_read_guards();
  rt_.reset();
  ex_->synchronize();
  FUZZ_CHECK(arena_->canaries_intact(), "a write outside the arena (its margins changed)");
  FUZZ_CHECK(probe_->canaries_intact(), "a write outside the probe's output");
  FUZZ_CHECK(rtt_->canaries_intact() && rtt_->same(rtt0_), "req_to_token was written");
  for (const auto& d : inputs_) {
    FUZZ_CHECK(!d->pool32 || (d->pool32->canaries_intact() && d->pool32->same(d->pool32_0)),
               "device req_pool_index (int32) was written");
    FUZZ_CHECK(!d->seq32 || (d->seq32->canaries_intact() && d->seq32->same(d->seq32_0)),
               "device seq_len (int32) was written");
    FUZZ_CHECK(!d->pool64 || (d->pool64->canaries_intact() && d->pool64->same(d->pool64_0)),
               "device req_pool_index (int64) was written");
    FUZZ_CHECK(!d->seq64 || (d->seq64->canaries_intact() && d->seq64->same(d->seq64_0)),
               "device seq_len (int64) was written");
    FUZZ_CHECK(!d->slots || (d->slots->canaries_intact() && d->slots->same(d->slots_0)),
               "device out_cache_loc was written");
  }
}

void world::check_guards_now() {
  if (!snapshot_) return;  // reading back would synchronise a deferred executor
  const std::vector<specgraph::guard_word> g = rt_->read_guards();
  for (std::size_t i = 0; i < g.size(); ++i) {
    specgraph::fuzz::check_guard_word(g[i], "runtime guard word");
    const bool sparse = static_cast<std::int32_t>(i) >= 2 + cfg_.num_steps;
    FUZZ_CHECK(
        sparse || g[i].kind != static_cast<std::int32_t>(specgraph::violation_kind::capacity),
        "capacity violation in guard word %zu: %s", i, specgraph::describe(g[i]).c_str());
  }
}

void world::check_round(std::int32_t first, std::int32_t last) {
  check_guards_now();
  if (!staged_.valid || !snapshot_) return;
  const specgraph::plan& p = rt_->plan();
  const specgraph::plan_layout& l = p.layout;
  const std::vector<unsigned char> a = arena_bytes();
  const std::int32_t bucket = staged_.bucket, topk = cfg_.topk, steps = cfg_.num_steps;
  FUZZ_CHECK(*at<std::int32_t>(a, l.real_batch) == staged_.batch, "input.real_batch");
  for (std::int32_t r = 0; r < bucket; ++r) {
    const auto ru = static_cast<std::size_t>(r);
    FUZZ_CHECK(at<std::int32_t>(a, l.req_pool_index)[r] == staged_.pool[ru] &&
                   at<std::int32_t>(a, l.seq_len)[r] == staged_.seq[ru],
               "staged inputs of request %d", r);
  }
  const std::size_t n_slots = static_cast<std::size_t>(bucket) * static_cast<std::size_t>(topk) *
                              static_cast<std::size_t>(steps);
  FUZZ_CHECK(std::equal(staged_.slots.begin(), staged_.slots.end(),
                        at<std::int64_t>(a, l.out_cache_loc)) &&
                 staged_.slots.size() == n_slots,
             "staged out_cache_loc (padded to bucket %d)", bucket);
  // Prefix (section 2).
  const std::int32_t cap = l.prefix_capacity;
  std::vector<bool> refused(static_cast<std::size_t>(bucket), false);
  for (std::int32_t r = 0; r < bucket; ++r) {
    const auto ru = static_cast<std::size_t>(r);
    specgraph::fuzz::prefix_request_result want = specgraph::fuzz::prefix_reference(
        rtt0_.data(), cfg_.max_context_len, cfg_.pool_rows, staged_.pool[ru], staged_.seq[ru],
        cfg_.page_size, cfg_.kv_slots);
    if (want.bad) {  // refused: written as a padded request
      want = specgraph::fuzz::padded_prefix_reference(rtt0_.data(), cfg_.page_size, cfg_.kv_slots);
      refused[ru] = true;
    }
    FUZZ_CHECK(at<std::int32_t>(a, l.last_page_len)[r] == want.last_page_len &&
                   at<std::int32_t>(a, l.prefix_seqlen)[r] == want.prefix_seqlen,
               "prefix scalars of request %d", r);
    const std::int32_t* row =
        at<std::int32_t>(a, l.prefix_page_table) + ru * static_cast<std::size_t>(cap);
    const std::vector<std::int32_t> expected = specgraph::fuzz::expected_table_row(
        std::vector<std::int32_t>(static_cast<std::size_t>(cap), 0), want.pages, cap);
    FUZZ_CHECK(std::equal(expected.begin(), expected.end(), row),
               "prefix.page_table row %d differs from the reference", r);
  }
  for (std::int32_t i = 0; i <= bucket; ++i) {
    FUZZ_CHECK(at<std::int32_t>(a, l.cu_seqlens_q)[i] == i * topk, "cu_seqlens_q[%d]", i);
  }
  // Expand, each step that ran (section 3), from the arena's own last_page_len. With a device
  // step counter every step shares one table: only the last step's contents remain.
  if (cfg_.device_steps) first = last;
  for (std::int32_t s = first; s <= last; ++s) {
    const auto su = static_cast<std::size_t>(s);
    const std::int32_t* table = at<std::int32_t>(a, l.expand_page_table[su]);
    const std::int32_t* seqlen = at<std::int32_t>(a, l.expand_cache_seqlen[su]);
    const auto width = static_cast<std::size_t>(s + 2);
    const auto stride = static_cast<std::size_t>(l.expand_stride[su]);
    for (std::int32_t row = 0; row < bucket * topk; ++row) {
      const std::int32_t r = row / topk;
      const std::int32_t lpl = at<std::int32_t>(a, l.last_page_len)[r];
      if (refused[static_cast<std::size_t>(r)]) {
        // Refused at the prefix: padding in every table of the round (section 4), every cell
        // the dummy page, 1 % ps + d tokens; its slots are not read.
        const std::int32_t* cells = table + static_cast<std::size_t>(row) * stride;
        FUZZ_CHECK(std::all_of(cells, cells + width, [](std::int32_t c) { return c == 0; }),
                   "expand.page_table step %d row %d of a refused request is not padding", s, row);
        FUZZ_CHECK(seqlen[row] == 1 % cfg_.page_size + s + 1,
                   "expand.cache_seqlen step %d row %d of a refused request = %d", s, row,
                   seqlen[row]);
        continue;
      }
      const specgraph::fuzz::expand_row_result want = specgraph::fuzz::expand_reference(
          staged_.slots.data() + static_cast<std::size_t>(row) * static_cast<std::size_t>(steps),
          s + 1, lpl, cfg_.page_size, s + 1, cfg_.kv_slots, cfg_.checked && r < staged_.batch);
      FUZZ_CHECK(!want.bad, "expand step %d row %d: host-validated inputs are out of range", s,
                 row);
      FUZZ_CHECK(want.pages.size() < width, "step %d row %d: %zu pages in a %zu-wide table", s, row,
                 want.pages.size(), width);
      const std::vector<std::int32_t> expected = specgraph::fuzz::expected_table_row(
          std::vector<std::int32_t>(width, 0), want.pages, s + 2);
      FUZZ_CHECK(std::equal(expected.begin(), expected.end(),
                            table + static_cast<std::size_t>(row) * stride),
                 "expand.page_table step %d row %d differs from the reference", s, row);
      FUZZ_CHECK(seqlen[row] == want.cache_seqlen, "expand.cache_seqlen step %d row %d = %d, %d", s,
                 row, seqlen[row], want.cache_seqlen);
    }
  }
}

}  // namespace specgraph::fuzz::runtime_harness
