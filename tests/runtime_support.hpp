// A small simulated engine around draft_runtime for the conformance tests: a request pool with
// paged req_to_token rows, random rounds laid out as in docs/metadata.md section 1, and a probe
// forward captured into every graph.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "specgraph/runtime.hpp"
#include "testing/branch_layout.hpp"
#include "testing/probe_forward.hpp"
#include "testing/reference_round.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {

struct host_round {
  std::int32_t batch = 0;
  std::vector<std::int32_t> req_pool_index, seq_len;
  std::vector<std::int64_t> out_cache_loc;
  round_inputs inputs() const {
    round_inputs in;
    in.batch = batch;
    in.req_pool_index = req_pool_index.data();
    in.seq_len = seq_len.data();
    in.out_cache_loc = out_cache_loc.data();
    return in;
  }
};

class sim_engine {
 public:
  // `arena`, when given, is caller memory for the runtime (plan.total_bytes, aligned).
  sim_engine(executor& ex, draft_config config, std::mt19937_64& rng, void* arena = nullptr)
      : ex_(&ex), config_(config) {
    const std::int32_t ps = config.page_size;
    const std::int32_t pages_per_row = (config.max_context_len + ps - 1) / ps;
    // Pool row 0 is the padding target; its tokens sit on page 0 like the reserved dummy.
    std::vector<std::int32_t> pages(static_cast<std::size_t>(config.pool_rows) * pages_per_row);
    std::iota(pages.begin(), pages.end(), 1);
    std::shuffle(pages.begin(), pages.end(), rng);
    req_to_token_.assign(static_cast<std::size_t>(config.pool_rows) * config.max_context_len, 0);
    for (std::int32_t row = 1; row < config.pool_rows; ++row) {
      for (std::int32_t pos = 0; pos < config.max_context_len; ++pos) {
        req_to_token_[static_cast<std::size_t>(row) * config.max_context_len + pos] =
            pages[static_cast<std::size_t>(row * pages_per_row + pos / ps)] * ps + pos % ps;
      }
    }
    device_rtt_ = device_buffer(ex, req_to_token_.size() * sizeof(std::int32_t));
    ex.copy_to_device(device_rtt_.data(), req_to_token_.data(),
                      req_to_token_.size() * sizeof(std::int32_t));
    runtime_ = arena == nullptr ? std::make_unique<draft_runtime>(ex, config, tables())
                                : std::make_unique<draft_runtime>(ex, config, tables(), arena);
    const std::size_t rows = static_cast<std::size_t>(runtime_->plan().max_bucket()) * config.topk;
    probe_out_ =
        device_buffer(ex, rows * static_cast<std::size_t>(config.num_steps) * sizeof(std::int64_t));
    ex.fill_bytes(probe_out_.data(), 0, probe_out_.size());
    ex.synchronize();
    runtime_->set_forward([this](const step_view& v) { probe_forward(v); });
  }

  void probe_forward(const step_view& v) {
    probe_forward(*v.ex, v, probe_out(v.step), static_cast<std::int64_t>(probe_stride()));
  }
  // The probe over any view (the runtime's, or buffers an engine drives itself) into `out`.
  // `out_step_stride` places step s's output at out + s * stride (device step counter mode).
  static void probe_forward(executor& ex, const step_view& v, std::int64_t* out,
                            std::int64_t out_step_stride = 0) {
    launch_engine_probe(ex, v, out, out_step_stride);
  }

  std::size_t probe_stride() const {
    return static_cast<std::size_t>(runtime_->plan().max_bucket()) * config_.topk;
  }
  std::int64_t* probe_out(std::int32_t step) const {
    const std::size_t rows = static_cast<std::size_t>(runtime_->plan().max_bucket()) * config_.topk;
    return probe_out_.as<std::int64_t>() + static_cast<std::size_t>(step) * rows;
  }

  host_round random_round(std::mt19937_64& rng, std::int32_t batch) const {
    host_round r;
    r.batch = batch;
    const branch_round b = make_branch_round(rng, batch, config_.topk, config_.num_steps,
                                             config_.page_size, config_.max_context_len);
    r.seq_len = b.seq_len;
    r.out_cache_loc = b.cache_loc;
    std::vector<std::int32_t> rows(static_cast<std::size_t>(config_.pool_rows - 1));
    std::iota(rows.begin(), rows.end(), 1);
    std::shuffle(rows.begin(), rows.end(), rng);
    r.req_pool_index.assign(rows.begin(), rows.begin() + batch);
    return r;
  }

