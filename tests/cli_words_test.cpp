// The program's words (issue 28, item 13): `--format` is one flag in `plan` and `run`, with
// `--formats` its alias in both (the same values, the same error); a count of one is singular
// ("1 round", never "1 rounds"); `plan` names the maximum of a value below its minimum.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "specgraph/limits.hpp"
#include "tools/json.hpp"
#include "tools/plan_command.hpp"
#include "tools/run_command.hpp"

namespace specgraph::tools {
namespace {

struct result {
  int code;
  std::string out, err;
};

result plan(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = plan_command(args, out, err);
  return {code, out.str(), err.str()};
}

// A small host run; `extra` comes last, so it overrides.
result run(const std::vector<std::string>& extra) {
  std::vector<std::string> args{"--executor",    "host", "--max-batch", "4", "--topk",     "2",
                                "--page-size",   "4",    "--heads",     "1", "--head-dim", "8",
                                "--max-context", "24",   "--steps",     "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::ostringstream out, err;
  const int code = run_command(args, out, err);
  return {code, out.str(), err.str()};
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n') + 1);
}

TEST(CliWords, PlanTakesFormatAndItsAliasFormats) {
  const std::vector<std::string> shape{"--max-batch",   "8",   "--topk", "2", "--steps", "3",
                                       "--max-context", "256", "--json"};
  for (const std::string value : {"fa3", "csr", "both"}) {
    std::vector<std::string> format{"--format", value}, formats{"--formats", value};
    format.insert(format.end(), shape.begin(), shape.end());
    formats.insert(formats.end(), shape.begin(), shape.end());
    const result a = plan(format), b = plan(formats);
    ASSERT_EQ(a.code, 0) << a.err;
    ASSERT_EQ(b.code, 0) << b.err;
    EXPECT_EQ(a.out, b.out) << value;
    EXPECT_EQ(json::parse(a.out).members.at("formats").text, value);
  }
  for (const std::string flag : {"--format", "--formats"}) {
    const result bad = plan({flag, "flashinfer"});
    EXPECT_EQ(bad.code, 2);
    EXPECT_EQ(bad.err,
              "specgraph: error: " + flag + ": 'flashinfer' is not one of fa3, csr, both\n");
    EXPECT_EQ(bad.out, "");
  }
  const result help = plan({"--help"});
  EXPECT_NE(help.out.find("  --format fa3|csr|both   "), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--formats is the same flag"), std::string::npos) << help.out;
}

TEST(CliWords, RunTakesFormatsAsItsAliasToo) {
  for (const std::string value : {"fa3", "csr", "both"}) {
    const result a = run({"--rounds", "1", "--verify", "none", "--format", value});
    const result b = run({"--rounds", "1", "--verify", "none", "--formats", value});
    const result c = run({"--rounds", "1", "--verify", "none", "--formats=" + value});
    ASSERT_EQ(a.code, 0) << a.err;
    ASSERT_EQ(b.code, 0) << b.err;
    ASSERT_EQ(c.code, 0) << c.err;
    EXPECT_NE(first_line(a.out).find(", format " + value + ", "), std::string::npos) << a.out;
    EXPECT_EQ(first_line(a.out), first_line(b.out));
    EXPECT_EQ(first_line(a.out), first_line(c.out));
  }
  const result bad = run({"--formats", "fa4"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "specgraph: error: --formats: 'fa4' is not one of fa3, csr, both\n");
  EXPECT_EQ(bad.out, "");
  const result help = run({"--help"});
  EXPECT_NE(help.out.find("--formats is the same flag"), std::string::npos) << help.out;
}

TEST(CliWords, OneRoundIsSingular) {
  // One round, every path verified and compared: each count of rounds is 1.
  const result one = run({"--rounds", "1", "--verify", "all", "--format", "both"});
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_NE(first_line(one.out).find(", format both, 1 round, seed "), std::string::npos)
      << one.out;
  for (const char* line : {"\nverification: 1 round, ", "\nfa3 vs csr: 1 round, ",
                           "\nverify step: 1 round, ", "\nverify step fa3 vs csr: 1 round, "}) {
    EXPECT_NE(one.out.find(line), std::string::npos) << line << " in\n" << one.out;
  }
  EXPECT_NE(one.out.find("\nrounds: 1 (2 replays, 1 distinct bucket) in "), std::string::npos)
      << one.out;
  for (const char* plural : {" 1 rounds", " 1 replays", " 1 distinct buckets", " 1 request trees",
                             " 1 requests reached"}) {
    EXPECT_EQ(one.out.find(plural), std::string::npos) << plural << " in\n" << one.out;
  }
  // Two stay plural.
  const result two = run({"--rounds", "2", "--verify", "all"});
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_NE(first_line(two.out).find(", 2 rounds, seed "), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("\nverification: 2 rounds, "), std::string::npos) << two.out;
}

TEST(CliWords, PlanNamesTheMaximumOfAValueBelowItsMinimum) {
  const std::string max = std::to_string(limits::max_topk);
  const result zero = plan({"--topk", "0"});
  EXPECT_EQ(zero.code, 2);
  EXPECT_EQ(zero.err,
            "specgraph: error: --topk: 0 is below the minimum 1 (the range is 1 to "
            "the limit " +
                max + ")\n");
  const result over = plan({"--topk", std::to_string(limits::max_topk + 1)});
  EXPECT_EQ(over.code, 2);
  EXPECT_EQ(over.err, "specgraph: error: --topk: " + std::to_string(limits::max_topk + 1) +
                          " exceeds the limit " + max + "\n");
}

}  // namespace
}  // namespace specgraph::tools
