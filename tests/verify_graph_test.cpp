// Target-verify metadata under graph replay: one capture of launch_verify_metadata over a bucket's
// static buffers (exact capacities, a mask buffer of B * D * (M + D) cells used as a bound),
// replayed for fresh random batches staged into the same buffers; every replay equals the
// independent reference of verify_reference.hpp, padded requests and the whole-buffer poison
// included (the outputs are re-poisoned before each replay).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "specgraph/executor.hpp"
#include "specgraph/verify_metadata.hpp"
#include "tests/test_support.hpp"
#include "tests/verify_reference.hpp"
#include "tests/verify_run.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t B = 3, D = 5, M = 20, ps = 4, pool_rows = 4;

// A batch for the bucket: real_batch real requests with trees, the rest padding.
verify_case bucket_case(std::mt19937_64& rng) {
  verify_case c;
  c.page_size = ps;
  c.draft_tokens = D;
  c.max_seq_len = M;
  c.pool_rows = pool_rows;
  c.width = M + D;
  c.real_batch = 1 + static_cast<std::int32_t>(rng() % B);
  for (std::int32_t r = 0; r < B; ++r) {
    const bool padded = r >= c.real_batch;
    c.seq_len.push_back(padded ? 1 : 1 + static_cast<std::int32_t>(rng() % M));
    c.req_pool_index.push_back(padded ? 0 : 1 + static_cast<std::int32_t>(rng() % (pool_rows - 1)));
  }
  for (std::int64_t i = 0; i < pool_rows * c.width; ++i) {
    c.req_to_token.push_back(static_cast<std::int32_t>(rng() % 100000));
  }
  for (std::int32_t r = 0; r < c.real_batch; ++r) {
    std::vector<std::int32_t> parent(D, -1);
    for (std::int32_t j = 1; j < D; ++j) parent[j] = static_cast<std::int32_t>(rng() % j);
    for (std::int32_t i = 0; i < D; ++i) {
      c.mask.insert(c.mask.end(), static_cast<std::size_t>(c.seq_len[r]), 1);
      const std::size_t row = c.mask.size();
      c.mask.resize(row + D, 0);
      for (std::int32_t j = i; j >= 0; j = parent[j]) c.mask[row + j] = 1;
    }
  }
  // The static buffer: its tail holds whatever the previous batch left (here: 1s).
  c.mask.resize(static_cast<std::size_t>(verify_mask_cells_capacity(B, M, D)), 1);
  c.mask_exact = false;
  c.prefix_capacity = static_cast<std::int32_t>(verify_prefix_columns(M, ps));
  c.prefix_stride = c.prefix_capacity;
  c.expand_stride = D;
  c.kv_capacity = static_cast<std::int32_t>(verify_kv_indices_capacity(B, M, D));
  c.packed_capacity = static_cast<std::int32_t>(verify_packed_mask_capacity(B, M, D));
  return c;
}

class VerifyGraph : public ExecutorTest {};

TEST_P(VerifyGraph, OneCaptureFollowsEveryStagedBatch) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("SPECGRAPH_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  verify_case c = bucket_case(rng);
  const std::size_t b = B, rows = b * D, k = verify_canaries;
  dvec<std::int32_t> rtt(*ex, c.req_to_token), pool(*ex, c.req_pool_index), seq(*ex, c.seq_len);
  dvec<std::uint8_t> mask(*ex, c.mask);
  const std::vector<std::size_t> sizes = {b * static_cast<std::size_t>(c.prefix_stride) + k,
                                          b + k,
                                          b + 1 + k,
                                          b + 1 + k,
                                          rows * D + k,
                                          rows + k,
                                          rows + 1 + k,
                                          rows + 1 + k,
                                          b + 1 + k,
                                          b + 1 + k,
                                          static_cast<std::size_t>(c.kv_capacity) + k,
                                          b + k,
                                          b + 1 + k,
                                          b + 1 + k};
  std::vector<std::unique_ptr<dvec<std::int32_t>>> out;
  for (std::size_t n : sizes)
    out.push_back(std::make_unique<dvec<std::int32_t>>(*ex, n, verify_poison));
  dvec<std::uint8_t> packed(*ex, static_cast<std::size_t>(c.packed_capacity) + k,
                            verify_poison_byte);
  dvec<guard_word> guards(*ex, verify_guard_count, guard_word{});
  dvec<std::int64_t> scratch(*ex, static_cast<std::size_t>(verify_scratch_words(B, D)), 0);
  verify_params p = verify_params_of(c);
  p.req_to_token = rtt.data();
  p.req_pool_index = pool.data();
  p.seq_len = seq.data();
  p.custom_mask = mask.data();
  std::int32_t** slots[] = {&p.prefix_page_table,   &p.prefix_cache_seqlen, &p.prefix_cu_seqlens_q,
                            &p.prefix_cu_seqlens_k, &p.expand_page_table,   &p.expand_cache_seqlen,
                            &p.expand_cu_seqlens_q, &p.expand_cu_seqlens_k, &p.qo_indptr,
                            &p.kv_indptr,           &p.kv_indices,          &p.kv_last_page_len,
                            &p.mask_indptr,         &p.packed_mask_indptr};
  for (std::size_t i = 0; i < sizes.size(); ++i) *slots[i] = out[i]->data();
  p.packed_mask = packed.data();
  p.guard = guards.data();
  p.scratch = scratch.data();
  ex->begin_capture();
  launch_verify_metadata(*ex, p);
  const std::unique_ptr<graph> g = ex->end_capture();
  const std::unique_ptr<graph_exec> exec = ex->instantiate(*g);
  // Stages a batch into the captured buffers (real_batch is a launch scalar: it stays the one
  // captured, so every batch here has the first batch's real_batch).
  const std::int32_t captured_real = c.real_batch;
  for (int replay = 0; replay < property_cases(200); ++replay) {
    do {
      c = bucket_case(rng);
    } while (c.real_batch != captured_real);
    ex->copy_to_device(rtt.data(), c.req_to_token.data(), c.req_to_token.size() * 4);
    ex->copy_to_device(pool.data(), c.req_pool_index.data(), b * 4);
    ex->copy_to_device(seq.data(), c.seq_len.data(), b * 4);
    ex->copy_to_device(mask.data(), c.mask.data(), c.mask.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const std::vector<std::int32_t> poison(sizes[i], verify_poison);
      ex->copy_to_device(out[i]->data(), poison.data(), sizes[i] * 4);
    }
    const std::vector<std::uint8_t> poison8(packed.size(), verify_poison_byte);
    ex->copy_to_device(packed.data(), poison8.data(), poison8.size());
    const std::vector<guard_word> clean(verify_guard_count, guard_word{});
    ex->copy_to_device(guards.data(), clean.data(), sizeof(guard_word) * clean.size());
    ex->launch_graph(*exec);
    ex->synchronize();
    const verify_outputs got{
        out[0]->download(),  out[1]->download(),  out[2]->download(),  out[3]->download(),
        out[4]->download(),  out[5]->download(),  out[6]->download(),  out[7]->download(),
        out[8]->download(),  out[9]->download(),  out[10]->download(), out[11]->download(),
        out[12]->download(), out[13]->download(), packed.download(),   guards.download()};
    SCOPED_TRACE("replay " + std::to_string(replay));
    expect_matches(c, got);
    if (HasFatalFailure()) return;
  }
}

SPECGRAPH_INSTANTIATE_EXECUTORS(VerifyGraph);

}  // namespace
}  // namespace specgraph::testing
