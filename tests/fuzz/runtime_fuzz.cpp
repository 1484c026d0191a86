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
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/ops.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/runtime.hpp"
#include "testing/engine_probe.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

using specgraph::fuzz::guarded;
using specgraph::fuzz::reader;

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
  world(reader& in, const specgraph::draft_config& cfg, bool deferred) : in_(in), cfg_(cfg) {
    ex_ = specgraph::make_host_executor({deferred});
    deferred_ = deferred;
  }

  // Returns false when the configuration is refused (checked: nothing written).
  bool build() {
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
    probe_ = std::make_unique<guarded<std::int64_t>>(
        rows * static_cast<std::size_t>(cfg_.num_steps), std::int64_t{0});
    rt_->set_forward([this](const specgraph::step_view& v) { forward(v); });
    return true;
  }

  void run_ops() {
    for (int n = 0; n < 24 && !in_.empty(); ++n) {
      const std::uint8_t op = in_.byte();
      snapshot_ = (op & 0x80) == 0 || !deferred_;  // some ops keep deferred work in flight
      switch ((op & 0x7f) % 13) {
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
        default: op_composed_graph(); break;
      }
    }
  }

  // The final checks: guards, then everything outside the arena, after the runtime is gone.
  void finish() {
    op_read_guards();
    rt_.reset();
    ex_->synchronize();
    FUZZ_CHECK(arena_->canaries_intact(), "a write outside the arena (its margins changed)");
    FUZZ_CHECK(probe_->canaries_intact(), "a write outside the probe's output");
    FUZZ_CHECK(rtt_->canaries_intact() && rtt_->same(rtt0_), "req_to_token was written");
    for (const auto& d : inputs_) {
      FUZZ_CHECK(!d->pool32 || (d->pool32->canaries_intact() && d->pool32->same(d->pool32_0)),
                 "device req_pool_index (int32) was written");
      FUZZ_CHECK(!d->seq32 || (d->seq32->canaries_intact() && d->seq32->same(d->seq32_0)),
                 "device seq_len (int32) was written");
      FUZZ_CHECK(!d->pool64 || (d->pool64->canaries_intact() && d->pool64->same(d->pool64_0)),
                 "device req_pool_index (int64) was written");
      FUZZ_CHECK(!d->seq64 || (d->seq64->canaries_intact() && d->seq64->same(d->seq64_0)),
                 "device seq_len (int64) was written");
      FUZZ_CHECK(!d->slots || (d->slots->canaries_intact() && d->slots->same(d->slots_0)),
                 "device out_cache_loc was written");
    }
  }

 private:
  // ---- setup ---------------------------------------------------------------------------------

  void make_req_to_token() {
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

  void forward(const specgraph::step_view& v) {
    if (forward_fails_ == 1) throw std::runtime_error("the engine's forward failed");
    if (forward_fails_ == 2) v.ex->synchronize();  // forbidden during capture
    specgraph::testing::engine_probe_kernel::params p{};
    p.expand_table = v.expand_page_table;
    p.expand_capacity = v.expand_capacity;
    p.expand_stride = v.expand_stride;
    p.expand_cache_seqlen = v.expand_cache_seqlen;
    p.prefix_table = v.prefix_page_table;
    p.prefix_stride = v.prefix_stride;
    p.prefix_capacity = v.prefix_capacity;
    p.prefix_seqlen = v.prefix_seqlen;
    p.topk = v.topk;
    p.out = probe_->data() +
            static_cast<std::size_t>(v.step) * static_cast<std::size_t>(rt_->plan().max_rows());
    p.device_step = v.device_step;  // device_steps mode: the slice follows the device counter
    p.out_step_stride = rt_->plan().max_rows();
    v.ex->launch(specgraph::make_kernel_launch<specgraph::testing::engine_probe_kernel>(
        p, v.rows, specgraph::testing::engine_probe_cuda()));
  }

  std::vector<unsigned char> arena_bytes() {
    std::vector<unsigned char> out(rt_->plan().total_bytes);
    ex_->copy_to_host(out.data(), rt_->buffers().base(), out.size());
    return out;
  }

  // Runs one call. A rejected call must leave the arena as it was; returns whether it ran.
  // SPECGRAPH_FUZZ_TRACE=1 prints each call and its outcome (for reading a crash or a seed).
  template <class F>
  bool attempt(const char* what, F&& call, bool may_raise_guard = false) {
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

  std::int32_t pick_bucket() {
    const auto& b = rt_->plan().config.buckets;
    const std::uint8_t m = in_.byte();
    if (m < 0xe0) return b[m % b.size()];
    return in_.value32(1, cfg_.max_batch, cfg_.max_batch);
  }
  std::int32_t pick_step() { return in_.value32(0, cfg_.num_steps - 1, cfg_.num_steps); }

  // ---- checks after a step ran ---------------------------------------------------------------

  void check_guards_now() {
    if (!snapshot_) return;  // reading back would synchronise a deferred executor
    const std::vector<specgraph::guard_word> g = rt_->read_guards();
    for (std::size_t i = 0; i < g.size(); ++i) {
      specgraph::fuzz::check_guard_word(g[i], "runtime guard word");
      const bool sparse = static_cast<std::int32_t>(i) >= 2 + cfg_.num_steps;
      FUZZ_CHECK(
          sparse || g[i].kind != static_cast<std::int32_t>(specgraph::violation_kind::capacity),
          "capacity violation in guard word %zu: %s", i, specgraph::describe(g[i]).c_str());
    }
  }

  template <class T>
  const T* at(const std::vector<unsigned char>& a, std::size_t offset) const {
    return reinterpret_cast<const T*>(a.data() + offset);
  }

  // Steps [first, last] of the round staged by stage() against the references.
  void check_round(std::int32_t first, std::int32_t last) {
    check_guards_now();
    if (!staged_.valid || !snapshot_) return;
    const specgraph::plan& p = rt_->plan();
    const specgraph::plan_layout& l = p.layout;
    const std::vector<unsigned char> a = arena_bytes();
    const std::int32_t bucket = staged_.bucket, topk = cfg_.topk, steps = cfg_.num_steps;
    FUZZ_CHECK(*at<std::int32_t>(a, l.real_batch) == staged_.batch, "input.real_batch");
    for (std::int32_t r = 0; r < bucket; ++r) {
      const auto ru = static_cast<std::size_t>(r);
      FUZZ_CHECK(at<std::int32_t>(a, l.req_pool_index)[r] == staged_.pool[ru] &&
                     at<std::int32_t>(a, l.seq_len)[r] == staged_.seq[ru],
                 "staged inputs of request %d", r);
    }
    const std::size_t n_slots = static_cast<std::size_t>(bucket) * static_cast<std::size_t>(topk) *
                                static_cast<std::size_t>(steps);
    FUZZ_CHECK(std::equal(staged_.slots.begin(), staged_.slots.end(),
                          at<std::int64_t>(a, l.out_cache_loc)) &&
                   staged_.slots.size() == n_slots,
               "staged out_cache_loc (padded to bucket %d)", bucket);
    // Prefix (section 2).
    const std::int32_t cap = l.prefix_capacity;
    for (std::int32_t r = 0; r < bucket; ++r) {
      const auto ru = static_cast<std::size_t>(r);
      const specgraph::fuzz::prefix_request_result want = specgraph::fuzz::prefix_reference(
          rtt0_.data(), cfg_.max_context_len, cfg_.pool_rows, staged_.pool[ru], staged_.seq[ru],
          cfg_.page_size, cfg_.kv_slots);
      if (want.bad) continue;  // refused: keeps earlier contents
      FUZZ_CHECK(at<std::int32_t>(a, l.last_page_len)[r] == want.last_page_len &&
                     at<std::int32_t>(a, l.prefix_seqlen)[r] == want.prefix_seqlen,
                 "prefix scalars of request %d", r);
      const std::int32_t* row =
          at<std::int32_t>(a, l.prefix_page_table) + ru * static_cast<std::size_t>(cap);
      const std::vector<std::int32_t> expected = specgraph::fuzz::expected_table_row(
          std::vector<std::int32_t>(static_cast<std::size_t>(cap), 0), want.pages, cap);
      FUZZ_CHECK(std::equal(expected.begin(), expected.end(), row),
                 "prefix.page_table row %d differs from the reference", r);
    }
    for (std::int32_t i = 0; i <= bucket; ++i) {
      FUZZ_CHECK(at<std::int32_t>(a, l.cu_seqlens_q)[i] == i * topk, "cu_seqlens_q[%d]", i);
    }
    // Expand, each step that ran (section 3), from the arena's own last_page_len. With a device
    // step counter every step shares one table: only the last step's contents remain.
    if (cfg_.device_steps) first = last;
    for (std::int32_t s = first; s <= last; ++s) {
      const auto su = static_cast<std::size_t>(s);
      const std::int32_t* table = at<std::int32_t>(a, l.expand_page_table[su]);
      const std::int32_t* seqlen = at<std::int32_t>(a, l.expand_cache_seqlen[su]);
      const auto width = static_cast<std::size_t>(s + 2);
      const auto stride = static_cast<std::size_t>(l.expand_stride[su]);
      for (std::int32_t row = 0; row < bucket * topk; ++row) {
        const std::int32_t r = row / topk;
        const std::int32_t lpl = at<std::int32_t>(a, l.last_page_len)[r];
        const specgraph::fuzz::expand_row_result want = specgraph::fuzz::expand_reference(
            staged_.slots.data() + static_cast<std::size_t>(row) * static_cast<std::size_t>(steps),
            s + 1, lpl, cfg_.page_size, s + 1, cfg_.kv_slots, cfg_.checked && r < staged_.batch);
        FUZZ_CHECK(!want.bad, "expand step %d row %d: host-validated inputs are out of range", s,
                   row);
        FUZZ_CHECK(want.pages.size() < width, "step %d row %d: %zu pages in a %zu-wide table", s,
                   row, want.pages.size(), width);
        const std::vector<std::int32_t> expected = specgraph::fuzz::expected_table_row(
            std::vector<std::int32_t>(width, 0), want.pages, s + 2);
        FUZZ_CHECK(std::equal(expected.begin(), expected.end(),
                              table + static_cast<std::size_t>(row) * stride),
                   "expand.page_table step %d row %d differs from the reference", s, row);
        FUZZ_CHECK(seqlen[row] == want.cache_seqlen, "expand.cache_seqlen step %d row %d = %d, %d",
                   s, row, seqlen[row], want.cache_seqlen);
      }
    }
  }

  // ---- operations ------------------------------------------------------------------------------

  void op_stage() {
    const std::int32_t batch = in_.value32(1, cfg_.max_batch, cfg_.max_batch);
    const std::size_t n = static_cast<std::size_t>(std::clamp(batch, 1, cfg_.max_batch + 1));
    const std::size_t per =
        static_cast<std::size_t>(cfg_.topk) * static_cast<std::size_t>(cfg_.num_steps);
    const bool wide = in_.flag();
    std::vector<std::int32_t> pool32(n), seq32(n);
    std::vector<std::int64_t> pool64(n), seq64(n), slots(n * per);
    const std::uint8_t quality = in_.byte();  // >= 0xe0: some values out of range
    const std::int32_t ps = cfg_.page_size;
    const std::int64_t pages = std::max<std::int64_t>(2, cfg_.kv_slots / ps);
    for (std::size_t r = 0; r < n; ++r) {
      std::int64_t pool = cfg_.pool_rows > 1 ? in_.small(1, cfg_.pool_rows - 1) : 0;
      std::int64_t seq = in_.small(1, cfg_.max_context_len);
      if (quality >= 0xe0 && in_.byte() >= 0xc0) {
        pool = in_.value(0, cfg_.pool_rows - 1, cfg_.pool_rows);
        seq = in_.value(1, cfg_.max_context_len, cfg_.max_context_len);
      }
      pool32[r] = static_cast<std::int32_t>(pool);
      seq32[r] = static_cast<std::int32_t>(seq);
      pool64[r] = pool;
      seq64[r] = seq;
      // Branch slots as engines lay them out (section 1): a fresh page per branch, draft token j
      // at offset (last_page_len + j) % ps.
      const std::int64_t lpl = seq % ps;
      for (std::int32_t t = 0; t < cfg_.topk; ++t) {
        std::int64_t page = 1 + in_.u16() % (pages - 1);
        for (std::int32_t j = 0; j < cfg_.num_steps; ++j) {
          const std::int64_t offset = (lpl + j) % ps;
          if (j > 0 && offset == 0) page = 1 + in_.u16() % (pages - 1);
          std::int64_t slot = page * ps + offset;
          if (slot >= cfg_.kv_slots) slot = in_.below(cfg_.kv_slots);
          slots[r * per + static_cast<std::size_t>(t * cfg_.num_steps + j)] = slot;
        }
      }
    }
    if (quality >= 0xe0) {
      for (int k = 0; k < (quality & 3) + 1; ++k) {
        slots[static_cast<std::size_t>(in_.below(static_cast<std::int64_t>(slots.size())))] =
            in_.value(0, cfg_.kv_slots - 1, cfg_.kv_slots);
      }
    }
    specgraph::round_inputs ri;
    ri.batch = batch;
    if (wide) {
      ri.req_pool_index = pool64.data();
      ri.seq_len = seq64.data();
    } else {
      ri.req_pool_index = pool32.data();
      ri.seq_len = seq32.data();
    }
    ri.out_cache_loc = slots.data();
    const std::uint8_t nulls = quality == 0xff ? in_.byte() : 0;
    if (nulls & 1) ri.req_pool_index = nullptr;
    if (nulls & 2) ri.seq_len = nullptr;
    if (nulls & 4) ri.out_cache_loc = nullptr;
    if (!attempt("stage", [&] { rt_->stage(ri); })) return;
    // Accepted: remember the padded round (section 4).
    const std::int32_t bucket = rt_->plan().bucket_for(batch);
    FUZZ_CHECK(rt_->staged_bucket() == bucket && rt_->staged_batch() == batch,
               "stage: staged bucket %d batch %d, expected %d %d", rt_->staged_bucket(),
               rt_->staged_batch(), bucket, batch);
    staged_ = staged_round{};
    staged_.valid = true;
    staged_.batch = batch;
    staged_.bucket = bucket;
    staged_.pool.assign(static_cast<std::size_t>(bucket), 0);
    staged_.seq.assign(static_cast<std::size_t>(bucket), 1);
    staged_.slots.assign(static_cast<std::size_t>(bucket) * per, 0);
    for (std::size_t r = 0; r < static_cast<std::size_t>(batch); ++r) {
      staged_.pool[r] = pool32[r];
      staged_.seq[r] = seq32[r];
    }
    std::copy(slots.begin(),
              slots.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(batch) * per),
              staged_.slots.begin());
  }

  // stage_device (through the runtime) or stage_round (the composable op) from executor memory.
  void op_stage_device(bool composable) {
    auto d = std::make_unique<device_inputs>();
    const std::int32_t batch = in_.value32(1, cfg_.max_batch, cfg_.max_batch);
    const std::size_t n = static_cast<std::size_t>(std::clamp(batch, 1, cfg_.max_batch + 1));
    const std::size_t per =
        static_cast<std::size_t>(cfg_.topk) * static_cast<std::size_t>(cfg_.num_steps);
    const std::uint8_t types = in_.byte();
    d->slots = std::make_unique<guarded<std::int64_t>>(n * per);
    for (std::size_t i = 0; i < n * per; ++i) {
      (*d->slots)[i] = in_.byte() < 0xf0 ? in_.below(std::min<std::int64_t>(cfg_.kv_slots, 1 << 16))
                                         : in_.value(0, cfg_.kv_slots - 1, cfg_.kv_slots);
    }
    auto value = [&](bool pool) {
      return pool ? in_.value(0, cfg_.pool_rows - 1, cfg_.pool_rows)
                  : in_.value(1, cfg_.max_context_len, cfg_.max_context_len);
    };
    if (types & 1) {
      d->pool64 = std::make_unique<guarded<std::int64_t>>(n);
      for (std::size_t i = 0; i < n; ++i) (*d->pool64)[i] = value(true);
      d->in.req_pool_index = d->pool64->data();
    } else {
      d->pool32 = std::make_unique<guarded<std::int32_t>>(n);
      for (std::size_t i = 0; i < n; ++i) (*d->pool32)[i] = static_cast<std::int32_t>(value(true));
      d->in.req_pool_index = d->pool32->data();
    }
    if (types & 2) {
      d->seq64 = std::make_unique<guarded<std::int64_t>>(n);
      for (std::size_t i = 0; i < n; ++i) (*d->seq64)[i] = value(false);
      d->in.seq_len = d->seq64->data();
    } else {
      d->seq32 = std::make_unique<guarded<std::int32_t>>(n);
      for (std::size_t i = 0; i < n; ++i) (*d->seq32)[i] = static_cast<std::int32_t>(value(false));
      d->in.seq_len = d->seq32->data();
    }
    d->in.batch = batch;
    d->in.out_cache_loc = d->slots->data();
    // Sometimes an index type that is neither int32 nor int64 (refused by name).
    if (types & 4) d->in.req_pool_index.type = static_cast<specgraph::index_type>(2 + (types >> 4));
    if (types == 0xff) d->in.out_cache_loc = nullptr;
    if (types & 8) {
      events_.emplace_back(*ex_);
      d->in.wait_for = events_.back().get();
      ex_->record_event(d->in.wait_for);
      events_.emplace_back(*ex_);
      d->in.done = events_.back().get();
    }
    if (d->pool32) d->pool32_0 = d->pool32->copy();
    if (d->seq32) d->seq32_0 = d->seq32->copy();
    if (d->pool64) d->pool64_0 = d->pool64->copy();
    if (d->seq64) d->seq64_0 = d->seq64->copy();
    d->slots_0 = d->slots->copy();
    const specgraph::device_round_inputs in = d->in;
    inputs_.push_back(std::move(d));
    bool ran = false;
    if (composable) {
      ran = attempt("stage_round", [&] { (void)specgraph::stage_round(*ex_, rt_->buffers(), in); });
    } else {
      ran = attempt("stage_device", [&] { rt_->stage_device(in); });
    }
    if (ran) staged_.valid = false;  // not validated on the host: only the guards are checked
  }

  void op_replay() {
    const std::int32_t step = pick_step();
    if (attempt("replay", [&] { rt_->replay(step); })) check_round(step, step);
  }

  void op_run_round() {
    const std::int32_t depth = in_.value32(1, cfg_.num_steps, cfg_.num_steps);
    if (attempt(
            "run_round", [&] { rt_->run_round(depth); }, true))
      check_round(0, depth - 1);
  }

  // device_depth: one launch, the device decides the depth (the arena's confidences, zero unless
  // the forward writes them, all reach the default threshold: the round runs to max_depth).
  void op_run_round_on_device() {
    if (attempt(
            "run_round_on_device", [&] { rt_->run_round_on_device(); }, true)) {
      std::int32_t depth = 0;
      if (snapshot_) {
        depth = rt_->read_round_depth();
        FUZZ_CHECK(depth >= 1 && depth <= cfg_.num_steps, "device-decided depth %d", depth);
        check_round(0, depth - 1);
      }
    }
  }

  void op_run_eager() {
    const std::int32_t step = pick_step();
    if (attempt("run_eager", [&] { rt_->run_eager(step); })) check_round(step, step);
  }

  void op_capture(int fails) {
    forward_fails_ = fails;
    const bool ran = attempt("capture", [&] { (void)rt_->capture(); });
    forward_fails_ = 0;
    FUZZ_CHECK(ran == (fails == 0), "capture %s with a forward that %s", ran ? "passed" : "failed",
               fails ? "fails" : "works");
  }

  void op_read_guards() {
    const bool keep = snapshot_;
    snapshot_ = true;
    check_guards_now();
    snapshot_ = keep;
  }

  void op_setup_round() {
    const std::int32_t bucket = pick_bucket();
    const bool null_table = in_.byte() == 0xff;
    const specgraph::engine_tables t{null_table ? nullptr : rtt_->data()};
    if (attempt("setup_round", [&] { specgraph::setup_round(*ex_, rt_->buffers(), bucket, t); })) {
      check_guards_now();
    }
  }

  void op_step_metadata() {
    const std::int32_t bucket = pick_bucket();
    const std::int32_t step = pick_step();
    if (attempt("step_metadata",
                [&] { specgraph::step_metadata(*ex_, rt_->buffers(), bucket, step); })) {
      check_guards_now();
    }
  }

  // setup_round + step_metadata recorded into the harness's own graph, then replayed.
  void op_composed_graph() {
    const std::int32_t bucket = pick_bucket();
    const std::int32_t step = pick_step();
    const specgraph::engine_tables t{rtt_->data()};
    const bool ran = attempt("composed graph", [&] {
      ex_->begin_capture();
      try {
        specgraph::setup_round(*ex_, rt_->buffers(), bucket, t);
        specgraph::step_metadata(*ex_, rt_->buffers(), bucket, step);
      } catch (...) {
        ex_->abort_capture();
        throw;
      }
      const std::unique_ptr<specgraph::graph> g = ex_->end_capture();
      const std::unique_ptr<specgraph::graph_exec> exec = ex_->instantiate(*g);
      ex_->launch_graph(*exec);
    });
    if (ran) check_guards_now();
  }

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
  std::unique_ptr<specgraph::draft_runtime> rt_;  // last: destroyed first
};

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

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in(data, size);
  const specgraph::draft_config cfg = decode(in);
  const bool deferred = (in.byte() & 1) != 0;
  if (cfg.max_context_len > 4096) {
    // Only its refusal is cheap: an accepted huge context would cost a huge req_to_token.
    try {
      specgraph::validate(cfg);
      return 0;
    } catch (const specgraph::invalid_argument&) {
    }
  }
  world w(in, cfg, deferred);
  if (!w.build()) return 0;
  w.run_ops();
  w.finish();
  return 0;
}
