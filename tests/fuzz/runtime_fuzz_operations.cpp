// runtime_fuzz: the operations a world runs, each decoding its own arguments from the bytes and
// going through attempt() (a refused call must leave the arena as it was); after one that ran, the
// checks of runtime_fuzz_checks.cpp. Inputs are mostly engine-like, sometimes out of range, so
// both the accepted path (compared with the references) and the refusals are reached.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/runtime.hpp"
#include "tests/fuzz/runtime_fuzz.hpp"

namespace specgraph::fuzz::runtime_harness {

std::int32_t world::pick_bucket() {
  const auto& b = rt_->plan().config.buckets;
  const std::uint8_t m = in_.byte();
  if (m < 0xe0) return b[m % b.size()];
  return in_.value32(1, cfg_.max_batch, cfg_.max_batch);
}
std::int32_t world::pick_step() {
  return in_.value32(0, cfg_.num_steps - 1, cfg_.num_steps);
}

void world::op_stage() {
  const std::int32_t batch = in_.value32(1, cfg_.max_batch, cfg_.max_batch);
  const std::size_t n = static_cast<std::size_t>(std::clamp(batch, 1, cfg_.max_batch + 1));
  const std::size_t per =
      static_cast<std::size_t>(cfg_.topk) * static_cast<std::size_t>(cfg_.num_steps);
  const bool wide = in_.flag();
  std::vector<std::int32_t> pool32(n), seq32(n);
  std::vector<std::int64_t> pool64(n), seq64(n), slots(n * per);
  const std::uint8_t quality = in_.byte();  // >= 0xe0: some values out of range
  const std::int32_t ps = cfg_.page_size;
  const std::int64_t pages = std::max<std::int64_t>(2, cfg_.kv_slots / ps);
  for (std::size_t r = 0; r < n; ++r) {
    std::int64_t pool = cfg_.pool_rows > 1 ? in_.small(1, cfg_.pool_rows - 1) : 0;
    std::int64_t seq = in_.small(1, cfg_.max_context_len);
    if (quality >= 0xe0 && in_.byte() >= 0xc0) {
      pool = in_.value(0, cfg_.pool_rows - 1, cfg_.pool_rows);
      seq = in_.value(1, cfg_.max_context_len, cfg_.max_context_len);
    }
    pool32[r] = static_cast<std::int32_t>(pool);
    seq32[r] = static_cast<std::int32_t>(seq);
    pool64[r] = pool;
    seq64[r] = seq;
    // Branch slots as engines lay them out (section 1): a fresh page per branch, draft token j
    // at offset (last_page_len + j) % ps.
    const std::int64_t lpl = seq % ps;
    for (std::int32_t t = 0; t < cfg_.topk; ++t) {
      std::int64_t page = 1 + in_.u16() % (pages - 1);
      for (std::int32_t j = 0; j < cfg_.num_steps; ++j) {
        const std::int64_t offset = (lpl + j) % ps;
        if (j > 0 && offset == 0) page = 1 + in_.u16() % (pages - 1);
        std::int64_t slot = page * ps + offset;
        if (slot >= cfg_.kv_slots) slot = in_.below(cfg_.kv_slots);
        slots[r * per + static_cast<std::size_t>(t * cfg_.num_steps + j)] = slot;
      }
    }
  }
  if (quality >= 0xe0) {
    for (int k = 0; k < (quality & 3) + 1; ++k) {
      slots[static_cast<std::size_t>(in_.below(static_cast<std::int64_t>(slots.size())))] =
          in_.value(0, cfg_.kv_slots - 1, cfg_.kv_slots);
    }
  }
  specgraph::round_inputs ri;
  ri.batch = batch;
  if (wide) {
    ri.req_pool_index = pool64.data();
    ri.seq_len = seq64.data();
  } else {
    ri.req_pool_index = pool32.data();
    ri.seq_len = seq32.data();
  }
  ri.out_cache_loc = slots.data();
  const std::uint8_t nulls = quality == 0xff ? in_.byte() : 0;
  if (nulls & 1) ri.req_pool_index = nullptr;
  if (nulls & 2) ri.seq_len = nullptr;
  if (nulls & 4) ri.out_cache_loc = nullptr;
  if (!attempt("stage", [&] { rt_->stage(ri); })) return;
  // Accepted: remember the padded round (section 4).
  const std::int32_t bucket = rt_->plan().round_bucket(batch, 0);  // batch 0: an idle rank
  FUZZ_CHECK(rt_->staged_bucket() == bucket && rt_->staged_batch() == batch,
             "stage: staged bucket %d batch %d, expected %d %d", rt_->staged_bucket(),
             rt_->staged_batch(), bucket, batch);
  staged_ = staged_round{};
  staged_.valid = true;
  counter_spent_ = false;
  staged_.batch = batch;
  staged_.bucket = bucket;
  staged_.pool.assign(static_cast<std::size_t>(bucket), 0);
  staged_.seq.assign(static_cast<std::size_t>(bucket), 1);
  staged_.slots.assign(static_cast<std::size_t>(bucket) * per, 0);
  for (std::size_t r = 0; r < static_cast<std::size_t>(batch); ++r) {
    staged_.pool[r] = pool32[r];
    staged_.seq[r] = seq32[r];
  }
  std::copy(slots.begin(),
            slots.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(batch) * per),
            staged_.slots.begin());
}

