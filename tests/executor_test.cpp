// The executor seam: the host emulation is honest about what stream capture forbids, and both
// executors record launches (with their params at record time) and replay them in order.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/metadata.hpp"
#include "specgraph/row_kernel.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

// out[row] = out[row] * 10 + digit: the order of launches shows in the result.
struct append_digit_kernel {
  struct params {
    std::int64_t* out;
    std::int64_t digit;
  };
  static constexpr const char* name = "append_digit";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    p.out[row] = p.out[row] * 10 + p.digit;
  }
};

// Host-only kernel: the cuda instances use the built-in kernels through the runtime tests.
kernel_launch append_digit(std::int64_t* out, std::int64_t digit, std::int64_t rows,
                           append_digit_kernel::params& storage) {
  storage = {out, digit};
  return make_kernel_launch<append_digit_kernel>(storage, rows, nullptr);
}

TEST(HostExecutor, ForbidsWhatStreamCaptureForbids) {
  auto ex = make_host_executor();
  device_buffer buf(*ex, 64);
  ex->begin_capture();
  EXPECT_THROW((void)ex->allocate(16), capture_violation);
  EXPECT_THROW(ex->synchronize(), capture_violation);
  std::int32_t x = 0;
  EXPECT_THROW(ex->copy_to_host(&x, buf.data(), 4), capture_violation);
  EXPECT_THROW(ex->copy_to_device(buf.data(), &x, 4), capture_violation);
  EXPECT_THROW(ex->begin_capture(), capture_violation);
  auto g = ex->end_capture();
  EXPECT_THROW((void)ex->end_capture(), capture_violation);
  try {
    ex->begin_capture();
    (void)ex->allocate(16);
    ADD_FAILURE() << "allocate during capture must throw";
  } catch (const capture_violation& e) {
    EXPECT_NE(std::string(e.what()).find("allocate is not allowed during graph capture"),
              std::string::npos);
  }
  ex->abort_capture();
  EXPECT_FALSE(ex->capturing());
  EXPECT_NO_THROW(ex->synchronize());  // the stream is usable again
}

TEST(HostExecutor, CaptureRecordsLaunchesWithParamsAtRecordTimeAndReplaysInOrder) {
  auto ex = make_host_executor();
  device_buffer buf(*ex, 3 * sizeof(std::int64_t));
  ex->fill_bytes(buf.data(), 0, buf.size());
  append_digit_kernel::params storage{};
  ex->begin_capture();
  ex->launch(append_digit(buf.as<std::int64_t>(), 1, 3, storage));
  ex->launch(append_digit(buf.as<std::int64_t>(), 2, 2, storage));  // storage reused: copied
  storage.digit = 9;  // changing the struct after the launch must not change the graph
  auto g = ex->end_capture();
  EXPECT_EQ(g->node_count(), 2u);
  std::vector<std::int64_t> out(3);
  ex->copy_to_host(out.data(), buf.data(), 24);
  EXPECT_EQ(out, (std::vector<std::int64_t>{0, 0, 0})) << "capture must not execute";
  auto exec = ex->instantiate(*g);
  ex->launch_graph(*exec);
  ex->launch_graph(*exec);
  ex->copy_to_host(out.data(), buf.data(), 24);
  EXPECT_EQ(out, (std::vector<std::int64_t>{1212, 1212, 11}));
  EXPECT_EQ(ex->counters().graph_launches, 2);
  EXPECT_EQ(ex->counters().kernel_launches, 0);
}

TEST(HostExecutor, UpdateRefusesADifferentTopology) {
  auto ex = make_host_executor();
  device_buffer buf(*ex, 8);
  append_digit_kernel::params storage{};
  ex->begin_capture();
  ex->launch(append_digit(buf.as<std::int64_t>(), 1, 1, storage));
  auto one = ex->end_capture();
  ex->begin_capture();
  ex->launch(append_digit(buf.as<std::int64_t>(), 2, 1, storage));
  auto same_shape = ex->end_capture();
  ex->begin_capture();
  ex->launch(append_digit(buf.as<std::int64_t>(), 1, 1, storage));
  ex->fill_bytes(buf.data(), 0, 8);
  auto two = ex->end_capture();
  auto exec = ex->instantiate(*one);
  EXPECT_TRUE(ex->update(*exec, *same_shape));
  EXPECT_FALSE(ex->update(*exec, *two));
  ex->fill_bytes(buf.data(), 0, 8);
  ex->launch_graph(*exec);  // still the updated single-node graph: digit 2
  std::int64_t v = 0;
  ex->copy_to_host(&v, buf.data(), 8);
  EXPECT_EQ(v, 2);
}

