// draft_runtime's graph table: capture, update, replay and DOT files of graph(bucket, step).
#include <string>
#include <utility>

#include "device/checks.hpp"
#include "device/nvtx.hpp"
#include "runtime/runtime_parts.hpp"
#include "specgraph/csr_ops.hpp"
#include "specgraph/engine_inputs.hpp"
#include "specgraph/error.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/round_io.hpp"
#include "specgraph/runtime.hpp"

namespace specgraph {

using detail::clock_type;
using detail::seconds_since;

draft_runtime::graph_slot& draft_runtime::slot(std::size_t bucket_index, std::int32_t step) const {
  const auto per_bucket = static_cast<std::size_t>(plan_->config.num_steps + 1);
  const auto s = static_cast<std::size_t>(step == all_steps ? plan_->config.num_steps : step);
  return *graphs_[bucket_index * per_bucket + s];
}

// The work of graph(bucket, step): the round's setup in step 0, the step's metadata (the FA3
// tables, the CSR indices, whichever the plan holds), then the engine's forward. Recorded by
// capture, or launched directly by run_eager.
// With a device step counter one body serves every step: the setup runs on the device only at
// step 0, the step's metadata reads the counter, and the last node advances it.
void draft_runtime::record_graph_body(std::int32_t bucket, std::int32_t step) {
  const bool fa3 = plan_->layout.has_fa3;
  const bool csr = !plan_->layout.csr_kv_indices.empty();
  // One source for every op: the staged inputs, or the engine's read in place (bind_inputs),
  // checked once when it was bound. With a device step counter the ops read the counter's step.
  const bool device = plan_->config.device_steps;
  const round_step at = device ? at_device_step : round_step(step);
  if (device || step == 0) setup_round(*ex_, buffers_, bucket, tables_, source_);
  if (fa3) step_metadata(*ex_, buffers_, bucket, at, source_);
  if (csr) csr_indices(*ex_, buffers_, bucket, at, tables_, {}, source_);
  if (device) {
    if (forward_all_) forward_all_(view(bucket, 0));
    advance_step(*ex_, buffers_);
    return;
  }
  const forward_fn& f = forwards_[static_cast<std::size_t>(step)]
                            ? forwards_[static_cast<std::size_t>(step)]
                            : forward_all_;
  if (f) f(view(bucket, step));
}

// The device-depth round: the step body inside a WHILE node whose condition a kernel sets after
// each step (continue while below max_depth and any real row is confident enough).
void draft_runtime::record_conditional_round(std::int32_t bucket) {
  const conditional_handle h = ex_->begin_while(/*initial=*/true);
  record_graph_body(bucket, 0);
  if (condition_) {
    condition_(view(bucket, 0), h);
    stop_round_at_limit(*ex_, buffers_, h);  // the engine's condition cannot loop forever
  } else {
    continue_while_confident(*ex_, buffers_, bucket, h, source_);
  }
  ex_->end_while();
}

std::unique_ptr<graph> draft_runtime::capture_graph(std::int32_t bucket, std::int32_t step) {
  ensure_usable();
  const bool round = step == all_steps;
  (void)buffers_.view(bucket, round ? 0 : step);  // validates bucket and step first
  const draft_config& c = plan_->config;
  if (c.device_steps) {
    SPECGRAPH_EXPECTS(round ? c.device_depth : step == 0, "step",
                      std::to_string(step) +
                          (round ? ": no round graph without device_depth"
                                 : ": with device_steps one graph (step 0) serves every step"));
  }
  const std::string what = "capture of graph (bucket " + std::to_string(bucket) + ", " +
                           (round ? std::string("whole round") : "step " + std::to_string(step)) +
                           ") failed: ";
  return detail::capture_body(*ex_, bucket, step, what, failure_, [&] {
    if (round && c.device_steps) {
      record_conditional_round(bucket);
    } else if (round) {
      for (std::int32_t s = 0; s < plan_->config.num_steps; ++s) record_graph_body(bucket, s);
    } else {
      record_graph_body(bucket, step);
    }
  });
}

void draft_runtime::install_graph(graph_slot& target, std::unique_ptr<graph> g, graph_timing& t,
                                  capture_report& report) {
  const auto t1 = clock_type::now();
  guarding_cuda([&] {
    t.nodes = g->node_count();
    if (target.exec && ex_->update(*target.exec, *g)) {
      t.updated = true;
      ++report.updated;
    } else {
      target.exec = ex_->instantiate(*g);
      ++report.instantiated;
    }
  });
  t.instantiate_seconds = seconds_since(t1);
  target.captured = std::move(g);
  report.per_graph.push_back(t);
}

capture_report draft_runtime::capture(const std::function<void(int, int)>& progress) {
  ensure_usable();
  const draft_config& c = plan_->config;
  capture_report report;
  const auto start = clock_type::now();
  // Largest bucket first: the order engines use, so a memory pool shared across graphs is sized
  // by the first (largest) capture.
  // Exactly the graphs the mode replays: with whole-round graphs a full round is one launch and
  // the last step never runs on its own, so only the steps shorter rounds replay get a graph.
  const std::int32_t step_graphs = c.device_steps ? 1 : c.num_steps - (c.round_graphs ? 1 : 0);
  const std::int32_t per_bucket = step_graphs + (c.round_graphs || c.device_depth ? 1 : 0);
  const bool verify = plan_->layout.verify.enabled() && static_cast<bool>(verify_forward_);
  const bool extend = plan_->layout.extend.enabled() && static_cast<bool>(extend_forward_);
  const bool device_round = device_round_wanted();
  const int total = static_cast<int>(c.buckets.size()) *
                    (per_bucket + (verify ? 1 : 0) + (extend ? 1 : 0) + (device_round ? 1 : 0));
  for (std::size_t bi = c.buckets.size(); bi-- > 0;) {
    const std::int32_t bucket = c.buckets[bi];
    for (std::int32_t i = 0; i < per_bucket; ++i) {
      const std::int32_t s = i < step_graphs ? i : all_steps;  // the round graph comes last
      detail::nvtx_range r(
          s == all_steps ? nvtx_capture_round_ : nvtx_capture_[static_cast<std::size_t>(s)], bucket,
          static_cast<std::uint32_t>(i + 1));
      detail::capture_timed(
          bucket, s, report, progress, total, [&] { return capture_graph(bucket, s); },
          [&](std::unique_ptr<graph> g, graph_timing& t) {
            install_graph(slot(bi, s), std::move(g), t, report);
          });
    }
  }
  if (verify) capture_verify_graphs(report, progress, total);
  if (extend) capture_extend_graphs(report, progress, total);
  if (device_round) capture_device_round_graphs(report, progress, total);
  report.total_seconds = seconds_since(start);
  captured_ = true;
  return report;
}

void draft_runtime::check_replay_step(std::int32_t step) const {
  ensure_usable();
  const draft_config& c = plan_->config;
  if (bucket_ == 0) throw error("replay before stage(): no round inputs are staged");
  detail::in_range("step", step, 0, c.num_steps, "num_steps");
  // Step 0 may restart a round (it recomputes the prefix), except with a device step counter,
  // which only staging resets.
  SPECGRAPH_EXPECTS(
      step == next_step_ || (step == 0 && !c.device_steps), "step",
      std::to_string(step) + " replayed out of order: the next step of this round is " +
          std::to_string(next_step_) + " (step 0 computes the round's prefix metadata)");
}

void draft_runtime::run_eager(std::int32_t step) {
  check_replay_step(step);
  guarding_cuda([&] { record_graph_body(bucket_, step); });
  next_step_ = step + 1;
}

void draft_runtime::replay(std::int32_t step) {
  ensure_usable();
  if (!captured_) throw error("replay before capture(): no graphs exist yet");
  check_replay_step(step);
  SPECGRAPH_EXPECTS(!plan_->config.round_graphs || step < plan_->config.num_steps - 1, "step",
                    std::to_string(step) +
                        ": with round_graphs the last step runs only inside the whole-round "
                        "graph (run_round(num_steps)); it has no graph of its own");
  detail::nvtx_range r(nvtx_replay_[static_cast<std::size_t>(step)], bucket_,
                       static_cast<std::uint32_t>(step + 1));
  // With a device step counter every step replays the same graph.
  graph_slot& target =
      slot(static_cast<std::size_t>(bucket_index_), plan_->config.device_steps ? 0 : step);
  guarding_cuda([&] { ex_->launch_graph(*target.exec); });
  next_step_ = step + 1;
}

void draft_runtime::run_round_on_device(const round_events& events) {
  ensure_usable();
  const draft_config& c = plan_->config;
  SPECGRAPH_EXPECTS(c.device_depth, "device_depth",
                    "false: no round graph decides its depth on the device");
  if (!captured_) throw error("replay before capture(): no graphs exist yet");
  check_replay_step(0);
  {
    detail::nvtx_range r(nvtx_round_, bucket_, 0);
    graph_slot& target = slot(static_cast<std::size_t>(bucket_index_), all_steps);
    guarding_cuda([&] {
      if (events.wait_for != nullptr) ex_->wait_event(events.wait_for);
      ex_->launch_graph(*target.exec);
      if (events.done != nullptr) ex_->record_event(events.done);
    });
  }
  next_step_ = c.num_steps;  // the device decided; the round is over either way
  if (c.checked) check_guards();
}

std::int32_t draft_runtime::read_round_depth() {
  ensure_usable();
  std::int32_t depth = 0;
  guarding_cuda([&] { ex_->copy_to_host(&depth, buffers_.device_step(), sizeof depth); });
  return depth;
}

void draft_runtime::run_round(std::int32_t depth, const round_events& events) {
  ensure_usable();
  const draft_config& c = plan_->config;
  detail::between("depth", depth, 1, c.num_steps, "num_steps");
  // Everything checked before the engine's event is waited on: a refused round enqueues nothing.
  if (!captured_) throw error("replay before capture(): no graphs exist yet");
  check_replay_step(0);
  {
    detail::nvtx_range r(nvtx_round_, bucket_, static_cast<std::uint32_t>(depth));
    if (events.wait_for != nullptr) guarding_cuda([&] { ex_->wait_event(events.wait_for); });
    if (c.round_graphs && depth == c.num_steps) {
      detail::nvtx_range whole(nvtx_replay_round_, bucket_, static_cast<std::uint32_t>(depth));
      graph_slot& target = slot(static_cast<std::size_t>(bucket_index_), all_steps);
      guarding_cuda([&] { ex_->launch_graph(*target.exec); });
      next_step_ = c.num_steps;
    } else {
      for (std::int32_t s = 0; s < depth; ++s) replay(s);
    }
    if (events.done != nullptr) guarding_cuda([&] { ex_->record_event(events.done); });
  }
  if (c.checked) check_guards();
}

void draft_runtime::write_dot(const std::string& directory) const {
  const draft_config& c = plan_->config;
  for (std::size_t bi = 0; bi < c.buckets.size(); ++bi) {
    for (std::int32_t s = 0; s <= c.num_steps; ++s) {
      const std::int32_t step = s < c.num_steps ? s : all_steps;
      const graph_slot& g = slot(bi, step);
      if (!g.captured) continue;
      g.captured->write_dot(
          directory + "/bucket" + std::to_string(c.buckets[bi]) +
          (step == all_steps ? std::string("_round") : "_step" + std::to_string(s)) + ".dot");
    }
    if (bi < verify_graphs_.size() && verify_graphs_[bi]->captured) {
      verify_graphs_[bi]->captured->write_dot(directory + "/bucket" +
                                              std::to_string(c.buckets[bi]) + "_verify.dot");
    }
    if (bi < extend_graphs_.size() && extend_graphs_[bi]->captured) {
      extend_graphs_[bi]->captured->write_dot(directory + "/bucket" +
                                              std::to_string(c.buckets[bi]) + "_extend.dot");
    }
    if (bi < device_round_graphs_.size() && device_round_graphs_[bi]->captured) {
      device_round_graphs_[bi]->captured->write_dot(
          directory + "/bucket" + std::to_string(c.buckets[bi]) + "_device_round.dot");
    }
  }
}

}  // namespace specgraph
