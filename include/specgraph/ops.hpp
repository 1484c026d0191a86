// Capture-safe operations over a plan's buffers: what an engine composes into its own capture.
//
// The engine owns its stream, its memory and its capture (torch.cuda.graph on its capture
// stream, or its own cudaStreamBeginCapture). Each operation below takes the buffers, the bucket
// (and step) and an executor whose stream is the engine's (make_cuda_executor(stream)), and only
// enqueues kernels, memsets and device-to-device copies on that stream: no allocation, no
// synchronisation, no read-back. So the same call runs eagerly or records into whatever capture
// is under way on that stream, in any capture mode. Host-side checks (bucket, step, batch,
// pointers) run first and throw invalid_argument naming the field before anything is enqueued.
// On the host executor the same functions run (or, while it captures, record) through it.
//
// A draft round, eagerly or inside the engine's graph for (bucket, step):
//   stage_round(ex, b, inputs);          // copy the round's device inputs, pad to the bucket
//   setup_round(ex, b, bucket, tables);  // guard reset + step-invariant prefix metadata (step 0)
//   step_metadata(ex, b, bucket, s);     // step s's expand metadata (slice-before-scatter)
//   ...the engine's forward reading b.view(bucket, s)...
//   read_guards(ex, b);                  // outside capture: synchronises
// The round ops read the staged inputs by default; given a round_source (round_io.hpp) made
// over an engine's tensors they read those in place (engine_inputs.hpp), the same checks, outputs
// and guard words otherwise.
// Semantics: docs/metadata.md (sections 2-4, 6, 7); composition rules: section 9.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/conditional.hpp"
#include "specgraph/config.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/round_io.hpp"

