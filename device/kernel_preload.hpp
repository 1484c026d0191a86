// Internal: the cuda executor's kernel preload, a hook the layer above registers (the built-in
// kernels, kernels/builtin_kernels.cu), so that device/ never includes kernels/.
#pragma once

namespace specgraph::detail {

// Loads kernels into the current device's context; returns the first cudaError_t as an int, 0
// when all loaded.
using kernel_preload_fn = int (*)();

// The registered preload (null: none). Constant-initialised, so a registration made while the
// library's static objects are initialised is never lost to initialisation order.
inline kernel_preload_fn& kernel_preload() noexcept {
  static kernel_preload_fn fn = nullptr;
  return fn;
}

// Host work, once at load time; not thread-safe against a concurrent run_kernel_preload.
inline void register_kernel_preload(kernel_preload_fn fn) noexcept {
  kernel_preload() = fn;
}

// Runs the registered preload: 0 when none is registered or all loaded.
inline int run_kernel_preload() {
  const kernel_preload_fn fn = kernel_preload();
  return fn == nullptr ? 0 : fn();
}

}  // namespace specgraph::detail
