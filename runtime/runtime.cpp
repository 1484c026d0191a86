// draft_runtime: construction over an owned or caller-supplied arena, staging (pinned ring and
// device inputs), guard read-back and views. Capture and replay live in graph_table.cpp.
#include "specgraph/runtime.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "device/checks.hpp"
#include "device/nvtx.hpp"
#include "runtime/runtime_parts.hpp"
#include "runtime/slot_rows.hpp"
#include "specgraph/error.hpp"

namespace specgraph {

using detail::indexed;

draft_runtime::draft_runtime(executor& ex, const draft_config& config, engine_tables tables)
    : ex_(&ex), plan_(std::make_unique<const specgraph::plan>(make_plan(config))), tables_(tables) {
  init(nullptr);
}

draft_runtime::draft_runtime(executor& ex, const draft_config& config, engine_tables tables,
                             void* arena)
    : ex_(&ex), plan_(std::make_unique<const specgraph::plan>(make_plan(config))), tables_(tables) {
  detail::not_null("arena", arena);
  init(arena);
}

void draft_runtime::init(void* caller_arena) {
  detail::not_null("req_to_token", tables_.req_to_token);
  const draft_config& c = plan_->config;
  (void)req_to_token_stride(c, tables_);  // its range, before anything is allocated
  {
    detail::nvtx_range r(detail::nvtx_register("plan"),
                         static_cast<std::int64_t>(plan_->total_bytes));
    void* arena = caller_arena;
    if (arena == nullptr) {
      const std::size_t capacity = ex_->memory_capacity();
      SPECGRAPH_EXPECTS(plan_->total_bytes <= capacity, "arena",
                        "the plan needs " + std::to_string(plan_->total_bytes) +
                            " bytes, more than the " + ex_->name() + " executor's " +
                            std::to_string(capacity) + " bytes of memory");
      owned_arena_ = device_buffer(*ex_, plan_->total_bytes);
      arena = owned_arena_.data();
    }
    buffers_ = draft_buffers(*plan_, arena);
    // Everything starts defined: zero inputs, tables and guards; the sparse sizes written.
    initialize_buffers(*ex_, buffers_);
    const std::size_t small = (plan_->layout.small_inputs_bytes + 7) / 8 * 8;
    const std::size_t cache_loc_bytes = static_cast<std::size_t>(plan_->max_rows()) *
                                        static_cast<std::size_t>(c.slot_stride) *
                                        sizeof(std::int64_t);
    for (std::int32_t i = 0; i < staging_slots; ++i) {
      auto s = std::make_unique<staging_slot>();
      s->memory = pinned_buffer(*ex_, small + cache_loc_bytes);
      std::memset(s->memory.data(), 0, s->memory.size());
      s->copied = event_handle(*ex_);
      s->cache_loc_offset = small;
      staging_.push_back(std::move(s));
    }
    ex_->synchronize();
  }
  if (plan_->layout.verify.enabled()) {
    // The engine's tree mask of a verify round is copied here (stage_verify): B * D * (M + D)
    // cells, the most a round of the largest bucket at seq_len <= M has.
    verify_mask_ =
        device_buffer(*ex_, static_cast<std::size_t>(verify_mask_cells_capacity(
                                plan_->max_bucket(), c.max_context_len, c.verify_tokens)));
    ex_->fill_bytes(verify_mask_.data(), 0, verify_mask_.size());
    verify_graphs_.resize(c.buckets.size());
    for (auto& g : verify_graphs_) g = std::make_unique<graph_slot>();
  }
  if (plan_->layout.extend.enabled()) {
    extend_graphs_.resize(c.buckets.size());
    for (auto& g : extend_graphs_) g = std::make_unique<graph_slot>();
  }
  forwards_.resize(static_cast<std::size_t>(c.num_steps));
  graphs_.resize(c.buckets.size() * static_cast<std::size_t>(c.num_steps + 1));
  for (auto& g : graphs_) g = std::make_unique<graph_slot>();
  // NVTX messages are registered once here, so the hot paths only push handles.
  for (std::int32_t s = 0; s < c.num_steps; ++s) {
    nvtx_capture_.push_back(detail::nvtx_register(("capture step " + std::to_string(s)).c_str()));
    nvtx_replay_.push_back(detail::nvtx_register(("replay step " + std::to_string(s)).c_str()));
  }
  nvtx_stage_ = detail::nvtx_register("stage");
  nvtx_round_ = detail::nvtx_register("round");
  nvtx_capture_round_ = detail::nvtx_register("capture round");
  nvtx_replay_round_ = detail::nvtx_register("replay round");
}

draft_runtime::~draft_runtime() {
  // Pinned slots may still be read by queued copies: wait for them before freeing.
  try {
    if (failure_.empty() && !ex_->capturing()) {
      for (const auto& s : staging_) {
        if (s->in_flight) ex_->synchronize_event(s->copied.get());
      }
    }
  } catch (...) {  // a broken device: nothing left to wait for
  }
}

void draft_runtime::set_forward(forward_fn f) {
  forward_all_ = std::move(f);
}

void draft_runtime::set_condition(condition_fn f) {
  SPECGRAPH_EXPECTS(plan_->config.device_depth, "device_depth",
                    "false: only a device-depth round graph has a condition");
  condition_ = std::move(f);
}

void draft_runtime::set_forward(std::int32_t step, forward_fn f) {
  detail::in_range("step", step, 0, plan_->config.num_steps, "num_steps");
  SPECGRAPH_EXPECTS(!plan_->config.device_steps, "step",
                    "a per-step forward needs per-step graphs (device_steps captures one forward "
                    "for every step)");
  forwards_[static_cast<std::size_t>(step)] = std::move(f);
}

step_view draft_runtime::view(std::int32_t bucket, std::int32_t step) const {
  step_view v = buffers_.view(bucket, step);
  v.ex = ex_;
  v.stream = ex_->stream();
  return v;
}

void draft_runtime::ensure_usable() const {
  if (!failure_.empty()) {
    throw error("specgraph runtime refuses to continue after a CUDA error (" + failure_ +
                "); create a new executor and runtime");
  }
}

void draft_runtime::set_staged(std::int32_t batch, std::int32_t bucket) {
  const std::vector<std::int32_t>& buckets = plan_->config.buckets;
  bucket_ = bucket;
  bucket_index_ = static_cast<std::int32_t>(
      std::lower_bound(buckets.begin(), buckets.end(), bucket) - buckets.begin());
  batch_ = batch;
  next_step_ = 0;
  verify_bucket_ = 0;  // the staged requests changed: a verify round needs stage_verify again
  extend_bucket_ = 0;  // and an extend round its verify round's accepted lengths
}

namespace {

std::int64_t load(const index_array& a, std::size_t i) {
  return a.type == index_type::int64 ? static_cast<const std::int64_t*>(a.data)[i]
                                     : static_cast<const std::int32_t*>(a.data)[i];
}

}  // namespace

void draft_runtime::bind_inputs(const engine_inputs& in) {
  ensure_usable();
  SPECGRAPH_EXPECTS(!captured_, "inputs",
                    "bound after capture(): the graphs read the staged inputs (bind them first)");
  source_ = round_source(*plan_, in);  // checked here, once: the ops carry it unchecked
}

void draft_runtime::begin_round(std::int32_t bucket, std::int32_t max_depth, float min_confidence) {
  ensure_usable();
  SPECGRAPH_EXPECTS(inputs_bound(), "inputs",
                    "none bound: begin_round reads the engine's inputs in place (bind_inputs "
                    "first, or stage() the round)");
  SPECGRAPH_EXPECTS(plan_->has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
  check_round_control(plan_->config, max_depth, min_confidence);
  // Every mode: the round's control words, and its start for the order check (docs/metadata.md
  // section 11).
  guarding_cuda([&] { specgraph::begin_round(*ex_, buffers_, max_depth, min_confidence); });
  set_staged(bucket, bucket);  // the real batch is the engine's (its real_batch word, if any)
}

namespace {

void refuse_staging(bool bound) {
  SPECGRAPH_EXPECTS(!bound, "inputs",
                    "bound with bind_inputs: the graphs read the engine's inputs in place, so "
                    "there is nothing to stage (call begin_round(bucket))");
}

}  // namespace

void draft_runtime::stage(const round_inputs& in) {
  ensure_usable();
  refuse_staging(inputs_bound());
  const draft_config& c = plan_->config;
  detail::nvtx_range r(nvtx_stage_, in.batch);
  detail::between("batch", in.batch, 0, c.max_batch, "max_batch");
  if (in.batch > 0) {  // an idle rank (batch 0) reads no input
    detail::not_null("req_pool_index", in.req_pool_index.data);
    detail::not_null("seq_len", in.seq_len.data);
    detail::not_null("out_cache_loc", in.out_cache_loc.data);
    SPECGRAPH_EXPECTS(
        in.out_cache_loc.type == index_type::int32 || in.out_cache_loc.type == index_type::int64,
        "out_cache_loc",
        "index type " + std::to_string(static_cast<int>(in.out_cache_loc.type)) +
            " is not int32 or int64");
  }
  check_round_control(c, in.max_depth, in.min_confidence);
  const std::int32_t bucket = plan_->round_bucket(in.batch, in.bucket);

  // Validate everything before anything is enqueued: a rejected round leaves the static inputs
  // untouched and enqueues nothing (the slots' check may write a free staging slot, below,
  // which nothing reads until a stage() enqueues its copies). Checks in int64, so no value is
  // narrowed first.
  for (std::int32_t i = 0; i < in.batch; ++i) {
    // The field name is built only on failure: this loop runs for every request of every round.
    const std::int64_t pool_row = load(in.req_pool_index, static_cast<std::size_t>(i));
    if (pool_row < 0 || pool_row >= c.pool_rows) {
      detail::in_range(indexed("req_pool_index", i), pool_row, 0, c.pool_rows, "pool_rows");
    }
    const std::int64_t len = load(in.seq_len, static_cast<std::size_t>(i));
    SPECGRAPH_EXPECTS(len >= 1 && len <= c.max_context_len, indexed("seq_len", i),
                      std::to_string(len) + " is outside [1, max_context_len " +
                          std::to_string(c.max_context_len) + "]");
  }
  const auto stride = static_cast<std::size_t>(c.slot_stride);  // >= num_steps
  const auto read = static_cast<std::size_t>(c.num_steps);      // slots the forwards read
  const std::size_t per_request = static_cast<std::size_t>(c.topk) * stride;
  const std::size_t real_rows =
      static_cast<std::size_t>(in.batch) * static_cast<std::size_t>(c.topk);
  // The slots' range first, branch-free and vectorisable (this runs over bucket * topk *
  // num_steps values every round): with last = kv_slots - 1 < 2^62, bit 63 of
  // slot | (last - slot), in unsigned arithmetic, is set exactly when slot < 0 (its own sign
  // bit) or slot > last (the difference wraps). The element is named only on failure. Only the
  // first num_steps slots of each row are checked: the slot_stride - num_steps after them are
  // never read, so whatever the engine keeps there is not an error.
  //
  // When this ring slot is free (its copies of three stage() calls ago have run: nearly always)
  // the check is fused with the copy into the slot, which nothing reads until this stage()
  // enqueues its copies: a rejected round then leaves bytes in an unused slot, never in the
  // static inputs. Otherwise the slots are checked first and copied after the wait below, so a
  // rejected round never waits for the device.
  const auto last = static_cast<std::uint64_t>(c.kv_slots - 1);
  staging_slot& s = *staging_[next_staging_];
  bool slot_free = !s.in_flight;
  if (!slot_free && !ex_->capturing()) {
    guarding_cuda([&] { slot_free = ex_->event_complete(s.copied.get()); });
  }
  const bool wide = in.out_cache_loc.type == index_type::int64;
  auto* slots = reinterpret_cast<std::int64_t*>(s.memory.as<unsigned char>() +  // NOLINT
                                                s.cache_loc_offset);
  const auto stage_slots = [&](bool copy) {
    if (real_rows == 0) return std::uint64_t{0};
    if (wide) {
      const auto* from = static_cast<const std::int64_t*>(in.out_cache_loc.data);
      return copy ? detail::copy_slot_rows(slots, from, real_rows, stride, read, last)
                  : detail::slot_range_bits(from, real_rows, stride, read, last);
    }
    const auto* from = static_cast<const std::int32_t*>(in.out_cache_loc.data);
    return copy ? detail::copy_slot_rows(slots, from, real_rows, stride, read, last)
                : detail::slot_range_bits(from, real_rows, stride, read, last);
  };
  const std::uint64_t bits = stage_slots(slot_free);
  const bool any_bad = (bits >> 63) != 0;
  for (std::size_t row = 0; any_bad && row < real_rows; ++row) {
    for (std::size_t j = 0; j < read; ++j) {
      const std::int64_t slot = load(in.out_cache_loc, row * stride + j);
      if (slot >= 0 && slot < c.kv_slots) continue;
      SPECGRAPH_EXPECTS(
          false,
          "out_cache_loc[" + std::to_string(row / static_cast<std::size_t>(c.topk)) + "][" +
              std::to_string(row % static_cast<std::size_t>(c.topk)) + "][" + std::to_string(j) +
              "]",
          std::to_string(slot) + " is outside [0, kv_slots " + std::to_string(c.kv_slots) + ")");
    }
  }

  guarding_cuda([&] {
    // The ring is full only when this slot's copies (three stage() calls ago) have not run yet.
    if (s.in_flight && !slot_free) ex_->synchronize_event(s.copied.get());
    // The engine's event first: the copies and the round after them wait for what it wrote.
    if (in.wait_for != nullptr) ex_->wait_event(in.wait_for);
    if (!slot_free) (void)stage_slots(true);
    fill_staging_slot(s, in, bucket);
    // Host staging validated everything: its guard word is clean.
    ex_->fill_bytes(buffers_.guards() + plan_layout::guard_stage, 0, sizeof(guard_word));
    // A new round (the slot sets the progress word to staged): the round.order word reset.
    ex_->fill_bytes(buffers_.guards() + plan_->layout.guard_order, 0, sizeof(guard_word));
    const auto* base = s.memory.as<unsigned char>();
    ex_->copy_from_pinned(buffers_.real_batch(), base, plan_->layout.small_inputs_bytes);
    ex_->copy_from_pinned(buffers_.out_cache_loc(), base + s.cache_loc_offset,
                          static_cast<std::size_t>(bucket) * per_request * sizeof(std::int64_t));
    ex_->record_event(s.copied.get());
    s.in_flight = true;
  });
  next_staging_ = (next_staging_ + 1) % staging_.size();
  set_staged(in.batch, bucket);
}

void draft_runtime::fill_staging_slot(staging_slot& s, const round_inputs& in,
                                      std::int32_t bucket) const {
  const draft_config& c = plan_->config;
  auto* base = s.memory.as<unsigned char>();
  const plan_layout& l = plan_->layout;
  // The slot mirrors the arena's packed small inputs byte for byte.
  auto* real_batch = reinterpret_cast<std::int32_t*>(base);  // NOLINT: pinned staging bytes
  auto* pool = reinterpret_cast<std::int32_t*>(base + (l.req_pool_index - l.real_batch));
  auto* seq = reinterpret_cast<std::int32_t*>(base + (l.seq_len - l.real_batch));
  auto* slots = reinterpret_cast<std::int64_t*>(base + s.cache_loc_offset);
  *real_batch = in.batch;
  // The round's control words: a new round starts at step 0.
  *reinterpret_cast<std::int32_t*>(base + (l.device_step - l.real_batch)) = 0;  // NOLINT
  *reinterpret_cast<std::int32_t*>(base + (l.max_depth - l.real_batch)) =       // NOLINT
      in.max_depth > 0 ? in.max_depth : c.num_steps;
  *reinterpret_cast<float*>(base + (l.min_confidence - l.real_batch)) =  // NOLINT
      in.min_confidence;
  *reinterpret_cast<std::int32_t*>(base + (l.iterations - l.real_batch)) = 0;  // NOLINT
  *reinterpret_cast<std::int32_t*>(base + (l.progress - l.real_batch)) =       // NOLINT
      static_cast<std::int32_t>(round_progress::staged);
  for (std::int32_t i = 0; i < in.batch; ++i) {
    const auto at = static_cast<std::size_t>(i);
    pool[i] = static_cast<std::int32_t>(load(in.req_pool_index, at));  // checked: fits
    seq[i] = static_cast<std::int32_t>(load(in.seq_len, at));
  }
  // Padded rows: one token on the reserved dummy slot/page 0. Always reset: stale values in
  // padded rows were behind real crashes.
  for (std::int32_t i = in.batch; i < bucket; ++i) {
    pool[i] = 0;
    seq[i] = 1;
  }
  const std::size_t per_request = static_cast<std::size_t>(c.topk) * c.slot_stride;
  const std::size_t real_slots = static_cast<std::size_t>(in.batch) * per_request;
  // The real rows were copied by stage() (copy_slot_rows, with their check); the padded ones:
  std::fill(slots + real_slots, slots + static_cast<std::size_t>(bucket) * per_request, 0);
}

void draft_runtime::stage_device(const device_round_inputs& in) {
  ensure_usable();
  refuse_staging(inputs_bound());
  detail::nvtx_range r(nvtx_stage_, in.batch);
  std::int32_t bucket = 0;
  guarding_cuda([&] { bucket = stage_round(*ex_, buffers_, in); });
  set_staged(in.batch, bucket);
}

std::vector<guard_word> draft_runtime::read_guards() {
  ensure_usable();
  std::vector<guard_word> out;
  guarding_cuda([&] { out = specgraph::read_guards(*ex_, buffers_); });
  return out;
}

void draft_runtime::check_guards() {
  raise_guard_violations(*plan_, read_guards(), bucket_);
}

}  // namespace specgraph
