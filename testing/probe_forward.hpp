// The engine probe as a forward: everything a step's consumer reads through a step_view, folded
// per row into `out` (testing/engine_probe.hpp). Shared by the tests' simulated engine and the
// runtime fuzz harness.
#pragma once

#include <cstdint>

#include "specgraph/buffers.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/row_kernel.hpp"
#include "testing/engine_probe.hpp"

namespace specgraph::testing {

// One launch on ex's stream (capture-safe). `out_step_stride` places step s's output at
// out + s * stride when the step comes from the device counter (v.device_step).
inline void launch_engine_probe(executor& ex, const step_view& v, std::int64_t* out,
                                std::int64_t out_step_stride) {
  engine_probe_kernel::params p{};
  p.expand_table = v.expand_page_table;
  p.expand_capacity = v.expand_capacity;
  p.expand_stride = v.expand_stride;
  p.expand_cache_seqlen = v.expand_cache_seqlen;
  p.prefix_table = v.prefix_page_table;
  p.prefix_stride = v.prefix_stride;
  p.prefix_capacity = v.prefix_capacity;
  p.prefix_seqlen = v.prefix_seqlen;
  p.topk = v.topk;
  p.out = out;
  p.device_step = v.device_step;
  p.out_step_stride = out_step_stride;
  ex.launch(make_kernel_launch<engine_probe_kernel>(p, v.rows, engine_probe_cuda()));
}

}  // namespace specgraph::testing
