// `specgraph metadata kv-indices`: the CSR draft-decode indices of every step (docs/csr.md) as
// JSON, the worked examples and overflow cases of the format verbatim, one-line errors.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "tools/json.hpp"
#include "tools/metadata_command.hpp"

namespace specgraph::tools {
namespace {

struct result {
  int code;
  std::string out, err;
};

result run_kv(const std::string& input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  const int code = metadata_kv_indices(in, out, err);
  return {code, out.str(), err.str()};
}

// A pool row `base + p` for p < width, as JSON.
std::string row(int base, int width) {
  std::string s = "[";
  for (int p = 0; p < width; ++p) s += (p ? "," : "") + std::to_string(base + p);
  return s + "]";
}

TEST(CliKvIndices, A1EveryStep) {
  const result r = run_kv(R"({"page_size":1,"topk":2,"num_steps":3,"seq_len":[3,2],)"
                          R"("req_pool_index":[1,2],"req_to_token":[)" +
                          row(0, 9) + "," + row(100, 9) + "," + row(200, 9) + "]}");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"kv_indptr\":[[0,4,8,11,14],[0,5,10,14,18],[0,6,12,17,22]],\"kv_indices\":["
            "[100,101,102,103,100,101,102,106,200,201,202,200,201,205],"
            "[100,101,102,103,104,100,101,102,106,107,200,201,202,203,200,201,205,206],"
            "[100,101,102,103,104,105,100,101,102,106,107,108,200,201,202,203,204,200,201,205,"
            "206,207]],\"violations\":[]}\n");
}

TEST(CliKvIndices, A3WindowAndA4PageGranularTable) {
  const result a3 = run_kv(R"({"page_size":1,"topk":1,"num_steps":2,"seq_len":[10],)"
                           R"("req_pool_index":[0],"window":4,"sink":2,"req_to_token":[)" +
                           row(300, 12) + "]}");
  ASSERT_EQ(a3.code, 0) << a3.err;
  EXPECT_EQ(a3.out,
            "{\"kv_indptr\":[[0,7],[0,8]],\"kv_indices\":[[300,301,306,307,308,309,310],"
            "[300,301,306,307,308,309,310,311]],\"violations\":[]}\n");
  const result a4 = run_kv(R"({"page_size":4,"topk":2,"num_steps":2,"seq_len":[6],)"
                           R"("req_pool_index":[0],"entry_page_size":4,)"
                           R"("req_to_token":[[5,9,2,7,3,11]]})");
  ASSERT_EQ(a4.code, 0) << a4.err;
  EXPECT_EQ(a4.out,
            "{\"kv_indptr\":[[0,7,14],[0,8,16]],\"kv_indices\":["
            "[20,21,22,23,36,37,38,20,21,22,23,36,37,10],"
            "[20,21,22,23,36,37,38,39,20,21,22,23,36,37,10,11]],\"violations\":[]}\n");
}

// slot_stride 3 for 2 draft steps (SGLang's S = 3): A4's request with its branch regions laid
// out from 3 slots, ceil((6 % 4 + 3) / 4) = 2 pages apart, so branch 1 drafts at positions 14,
// 15 (page 7: slots 30, 31) instead of 10, 11 (docs/csr.md section 1).
TEST(CliKvIndices, SlotStrideLaysOutBranchRegions) {
  const result r = run_kv(R"({"page_size":4,"topk":2,"num_steps":2,"slot_stride":3,)"
                          R"("seq_len":[6],"req_pool_index":[0],"entry_page_size":4,)"
                          R"("req_to_token":[[5,9,2,7,3,11]]})");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"kv_indptr\":[[0,7,14],[0,8,16]],\"kv_indices\":["
            "[20,21,22,23,36,37,38,20,21,22,23,36,37,30],"
            "[20,21,22,23,36,37,38,39,20,21,22,23,36,37,30,31]],\"violations\":[]}\n");
}

// SGLang #27338: rows of 32 per step for needs of 184, 200, 216: one violation per step naming
// the query row of the first refused entry, its id, and how many were refused.
TEST(CliKvIndices, Sglang27338CapacityViolationsPerStep) {
  const result r = run_kv(R"({"page_size":1,"topk":8,"num_steps":3,"seq_len":[12,9],)"
                          R"("req_pool_index":[1,2],"capacity":[32,32,32],"req_to_token":[)" +
                          row(0, 36) + "," + row(100, 36) + "," + row(200, 36) + "]}");
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  const auto& v = doc.members.at("violations").items;
  ASSERT_EQ(v.size(), 3u) << r.out;
  const int count[] = {152, 168, 184}, value[] = {106, 104, 102};
  for (int s = 0; s < 3; ++s) {
    const auto& m = v[static_cast<std::size_t>(s)].members;
    EXPECT_EQ(m.at("kind").text, "capacity");
    EXPECT_EQ(m.at("kernel").text, "draft_kv_indices");
    EXPECT_EQ(as_int(m.at("step"), "step"), s);
    EXPECT_EQ(as_int(m.at("row"), "row"), 2);
    EXPECT_EQ(as_int(m.at("column"), "column"), 32);
    EXPECT_EQ(as_int(m.at("capacity"), "capacity"), 32);
    EXPECT_EQ(as_int(m.at("value"), "value"), value[s]);
    EXPECT_EQ(as_int(m.at("count"), "count"), count[s]);
    EXPECT_EQ(doc.members.at("kv_indices").items[static_cast<std::size_t>(s)].items.size(), 32u);
    EXPECT_EQ(doc.members.at("kv_indptr").items[static_cast<std::size_t>(s)].items.size(), 17u);
  }
  EXPECT_EQ(as_int(doc.members.at("kv_indptr").items[2].items[16], "x"), 216);
}

