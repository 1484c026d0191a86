// `specgraph metadata extend`: the draft-extend metadata of a round (docs/extend.md) as JSON;
// the spec's worked examples X1..X4 verbatim, one page-table violation per short row, one per kv
// buffer, one accept_len violation per row of accept length 0, and bad input as one line naming
// the field with nothing on stdout.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "tools/metadata_command.hpp"
#include "tools/plan_command.hpp"

namespace specgraph::tools {
namespace {

struct result {
  int code;
  std::string out, err;
};

result run_extend_cli(const std::string& input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  const int code = metadata_extend(in, out, err);
  return {code, out.str(), err.str()};
}

// X1 (a padded bucket): ps 1, W 3, pool rows 1 and 2 hold 100 + p and 200 + p, bucket 3.
const std::string x1_rows =
    R"("req_to_token":[[0,0,0,0,0,0,0,0],[100,101,102,103,104,105,106,107],)"
    R"([200,201,202,203,204,205,206,207]])";
std::string x1_input(const std::string& extra = "") {
  return R"({"page_size":1,"num_draft_tokens":3,"seq_len":[4,2],"accept_len":[2,3],)"
         R"("req_pool_index":[1,2],)" +
         x1_rows + R"(,"bucket":3)" + extra + "}";
}
// X4 (the context edge, an accept length of 0): ps 4, W 4, rows on pages 3 8 1 6 4 and
// 9 2 7 5 10 (position 4q + i on page P is slot 4P + i).
const std::string x4_input =
    R"({"page_size":4,"num_draft_tokens":4,"seq_len":[14,3],"accept_len":[0,4],)"
    R"("req_pool_index":[1,2],"req_to_token":[[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],)"
    R"([12,13,14,15,32,33,34,35,4,5,6,7,24,25,26,27,16,17,18,19],)"
    R"([36,37,38,39,8,9,10,11,28,29,30,31,20,21,22,23,40,41,42,43]],"page_table_capacity":4})";

// X1's input with another bucket.
std::string with_bucket(const std::string& bucket) {
  std::string s = x1_input();
  const std::string key = "\"bucket\":3";
  return s.replace(s.find(key), key.size(), "\"bucket\":" + bucket);
}

TEST(CliExtend, X1PaddedBucket) {
  const result r = run_extend_cli(x1_input());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"tokens\":{\"position\":[4,5,6,2,3,4,0,0,0],\"out_cache_loc\":[104,105,106,202,203,"
            "204,0,0,0],\"select_index\":[1,5,8]},\"fa3\":{\"cache_seqlen\":[7,5,1],"
            "\"cu_seqlens_q\":[0,3,6,9],\"cu_seqlens_k\":[0,7,12,13],\"page_table\":[[100,101,102,"
            "103,104,105,106],[200,201,202,203,204,0,0],[0,0,0,0,0,0,0]],\"max_seqlen_q\":3,"
            "\"max_seqlen_k\":7},\"triton\":{\"qo_indptr\":[0,3,6,9],\"kv_indptr\":[0,4,6,6],"
            "\"kv_indices\":[100,101,102,103,200,201],\"max_extend_len\":3},\"flashinfer\":{"
            "\"qo_indptr\":[0,3,6,9],\"kv_indptr\":[0,7,12,13],\"kv_indices\":[100,101,102,103,"
            "104,105,106,200,201,202,203,204,0],\"kv_last_page_len\":[1,1,1]},\"violations\":[]}"
            "\n");
}

// X2: the window crosses a page (pages 5 9 2 7).
TEST(CliExtend, X2WindowCrossesAPage) {
  const result r =
      run_extend_cli(R"({"page_size":4,"num_draft_tokens":4,"seq_len":[6],"accept_len":[2],)"
                     R"("req_pool_index":[1],"req_to_token":[[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],)"
                     R"([20,21,22,23,36,37,38,39,8,9,10,11,28,29,30,31]]})");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"tokens\":{\"position\":[6,7,8,9],\"out_cache_loc\":[38,39,8,9],\"select_index\":"
            "[1]},\"fa3\":{\"cache_seqlen\":[10],\"cu_seqlens_q\":[0,4],\"cu_seqlens_k\":[0,10],"
            "\"page_table\":[[5,9,2]],\"max_seqlen_q\":4,\"max_seqlen_k\":10},\"triton\":{"
            "\"qo_indptr\":[0,4],\"kv_indptr\":[0,6],\"kv_indices\":[20,21,22,23,36,37],"
            "\"max_extend_len\":4},\"flashinfer\":{\"qo_indptr\":[0,4],\"kv_indptr\":[0,10],"
            "\"kv_indices\":[20,21,22,23,36,37,38,39,8,9],\"kv_last_page_len\":[1]},"
            "\"violations\":[]}\n");
}

