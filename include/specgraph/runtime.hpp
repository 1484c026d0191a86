// The draft runtime: what an engine links in.
//
//   draft_runtime rt(executor, config, {req_to_token});   // plan + one arena allocation
//   rt.set_forward([&](const step_view& v) { ... engine kernels on v.ex ... });
//   rt.capture();                 // graph(B, s) for every bucket B (largest first) and step s
//   per round:
//     rt.stage(inputs);           // copy + pad into the static inputs of the smallest bucket >= bs
//     rt.run_round(depth);        // replay steps 0..depth-1 (or rt.replay(s) one at a time)
//
// graph(B, s) = [step-s metadata kernels reading the static inputs] + [forward(s)]. The
// step-invariant prefix metadata (and the guard reset) is part of graph(B, 0) only, so it runs
// once per round; steps must therefore be replayed in order 0, 1, ... after each stage().
//
// Slice-before-scatter: graph(B, s) reads only the first d = s + 1 slots of each out_cache_loc
// row, into a page table d + 1 columns wide, so no input can make it write past a row.
//
// Threading: one runtime per executor; not thread-safe. Streams: everything is enqueued on the
// executor's stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/metadata.hpp"
#include "specgraph/plan.hpp"

namespace specgraph {

// The sparse index buffers of the plan (all null when the config has no sparse settings).
struct sparse_view {
  std::int32_t heads = 0;
  std::int32_t* vertical_in = nullptr;  // [heads][vertical_in_stride]: the engine's selection
  std::int32_t vertical_in_stride = 0;
  std::int32_t* vertical_count_in = nullptr;  // [heads]
  std::int32_t* vertical_size = nullptr;      // [heads], filled from the config by the runtime
  std::int32_t* slash_in = nullptr;
  std::int32_t slash_in_stride = 0;
  std::int32_t* slash_count_in = nullptr;
  std::int32_t* slash_size = nullptr;
  struct stage_buffers {
    std::int32_t* vertical = nullptr;  // [heads][vertical_capacity]
    std::int32_t vertical_capacity = 0;
    std::int32_t* vertical_count = nullptr;
    std::int32_t* slash = nullptr;  // [heads][slash_capacity]
    std::int32_t slash_capacity = 0;
    std::int32_t* slash_count = nullptr;
    guard_word* guard = nullptr;
  } stages[3];  // indexed by stage_kind

  bool enabled() const { return heads > 0; }
  // Params for launch_sparse_stage() staging `stage` from the input buffers into the
  // stage-kind's buffers.
  sparse_stage_params params(const sparse_stage& stage) const;
};

// What a forward sees for graph(bucket, step). Every pointer is into the runtime's arena and
// stays valid for the runtime's lifetime; every table comes with its capacity.
struct step_view {
  executor* ex = nullptr;
  device_stream stream = nullptr;  // the executor's stream (null on the host executor)
  std::int32_t bucket = 0;
  std::int32_t step = 0;
  std::int32_t decode_length = 0;  // step + 1
  std::int32_t topk = 0;
  std::int32_t page_size = 0;
  std::int32_t rows = 0;  // bucket * topk query rows (padded rows included)

  // Static inputs (padded to the bucket by stage()).
  const std::int32_t* req_pool_index = nullptr;  // [bucket]
  const std::int32_t* seq_len = nullptr;         // [bucket]
  const std::int64_t* out_cache_loc = nullptr;   // [bucket*topk][cache_loc_stride]
  std::int64_t cache_loc_stride = 0;             // num_steps
  const std::int32_t* real_batch = nullptr;      // [1] the staged real batch

  // Step-invariant prefix metadata (computed in step 0 of the round).
  const std::int32_t* last_page_len = nullptr;      // [bucket]
  const std::int32_t* prefix_seqlen = nullptr;      // [bucket]
  const std::int32_t* prefix_page_table = nullptr;  // [bucket][prefix_stride]
  std::int64_t prefix_stride = 0;
  std::int32_t prefix_capacity = 0;            // ceil(max_context_len / page_size)
  const std::int32_t* cu_seqlens_q = nullptr;  // [bucket + 1]

