// Which requests a round's kernels read as padded requests whatever the inputs hold there
// (docs/metadata.md section 4): pool row 0, seq_len 1, every slot 0, exactly as staging pads
// the rows past the batch. Host+device.
#pragma once

#include <cstdint>

#include "specgraph/config.hpp"

namespace specgraph::kernels {

// Request r (< the launch's batch, the bucket) lies at or past the device real batch: an
// engine's real_batch word read in place, clamped to [0, bucket] (a negative word: every row).
// Null: no real batch bound, every row is read.
SPECGRAPH_HD bool past_real_batch(const std::int32_t* real_batch, std::int32_t r) {
  return real_batch != nullptr && r >= *real_batch;
}

// Request r is padding for this kernel: past the real batch, or refused by the round's prefix
// check (`refused`: prefix.refused, null when the round has no prefix pass).
SPECGRAPH_HD bool padded_request(const std::int32_t* real_batch, const std::int32_t* refused,
                                 std::int32_t r) {
  return past_real_batch(real_batch, r) || (refused != nullptr && refused[r] != 0);
}

}  // namespace specgraph::kernels
