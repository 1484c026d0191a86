// The capture-safe operations (ops.hpp): host checks, then kernels, memsets and device-to-device
// copies on the executor's stream only.
#include "specgraph/ops.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/checks.hpp"
#include "graphs/input_reads.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/guard_ops.hpp"
#include "kernels/round_control.hpp"
#include "kernels/stage_inputs.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/metadata.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph {
namespace {

void check_bucket(const plan& p, std::int32_t bucket) {
  SPECGRAPH_EXPECTS(p.has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
}

void check_index_type(const char* field, const index_array& a) {
  detail::not_null(field, a.data);
  SPECGRAPH_EXPECTS(
      a.type == index_type::int32 || a.type == index_type::int64, field,
      "index type " + std::to_string(static_cast<int>(a.type)) + " is not int32 or int64");
}

}  // namespace

std::int64_t req_to_token_stride(const draft_config& c, const engine_tables& tables) {
  if (tables.req_to_token_stride == 0) return c.max_context_len;
  detail::between("req_to_token_stride", tables.req_to_token_stride, c.max_context_len,
                  std::int64_t{1} << 31, "2^31 (at least max_context_len)");
  return tables.req_to_token_stride;
}

void check_round_control(const draft_config& c, std::int32_t max_depth, float min_confidence) {
  detail::between("max_depth", max_depth, 0, c.num_steps, "num_steps");
  SPECGRAPH_EXPECTS(!(min_confidence != min_confidence), "min_confidence",  // NaN
                    "NaN is not a threshold");
}

void initialize_buffers(executor& ex, const draft_buffers& b) {
  const draft_config& c = b.plan().config;
  ex.fill_bytes(b.base(), 0, b.bytes());
  if (c.sparse) {
    const sparse_view s = b.sparse();
    ex.copy_to_device(s.vertical_size, c.sparse->vertical_size.data(),
                      c.sparse->vertical_size.size() * sizeof(std::int32_t));
    ex.copy_to_device(s.slash_size, c.sparse->slash_size.data(),
                      c.sparse->slash_size.size() * sizeof(std::int32_t));
  }
}

std::int32_t stage_round(executor& ex, const draft_buffers& b, const device_round_inputs& in) {
  const plan& p = b.plan();
  const draft_config& c = p.config;
  detail::between("batch", in.batch, 0, c.max_batch, "max_batch");
  if (in.batch > 0) {  // an idle rank (batch 0) reads no input
    check_index_type("req_pool_index", in.req_pool_index);
    check_index_type("seq_len", in.seq_len);
    check_index_type("out_cache_loc", in.out_cache_loc);
  }
  check_round_control(c, in.max_depth, in.min_confidence);
  const std::int32_t bucket = p.round_bucket(in.batch, in.bucket);

  kernels::stage_inputs_kernel::params k{};
  k.req_pool_index_src = in.req_pool_index.data;
  k.pool_index_is_int64 = in.req_pool_index.type == index_type::int64 ? 1 : 0;
  k.seq_len_src = in.seq_len.data;
  k.seq_len_is_int64 = in.seq_len.type == index_type::int64 ? 1 : 0;
  k.cache_loc_src = in.out_cache_loc.data;
  k.cache_loc_is_int64 = in.out_cache_loc.type == index_type::int64 ? 1 : 0;
  k.real_batch = b.real_batch();
  k.device_step = b.device_step();
  k.max_depth = b.max_depth();
  k.min_confidence = b.min_confidence();
  k.iterations = b.iterations();
  k.round_max_depth = in.max_depth > 0 ? in.max_depth : c.num_steps;
  k.round_min_confidence = in.min_confidence;
  k.req_pool_index = b.req_pool_index();
  k.seq_len = b.seq_len();
  k.out_cache_loc = b.out_cache_loc();
  k.slots_per_request = static_cast<std::int64_t>(c.topk) * c.slot_stride;  // <= 2^26
  k.batch = in.batch;
  k.bucket = bucket;
  k.guard = b.guards() + plan_layout::guard_stage;
  // The engine's events cross the capture's boundary (docs/metadata.md): external nodes.
  if (in.wait_for != nullptr) ex.wait_event(in.wait_for, event_scope::external);
  // The staging guard belongs to the staging: reset here (the round's setup resets the others).
  ex.fill_bytes(k.guard, 0, sizeof(guard_word));
  detail::start_round(ex, b);  // a new round: staged, the round.order word reset
  ex.launch(
      make_kernel_launch<kernels::stage_inputs_kernel>(k, bucket, kernels::cuda_stage_inputs()));
  // The static inputs written (pool rows, lengths, slot rows, the five control words): the
  // per-round copy inputs read in place (engine_inputs.hpp) avoid.
  ex.count_input_bytes_staged(
      static_cast<std::int64_t>(bucket) *
          (2 * sizeof(std::int32_t) + k.slots_per_request * sizeof(std::int64_t)) +
      5 * sizeof(std::int32_t));
  if (in.done != nullptr) ex.record_event(in.done, event_scope::external);
  return bucket;
}

void setup_round(executor& ex, const draft_buffers& b, std::int32_t bucket,
                 const engine_tables& tables, const round_source& source) {
  const detail::round_reads in = detail::reads_of(b, source);
  const plan& pl = b.plan();
  const draft_config& c = pl.config;
  check_bucket(pl, bucket);
  detail::not_null("req_to_token", tables.req_to_token);
  const std::int64_t r2t_stride = req_to_token_stride(c, tables);  // checked before any work
  // Staged inputs need a staged round; inputs read in place are the engine's (nothing stages).
  detail::check_round_order(ex, b, kernel_id::round_setup, -1, bucket,
                            in.staged ? round_progress::staged : round_progress::none,
                            round_progress::set_up);
  // Every guard but the staging one, which the round's staging reset and may have set (inputs
  // read in place: nothing stages, and that word is reset too). With a device step counter the
  // reset is a kernel that runs only at step 0.
  const std::int32_t first = in.staged ? plan_layout::guard_prefix : plan_layout::guard_stage;
  // ... and but the round.order word (the last), which only a round's start resets.
  // Read in place, nothing else starts a round (begin_round is optional): every word.
  const std::int32_t words = (in.staged ? pl.layout.guard_order : pl.layout.guard_count) - first;
  if (c.device_steps) {
    kernels::reset_guards_kernel::params r{b.guards() + first, b.device_step()};
    ex.launch(
        make_kernel_launch<kernels::reset_guards_kernel>(r, words, kernels::cuda_reset_guards()));
  } else {
    ex.fill_bytes(b.guards() + first, 0, static_cast<std::size_t>(words) * sizeof(guard_word));
  }
  if (!pl.layout.has_fa3) return;  // csr-only: no FA3 prefix table to write
  prefix_params p;
  p.req_to_token = tables.req_to_token;
  p.req_to_token_stride = r2t_stride;
  p.max_seq_len = c.max_context_len;
  p.pool_rows = c.pool_rows;
  p.req_pool_index = in.req_pool_index;
  p.seq_len = in.seq_len;
  p.batch = bucket;
  p.topk = c.topk;
  p.page_size = c.page_size;
  p.last_page_len = b.last_page_len();
  p.prefix_seqlen = b.prefix_seqlen();
  p.page_table = b.prefix_page_table();
  p.page_table_stride = pl.layout.prefix_capacity;
  p.capacity = pl.layout.prefix_capacity;
  p.cu_seqlens_q = b.cu_seqlens_q();
  p.guard = b.guards() + plan_layout::guard_prefix;
  p.slot_limit = c.kv_slots;
  p.refused = b.prefix_refused();
  p.padding_from = detail::padding_from(in);
  // Only the cells in use and the ones the previous round left non-zero are written.
  p.high_water = b.prefix_high_water();
  p.high_water_before = b.prefix_high_water() + pl.max_bucket();
  p.run_when_zero = c.device_steps ? b.device_step() : nullptr;
  launch_prefix_metadata(ex, p);
}

namespace {

void step_table(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                const detail::round_reads& in) {
  const plan& pl = b.plan();
  const draft_config& c = pl.config;
  check_bucket(pl, bucket);
  detail::in_range("step", step, 0, c.num_steps, "num_steps");
  detail::check_round_order(ex, b, kernel_id::step_metadata, step, bucket, round_progress::set_up,
                            round_progress::none);
  expand_params e;
  // Branch rows cache_loc_stride apart; step s reads only the first s + 1 slots of each.
  e.cache_loc = in.cache_loc;
  e.cache_loc_stride = in.cache_loc_branch_stride;
  e.cache_loc_request_stride = in.cache_loc_request_stride;
  e.slots_read = step + 1;  // slice-before-scatter: only the first d slots of each row
  e.decode_length = step + 1;
  e.last_page_len = b.last_page_len();
  e.batch = bucket;
  e.topk = c.topk;
  e.page_size = c.page_size;
  e.page_table = b.expand_page_table(step);
  e.page_table_stride = pl.layout.expand_stride[static_cast<std::size_t>(step)];
  e.capacity = step + 2;
  e.cache_seqlen = b.expand_cache_seqlen(step);
  e.guard = b.guards() + plan_layout::guard_expand(step);
  e.slot_limit = c.kv_slots;
  // Only real rows are layout-checked: without a real batch (inputs read in place, none bound)
  // real rows cannot be told from padding rows, and the check does not run.
  e.layout_check_batch = c.checked ? in.real_batch : nullptr;
  // Rows past a bound real batch and requests the round's prefix refused: padded rows.
  e.padding_from = detail::padding_from(in);
  e.refused = b.prefix_refused();
  launch_expand_page_table(ex, e);
}

void device_step_table(executor& ex, const draft_buffers& b, std::int32_t bucket,
                       const detail::round_reads& in) {
  const plan& pl = b.plan();
  const draft_config& c = pl.config;
  SPECGRAPH_EXPECTS(c.device_steps, "device_steps", "false: the plan has a table per step");
  check_bucket(pl, bucket);
  detail::check_round_order(ex, b, kernel_id::step_metadata, -1, bucket, round_progress::set_up,
                            round_progress::none);
  expand_params e;
  e.cache_loc = in.cache_loc;
  e.cache_loc_stride = in.cache_loc_branch_stride;
  e.cache_loc_request_stride = in.cache_loc_request_stride;
  e.slots_read = 0;  // slice-before-scatter: d = step + 1 slots, decided on the device
  e.last_page_len = b.last_page_len();
  e.batch = bucket;
  e.topk = c.topk;
  e.page_size = c.page_size;
  e.page_table = b.expand_page_table(0);  // one table for every step
  e.page_table_stride = pl.layout.expand_stride[0];
  e.cache_seqlen = b.expand_cache_seqlen(0);
  e.guard = b.guards() + plan_layout::guard_expand(0);
  e.slot_limit = c.kv_slots;
  e.layout_check_batch = c.checked ? in.real_batch : nullptr;
  e.padding_from = detail::padding_from(in);
  e.refused = b.prefix_refused();
  e.device_step = b.device_step();
  e.device_steps = c.num_steps;
  launch_expand_page_table(ex, e);
}

}  // namespace

void step_metadata(executor& ex, const draft_buffers& b, std::int32_t bucket, round_step step,
                   const round_source& source) {
  const detail::round_reads in = detail::reads_of(b, source);
  if (step.is_device()) {
    device_step_table(ex, b, bucket, in);
    return;
  }
  SPECGRAPH_EXPECTS(!step.is_whole_round(), "step",
                    "whole_round: step_metadata writes one step's table (a step in [0, "
                    "num_steps), or at_device_step)");
  step_table(ex, b, bucket, step.index(), in);
}

void advance_step(executor& ex, const draft_buffers& b) {
  kernels::advance_step_kernel::params p{b.device_step()};
  ex.launch(make_kernel_launch<kernels::advance_step_kernel>(p, 1, kernels::cuda_advance_step()));
}

namespace {

void continue_condition(executor& ex, const draft_buffers& b, std::int32_t bucket,
                        conditional_handle handle, bool limit_only,
                        const std::int32_t* real_batch) {
  SPECGRAPH_EXPECTS(b.plan().config.device_depth, "device_depth",
                    "false: the round's condition needs a plan with device_depth");
  kernels::continue_condition_kernel::params p{};
  p.bucket = bucket;
  p.step = b.device_step();
  p.max_depth = b.max_depth();
  p.min_confidence = b.min_confidence();
  p.confidence = b.confidence();
  p.real_batch = real_batch;
  p.iterations = b.iterations();
  p.topk = b.plan().config.topk;
  p.num_steps = b.plan().config.num_steps;
  p.limit_only = limit_only ? 1 : 0;
  p.handle = handle;
  ex.launch(make_kernel_launch<kernels::continue_condition_kernel>(
      p, 1, kernels::cuda_continue_condition()));
}

}  // namespace

void continue_while_confident(executor& ex, const draft_buffers& b, std::int32_t bucket,
                              conditional_handle handle, const round_source& in) {
  const detail::round_reads reads = detail::reads_of(b, in);
  check_bucket(b.plan(), bucket);
  continue_condition(ex, b, bucket, handle, /*limit_only=*/false, reads.real_batch);
}

void stop_round_at_limit(executor& ex, const draft_buffers& b, conditional_handle handle) {
  // Only the limit is checked: no row is read (bucket 0 is never used).
  continue_condition(ex, b, 0, handle, /*limit_only=*/true, b.real_batch());
}

std::unique_ptr<graph> capture_device_depth_round(executor& ex, const draft_buffers& b,
                                                  std::int32_t bucket, const graph& step_body,
                                                  const round_source& in) {
  const detail::round_reads reads = detail::reads_of(b, in);
  SPECGRAPH_EXPECTS(b.plan().config.device_depth, "device_depth",
                    "false: a device-depth round needs a plan with device_depth");
  check_bucket(b.plan(), bucket);
  if (ex.capturing()) {
    throw capture_violation(
        "capture_device_depth_round: the stream is being captured; this call is a capture of "
        "its own (call it outside the engine's capture)");
  }
  // On a private stream: the caller's may be the legacy default stream, which CUDA cannot
  // capture; everything recorded here goes through `ex`.
  ex.begin_private_capture();
  try {
    const conditional_handle h = ex.begin_while(/*initial=*/true);  // the body runs at least once
    ex.record_graph(step_body);
    continue_condition(ex, b, bucket, h, /*limit_only=*/false, reads.real_batch);
    ex.end_while();
    return ex.end_capture();
  } catch (...) {
    ex.abort_capture();
    throw;
  }
}

void stage_sparse(executor& ex, const draft_buffers& b, const sparse_stage& stage) {
  SPECGRAPH_EXPECTS(b.plan().config.sparse.has_value(), "sparse",
                    "the configuration has no sparse settings");
  launch_sparse_stage(ex, b.sparse().params(stage));
}

void count_violations(executor& ex, const draft_buffers& b, std::int32_t* violations) {
  detail::not_null("violations", violations);
  kernels::count_violations_kernel::params k{};
  k.guards = b.guards();
  k.count = b.plan().layout.guard_count;
  k.out = violations;
  ex.launch(
      make_kernel_launch<kernels::count_violations_kernel>(k, 1, kernels::cuda_count_violations()));
}

std::vector<guard_word> read_guards(executor& ex, const draft_buffers& b) {
  std::vector<guard_word> out(static_cast<std::size_t>(b.plan().layout.guard_count));
  ex.copy_to_host(out.data(), b.guards(), out.size() * sizeof(guard_word));
  return out;
}

guard_site guard_site_of(const plan& p, std::int32_t index) {
  const plan_layout& l = p.layout;
  if (index == plan_layout::guard_stage) return {"input (staging)", all_steps};
  if (index == plan_layout::guard_prefix) return {"prefix.page_table", all_steps};
  if (index == l.guard_order) return {"round.order", all_steps};
  if (index >= plan_layout::guard_expand(0) && index < plan_layout::guard_expand(l.num_steps)) {
    return {"expand.page_table", index - plan_layout::guard_expand(0)};
  }
  if (!l.csr_kv_indices.empty() && index >= l.guard_csr(0) && index < l.guard_csr(l.num_steps)) {
    return {"csr.kv_indices", index - l.guard_csr(0)};
  }
  if (l.verify.enabled() && index >= l.verify.guard_base &&
      index < l.verify.guard_base + verify_guard_count) {
    const char* sites[verify_guard_count] = {"verify (input, prefix.page_table)",
                                             "verify.kv_indices", "verify.packed_mask"};
    return {sites[index - l.verify.guard_base], all_steps};
  }
  if (l.extend.enabled() && index >= l.extend.guard_base &&
      index < l.extend.guard_base + extend_guard_count) {
    const char* sites[extend_guard_count] = {"extend (input)", "extend.page_table",
                                             "extend.prefix_kv_indices", "extend.full_kv_indices",
                                             "extend.accept_len"};
    return {sites[index - l.extend.guard_base], all_steps};
  }
  if (l.round.enabled() && index >= l.round.guard_base &&
      index < l.round.guard_base + round_guard_count) {
    const char* sites[round_guard_count] = {
        "after_verify.accept (input)",          "after_verify.accept (outputs)",
        "after_verify.commit (input)",          "after_verify.commit (outputs)",
        "after_verify.next_round (allocation)", "after_verify.next_round (input)",
        "after_verify.next_round (outputs)"};
    return {sites[index - l.round.guard_base], all_steps};
  }
  const char* kinds[sparse_stage_kinds] = {"intra", "succ", "inter"};
  const std::int32_t k = index - l.guard_sparse(0);
  if (k >= 0 && k < sparse_stage_kinds) return {std::string("sparse.") + kinds[k], all_steps};
  return {"guard " + std::to_string(index), all_steps};
}

void raise_guard_violations(const plan& p, const std::vector<guard_word>& guards,
                            std::int32_t bucket, const std::string& context) {
  for (std::size_t i = 0; i < guards.size(); ++i) {
    const guard_word& g = guards[i];
    if (g.violations == 0) continue;
    const guard_site site = guard_site_of(p, static_cast<std::int32_t>(i));
    const std::string step =
        site.step == all_steps ? std::string("all steps") : "step " + std::to_string(site.step);
    throw guard_violation((context.empty() ? std::string() : context + ": ") + site.buffer + " (" +
                          step + ", bucket " + std::to_string(bucket) + ", row " +
                          std::to_string(g.row) + "): " + describe(g));
  }
}

}  // namespace specgraph
