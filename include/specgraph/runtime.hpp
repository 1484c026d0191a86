// draft_runtime: the C++ driver for engines that let specgraph own capture and replay. It is
// built on the same pieces an engine can compose itself (plan.hpp, buffers.hpp, ops.hpp):
//
//   draft_runtime rt(executor, config, {req_to_token});   // plan + arena (or the caller's)
//   rt.set_forward([&](const step_view& v) { ... engine kernels on v.ex ... });
//   rt.capture();                 // graph(B, s) for every bucket B (largest first) and step s
//   per round:
//     rt.stage(inputs);           // copy + pad into the static inputs of the smallest bucket >= bs
//     rt.run_round(depth);        // replay steps 0..depth-1 (or rt.replay(s) one at a time)
//
// graph(B, s) = [setup_round (step 0 only)] + [step_metadata(s) with FA3] + [csr_indices(s) with
// CSR] + [forward(s)] (the plan's formats decide which metadata; docs/csr.md). The
// step-invariant prefix metadata and the guard reset run in graph(B, 0) only, so steps are
// replayed in order 0, 1, ... after each stage().
//
// Slice-before-scatter: graph(B, s) reads only the first d = s + 1 slots of each out_cache_loc
// row, into a page table d + 1 columns wide, so no input can make it write past a row.
//
// Streams: everything is enqueued on the executor's stream (make_cuda_executor(stream): the
// engine's), where the graphs are captured and replayed. One runtime per executor; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/csr_ops.hpp"
#include "specgraph/engine_inputs.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/extend_ops.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/metadata.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/round_io.hpp"
#include "specgraph/round_ops.hpp"
#include "specgraph/verify_ops.hpp"

namespace specgraph {

// graph_timing::step and capture_failed::step of a verify graph (one per bucket).
inline constexpr std::int32_t verify_graph_step = -2;
// graph_timing::step and capture_failed::step of a draft-extend graph (one per bucket).
inline constexpr std::int32_t extend_graph_step = -3;
// graph_timing::step and capture_failed::step of a device-round graph (one per bucket).
inline constexpr std::int32_t device_round_graph_step = -4;

struct graph_timing {
  std::int32_t bucket = 0;
  // all_steps for a whole-round graph, verify_graph_step / extend_graph_step for verify / extend
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
  std::int32_t verify_graphs = 0;        // of `graphs`: the verify graphs (one per bucket)
  std::int32_t extend_graphs = 0;        // of `graphs`: the draft-extend graphs (one per bucket)
  std::int32_t device_round_graphs = 0;  // of `graphs`: the device-round graphs (one per bucket)
  double total_seconds = 0;
  std::vector<graph_timing> per_graph;  // in capture order (largest bucket first)
};

// Capture of graph(bucket, step) failed because the forward threw or did something capture
// forbids; the runtime stays usable (capture again after fixing). A CUDA error that is not a
// capture error is rethrown as cuda_error instead, and the runtime then refuses further work.
class capture_failed : public error {
 public:
  capture_failed(std::int32_t bucket, std::int32_t step, const std::string& what)
      : error(what), bucket_(bucket), step_(step) {}
  std::int32_t bucket() const noexcept { return bucket_; }
  std::int32_t step() const noexcept { return step_; }

 private:
  std::int32_t bucket_, step_;
};

// Ordering of a round with the engine's other streams (docs/metadata.md section 9): the round's
// work waits for `wait_for` (recorded by the engine once req_to_token, the KV cache and whatever
// else the round reads are written, on any stream), and `done` is recorded after the round's
// last launch: once it completes the engine may read the round's outputs and overwrite what the
// round read. Either may be null. During capture neither applies (rounds are not captured).
struct round_events {
  device_event wait_for = nullptr;
  device_event done = nullptr;
};

// One verify round's inputs in host memory (draft_runtime::stage_verify): the requests whose
// draft trees the target verifies, and the engine's tree mask of the real ones.
struct verify_round_inputs {
  std::int32_t batch = 0;      // real requests, 0..max_batch (0: an idle rank, all padding)
  index_array req_pool_index;  // [batch], int32 or int64, in [0, pool_rows)
  index_array seq_len;         // [batch], without the D verify tokens, in [1, max_context_len]
  // The engine's mask, one byte per cell, its full layout (docs/verify.md section 1):
  // exactly sum(D * (seq_len + D)) cells over the real requests (mask_cells must equal it).
  const std::uint8_t* custom_mask = nullptr;
  std::int64_t mask_cells = 0;
  std::int32_t bucket = 0;  // as round_inputs::bucket: 0 = the smallest bucket >= batch
};

class draft_runtime {
 public:
  using forward_fn = std::function<void(const step_view&)>;
  // Pinned host staging slots behind stage(): a slot is rewritten only after the copies that
  // read it have completed, so stage() waits for the device only when all are in flight.
  static constexpr std::int32_t staging_slots = 3;