  // This step's expand metadata.
  const std::int32_t* expand_page_table = nullptr;    // [rows][expand_capacity]
  std::int32_t expand_capacity = 0;                   // d + 1
  const std::int32_t* expand_cache_seqlen = nullptr;  // [rows]

  sparse_view sparse;
};

// Host memory describing one draft round; copied by stage().
struct round_inputs {
  std::int32_t batch = 0;                        // real requests, 1..max_batch
  const std::int32_t* req_pool_index = nullptr;  // [batch]
  const std::int32_t* seq_len = nullptr;         // [batch]
  const std::int64_t* out_cache_loc = nullptr;   // [batch][topk][num_steps]
};

// The same round in executor memory (what an engine already holds on the GPU); staged by
// stage_device() without passing through the host.
struct device_round_inputs {
  std::int32_t batch = 0;                        // real requests, 1..max_batch
  const std::int32_t* req_pool_index = nullptr;  // [batch], executor memory
  const std::int32_t* seq_len = nullptr;         // [batch], executor memory
  const std::int64_t* out_cache_loc = nullptr;   // [batch][topk][num_steps], executor memory
};

// The engine tables the metadata kernels read (executor memory, owned by the engine; must stay
// at the same address for the runtime's lifetime: the graphs bake the pointer in).
struct engine_tables {
  const std::int32_t* req_to_token = nullptr;  // [pool_rows][max_context_len]
};

struct graph_timing {
  std::int32_t bucket = 0;
  std::int32_t step = 0;
  std::size_t nodes = 0;
  double capture_seconds = 0;
  double instantiate_seconds = 0;  // instantiate or update
  bool updated = false;  // true when cudaGraphExecUpdate (or the host equivalent) was used
};

struct capture_report {
  std::int32_t graphs = 0;
  std::int32_t instantiated = 0;
  std::int32_t updated = 0;
  double total_seconds = 0;
  std::vector<graph_timing> per_graph;  // in capture order (largest bucket first)
};

// Capture of graph(bucket, step) failed; the runtime stays usable (capture again after fixing).
class capture_failed : public error {
 public:
  capture_failed(std::int32_t bucket, std::int32_t step, const std::string& what)
      : error(what), bucket_(bucket), step_(step) {}
  std::int32_t bucket() const noexcept { return bucket_; }
  std::int32_t step() const noexcept { return step_; }

 private:
  std::int32_t bucket_, step_;
};

class draft_runtime {
 public:
  using forward_fn = std::function<void(const step_view&)>;

  // Plans and allocates the arena (one executor allocation). Not capture-safe (allocates).
  draft_runtime(executor& ex, const draft_config& config, engine_tables tables);
  ~draft_runtime();
  draft_runtime(const draft_runtime&) = delete;
  draft_runtime& operator=(const draft_runtime&) = delete;

  const specgraph::plan& plan() const noexcept { return plan_; }
  executor& exec() noexcept { return *ex_; }

  // The engine's forward for every step, or for one step (overrides the all-steps one). Called
  // during capture() only, once per (bucket, step), with the executor capturing.
  void set_forward(forward_fn f);
  void set_forward(std::int32_t step, forward_fn f);

  // Captures graph(B, s) for every bucket (largest first) and step. Called again, it re-captures
  // and updates the existing graph execs in place where the topology allows. Synchronous host
  // work; throws capture_failed naming (bucket, step) when the forward throws or does something
  // capture forbids, leaving the runtime usable.
  // `progress(done, total)`, when given, is called after each graph (for progress bars).
  capture_report capture(const std::function<void(int, int)>& progress = {});
  bool captured() const noexcept { return captured_; }
  // Captures graph(bucket, step) and returns it without instantiating (capture() does both for
  // every pair); step = all_steps captures the whole-round graph. For inspection and benchmarks;
  // throws capture_failed like capture().
  std::unique_ptr<graph> capture_graph(std::int32_t bucket, std::int32_t step);

