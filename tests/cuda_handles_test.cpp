// The CUDA RAII owners: move-only, never throwing on destruction, and a clear cuda_error when
// the runtime cannot create the handle (every machine without a GPU exercises that path).
#include <gtest/gtest.h>

#include "tests/test_support.hpp"

#if defined(SPECGRAPH_HAS_CUDA)

#include <string>
#include <type_traits>
#include <utility>

#include "device/cuda_handles.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph::detail {
namespace {

template <class T>
constexpr bool move_only =
    !std::is_copy_constructible_v<T> && !std::is_copy_assignable_v<T> &&
    std::is_nothrow_move_constructible_v<T> && std::is_nothrow_move_assignable_v<T> &&
    std::is_nothrow_destructible_v<T>;
static_assert(move_only<unique_stream>);
static_assert(move_only<unique_event>);
static_assert(move_only<unique_graph>);
static_assert(move_only<unique_graph_exec>);

TEST(CudaHandles, EmptyHandlesMoveAndResetWithoutTouchingTheRuntime) {
  unique_stream a;
  EXPECT_FALSE(a);
  unique_stream b(std::move(a));
  EXPECT_FALSE(b);
  b.reset();
  EXPECT_EQ(b.get(), nullptr);
}

TEST(CudaHandles, CreationFailsWithANamedErrorOrOwnsAMovableHandle) {
  if (!cuda_available()) {
    try {
      (void)make_stream();
      FAIL() << "stream creation cannot succeed without a usable device";
    } catch (const cuda_error& e) {
      EXPECT_NE(std::string(e.what()).find("cudaStreamCreateWithFlags"), std::string::npos)
          << e.what();
      EXPECT_NE(e.code(), 0);
    }
    return;
  }
  unique_stream s = make_stream();
  ASSERT_TRUE(s);
  const cudaStream_t raw = s.get();
  unique_stream moved(std::move(s));
  EXPECT_EQ(moved.get(), raw);
  EXPECT_FALSE(s);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  unique_event e = make_event();
  EXPECT_TRUE(e);
}

}  // namespace
}  // namespace specgraph::detail

#else  // built without CUDA: the same tests, reported as skipped (REQUIRE_GPU=1 fails them)

namespace {
void skip_without_cuda() {
  if (specgraph::testing::gpu_required()) FAIL() << "REQUIRE_GPU=1 but built without CUDA";
  GTEST_SKIP() << "specgraph was built without CUDA";
}
TEST(CudaHandles, EmptyHandlesMoveAndResetWithoutTouchingTheRuntime) {
  skip_without_cuda();
}
TEST(CudaHandles, CreationFailsWithANamedErrorOrOwnsAMovableHandle) {
  skip_without_cuda();
}
}  // namespace

#endif