TEST(CliKvIndices, ContextLimitRefusesTheDraftEntries) {
  const result r = run_kv(R"({"page_size":1,"topk":1,"num_steps":3,"seq_len":[15],)"
                          R"("req_pool_index":[0],"capacity":[16,16,16],"req_to_token":[)" +
                          row(500, 18) + "]}");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"violations\":[{\"kind\":\"capacity\",\"kernel\":\"draft_kv_indices\","
                       "\"step\":1,\"row\":0,\"column\":16,\"capacity\":16,\"value\":516,"
                       "\"count\":1},{\"kind\":\"capacity\",\"kernel\":\"draft_kv_indices\","
                       "\"step\":2,\"row\":0,\"column\":16,\"capacity\":16,\"value\":516,"
                       "\"count\":2}]}"),
            std::string::npos)
      << r.out;
}

TEST(CliKvIndices, InvalidInputIsOneLineNamingTheField) {
  const std::string ok_rows = R"("req_pool_index":[0],"req_to_token":[[1,2,3,4,5,6]])";
  const struct {
    std::string input;
    const char* message;
  } cases[] = {
      {R"({"page_size":0,"topk":1,"num_steps":1,"seq_len":[2],)" + ok_rows + "}",
       "page_size: 0 is below the minimum 1"},
      {R"({"page_size":1,"topk":1,"num_steps":1,"seq_len":[7],)" + ok_rows + "}",
       "seq_len[0]: 7 needs position 7"},
      {R"({"page_size":1,"topk":1,"num_steps":1,"seq_len":[2],"req_pool_index":[1],)"
       R"("req_to_token":[[1,2,3]]})",
       "req_pool_index[0]: 1 is outside [0, pool_rows 1)"},
      {R"({"page_size":1,"topk":1,"num_steps":1,"seq_len":[2],"req_pool_index":[0],)"
       R"("req_to_token":[[1,2,3],[4]]})",
       "req_to_token[1]: 1 entries, expected the width of row 0, 3"},
      {R"({"page_size":1,"topk":1,"num_steps":1,"seq_len":[2],"req_pool_index":[0],)"
       R"("req_to_token":[[1,-2,3]]})",
       "req_to_token[0][1]: -2 is outside [0, slot_limit"},
      {R"({"page_size":1,"topk":1,"num_steps":2,"seq_len":[2],"capacity":[4],)" + ok_rows + "}",
       "capacity: 1 entries, expected one per step, 2"},
      {R"({"page_size":1,"topk":1,"num_steps":1,"seq_len":[2],"capacity":[-1],)" + ok_rows + "}",
       "capacity[0]: -1 is below the minimum 0"},
      {R"({"page_size":1,"topk":1,"num_steps":2,"slot_stride":1,"seq_len":[2],)" + ok_rows + "}",
       "slot_stride: 1 is outside [num_steps 2, 65536]"},
      {R"({"page_size":1,"topk":1,"num_steps":2,"slot_stride":65537,"seq_len":[2],)" + ok_rows +
           "}",
       "slot_stride: 65537 is outside [num_steps 2, 65536]"},
      {R"({"page_size":1,"topk":1,"num_steps":1,"seq_len":[2],"steps":1,)" + ok_rows + "}",
       "'steps': unknown key"},
      {R"({"page_size":1,"topk":1,"num_steps":1,"seq_len":[],"req_pool_index":[],)"
       R"("req_to_token":[[1]]})",
       "seq_len: empty"},
      {R"({"page_size":1,"topk":1024,"num_steps":1024,"seq_len":[1000],)"
       R"("req_pool_index":[0],"req_to_token":[[1]]})",
       "seq_len[0]: 1000 needs position"},
  };
  // Bounded work: 512 rows x 256 steps x (0 + 256) cells per step is refused before any is
  // walked (the input is small: 128 page entries of 1024 positions).
  const result big = run_kv(R"({"page_size":1,"topk":512,"num_steps":256,"seq_len":[0],)"
                            R"("req_pool_index":[0],"entry_page_size":1024,"req_to_token":[)" +
                            row(0, 128) + "]}");
  EXPECT_EQ(big.code, 2);
  EXPECT_NE(big.err.find("num_steps: 256 steps x 131072 cells exceeds the limit of 16777216"),
            std::string::npos)
      << big.err;
  for (const auto& c : cases) {
    const result r = run_kv(c.input);
    EXPECT_EQ(r.code, 2) << c.input;
    EXPECT_TRUE(r.out.empty()) << c.input;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
}

}  // namespace
}  // namespace specgraph::tools
