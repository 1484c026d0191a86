// The round's order (docs/metadata.md section 11): every round op checks the arena's progress
// word before it runs. Eagerly, where the word can be read without a synchronisation (the host
// executor), an op out of order is refused with invalid_argument and nothing is enqueued;
// otherwise (a CUDA stream, a capture, a deferred host executor) a one-thread kernel records it
// in the round.order guard word, which read_guards, check_guards and checked mode report.
#include <cstdint>
#include <string>

#include "graphs/input_reads.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/round_order.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph::detail {
namespace {

void launch_order(executor& ex, const draft_buffers& b, kernel_id op, std::int32_t step,
                  round_progress need, round_progress set, bool starts_round) {
  kernels::round_order_kernel::params k{};
  k.progress = b.progress();
  k.guard = b.guards() + b.plan().layout.guard_order;
  k.op = static_cast<std::int32_t>(op);
  k.step = step;
  k.need = static_cast<std::int32_t>(need);
  k.set = static_cast<std::int32_t>(set);
  k.starts_round = starts_round ? 1 : 0;
  ex.launch(make_kernel_launch<kernels::round_order_kernel>(k, 1, kernels::cuda_round_order()));
}

}  // namespace

void start_round(executor& ex, const draft_buffers& b) {
  launch_order(ex, b, kernel_id::none, -1, round_progress::none, round_progress::staged, true);
}

void check_round_order(executor& ex, const draft_buffers& b, kernel_id op, std::int32_t step,
                       std::int32_t bucket, round_progress need, round_progress set) {
  if (ex.host_visible()) {
    const auto found = static_cast<round_progress>(*b.progress());
    if (need != round_progress::none &&
        static_cast<std::int32_t>(found) < static_cast<std::int32_t>(need)) {
      const bool setup = op == kernel_id::round_setup;
      const std::string what =
          setup ? "bucket " + std::to_string(bucket)
                : (step >= 0 ? "step " + std::to_string(step) : std::string("the device step")) +
                      " of bucket " + std::to_string(bucket);
      SPECGRAPH_EXPECTS(
          false, to_string(op),
          what + " ran with the round " + to_string(found) + ", expected " +
              (need == round_progress::staged ? "a staged round" : "the round set up") + ": " +
              (need == round_progress::staged
                   ? "stage the round first (stage_round, stage_ in Python; or read the "
                     "engine's inputs in place)"
                   : "call setup_round (round_setup_ in Python) for this round first, as step "
                     "0's graph does") +
              "; nothing was written");
    }
  }
  launch_order(ex, b, op, step, need, set, false);
}

}  // namespace specgraph::detail
