// What `specgraph run` prints (issue 18): the configuration header first and flushed, the mode
// in it, only the steps that ran, the arena in the capture line, version and commit in --json.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iomanip>
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

// A small host run: these defaults, then `extra` (a later flag overrides), then --json.
run_result run(const std::vector<std::string>& extra) {
  const std::string path =
      ::testing::TempDir() + "specgraph_run_output_" + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  std::vector<std::string> args{"--executor",    "host", "--max-batch", "4", "--topk",     "2",
                                "--page-size",   "4",    "--heads",     "1", "--head-dim", "8",
                                "--max-context", "24",   "--rounds",    "6", "--verify",   "none"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.emplace_back("--json");
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
  bool verify_row = false, extend_row = false;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (line.rfind("extend ", 0) == 0) {  // the draft-extend step's row, after verify's
      int w = -1;
      long replays = -1;
      std::istringstream(line.substr(6)) >> w >> replays;
      EXPECT_TRUE(verify_row) << "the extend row before the verify row: " << line;
      EXPECT_EQ(w, 8) << line;
      EXPECT_EQ(replays, 6) << line;
      extend_row = true;
      continue;
    }
    EXPECT_FALSE(extend_row) << "a row after the extend row: " << line;
    if (line.rfind("verify ", 0) == 0) {  // the verify step's row, after the steps
      int d = -1;
      long replays = -1;
      std::istringstream(line.substr(6)) >> d >> replays;
      EXPECT_EQ(d, 8) << line;
      EXPECT_EQ(replays, 6) << line;
      verify_row = true;
      continue;
    }
    EXPECT_FALSE(verify_row) << "a step row after the verify row: " << line;
    int step = -1, d = -1;
    long replays = -1;
    std::istringstream(line) >> step >> d >> replays;
    EXPECT_EQ(replays, 6) << line;  // every one of the 6 rounds reached it
    steps.push_back(step);
  }
  EXPECT_EQ(steps, (std::vector<int>{0, 1, 2})) << table;
  EXPECT_TRUE(verify_row) << table;
  EXPECT_TRUE(extend_row) << table;
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

// --format (issue 19): the header names it, csr and both print the CSR buffers' sizes after the
// plan, verification covers each path that ran, both adds the comparison of the two paths.
TEST(RunOutput, TheFormatIsStatedAndEachPathReported) {
  const run_result fa3 = run({"--steps", "3", "--verify", "all"});
  ASSERT_EQ(fa3.code, 0) << fa3.err;
  EXPECT_NE(first_line(fa3.out).find(", context <= 24, format fa3, 6 rounds"), std::string::npos)
      << fa3.out;
  EXPECT_EQ(fa3.out.find("\ncsr: "), std::string::npos) << fa3.out;
  EXPECT_EQ(fa3.out.find("fa3 vs csr"), std::string::npos) << fa3.out;
  const json& fa3_check = fa3.doc.members.at("verification");
  EXPECT_EQ(fa3.doc.members.at("config").members.at("format").text, "fa3");
  EXPECT_EQ(fa3_check.members.at("paths").members.count("fa3"), 1u);
  EXPECT_EQ(fa3_check.members.at("paths").members.count("csr"), 0u);
  EXPECT_EQ(fa3.doc.members.count("agreement"), 0u);

  const run_result csr = run({"--steps", "3", "--verify", "all", "--format", "csr"});
  ASSERT_EQ(csr.code, 0) << csr.err;
  EXPECT_NE(first_line(csr.out).find(", format csr, "), std::string::npos) << csr.out;
  // topk 2, page size 4, 3 steps: rows 24 + 1 * 4 * 2 + 3 = 35 wide; C_s = 8 x (35 + s + 1).
  EXPECT_NE(csr.out.find("\ncsr: req_to_token rows 35 wide (the longest prefix, then each "
                         "branch's draft region); csr kv_indices: C_s = rows x (max_context_len "
                         "+ s + 1) = 288 .. 304 entries per step"),
            std::string::npos)
      << csr.out;
  const json& csr_paths = csr.doc.members.at("verification").members.at("paths");
  EXPECT_EQ(csr_paths.members.count("fa3"), 0u);
  EXPECT_GT(csr_paths.members.at("csr").members.at("max_relative_error").number, 0.0);
  EXPECT_EQ(csr.doc.members.count("agreement"), 0u);

  const run_result both =
      run({"--steps", "3", "--format=both", "--verify", "sample", "--verify-every", "3"});
  ASSERT_EQ(both.code, 0) << both.err;
  EXPECT_NE(first_line(both.out).find(", format both, "), std::string::npos) << both.out;
  const std::int64_t outputs =
      as_int(both.doc.members.at("verification").members.at("outputs"), "outputs");
  EXPECT_NE(both.out.find("verification: 2 rounds, " + std::to_string(outputs) +
                          " attention outputs per path against a float64 dense reference, max "
                          "relative error fa3 "),
            std::string::npos)
      << both.out;
  // Compared on all 6 rounds, verified against the reference on rounds 0 and 3.
  const json& agreement = both.doc.members.at("agreement");
  EXPECT_EQ(as_int(agreement.members.at("rounds"), "rounds"), 6);
  EXPECT_GT(as_int(agreement.members.at("outputs"), "outputs"), outputs);
  EXPECT_LE(agreement.members.at("max_abs_difference").number, 1e-5);
  EXPECT_NE(both.out.find("\nfa3 vs csr: 6 rounds, " +
                          std::to_string(as_int(agreement.members.at("outputs"), "outputs")) +
                          " attention outputs, max abs difference "),
            std::string::npos)
      << both.out;
  EXPECT_NE(both.out.find("(relative "), std::string::npos) << both.out;
  EXPECT_NE(both.out.find("): AGREE\n"), std::string::npos) << both.out;
  EXPECT_EQ(both.doc.members.at("verification").members.at("paths").members.size(), 2u);
  // --verify none: nothing compared, so no comparison claimed.
  const run_result unchecked = run({"--steps", "3", "--format", "both"});
  ASSERT_EQ(unchecked.code, 0) << unchecked.err;
  EXPECT_NE(unchecked.out.find("\nverification: off (--verify none)\n"), std::string::npos);
  EXPECT_EQ(unchecked.out.find("fa3 vs csr"), std::string::npos) << unchecked.out;
  EXPECT_EQ(unchecked.doc.members.count("agreement"), 0u);
}

TEST(RunOutput, TheFormatFlagNamesTheValueAndTheChoices) {
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"--format", "fa4"}, "specgraph: error: --format: 'fa4' is not one of fa3, csr, both\n"},
      {{"--format=CSR"}, "specgraph: error: --format: 'CSR' is not one of fa3, csr, both\n"},
      {{"--format="}, "specgraph: error: --format: '' is not one of fa3, csr, both\n"},
      {{"--format"}, "specgraph: error: --format: missing value\n"},
  };
  for (const auto& c : cases) {
    std::ostringstream out, err;
    EXPECT_EQ(run_command(c.args, out, err), 2) << c.message;
    EXPECT_EQ(err.str(), c.message);
    EXPECT_EQ(out.str(), "") << "nothing runs";
  }
  std::ostringstream out, err;
  ASSERT_EQ(run_command({"--help"}, out, err), 0);
  EXPECT_NE(out.str().find("--format fa3|csr|both"), std::string::npos) << out.str();
}

