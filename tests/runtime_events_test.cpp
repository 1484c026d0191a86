// Ordering of draft_runtime's rounds with the engine's other streams (runtime.hpp,
// round_events; docs/metadata.md section 9): stage(), run_round() and run_round_on_device()
// wait for the engine's event before their work reads req_to_token, and record `done` after
// the round. The host executor has one stream, so a second one is emulated: a forwarding
// executor that, once the runtime waits for an event the "engine" has not recorded yet, holds
// back everything enqueued after the wait until the engine records it, as a CUDA stream does.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/forwarding_executor.hpp"
#include "specgraph/runtime.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// The executor's stream, with the engine's stream beside it. `pending(e)` marks an event the
// engine will record later; a wait for it holds back the executor's stream until record(e).
// Host reads (synchronize, copy_to_host, ...) while work is held back would wait forever on a
// GPU: here they fail the test instead.
class two_stream_executor final : public forwarding_executor {
 public:
  explicit two_stream_executor(std::unique_ptr<executor> inner)
      : forwarding_executor(std::move(inner)) {}

  // The engine's side.
  executor& engine() { return inner(); }
  void pending(device_event e) { pending_ = e; }
  void engine_records(device_event e) {
    ASSERT_EQ(e, pending_);
    pending_ = nullptr;
    held_ = false;
    queued_records_.clear();
    while (!queue_.empty()) {
      std::function<void()> op = std::move(queue_.front());
      queue_.pop_front();
      op();
    }
  }
  bool holding() const { return held_; }
  std::vector<std::string> log;  // the executor's stream, in order

  using forwarding_executor::record_event;
  using forwarding_executor::wait_event;
  void wait_event(device_event e, event_scope scope) override {
    log.push_back("wait " + name_of(e));
    if (e == pending_) {
      held_ = true;
      return;
    }
    enqueue([this, e, scope] { inner().wait_event(e, scope); });
  }
  void record_event(device_event e, event_scope scope) override {
    log.push_back("record " + name_of(e));
    if (held_) queued_records_.push_back(e);
    enqueue([this, e, scope] { inner().record_event(e, scope); });
  }
  bool event_complete(device_event e) override {
    for (device_event q : queued_records_) {
      if (q == e) return false;  // its record is still held back
    }
    return inner().event_complete(e);
  }
  void launch(const kernel_launch& k) override {
    log.push_back(std::string("kernel ") + k.name);
    // The params are the caller's until this call returns: keep a copy for later.
    auto bytes = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(k.params),
        static_cast<const unsigned char*>(k.params) + k.params_size);
    enqueue([this, k, bytes] {
      kernel_launch copy = k;
      copy.params = bytes->data();
      inner().launch(copy);
    });
  }
  void launch_graph(graph_exec& g) override {
    log.push_back("graph");
    enqueue([this, &g] { inner().launch_graph(g); });
  }
  void copy_from_pinned(void* dst, const void* src, std::size_t n) override {
    log.push_back("copy");
    enqueue([this, dst, src, n] { inner().copy_from_pinned(dst, src, n); });
  }
  void copy_on_device(void* dst, const void* src, std::size_t n) override {
    log.push_back("copy");
    enqueue([this, dst, src, n] { inner().copy_on_device(dst, src, n); });
  }
  void fill_bytes(void* dst, unsigned char v, std::size_t n) override {
    log.push_back("fill");
    enqueue([this, dst, v, n] { inner().fill_bytes(dst, v, n); });
  }
  void copy_to_device(void* dst, const void* src, std::size_t n) override {
    no_host_wait("copy_to_device");
    forwarding_executor::copy_to_device(dst, src, n);
  }
  void copy_to_host(void* dst, const void* src, std::size_t n) override {
    no_host_wait("copy_to_host");
    forwarding_executor::copy_to_host(dst, src, n);
  }
  void synchronize() override {
    no_host_wait("synchronize");
    forwarding_executor::synchronize();
  }
  void synchronize_event(device_event e) override {
    no_host_wait("synchronize_event");
    forwarding_executor::synchronize_event(e);
  }

  void label(device_event e, std::string n) { names_.emplace_back(e, std::move(n)); }

 private:
  void enqueue(std::function<void()> op) {
    if (held_) {
      queue_.push_back(std::move(op));
    } else {
      op();
    }
  }
  void no_host_wait(const char* what) const {
    if (held_)
      throw error(std::string(what) +
                  " would wait forever: the stream waits for an "
                  "event the engine has not recorded");
  }
  std::string name_of(device_event e) const {
    for (const auto& [event, n] : names_) {
      if (event == e) return n;
    }
    return "?";
  }

  device_event pending_ = nullptr;
  bool held_ = false;
  std::vector<device_event> queued_records_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::pair<device_event, std::string>> names_;
};

draft_config events_config(bool device_depth) {
  draft_config c;
  c.max_batch = 12;
  c.topk = 3;
  c.num_steps = 4;
  c.page_size = 4;
  c.max_context_len = 64;
  c.pool_rows = 16;
  c.kv_slots = 1 << 20;
  c.device_steps = device_depth;
  c.device_depth = device_depth;
  return c;
}

// The engine's req_to_token rewritten with every token moved by a whole number of pages: a
// different, equally valid table, whose prefix tables differ from the old one's.
std::vector<std::int32_t> moved_tables(const std::vector<std::int32_t>& rtt, std::int32_t ps) {
  std::vector<std::int32_t> out(rtt);
  for (std::int32_t& t : out) t += 512 * ps;
  return out;
}

