// `specgraph plan --round`: the plan holds the round section (its buffers in the table, its line
// and JSON object beside SGLang's sizes) for the spec's row topk 4, num_steps 5, D 32, page size
// 64 (R1 512, SGLang's reserve 1024), the largest committed length the rows hold (M 3584 at
// --max-context 4096, or the one --round-max-seq-len gives); without --verify-tokens, and with a
// reserve, an M or a stop capacity out of range or too wide for the rows, the flag is refused
// naming itself.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tools/plan_command.hpp"

namespace specgraph::tools {
namespace {

const std::vector<std::string> round_args = {
    "--round", "--verify-tokens", "32", "--topk",        "4", "--steps", "5", "--page-size",
    "64",      "--max-batch",     "64", "--stop-tokens", "4"};

TEST(CliRound, PlanHoldsTheRoundSection) {
  std::ostringstream out, err;
  ASSERT_EQ(plan_command(round_args, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("after_verify.tail_copy      all   [64x3x63x2]       int32"),
            std::string::npos)
      << out.str();
  // The docs' example (docs/round-graphs.md), as pasted there.
  EXPECT_NE(out.str().find("round section (D = 32, S = 6, bucket 64, reserve 512, max seq_len "
                           "3584): 163372 bytes in 26 buffers, 164112 with their alignment; kv "
                           "move pairs 64 x 5 = 320 (SGLang 64 x 6 = 384); standing reserve 512 "
                           "positions per request (SGLang 2 x 512 = 1024); ring pages per round "
                           "64 x 1\n"),
            std::string::npos)
      << out.str();
  std::vector<std::string> json_args = round_args;
  json_args.push_back("--json");
  std::ostringstream json, err2;
  ASSERT_EQ(plan_command(json_args, json, err2), 0) << err2.str();
  EXPECT_NE(json.str().find("\"round\":{\"draft_tokens\":32,\"reserve\":512,\"max_seq_len\":3584,"
                            "\"stop_capacity\":4,\"bytes\":164112,\"kv_move_pairs\":320,"),
            std::string::npos)
      << json.str();
  std::vector<std::string> given = round_args;
  given.insert(given.end(), {"--round-reserve", "600"});
  std::ostringstream out4, err4;
  ASSERT_EQ(plan_command(given, out4, err4), 0) << err4.str();
  EXPECT_NE(out4.str().find("standing reserve 600 positions per request"), std::string::npos);
  EXPECT_NE(out4.str().find("reserve 600, max seq_len 3496)"), std::string::npos) << out4.str();
  // M at the limit: ceil_page(3584 + 512) = 4096 rows.
  std::vector<std::string> at = round_args;
  at.insert(at.end(), {"--round-max-seq-len", "3584"});
  std::ostringstream out5, err5;
  ASSERT_EQ(plan_command(at, out5, err5), 0) << err5.str();
  EXPECT_NE(out5.str().find("reserve 512, max seq_len 3584)"), std::string::npos) << out5.str();
  at.insert(at.end(), {"--round-max-seq-len", "100", "--json"});
  std::ostringstream out6, err6;
  ASSERT_EQ(plan_command(at, out6, err6), 0) << err6.str();
  EXPECT_NE(out6.str().find("\"reserve\":512,\"max_seq_len\":100,"), std::string::npos)
      << out6.str();
}

TEST(CliRound, BadFlagsAreRefusedByName) {
  auto refused = [](const std::vector<std::string>& args, const std::string& message) {
    std::ostringstream out, err;
    EXPECT_EQ(plan_command(args, out, err), 2);
    EXPECT_EQ(out.str(), "");
    EXPECT_NE(err.str().find(message), std::string::npos) << err.str();
  };
  refused({"--round"}, "--round: true with verify_tokens 0: the round's tree is the verify tree");
  std::vector<std::string> args = round_args;
  args.insert(args.end(), {"--round-reserve", "-5"});
  refused(args, "--round-reserve: -5 is outside [0, 2^28]");
  args = round_args;
  args.insert(args.end(), {"--stop-tokens", "2000"});
  refused(args, "--stop-tokens: 2000");
  // One past the largest committed length the 4096-wide rows hold with R 512.
  args = round_args;
  args.insert(args.end(), {"--round-max-seq-len", "3585"});
  refused(args,
          "--round-max-seq-len: 3585: a round at this committed length allocates up to "
          "ceil_page(M + R) = ceil_page(3585 + 512) = 4160 positions, past max_context_len 4096 "
          "(the narrowest req_to_token row); widen the rows to max_context_len >= 4160, or lower "
          "round_max_seq_len to 3584");
  args = round_args;
  args.insert(args.end(), {"--round-max-seq-len", "0"});
  refused(args, "--round-max-seq-len: 0 is outside [1, 2^28]");
  args = round_args;
  args.insert(args.end(), {"--round-reserve", "4096"});
  refused(args, "--round-reserve: 4096: the reserve alone does not fit the rows");
}

}  // namespace
}  // namespace specgraph::tools