  // Plans, allocates the arena (one executor allocation) and the pinned staging ring, and
  // initialises the arena (initialize_buffers). Synchronises once; not capture-safe.
  draft_runtime(executor& ex, const draft_config& config, engine_tables tables);
  // The same over caller memory: `arena` holds make_plan(config).total_bytes bytes,
  // arena_alignment-aligned, and outlives the runtime (e.g. a tensor in the engine's graph
  // memory pool). Nothing outside [arena, arena + total_bytes) is ever written.
  draft_runtime(executor& ex, const draft_config& config, engine_tables tables, void* arena);
  ~draft_runtime();
  draft_runtime(const draft_runtime&) = delete;
  draft_runtime& operator=(const draft_runtime&) = delete;

  const specgraph::plan& plan() const noexcept { return *plan_; }
  const draft_buffers& buffers() const noexcept { return buffers_; }
  executor& exec() noexcept { return *ex_; }

  // The engine's forward for every step, or for one step (overrides the all-steps one). Called
  // during capture() (and run_eager()) only, once per (bucket, step), with the executor
  // capturing; it must enqueue on v.ex / v.stream only.
  void set_forward(forward_fn f);
  void set_forward(std::int32_t step, forward_fn f);
  // device_depth: the engine's own continue signal instead of continue_while_confident. Called
  // during capture of the round graph, inside the WHILE body after the step advanced; it must
  // launch one kernel that calls set_condition(handle, keep_going) (conditional.hpp). The round
  // still ends after num_steps bodies whatever it sets (stop_round_at_limit runs after it).
  using condition_fn = std::function<void(const step_view&, conditional_handle)>;
  void set_condition(condition_fn f);

  // Captures graph(B, s) for every bucket (largest first) and step, and with
  // config.round_graphs a whole-round graph per bucket (and step graphs for steps 0 ..
  // num_steps - 2 only: exactly what the mode replays). Called again, it re-captures and updates
  // the existing graph execs in place where the topology allows. Synchronous host work; throws
  // capture_failed naming (bucket, step) when the forward throws or does something capture
  // forbids, leaving the runtime usable. `progress(done, total)` is called after each graph.
  // With a verify section and a verify forward set, also one verify graph per bucket (largest
  // first, after the draft graphs; capture_failed with step verify_graph_step), and with a
  // draft-extend section and an extend forward set one extend graph per bucket after those
  // (capture_failed with step extend_graph_step), and after bind_round_ring the device-round
  // graphs (capture_failed with step device_round_graph_step).
  capture_report capture(const std::function<void(int, int)>& progress = {});
  bool captured() const noexcept { return captured_; }
  // Captures graph(bucket, step) and returns it without instantiating; step = all_steps
  // captures the whole-round graph. For inspection and benchmarks; throws like capture().
  [[nodiscard]] std::unique_ptr<graph> capture_graph(std::int32_t bucket, std::int32_t step);

  // Copies one round's host inputs into the static inputs of the smallest bucket >= batch and
  // resets the padded rows (seq_len 1, req_pool_index 0, every slot 0). Validates everything
  // first (int32 or int64 indices, no silent narrowing) and throws invalid_argument naming the
  // field before anything is written. The inputs go through a pinned staging slot: two truly
  // asynchronous copies; waits for the device only when every slot is still in flight (counted
  // in executor_counters::event_waits). Does not allocate; the inputs may be reused on return.
  // With in.wait_for the copies, and everything enqueued after them, wait for that event on
  // the device (the host never waits for it). Not during capture.
  void stage(const round_inputs& in);
  // The same from executor memory (stage_round in ops.hpp): one kernel, ordered after
  // in.wait_for and recording in.done. No synchronisation, no host read of the inputs: their
  // contents are checked by the kernels (an out-of-range value has its row written as a padded
  // row and records a bad_input guard violation, raised by check_guards() / run_round() in
  // checked mode). Capture-safe, but normally called before replaying.
  void stage_device(const device_round_inputs& in);
  // Inputs read in place (engine_inputs.hpp; docs/engines.md): binds the engine's own static
  // input tensors once, before capture(): the runtime keeps them as its round_source
  // (round_io.hpp), checked here once (check_engine_inputs) and never again; every graph
  // captured afterwards (and run_eager) reads them where they are, so no round copies anything;
  // stage() and stage_device() are then refused and each round starts with begin_round().
  // Throws invalid_argument naming the field, or "inputs" once graphs were captured (they baked
  // in the staged inputs). Host work only: no stream, no sync; not during capture.
  void bind_inputs(const engine_inputs& in);
  bool inputs_bound() const noexcept { return !source_.staged(); }
  // Where the round's ops read: the staged inputs, or the bound ones (bind_inputs). Host only:
  // no stream, no sync.
  const round_source& source() const noexcept { return source_; }
  // With inputs bound: the next round replays `bucket` (a planned bucket, e.g. the engine's own
  // padded batch size; invalid_argument "bucket" otherwise), reading what the engine wrote into
  // its inputs (order it with run_round's events.wait_for). With device_steps it enqueues
  // begin_round (the step counter, max_depth, min_confidence) on the executor's stream. No
  // sync; not during capture.
  void begin_round(std::int32_t bucket, std::int32_t max_depth = 0,
                   float min_confidence = -std::numeric_limits<float>::infinity());
  std::int32_t staged_bucket() const noexcept { return bucket_; }
  std::int32_t staged_batch() const noexcept { return batch_; }