  draft_runtime& rt() { return *runtime_; }

  // The independent model's view of this engine's configuration (its own copy of the buckets:
  // a bucket list is data the test controls, the choice among them the model makes itself).
  model_config model() const {
    model_config m;
    m.topk = config_.topk;
    m.num_steps = config_.num_steps;
    m.page_size = config_.page_size;
    m.max_context_len = config_.max_context_len;
    m.buckets = runtime_->plan().config.buckets;
    m.slot_stride = runtime_->plan().config.slot_stride;
    return m;
  }
  model_round model_of(const host_round& r, std::int32_t depth) const {
    return model_draft_round(model(), req_to_token_, r.batch, r.req_pool_index, r.seq_len,
                             r.out_cache_loc, depth);
  }
  // Every byte of the arena and of the probe outputs poisoned, so a step that does not run (or
  // a cell that is not written) cannot pass a comparison by leftovers of an earlier round.
  void poison() {
    ex_->fill_bytes(runtime_->buffers().base(), 0xA5, runtime_->plan().total_bytes);
    ex_->fill_bytes(probe_out_.data(), 0xA5, probe_out_.size());
  }
  engine_tables tables() const { return engine_tables{device_rtt_.as<std::int32_t>()}; }
  // The engine rewriting its req_to_token mid-round (every byte `value`), and back.
  void overwrite_req_to_token(unsigned char value) {
    ex_->fill_bytes(device_rtt_.data(), value, device_rtt_.size());
  }
  void restore_req_to_token() {
    ex_->copy_to_device(device_rtt_.data(), req_to_token_.data(), device_rtt_.size());
    ex_->synchronize();
  }
  const std::vector<std::int32_t>& req_to_token() const { return req_to_token_; }
  const draft_config& config() const { return config_; }

  template <class T>
  std::vector<T> read(const T* p, std::size_t n) const {
    std::vector<T> out(n);
    if (n > 0) ex_->copy_to_host(out.data(), p, n * sizeof(T));
    return out;
  }

 private:
  executor* ex_;
  draft_config config_;
  std::vector<std::int32_t> req_to_token_;
  device_buffer device_rtt_;
  std::unique_ptr<draft_runtime> runtime_;
  device_buffer probe_out_;
};

// Everything the staged round of `eng` shows for steps 0..depth-1 equals the model, padded rows
// included: the static inputs, the prefix tables, each step's expand table and cache_seqlen, and
// what the engine probe read inside the graph.
inline void expect_matches_model(sim_engine& eng, const model_round& want, std::int32_t depth) {
  const draft_runtime& rt = eng.rt();
  const draft_buffers& b = rt.buffers();
  const auto B = static_cast<std::size_t>(want.bucket);
  const std::size_t rows = B * static_cast<std::size_t>(eng.config().topk);
  ASSERT_EQ(rt.staged_bucket(), want.bucket);
  EXPECT_EQ(eng.read(b.real_batch(), 1)[0], want.real_batch) << "real_batch";
  EXPECT_EQ(eng.read(b.req_pool_index(), B), want.req_pool_index) << "req_pool_index";
  EXPECT_EQ(eng.read(b.seq_len(), B), want.seq_len) << "seq_len";
  EXPECT_EQ(eng.read(b.out_cache_loc(), want.out_cache_loc.size()), want.out_cache_loc)
      << "out_cache_loc";
  EXPECT_EQ(eng.read(b.last_page_len(), B), want.last_page_len) << "last_page_len";
  EXPECT_EQ(eng.read(b.prefix_seqlen(), B), want.prefix_seqlen) << "prefix_seqlen";
  EXPECT_EQ(eng.read(b.prefix_page_table(), want.prefix_table.size()), want.prefix_table)
      << "prefix page table";
  EXPECT_EQ(eng.read(b.cu_seqlens_q(), B + 1), want.cu_seqlens_q) << "cu_seqlens_q";
  for (std::int32_t s = 0; s < depth; ++s) {
    const auto i = static_cast<std::size_t>(s);
    EXPECT_EQ(eng.read(b.expand_page_table(s), rows * (i + 2)), want.expand_table[i])
        << "expand page table, step " << s;
    EXPECT_EQ(eng.read(b.expand_cache_seqlen(s), rows), want.cache_seqlen[i])
        << "cache_seqlen, step " << s;
    EXPECT_EQ(eng.read(eng.probe_out(s), rows), want.probe[i]) << "forward inputs, step " << s;
  }
}

}  // namespace specgraph::testing
