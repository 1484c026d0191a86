// What the kernels_fuzz drivers share (kernels_fuzz.cpp decodes the kernel and the path, then
// hands the rest of the bytes to one driver): the size cap, how a call runs on each path, and the
// promise checks every kernel's driver makes. A named namespace, not an anonymous one: the
// drivers live in kernels_fuzz_expand.cpp, kernels_fuzz_prefix.cpp and kernels_fuzz_sparse.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "specgraph/executor.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/limits.hpp"
#include "tests/fuzz/fuzz_support.hpp"

// Nested in specgraph::fuzz, so guard_word, invalid_argument, limits::, reader and guarded need no
// qualification in the drivers.
namespace specgraph::fuzz::kernels_harness {

// The most cells one input may allocate per buffer: keeps each execution to a few ms.
inline constexpr std::int64_t max_cells = std::int64_t{1} << 15;
inline constexpr std::int32_t stale = -3;  // what output cells hold before the call

// The select byte's bits 2-3 (its order is part of the byte encoding: make_corpus.py).
enum class path { eager, deferred, graph, host };

// Saturating product of non-negative sizes (a negative factor counts as 0).
inline std::int64_t cells(std::int64_t a, std::int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  if (a > max_cells * 4 || b > max_cells * 4) return max_cells * 16;
  return std::min(a * b, max_cells * 16);
}
inline std::size_t count_of(std::int64_t n) {
  return static_cast<std::size_t>(std::max<std::int64_t>(n, 0));
}

// Runs `launch` on the path's executor (or nothing: the host path calls its own function).
// Returns normally or lets invalid_argument through; any capture is ended either way.
template <class Launch>
void on_path(path how, Launch&& launch) {
  if (how == path::host) return;
  std::unique_ptr<specgraph::executor> ex =
      specgraph::make_host_executor({/*deferred=*/how == path::deferred});
  if (how == path::graph) {
    ex->begin_capture();
    try {
      launch(*ex);
    } catch (...) {
      ex->abort_capture();
      throw;
    }
    std::unique_ptr<specgraph::graph> g = ex->end_capture();
    std::unique_ptr<specgraph::graph_exec> exec = ex->instantiate(*g);
    ex->launch_graph(*exec);
  } else {
    launch(*ex);
  }
  ex->synchronize();
}

// Runs one kernel on `how`: its *_host entry point on path::host, its launcher on the other
// paths. invalid_argument passes through, for the caller's refusal checks.
template <class Params>
void run_kernel(path how, const Params& p, void (*host)(const Params&),
                void (*launch)(specgraph::executor&, const Params&)) {
  if (how == path::host) {
    host(p);
  } else {
    on_path(how, [&](specgraph::executor& ex) { launch(ex, p); });
  }
}

inline void check_guard(const guarded<guard_word>& g, bool expect_violation,
                        std::initializer_list<std::int32_t> kernels, const char* what) {
  FUZZ_CHECK(g.canaries_intact(), "%s: guard canaries overwritten", what);
  const guard_word& w = g[0];
  specgraph::fuzz::check_guard_word(w, what);
  FUZZ_CHECK((w.violations > 0) == expect_violation,
             "%s: %d violations recorded, the reference expects %s", what, w.violations,
             expect_violation ? "some" : "none");
  if (w.violations > 0) {
    bool known = false;
    for (const std::int32_t k : kernels) known = known || w.kernel == k;
    FUZZ_CHECK(known, "%s: violation names kernel %d", what, w.kernel);
  }
}

template <class T>
void check_unchanged(const guarded<T>& b, const std::vector<T>& before, const char* what,
                     const char* name) {
  FUZZ_CHECK(b.canaries_intact(), "%s: canaries around %s overwritten", what, name);
  FUZZ_CHECK(b.same(before), "%s: %s changed", what, name);
}

// The drivers: each reads its kernel's parameters and buffer contents from `in`, runs the kernel
// on `how` and checks every promise listed at the top of kernels_fuzz.cpp.
void fuzz_expand(reader& in, path how);  // docs/metadata.md section 3
void fuzz_prefix(reader& in, path how);  // section 2
void fuzz_sparse(reader& in, path how);  // section 6, a sparse stage
void fuzz_fallback(reader& in);          // section 6, sparse_fallback_host (host only)

}  // namespace specgraph::fuzz::kernels_harness
