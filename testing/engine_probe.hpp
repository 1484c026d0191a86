// A stand-in for an engine's forward kernel: per query row it folds everything the consumer of
// the draft metadata reads (the step's expand row and cache_seqlen, the request's prefix row and
// prefix_seqlen) into one value, so a test can compare replayed and eager forwards exactly.
#pragma once

#include <cstdint>

#include "specgraph/conditional.hpp"
#include "specgraph/config.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph::testing {

struct engine_probe_kernel {
  struct params {
    const std::int32_t* expand_table;
    std::int32_t expand_capacity;  // the step's d + 1 (per-step graphs)
    std::int32_t expand_stride;    // row stride of the table
    const std::int32_t* expand_cache_seqlen;
    const std::int32_t* prefix_table;
    std::int64_t prefix_stride;
    std::int32_t prefix_capacity;
    const std::int32_t* prefix_seqlen;
    std::int32_t topk;
    std::int64_t* out;  // [rows]
    // Device step counter: the step (hence capacity and output slice) is read at run time.
    const std::int32_t* device_step;
    std::int64_t out_step_stride;  // out + step * out_step_stride
  };
  static constexpr const char* name = "engine_probe";

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    std::int32_t capacity = p.expand_capacity;
    std::int64_t* out = p.out;
    if (p.device_step != nullptr) {
      // As the metadata kernels do (and an engine's forward must): a counter outside
      // [0, num_steps) is no step; write nothing. The shared table is num_steps + 1 wide.
      const std::int32_t step = *p.device_step;
      if (step < 0 || step > p.expand_stride - 2) return;
      capacity = step + 2;
      out += step * p.out_step_stride;
    }
    // FNV-1a, unsigned: wraparound is defined (signed overflow would be undefined).
    std::uint64_t h = 1469598103934665603ULL;
    auto mix = [&h](std::int64_t v) { h = (h ^ static_cast<std::uint64_t>(v)) * 1099511628211ULL; };
    for (std::int32_t c = 0; c < capacity; ++c) mix(p.expand_table[row * p.expand_stride + c]);
    mix(p.expand_cache_seqlen[row]);
    const std::int64_t request = row / p.topk;
    for (std::int32_t c = 0; c < p.prefix_capacity; ++c)
      mix(p.prefix_table[request * p.prefix_stride + c]);
    mix(p.prefix_seqlen[request]);
    out[row] = static_cast<std::int64_t>(h);
  }
};

// A stand-in for the forward's confidence signal (device-decided depth, docs/device-rounds.md):
// each row's confidence for the step the device counter is at, from a table the
// test fills per round, source[step][row].
struct confidence_probe_kernel {
  struct params {
    const float* source;  // [num_steps][rows]
    std::int64_t rows;
    const std::int32_t* step;
    float* confidence;
    std::int32_t num_steps;  // source's first dimension
  };
  static constexpr const char* name = "confidence_probe";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    // As engine_probe_kernel (and an engine's forward must): a spent counter, outside
    // [0, num_steps), is no step; read and write nothing.
    const std::int32_t step = *p.step;
    if (step < 0 || step >= p.num_steps) return;
    p.confidence[row] = p.source[step * p.rows + row];
  }
};

// Counts its runs in *count (one row): how often a WHILE body ran, seen from outside the
// library's own counters.
struct count_runs_kernel {
  struct params {
    std::int32_t* count;
  };
  static constexpr const char* name = "count_runs";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) { *p.count += 1; }
};

// An engine's own WHILE condition (draft_runtime::set_condition) that sets `value` whatever the
// round holds: with value 1, a condition that never stops a round. One row.
struct constant_condition_kernel {
  struct params {
    conditional_handle handle;
    std::int32_t value;
  };
  static constexpr const char* name = "constant_condition";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t) {
    set_condition(p.handle, p.value != 0);
  }
};

// The CUDA launchers (null in host-only builds); defined in engine_probe.cu /
// engine_probe_host.cpp.
cuda_rows_fn engine_probe_cuda();
cuda_rows_fn confidence_probe_cuda();
cuda_rows_fn count_runs_cuda();
cuda_rows_fn constant_condition_cuda();

}  // namespace specgraph::testing