// out[row] = out[row] * 100 + digit: a second kernel function of the same shape.
struct append_two_digits_kernel {
  struct params {
    std::int64_t* out;
    std::int64_t digit;
  };
  static constexpr const char* name = "append_two_digits";
  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row) {
    p.out[row] = p.out[row] * 100 + p.digit;
  }
};

// Both sides of cudaGraphExecUpdate's rule (executor.hpp, update), which the host executor
// follows: a kernel node's function may change (CUDA 13 allows it within one context, without
// CDP, device-side graph calls or cooperative launches), so the update succeeds and the next
// launch runs the new function; a node's type, a child graph's topology or a WHILE body's may
// not, and the refused update leaves the instantiation as it was.
TEST(HostExecutor, UpdateMayChangeAKernelsFunctionButNotANodesTypeOrAChildsTopology) {
  auto ex = make_host_executor();
  device_buffer buf(*ex, 8);
  std::int64_t* out = buf.as<std::int64_t>();
  append_digit_kernel::params one_digit{};
  append_two_digits_kernel::params two_digits{out, 7};
  const kernel_launch other_function =
      make_kernel_launch<append_two_digits_kernel>(two_digits, 1, nullptr);
  const auto capture = [&](const std::function<void()>& record) {
    ex->begin_capture();
    record();
    return ex->end_capture();
  };
  const auto run = [&](graph_exec& exec) {
    ex->fill_bytes(out, 0, 8);
    ex->launch_graph(exec);
    std::int64_t v = -1;
    ex->copy_to_host(&v, out, 8);
    return v;
  };
  const auto kernel_a = capture([&] { ex->launch(append_digit(out, 3, 1, one_digit)); });
  const auto kernel_b = capture([&] { ex->launch(other_function); });
  const auto fill = capture([&] { ex->fill_bytes(out, 1, 8); });

  auto exec = ex->instantiate(*kernel_a);
  EXPECT_EQ(run(*exec), 3);
  EXPECT_TRUE(ex->update(*exec, *kernel_b)) << "a kernel node's function may change";
  EXPECT_EQ(run(*exec), 7) << "the next launch runs the new function";
  EXPECT_TRUE(ex->update(*exec, *kernel_a));
  EXPECT_EQ(run(*exec), 3);
  EXPECT_FALSE(ex->update(*exec, *fill)) << "a node's type may not change";
  EXPECT_EQ(run(*exec), 3) << "a refused update leaves the instantiation unchanged";

  // Child graph nodes (record_graph): the function inside may change, the child's topology not.
  const auto two_nodes = capture([&] {
    ex->launch(append_digit(out, 3, 1, one_digit));
    ex->launch(other_function);
  });
  const auto child_a = capture([&] { ex->record_graph(*kernel_a); });
  const auto child_b = capture([&] { ex->record_graph(*kernel_b); });
  const auto child_two = capture([&] { ex->record_graph(*two_nodes); });
  auto child_exec = ex->instantiate(*child_a);
  EXPECT_TRUE(ex->update(*child_exec, *child_b));
  EXPECT_EQ(run(*child_exec), 7);
  EXPECT_FALSE(ex->update(*child_exec, *child_two)) << "a child graph's topology may not change";
  EXPECT_EQ(run(*child_exec), 7);

  // WHILE bodies (initial condition 0: the body never runs, the node's type is what counts).
  const auto loop_of = [&](const std::function<void()>& body) {
    return capture([&] {
      (void)ex->begin_while(false);
      body();
      ex->end_while();
    });
  };
  const auto loop_a = loop_of([&] { ex->launch(append_digit(out, 3, 1, one_digit)); });
  const auto loop_b = loop_of([&] { ex->launch(other_function); });
  const auto loop_fill = loop_of([&] { ex->fill_bytes(out, 1, 8); });
  auto loop_exec = ex->instantiate(*loop_a);
  // CUDA 13 does not change a conditional node's parameters by update, and a WHILE node captured
  // again is a new conditional node (a new handle): refused even with the same body topology.
  EXPECT_FALSE(ex->update(*loop_exec, *loop_b)) << "a re-captured WHILE node cannot be updated";
  EXPECT_TRUE(ex->update(*loop_exec, *loop_a)) << "the same WHILE graph again can";
  EXPECT_FALSE(ex->update(*loop_exec, *loop_fill)) << "a WHILE body's node types may not change";
  EXPECT_FALSE(ex->update(*loop_exec, *kernel_a)) << "a WHILE node is not a kernel node";
}