// X3: an idle DP rank, every row of bucket 2 padded.
TEST(CliExtend, X3IdleRank) {
  const result r =
      run_extend_cli(R"({"page_size":4,"num_draft_tokens":3,"seq_len":[],"accept_len":[],)"
                     R"("req_pool_index":[],"req_to_token":[[0,0,0,0]],"bucket":2})");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"tokens\":{\"position\":[0,0,0,0,0,0],\"out_cache_loc\":[0,0,0,0,0,0],"
            "\"select_index\":[2,5]},\"fa3\":{\"cache_seqlen\":[1,1],\"cu_seqlens_q\":[0,3,6],"
            "\"cu_seqlens_k\":[0,1,2],\"page_table\":[[0],[0]],\"max_seqlen_q\":3,"
            "\"max_seqlen_k\":1},\"triton\":{\"qo_indptr\":[0,3,6],\"kv_indptr\":[0,0,0],"
            "\"kv_indices\":[],\"max_extend_len\":3},\"flashinfer\":{\"qo_indptr\":[0,3,6],"
            "\"kv_indptr\":[0,1,2],\"kv_indices\":[0,0],\"kv_last_page_len\":[1,1]},"
            "\"violations\":[]}\n");
}

TEST(CliExtend, X4ContextEdgeAndAcceptLengthZero) {
  const result r = run_extend_cli(x4_input);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"tokens\":{\"position\":[14,15,16,17,3,4,5,6],\"out_cache_loc\":[26,27,16,17,39,8,"
            "9,10],\"select_index\":[0,7]},\"fa3\":{\"cache_seqlen\":[18,7],\"cu_seqlens_q\":[0,4,"
            "8],\"cu_seqlens_k\":[0,18,25],\"page_table\":[[3,8,1,6],[9,2,0,0]],\"max_seqlen_q\":"
            "4,\"max_seqlen_k\":18},\"triton\":{\"qo_indptr\":[0,4,8],\"kv_indptr\":[0,14,17],"
            "\"kv_indices\":[12,13,14,15,32,33,34,35,4,5,6,7,24,25,36,37,38],\"max_extend_len\":"
            "4},\"flashinfer\":{\"qo_indptr\":[0,4,8],\"kv_indptr\":[0,18,25],\"kv_indices\":[12,"
            "13,14,15,32,33,34,35,4,5,6,7,24,25,26,27,16,17,36,37,38,39,8,9,10],"
            "\"kv_last_page_len\":[1,1]},\"violations\":[{\"kind\":\"capacity\",\"kernel\":"
            "\"extend_page_table\",\"row\":0,\"column\":4,\"capacity\":4,\"value\":4,\"count\":1},"
            "{\"kind\":\"accept_len\",\"kernel\":\"extend_select_index\",\"row\":0,\"value\":0}]}"
            "\n");
}

// Two rows short of the page table, both kv buffers short, two accept lengths of 0: one
// violation per short row, one per buffer (its first refused entry and the count), one per row.
TEST(CliExtend, ShortCapacitiesListEveryRowAndEveryBuffer) {
  const result r =
      run_extend_cli(R"({"page_size":1,"num_draft_tokens":3,"seq_len":[4,2],"accept_len":[0,0],)"
                     R"("req_pool_index":[1,2],)" +
                     x1_rows +
                     R"(,"bucket":3,"page_table_capacity":4,"triton_kv_capacity":5,)"
                     R"("flashinfer_kv_capacity":9})");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"page_table\":[[100,101,102,103],[200,201,202,203],[0,0,0,0]]"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"kv_indptr\":[0,4,6,6],\"kv_indices\":[100,101,102,103,200],"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"kv_indptr\":[0,7,12,13],\"kv_indices\":[100,101,102,103,104,105,106,"
                       "200,201],"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"select_index\":[0,3,8]"), std::string::npos) << r.out;
  EXPECT_NE(
      r.out.find(
          "\"violations\":[{\"kind\":\"capacity\",\"kernel\":\"extend_page_table\",\"row\":0,"
          "\"column\":4,\"capacity\":4,\"value\":104,\"count\":3},{\"kind\":\"capacity\","
          "\"kernel\":\"extend_page_table\",\"row\":1,\"column\":4,\"capacity\":4,\"value\":204,"
          "\"count\":1},{\"kind\":\"capacity\",\"kernel\":\"extend_triton_kv_indices\",\"row\":1,"
          "\"column\":5,\"capacity\":5,\"value\":201,\"count\":1},{\"kind\":\"capacity\","
          "\"kernel\":\"extend_flashinfer_kv_indices\",\"row\":1,\"column\":9,\"capacity\":9,"
          "\"value\":202,\"count\":4},{\"kind\":\"accept_len\",\"kernel\":"
          "\"extend_select_index\",\"row\":0,\"value\":0},{\"kind\":\"accept_len\",\"kernel\":"
          "\"extend_select_index\",\"row\":1,\"value\":0}]}"),
      std::string::npos)
      << r.out;
}