struct engine_setup {
  explicit engine_setup(bool device_depth)
      : rng(test_seed()),
        ex(new two_stream_executor(make_host_executor())),
        owner(ex),
        eng(*ex, events_config(device_depth), rng),
        written(ex->engine()),
        done(ex->engine()) {
    ex->label(written.get(), "written");
    ex->label(done.get(), "done");
    eng.rt().capture();
  }
  // The engine writes its new req_to_token on its own stream, then records `written`.
  std::vector<std::int32_t> engine_writes_tables() {
    const std::vector<std::int32_t> moved = moved_tables(eng.req_to_token(), 4);
    ex->engine().copy_to_device(const_cast<std::int32_t*>(eng.tables().req_to_token),  // NOLINT
                                moved.data(), moved.size() * sizeof(std::int32_t));
    ex->engine_records(written.get());
    return moved;
  }
  std::mt19937_64 rng;
  two_stream_executor* ex;
  std::unique_ptr<executor> owner;
  sim_engine eng;
  event_handle written, done;
};

// The prefix tables of the staged round equal those of `rtt` (and so not those of the other).
void expect_prefix_of(sim_engine& eng, const host_round& r, const std::vector<std::int32_t>& rtt,
                      std::int32_t depth) {
  const model_round want = model_draft_round(eng.model(), rtt, r.batch, r.req_pool_index, r.seq_len,
                                             r.out_cache_loc, depth);
  const draft_buffers& b = eng.rt().buffers();
  EXPECT_EQ(eng.read(b.prefix_page_table(), want.prefix_table.size()), want.prefix_table);
}

// stage(in) with in.wait_for: the copies wait for the engine, and so does the round after them.
TEST(RuntimeEvents, StageWaitsForTheEnginesEvent) {
  engine_setup s(false);
  const host_round r = s.eng.random_round(s.rng, 7);
  round_inputs in = r.inputs();
  in.wait_for = s.written.get();
  s.ex->pending(s.written.get());
  s.ex->log.clear();
  s.eng.rt().stage(in);
  s.eng.rt().run_round(3);
  EXPECT_TRUE(s.ex->holding()) << "nothing may run before the engine's event";
  ASSERT_FALSE(s.ex->log.empty());
  EXPECT_EQ(s.ex->log.front(), "wait written") << "the wait comes before the staging's work";
  const std::vector<std::int32_t> moved = s.engine_writes_tables();
  expect_prefix_of(s.eng, r, moved, 3);
}

// run_round(depth, {wait_for, done}), per-step replays: waits before the first, records done
// after the last.
TEST(RuntimeEvents, RunRoundWaitsForTheEngineAndRecordsDone) {
  engine_setup s(false);
  for (const std::int32_t depth : {2, 4}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    const host_round r = s.eng.random_round(s.rng, 5);
    s.eng.rt().stage(r.inputs());
    s.ex->pending(s.written.get());
    s.ex->log.clear();
    s.eng.rt().run_round(depth, {s.written.get(), s.done.get()});
    std::vector<std::string> want{"wait written"};
    for (std::int32_t i = 0; i < depth; ++i) want.emplace_back("graph");
    want.emplace_back("record done");
    EXPECT_EQ(s.ex->log, want);
    EXPECT_FALSE(s.ex->event_complete(s.done.get()));
    const std::vector<std::int32_t> moved = s.engine_writes_tables();
    s.ex->synchronize_event(s.done.get());
    expect_prefix_of(s.eng, r, moved, depth);
    s.eng.restore_req_to_token();
  }
  // A refused round enqueues nothing, not even the wait.
  s.ex->log.clear();
  expect_invalid([&] { s.eng.rt().run_round(5, {s.written.get(), s.done.get()}); }, "depth");
  EXPECT_TRUE(s.ex->log.empty());
}

// run_round_on_device({wait_for, done}): one launch between the wait and the record; the round
// reads the tables the engine wrote before recording its event.
TEST(RuntimeEvents, RunRoundOnDeviceWaitsForTheEngineAndRecordsDone) {
  engine_setup s(true);
  const host_round r = s.eng.random_round(s.rng, 9);
  round_inputs in = r.inputs();
  in.max_depth = 3;
  s.eng.rt().stage(in);
  s.ex->pending(s.written.get());
  s.ex->log.clear();
  s.eng.rt().run_round_on_device({s.written.get(), s.done.get()});
  EXPECT_EQ(s.ex->log, (std::vector<std::string>{"wait written", "graph", "record done"}));
  const std::vector<std::int32_t> moved = s.engine_writes_tables();
  EXPECT_EQ(s.eng.rt().read_round_depth(), 3);
  expect_prefix_of(s.eng, r, moved, 3);
}

// The emulation is honest: without the events the round runs at once and reads the old tables,
// exactly the race the events close on a GPU.
TEST(RuntimeEvents, WithoutTheEventTheRoundReadsTheOldTables) {
  engine_setup s(false);
  const host_round r = s.eng.random_round(s.rng, 6);
  s.eng.rt().stage(r.inputs());
  s.ex->pending(s.written.get());
  s.eng.rt().run_round(2);
  EXPECT_FALSE(s.ex->holding());
  const std::vector<std::int32_t> moved = s.engine_writes_tables();
  expect_prefix_of(s.eng, r, s.eng.req_to_token(), 2);
  const model_round stale = model_draft_round(s.eng.model(), moved, r.batch, r.req_pool_index,
                                              r.seq_len, r.out_cache_loc, 2);
  EXPECT_NE(s.eng.read(s.eng.rt().buffers().prefix_page_table(), stale.prefix_table.size()),
            stale.prefix_table);
}

}  // namespace
}  // namespace specgraph::testing
