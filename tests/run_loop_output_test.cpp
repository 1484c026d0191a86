// What `specgraph run --rounds-per-launch N` prints (issue 31 item 5, docs/main-job.md section
// 5): the configuration line first and flushed, one table row per mode with the counts per
// round, the verification and the comparison lines; the same in --json with the version and
// commit; the flags the round loop does not take refused by name, nothing run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tools/json.hpp"
#include "tools/run_command.hpp"

namespace specgraph::tools {
namespace {

class flush_recorder : public std::stringbuf {
 public:
  std::vector<std::string> flushed;

 protected:
  int sync() override {
    flushed.push_back(str());
    return 0;
  }
};

const std::vector<std::string> small{"--executor",
                                     "host",
                                     "--max-batch",
                                     "3",
                                     "--topk",
                                     "2",
                                     "--steps",
                                     "3",
                                     "--page-size",
                                     "4",
                                     "--heads",
                                     "1",
                                     "--head-dim",
                                     "8",
                                     "--max-context",
                                     "30",
                                     "--rounds",
                                     "10",
                                     "--rounds-per-launch",
                                     "4",
                                     "--verify",
                                     "all"};

// The small run with `extra` flags and --json: exit status 0 required, the text into `text`, the
// JSON parsed (an empty document, after a failure, when the run failed).
json run_small_with_json(const std::vector<std::string>& extra, std::string& text) {
  const std::string path =
      ::testing::TempDir() + "specgraph_run_loop_json_" + std::to_string(::getpid()) + ".json";
  std::vector<std::string> args = small;
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--json", path});
  std::ostringstream out, err;
  const int status = run_command(args, out, err);
  EXPECT_EQ(status, 0) << err.str();
  text = out.str();
  std::ifstream in(path);
  const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return status == 0 ? json::parse(body) : json{};
}

TEST(RunLoopOutput, TheTableCountsEachModeAndBothChecksPass) {
  const std::string path =
      ::testing::TempDir() + "specgraph_run_loop_" + std::to_string(::getpid()) + ".json";
  std::vector<std::string> args = small;
  args.insert(args.end(), {"--json", path});
  flush_recorder buf;
  std::ostream out(&buf);
  std::ostringstream err;
  ASSERT_EQ(run_command(args, out, err), 0) << err.str();
  const std::string text = buf.str();
  ASSERT_FALSE(buf.flushed.empty());
  EXPECT_EQ(buf.flushed.front(),
            "round loop: executor host, batch 3, topk 2, 3 steps, D 7, page size 4, 1 heads x 8, "
            "10 rounds, 4 per launch, no budget, seed 1\n")
      << "the configuration is flushed before anything runs";
  // host-driven: num_steps + 2 graphs a round; the device loop one; no eager kernel (nothing
  // finishes in 10 rounds at this seed: no new request's prefill).
  EXPECT_NE(text.find("\nhost-driven      10           5.00            0.00 "), std::string::npos)
      << text;
  EXPECT_NE(text.find("\ndevice loop      10           1.00            0.00 "), std::string::npos)
      << text;
  EXPECT_NE(text.find("verification: 20 rounds (both modes), "), std::string::npos) << text;
  EXPECT_NE(text.find("(tolerance 1.00e-05): PASSED\n"), std::string::npos) << text;
  EXPECT_NE(text.find("device loop vs host-driven: 10 rounds of "), std::string::npos) << text;
  EXPECT_NE(text.find("cells): IDENTICAL\n"), std::string::npos) << text;

  std::ifstream in(path);
  const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  const json doc = json::parse(body);
  EXPECT_EQ(member(doc, "mode")->text, "round_loop");
  EXPECT_NE(member(doc, "version"), nullptr);
  EXPECT_NE(member(doc, "commit"), nullptr);
  EXPECT_TRUE(member(doc, "identical")->boolean);
  EXPECT_EQ(as_int(*member(*member(doc, "config"), "rounds_per_launch"), "rpl"), 4);
  const json& dev = *member(doc, "device_loop");
  const json& host = *member(doc, "host_driven");
  EXPECT_EQ(as_int(*member(dev, "graph_launches"), "g"), 10);
  EXPECT_EQ(as_int(*member(dev, "synchronizations"), "s"), 3);
  EXPECT_EQ(as_int(*member(host, "graph_launches"), "g"), 50);
  EXPECT_EQ(as_int(*member(host, "host_steps"), "h"), 3);
  EXPECT_GT(member(host, "host_us_per_round")->number, 0);
  EXPECT_LE(member(host, "host_seconds")->number, member(host, "wall_seconds")->number);
  // Every copy back waits for the stream: a host sync. Per host step the device loop reads its
  // log and the ring head; the host-driven loop reads the tree every round.
  for (const json* m : {&dev, &host}) {
    EXPECT_EQ(
        as_int(*member(*m, "host_syncs"), "hs"),
        as_int(*member(*m, "synchronizations"), "s") + as_int(*member(*m, "copies_to_host"), "c"));
  }
  EXPECT_EQ(as_int(*member(dev, "copies_to_host"), "c"), 3 * 2);
  EXPECT_EQ(as_int(*member(host, "copies_to_host"), "c"), 10 * 3);
  EXPECT_EQ(as_int(*member(doc, "verified_rounds"), "v"), 20);
}

// --short-ring 1 at page size 1: rounds stall, the report says how many and how many next
// rounds the host reran, per mode in the JSON (equal), and the modes are identical.
TEST(RunLoopOutput, AShortRingReportsItsStallsAndReruns) {
  std::string text;
  const json doc = run_small_with_json({"--page-size", "1", "--short-ring", "1"}, text);
  EXPECT_NE(text.find("\nshort ring: 1 round' pages per host step; "), std::string::npos) << text;
  EXPECT_NE(text.find("cells): IDENTICAL\n"), std::string::npos) << text;
  EXPECT_EQ(as_int(*member(*member(doc, "config"), "short_ring"), "s"), 1);
  const json& dev = *member(doc, "device_loop");
  const json& host = *member(doc, "host_driven");
  EXPECT_GT(as_int(*member(dev, "stalled_rounds"), "s"), 0);
  EXPECT_GT(as_int(*member(dev, "reruns"), "r"), 0);
  EXPECT_EQ(as_int(*member(dev, "stalled_rounds"), "s"),
            as_int(*member(host, "stalled_rounds"), "s"));
  EXPECT_EQ(as_int(*member(dev, "reruns"), "r"), as_int(*member(host, "reruns"), "r"));
}

// --max-new-tokens: every request's budget, run down by the commit on the device. With 2 tokens
// a request finishes in its first round unless it accepts no draft token, and no request emits
// more than 2: the JSON's emitted count is at most 2 per request ever admitted.
TEST(RunLoopOutput, ABudgetFinishesRequestsAndIsInTheReport) {
  std::string text;
  const json doc = run_small_with_json({"--max-new-tokens", "2"}, text);
  EXPECT_NE(text.find(", 4 per launch, budget 2 tokens, seed 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cells): IDENTICAL\n"), std::string::npos) << text;
  EXPECT_EQ(as_int(*member(*member(doc, "config"), "max_new_tokens"), "m"), 2);
  for (const char* mode : {"device_loop", "host_driven"}) {
    const json& m = *member(doc, mode);
    const std::int64_t by_budget = as_int(*member(m, "finished_by_budget"), "b");
    const std::int64_t replaced = as_int(*member(m, "replaced"), "r");
    EXPECT_GT(by_budget, 0) << mode;
    EXPECT_LE(by_budget, as_int(*member(m, "finished"), "f")) << mode;
    EXPECT_GT(replaced, 0) << mode;
    EXPECT_LE(as_int(*member(m, "emitted"), "e"), 2 * (3 + replaced)) << mode;
  }
}

TEST(RunLoopOutput, FlagsTheLoopDoesNotTakeAreRefusedByName) {
  const struct {
    std::vector<std::string> extra;
    std::string message;
  } cases[] = {
      {{"--format", "csr"}, "drop --format"},
      {{"--depth", "2"}, "drop --depth"},
      {{"--device-steps"}, "drop --device-steps"},
      {{"--no-extend"}, "drop --no-extend"},
      {{"--no-verify-round"}, "drop --verify-tokens 0"},
      {{"--slot-stride", "4"}, "drop --slot-stride"},
      {{"--checked"}, "drop --checked"},
      {{"--dump-graphs", "/tmp"}, "drop --dump-graphs"},
      {{"--rounds-per-launch", "11"}, "--rounds-per-launch: 11 exceeds --rounds 10"},
      {{"--rounds-per-launch", "0"}, "--rounds-per-launch: 0 is outside [1, 1048576]"},
      {{"--max-new-tokens", "0"}, "--max-new-tokens: 0 is outside [1, 1073741824]"},
      {{"--short-ring", "5"}, "--short-ring: 5 exceeds --rounds-per-launch 4"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = small;
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    std::ostringstream out, err;
    EXPECT_EQ(run_command(args, out, err), 2) << c.message;
    EXPECT_NE(err.str().find(c.message), std::string::npos) << err.str();
    EXPECT_EQ(out.str(), "") << "nothing runs";
  }
  // The budget is the round loop's: refused without it.
  std::ostringstream no_loop_out, no_loop_err;
  EXPECT_EQ(run_command({"--executor", "host", "--max-new-tokens", "4"}, no_loop_out, no_loop_err),
            2);
  EXPECT_NE(no_loop_err.str().find("--max-new-tokens: only the round loop has a budget; add "
                                   "--rounds-per-launch"),
            std::string::npos)
      << no_loop_err.str();
  EXPECT_EQ(no_loop_out.str(), "");
  EXPECT_EQ(run_command({"--executor", "host", "--short-ring", "1"}, no_loop_out, no_loop_err), 2);
  EXPECT_NE(no_loop_err.str().find("--short-ring: only the round loop has a ring; add "
                                   "--rounds-per-launch"),
            std::string::npos)
      << no_loop_err.str();
  std::ostringstream out, err;
  ASSERT_EQ(run_command({"--help"}, out, err), 0);
  EXPECT_NE(out.str().find("--rounds-per-launch N"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("--max-new-tokens N"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("--short-ring N"), std::string::npos) << out.str();
}

}  // namespace
}  // namespace specgraph::tools
