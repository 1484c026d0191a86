// The expand metadata computed the way tensor libraries compute it today: one pass (one kernel
// launch on CUDA) per tensor operation, through temporaries:
//   1. repeat last_page_len per branch            lpl_rows[row]
//   2. divide the first d slots by the page size   pages[row][j]
//   3. compare neighbours                          is_new[row][j] = j == 0 || pages[j] !=
//   pages[j-1]
//   4. prefix-sum                                  pos[row][j] = cumsum(is_new) - 1
//   5. zero the table, then scatter                table[row][pos] = pages[row][j] where is_new
//   6. cache_seqlen = lpl_rows + d
// The fused kernel (expand_page_table) does all of it in one pass per row.
#pragma once

#include <cstdint>

#include "specgraph/config.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph::bench {

struct multipass_buffers {
  const std::int64_t* cache_loc;
  std::int64_t cache_loc_stride;
  const std::int32_t* last_page_len;
  std::int32_t topk, page_size, d, capacity;
  std::int32_t* lpl_rows;      // [rows]
  std::int64_t* pages;         // [rows][d]
  std::int32_t* is_new;        // [rows][d]
  std::int32_t* pos;           // [rows][d]
  std::int32_t* page_table;    // [rows][capacity]
  std::int32_t* cache_seqlen;  // [rows]
};

struct repeat_lpl_kernel {
  using params = multipass_buffers;
  static constexpr const char* name = "mp_repeat_last_page_len";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    p.lpl_rows[row] = p.last_page_len[row / p.topk];
  }
};
struct divide_kernel {  // one element per (row, j)
  using params = multipass_buffers;
  static constexpr const char* name = "mp_divide";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t i) {
    const std::int64_t row = i / p.d, j = i % p.d;
    p.pages[i] = p.cache_loc[row * p.cache_loc_stride + j] / p.page_size;
  }
};
struct compare_kernel {
  using params = multipass_buffers;
  static constexpr const char* name = "mp_compare_neighbours";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t i) {
    p.is_new[i] = (i % p.d == 0 || p.pages[i] != p.pages[i - 1]) ? 1 : 0;
  }
};
struct prefix_sum_kernel {  // one row each (a segmented scan)
  using params = multipass_buffers;
  static constexpr const char* name = "mp_prefix_sum";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    std::int32_t acc = 0;
    for (std::int32_t j = 0; j < p.d; ++j) {
      acc += p.is_new[row * p.d + j];
      p.pos[row * p.d + j] = acc - 1;
    }
  }
};
struct zero_kernel {
  using params = multipass_buffers;
  static constexpr const char* name = "mp_zero_table";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t i) { p.page_table[i] = 0; }
};
struct scatter_kernel {
  using params = multipass_buffers;
  static constexpr const char* name = "mp_scatter";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t i) {
    const std::int64_t row = i / p.d;
    if (p.is_new[i] != 0 && p.pos[i] < p.capacity) {
      p.page_table[row * p.capacity + p.pos[i]] = static_cast<std::int32_t>(p.pages[i]);
    }
  }
};
struct seqlen_kernel {
  using params = multipass_buffers;
  static constexpr const char* name = "mp_cache_seqlen";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    p.cache_seqlen[row] = p.lpl_rows[row] + p.d;
  }
};

// The same seven passes as plain nested loops over (row, j) on the host: no per-element
// division to recover (row, j) and no per-launch executor overhead. The honest CPU stand-in for
// "separate passes", so the CPU ratio reported against the fused kernel is the conservative one
// (the per-element form above is what separate elementwise GPU kernels do).
inline void multipass_loops(const multipass_buffers& p, std::int64_t rows) {
  const std::int64_t d = p.d;
  for (std::int64_t row = 0; row < rows; ++row) p.lpl_rows[row] = p.last_page_len[row / p.topk];
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t j = 0; j < d; ++j) {
      p.pages[row * d + j] = p.cache_loc[row * p.cache_loc_stride + j] / p.page_size;
    }
  }
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t j = 0; j < d; ++j) {
      const std::int64_t i = row * d + j;
      p.is_new[i] = (j == 0 || p.pages[i] != p.pages[i - 1]) ? 1 : 0;
    }
  }
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int32_t acc = 0;
    for (std::int64_t j = 0; j < d; ++j) {
      acc += p.is_new[row * d + j];
      p.pos[row * d + j] = acc - 1;
    }
  }
  for (std::int64_t i = 0; i < rows * p.capacity; ++i) p.page_table[i] = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t j = 0; j < d; ++j) {
      const std::int64_t i = row * d + j;
      if (p.is_new[i] != 0 && p.pos[i] < p.capacity) {
        p.page_table[row * p.capacity + p.pos[i]] = static_cast<std::int32_t>(p.pages[i]);
      }
    }
  }
  for (std::int64_t row = 0; row < rows; ++row) p.cache_seqlen[row] = p.lpl_rows[row] + p.d;
}

struct multipass_cuda_launchers {
  cuda_rows_fn repeat, divide, compare, prefix_sum, zero, scatter, seqlen;
};
multipass_cuda_launchers multipass_cuda();  // all null in host-only builds

}  // namespace specgraph::bench
