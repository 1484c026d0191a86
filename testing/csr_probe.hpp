// A stand-in for an engine's forward reading the CSR draft-decode indices (docs/csr.md) through
// its step_view: per query row it folds the row's kv_indptr bounds and the kv_indices cells they
// delimit (those below the step's capacity) into one value, so a test can compare what the
// forward saw, inside a captured graph, with the independent reference.
#pragma once

#include <cstdint>

#include "specgraph/buffers.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph::testing {

struct csr_probe_kernel {
  struct params {
    const std::int32_t* kv_indptr;  // the view's (step 0's with a device step counter)
    const void* kv_indices;
    std::int32_t int64;
    std::int64_t capacity, capacity_growth, indptr_stride, indices_stride;
    const std::int32_t* device_step;  // null: the view is the step's own
    std::int32_t num_steps;
    std::int64_t* out;  // out[step * out_step_stride + row]
    std::int64_t out_step_stride;
  };
  static constexpr const char* name = "csr_probe";

  // FNV-1a over int64 values, unsigned (wraparound defined). The test's host side folds the
  // reference with the same function.
  SPECGRAPH_HD static std::uint64_t mix(std::uint64_t h, std::int64_t v) {
    return (h ^ static_cast<std::uint64_t>(v)) * 1099511628211ULL;
  }
  static constexpr std::uint64_t seed = 1469598103934665603ULL;

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    std::int64_t s = 0;
    if (p.device_step != nullptr) {
      // As the library's kernels (and an engine's forward must): a spent counter is no step.
      const std::int32_t step = *p.device_step;
      if (step < 0 || step >= p.num_steps) return;
      s = step;
    }
    const std::int32_t* indptr = p.kv_indptr + s * p.indptr_stride;
    const std::int64_t begin = indptr[row], end = indptr[row + 1];
    std::int64_t* out = p.out + s * p.out_step_stride + row;
    if (begin < 0 || end < begin) {  // not a CSR row: say so instead of reading anywhere
      *out = -2;
      return;
    }
    const std::int64_t capacity = p.capacity + s * p.capacity_growth;
    std::uint64_t h = mix(mix(seed, begin), end);
    for (std::int64_t f = begin; f < end && f < capacity; ++f) {
      const std::int64_t cell = s * p.indices_stride + f;
      h = mix(h, p.int64 != 0 ? static_cast<const std::int64_t*>(p.kv_indices)[cell]
                              : static_cast<const std::int32_t*>(p.kv_indices)[cell]);
    }
    *out = static_cast<std::int64_t>(h);
  }
};

cuda_rows_fn csr_probe_cuda();  // null in host-only builds

// One launch over the view's rows on ex's stream (capture-safe); `num_steps` bounds a device
// step counter.
inline void launch_csr_probe(executor& ex, const step_view& v, std::int32_t num_steps,
                             std::int64_t* out, std::int64_t out_step_stride) {
  csr_probe_kernel::params p{};
  p.kv_indptr = v.csr_kv_indptr;
  p.kv_indices = v.csr_kv_indices;
  p.int64 = v.csr_int64 ? 1 : 0;
  p.capacity = v.csr_capacity;
  p.capacity_growth = v.csr_capacity_growth;
  p.indptr_stride = v.csr_kv_indptr_stride;
  p.indices_stride = v.csr_kv_indices_stride;
  p.device_step = v.device_step;
  p.num_steps = num_steps;
  p.out = out;
  p.out_step_stride = out_step_stride;
  ex.launch(make_kernel_launch<csr_probe_kernel>(p, v.rows, csr_probe_cuda()));
}

}  // namespace specgraph::testing
