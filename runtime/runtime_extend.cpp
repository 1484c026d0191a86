// draft_runtime's draft-extend graphs (docs/extend-graphs.md): the verify round's accepted
// lengths staged, one graph per bucket (extend_metadata + the engine's extend forward), replay.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "device/checks.hpp"
#include "runtime/runtime_parts.hpp"
#include "specgraph/error.hpp"
#include "specgraph/extend_ops.hpp"
#include "specgraph/runtime.hpp"

namespace specgraph {
void draft_runtime::set_extend_forward(extend_forward_fn f) {
  (void)buffers_.extend();  // throws invalid_argument ("draft_extend") without the section
  extend_forward_ = std::move(f);
}

extend_view draft_runtime::extend_view_of(std::int32_t bucket) const {
  extend_view v = buffers_.extend(bucket);
  v.ex = ex_;
  v.stream = ex_->stream();
  return v;
}

// The staged verify round's requests and the section's accepted lengths, read on the device (a
// graph serves every round).
void draft_runtime::record_extend_body(std::int32_t bucket, const std::int32_t* accept_index,
                                       std::int64_t accept_index_stride) {
  extend_inputs in;
  in.tables = tables_;
  in.accept_index = accept_index;
  in.accept_index_stride = accept_index_stride;
  extend_metadata(*ex_, buffers_, bucket, in);
  if (extend_forward_) extend_forward_(extend_view_of(bucket));
}

std::unique_ptr<graph> draft_runtime::capture_extend_graph(std::int32_t bucket) {
  ensure_usable();
  (void)buffers_.extend(bucket);  // the section and the bucket, validated first
  const std::string what =
      "capture of the extend graph (bucket " + std::to_string(bucket) + ") failed: ";
  return detail::capture_body(*ex_, bucket, extend_graph_step, what, failure_,
                              [&] { record_extend_body(bucket); });
}

void draft_runtime::capture_extend_graphs(capture_report& report,
                                          const std::function<void(int, int)>& progress,
                                          int total) {
  const std::vector<std::int32_t>& buckets = plan_->config.buckets;
  for (std::size_t bi = buckets.size(); bi-- > 0;) {
    detail::capture_timed(
        buckets[bi], extend_graph_step, report, progress, total,
        [&] { return capture_extend_graph(buckets[bi]); },
        [&](std::unique_ptr<graph> g, graph_timing& t) {
          install_graph(*extend_graphs_[bi], std::move(g), t, report);
          ++report.extend_graphs;
        });
  }
  extend_captured_ = true;
}

void draft_runtime::stage_extend(const std::vector<std::int32_t>& accept_len) {
  ensure_usable();
  (void)buffers_.extend();  // throws invalid_argument ("draft_extend") without the section
  if (verify_bucket_ == 0) {
    throw error(
        "stage_extend before stage_verify(): the extend round is the staged verify "
        "round's requests; stage that round first");
  }
  SPECGRAPH_EXPECTS(accept_len.size() == static_cast<std::size_t>(verify_batch_), "accept_len",
                    std::to_string(accept_len.size()) + " lengths for the staged verify round of " +
                        std::to_string(verify_batch_) +
                        " requests; pass one per request of that round");
  guarding_cuda([&] { stage_accept_len(*ex_, buffers_, verify_bucket_, accept_len); });
  extend_bucket_ = verify_bucket_;
}

void draft_runtime::run_extend_eager() {
  ensure_usable();
  if (extend_bucket_ == 0) throw error("extend before stage_extend(): no extend round is staged");
  guarding_cuda([&] { record_extend_body(extend_bucket_); });
}

void draft_runtime::replay_extend() {
  ensure_usable();
  (void)buffers_.extend();  // throws invalid_argument ("draft_extend") without the section
  if (!extend_captured_) {
    throw error("replay_extend before capture() with an extend forward: no extend graphs exist");
  }
  if (extend_bucket_ == 0) throw error("extend before stage_extend(): no extend round is staged");
  const std::vector<std::int32_t>& buckets = plan_->config.buckets;
  const auto bi = static_cast<std::size_t>(
      std::lower_bound(buckets.begin(), buckets.end(), extend_bucket_) - buckets.begin());
  guarding_cuda([&] { ex_->launch_graph(*extend_graphs_[bi]->exec); });
  if (plan_->config.checked) {
    raise_guard_violations(*plan_, read_guards(), extend_bucket_, "extend");
  }
}

}  // namespace specgraph