// stage_device (through the runtime) or stage_round (the composable op) from executor memory.
void world::op_stage_device(bool composable) {
  auto d = std::make_unique<device_inputs>();
  const std::int32_t batch = in_.value32(1, cfg_.max_batch, cfg_.max_batch);
  const std::size_t n = static_cast<std::size_t>(std::clamp(batch, 1, cfg_.max_batch + 1));
  const std::size_t per =
      static_cast<std::size_t>(cfg_.topk) * static_cast<std::size_t>(cfg_.num_steps);
  const std::uint8_t types = in_.byte();
  d->slots = std::make_unique<guarded<std::int64_t>>(n * per);
  for (std::size_t i = 0; i < n * per; ++i) {
    (*d->slots)[i] = in_.byte() < 0xf0 ? in_.below(std::min<std::int64_t>(cfg_.kv_slots, 1 << 16))
                                       : in_.value(0, cfg_.kv_slots - 1, cfg_.kv_slots);
  }
  auto value = [&](bool pool) {
    return pool ? in_.value(0, cfg_.pool_rows - 1, cfg_.pool_rows)
                : in_.value(1, cfg_.max_context_len, cfg_.max_context_len);
  };
  // One index array in the width `wide` says (int64 or int32), allocated into `g64` or `g32`.
  auto fill_index = [&](bool wide, std::unique_ptr<guarded<std::int64_t>>& g64,
                        std::unique_ptr<guarded<std::int32_t>>& g32,
                        bool pool) -> specgraph::index_array {
    if (wide) {
      g64 = std::make_unique<guarded<std::int64_t>>(n);
      for (std::size_t i = 0; i < n; ++i) (*g64)[i] = value(pool);
      return g64->data();
    }
    g32 = std::make_unique<guarded<std::int32_t>>(n);
    for (std::size_t i = 0; i < n; ++i) (*g32)[i] = static_cast<std::int32_t>(value(pool));
    return g32->data();
  };
  d->in.req_pool_index = fill_index((types & 1) != 0, d->pool64, d->pool32, true);
  d->in.seq_len = fill_index((types & 2) != 0, d->seq64, d->seq32, false);
  d->in.batch = batch;
  d->in.out_cache_loc = d->slots->data();
  // Sometimes an index type that is neither int32 nor int64 (refused by name).
  if (types & 4) d->in.req_pool_index.type = static_cast<specgraph::index_type>(2 + (types >> 4));
  if (types == 0xff) d->in.out_cache_loc = nullptr;
  if (types & 8) {
    events_.emplace_back(*ex_);
    d->in.wait_for = events_.back().get();
    ex_->record_event(d->in.wait_for);
    events_.emplace_back(*ex_);
    d->in.done = events_.back().get();
  }
  if (d->pool32) d->pool32_0 = d->pool32->copy();
  if (d->seq32) d->seq32_0 = d->seq32->copy();
  if (d->pool64) d->pool64_0 = d->pool64->copy();
  if (d->seq64) d->seq64_0 = d->seq64->copy();
  d->slots_0 = d->slots->copy();
  const specgraph::device_round_inputs in = d->in;
  inputs_.push_back(std::move(d));
  bool ran = false;
  if (composable) {
    ran = attempt("stage_round", [&] { (void)specgraph::stage_round(*ex_, rt_->buffers(), in); });
  } else {
    ran = attempt("stage_device", [&] { rt_->stage_device(in); });
  }
  if (ran) {
    staged_.valid = false;  // not validated on the host: only the guards are checked
    counter_spent_ = false;
  }
}

void world::op_replay() {
  const std::int32_t step = pick_step();
  if (attempt("replay", [&] { rt_->replay(step); })) check_round(step, step);
}

void world::op_run_round() {
  const std::int32_t depth = in_.value32(1, cfg_.num_steps, cfg_.num_steps);
  if (attempt(
          "run_round", [&] { rt_->run_round(depth); }, true))
    check_round(0, depth - 1);
}