namespace specgraph {

class executor;
class graph;

// The engine tables the metadata kernels read (executor memory, owned by the engine; must stay
// at the same address while graphs that read them exist: the graphs bake the pointer in).
struct engine_tables {
  const std::int32_t* req_to_token = nullptr;  // [pool_rows][req_to_token_stride]
  // Columns per row of req_to_token as the engine allocated it: 0 means max_context_len; a
  // wider table (>= max_context_len, <= 2^31) is read at this stride, never refused.
  std::int64_t req_to_token_stride = 0;
};

// One draft round's inputs in host memory; copied by draft_runtime::stage().
struct round_inputs {
  // Real requests, 0..max_batch; 0 (an idle rank under data-parallel attention): every row of
  // the bucket is a padding row and the three arrays below are not read (may be null).
  std::int32_t batch = 0;
  index_array req_pool_index;  // [batch], int32 or int64
  index_array seq_len;         // [batch], int32 or int64
  index_array out_cache_loc;   // [batch][topk][slot_stride], int32 or int64
  // device_depth mode (docs/device-rounds.md): the round stops after max_depth steps (0: num_steps)
  // or as soon as no real row's confidence reaches min_confidence.
  std::int32_t max_depth = 0;
  float min_confidence = -std::numeric_limits<float>::infinity();
  // Ordering with the engine: when set, the staging copies, and so all later work on the
  // runtime's stream (the round's graphs, whose kernels read req_to_token and whatever the
  // forward reads, e.g. the KV cache), wait for `wait_for`, recorded by the engine after it
  // wrote them, on whatever stream it wrote them.
  device_event wait_for = nullptr;
  // The bucket to replay: 0 = the smallest bucket >= batch; else the caller's choice (under
  // data-parallel attention every rank replays the bucket of the world's largest batch, chosen
  // after the engine's all-reduce), which must be a planned bucket >= batch (plan::round_bucket;
  // invalid_argument "bucket" otherwise, nothing written).
  std::int32_t bucket = 0;
};

// The same round in executor memory (what an engine already holds on the GPU).
struct device_round_inputs {
  std::int32_t batch = 0;      // real requests, 0..max_batch (as round_inputs)
  index_array req_pool_index;  // [batch], executor memory, int32 or int64
  index_array seq_len;         // [batch], executor memory, int32 or int64
  index_array out_cache_loc;   // [batch][topk][slot_stride], executor memory, int32 or int64
  // Ordering with the engine: when set, the staging waits for `wait_for` (recorded by the engine
  // after it wrote the inputs, on whatever stream it wrote them), and records `done` once the
  // inputs have been read: the engine may overwrite them after `done` completes (or after
  // anything later on this stream).
  device_event wait_for = nullptr;
  device_event done = nullptr;
  // As in round_inputs (device_depth mode).
  std::int32_t max_depth = 0;
  float min_confidence = -std::numeric_limits<float>::infinity();
  std::int32_t bucket = 0;  // as in round_inputs: 0 = the smallest bucket >= batch
};

// ---- one-time initialisation ----------------------------------------------------------------
// Zeroes the whole arena and writes the init-once buffers (the sparse per-head sizes). Call once
// after the memory is allocated, and again whenever the engine's memory was released and comes
// back zeroed (e.g. after a sleep). Enqueued on ex's stream; does not synchronise; NOT
// capture-safe (copies the sizes from host memory).
void initialize_buffers(executor& ex, const draft_buffers& b);

// ---- per round ------------------------------------------------------------------------------
// Copies a round's inputs from executor memory into the static inputs of in.bucket (0: the
// smallest bucket >= in.batch), writes the real batch and resets the padded requests (seq_len
// 1, pool row 0, every slot 0; with batch 0 every request): one kernel, after waiting for
// in.wait_for and before recording in.done; starts the round (round.progress staged, the
// round.order word reset; docs/metadata.md section 11). Returns the bucket. Host checks: batch in
// [0, max_batch], the bucket (plan::round_bucket), non-null pointers when batch > 0. The contents
// live in device memory and are checked by the kernels: an int64 index that does not fit int32
// stages that request as a padded one (pool row 0, seq_len 1, every slot 0) and records bad_input
// in the staging guard word; out-of-range pool rows, lengths and slots are refused by the
// metadata kernels, which write the refused rows as padded rows. Capture-safe; stream: ex's.
std::int32_t stage_round(executor& ex, const draft_buffers& b, const device_round_inputs& in);

// Resets the guard words (all but the staging one, which staging resets) and computes the
// step-invariant prefix metadata of `bucket` (the round's step 0 work). Capture-safe; stream: ex's.
// Throws invalid_argument for an unplanned bucket or a null req_to_token. The round's order
// (docs/metadata.md section 11): needs a staged round; on the host executor (not deferred, not
// capturing) one not staged is refused with invalid_argument "setup_round", nothing enqueued;
// elsewhere it is recorded in the round.order guard word. Sets round.progress to set up. `in`:
// the staged inputs (default), or an engine's read in place (round_io.hpp; then nothing needs
// staging: the order check asks for nothing, and every guard word is reset, the staging and
// round.order ones included). A source made for another plan: invalid_argument "source",
// nothing enqueued.
void setup_round(executor& ex, const draft_buffers& b, std::int32_t bucket,
                 const engine_tables& tables, const round_source& in = {});

// Step `step`'s expand metadata for `bucket`: reads only the first d = step + 1 slots of each
// out_cache_loc row (rows slot_stride apart) into the d + 1 wide step table (slice-before-scatter);
// in checked mode (config.checked) also checks the branch layout of real rows. Capture-safe;
// stream: ex's; no sync. Needs the round set up (docs/metadata.md section 11): refused eagerly
// on the host executor (invalid_argument "step_metadata"), recorded in round.order elsewhere;
// the same for the CSR ops (csr_ops.hpp, "csr_step_indices"). `step`: a step in
// [0, num_steps) (invalid_argument "step" otherwise), or at_device_step (config.device_steps,
// invalid_argument "device_steps" without it): the step the device counter is at (d = step + 1,
// capacity d + 1, the step's guard word), one table for every step. `in`: as in setup_round.
void step_metadata(executor& ex, const draft_buffers& b, std::int32_t bucket, round_step step,
                   const round_source& in = {});

// Stages the engine's sparse selection (the sparse input buffers) for one chunk stage into that
// stage kind's buffers, with the capacity-capped fallback. Capture-safe; stream: ex's. Throws
// invalid_argument when the config has no sparse settings or the stage is malformed.
void stage_sparse(executor& ex, const draft_buffers& b, const sparse_stage& stage);

// ---- device step counter (config.device_steps; docs/device-rounds.md) -----------------
// In this mode setup_round runs only while the device step counter is 0 (its kernels check it),
// so one graph per bucket holds a whole step: setup_round, step_metadata(at_device_step) (FA3)
// and/or csr_indices(at_device_step) (CSR, csr_ops.hpp), the forward, advance_step. Staging
// (and begin_round) resets the counter to 0.
// Advances the device step counter: the last node of a step. Capture-safe; stream: ex's.
void advance_step(executor& ex, const draft_buffers& b);
// Inside a WHILE body (executor::begin_while), after advance_step: sets the node's condition to
// continue while the step is below the round's max_depth and any real row's confidence
// (b.confidence(), written by the forward) reaches the round's min_confidence. Whatever the body
// does, it stops the round after num_steps bodies (counted in b.iterations(), which staging
// resets) or once the step counter is outside [0, num_steps): a body that never advances the
// counter, or a corrupted max_depth, cannot loop forever. Throws invalid_argument without
// config.device_depth or for an unplanned bucket. Capture-safe; stream: ex's; no sync. `in`: the
// real rows are those below the staged real batch, or (inputs read in place) below
// in.inputs().real_batch (null: every row of the bucket).
void continue_while_confident(executor& ex, const draft_buffers& b, std::int32_t bucket,
                              conditional_handle handle, const round_source& in = {});
// For a WHILE body whose condition an engine's own kernel sets: launched after that kernel, it
// clears the condition at the same hard limit (num_steps bodies this round, or the step counter
// outside [0, num_steps)) and otherwise leaves it as the engine set it. Throws invalid_argument
// without config.device_depth. Capture-safe; stream: ex's.
void stop_round_at_limit(executor& ex, const draft_buffers& b, conditional_handle handle);
// The device-depth round of `bucket` around a step body the engine captured itself, for
// engines that capture with their own tooling (torch.cuda.graph) and so cannot record a WHILE
// node: the graph is WHILE (set at launch) { step_body; continue_while_confident }. step_body
// must be this bucket's device-step body: setup_round, step_metadata(at_device_step), the
// forward (writing b.confidence()), advance_step, e.g. imported with import_cuda_graph; its
// memory must stay valid while the result is used. Launch the instantiated result once per
// round after staging (stage_round with max_depth / min_confidence; with inputs read in place,
// `in`, after begin_round): the depth run is left in b.device_step(). A capture of its own, on a
// private stream of ex (begin_private_capture: ex's stream may be the legacy default stream),
// not inside a capture of ex's stream; no sync.
// Throws invalid_argument without config.device_depth or for an unplanned bucket,
// capture_violation when step_body holds what a conditional body may not (event nodes) or a
// conditional node (CUDA refuses one in a child graph).
std::unique_ptr<graph> capture_device_depth_round(executor& ex, const draft_buffers& b,
                                                  std::int32_t bucket, const graph& step_body,
                                                  const round_source& in = {});
// The row stride req_to_token is read at: tables.req_to_token_stride, or max_context_len when 0.
// Throws invalid_argument naming req_to_token_stride below max_context_len or above 2^31.
std::int64_t req_to_token_stride(const draft_config& c, const engine_tables& tables);
// Checks a round's max_depth (0 or 1..num_steps) and min_confidence (not NaN); throws
// invalid_argument naming the field.
void check_round_control(const draft_config& c, std::int32_t max_depth, float min_confidence);

// ---- guards ---------------------------------------------------------------------------------
// Writes the total number of violations in all guard words to *violations (an int32 in executor
// memory, e.g. a one-element tensor the engine owns): a check an engine can leave on in
// production and assert asynchronously (torch._assert_async(flag == 0)), without a sync.
// Capture-safe; stream: ex's.
void count_violations(executor& ex, const draft_buffers& b, std::int32_t* violations);
// Reads every guard word back. Synchronises ex's stream; forbidden during capture.
[[nodiscard]] std::vector<guard_word> read_guards(executor& ex, const draft_buffers& b);
// The buffer a guard word index reports on ("expand.page_table") and its step (all_steps for
// step-invariant ones).
struct guard_site {
  std::string buffer;
  std::int32_t step = all_steps;
};
guard_site guard_site_of(const plan& p, std::int32_t guard_index);
// Throws guard_violation naming buffer, step, bucket and row for the first set guard word (in
// guard index order); does nothing when all are clean. Pure host code.
void raise_guard_violations(const plan& p, const std::vector<guard_word>& guards,
                            std::int32_t bucket, const std::string& context = {});

}  // namespace specgraph