// The draft-extend step (issue 30): its own row after the verify row (W, one forward per
// round, window tokens/s), its summary and each path's check, the same in --json; --no-extend
// leaves it out and says so nowhere else.
TEST(RunOutput, TheExtendStepHasItsOwnRowAndItsChecks) {
  const run_result r = run({"--steps", "3", "--verify", "all", "--format", "both"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json& x = r.doc.members.at("extend_step");
  const json& v = r.doc.members.at("verify_step");
  const std::int64_t requests = as_int(x.members.at("requests"), "requests");
  EXPECT_EQ(requests, as_int(v.members.at("requests"), "requests"));
  EXPECT_EQ(as_int(x.members.at("tokens"), "tokens"), 7);  // W = D
  EXPECT_EQ(as_int(x.members.at("steps"), "steps"), 6);
  EXPECT_EQ(as_int(x.members.at("window_tokens"), "window_tokens"), 7 * requests);
  // The root and the accepted path of each request are committed.
  EXPECT_EQ(as_int(x.members.at("accepted"), "accepted"),
            as_int(v.members.at("accepted"), "accepted") + requests);
  EXPECT_EQ(as_int(x.members.at("verified_rounds"), "verified_rounds"), 6);
  EXPECT_EQ(as_int(x.members.at("verified_outputs"), "verified_outputs"), 7 * requests);
  EXPECT_EQ(as_int(x.members.at("agreement_outputs"), "agreement_outputs"), 7 * requests);
  for (const char* path :
       {"max_relative_error_fa3", "max_relative_error_full", "max_relative_error_prefix"}) {
    EXPECT_GT(x.members.at(path).number, 0.0) << path;
    EXPECT_LE(x.members.at(path).number, 1e-5) << path;
  }
  EXPECT_LT(r.out.find("\nverify   7        6 "), r.out.find("\nextend   7        6 ")) << r.out;
  EXPECT_NE(r.out.find("\nextend: " + std::to_string(requests) +
                       " request windows of W = 7 "
                       "tokens, " +
                       std::to_string(7 * requests) +
                       " window tokens, causal attention over prefix + window through the fa3 "
                       "page table (C1) and the csr full (C2f) and prefix (C2p) layouts; "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nextend step: 6 rounds, " + std::to_string(7 * requests) +
                       " window-token outputs per path against a float64 dense reference by "
                       "position, max relative error fa3 "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nextend step fa3 vs csr: 6 rounds, "), std::string::npos) << r.out;
  const run_result off = run({"--steps", "3", "--no-extend"});
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_EQ(off.out.find("\nextend"), std::string::npos) << off.out;
  EXPECT_EQ(off.doc.members.count("extend_step"), 0u);
  EXPECT_EQ(off.doc.members.count("verify_step"), 1u);
}

// The verify step (issue 21): its own row after the steps (D, one forward per round, the
// accept length), its summary and checks, the same in --json; --verify-tokens and
// --no-verify-round refused by name outside their ranges.
TEST(RunOutput, TheVerifyStepHasItsOwnRowAndItsChecks) {
  const run_result r = run({"--steps", "3", "--verify", "all", "--format", "both"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(first_line(r.out).find(", unchecked, verify step D 7\n"), std::string::npos) << r.out;
  const json& v = r.doc.members.at("verify_step");
  const std::int64_t requests = as_int(v.members.at("requests"), "requests");
  const std::int64_t accepted = as_int(v.members.at("accepted"), "accepted");
  EXPECT_EQ(as_int(v.members.at("tokens"), "tokens"), 7);  // min(8, 1 + topk 2 x 3 steps)
  EXPECT_EQ(as_int(v.members.at("steps"), "steps"), 6);
  EXPECT_EQ(as_int(v.members.at("tree_tokens"), "tree_tokens"), 7 * requests);
  EXPECT_GE(accepted, 0);
  EXPECT_LE(accepted, 3 * requests);  // a path is at most depth 3 long
  // One head: one tree-token output per tree token and path, every round verified.
  EXPECT_EQ(as_int(v.members.at("verified_rounds"), "verified_rounds"), 6);
  EXPECT_EQ(as_int(v.members.at("verified_outputs"), "verified_outputs"), 7 * requests);
  EXPECT_EQ(as_int(v.members.at("agreement_outputs"), "agreement_outputs"), 7 * requests);
  EXPECT_GT(v.members.at("max_relative_error_csr").number, 0.0);
  EXPECT_LE(v.members.at("max_relative_error_fa3").number, 1e-5);
  std::ostringstream len;
  len << std::fixed << std::setprecision(2)
      << 1.0 + static_cast<double>(accepted) / static_cast<double>(requests);
  const std::string row = r.out.substr(r.out.find("\nverify   7        6 "));
  EXPECT_NE(first_line(row.substr(1)).find("  accept len " + len.str() + "\n"), std::string::npos)
      << r.out;
  EXPECT_LT(r.out.find("\n    2    3"), r.out.find("\nverify   7")) << "after the steps";
  EXPECT_NE(r.out.find("\nverify step: 6 rounds, " + std::to_string(7 * requests) +
                       " tree-token outputs per path against a float64 dense reference over the "
                       "tree mask, max relative error fa3 "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nverify step fa3 vs csr: 6 rounds, " + std::to_string(7 * requests) +
                       " tree-token outputs, max abs difference "),
            std::string::npos)
      << r.out;

  const run_result off = run({"--steps", "3", "--no-verify-round"});
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_NE(first_line(off.out).find(", no verify step (--verify-tokens 0)\n"), std::string::npos);
  EXPECT_EQ(off.out.find("\nverify "), std::string::npos) << off.out;
  EXPECT_EQ(off.doc.members.count("verify_step"), 0u);
  const run_result three = run({"--steps", "3", "--verify-tokens", "3"});
  ASSERT_EQ(three.code, 0) << three.err;
  EXPECT_NE(three.out.find("\nverify   3        6 "), std::string::npos) << three.out;

  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"--steps", "3", "--verify-tokens", "8"},
       "specgraph: error: --verify-tokens: 8 exceeds 1 + topk x steps = 7 (the root and every "
       "draft token); lower it or raise --topk or --steps\n"},
      {{"--verify-tokens", "-1"}, "specgraph: error: --verify-tokens: -1 is outside [0, 1024]\n"},
      {{"--verify-tokens", "2", "--no-verify-round"},
       "specgraph: error: --no-verify-round: contradicts --verify-tokens 2\n"},
      {{"--no-verify-round=1"}, "specgraph: error: --no-verify-round: takes no value (got '1')\n"},
  };
  for (const auto& c : cases) {
    const run_result bad = run(c.args);
    EXPECT_EQ(bad.code, 2) << c.message;
    EXPECT_EQ(bad.err, c.message);
    EXPECT_EQ(bad.out, "") << "nothing runs";
  }
}

TEST(RunOutput, HelpDefinesDraftTokensPerSecond) {
  std::ostringstream out, err;
  ASSERT_EQ(run_command({"--help"}, out, err), 0);
  EXPECT_NE(out.str().find("draft tokens/s, the real draft tokens"), std::string::npos)
      << out.str();
}

}  // namespace
}  // namespace specgraph::tools