// device_depth: one launch, the device decides the depth (the arena's confidences, zero unless
// the forward writes them, all reach the default threshold: the round runs to max_depth).
void world::op_run_round_on_device() {
  if (attempt(
          "run_round_on_device", [&] { rt_->run_round_on_device(); }, true)) {
    std::int32_t depth = 0;
    if (snapshot_ && !counter_spent_) {
      depth = rt_->read_round_depth();
      FUZZ_CHECK(depth >= 1 && depth <= cfg_.num_steps, "device-decided depth %d", depth);
      check_round(0, depth - 1);
    } else {
      check_guards_now();  // a spent counter: steps outside [0, num_steps) write nothing
    }
  }
}

void world::op_run_eager() {
  const std::int32_t step = pick_step();
  if (attempt("run_eager", [&] { rt_->run_eager(step); })) check_round(step, step);
}

void world::op_capture(int fails) {
  forward_fails_ = fails;
  const bool ran = attempt("capture", [&] { (void)rt_->capture(); });
  forward_fails_ = 0;
  FUZZ_CHECK(ran == (fails == 0), "capture %s with a forward that %s", ran ? "passed" : "failed",
             fails ? "fails" : "works");
}

void world::op_read_guards() {
  const bool keep = snapshot_;
  snapshot_ = true;
  check_guards_now();
  snapshot_ = keep;
}

void world::op_setup_round() {
  const std::int32_t bucket = pick_bucket();
  const bool null_table = in_.byte() == 0xff;
  const specgraph::engine_tables t{null_table ? nullptr : rtt_->data()};
  if (attempt("setup_round", [&] { specgraph::setup_round(*ex_, rt_->buffers(), bucket, t); })) {
    check_guards_now();
  }
}

void world::op_step_metadata() {
  const std::int32_t bucket = pick_bucket();
  const std::int32_t step = pick_step();
  if (attempt("step_metadata",
              [&] { specgraph::step_metadata(*ex_, rt_->buffers(), bucket, step); })) {
    check_guards_now();
  }
}

// setup_round + step_metadata recorded into the harness's own graph, then replayed.
void world::op_composed_graph() {
  const std::int32_t bucket = pick_bucket();
  const std::int32_t step = pick_step();
  const specgraph::engine_tables t{rtt_->data()};
  const bool ran = attempt("composed graph", [&] {
    ex_->begin_capture();
    try {
      specgraph::setup_round(*ex_, rt_->buffers(), bucket, t);
      specgraph::step_metadata(*ex_, rt_->buffers(), bucket, step);
    } catch (...) {
      ex_->abort_capture();
      throw;
    }
    const std::unique_ptr<specgraph::graph> g = ex_->end_capture();
    const std::unique_ptr<specgraph::graph_exec> exec = ex_->instantiate(*g);
    ex_->launch_graph(*exec);
  });
  if (ran) check_guards_now();
}

// device_depth, composed: the harness captures a step body itself (setup_round, the step
// metadata at the device step, its forward, advance_step), as an engine capturing with its own
// tooling does, and capture_device_depth_round wraps it in the WHILE round; one launch. From a
// freshly staged round (counter 0) the depth lies in [1, num_steps] and every step it ran must
// equal the references; otherwise only the guards and the bounds are checked.
void world::op_composed_round() {
  const std::int32_t bucket = pick_bucket();
  const specgraph::draft_buffers& b = rt_->buffers();
  std::int32_t counter_before = -1;
  if (snapshot_ && cfg_.device_steps) {
    ex_->copy_to_host(&counter_before, b.device_step(), sizeof counter_before);
  }
  const bool ran = attempt("composed round", [&] {
    std::unique_ptr<specgraph::graph> body;
    ex_->begin_capture();
    try {
      specgraph::setup_round(*ex_, b, bucket, specgraph::engine_tables{rtt_->data()});
      specgraph::step_metadata(*ex_, b, bucket, specgraph::at_device_step);
      specgraph::step_view v = b.view(bucket, 0);
      v.ex = ex_.get();
      forward(v);
      specgraph::advance_step(*ex_, b);
      body = ex_->end_capture();
    } catch (...) {
      ex_->abort_capture();
      throw;
    }
    const std::unique_ptr<specgraph::graph> round =
        specgraph::capture_device_depth_round(*ex_, b, bucket, *body);
    const std::unique_ptr<specgraph::graph_exec> exec = ex_->instantiate(*round);
    ex_->launch_graph(*exec);
  });
  if (!ran) return;
  if (counter_before == 0 && staged_.valid && staged_.bucket == bucket) {
    std::int32_t depth = 0;
    ex_->copy_to_host(&depth, b.device_step(), sizeof depth);
    FUZZ_CHECK(depth >= 1 && depth <= cfg_.num_steps, "composed round ran %d steps", depth);
    check_round(0, depth - 1);
  } else {
    check_guards_now();
  }
  // The round is spent: its counter moved behind the runtime's back (only staging resets it),
  // so a later runtime round of the same staging has nothing to compare with.
  staged_.valid = false;
  counter_spent_ = true;
}

}  // namespace specgraph::fuzz::runtime_harness
