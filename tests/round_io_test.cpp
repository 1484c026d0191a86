// Round sources and CSR targets as values (round_io.hpp): a source or target is checked once,
// when it is made, for one plan; every op over the buffers of another plan (even one planned from
// the same configuration) refuses it by name before anything is written, and the ops, the
// runtime's capture and its rounds never check a bound source or target again.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "graphs/input_reads.hpp"
#include "specgraph/csr_ops.hpp"
#include "specgraph/engine_inputs.hpp"
#include "specgraph/round_io.hpp"
#include "specgraph/runtime.hpp"
#include "tests/engine_inputs_support.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

class RoundIo : public ExecutorTest {};

std::vector<unsigned char> bytes_of(executor& ex, const void* p, std::size_t n) {
  std::vector<unsigned char> out(n);
  ex.copy_to_host(out.data(), p, n);
  return out;
}

// The engine's own kv_indptr / kv_indices for plan p, exactly sized, every byte poisoned.
struct engine_csr {
  engine_csr(executor& ex, const plan& p)
      : indptr(ex, static_cast<std::size_t>(p.config.num_steps * (p.max_rows() + 1)) * 4),
        indices(ex, static_cast<std::size_t>(p.config.num_steps * widest(p)) * 4) {
    ex.fill_bytes(indptr.data(), 0x5A, indptr.size());
    ex.fill_bytes(indices.data(), 0x5A, indices.size());
  }
  static std::int64_t widest(const plan& p) { return p.layout.csr_capacity.back(); }
  csr_outputs outputs(const plan& p) const {
    csr_outputs o;
    o.kv_indptr = indptr.as<std::int32_t>();
    o.kv_indptr_stride = p.max_rows() + 1;
    o.kv_indptr_size = p.config.num_steps * o.kv_indptr_stride;
    o.kv_indices = indices.data();
    o.kv_indices_type = index_type::int32;
    o.kv_indices_stride = widest(p);
    o.kv_indices_size = p.config.num_steps * o.kv_indices_stride;
    return o;
  }
  device_buffer indptr, indices;
};

TEST_P(RoundIo, ASourceOrTargetMadeForAnotherPlanIsRefusedByNameWithNothingWritten) {
  std::mt19937_64 rng(11);
  const draft_config c = config_for(mode::device_depth, 1, /*csr=*/true);
  sim_engine eng(*ex, c, rng);
  const draft_buffers& b = eng.rt().buffers();
  const plan& own = eng.rt().plan();
  const plan same_config = make_plan(eng.config());  // equal in every field, another plan
  draft_config wider = eng.config();
  wider.max_context_len *= 2;
  const plan other = make_plan(wider);
  input_layout l;
  l.slots = c.num_steps;
  engine_tensors tensors(*ex, l, own.max_bucket(), c.topk);
  tensors.write(eng.random_round(rng, 3), c.num_steps);
  engine_csr out(*ex, other);  // large enough for either plan
  const std::int32_t bucket = own.bucket_for(3);
  ex->begin_capture();
  const std::unique_ptr<graph> body = ex->end_capture();
  const engine_tables tables = eng.tables();
  const csr_target own_target(own, out.outputs(own));
  for (const plan* wrong : {&same_config, &other}) {
    SCOPED_TRACE(wrong == &other ? "a plan of another configuration" : "a plan of the same one");
    const round_source source(*wrong, tensors.inputs());
    const csr_target target(*wrong, out.outputs(*wrong));
    eng.poison();
    ex->fill_bytes(out.indptr.data(), 0x5A, out.indptr.size());
    ex->synchronize();
    const std::vector<unsigned char> arena = bytes_of(*ex, b.base(), own.total_bytes);
    const std::vector<unsigned char> indptr = bytes_of(*ex, out.indptr.data(), out.indptr.size());
    const std::string why = "another plan";
    expect_invalid([&] { setup_round(*ex, b, bucket, tables, source); }, "source", why);
    expect_invalid([&] { step_metadata(*ex, b, bucket, 0, source); }, "source", why);
    expect_invalid([&] { step_metadata(*ex, b, bucket, at_device_step, source); }, "source", why);
    expect_invalid([&] { csr_indices(*ex, b, bucket, 1, tables, {}, source); }, "source", why);
    expect_invalid([&] { csr_indices(*ex, b, bucket, whole_round, tables, own_target, source); },
                   "source", why);
    expect_invalid([&] { csr_indices(*ex, b, bucket, at_device_step, tables, target); }, "target",
                   why);
    expect_invalid([&] { csr_indices(*ex, b, bucket, 0, tables, target); }, "target", why);
    expect_invalid([&] { continue_while_confident(*ex, b, bucket, 0, source); }, "source", why);
    expect_invalid([&] { (void)capture_device_depth_round(*ex, b, bucket, *body, source); },
                   "source", why);
    ex->synchronize();
    EXPECT_EQ(bytes_of(*ex, b.base(), own.total_bytes), arena) << "the arena was written";
    EXPECT_EQ(bytes_of(*ex, out.indptr.data(), out.indptr.size()), indptr)
        << "the engine's kv_indptr was written";
  }
  // The control: the same calls with a source and target made for these buffers' plan run and
  // write (the refusals above are about the plan, not the values).
  eng.poison();
  ex->synchronize();
  const std::vector<unsigned char> poisoned = bytes_of(*ex, b.base(), own.total_bytes);
  const round_source source(own, tensors.inputs());
  begin_round(*ex, b);
  setup_round(*ex, b, bucket, tables, source);
  step_metadata(*ex, b, bucket, at_device_step, source);
  csr_indices(*ex, b, bucket, at_device_step, tables, own_target, source);
  ex->synchronize();
  EXPECT_NE(bytes_of(*ex, b.base(), own.total_bytes), poisoned);
  const std::vector<std::int32_t> row0 = eng.read(out.indptr.as<std::int32_t>(), 1);
  EXPECT_EQ(row0[0], 0) << "kv_indptr row 0 of step 0 starts at 0";
}

