// The executor seam: the host emulation is honest about what stream capture forbids, and both
// executors record launches (with their params at record time) and replay them in order.
#include <cstdint>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/row_kernel.hpp"
#include "test_support.hpp"

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

TEST(HostExecutor, RejectsNegativeRowCounts) {
  auto ex = make_host_executor();
  append_digit_kernel::params storage{};
  EXPECT_THROW(ex->launch(append_digit(nullptr, 1, -1, storage)), invalid_argument);
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
  device_buffer a(*ex, 128);
  void* p = a.data();
  device_buffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(b.data(), p);
  device_buffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), 128u);
  static_assert(!std::is_copy_constructible_v<device_buffer>);
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
  const double seconds = ex->time_device([&] { ex->fill_bytes(b.data(), 7, 1024); });
  EXPECT_GE(seconds, 0.0);
  EXPECT_LT(seconds, 10.0);
  std::vector<unsigned char> back(1024);
  ex->copy_to_host(back.data(), b.data(), 1024);
  EXPECT_EQ(back, std::vector<unsigned char>(1024, 7));
  ex->begin_capture();
  EXPECT_THROW((void)ex->time_device([] {}), capture_violation);
  ex->abort_capture();
}

SPECGRAPH_INSTANTIATE_EXECUTORS(ExecutorCapture);

}  // namespace
}  // namespace specgraph::testing
