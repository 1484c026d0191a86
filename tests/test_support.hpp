// Shared test helpers: the executor-parameterised fixture, random seeds, device vectors, and an
// executor that marks which allocated bytes fills and copies have written.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/forwarding_executor.hpp"
#include "testing/dvec.hpp"

namespace specgraph::testing {

// A fresh seed per run unless SPECGRAPH_SEED pins one; tests print it on failure (SCOPED_TRACE).
inline std::uint64_t test_seed() {
  if (const char* s = std::getenv("SPECGRAPH_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

inline int property_cases(int default_cases) {
  if (const char* s = std::getenv("SPECGRAPH_PROPERTY_CASES")) return std::atoi(s);
  return default_cases;
}

inline bool gpu_required() {
  const char* v = std::getenv("REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

// Parameterised over executor names. cuda instances skip visibly (GTEST_SKIP) where no device
// exists; REQUIRE_GPU=1 turns that skip into a failure.
class ExecutorTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda" && !cuda_available()) {
      if (gpu_required()) {
        FAIL() << "REQUIRE_GPU=1 but no usable CUDA device: " << cuda_unavailable_reason();
      }
      GTEST_SKIP() << "no usable CUDA device (" << cuda_unavailable_reason() << ")";
    }
    ex = make_executor(GetParam());
  }
  std::unique_ptr<executor> ex;
};

inline std::string executor_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

#define SPECGRAPH_INSTANTIATE_EXECUTORS(suite)                                  \
  INSTANTIATE_TEST_SUITE_P(Executors, suite, ::testing::Values("host", "cuda"), \
                           ::specgraph::testing::executor_name)

// `call` must throw invalid_argument naming `field`, with `detail` in its message. (A bare
// EXPECT_THROW would pass on a rejection of the wrong field.)
inline void expect_invalid(const std::function<void()>& call, const std::string& field,
                           const std::string& detail = {}) {
  try {
    call();
    ADD_FAILURE() << "expected invalid_argument naming " << field;
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_NE(std::string(e.what()).find(detail), std::string::npos) << e.what();
  }
}

// Marks which bytes of each allocation a fill or a copy has written.
class write_tracking_executor final : public forwarding_executor {
 public:
  using forwarding_executor::forwarding_executor;
  void* allocate(std::size_t bytes) override {
    void* p = forwarding_executor::allocate(bytes);
    blocks_.emplace_back(static_cast<unsigned char*>(p), std::vector<bool>(bytes, false));
    return p;
  }
  void fill_bytes(void* dst, unsigned char v, std::size_t n) override {
    mark(dst, n);
    forwarding_executor::fill_bytes(dst, v, n);
  }
  void copy_to_device(void* dst, const void* src, std::size_t n) override {
    mark(dst, n);
    forwarding_executor::copy_to_device(dst, src, n);
  }
  // "block <i>: <n> of <bytes>" (bytes never written) per incompletely written block.
  std::vector<std::string> unwritten() const {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const auto& w = blocks_[i].second;
      const auto n = std::count(w.begin(), w.end(), false);
      if (n != 0)
        out.push_back("block " + std::to_string(i) + ": " + std::to_string(n) + " of " +
                      std::to_string(w.size()));
    }
    return out;
  }

 private:
  void mark(void* dst, std::size_t n) {
    auto* d = static_cast<unsigned char*>(dst);
    for (auto& [base, written] : blocks_) {
      if (d >= base && d < base + written.size()) {
        std::fill_n(written.begin() + (d - base), std::min(n, written.size() - (d - base)), true);
      }
    }
  }
  std::vector<std::pair<unsigned char*, std::vector<bool>>> blocks_;
};

}  // namespace specgraph::testing
