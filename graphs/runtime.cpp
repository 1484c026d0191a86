#include "specgraph/runtime.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "builtin_kernels.hpp"
#include "checks.hpp"
#include "nvtx.hpp"
#include "pad_inputs.hpp"
#include "specgraph/error.hpp"

namespace specgraph {
namespace {

using detail::indexed;

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

}  // namespace

struct draft_runtime::graph_slot {
  std::unique_ptr<graph> captured;
  std::unique_ptr<graph_exec> exec;
};

sparse_stage_params sparse_view::params(const sparse_stage& stage) const {
  const stage_buffers& out = stages[static_cast<int>(stage.kind)];
  sparse_stage_params p;
  p.vertical = vertical_in;
  p.vertical_stride = vertical_in_stride;
  p.vertical_count = vertical_count_in;
  p.vertical_size = vertical_size;
  p.slash = slash_in;
  p.slash_stride = slash_in_stride;
  p.slash_count = slash_count_in;
  p.slash_size = slash_size;
  p.heads = heads;
  p.stage = stage;
  p.out_vertical = out.vertical;
  p.vertical_capacity = out.vertical_capacity;
  p.out_vertical_count = out.vertical_count;
  p.out_slash = out.slash;
  p.slash_capacity = out.slash_capacity;
  p.out_slash_count = out.slash_count;
  p.guard = out.guard;
  return p;
}

draft_runtime::draft_runtime(executor& ex, const draft_config& config, engine_tables tables)
    : ex_(&ex), plan_(make_plan(config)), tables_(tables) {
  SPECGRAPH_EXPECTS(tables.req_to_token != nullptr, "req_to_token", "null pointer");
  const draft_config& c = plan_.config;
  {
    detail::nvtx_range r(detail::nvtx_register("plan"),
                         static_cast<std::int64_t>(plan_.total_bytes));
    arena_ = device_buffer(ex, plan_.total_bytes);
    // Everything starts defined: zero inputs, tables and guards.
    ex.fill_bytes(arena_.data(), 0, plan_.total_bytes);
    if (c.sparse) {
      ex.copy_to_device(buffer<std::int32_t>("sparse.vertical_size"),
                        c.sparse->vertical_size.data(),
                        c.sparse->vertical_size.size() * sizeof(std::int32_t));
      ex.copy_to_device(buffer<std::int32_t>("sparse.slash_size"), c.sparse->slash_size.data(),
                        c.sparse->slash_size.size() * sizeof(std::int32_t));
    }
    ex.synchronize();
  }
  hot_.real_batch = buffer<std::int32_t>("input.real_batch");
  hot_.req_pool_index = buffer<std::int32_t>("input.req_pool_index");
  hot_.seq_len = buffer<std::int32_t>("input.seq_len");
  hot_.out_cache_loc = buffer<std::int64_t>("input.out_cache_loc");
  hot_.guards = buffer<guard_word>("guards");
  hot_.guard_bytes = plan_.find("guards").bytes;
  forwards_.resize(static_cast<std::size_t>(c.num_steps));
  graphs_.resize(c.buckets.size() * static_cast<std::size_t>(c.num_steps + 1));
  for (auto& slot : graphs_) slot = std::make_unique<graph_slot>();

  const std::size_t max_bucket = static_cast<std::size_t>(plan_.max_bucket());
  staging_small_.assign(1 + 2 * max_bucket, 0);
  staging_cache_loc_.assign(
      max_bucket * static_cast<std::size_t>(c.topk) * static_cast<std::size_t>(c.num_steps), 0);
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

draft_runtime::~draft_runtime() = default;

draft_runtime::graph_slot& draft_runtime::slot(std::size_t bucket_index, std::int32_t step) const {
  const auto per_bucket = static_cast<std::size_t>(plan_.config.num_steps + 1);
  const auto s = static_cast<std::size_t>(step == all_steps ? plan_.config.num_steps : step);
  return *graphs_[bucket_index * per_bucket + s];
}

unsigned char* draft_runtime::arena_base() const noexcept {
  return arena_.as<unsigned char>();
}

void draft_runtime::set_forward(forward_fn f) {
  forward_all_ = std::move(f);
}

void draft_runtime::set_forward(std::int32_t step, forward_fn f) {
  SPECGRAPH_EXPECTS(step >= 0 && step < plan_.config.num_steps, "step",
                    std::to_string(step) + " is outside [0, num_steps " +
                        std::to_string(plan_.config.num_steps) + ")");
  forwards_[static_cast<std::size_t>(step)] = std::move(f);
}

step_view draft_runtime::view(std::int32_t bucket, std::int32_t step) const {
  const draft_config& c = plan_.config;
  SPECGRAPH_EXPECTS(
      step >= 0 && step < c.num_steps, "step",
      std::to_string(step) + " is outside [0, num_steps " + std::to_string(c.num_steps) + ")");
  SPECGRAPH_EXPECTS(std::binary_search(c.buckets.begin(), c.buckets.end(), bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
  step_view v;
  v.ex = ex_;
  v.stream = ex_->stream();
  v.bucket = bucket;
  v.step = step;
  v.decode_length = step + 1;
  v.topk = c.topk;
  v.page_size = c.page_size;
  v.rows = bucket * c.topk;
  v.req_pool_index = buffer<std::int32_t>("input.req_pool_index");
  v.seq_len = buffer<std::int32_t>("input.seq_len");
  v.out_cache_loc = buffer<std::int64_t>("input.out_cache_loc");
  v.cache_loc_stride = c.num_steps;
  v.real_batch = buffer<std::int32_t>("input.real_batch");
  v.last_page_len = buffer<std::int32_t>("prefix.last_page_len");
  v.prefix_seqlen = buffer<std::int32_t>("prefix.seqlen");
  const buffer_spec& prefix = plan_.find("prefix.page_table");
  v.prefix_page_table = buffer<std::int32_t>("prefix.page_table");
  v.prefix_stride = prefix.shape[1];
  v.prefix_capacity = static_cast<std::int32_t>(prefix.capacity);
  v.cu_seqlens_q = buffer<std::int32_t>("prefix.cu_seqlens_q");
  const buffer_spec& expand = plan_.find("expand.page_table", step);
  v.expand_page_table = buffer<std::int32_t>("expand.page_table", step);
  v.expand_capacity = static_cast<std::int32_t>(expand.capacity);
  v.expand_cache_seqlen = buffer<std::int32_t>("expand.cache_seqlen", step);
  if (c.sparse) {
    sparse_view& s = v.sparse;
    s.heads = c.sparse->heads;
    s.vertical_in = buffer<std::int32_t>("sparse.vertical_in");
    s.vertical_in_stride = static_cast<std::int32_t>(plan_.find("sparse.vertical_in").capacity);
    s.vertical_count_in = buffer<std::int32_t>("sparse.vertical_count_in");
    s.vertical_size = buffer<std::int32_t>("sparse.vertical_size");
    s.slash_in = buffer<std::int32_t>("sparse.slash_in");
    s.slash_in_stride = static_cast<std::int32_t>(plan_.find("sparse.slash_in").capacity);
    s.slash_count_in = buffer<std::int32_t>("sparse.slash_count_in");
    s.slash_size = buffer<std::int32_t>("sparse.slash_size");
    const char* kinds[] = {"intra", "succ", "inter"};
    for (int k = 0; k < 3; ++k) {
      const std::string base = std::string("sparse.") + kinds[k];
      auto& out = s.stages[k];
      out.vertical = buffer<std::int32_t>(base + ".vertical");
      out.vertical_capacity = static_cast<std::int32_t>(plan_.find(base + ".vertical").capacity);
      out.vertical_count = buffer<std::int32_t>(base + ".vertical_count");
      out.slash = buffer<std::int32_t>(base + ".slash");
      out.slash_capacity = static_cast<std::int32_t>(plan_.find(base + ".slash").capacity);
      out.slash_count = buffer<std::int32_t>(base + ".slash_count");
      out.guard = buffer<guard_word>("guards") + guard_index_sparse(c, k);
    }
  }
  return v;
}

// The metadata part of graph(bucket, step), then the engine's forward.
void draft_runtime::record_graph_body(std::int32_t bucket, std::int32_t step) {
  const draft_config& c = plan_.config;
  const step_view v = view(bucket, step);
  guard_word* guards = buffer<guard_word>("guards");
  if (step == 0) {
    ex_->fill_bytes(guards, 0, plan_.find("guards").bytes);
    prefix_params p;
    p.req_to_token = tables_.req_to_token;
    p.req_to_token_stride = c.max_context_len;
    p.pool_rows = c.pool_rows;
    p.req_pool_index = v.req_pool_index;
    p.seq_len = v.seq_len;
    p.batch = bucket;
    p.topk = c.topk;
    p.page_size = c.page_size;
    p.last_page_len = buffer<std::int32_t>("prefix.last_page_len");
    p.prefix_seqlen = buffer<std::int32_t>("prefix.seqlen");
    p.page_table = buffer<std::int32_t>("prefix.page_table");
    p.page_table_stride = v.prefix_stride;
    p.capacity = v.prefix_capacity;
    p.cu_seqlens_q = buffer<std::int32_t>("prefix.cu_seqlens_q");
    p.guard = guards + guard_index_prefix();
    p.slot_limit = c.kv_slots;
    launch_prefix_metadata(*ex_, p);
  }
  expand_params e;
  e.cache_loc = v.out_cache_loc;
  e.cache_loc_stride = v.cache_loc_stride;
  e.slots_read = v.decode_length;  // slice-before-scatter: only the first d slots of each row
  e.decode_length = v.decode_length;
  e.last_page_len = v.last_page_len;
  e.batch = bucket;
  e.topk = c.topk;
  e.page_size = c.page_size;
  e.page_table = buffer<std::int32_t>("expand.page_table", step);
  e.page_table_stride = v.expand_capacity;
  e.capacity = v.expand_capacity;
  e.cache_seqlen = buffer<std::int32_t>("expand.cache_seqlen", step);
  e.guard = guards + guard_index_expand(step);
  e.slot_limit = c.kv_slots;
  e.layout_check_batch = c.checked ? v.real_batch : nullptr;
  launch_expand_page_table(*ex_, e);

  const forward_fn& f = forwards_[static_cast<std::size_t>(step)]
                            ? forwards_[static_cast<std::size_t>(step)]
                            : forward_all_;
  if (f) f(v);
}

std::unique_ptr<graph> draft_runtime::capture_graph(std::int32_t bucket, std::int32_t step) {
  ensure_usable();
  const bool round = step == all_steps;
  (void)view(bucket, round ? 0 : step);  // validates bucket and step before capture begins
  ex_->begin_capture();
  try {
    if (round) {
      for (std::int32_t s = 0; s < plan_.config.num_steps; ++s) record_graph_body(bucket, s);
    } else {
      record_graph_body(bucket, step);
    }
    return ex_->end_capture();
  } catch (const std::exception& e) {
    ex_->abort_capture();
    throw capture_failed(bucket, step,
                         "capture of graph (bucket " + std::to_string(bucket) + ", " +
                             (round ? std::string("whole round") : "step " + std::to_string(step)) +
                             ") failed: " + e.what());
  }
}

capture_report draft_runtime::capture(const std::function<void(int, int)>& progress) {
  ensure_usable();
  const draft_config& c = plan_.config;
  capture_report report;
  const auto start = clock_type::now();
  // Largest bucket first: the order engines use, so a memory pool shared across graphs is sized
  // by the first (largest) capture.
  const std::int32_t per_bucket = c.num_steps + (c.round_graphs ? 1 : 0);
  const int total = static_cast<int>(c.buckets.size()) * per_bucket;
  for (std::size_t bi = c.buckets.size(); bi-- > 0;) {
    const std::int32_t bucket = c.buckets[bi];
    for (std::int32_t i = 0; i < per_bucket; ++i) {
      const std::int32_t s = i < c.num_steps ? i : all_steps;  // the round graph comes last
      detail::nvtx_range r(
          s == all_steps ? nvtx_capture_round_ : nvtx_capture_[static_cast<std::size_t>(s)], bucket,
          static_cast<std::uint32_t>(i + 1));
      graph_timing t;
      t.bucket = bucket;
      t.step = s;
      const auto t0 = clock_type::now();
      std::unique_ptr<graph> g = capture_graph(bucket, s);
      t.capture_seconds = seconds_since(t0);
      t.nodes = g->node_count();
      graph_slot& target = slot(bi, s);
      const auto t1 = clock_type::now();
      if (target.exec && ex_->update(*target.exec, *g)) {
        t.updated = true;
        ++report.updated;
      } else {
        target.exec = ex_->instantiate(*g);
        ++report.instantiated;
      }
      t.instantiate_seconds = seconds_since(t1);
      target.captured = std::move(g);
      report.per_graph.push_back(t);
      ++report.graphs;
      if (progress) progress(report.graphs, total);
    }
  }
  report.total_seconds = seconds_since(start);
  captured_ = true;
  return report;
}

void draft_runtime::ensure_usable() const {
  if (!failure_.empty()) {
    throw error("specgraph runtime refuses to continue after a CUDA error (" + failure_ +
                "); create a new executor and runtime");
  }
}

template <class F>
void draft_runtime::guarding_cuda(F&& body) {
  try {
    body();
  } catch (const cuda_error& e) {
    failure_ = e.what();
    throw;
  }
}

std::int32_t draft_runtime::check_round(std::int32_t batch, const void* req_pool_index,
                                        const void* seq_len, const void* out_cache_loc) const {
  const draft_config& c = plan_.config;
  SPECGRAPH_EXPECTS(
      batch >= 1 && batch <= c.max_batch, "batch",
      std::to_string(batch) + " is outside [1, max_batch " + std::to_string(c.max_batch) + "]");
  SPECGRAPH_EXPECTS(req_pool_index != nullptr, "req_pool_index", "null pointer");
  SPECGRAPH_EXPECTS(seq_len != nullptr, "seq_len", "null pointer");
  SPECGRAPH_EXPECTS(out_cache_loc != nullptr, "out_cache_loc", "null pointer");
  return plan_.bucket_for(batch);
}

void draft_runtime::stage(const round_inputs& in) {
  ensure_usable();
  const draft_config& c = plan_.config;
  detail::nvtx_range r(nvtx_stage_, in.batch);
  const std::int32_t bucket =
      check_round(in.batch, in.req_pool_index, in.seq_len, in.out_cache_loc);
  const std::size_t max_bucket = static_cast<std::size_t>(plan_.max_bucket());
  const std::size_t per_request = static_cast<std::size_t>(c.topk) * c.num_steps;

  // Validate while filling the host staging copy; the device is written only after every value
  // passed, so a rejected round leaves the static inputs untouched.
  std::int32_t* pool_index = staging_small_.data() + 1;
  std::int32_t* seq_len = pool_index + max_bucket;
  for (std::int32_t r_ = 0; r_ < in.batch; ++r_) {
    const std::int32_t p = in.req_pool_index[r_];
    SPECGRAPH_EXPECTS(
        p >= 0 && p < c.pool_rows, indexed("req_pool_index", r_),
        std::to_string(p) + " is outside [0, pool_rows " + std::to_string(c.pool_rows) + ")");
    const std::int32_t len = in.seq_len[r_];
    SPECGRAPH_EXPECTS(len >= 1 && len <= c.max_context_len, indexed("seq_len", r_),
                      std::to_string(len) + " is outside [1, max_context_len " +
                          std::to_string(c.max_context_len) + "]");
    pool_index[r_] = p;
    seq_len[r_] = len;
  }
  const std::size_t real_slots = static_cast<std::size_t>(in.batch) * per_request;
  for (std::size_t i = 0; i < real_slots; ++i) {
    const std::int64_t slot = in.out_cache_loc[i];
    if (slot < 0 || slot >= c.kv_slots) {
      const std::size_t row = i / static_cast<std::size_t>(c.num_steps);
      SPECGRAPH_EXPECTS(
          false,
          "out_cache_loc[" + std::to_string(row / c.topk) + "][" + std::to_string(row % c.topk) +
              "][" + std::to_string(i % static_cast<std::size_t>(c.num_steps)) + "]",
          std::to_string(slot) + " is outside [0, kv_slots " + std::to_string(c.kv_slots) + ")");
    }
  }
  std::memcpy(staging_cache_loc_.data(), in.out_cache_loc, real_slots * sizeof(std::int64_t));
  // Padded rows: one token on the reserved dummy slot/page 0. Always reset: stale values in
  // padded rows were behind real crashes.
  for (std::int32_t r_ = in.batch; r_ < bucket; ++r_) {
    pool_index[r_] = 0;
    seq_len[r_] = 1;
  }
  const std::size_t bucket_slots = static_cast<std::size_t>(bucket) * per_request;
  std::fill(staging_cache_loc_.begin() + static_cast<std::ptrdiff_t>(real_slots),
            staging_cache_loc_.begin() + static_cast<std::ptrdiff_t>(bucket_slots), 0);
  staging_small_[0] = in.batch;

  guarding_cuda([&] {
    ex_->copy_to_device(hot_.real_batch, staging_small_.data(),
                        staging_small_.size() * sizeof(std::int32_t));
    ex_->copy_to_device(hot_.out_cache_loc, staging_cache_loc_.data(),
                        bucket_slots * sizeof(std::int64_t));
  });
  set_staged(in.batch, bucket);
}

void draft_runtime::set_staged(std::int32_t batch, std::int32_t bucket) {
  const std::vector<std::int32_t>& buckets = plan_.config.buckets;
  bucket_ = bucket;
  bucket_index_ = static_cast<std::int32_t>(
      std::lower_bound(buckets.begin(), buckets.end(), bucket) - buckets.begin());
  batch_ = batch;
  next_step_ = 0;
}

void draft_runtime::stage_device(const device_round_inputs& in) {
  ensure_usable();
  const draft_config& c = plan_.config;
  detail::nvtx_range r(nvtx_stage_, in.batch);
  const std::int32_t bucket =
      check_round(in.batch, in.req_pool_index, in.seq_len, in.out_cache_loc);
  const std::int64_t per_request = static_cast<std::int64_t>(c.topk) * c.num_steps;
  const auto batch = static_cast<std::size_t>(in.batch);
  kernels::pad_inputs_kernel::params pad{};
  pad.req_pool_index = hot_.req_pool_index;
  pad.seq_len = hot_.seq_len;
  pad.out_cache_loc = hot_.out_cache_loc;
  pad.slots_per_request = per_request;
  pad.batch = in.batch;
  staging_small_[0] = in.batch;
  guarding_cuda([&] {
    ex_->copy_on_device(pad.req_pool_index, in.req_pool_index, batch * sizeof(std::int32_t));
    ex_->copy_on_device(pad.seq_len, in.seq_len, batch * sizeof(std::int32_t));
    ex_->copy_on_device(pad.out_cache_loc, in.out_cache_loc,
                        batch * static_cast<std::size_t>(per_request) * sizeof(std::int64_t));
    ex_->copy_to_device(hot_.real_batch, staging_small_.data(), sizeof(std::int32_t));
    if (bucket > in.batch) {
      ex_->launch(make_kernel_launch<kernels::pad_inputs_kernel>(pad, bucket - in.batch,
                                                                 kernels::cuda_pad_inputs()));
    }
  });
  set_staged(in.batch, bucket);
}

void draft_runtime::check_replay_step(std::int32_t step) const {
  ensure_usable();
  const draft_config& c = plan_.config;
  if (bucket_ == 0) throw error("replay before stage(): no round inputs are staged");
  SPECGRAPH_EXPECTS(
      step >= 0 && step < c.num_steps, "step",
      std::to_string(step) + " is outside [0, num_steps " + std::to_string(c.num_steps) + ")");
  SPECGRAPH_EXPECTS(
      step == 0 || step == next_step_, "step",
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
  detail::nvtx_range r(nvtx_replay_[static_cast<std::size_t>(step)], bucket_,
                       static_cast<std::uint32_t>(step + 1));
  graph_slot& target = slot(static_cast<std::size_t>(bucket_index_), step);
  guarding_cuda([&] { ex_->launch_graph(*target.exec); });
  next_step_ = step + 1;
}

void draft_runtime::run_round(std::int32_t depth) {
  ensure_usable();
  const draft_config& c = plan_.config;
  SPECGRAPH_EXPECTS(
      depth >= 1 && depth <= c.num_steps, "depth",
      std::to_string(depth) + " is outside [1, num_steps " + std::to_string(c.num_steps) + "]");
  {
    detail::nvtx_range r(nvtx_round_, bucket_, static_cast<std::uint32_t>(depth));
    if (c.round_graphs && depth == c.num_steps) {
      if (!captured_) throw error("replay before capture(): no graphs exist yet");
      check_replay_step(0);
      detail::nvtx_range whole(nvtx_replay_round_, bucket_, static_cast<std::uint32_t>(depth));
      graph_slot& target = slot(static_cast<std::size_t>(bucket_index_), all_steps);
      guarding_cuda([&] { ex_->launch_graph(*target.exec); });
      next_step_ = c.num_steps;
    } else {
      for (std::int32_t s = 0; s < depth; ++s) replay(s);
    }
  }
  if (c.checked) check_guards();
}

std::vector<guard_word> draft_runtime::read_guards() {
  ensure_usable();
  std::vector<guard_word> out(hot_.guard_bytes / sizeof(guard_word));
  guarding_cuda([&] { ex_->copy_to_host(out.data(), hot_.guards, hot_.guard_bytes); });
  return out;
}

void draft_runtime::check_guards() {
  const std::vector<guard_word> guards = read_guards();
  const draft_config& c = plan_.config;
  for (std::size_t i = 0; i < guards.size(); ++i) {
    const guard_word& g = guards[i];
    if (g.violations == 0) continue;
    std::string buffer_name;
    std::string step = "all steps";
    const auto index = static_cast<std::int32_t>(i);
    if (index == guard_index_prefix()) {
      buffer_name = "prefix.page_table";
    } else if (index <= c.num_steps) {
      buffer_name = "expand.page_table";
      step = "step " + std::to_string(index - 1);
    } else {
      const char* kinds[] = {"intra", "succ", "inter"};
      buffer_name = std::string("sparse.") + kinds[index - 1 - c.num_steps];
    }
    throw guard_violation(buffer_name + " (" + step + ", bucket " + std::to_string(bucket_) +
                          ", row " + std::to_string(g.row) + "): " + describe(g));
  }
}

void draft_runtime::write_dot(const std::string& directory) const {
  const draft_config& c = plan_.config;
  for (std::size_t bi = 0; bi < c.buckets.size(); ++bi) {
    for (std::int32_t s = 0; s <= c.num_steps; ++s) {
      const std::int32_t step = s < c.num_steps ? s : all_steps;
      const graph_slot& g = slot(bi, step);
      if (!g.captured) continue;
      g.captured->write_dot(
          directory + "/bucket" + std::to_string(c.buckets[bi]) +
          (step == all_steps ? std::string("_round") : "_step" + std::to_string(s)) + ".dot");
    }
  }
}

}  // namespace specgraph