// A capacity of 0 for both kv buffers (legal): nothing stored, the indptrs still complete.
TEST(CliExtend, ZeroKvCapacitiesKeepTheIndptrs) {
  const result r =
      run_extend_cli(x1_input(R"(,"triton_kv_capacity":0,"flashinfer_kv_capacity":0)"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"kv_indptr\":[0,4,6,6],\"kv_indices\":[],"), std::string::npos);
  EXPECT_NE(r.out.find("\"kv_indptr\":[0,7,12,13],\"kv_indices\":[],"), std::string::npos);
  EXPECT_NE(r.out.find("\"kernel\":\"extend_triton_kv_indices\",\"row\":0,\"column\":0,"
                       "\"capacity\":0,\"value\":100,\"count\":6}"),
            std::string::npos)
      << r.out;
}

TEST(CliExtend, InvalidInputIsOneLineNamingTheField) {
  const std::string base = R"({"page_size":1,"num_draft_tokens":3,)";
  const std::string r2t = R"(,"req_pool_index":[1,2],)" + x1_rows + "}";
  const struct {
    std::string input;
    const char* message;
  } cases[] = {
      {x1_input(R"(,"topk":2)"), "'topk': unknown key"},
      {R"({"page_size":0,"num_draft_tokens":3,"seq_len":[4,2],"accept_len":[2,3])" + r2t,
       "page_size: 0 is below the minimum 1"},
      {R"({"page_size":1,"num_draft_tokens":0,"seq_len":[4,2],"accept_len":[2,3])" + r2t,
       "num_draft_tokens: 0 is below the minimum 1"},
      {R"({"page_size":1,"num_draft_tokens":1025,"seq_len":[4,2],"accept_len":[2,3])" + r2t,
       "num_draft_tokens: 1025 is above the maximum max_extend_tokens 1024"},
      {base + R"("seq_len":[4,-1],"accept_len":[2,3])" + r2t,
       "seq_len[1]: -1 is below the "
       "minimum 0"},
      {base + R"("seq_len":[4,2],"accept_len":[2,4])" + r2t,
       "accept_len[1]: 4 is outside [0, num_draft_tokens 3]"},
      {base + R"("seq_len":[4,2],"accept_len":[-1,3])" + r2t,
       "accept_len[0]: -1 is outside [0, num_draft_tokens 3]"},
      {base + R"("seq_len":[4,2],"accept_len":[2])" + r2t,
       "accept_len: 1 entries, expected one per request (seq_len has 2)"},
      {base + R"("seq_len":[4,2],"accept_len":[2,3],"req_pool_index":[1],)" + x1_rows + "}",
       "req_pool_index: 1 entries, expected one per request (seq_len has 2)"},
      {with_bucket("1"),
       "bucket: 1 is below the 2 requests (padded rows are appended, never dropped)"},
      {with_bucket("-1"), "bucket: -1 is below the minimum 0"},
      {x1_input(R"(,"page_table_capacity":0)"), "page_table_capacity: 0 is below the minimum 1"},
      {x1_input(R"(,"triton_kv_capacity":-1)"), "triton_kv_capacity: -1 is below the minimum 0"},
      {x1_input(R"(,"flashinfer_kv_capacity":-2)"),
       "flashinfer_kv_capacity: -2 is below the minimum 0"},
      {base + R"("seq_len":[],"accept_len":[],"req_pool_index":[],"req_to_token":[]})",
       "req_to_token: empty (pool row 0 backs the padded rows: at least 1 row)"},
      {base + R"("seq_len":[1],"accept_len":[1],"req_pool_index":[0],)"
              R"("req_to_token":[[1,2,3,4],[1,2,3]]})",
       "req_to_token[1]: 3 entries, expected the width of row 0, 4 (>= 1)"},
      {base + R"("seq_len":[4,2],"accept_len":[2,3],"req_pool_index":[1,3],)" + x1_rows + "}",
       "req_pool_index[1]: 3 is outside [0, pool_rows 3)"},
      {base + R"("seq_len":[1],"accept_len":[1],"req_pool_index":[0],)"
              R"("req_to_token":[[1,2,-3,4]]})",
       "req_to_token[0][2]: -3 is outside [0, 2^31)"},
      {base + R"("seq_len":[1],"accept_len":[1],"req_pool_index":[0],)"
              R"("req_to_token":[[1,2,2147483648,4]]})",
       "req_to_token[0][2]: 2147483648 is outside [0, 2^31)"},
      // The window's slots are read: seq_len + W must fit the row (width 8).
      {base + R"("seq_len":[6,2],"accept_len":[2,3])" + r2t,
       "seq_len[0]: 6 + 3 window tokens needs 9 positions, past the row width 8"},
      {x1_input(R"(,"page_table_capacity":16777216)"),
       "page_table_capacity: 16777216 columns x bucket 3 exceeds the limit of 16777216 table "
       "cells"},
      {"{\"page_size\":1", "invalid JSON"},
  };
  for (const auto& c : cases) {
    const result r = run_extend_cli(c.input);
    EXPECT_EQ(r.code, 2) << c.input;
    EXPECT_TRUE(r.out.empty()) << c.input;
    EXPECT_EQ(r.err.rfind("specgraph: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
}

TEST(CliExtend, UsageNamesTheCommandAndItsFields) {
  std::istringstream in;
  std::ostringstream out, err;
  EXPECT_EQ(metadata_command({"extend", "--help"}, in, out, err), 0);
  EXPECT_NE(out.str().find("usage: specgraph metadata extend < case.json"), std::string::npos);
  EXPECT_NE(out.str().find("accept_len"), std::string::npos);
  std::ostringstream out2, err2;
  EXPECT_EQ(metadata_command({"--help"}, in, out2, err2), 0);
  EXPECT_NE(out2.str().find("  extend     "), std::string::npos) << out2.str();
  std::istringstream x4(x4_input);
  std::ostringstream out3, err3;
  EXPECT_EQ(metadata_command({"extend"}, x4, out3, err3), 0) << err3.str();
  EXPECT_NE(out3.str().find("\"select_index\":[0,7]"), std::string::npos);
}

// `specgraph plan --extend`: the plan holds the draft-extend section (its buffers in the table,
// its line and JSON object beside SGLang's reservations) at engine scale, bucket 256, W 8, 128k
// context; without --verify-tokens the flag is refused naming itself.
TEST(CliExtend, PlanHoldsTheDraftExtendSection) {
  const std::vector<std::string> args = {"--extend", "--verify-tokens", "8",   "--max-context",
                                         "131072",   "--format",        "both"};
  std::ostringstream out, err;
  ASSERT_EQ(plan_command(args, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("extend.page_table           all   [256x8193]        int32"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("fa3 page table 256 x 8193 (engine 256 x 8192, 1 column short at the "
                           "context edge); prefix kv_indices 33554432, full kv_indices 33556480 "
                           "(268443648 bytes); engine reservations: triton kv_indices 2147483648 "
                           "bytes (16.0x), flashinfer kv_indices and mask 1342177280 bytes "
                           "(10.0x)\n"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("extend (W = 8): tokens 17408 bytes"), std::string::npos) << out.str();
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  std::ostringstream json, err2;
  ASSERT_EQ(plan_command(json_args, json, err2), 0) << err2.str();
  EXPECT_NE(json.str().find("\"extend\":{\"extend_tokens\":8,\"tokens\":true,\"fa3\":true,"),
            std::string::npos)
      << json.str();
  std::ostringstream out3, err3;
  EXPECT_EQ(plan_command({"--extend"}, out3, err3), 2);
  EXPECT_EQ(out3.str(), "");
  EXPECT_NE(err3.str().find("--extend: true with verify_tokens 0: the draft-extend window is the "
                            "verify tree's W tokens"),
            std::string::npos)
      << err3.str();
}

}  // namespace
}  // namespace specgraph::tools
