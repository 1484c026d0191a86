// Row kernels: the one shape every specgraph kernel (and an engine's own forward kernels) has.
//
// A row kernel K is a type with
//   using params = <trivially copyable struct>;
//   static constexpr const char* name = "...";
//   SPECGRAPH_HD static void run_row(const params&, std::int64_t row);
// The host executor runs run_row in a loop; the cuda executor launches a thin __global__
// trampoline (row_kernel_cuda.cuh) with one thread per row. Both run the same function.
// Optionally K also has
//   static void run_rows(const params&, std::int64_t rows);
// which must do exactly what run_row over rows [0, rows) in order does: the host executor then
// calls it once per launch instead, so a choice uniform across the launch (the dtype and stride
// of a source, say) is made once, not for every row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "specgraph/config.hpp"

namespace specgraph {

using host_rows_fn = void (*)(const void* params, std::int64_t rows);
// Enqueues the CUDA trampoline and returns the launch's own status (a cudaError_t as int, 0 on
// success); it never reads or clears an error left by earlier calls.
using cuda_rows_fn = int (*)(const void* params, std::int64_t rows, device_stream stream);

// A type-erased launch: what an executor needs to run or record one kernel.
struct kernel_launch {
  const char* name = nullptr;
  std::int64_t rows = 0;            // the launch shape: one logical thread per row
  host_rows_fn host_run = nullptr;  // runs all rows on the calling thread
  cuda_rows_fn cuda_run = nullptr;  // enqueues the CUDA trampoline; null when built without CUDA
  const void* params = nullptr;     // copied by the executor at launch (or capture) time
  std::size_t params_size = 0;
};

// Whether K has the optional run_rows (above).
template <class K, class = void>
struct has_run_rows : std::false_type {};
template <class K>
struct has_run_rows<K, std::void_t<decltype(K::run_rows(std::declval<const typename K::params&>(),
                                                        std::int64_t{}))>> : std::true_type {};

template <class K>
void host_run_rows(const void* params, std::int64_t rows) {
  const auto& p = *static_cast<const typename K::params*>(params);
  if constexpr (has_run_rows<K>::value) {
    K::run_rows(p, rows);
  } else {
    for (std::int64_t row = 0; row < rows; ++row) K::run_row(p, row);
  }
}

// Builds the launch of K over `rows` rows. `cuda_run` comes from cuda_rows<K> in a .cu file of
// whoever owns K (null in host-only builds). `p` must outlive the launch call only: executors
// copy the params.
template <class K>
kernel_launch make_kernel_launch(const typename K::params& p, std::int64_t rows,
                                 cuda_rows_fn cuda_run) {
  static_assert(std::is_trivially_copyable_v<typename K::params>,
                "row-kernel params must be trivially copyable (they are baked into graphs)");
  kernel_launch l;
  l.name = K::name;
  l.rows = rows;
  l.host_run = &host_run_rows<K>;
  l.cuda_run = cuda_run;
  l.params = &p;
  l.params_size = sizeof(p);
  return l;
}

}  // namespace specgraph
