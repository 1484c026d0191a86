// What `specgraph run` prints (issue 18): the configuration header first and flushed, the mode
// in it, only the steps that ran, the arena in the capture line, version and commit in --json.
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
#include "tools/run_report.hpp"

namespace specgraph::tools {
namespace {

// A string stream that remembers what had been written at each flush.
class flush_recorder : public std::stringbuf {
 public:
  std::vector<std::string> flushed;

 protected:
  int sync() override {
    flushed.push_back(str());
    return 0;
  }
};

struct run_result {
  int code;
  std::string out, err;
  std::vector<std::string> flushed;
  json doc;
};

run_result run(std::vector<std::string> args) {
  const std::string path =
      ::testing::TempDir() + "specgraph_run_output_" + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  for (const char* a :
       {"--executor", "host", "--max-batch", "4", "--topk", "2", "--page-size", "4", "--heads", "1",
        "--head-dim", "8", "--max-context", "24", "--rounds", "6", "--verify", "none", "--json"}) {
    args.emplace_back(a);
  }
  args.push_back(path);
  flush_recorder buf;
  std::ostream out(&buf);
  std::ostringstream err;
  run_result r{run_command(args, out, err), buf.str(), err.str(), buf.flushed, json{}};
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (r.code == 0) r.doc = json::parse(text);
  std::remove(path.c_str());
  return r;
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n') + 1);
}

TEST(RunOutput, TheHeaderIsFlushedBeforeAnythingRuns) {
  const run_result r = run({"--steps", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_FALSE(r.flushed.empty()) << "the header was never flushed before the report";
  EXPECT_EQ(r.flushed.front(), first_line(r.out));
  EXPECT_EQ(r.flushed.front().rfind("specgraph run: host executor, max batch 4", 0), 0u)
      << r.flushed.front();
  EXPECT_EQ(r.flushed.front().find("capture:"), std::string::npos);
  // Then the plan and the capture, before the rounds run.
  ASSERT_GE(r.flushed.size(), 2u);
  EXPECT_NE(r.flushed[1].find("\ncapture: "), std::string::npos) << r.flushed[1];
  EXPECT_EQ(r.flushed[1].find(" step    d"), std::string::npos) << r.flushed[1];
}

TEST(RunOutput, TheHeaderStatesTheMode) {
  const run_result plain = run({"--steps", "3"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  const std::string h = first_line(plain.out);
  EXPECT_NE(h.find(", 3 steps, depth all 3,"), std::string::npos) << h;
  EXPECT_NE(h.find("per-step graphs"), std::string::npos) << h;
  EXPECT_NE(h.find("unchecked"), std::string::npos) << h;
  const run_result mode = run({"--steps", "3", "--depth", "2", "--checked", "--device-steps"});
  ASSERT_EQ(mode.code, 0) << mode.err;
  const std::string m = first_line(mode.out);
  EXPECT_NE(m.find("depth 2 of 3"), std::string::npos) << m;
  EXPECT_NE(m.find("device step counter (--device-steps)"), std::string::npos) << m;
  EXPECT_NE(m.find("checked (--checked)"), std::string::npos) << m;
  EXPECT_EQ(m.find("unchecked"), std::string::npos) << m;
  const run_result random = run({"--steps", "3", "--depth", "random"});
  ASSERT_EQ(random.code, 0) << random.err;
  EXPECT_NE(first_line(random.out).find("depth random 1..3"), std::string::npos) << random.out;
}

TEST(RunOutput, DepthLeavesOutTheStepsItDidNotRun) {
  const run_result r = run({"--steps", "5", "--depth", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string table = r.out.substr(r.out.find(" step    d"));
  std::istringstream lines(table.substr(0, table.find("\nrounds:")));
  std::string line;
  std::getline(lines, line);  // the column names
  std::vector<int> steps;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    int step = -1, d = -1;
    long replays = -1;
    std::istringstream(line) >> step >> d >> replays;
    EXPECT_EQ(replays, 6) << line;  // every one of the 6 rounds reached it
    steps.push_back(step);
  }
  EXPECT_EQ(steps, (std::vector<int>{0, 1, 2})) << table;
  const auto& json_steps = r.doc.members.at("steps").items;
  ASSERT_EQ(json_steps.size(), 3u);
  EXPECT_EQ(as_int(json_steps[2].members.at("step"), "step"), 2);
  EXPECT_EQ(as_int(r.doc.members.at("replays"), "replays"), 18);
}

TEST(RunOutput, CaptureLineHasTheArenaAndJsonTheVersionAndCommit) {
  const run_result r = run({"--steps", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::int64_t arena =
      as_int(r.doc.members.at("plan").members.at("total_bytes"), "total_bytes");
  ASSERT_GT(arena, 0);
  const std::string capture = r.out.substr(r.out.find("capture: "));
  EXPECT_NE(first_line(capture).find("; arena " + std::to_string(arena) + " bytes\n"),
            std::string::npos)
      << capture;
  EXPECT_EQ(as_int(r.doc.members.at("capture").members.at("arena_bytes"), "arena_bytes"), arena);
  EXPECT_EQ(r.doc.members.at("version").text, build_version());
  EXPECT_FALSE(r.doc.members.at("version").text.empty());
  const std::string commit = r.doc.members.at("commit").text;
  EXPECT_TRUE(commit == "unknown" || commit.size() >= 7) << commit;
}

TEST(RunOutput, HelpDefinesDraftTokensPerSecond) {
  std::ostringstream out, err;
  ASSERT_EQ(run_command({"--help"}, out, err), 0);
  EXPECT_NE(out.str().find("draft tokens/s, the real draft tokens"), std::string::npos)
      << out.str();
}

}  // namespace
}  // namespace specgraph::tools