  // Copies one round's inputs into the static inputs of the smallest bucket >= batch and resets
  // the padded rows (seq_len 1, req_pool_index 0, every slot 0). Validates everything first and
  // throws invalid_argument naming the field before anything is written. Enqueues two copies;
  // does not synchronise or allocate.
  void stage(const round_inputs& in);
  // The same from executor memory: three stream-ordered device copies, the real batch, and a
  // kernel that resets the padded rows. No synchronisation, no host read of the inputs, so their
  // contents cannot be checked before they are written: the metadata kernels check them instead
  // (a pool row, seq_len or slot out of range leaves that row unwritten and records a bad_input
  // guard violation, raised by check_guards() / run_round() in checked mode). The batch and the
  // pointers are checked on the host first.
  void stage_device(const device_round_inputs& in);
  std::int32_t staged_bucket() const noexcept { return bucket_; }
  std::int32_t staged_batch() const noexcept { return batch_; }

  // Launches graph(staged bucket, step). Steps run in order after each stage(): step 0, then
  // 1, ... (step 0 may be replayed again to restart the round). Never allocates or synchronises.
  void replay(std::int32_t step);
  // Runs the same work as replay(step) without a graph: the step's metadata kernels and the
  // forward launched one by one on the stream (for graph-vs-eager comparisons and debugging).
  // Same ordering rules as replay(); never allocates or synchronises.
  void run_eager(std::int32_t step);
  // Replays steps 0..depth-1 (depth may be below num_steps: adaptive speculation): one launch of
  // the whole-round graph when config.round_graphs and depth == num_steps, else one launch per
  // step. In checked mode it then synchronises, reads the guard words and throws
  // guard_violation on any.
  void run_round(std::int32_t depth);

  // Synchronises and reads the guard words back (one per launch site). Not during capture.
  std::vector<guard_word> read_guards();
  // Throws guard_violation naming buffer, step, bucket and row when any guard word is set.
  void check_guards();

  // The view a forward gets for graph(bucket, step); also useful to read results in tests.
  step_view view(std::int32_t bucket, std::int32_t step) const;
  // Typed pointer to a plan buffer inside the arena.
  template <class T>
  T* buffer(const std::string& name, std::int32_t step = all_steps) const {
    return reinterpret_cast<T*>(arena_base() + plan_.find(name, step).offset);
  }

  // Writes one Graphviz file per captured graph into `directory` (bucket<B>_step<s>.dot).
  void write_dot(const std::string& directory) const;

 private:
  struct graph_slot;
  unsigned char* arena_base() const noexcept;
  void record_graph_body(std::int32_t bucket, std::int32_t step);
  void check_replay_step(std::int32_t step) const;
  graph_slot& slot(std::size_t bucket_index, std::int32_t step) const;  // all_steps: round
  void ensure_usable() const;
  template <class F>
  void guarding_cuda(F&& body);
  void set_staged(std::int32_t batch, std::int32_t bucket);
  // The checks stage() and stage_device() share; returns the round's bucket.
  std::int32_t check_round(std::int32_t batch, const void* req_pool_index, const void* seq_len,
                           const void* out_cache_loc) const;

  executor* ex_;
  specgraph::plan plan_;
  engine_tables tables_;
  device_buffer arena_;
  std::vector<forward_fn> forwards_;  // [num_steps]
  forward_fn forward_all_;
  std::vector<std::unique_ptr<graph_slot>> graphs_;  // [bucket index][step, then round]
  bool captured_ = false;
  std::int32_t bucket_ = 0;
  std::int32_t bucket_index_ = -1;
  std::int32_t batch_ = 0;
  std::int32_t next_step_ = 0;
  std::string failure_;  // set after a CUDA error: no more replays
  // Arena pointers used every round, resolved once (plan::find is a name search).
  struct {
    std::int32_t* real_batch = nullptr;
    std::int32_t* req_pool_index = nullptr;
    std::int32_t* seq_len = nullptr;
    std::int64_t* out_cache_loc = nullptr;
    guard_word* guards = nullptr;
    std::size_t guard_bytes = 0;
  } hot_;
  // Host staging, sized by the plan once: [real_batch][req_pool_index][seq_len] and cache_loc.
  std::vector<std::int32_t> staging_small_;
  std::vector<std::int64_t> staging_cache_loc_;
  std::vector<const void*> nvtx_capture_, nvtx_replay_;
  const void* nvtx_stage_ = nullptr;
  const void* nvtx_round_ = nullptr;
  const void* nvtx_capture_round_ = nullptr;
  const void* nvtx_replay_round_ = nullptr;
};

}  // namespace specgraph
