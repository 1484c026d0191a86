// Per-request code that stages a round's inputs from executor memory into the static inputs of a
// bucket (docs/metadata.md section 4): requests [0, batch) are copied (int32 or int64 indices,
// narrowing checked), requests [batch, bucket) are reset to seq_len 1, pool row 0 and every slot
// 0, so each padded row reads one token on the reserved dummy page; a refused request (an int64
// index that does not fit int32) is staged the same way. Request 0 also writes the real batch.
// Host+device.
//
// Preconditions (checked on the host by stage_round): 0 <= batch <= bucket, slots_per_request
// >= 1, all pointers non-null. One call per request in [0, bucket).
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "specgraph/config.hpp"

namespace specgraph::kernels {

struct stage_inputs_kernel {
  struct params {
    const void* req_pool_index_src;  // [batch], int32 or int64 (pool_index_is_int64)
    const void* seq_len_src;         // [batch], int32 or int64 (seq_len_is_int64)
    const void* cache_loc_src;  // [batch][slots_per_request], int32 or int64 (cache_loc_is_int64)
    std::int32_t cache_loc_is_int64;
    std::int32_t pool_index_is_int64;
    std::int32_t seq_len_is_int64;
    std::int32_t* real_batch;   // [1]
    std::int32_t* device_step;  // [1] reset to 0: a new round starts at step 0
    std::int32_t* max_depth;    // [1] the round's depth limit
    float* min_confidence;      // [1] the round's continue threshold
    std::int32_t* iterations;   // [1] reset to 0: no WHILE body has run this round yet
    std::int32_t round_max_depth;
    float round_min_confidence;
    std::int32_t* req_pool_index;    // [bucket]
    std::int32_t* seq_len;           // [bucket]
    std::int64_t* out_cache_loc;     // [bucket][slots_per_request]
    std::int64_t slots_per_request;  // topk * slot_stride
    std::int32_t batch;
    std::int32_t bucket;
    guard_word* guard;
  };
  static constexpr const char* name = "stage_inputs";
  static constexpr kernel_id id = kernel_id::stage_inputs;
  // Guard columns naming which input a bad_input violation is about.
  static constexpr std::int32_t column_req_pool_index = 0;
  static constexpr std::int32_t column_seq_len = 1;

  static std::int64_t rows(const params& p) { return p.bucket; }

  SPECGRAPH_HD static std::int64_t load(const void* src, std::int32_t is_int64, std::int64_t i) {
    return is_int64 != 0 ? static_cast<const std::int64_t*>(src)[i]
                         : static_cast<const std::int32_t*>(src)[i];
  }
  SPECGRAPH_HD static bool fits_int32(std::int64_t v) {
    return v >= -2147483647LL - 1 && v <= 2147483647LL;
  }

  // A padded request: one token on the reserved dummy page.
  SPECGRAPH_HD static void pad(const params& p, std::int64_t r, std::int64_t* slots) {
    p.req_pool_index[r] = 0;
    p.seq_len[r] = 1;
    for (std::int64_t j = 0; j < p.slots_per_request; ++j) slots[j] = 0;
  }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t r) {
    if (r == 0) {
      *p.real_batch = p.batch;
      *p.device_step = 0;
      *p.max_depth = p.round_max_depth;
      *p.min_confidence = p.round_min_confidence;
      *p.iterations = 0;
    }
    std::int64_t* slots = p.out_cache_loc + r * p.slots_per_request;
    if (r >= p.batch) {
      pad(p, r, slots);
      return;
    }
    const std::int64_t pool_row = load(p.req_pool_index_src, p.pool_index_is_int64, r);
    const std::int64_t seq_len = load(p.seq_len_src, p.seq_len_is_int64, r);
    // A value that does not fit the int32 input tables is refused, never narrowed: the request
    // is staged as a padded request (nothing of an earlier round survives) and the guard names
    // it.
    if (!fits_int32(pool_row)) {
      guard_record(p.guard, violation_kind::bad_input, id, static_cast<std::int32_t>(r),
                   column_req_pool_index, 0x7fffffff, pool_row);
      pad(p, r, slots);
      return;
    }
    if (!fits_int32(seq_len)) {
      guard_record(p.guard, violation_kind::bad_input, id, static_cast<std::int32_t>(r),
                   column_seq_len, 0x7fffffff, seq_len);
      pad(p, r, slots);
      return;
    }
    p.req_pool_index[r] = static_cast<std::int32_t>(pool_row);
    p.seq_len[r] = static_cast<std::int32_t>(seq_len);
    const std::int64_t first = r * p.slots_per_request;
    for (std::int64_t j = 0; j < p.slots_per_request; ++j) {
      slots[j] = load(p.cache_loc_src, p.cache_loc_is_int64, first + j);
    }
  }
};

}  // namespace specgraph::kernels
