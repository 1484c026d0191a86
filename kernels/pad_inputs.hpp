// Per-row code that resets the padded requests [batch, bucket) of the static inputs on the
// device (draft-metadata.md section 4): seq_len 1, req_pool_index 0, every slot 0, so each
// padded row reads one token on the reserved dummy page. Used by stage_device(), where the
// inputs never pass through the host. Host+device.
#pragma once

#include <cstdint>

#include "specgraph/config.hpp"

namespace specgraph::kernels {

struct pad_inputs_kernel {
  struct params {
    std::int32_t* req_pool_index;    // [bucket]
    std::int32_t* seq_len;           // [bucket]
    std::int64_t* out_cache_loc;     // [bucket][slots_per_request]
    std::int64_t slots_per_request;  // topk * num_steps
    std::int32_t batch;              // first padded request
  };
  static constexpr const char* name = "pad_inputs";

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t i) {
    const std::int64_t r = p.batch + i;
    p.req_pool_index[r] = 0;
    p.seq_len[r] = 1;
    for (std::int64_t j = 0; j < p.slots_per_request; ++j) {
      p.out_cache_loc[r * p.slots_per_request + j] = 0;
    }
  }
};

}  // namespace specgraph::kernels