  // Launches graph(staged bucket, step). Steps run in order after each stage(): step 0, then
  // 1, ... (step 0 may be replayed again to restart the round). With round_graphs the last step
  // has no graph of its own (invalid_argument "step"; run_round(num_steps) runs it). Never
  // allocates or synchronises.
  void replay(std::int32_t step);
  // Runs the same work as replay(step) without a graph: the ops and the forward launched one
  // by one on the stream (graph-vs-eager comparisons, debugging). Same ordering rules as
  // replay(); never allocates or synchronises.
  void run_eager(std::int32_t step);
  // Replays steps 0..depth-1 (depth may be below num_steps: adaptive speculation): one launch of
  // the whole-round graph when config.round_graphs and depth == num_steps, else one launch per
  // step, after waiting (on the device) for events.wait_for and before recording events.done.
  // Stream: the executor's; no synchronisation, except in checked mode, where it then
  // synchronises, reads the guard words and throws guard_violation on any. Not during capture.
  void run_round(std::int32_t depth, const round_events& events = {});
  // config.device_depth: one launch of the round graph, whose WHILE node runs steps while the
  // step is below the staged max_depth and the condition kernel (continue_while_confident, or
  // the one set_condition installs) says so. The depth it ran is left in
  // buffers().device_step() (readable without a sync, e.g. copied to pinned memory by the
  // engine; read_round_depth() synchronises). The launch waits (on the device) for
  // events.wait_for; events.done is recorded after it. Stream: the executor's. Never allocates;
  // synchronises only in checked mode. Not during capture.
  void run_round_on_device(const round_events& events = {});
  // Reads the depth the last round ran (the device step counter). Synchronises.
  [[nodiscard]] std::int32_t read_round_depth();

  // Synchronises and reads the guard words back (plan_layout::guard_count). Not during capture.
  [[nodiscard]] std::vector<guard_word> read_guards();
  // Throws guard_violation naming buffer, step, bucket and row when any guard word is set.
  void check_guards();

  // The view a forward gets for graph(bucket, step), with ex and stream set.
  step_view view(std::int32_t bucket, std::int32_t step) const;

  // ---- target verify (config.verify_tokens = D > 0; docs/verify.md "Plan and graphs") ----
  using verify_forward_fn = std::function<void(const verify_view&)>;
  // The target's verify forward, reading the view's metadata (the plan's formats) and queries;
  // called during capture() (and run_verify_eager()) once per bucket, with the executor
  // capturing; it must enqueue on v.ex / v.stream only. Once set, capture() also captures one
  // verify graph per bucket: verify_metadata (verify_ops.hpp) over the runtime's mask buffer,
  // then this forward. Throws invalid_argument ("verify_tokens") without a verify section.
  void set_verify_forward(verify_forward_fn f);
  // Copies a verify round's host inputs into the staged requests of the smallest bucket >= batch
  // (or in.bucket), padded (seq_len 1, pool row 0: no mask cells, every cell attended), and the
  // mask into the runtime's mask buffer (verify_mask_cells_capacity(B, M, D) bytes, allocated at
  // construction). Validates everything first and throws invalid_argument naming the field
  // ("batch", "bucket", "req_pool_index[i]", "seq_len[i]", "custom_mask": its length against
  // the formula, a seq_len that already counts D named) before anything is written. It
  // overwrites the staged requests of the draft round: finish that round's steps first (draft
  // replay then needs stage() again). Stream-ordered copies (copy_to_device: may block the host
  // until the stream reaches them); no allocation. Not during capture.
  void stage_verify(const verify_round_inputs& in);
  std::int32_t staged_verify_bucket() const noexcept { return verify_bucket_; }
  // Launches the staged bucket's verify graph. Never allocates or synchronises, except in
  // checked mode (then synchronises, reads the guard words and throws guard_violation).
  void replay_verify();
  // The same work without a graph (graph-vs-eager comparisons, debugging).
  void run_verify_eager();
  // Captures the verify graph of `bucket` without instantiating it (inspection, benchmarks).
  [[nodiscard]] std::unique_ptr<graph> capture_verify_graph(std::int32_t bucket);
  // The view the verify forward gets for `bucket`, with ex and stream set.
  verify_view verify_view_of(std::int32_t bucket) const;
  // The runtime's mask buffer (executor memory) and its size in cells (0 without verify).
  const std::uint8_t* verify_mask() const noexcept;
  std::int64_t verify_mask_capacity() const noexcept;

