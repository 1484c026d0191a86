// Host-side validation and launchers of the device-round graph's two small kernels
// (device_round.hpp).
#include "specgraph/device_round.hpp"

#include <cstdint>

#include "device/checks.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/device_round.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph {

using detail::between;
using detail::not_null;

void validate(const extend_handoff_params& p) {
  between("batch", p.batch, 0, limits::max_batch, "the limit");
  between("num_steps", p.num_steps, 1, limits::max_num_steps, "the limit");
  between("accept_length_capacity", p.accept_length_capacity, p.batch, limits::max_rows,
          "[batch, the row limit]");
  between("accept_len_capacity", p.accept_len_capacity, p.batch, limits::max_rows,
          "[batch, the row limit]");
  not_null("accept_length", p.accept_length);
  not_null("accept_len", p.accept_len);
  not_null("real_batch_at", p.real_batch_at);
}

void launch_extend_handoff(executor& ex, const extend_handoff_params& p) {
  validate(p);
  ex.launch(make_kernel_launch<kernels::extend_handoff_kernel>(p, p.batch,
                                                               kernels::cuda_extend_handoff()));
}

void validate(const guard_fold_params& p) {
  between("count", p.count, 1, 1 << 16, "[1, 2^16]");
  not_null("words", p.words);
  not_null("summary", p.summary);
  // Addresses as integers: comparing pointers into different buffers is unspecified.
  const auto w = reinterpret_cast<std::uintptr_t>(p.words);
  const auto s = reinterpret_cast<std::uintptr_t>(p.summary);
  const std::uintptr_t n = static_cast<std::uintptr_t>(p.count) * sizeof(guard_word);
  const bool apart = s + n <= w || w + n <= s;
  SPECGRAPH_EXPECTS(apart, "summary", "overlaps words: the summary must be a buffer of its own");
}

void launch_guard_fold(executor& ex, const guard_fold_params& p) {
  validate(p);
  ex.launch(make_kernel_launch<kernels::guard_fold_kernel>(p, 1, kernels::cuda_guard_fold()));
}

}  // namespace specgraph
