// libFuzzer harness: draft_runtime over a small configuration decoded from the bytes, on the host
// executor (eager or deferred), in an arena the harness allocates with poisoned margins, with the
// engine-probe forward, driven by an arbitrary sequence of operations decoded from the bytes:
// stage (host inputs, sometimes invalid), stage_device (executor-memory inputs, int32 or int64,
// sometimes out of range), replay, run_round, run_eager, capture (sometimes with a forward that
// fails), read_guards, and the composable operations (setup_round, step_metadata, stage_round,
// and the first two recorded into a graph of the harness's own) over the runtime's buffers.
//
// Promises checked:
//   * every rejected call throws invalid_argument ("<field>: ..." on one printable line) or a
//     specgraph::error (replay before stage or capture, capture_failed) and leaves every byte of
//     the arena unchanged;
//   * guard words are always consistent, and no capacity violation ever appears: the plan sizes
//     every buffer for every input the kernels accept;
//   * after a round staged by stage() (validated on the host), every step that ran holds what the
//     independent references of docs/metadata.md sections 2-4 compute: the padded static inputs,
//     the prefix tables of requests whose req_to_token slots are in range, each step's expand
//     table and cache_seqlen;
//   * nothing is written outside the arena, the probe's output, or at all into req_to_token and
//     the device inputs (poisoned margins, ASan, and a final comparison).
//
// Split by job: this file decodes the configuration and the operations and builds the world;
// runtime_fuzz_operations.cpp runs each operation, runtime_fuzz_checks.cpp holds the checks.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/runtime.hpp"
#include "testing/probe_forward.hpp"
#include "tests/fuzz/runtime_fuzz.hpp"