  // ---- draft extend (config.draft_extend, W = verify_tokens; docs/extend-graphs.md) ----
  using extend_forward_fn = std::function<void(const extend_view&)>;
  // The draft model's extend forward over the verify window, reading the view's metadata (the
  // plan's layouts); called during capture() (and run_extend_eager()) once per bucket, with the
  // executor capturing; it must enqueue on v.ex / v.stream only. Once set, capture() also
  // captures one extend graph per bucket: extend_metadata (extend_ops.hpp) over the staged
  // verify round and the section's accepted lengths, then this forward. Throws
  // invalid_argument ("draft_extend") without a draft-extend section.
  void set_extend_forward(extend_forward_fn f);
  // Copies the staged verify round's accepted lengths ([batch] of that round, in [0, W]) into
  // the section (stage_accept_len; padded rows 1). Throws error when no verify round is staged
  // (stage_verify first: the extend round is the verify round's requests, seq_len without the
  // window), invalid_argument ("accept_len" / "accept_len[i]": the count against the verify
  // round's batch, a length outside [0, W]) before anything is written. Stream-ordered copy
  // (may block the host until the stream reaches it); no allocation. Not during capture.
  void stage_extend(const std::vector<std::int32_t>& accept_len);
  std::int32_t staged_extend_bucket() const noexcept { return extend_bucket_; }
  // Launches the staged bucket's extend graph. Never allocates or synchronises, except in
  // checked mode (then synchronises, reads the guard words and throws guard_violation; an
  // accepted length of 0 is recorded in the section's fifth word and raises there too).
  void replay_extend();
  // The same work without a graph (graph-vs-eager comparisons, debugging).
  void run_extend_eager();
  // Captures the extend graph of `bucket` without instantiating it (inspection, benchmarks).
  [[nodiscard]] std::unique_ptr<graph> capture_extend_graph(std::int32_t bucket);
  // The view the extend forward gets for `bucket`, with ex and stream set.
  extend_view extend_view_of(std::int32_t bucket) const;

  // ---- the whole round as one graph (config.round_on_device; docs/round-graphs.md section 6)
  // Binds the engine's req_to_token (mutable; the very array and stride of engine_tables), the
  // ring and the op's options (after_verify_inputs; real_batch -1: the staged word is read) once,
  // before capture(); then capture() also captures one device-round graph per bucket (with a
  // verify forward, an extend forward when draft_extend, device_depth with device_steps).
  // Throws invalid_argument naming the field ("round_on_device", "device_depth",
  // "bind_round_ring" after capture(), or after_verify's). Host work only (allocates the guard
  // summary once): no stream, no sync.
  void bind_round_ring(const after_verify_inputs& in);
  bool round_ring_bound() const noexcept { return round_bound_; }
  // One launch of the staged bucket's device-round graph (draft steps, verify, acceptance,
  // commit, [extend], next round, guard fold), after waiting (on the device) for
  // events.wait_for, before recording events.done. Stream: the executor's; no sync except in
  // checked mode (then read_round_guards and guard_violation). With device_depth the draft
  // steps run as the WHILE node of run_round_on_device, from step 0 each launch, under the
  // max_depth and min_confidence last staged; the depth each round ran is left in
  // buffers().device_step() until the next launch. Refused ("round_on_device", "device_depth",
  // "ring"; error before capture() or stage()) with nothing enqueued. Not during capture.
  void launch_device_round(const round_events& events = {});
  // k in [1, 2^20] launches back to back: no sync, no host work between them, none in checked
  // mode either (check with read_round_guards). Refused like launch_device_round.
  void launch_device_rounds(std::int32_t k);
  // The guard summary (every round-reset word folded over the rounds since the last reset; the
  // staging word and round.order live). Synchronises; not during capture.
  [[nodiscard]] std::vector<guard_word> read_round_guards();
  // Empties the summary: one memset on the executor's stream; no sync; not during capture.
  void reset_round_guards();
  // Captures the device-round graph of `bucket` without instantiating it (inspection).
  [[nodiscard]] std::unique_ptr<graph> capture_device_round_graph(std::int32_t bucket);

