// Inputs read in place (engine_inputs.hpp): checks of an engine's static input tensors, the
// round ops over them, and begin_round.
#include "specgraph/engine_inputs.hpp"

#include <cstdint>
#include <memory>
#include <string>

#include "device/checks.hpp"
#include "graphs/input_reads.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/round_control.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/limits.hpp"

namespace specgraph {
namespace {

void check_type(const std::string& field, index_type t) {
  SPECGRAPH_EXPECTS(
      t == index_type::int32 || t == index_type::int64, field,
      "index type " + std::to_string(static_cast<int>(t)) + " is not int32 (0) or int64 (1)");
}

void check_stride(const std::string& field, std::int64_t stride, std::int64_t least) {
  detail::between(field, stride, least, limits::max_input_stride, "the limit");
}

void check_index(const char* name, const engine_index& a) {
  const std::string field(name);
  detail::not_null(name, a.data);
  check_type(field + ".type", a.type);
  check_stride(field + ".stride", a.stride, 0);
}

index_ref ref_of(const void* data, index_type type, std::int64_t stride) {
  index_ref r;
  r.data = data;
  r.is_int64 = type == index_type::int64 ? 1 : 0;
  r.stride = stride;
  return r;
}

}  // namespace

void check_engine_inputs(const plan& p, const engine_inputs& in) {
  const draft_config& c = p.config;
  check_index("req_pool_index", in.req_pool_index);
  check_index("seq_len", in.seq_len);
  const engine_slots& s = in.out_cache_loc;
  detail::not_null("out_cache_loc", s.data);
  check_type("out_cache_loc.type", s.type);
  // Requests must not alias each other's slots: a request stride of at least 1.
  check_stride("out_cache_loc.request_stride", s.request_stride, 1);
  check_stride("out_cache_loc.branch_stride", s.branch_stride, 0);
  check_stride("out_cache_loc.slot_stride", s.slot_stride, 0);
  detail::between("out_cache_loc.slots", s.slots, c.num_steps, std::int64_t{1} << 31,
                  "2^31 (at least num_steps, the slots a round reads)");
}

namespace detail {

round_reads engine_reads(const plan& p, const engine_inputs& in) {
  check_engine_inputs(p, in);
  round_reads r;
  r.req_pool_index =
      ref_of(in.req_pool_index.data, in.req_pool_index.type, in.req_pool_index.stride);
  r.seq_len = ref_of(in.seq_len.data, in.seq_len.type, in.seq_len.stride);
  const engine_slots& s = in.out_cache_loc;
  r.cache_loc = ref_of(s.data, s.type, s.slot_stride);
  r.cache_loc_branch_stride = s.branch_stride;
  r.cache_loc_request_stride = s.request_stride;
  r.real_batch = in.real_batch;
  r.staged = false;
  return r;
}

}  // namespace detail

void begin_round(executor& ex, const draft_buffers& b, std::int32_t max_depth,
                 float min_confidence) {
  const draft_config& c = b.plan().config;
  check_round_control(c, max_depth, min_confidence);
  kernels::begin_round_kernel::params k{};
  k.device_step = b.device_step();
  k.iterations = b.iterations();
  k.max_depth = b.max_depth();
  k.min_confidence = b.min_confidence();
  k.round_max_depth = max_depth > 0 ? max_depth : c.num_steps;
  k.round_min_confidence = min_confidence;
  ex.launch(make_kernel_launch<kernels::begin_round_kernel>(k, 1, kernels::cuda_begin_round()));
  detail::start_round(ex, b);  // a new round: begun (staged), the round.order word reset
}

void setup_round(executor& ex, const draft_buffers& b, std::int32_t bucket,
                 const engine_tables& tables, const engine_inputs& in) {
  detail::setup_round_from(ex, b, bucket, tables, detail::engine_reads(b.plan(), in));
}

void step_metadata(executor& ex, const draft_buffers& b, std::int32_t bucket, std::int32_t step,
                   const engine_inputs& in) {
  detail::step_metadata_from(ex, b, bucket, step, detail::engine_reads(b.plan(), in));
}

void step_metadata_at_device_step(executor& ex, const draft_buffers& b, std::int32_t bucket,
                                  const engine_inputs& in) {
  detail::step_metadata_device_from(ex, b, bucket, detail::engine_reads(b.plan(), in));
}

void continue_while_confident(executor& ex, const draft_buffers& b, std::int32_t bucket,
                              conditional_handle handle, const engine_inputs& in) {
  SPECGRAPH_EXPECTS(b.plan().has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not one of the planned buckets");
  detail::continue_condition_from(ex, b, bucket, handle, /*limit_only=*/false,
                                  detail::engine_reads(b.plan(), in));
}

std::unique_ptr<graph> capture_device_depth_round(executor& ex, const draft_buffers& b,
                                                  std::int32_t bucket, const graph& step_body,
                                                  const engine_inputs& in) {
  return detail::capture_device_depth_round_from(ex, b, bucket, step_body,
                                                 detail::engine_reads(b.plan(), in));
}

}  // namespace specgraph
