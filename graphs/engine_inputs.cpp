// Inputs read in place (engine_inputs.hpp, round_io.hpp): checks of an engine's static input
// tensors, the round source that carries them checked, what the kernels read for a source, and
// begin_round.
#include "specgraph/engine_inputs.hpp"

#include <atomic>
#include <cstdint>
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

std::atomic<std::int64_t> input_checks{0};

}  // namespace

void check_engine_inputs(const plan& p, const engine_inputs& in) {
  input_checks.fetch_add(1, std::memory_order_relaxed);
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

round_source::round_source(const plan& p, const engine_inputs& in) : plan_(&p), inputs_(in) {
  check_engine_inputs(p, in);
}

namespace detail {

std::int64_t engine_input_checks() noexcept {
  return input_checks.load(std::memory_order_relaxed);
}

void expect_plan_of(const draft_buffers& b, const plan* checked_for, const char* field,
                    const char* remake) {
  if (checked_for == nullptr || checked_for == &b.plan()) return;
  // Only the address is compared: the plan it was made for may be gone.
  SPECGRAPH_EXPECTS(false, field,
                    std::string("checked against another plan than the one these buffers were "
                                "made over (it is checked once, for one plan): make it with ") +
                        remake + "; nothing was written");
}

round_reads reads_of(const draft_buffers& b, const round_source& in) {
  round_reads r;
  if (in.staged()) {  // the arena's static inputs, as staging wrote them
    r.req_pool_index = b.req_pool_index();
    r.seq_len = b.seq_len();
    r.cache_loc = b.out_cache_loc();
    r.cache_loc_branch_stride = b.plan().config.slot_stride;  // packed rows, slot_stride apart
    r.real_batch = b.real_batch();
    return r;
  }
  expect_plan_of(b, in.checked_for(), "source", "round_source(b.plan(), inputs)");
  const engine_inputs& e = in.inputs();  // checked when the source was made
  r.req_pool_index = ref_of(e.req_pool_index.data, e.req_pool_index.type, e.req_pool_index.stride);
  r.seq_len = ref_of(e.seq_len.data, e.seq_len.type, e.seq_len.stride);
  const engine_slots& s = e.out_cache_loc;
  r.cache_loc = ref_of(s.data, s.type, s.slot_stride);
  r.cache_loc_branch_stride = s.branch_stride;
  r.cache_loc_request_stride = s.request_stride;
  r.real_batch = e.real_batch;
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

}  // namespace specgraph