TEST(HostExecutor, RejectsNegativeRowCounts) {
  auto ex = make_host_executor();
  append_digit_kernel::params storage{};
  expect_invalid([&] { ex->launch(append_digit(nullptr, 1, -1, storage)); }, "rows",
                 "negative row count -1");
}

TEST(Executors, FactoryNamesTheKinds) {
  EXPECT_STREQ(make_executor("host")->name(), "host");
  try {
    (void)make_executor("gpu");
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), "executor");
    EXPECT_NE(std::string(e.what()).find("'gpu' is not one of host, cuda, auto"),
              std::string::npos);
  }
  if (cuda_available()) {
    EXPECT_STREQ(make_executor("auto")->name(), "cuda");
  } else {
    EXPECT_STREQ(make_executor("auto")->name(), "host");
    EXPECT_THROW((void)make_cuda_executor(), unavailable);
    EXPECT_FALSE(cuda_unavailable_reason().empty());
  }
}

TEST(DeviceBuffer, IsMoveOnlyAndFreesOnce) {
  auto ex = make_host_executor();
  {
    device_buffer a(*ex, 128);
    void* p = a.data();
    device_buffer b(std::move(a));
    EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
    EXPECT_EQ(b.data(), p);
    device_buffer c;
    c = std::move(b);
    EXPECT_EQ(c.data(), p);
    EXPECT_EQ(c.size(), 128u);
    EXPECT_EQ(ex->counters().frees, 0) << "moves must not free";
    device_buffer d(*ex, 64);
    d = std::move(c);  // d's own 64 bytes are freed here, the 128 move in
    EXPECT_EQ(ex->counters().frees, 1);
  }
  EXPECT_EQ(ex->counters().allocations, 2);
  EXPECT_EQ(ex->counters().frees, 2) << "each allocation freed exactly once";
  static_assert(!std::is_copy_constructible_v<device_buffer>);
}