  // Writes one Graphviz file per captured graph into `directory` (bucket<B>_step<s>.dot,
  // bucket<B>_round.dot, bucket<B>_verify.dot, bucket<B>_extend.dot,
  // bucket<B>_device_round.dot).
  void write_dot(const std::string& directory) const;

 private:
  struct graph_slot;
  struct staging_slot;
  void init(void* caller_arena);
  void record_graph_body(std::int32_t bucket, std::int32_t step);
  void record_conditional_round(std::int32_t bucket);
  void check_replay_step(std::int32_t step) const;
  graph_slot& slot(std::size_t bucket_index, std::int32_t step) const;  // all_steps: round
  // Updates target's exec in place from g where the topology allows, else instantiates it; keeps
  // g, fills t's nodes / instantiate time and appends t to the report.
  void install_graph(graph_slot& target, std::unique_ptr<graph> g, graph_timing& t,
                     capture_report& report);
  void ensure_usable() const;
  template <class F>
  void guarding_cuda(F&& body);
  void set_staged(std::int32_t batch, std::int32_t bucket);
  void fill_staging_slot(staging_slot& s, const round_inputs& in, std::int32_t bucket) const;
  void record_verify_body(std::int32_t bucket);
  void capture_verify_graphs(capture_report& report, const std::function<void(int, int)>& progress,
                             int total);
  verify_inputs verify_inputs_of() const;
  // accept_index: the device round's (extend_inputs::accept_index); null in the extend graphs.
  void record_extend_body(std::int32_t bucket, const std::int32_t* accept_index = nullptr,
                          std::int64_t accept_index_stride = 0);
  void capture_extend_graphs(capture_report& report, const std::function<void(int, int)>& progress,
                             int total);

  void record_device_round_body(std::int32_t bucket);
  void capture_device_round_graphs(capture_report& report,
                                   const std::function<void(int, int)>& progress, int total);
  bool device_round_wanted() const;
  void launch_device_round_graph();

  executor* ex_;
  std::unique_ptr<const specgraph::plan> plan_;  // stable address: buffers_ points at it
  engine_tables tables_;
  round_source source_;        // the staged inputs, or the engine's read in place (bind_inputs)
  device_buffer owned_arena_;  // empty over caller memory
  draft_buffers buffers_;
  std::vector<forward_fn> forwards_;  // [num_steps]
  forward_fn forward_all_;
  condition_fn condition_;
  std::vector<std::unique_ptr<graph_slot>> graphs_;  // [bucket index][step, then round]
  std::vector<std::unique_ptr<staging_slot>> staging_;
  std::size_t next_staging_ = 0;
  bool captured_ = false;
  std::int32_t bucket_ = 0;
  std::int32_t bucket_index_ = -1;
  std::int32_t batch_ = 0;
  std::int32_t next_step_ = 0;
  std::string failure_;  // set after a CUDA error: no more work
  verify_forward_fn verify_forward_;
  device_buffer verify_mask_;                               // empty without verify
  std::vector<std::unique_ptr<graph_slot>> verify_graphs_;  // [bucket index]
  bool verify_captured_ = false;
  std::int32_t verify_bucket_ = 0;
  std::int32_t verify_bucket_index_ = -1;
  std::int32_t verify_batch_ = 0;  // the staged verify round's real batch
  extend_forward_fn extend_forward_;
  std::vector<std::unique_ptr<graph_slot>> extend_graphs_;  // [bucket index]; empty without
  bool extend_captured_ = false;
  std::int32_t extend_bucket_ = 0;  // the verify round's bucket once its accept_len is staged
  after_verify_inputs round_in_;    // bind_round_ring
  bool round_bound_ = false;
  device_buffer round_guards_;  // [guard_count] the sticky summary
  std::vector<std::unique_ptr<graph_slot>> device_round_graphs_;  // [bucket index]
  bool device_round_captured_ = false;
  std::vector<const void*> nvtx_capture_, nvtx_replay_;
  const void* nvtx_stage_ = nullptr;
  const void* nvtx_round_ = nullptr;
  const void* nvtx_capture_round_ = nullptr;
  const void* nvtx_replay_round_ = nullptr;
};

}  // namespace specgraph
