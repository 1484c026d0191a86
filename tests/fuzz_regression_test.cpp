// Focused reproductions of what the libFuzzer harnesses (tests/fuzz/) found, one test per finding.
// A finding that is still open is DISABLED_ here (and its input lives in
// tests/fuzz/known_bugs/<harness>/, replayed by ctest expecting the promise to break); the fix
// enables the test and moves the input to tests/fuzz/corpus/<harness>/.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/plan.hpp"
#include "tools/plan_command.hpp"

namespace {

struct command_result {
  int code;
  std::string out, err;
};

command_result plan(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = specgraph::tools::plan_command(args, out, err);
  return {code, out.str(), err.str()};
}

// plan_fuzz (corpus/plan_fuzz/plan-command-negative-pool-rows.bin): `specgraph plan` treated
// any negative --pool-rows as "not given" and silently planned with the default max_batch + 1, so
// it exited 0 for a value make_plan refuses (pool_rows must be in [1, 2^24]). Expected: exit 2,
// one line naming --pool-rows, as for --pool-rows 0.
TEST(FuzzRegression, PlanCommandRefusesNegativePoolRows) {
  for (const char* value : {"-5", "-1", "-1062689600"}) {
    const command_result r = plan({"--max-batch", "8", "--pool-rows", value});
    EXPECT_EQ(r.code, 2) << value << ": " << r.out;
    EXPECT_TRUE(r.out.empty()) << value;
    EXPECT_EQ(r.err.rfind("specgraph: error: --pool-rows: ", 0), 0u) << r.err;
  }
}

// The same library call refuses it, naming the field: only the command's default handling is
// at fault.
TEST(FuzzRegression, MakePlanRefusesNegativePoolRows) {
  specgraph::draft_config c;
  c.max_batch = 8;
  c.topk = 2;
  c.num_steps = 1;
  c.page_size = 4;
  c.max_context_len = 64;
  c.pool_rows = -5;
  c.kv_slots = 4096;
  try {
    (void)specgraph::make_plan(c);
    ADD_FAILURE() << "make_plan accepted pool_rows -5";
  } catch (const specgraph::invalid_argument& e) {
    EXPECT_EQ(e.field(), "pool_rows") << e.what();
  }
  const command_result zero = plan({"--max-batch", "8", "--pool-rows", "0"});
  EXPECT_EQ(zero.code, 2);
  EXPECT_EQ(zero.err.rfind("specgraph: error: --pool-rows: 0 is below the minimum 1", 0), 0u)
      << zero.err;
}

}  // namespace