TEST_P(RoundIo, ABoundSourceAndTargetAreCheckedOnceNotPerOpCall) {
  std::mt19937_64 rng(12);
  const draft_config c = config_for(mode::device_depth, 1, /*csr=*/true);
  sim_engine eng(*ex, c, rng);
  const draft_buffers& b = eng.rt().buffers();
  const plan& p = eng.rt().plan();
  input_layout l;
  l.slots = c.num_steps;
  engine_tensors tensors(*ex, l, p.max_bucket(), c.topk);
  tensors.write(eng.random_round(rng, 3), c.num_steps);
  engine_csr out(*ex, p);
  const std::int32_t bucket = p.bucket_for(3);
  ex->begin_capture();
  const std::unique_ptr<graph> body = ex->end_capture();

  const std::int64_t inputs_before = detail::engine_input_checks();
  const std::int64_t outputs_before = detail::csr_output_checks();
  const round_source source(p, tensors.inputs());
  const csr_target target(p, out.outputs(p));
  EXPECT_EQ(detail::engine_input_checks(), inputs_before + 1) << "made: checked once";
  EXPECT_EQ(detail::csr_output_checks(), outputs_before + 1) << "made: checked once";
  for (std::int32_t step = 0; step < c.num_steps; ++step) {  // the device step body, each step
    begin_round(*ex, b);
    setup_round(*ex, b, bucket, eng.tables(), source);
    step_metadata(*ex, b, bucket, at_device_step, source);
    csr_indices(*ex, b, bucket, at_device_step, eng.tables(), target, source);
    csr_indices(*ex, b, bucket, whole_round, eng.tables(), target, source);
    advance_step(*ex, b);
  }
  (void)capture_device_depth_round(*ex, b, bucket, *body, source);
  ex->synchronize();
  EXPECT_EQ(detail::engine_input_checks(), inputs_before + 1) << "re-checked by an op";
  EXPECT_EQ(detail::csr_output_checks(), outputs_before + 1) << "re-checked by an op";

  // The runtime: bind_inputs checks once; its captures, replays and eager steps never again.
  const draft_config per_step = config_for(mode::replay_steps, 1, /*csr=*/true);
  sim_engine bound(*ex, per_step, rng);
  engine_tensors engine_in(*ex, l, bound.rt().plan().max_bucket(), per_step.topk);
  engine_in.write(bound.random_round(rng, 3), per_step.num_steps);
  const std::int64_t before_bind = detail::engine_input_checks();
  bound.rt().bind_inputs(engine_in.inputs());
  EXPECT_EQ(detail::engine_input_checks(), before_bind + 1) << "bind_inputs checks once";
  bound.rt().capture();
  for (int round = 0; round < 2; ++round) {
    bound.rt().begin_round(bound.rt().plan().bucket_for(3));
    run_full_round(bound.rt(), round == 0 ? mode::replay_steps : mode::eager);
  }
  ex->synchronize();
  EXPECT_EQ(detail::engine_input_checks(), before_bind + 1)
      << "capture or a round re-checked the bound inputs";
}

SPECGRAPH_INSTANTIATE_EXECUTORS(RoundIo);

}  // namespace
}  // namespace specgraph::testing
