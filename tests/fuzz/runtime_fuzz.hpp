// What the runtime_fuzz files share: the harness's world (the runtime under test in an arena the
// harness owns, the engine tables and the probe forward it reads, the operations decoded from the
// bytes) and what it keeps between operations. The world's members are split by job:
// runtime_fuzz.cpp builds it and decodes the operations, runtime_fuzz_operations.cpp runs each
// operation, runtime_fuzz_checks.cpp checks the arena after a step and at the end. A named
// namespace, not an anonymous one, so that those files define the members of one class.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/runtime.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace specgraph::fuzz::runtime_harness {

// Device inputs of one stage_device / stage_round call, kept alive (and checked) until the end:
// a deferred executor reads them when the queued staging kernel runs.
struct device_inputs {
  std::unique_ptr<guarded<std::int32_t>> pool32, seq32;
  std::unique_ptr<guarded<std::int64_t>> pool64, seq64, slots;
  std::vector<std::int32_t> pool32_0, seq32_0;
  std::vector<std::int64_t> pool64_0, seq64_0, slots_0;
  specgraph::device_round_inputs in;
};

// What stage() was given, padded to the bucket as docs/metadata.md section 4 says.
struct staged_round {
  bool valid = false;  // the current round came from a successful stage()
  std::int32_t batch = 0, bucket = 0;
  std::vector<std::int32_t> pool, seq;  // [bucket]
  std::vector<std::int64_t> slots;      // [bucket][topk][num_steps]
};

class world {
 public:
  world(reader& in, const specgraph::draft_config& cfg, bool deferred);

  // Returns false when the configuration is refused (checked: nothing written).
  bool build();
  // Decodes and runs the operations that follow in the bytes (at most 24).
  void run_ops();
  // The final checks: guards, then everything outside the arena, after the runtime is gone.
  void finish();

 private:
  // ---- setup (runtime_fuzz.cpp) ----------------------------------------------------------------

  void make_req_to_token();
  void forward(const specgraph::step_view& v);
  std::vector<unsigned char> arena_bytes();

  // ---- running an operation ------------------------------------------------------------------

  // Runs one call. A rejected call must leave the arena as it was; returns whether it ran.
  // SPECGRAPH_FUZZ_TRACE=1 prints each call and its outcome (for reading a crash or a seed).
  // A template, so defined in this header: every operation instantiates it.
  template <class F>
  bool attempt(const char* what, F&& call, bool may_raise_guard = false);

  // ---- checks after a step ran (runtime_fuzz_checks.cpp) ---------------------------------------

  void check_guards_now();
  template <class T>
  const T* at(const std::vector<unsigned char>& a, std::size_t offset) const {
    return reinterpret_cast<const T*>(a.data() + offset);
  }
  // Steps [first, last] of the round staged by stage() against the references.
  void check_round(std::int32_t first, std::int32_t last);

  // ---- operations (runtime_fuzz_operations.cpp) ------------------------------------------------

  // Arguments several operations decode: a bucket (mostly a planned one) and a step.
  std::int32_t pick_bucket();
  std::int32_t pick_step();
  void op_stage();
  void op_stage_device(bool composable);
  void op_replay();
  void op_run_round();
  void op_run_round_on_device();
  void op_run_eager();
  void op_capture(int fails);
  void op_read_guards();
  void op_setup_round();
  void op_step_metadata();
  void op_composed_graph();
  void op_composed_round();

  reader& in_;
  specgraph::draft_config cfg_;
  bool deferred_ = false;
  bool snapshot_ = true;
  int forward_fails_ = 0;
  std::unique_ptr<specgraph::executor> ex_;
  std::unique_ptr<guarded<unsigned char>> arena_;
  std::unique_ptr<guarded<std::int32_t>> rtt_;
  std::vector<std::int32_t> rtt0_;
  std::unique_ptr<guarded<std::int64_t>> probe_;
  std::vector<std::unique_ptr<device_inputs>> inputs_;
  std::vector<specgraph::event_handle> events_;
  staged_round staged_;
  bool counter_spent_ = false;  // a composed round moved the device counter since staging
  std::unique_ptr<specgraph::draft_runtime> rt_;  // last: destroyed first
};

template <class F>
bool world::attempt(const char* what, F&& call, bool may_raise_guard) {
  static const bool trace = std::getenv("SPECGRAPH_FUZZ_TRACE") != nullptr;
  std::vector<unsigned char> before;
  if (snapshot_) before = arena_bytes();
  try {
    call();
    if (trace) std::fprintf(stderr, "[runtime_fuzz] %s: ok\n", what);
    return true;
  } catch (const specgraph::guard_violation& e) {
    FUZZ_CHECK(may_raise_guard && cfg_.checked, "%s raised guard_violation: %s", what, e.what());
    if (trace) std::fprintf(stderr, "[runtime_fuzz] %s: guard_violation: %s\n", what, e.what());
    FUZZ_CHECK(specgraph::fuzz::printable_line(e.what()), "%s: guard message not one line", what);
    return true;  // the round ran; the violation was reported as it should be
  } catch (const specgraph::invalid_argument& e) {
    specgraph::fuzz::check_invalid_argument(e, what);
    if (trace) std::fprintf(stderr, "[runtime_fuzz] %s: refused: %s\n", what, e.what());
  } catch (const specgraph::cuda_error& e) {
    FUZZ_CHECK(false, "%s: cuda_error on the host executor: %s", what, e.what());
  } catch (const specgraph::error& e) {
    FUZZ_CHECK(specgraph::fuzz::printable_line(e.what()), "%s: error message not one line: %s",
               what, e.what());
    if (trace) std::fprintf(stderr, "[runtime_fuzz] %s: refused: %s\n", what, e.what());
  }
  if (snapshot_) {
    FUZZ_CHECK(arena_bytes() == before, "%s was refused but changed the arena", what);
  }
  return false;
}

}  // namespace specgraph::fuzz::runtime_harness