namespace specgraph::fuzz::runtime_harness {

namespace {

// The configuration, from the first bytes (make_corpus.py writes its seeds in this encoding).
specgraph::draft_config decode(reader& in) {
  specgraph::draft_config c;
  c.max_batch = static_cast<std::int32_t>(in.small(1, 8));
  c.topk = static_cast<std::int32_t>(in.small(1, 3));
  c.num_steps = static_cast<std::int32_t>(in.small(1, 4));
  static const std::int32_t page_sizes[] = {1, 2, 4, 8, 16, 3, 5, 7};
  c.page_size = page_sizes[in.byte() % 8];
  c.max_context_len = static_cast<std::int32_t>(in.small(1, 48));
  c.pool_rows = static_cast<std::int32_t>(in.small(1, 6));
  const std::uint8_t slots = in.byte();
  c.kv_slots = slots < 0xc0 ? in.small(1, 1 << 12) : in.value(1, 1 << 12, std::int64_t{1} << 40);
  const std::uint8_t options = in.byte();
  c.checked = (options & 1) != 0;
  c.round_graphs = (options & 2) != 0;
  if ((options & 4) != 0) {
    for (std::int32_t b = 1; b < c.max_batch; ++b) {
      if (in.flag()) c.buckets.push_back(b);
    }
    c.buckets.push_back((options & 8) != 0 ? c.max_batch : c.max_batch + (options >> 6) - 1);
  }
  if ((options & 16) != 0)
    c.max_context_len = in.value32(1, 48, specgraph::limits::max_context_len);
  // Graph modes: a device step counter, and the device-decided depth (with round_graphs, or
  // depth without steps, refused by name).
  const std::uint8_t modes = in.byte();
  c.device_steps = (modes & 1) != 0;
  c.device_depth = (modes & 2) != 0;
  return c;
}

}  // namespace

world::world(reader& in, const specgraph::draft_config& cfg, bool deferred) : in_(in), cfg_(cfg) {
  ex_ = specgraph::make_host_executor({deferred});
  deferred_ = deferred;
}

bool world::build() {
  std::size_t bytes = 256;
  bool plannable = true;
  try {
    bytes = specgraph::make_plan(cfg_).total_bytes;
  } catch (const specgraph::invalid_argument&) {
    plannable = false;
  }
  arena_ = std::make_unique<guarded<unsigned char>>(bytes, static_cast<unsigned char>(0x5c));
  make_req_to_token();
  const auto arena0 = arena_->copy();
  try {
    rt_ = std::make_unique<specgraph::draft_runtime>(
        *ex_, cfg_, specgraph::engine_tables{rtt_->data()}, arena_->data());
  } catch (const specgraph::invalid_argument& e) {
    specgraph::fuzz::check_invalid_argument(e, "draft_runtime");
    FUZZ_CHECK(!plannable, "draft_runtime refused a config make_plan accepts: %s", e.what());
    FUZZ_CHECK(arena_->same(arena0) && arena_->canaries_intact(),
               "a refused draft_runtime wrote into the arena");
    return false;
  }
  FUZZ_CHECK(plannable, "draft_runtime accepted a config make_plan refuses");
  const std::size_t rows = static_cast<std::size_t>(rt_->plan().max_rows());
  probe_ = std::make_unique<guarded<std::int64_t>>(rows * static_cast<std::size_t>(cfg_.num_steps),
                                                   std::int64_t{0});
  rt_->set_forward([this](const specgraph::step_view& v) { forward(v); });
  return true;
}

void world::run_ops() {
  for (int n = 0; n < 24 && !in_.empty(); ++n) {
    const std::uint8_t op = in_.byte();
    snapshot_ = (op & 0x80) == 0 || !deferred_;  // some ops keep deferred work in flight
    switch ((op & 0x7f) % 14) {
      case 0: op_stage(); break;
      case 1: op_stage_device(false); break;
      case 2: op_replay(); break;
      case 3: op_run_round(); break;
      case 4: op_run_eager(); break;
      case 5: op_capture(0); break;
      case 6: op_capture(1 + in_.byte() % 2); break;
      case 7: op_read_guards(); break;
      case 8: op_setup_round(); break;
      case 9: op_step_metadata(); break;
      case 10: op_stage_device(true); break;
      case 11: op_run_round_on_device(); break;
      case 12: op_composed_graph(); break;
      default: op_composed_round(); break;
    }
  }
}

// ---- setup ---------------------------------------------------------------------------------

void world::make_req_to_token() {
  const auto rows = static_cast<std::size_t>(std::max(cfg_.pool_rows, 1));
  // A refused configuration never reads it: its width is capped, not the configuration.
  const auto cols = static_cast<std::size_t>(std::clamp(cfg_.max_context_len, 1, 4096));
  const std::int32_t ps = std::max(cfg_.page_size, 1);
  // Slots must fit the int32 table: pages below 2^31 / ps.
  const std::int64_t pages =
      std::clamp<std::int64_t>(cfg_.kv_slots / ps, 1, (std::int64_t{1} << 31) / ps - 1);
  rtt_ = std::make_unique<guarded<std::int32_t>>(rows * cols, 0);
  // Pool row 0 stays on page 0 (the padding target); other rows get pages from a generator.
  for (std::size_t r = 1; r < rows; ++r) {
    std::uint32_t h = in_.u16() * 2654435761u + static_cast<std::uint32_t>(r);
    for (std::size_t pos = 0; pos < cols; ++pos) {
      if (pos % static_cast<std::size_t>(ps) == 0) h = h * 1664525u + 1013904223u;
      (*rtt_)[r * cols + pos] = static_cast<std::int32_t>(
          static_cast<std::int64_t>((h >> 8) % static_cast<std::uint64_t>(pages)) * ps +
          static_cast<std::int64_t>(pos % static_cast<std::size_t>(ps)));
    }
  }
  const std::uint8_t bad = in_.byte();
  if (bad >= 0xe0) {  // a few out-of-range slots: refused requests (bad_input), never a crash
    for (int k = 0; k < (bad & 3) + 1; ++k) {
      const auto at = static_cast<std::size_t>(in_.below(static_cast<std::int64_t>(rows * cols)));
      (*rtt_)[at] = in_.value32(0, 64, cfg_.kv_slots);
    }
  }
  rtt0_ = rtt_->copy();
}

void world::forward(const specgraph::step_view& v) {
  if (forward_fails_ == 1) throw std::runtime_error("the engine's forward failed");
  if (forward_fails_ == 2) v.ex->synchronize();  // forbidden during capture
  // device_steps mode: the output slice follows the device counter, max_rows apart.
  const std::int64_t stride = rt_->plan().max_rows();
  specgraph::testing::launch_engine_probe(*v.ex, v, probe_->data() + v.step * stride, stride);
}

std::vector<unsigned char> world::arena_bytes() {
  std::vector<unsigned char> out(rt_->plan().total_bytes);
  ex_->copy_to_host(out.data(), rt_->buffers().base(), out.size());
  return out;
}

}  // namespace specgraph::fuzz::runtime_harness

namespace harness = specgraph::fuzz::runtime_harness;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  specgraph::fuzz::reader in(data, size);
  const specgraph::draft_config cfg = harness::decode(in);
  const bool deferred = (in.byte() & 1) != 0;
  if (cfg.max_context_len > 4096) {
    // Only its refusal is cheap: an accepted huge context would cost a huge req_to_token.
    try {
      specgraph::validate(cfg);
      return 0;
    } catch (const specgraph::invalid_argument&) {
    }
  }
  harness::world w(in, cfg, deferred);
  if (!w.build()) return 0;
  w.run_ops();
  w.finish();
  return 0;
}
