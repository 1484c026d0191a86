// draft_runtime's device-round graphs (docs/round-graphs.md section 6): the whole EAGLE round,
// draft steps to the next round's inputs, as one graph per bucket, launched back to back with
// no host work in between.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "device/checks.hpp"
#include "runtime/runtime_parts.hpp"
#include "specgraph/device_round.hpp"
#include "specgraph/error.hpp"
#include "specgraph/extend_ops.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/round_ops.hpp"
#include "specgraph/runtime.hpp"

namespace specgraph {

namespace {

void require_round(const plan& p) {
  SPECGRAPH_EXPECTS(p.layout.round.enabled(), "round_on_device",
                    "false: this plan has no round section (set draft_config::round_on_device)");
}

// With a device step counter the graph's draft steps are the WHILE node of the round graph,
// whose depth the device decides; the counter alone (one step body per launch) makes no round.
void require_depth(const plan& p) {
  SPECGRAPH_EXPECTS(!p.config.device_steps || p.config.device_depth, "device_depth",
                    "false with device_steps: the device-round graph runs the draft steps as the "
                    "device-decided round (a WHILE node over the step body); set device_depth, "
                    "or device_steps off for a fixed depth of num_steps");
}

}  // namespace

void draft_runtime::bind_round_ring(const after_verify_inputs& in) {
  ensure_usable();
  require_round(*plan_);
  SPECGRAPH_EXPECTS(!captured_, "bind_round_ring",
                    "called after capture(): the graphs baked in the previous binding; bind "
                    "first, then capture()");
  // The round writes the next round's state into the staged inputs (round_view.hpp): inputs
  // read in place would never see it.
  SPECGRAPH_EXPECTS(source_.staged(), "inputs",
                    "bound with bind_inputs: the device round writes the next round's seq_len "
                    "and draft slots into the runtime's staged inputs; use stage() instead");
  // The commit and the next round write the very table the draft, verify and extend metadata
  // read: one array, one stride.
  SPECGRAPH_EXPECTS(in.req_to_token == tables_.req_to_token, "req_to_token",
                    "not the runtime's engine_tables::req_to_token: the round writes the table "
                    "the metadata reads; pass the same array (mutable)");
  SPECGRAPH_EXPECTS(in.req_to_token_stride == tables_.req_to_token_stride, "req_to_token_stride",
                    std::to_string(in.req_to_token_stride) + ", the runtime's tables have " +
                        std::to_string(tables_.req_to_token_stride));
  require_depth(*plan_);
  SPECGRAPH_EXPECTS(in.real_batch == -1 && in.real_batch_at == nullptr, "real_batch",
                    "the device round reads the staged real-batch word; leave real_batch -1 and "
                    "real_batch_at null");
  (void)after_verify_params(buffers_.round(plan_->max_bucket()), in);  // every other field
  if (round_guards_.data() == nullptr) {
    const std::size_t bytes =
        static_cast<std::size_t>(plan_->layout.guard_count) * sizeof(guard_word);
    round_guards_ = device_buffer(*ex_, bytes);
    guarding_cuda([&] { ex_->fill_bytes(round_guards_.data(), 0, bytes); });
    device_round_graphs_.resize(plan_->config.buckets.size());
    for (auto& g : device_round_graphs_) g = std::make_unique<graph_slot>();
  }
  round_in_ = in;
  round_bound_ = true;
}

bool draft_runtime::device_round_wanted() const {
  const bool extend = plan_->layout.extend.enabled();
  const draft_config& c = plan_->config;
  return plan_->layout.round.enabled() && round_bound_ && source_.staged() &&
         (!c.device_steps || c.device_depth) && static_cast<bool>(verify_forward_) &&
         (!extend || static_cast<bool>(extend_forward_));
}

// Draft steps, verify metadata + forward, acceptance and commit, [the extend handoff, extend
// metadata + forward], the next round, the guard fold. Draft extend runs before the next round:
// it reads the staged seq_len as the verify round's (without the window), which the next round
// overwrites with seq_len'.
void draft_runtime::record_device_round_body(std::int32_t bucket) {
  const draft_config& c = plan_->config;
  // The draft steps: num_steps step bodies, or with device_depth the round graph's WHILE node
  // (record_conditional_round) after the round's two per-round control words are reset to a
  // fresh round's: the step counter and the WHILE body count to 0 (two memset nodes: every launch
  // starts at step 0, as staging starts it). max_depth and min_confidence stay as staged: the
  // rounds of back-to-back launches read the last stage()'s. No begin_round: round.order stays
  // sticky across rounds, and the progress word where the previous launch left it (set up).
  if (c.device_steps) {
    ex_->fill_bytes(buffers_.device_step(), 0, sizeof(std::int32_t));
    ex_->fill_bytes(buffers_.iterations(), 0, sizeof(std::int32_t));
    record_conditional_round(bucket);
  } else {
    for (std::int32_t s = 0; s < c.num_steps; ++s) record_graph_body(bucket, s);
  }
  record_verify_body(bucket);
  const round_view v = buffers_.round(bucket);
  const round_launch l = after_verify_params(v, round_in_);
  launch_accept(*ex_, l.accept);
  launch_commit(*ex_, l.commit);
  if (plan_->layout.extend.enabled()) {
    const extend_view e = buffers_.extend(bucket);
    extend_handoff_params h;
    h.accept_length = v.accept.accept_length;
    h.accept_length_capacity = v.accept.accept_length_capacity;
    h.accept_len = e.accept_len;
    h.accept_len_capacity = plan_->max_bucket();  // the section holds the largest bucket
    h.real_batch_at = buffers_.real_batch();
    h.batch = bucket;
    h.num_steps = c.num_steps;
    launch_extend_handoff(*ex_, h);
    // A row acceptance accepted nothing for (idle, stalled) is inactive: its extend is padding.
    record_extend_body(bucket, v.accept.accept_index, c.num_steps + 1);
  }
  launch_next_round(*ex_, l.next);
  // Every word a round resets (all but the staging word and round.order, which stay sticky).
  guard_fold_params f;
  const std::int32_t first = plan_layout::guard_prefix;
  f.words = buffers_.guards() + first;
  f.summary = static_cast<guard_word*>(round_guards_.data()) + first;
  f.count = plan_->layout.guard_order - first;
  launch_guard_fold(*ex_, f);
}

std::unique_ptr<graph> draft_runtime::capture_device_round_graph(std::int32_t bucket) {
  ensure_usable();
  require_round(*plan_);
  SPECGRAPH_EXPECTS(round_bound_, "ring", "not bound: call bind_round_ring before capture()");
  (void)buffers_.round(bucket);  // validates the bucket first
  const std::string what =
      "capture of the device-round graph (bucket " + std::to_string(bucket) + ") failed: ";
  return detail::capture_body(*ex_, bucket, device_round_graph_step, what, failure_,
                              [&] { record_device_round_body(bucket); });
}

void draft_runtime::capture_device_round_graphs(capture_report& report,
                                                const std::function<void(int, int)>& progress,
                                                int total) {
  const std::vector<std::int32_t>& buckets = plan_->config.buckets;
  for (std::size_t bi = buckets.size(); bi-- > 0;) {
    detail::capture_timed(
        buckets[bi], device_round_graph_step, report, progress, total,
        [&] { return capture_device_round_graph(buckets[bi]); },
        [&](std::unique_ptr<graph> g, graph_timing& t) {
          install_graph(*device_round_graphs_[bi], std::move(g), t, report);
          ++report.device_round_graphs;
        });
  }
  device_round_captured_ = true;
}

void draft_runtime::launch_device_round_graph() {
  const std::vector<std::int32_t>& buckets = plan_->config.buckets;
  const auto bi = static_cast<std::size_t>(
      std::lower_bound(buckets.begin(), buckets.end(), bucket_) - buckets.begin());
  guarding_cuda([&] { ex_->launch_graph(*device_round_graphs_[bi]->exec); });
}

namespace {

void check_launchable(const plan& p, bool bound, bool staged, bool captured, std::int32_t bucket) {
  require_round(p);
  require_depth(p);
  SPECGRAPH_EXPECTS(bound, "ring", "not bound: call bind_round_ring, then capture()");
  SPECGRAPH_EXPECTS(staged, "inputs",
                    "bound with bind_inputs: the device round needs the staged inputs (stage())");
  if (!captured) {
    throw error(
        "launch_device_round before capture() (with the verify forward, the extend forward "
        "when draft_extend, and device_depth if device_steps): no device-round graphs exist");
  }
  if (bucket == 0) throw error("launch_device_round before stage(): no round is staged");
}

}  // namespace

void draft_runtime::launch_device_round(const round_events& events) {
  ensure_usable();
  check_launchable(*plan_, round_bound_, source_.staged(), device_round_captured_, bucket_);
  if (events.wait_for != nullptr) guarding_cuda([&] { ex_->wait_event(events.wait_for); });
  launch_device_round_graph();
  if (events.done != nullptr) guarding_cuda([&] { ex_->record_event(events.done); });
  next_step_ = plan_->config.num_steps;
  if (plan_->config.checked) raise_guard_violations(*plan_, read_round_guards(), bucket_, "round");
}

void draft_runtime::launch_device_rounds(std::int32_t k) {
  ensure_usable();
  detail::between("k", k, 1, std::int32_t{1} << 20, "2^20");
  check_launchable(*plan_, round_bound_, source_.staged(), device_round_captured_, bucket_);
  for (std::int32_t i = 0; i < k; ++i) launch_device_round_graph();
  next_step_ = plan_->config.num_steps;
}

std::vector<guard_word> draft_runtime::read_round_guards() {
  ensure_usable();
  require_round(*plan_);
  std::vector<guard_word> out = read_guards();  // the staging and round.order words: live
  if (round_guards_.data() == nullptr) return out;
  std::vector<guard_word> summary(out.size());
  guarding_cuda([&] {
    ex_->copy_to_host(summary.data(), round_guards_.data(), summary.size() * sizeof(guard_word));
  });
  for (std::int32_t i = plan_layout::guard_prefix; i < plan_->layout.guard_order; ++i) {
    out[static_cast<std::size_t>(i)] = summary[static_cast<std::size_t>(i)];
  }
  return out;
}

void draft_runtime::reset_round_guards() {
  ensure_usable();
  require_round(*plan_);
  if (round_guards_.data() == nullptr) return;
  guarding_cuda([&] { ex_->fill_bytes(round_guards_.data(), 0, round_guards_.size()); });
}

}  // namespace specgraph
