// NVTX ranges as Nsight Systems would record them: the test loads the recorder library through
// NVTX_INJECTION64_PATH (set in main before the first NVTX call), runs a round on the host
// executor and asserts the range names, payloads and nesting in the "specgraph" domain.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/runtime_support.hpp"

namespace specgraph::testing {
namespace {

struct event {
  int depth;
  std::string domain, message;
  long long payload;
  unsigned category;
};

std::vector<event> recorded() {
  void* lib = dlopen(std::getenv("NVTX_INJECTION64_PATH"), RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return {};
  using dump_fn = const char* (*)();
  const auto dump = reinterpret_cast<dump_fn>(dlsym(lib, "specgraph_nvtx_recorder_dump"));
  std::vector<event> out;
  std::istringstream lines(dump ? dump() : "");
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    event e{};
    std::string depth, payload, category;
    std::getline(f, depth, '|');
    std::getline(f, e.domain, '|');
    std::getline(f, e.message, '|');
    std::getline(f, payload, '|');
    std::getline(f, category, '|');
    e.depth = std::stoi(depth);
    e.payload = std::stoll(payload);
    e.category = static_cast<unsigned>(std::stoul(category));
    out.push_back(e);
  }
  dlclose(lib);
  return out;
}

TEST(Nvtx, RangesNameEveryPhaseWithBucketAndStep) {
#if !defined(SPECGRAPH_NVTX_RECORDER_PATH)
  GTEST_SKIP() << "built without NVTX v3 headers (or with SPECGRAPH_ENABLE_NVTX off)";
#endif
  auto ex = make_host_executor();
  std::mt19937_64 rng(test_seed());
  draft_config c;
  c.max_batch = 8;
  c.topk = 2;
  c.num_steps = 3;
  c.page_size = 4;
  c.max_context_len = 32;
  c.pool_rows = 12;
  c.kv_slots = 1 << 16;
  c.buckets = {4, 8};
  sim_engine eng(*ex, c, rng);
  eng.rt().capture();
  eng.rt().stage(eng.random_round(rng, 3).inputs());
  eng.rt().run_round(2);

  const std::vector<event> ev = recorded();
  ASSERT_FALSE(ev.empty()) << "the NVTX recorder was not injected";
  std::vector<std::string> sequence;
  for (const event& e : ev) {
    EXPECT_EQ(e.domain, "specgraph");
    sequence.push_back(std::to_string(e.depth) + " " + e.message + " " + std::to_string(e.payload) +
                       " c" + std::to_string(e.category));
  }
  const std::vector<std::string> want_tail{"0 capture step 0 8 c1", "0 capture step 1 8 c2",
                                           "0 capture step 2 8 c3", "0 capture step 0 4 c1",
                                           "0 capture step 1 4 c2", "0 capture step 2 4 c3",
                                           "0 stage 3 c0",          "0 round 4 c2",
                                           "1 replay step 0 4 c1",  "1 replay step 1 4 c2"};
  ASSERT_GE(sequence.size(), want_tail.size() + 1);
  EXPECT_EQ(std::vector<std::string>(sequence.end() - static_cast<std::ptrdiff_t>(want_tail.size()),
                                     sequence.end()),
            want_tail);
  // The plan range comes first, with the arena size as payload.
  EXPECT_EQ(ev.front().message, "plan");
  EXPECT_EQ(ev.front().payload, static_cast<long long>(eng.rt().plan().total_bytes));
}

}  // namespace
}  // namespace specgraph::testing

int main(int argc, char** argv) {
#if defined(SPECGRAPH_NVTX_RECORDER_PATH)
  // Must be set before the first NVTX call in the process (NVTX initialises lazily).
  setenv("NVTX_INJECTION64_PATH", SPECGRAPH_NVTX_RECORDER_PATH, 0);
#endif
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
