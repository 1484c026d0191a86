// `specgraph metadata verify`: a draft tree's FA3 cascade tables and FlashInfer indices and packed
// mask (docs/verify.md) as JSON; the worked examples verbatim, capacity violations, the
// double-counted D refused by name, one-line errors with no stdout.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "tools/json.hpp"
#include "tools/metadata_command.hpp"
#include "tools/plan_command.hpp"

namespace specgraph::tools {
namespace {

struct result {
  int code;
  std::string out, err;
};

result run_verify_cli(const std::string& input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  const int code = metadata_verify(in, out, err);
  return {code, out.str(), err.str()};
}

// B1's input (docs/verify.md): ps 1, D 4, seq_len 5, row 40 + p, tree rows 1000 1100 1010 1101.
const std::string b1_mask =
    "[1,1,1,1,1,1,0,0,0,1,1,1,1,1,1,1,0,0,1,1,1,1,1,1,0,1,0,1,1,1,1,1,1,1,0,1]";
std::string b1_input(const std::string& extra = "", const std::string& seq_len = "5") {
  return R"({"page_size":1,"num_draft_tokens":4,"seq_len":[)" + seq_len +
         R"(],"req_pool_index":[0],"req_to_token":[[40,41,42,43,44,45,46,47,48,49,50,51,52]],)"
         R"("custom_mask":)" +
         b1_mask + extra + "}";
}

TEST(CliVerify, B1BothLayouts) {
  const result r = run_verify_cli(b1_input(R"(,"prefix_capacity":8)"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"fa3\":{\"prefix\":{\"page_table\":[[40,41,42,43,44,0,0,0]],\"cache_seqlen\":[5],"
            "\"cu_seqlens_q\":[0,4],\"cu_seqlens_k\":[0,5],\"max_seqlen_q\":4},\"expand\":{"
            "\"page_table\":[[45,46,47,48],[45,46,47,48],[45,47,46,48],[45,46,48,47]],"
            "\"cache_seqlen\":[1,2,2,3],\"cu_seqlens_q\":[0,1,2,3,4],\"cu_seqlens_k\":[0,1,3,5,8],"
            "\"max_seqlen_q\":1}},\"flashinfer\":{\"qo_indptr\":[0,4],\"kv_indptr\":[0,9],"
            "\"kv_indices\":[40,41,42,43,44,45,46,47,48],\"kv_last_page_len\":[1],"
            "\"mask_indptr\":[0,36],\"packed_mask_indptr\":[0,5],"
            "\"packed_mask\":[63,254,252,250,11]},\"violations\":[]}\n");
}

// B3: a padded request (real_batch 1) on pool row 0 attends all its verify slots.
TEST(CliVerify, B3PaddedRequest) {
  const result r = run_verify_cli(
      R"({"page_size":1,"num_draft_tokens":3,"seq_len":[4,1],"req_pool_index":[1,0],)"
      R"("real_batch":1,"req_to_token":[[0,1,2,3,4,5,6],[60,61,62,63,64,65,66]],)"
      R"("custom_mask":[1,1,1,1,1,0,0,1,1,1,1,1,1,0,1,1,1,1,1,0,1]})");
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  const json& fa3 = doc.members.at("fa3").members.at("expand");
  std::ostringstream rows;
  for (const json& row : fa3.members.at("page_table").items) {
    for (const json& v : row.items) rows << v.integer << ' ';
  }
  EXPECT_EQ(rows.str(), "64 65 66 64 65 66 64 66 65 1 2 3 1 2 3 1 2 3 ");
  EXPECT_NE(r.out.find("\"cu_seqlens_k\":[0,1,3,5,8,11,14]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"kv_indices\":[60,61,62,63,64,65,66,0,1,2,3]"), std::string::npos);
  EXPECT_NE(r.out.find("\"packed_mask\":[159,223,23,255,15]"), std::string::npos) << r.out;
}

TEST(CliVerify, ShortCapacitiesListOneViolationPerBuffer) {
  const result r = run_verify_cli(
      b1_input(R"(,"prefix_capacity":3,"kv_indices_capacity":7,"packed_mask_capacity":4)"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"page_table\":[[40,41,42]]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"kv_indices\":[40,41,42,43,44,45,46],"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"kv_indptr\":[0,9]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"packed_mask\":[63,254,252,250]}"), std::string::npos) << r.out;
  EXPECT_NE(
      r.out.find("\"violations\":[{\"kind\":\"capacity\",\"kernel\":\"verify_prefix_page_table\","
                 "\"row\":0,\"column\":3,\"capacity\":3,\"value\":43,\"count\":2},"
                 "{\"kind\":\"capacity\",\"kernel\":\"verify_kv_indices\",\"row\":0,\"column\":7,"
                 "\"capacity\":7,\"value\":47,\"count\":2},{\"kind\":\"capacity\",\"kernel\":"
                 "\"verify_packed_mask\",\"row\":0,\"column\":4,\"capacity\":4,\"value\":11,"
                 "\"count\":1}]}"),
      std::string::npos)
      << r.out;
}

TEST(CliVerify, InvalidInputIsOneLineNamingTheField) {
  const struct {
    std::string input;
    const char* message;
  } cases[] = {
      // seq_len 9 = 5 + D: the mask of the true length is D * D = 16 cells short.
      {b1_input("", "9"),
       "custom_mask: 36 cells, the formula sum(D * (seq_len + D)) over the real requests gives "
       "52: seq_len seems to include the D verify tokens already (the mask is D * D * "
       "real_batch = 16 cells shorter); pass seq_len without the verify tokens"},
      {b1_input(R"(,"real_batch":2)"), "real_batch: 2 is outside [0, batch 1]"},
      {b1_input(R"(,"topk":2)"), "'topk': unknown key"},
      {b1_input(R"(,"kv_indices_capacity":-1)"), "kv_indices_capacity: -1 is below the minimum 0"},
      {b1_input("", "10"),
       "seq_len[0]: 10 + 4 verify tokens needs 14 positions, past the row "
       "width req_to_token_stride 13"},
      {b1_input("", "0"), "seq_len[0]: 0 is below the minimum 1"},
      // json_fuzz's finding: a negative length made the output sizes negative (a vector of
      // size_t(-5) entries threw length_error out of the command) before the kernels' check.
      {b1_input("", "-9"), "seq_len[0]: -9 is below the minimum 1"},
      {R"({"page_size":0,"num_draft_tokens":4,"seq_len":[5],"req_pool_index":[0],)"
       R"("req_to_token":[[1,2,3,4,5,6,7,8,9]],"custom_mask":)" +
           b1_mask + "}",
       "page_size: 0 is below the minimum 1"},
      {R"({"page_size":1,"num_draft_tokens":0,"seq_len":[5],"req_pool_index":[0],)"
       R"("req_to_token":[[1]],"custom_mask":[]})",
       "num_draft_tokens: 0 is outside [1, 1024]"},
      {R"({"page_size":1,"num_draft_tokens":4,"seq_len":[5],"req_pool_index":[0],)"
       R"("req_to_token":[[1,2,3,4,5,6,7,8,-9]],"custom_mask":)" +
           b1_mask + "}",
       "req_to_token[0][8]: -9 is outside [0, slot_limit"},
      {R"({"page_size":1,"num_draft_tokens":4,"seq_len":[5],"req_pool_index":[0],)"
       R"("req_to_token":[[1,2,3,4,5,6,7,8,9]],"custom_mask":[1,2]})",
       "custom_mask[1]: 2 is not 0 or 1"},
      {R"({"page_size":1,"num_draft_tokens":4,"seq_len":[5],"req_pool_index":[1],)"
       R"("req_to_token":[[1,2,3,4,5,6,7,8,9]],"custom_mask":)" +
           b1_mask + "}",
       "req_pool_index[0]: 1 is outside [0, pool_rows 1)"},
      {R"({"page_size":1,"num_draft_tokens":1024,"seq_len":[100000],"req_pool_index":[0],)"
       R"("req_to_token":[[1]],"custom_mask":[]})",
       "mask cells exceeds the limit of 16777216"},
  };
  for (const auto& c : cases) {
    const result r = run_verify_cli(c.input);
    EXPECT_EQ(r.code, 2) << c.input;
    EXPECT_TRUE(r.out.empty()) << c.input;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
}

// `specgraph plan --verify-tokens D`: the exact verify buffers of the largest bucket against the
// engines' mask reservation. B 8, M 4096, ps 16, D 64: prefix 8 x 256 and expand 512 x 64 int32
// tables with their vectors (4 x 36380 bytes); kv_indices 8 x 4160; packed mask 8 x 33280 bytes;
// SGLang's mask 8 x 64 x 4096 bytes = 7.9x the packed one, its graph kv_indices 8 x 64 x 4096
// int32 = 63.0x the exact 33280.
TEST(CliVerify, PlanReportsTheVerifyBuffers) {
  std::ostringstream out, err;
  const int code = plan_command({"--max-batch", "8", "--topk", "8", "--steps", "5", "--page-size",
                                 "16", "--max-context", "4096", "--verify-tokens", "64"},
                                out, err);
  ASSERT_EQ(code, 0) << err.str();
  EXPECT_NE(out.str().find("verify (D = 64): fa3 prefix table 8 x 256, expand table 512 x 64, "
                           "145520 bytes; flashinfer kv_indices 8 x (4096 + 64) = 33280, packed "
                           "mask 266240 bytes, 399536 bytes in all; engine mask reservation 8 x "
                           "64 x 4096 = 2097152 bytes (7.9x the packed mask); engine kv_indices "
                           "reservation 8 x 64 x 4096 x 4 = 8388608 bytes (63.0x kv_indices)\n"),
            std::string::npos)
      << out.str();
  std::ostringstream out2, err2;
  EXPECT_EQ(plan_command({"--verify-tokens", "0"}, out2, err2), 2);
  EXPECT_NE(err2.str().find("--verify-tokens: 0 is outside [1, 1024]"), std::string::npos)
      << err2.str();
}

// With --verify-tokens the plan itself holds the verify section: its buffers in the table, its
// object in the JSON, and a configuration whose mask cannot be indexed in int32 refused as the
// flag.
TEST(CliVerify, PlanHoldsTheVerifySection) {
  const std::vector<std::string> args = {
      "--max-batch",   "4",   "--topk",   "2",    "--steps",         "2", "--page-size", "16",
      "--max-context", "256", "--format", "both", "--verify-tokens", "8"};
  std::ostringstream out, err;
  ASSERT_EQ(plan_command(args, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("verify.packed_mask          all   [1056]            uint8"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("verify section (D = 8, bucket 4, M 256): 7776 bytes in 16 buffers"),
            std::string::npos)
      << out.str();
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  std::ostringstream json, err2;
  ASSERT_EQ(plan_command(json_args, json, err2), 0) << err2.str();
  EXPECT_NE(json.str().find("\"verify\":{\"draft_tokens\":8,\"fa3\":true,\"flashinfer\":true,"
                            "\"prefix_capacity\":16,\"kv_indices_capacity\":1056,"
                            "\"packed_mask_capacity\":1056,\"bytes\":10400,"
                            "\"engine_mask_bytes\":8192"),
            std::string::npos)
      << json.str();
  std::ostringstream out3, err3;
  EXPECT_EQ(
      plan_command({"--max-batch", "256", "--max-context", "1048576", "--verify-tokens", "1024"},
                   out3, err3),
      2);
  EXPECT_NE(err3.str().find("--verify-tokens: 1024: max_batch 256 x D x (max_context_len 1048576 "
                            "+ D) = "),
            std::string::npos)
      << err3.str();
}

}  // namespace
}  // namespace specgraph::tools