// The other owners share device_buffer's template: a move hands the handle over, once.
TEST(ExecutorOwners, PinnedBuffersAndEventsMoveTheirHandle) {
  auto ex = make_host_executor();
  pinned_buffer a(*ex, 32), b;
  void* p = a.data();
  b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 32u);
  event_handle e(*ex);
  const device_event raw = e.get();
  event_handle f(std::move(e));
  EXPECT_EQ(e.get(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(f.get(), raw);
  static_assert(!std::is_copy_assignable_v<event_handle>);
}

TEST(HostExecutor, FreeingIsRefusedDuringCaptureAndDeferredForDestructors) {
  auto ex = make_host_executor();
  void* raw = ex->allocate(64);
  auto owned = std::make_unique<device_buffer>(*ex, 64);
  ex->begin_capture();
  EXPECT_THROW(ex->deallocate(raw), capture_violation);
  owned.reset();  // a destructor during capture: the free waits for the capture to end
  EXPECT_EQ(ex->counters().frees, 0);
  ex->abort_capture();
  EXPECT_EQ(ex->counters().frees, 1);
  ex->deallocate(raw);
  EXPECT_EQ(ex->counters().frees, 2);
}

// Deferred mode: eager work runs only when the host waits for it, like an asynchronous device.
TEST(HostExecutor, DeferredWorkRunsWhenTheHostWaitsAndEventsTrackIt) {
  auto ex = make_host_executor({/*deferred=*/true});
  device_buffer buf(*ex, 2 * sizeof(std::int64_t));
  ex->fill_bytes(buf.data(), 0, buf.size());
  ex->synchronize();  // the fill is deferred too
  event_handle first(*ex), second(*ex);
  append_digit_kernel::params storage{};
  ex->launch(append_digit(buf.as<std::int64_t>(), 1, 2, storage));
  ex->record_event(first.get());
  ex->launch(append_digit(buf.as<std::int64_t>(), 2, 1, storage));
  ex->record_event(second.get());
  const auto* host_view = buf.as<std::int64_t>();  // host executor memory is host memory
  EXPECT_EQ(host_view[0], 0) << "nothing may run before the host waits";
  EXPECT_FALSE(ex->event_complete(first.get()));
  ex->synchronize_event(first.get());
  EXPECT_EQ(ex->counters().event_waits, 1);
  EXPECT_EQ(host_view[0], 1);
  EXPECT_FALSE(ex->event_complete(second.get())) << "only the work before `first` has run";
  ex->synchronize_event(first.get());  // already complete: no wait counted
  EXPECT_EQ(ex->counters().event_waits, 1);
  std::vector<std::int64_t> out(2);
  ex->copy_to_host(out.data(), buf.data(), 16);  // a read-back runs everything before it
  EXPECT_EQ(out, (std::vector<std::int64_t>{12, 1}));
  EXPECT_TRUE(ex->event_complete(second.get()));
}

// Pageable copies stage their source at once; pinned copies read it when they run.
TEST(HostExecutor, DeferredPinnedCopiesReadTheSourceWhenTheyRun) {
  auto ex = make_host_executor({/*deferred=*/true});
  device_buffer dst(*ex, 2 * sizeof(std::int32_t));
  pinned_buffer pinned(*ex, sizeof(std::int32_t));
  std::int32_t pageable = 5;
  *pinned.as<std::int32_t>() = 7;
  ex->copy_to_device(dst.as<std::int32_t>(), &pageable, 4);
  ex->copy_from_pinned(dst.as<std::int32_t>() + 1, pinned.data(), 4);
  pageable = 50;                    // allowed: the pageable source was staged
  *pinned.as<std::int32_t>() = 70;  // a bug in real code: the pinned copy has not run yet
  std::vector<std::int32_t> out(2);
  ex->copy_to_host(out.data(), dst.data(), 8);
  EXPECT_EQ(out, (std::vector<std::int32_t>{5, 70}));
  EXPECT_EQ(ex->counters().copies_to_device, 2);
  EXPECT_EQ(ex->counters().pinned_allocations, 1);
}

// An event recorded inside a captured graph as external fires at each replay.
TEST(HostExecutor, EventsRecordedDuringCaptureFireAtReplay) {
  auto ex = make_host_executor({/*deferred=*/true});
  device_buffer buf(*ex, sizeof(std::int64_t));
  ex->fill_bytes(buf.data(), 0, buf.size());
  event_handle e(*ex);
  append_digit_kernel::params storage{};
  ex->begin_capture();
  ex->wait_event(e.get(), event_scope::external);
  ex->launch(append_digit(buf.as<std::int64_t>(), 3, 1, storage));
  ex->record_event(e.get(), event_scope::external);
  auto exec = ex->instantiate(*ex->end_capture());
  ex->launch_graph(*exec);
  EXPECT_FALSE(ex->event_complete(e.get()));
  ex->synchronize_event(e.get());
  EXPECT_EQ(*buf.as<std::int64_t>(), 3);
  ex->begin_capture();
  EXPECT_THROW((void)ex->create_event(), capture_violation);
  EXPECT_THROW((void)ex->event_complete(e.get()), capture_violation);
  EXPECT_THROW(ex->synchronize_event(e.get()), capture_violation);
  ex->abort_capture();
}

// The same recorded-launch contract on every executor, with the built-in expand kernel.
class ExecutorCapture : public ExecutorTest {};

TEST_P(ExecutorCapture, ExceptionInsideCaptureLeavesTheStreamUsable) {
  ex->begin_capture();
  EXPECT_THROW((void)ex->allocate(1), capture_violation);
  ex->abort_capture();
  EXPECT_FALSE(ex->capturing());
  device_buffer b(*ex, 4);
  std::int32_t v = 7, back = 0;
  ex->copy_to_device(b.data(), &v, 4);
  ex->copy_to_host(&back, b.data(), 4);
  EXPECT_EQ(back, 7);
}

TEST_P(ExecutorCapture, TimeDeviceRunsTheWorkAndIsForbiddenDuringCapture) {
  device_buffer b(*ex, 1024);
  const device_timing t = ex->time_device([&] { ex->fill_bytes(b.data(), 7, 1024); });
  EXPECT_GE(t.device_seconds, 0.0);
  EXPECT_LT(t.device_seconds, 10.0);
  EXPECT_GE(t.submit_seconds, 0.0);
  EXPECT_LT(t.submit_seconds, 10.0);
  std::vector<unsigned char> back(1024);
  ex->copy_to_host(back.data(), b.data(), 1024);
  EXPECT_EQ(back, std::vector<unsigned char>(1024, 7));
  ex->begin_capture();
  EXPECT_THROW((void)ex->time_device([] {}), capture_violation);
  ex->abort_capture();
}

// A built-in kernel's first launch in the process, behind time_device's spinning kernel. ctest
// also runs this test alone under CUDA_MODULE_LOADING=LAZY (tests/CMakeLists.txt): there the
// launch would wait for a lazy module load that the spin blocks, unless the executor loaded its
// kernels when made. Spec case A (docs/metadata.md section 3) checks what the kernel wrote.
TEST_P(ExecutorCapture, TimeDeviceTimesABuiltInKernelOnItsFirstLaunch) {
  const std::vector<std::int64_t> loc{23, 24, 31, 32};
  const std::int32_t lpl = 3;
  device_buffer d_loc(*ex, loc.size() * 8), d_lpl(*ex, 4), table(*ex, 4 * 4), seqlen(*ex, 2 * 4),
      guard(*ex, sizeof(guard_word));
  ex->copy_to_device(d_loc.data(), loc.data(), loc.size() * 8);
  ex->copy_to_device(d_lpl.data(), &lpl, 4);
  ex->fill_bytes(table.data(), 0xff, 4 * 4);  // poison: -1 wherever the kernel does not write
  ex->fill_bytes(seqlen.data(), 0xff, 2 * 4);
  ex->fill_bytes(guard.data(), 0, sizeof(guard_word));
  expand_params p;
  p.cache_loc = d_loc.as<std::int64_t>();
  p.cache_loc_stride = 2;
  p.slots_read = 2;
  p.decode_length = 1;
  p.last_page_len = d_lpl.as<std::int32_t>();
  p.batch = 1;
  p.topk = 2;
  p.page_size = 4;
  p.page_table = table.as<std::int32_t>();
  p.page_table_stride = 2;
  p.capacity = 2;
  p.cache_seqlen = seqlen.as<std::int32_t>();
  p.guard = guard.as<guard_word>();
  const device_timing t = ex->time_device([&] { launch_expand_page_table(*ex, p); });
  EXPECT_GE(t.device_seconds, 0.0);
  EXPECT_LT(t.device_seconds, 1.0);
  std::vector<std::int32_t> got_table(4), got_seqlen(2);
  ex->copy_to_host(got_table.data(), table.data(), 4 * 4);
  ex->copy_to_host(got_seqlen.data(), seqlen.data(), 2 * 4);
  EXPECT_EQ(got_table, (std::vector<std::int32_t>{5, 6, 7, 8}));
  EXPECT_EQ(got_seqlen, (std::vector<std::int32_t>{4, 4}));
}

SPECGRAPH_INSTANTIATE_EXECUTORS(ExecutorCapture);

}  // namespace
}  // namespace specgraph::testing
