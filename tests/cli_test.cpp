// `specgraph metadata expand|fallback`: JSON in, JSON out, one-line errors naming the field.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tools/json.hpp"
#include "tools/metadata_command.hpp"
#include "tools/plan_command.hpp"

namespace specgraph::tools {
namespace {

struct result {
  int code;
  std::string out, err;
};

result run(int (*command)(std::istream&, std::ostream&, std::ostream&), const std::string& input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  const int code = command(in, out, err);
  return {code, out.str(), err.str()};
}

TEST(CliExpand, SpecCaseBPrintsTheTable) {
  const result r = run(metadata_expand,
                       R"({"page_size":4,"topk":2,"decode_length":5,"slots_read":6,
                           "last_page_len":[3],"cache_loc":[[27,28,29,30,31,32],[35,36,37,38,39,40]],
                           "capacity":6})");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"page_table\":[[6,7,8,0,0,0],[8,9,10,0,0,0]],\"cache_seqlen\":[8,8],"
            "\"violations\":[]}\n");
}

TEST(CliExpand, SlotsReadDefaultsToDecodeLength) {
  const result r = run(metadata_expand,
                       R"({"page_size":4,"topk":2,"decode_length":5,"last_page_len":[3],
                           "cache_loc":[[27,28,29,30,31,32],[35,36,37,38,39,40]],"capacity":6})");
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(as_int(doc.members.at("page_table").items[0].items[2], "x"), 0);
  EXPECT_EQ(as_int(doc.members.at("page_table").items[1].items[1], "x"), 9);
}

TEST(CliExpand, ListsEveryViolatingRow) {
  // The seed bug on two rows: both overflow the 2-wide step-0 table.
  const result r = run(metadata_expand,
                       R"({"page_size":2,"topk":2,"decode_length":1,"slots_read":5,
                           "last_page_len":[1],"cache_loc":[[1,2,3,4,5],[7,8,9,10,11]],
                           "capacity":2})");
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  const auto& v = doc.members.at("violations").items;
  ASSERT_EQ(v.size(), 2u) << r.out;
  EXPECT_EQ(as_int(v[0].members.at("row"), "row"), 0);
  EXPECT_EQ(as_int(v[0].members.at("column"), "column"), 2);
  EXPECT_EQ(as_int(v[1].members.at("row"), "row"), 1);
  EXPECT_EQ(v[1].members.at("kind").text, "capacity");
  EXPECT_EQ(doc.members.at("page_table").items[1].items.size(), 2u);
}

TEST(CliExpand, InvalidInputIsOneLineNamingTheField) {
  const struct {
    const char* input;
    const char* message;
  } cases[] = {
      {R"({"page_size":0,"topk":1,"decode_length":1,"last_page_len":[0],"cache_loc":[[1]],"capacity":2})",
       "page_size: 0 is below the minimum 1"},
      {R"({"page_size":4,"topk":2,"decode_length":1,"last_page_len":[0],"cache_loc":[[1]],"capacity":2})",
       "cache_loc: 1 rows, expected batch * topk = 2"},
      {R"({"page_size":4,"topk":1,"decode_length":1,"last_page_len":[4],"cache_loc":[[1]],"capacity":2})",
       "last_page_len[0]: 4 is outside [0, page_size 4)"},
      {R"({"page_size":4,"topk":1,"decode_length":1,"last_page_len":[0],"cache_loc":[[-1]],"capacity":2})",
       "cache_loc[0][0]: -1 is outside"},
      {R"({"page_size":4,"topk":1,"decode_length":2,"last_page_len":[0],"cache_loc":[[1]],"capacity":2})",
       "slots_read: 2 exceeds the cache_loc row stride 1"},
      {R"({"page_size":4,"topk":1,"decode_length":1,"last_page_len":[0],"cache_loc":[[1]],"capacity":0})",
       "capacity: 0 is below the minimum 1"},
      {R"({"page_size":4,"topk":1,"decode_length":1,"last_page_len":[0],"cache_loc":[[1]]})",
       "capacity: missing"},
      {R"({"page_size":4.5,"topk":1,"decode_length":1,"last_page_len":[0],"cache_loc":[[1]],"capacity":1})",
       "page_size: expected an integer"},
      {R"({"page_size":4,"topk":1,"decode_length":1,"last_page_len":[0],"cache_loc":[[1],[2,3]],"capacity":1})",
       "cache_loc: 2 rows, expected batch * topk = 1"},
      {R"({"page_size":4,"topk":1,"decode_length":1,"last_page_len":[0],"cache_loc":[[1]],"capacity":1,"step":3})",
       "'step': unknown key"},
      {R"({"page_size":4,)", "invalid JSON at byte"},
  };
  for (const auto& c : cases) {
    const result r = run(metadata_expand, c.input);
    EXPECT_EQ(r.code, 2) << c.input;
    EXPECT_TRUE(r.out.empty()) << c.input;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
}

// Regressions (issue 11): a declared capacity is validated before anything is sized by it, and
// output is sized by what is written, so huge capacities neither abort nor take gigabytes.
TEST(CliMetadata, HugeCapacitiesAreRefusedOrCostNothing) {
  const result expand =
      run(metadata_expand, R"({"page_size":4,"topk":1,"decode_length":1,"last_page_len":[0],)"
                           R"("cache_loc":[[1]],"capacity":2147483647})");
  EXPECT_EQ(expand.code, 2);
  EXPECT_NE(expand.err.find("capacity: 2147483647 columns x 1 rows exceeds the limit"),
            std::string::npos)
      << expand.err;
  const result fallback =
      run(metadata_fallback, R"({"seq_len":48,"max_count":4,"capacity":16777216})");
  EXPECT_EQ(fallback.code, 0) << fallback.err;
  EXPECT_EQ(fallback.out, "{\"indices\":[0,12,24,36],\"violations\":[]}\n");
  const result too_big =
      run(metadata_fallback, R"({"seq_len":48,"max_count":4,"capacity":2147483647})");
  EXPECT_EQ(too_big.code, 2);
  EXPECT_NE(too_big.err.find("capacity: 2147483647 exceeds the limit 16777216"), std::string::npos)
      << too_big.err;
  // seq_len + count - 1 overflowed int32: the step must be ceil(2^30 / 2) = 2^29.
  const result wide =
      run(metadata_fallback, R"({"seq_len":1073741824,"max_count":2,"capacity":2})");
  EXPECT_EQ(wide.out, "{\"indices\":[0,536870912],\"violations\":[]}\n") << wide.err;
  // Echoed keys are escaped and stay on one line.
  const result key = run(metadata_fallback, "{\"seq\\nlen\":1}");
  EXPECT_EQ(key.code, 2);
  EXPECT_NE(key.err.find("'seq\\x0alen': unknown key"), std::string::npos) << key.err;
  EXPECT_EQ(key.err.find('\n'), key.err.size() - 1) << key.err;
}

TEST(CliFallback, SpecExamples) {
  EXPECT_EQ(run(metadata_fallback, R"({"seq_len":48,"max_count":4,"capacity":4})").out,
            "{\"indices\":[0,12,24,36],\"violations\":[]}\n");
  EXPECT_EQ(run(metadata_fallback, R"({"seq_len":3,"max_count":4,"capacity":4})").out,
            "{\"indices\":[0,1,2],\"violations\":[]}\n");
  EXPECT_EQ(run(metadata_fallback, R"({"seq_len":0,"max_count":4,"capacity":4})").out,
            "{\"indices\":[],\"violations\":[]}\n");
  const result capped = run(metadata_fallback, R"({"seq_len":50,"max_count":5,"capacity":4})");
  EXPECT_EQ(capped.code, 0);
  EXPECT_NE(capped.out.find("\"indices\":[0,10,20,30]"), std::string::npos) << capped.out;
  EXPECT_NE(capped.out.find("\"column\":4"), std::string::npos) << capped.out;
  const result bad = run(metadata_fallback, R"({"seq_len":-1,"max_count":5,"capacity":4})");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("seq_len: -1 is below the minimum 0"), std::string::npos) << bad.err;
}

TEST(CliPlan, PrintsTheBuffersAndTheComparisonAsTextAndJson) {
  std::ostringstream out, err;
  ASSERT_EQ(plan_command({"--max-batch", "32", "--topk", "4", "--steps", "5", "--page-size", "16",
                          "--max-context", "1024"},
                         out, err),
            0)
      << err.str();
  EXPECT_NE(out.str().find("expand.page_table"), std::string::npos);
  EXPECT_NE(out.str().find("[128x6]"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("(23.46x)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("prefix.high_water           all   [2x32]"), std::string::npos)
      << out.str();
  std::ostringstream json_out;
  ASSERT_EQ(plan_command({"--max-batch", "8", "--buckets", "2,8", "--json"}, json_out, err), 0);
  const json doc = json::parse(json_out.str());
  EXPECT_EQ(doc.members.at("buckets").items.size(), 2u);
  EXPECT_GT(as_int(doc.members.at("total_bytes"), "total_bytes"), 0);
}

// Issue 20: the draft forwards (--steps) and the out_cache_loc row stride (--slot-stride) are
// separate numbers, both in the report; the rows are sized by the stride, the tables by the steps.
TEST(CliPlan, SlotStrideSizesTheSlotRowsAndTheReportShowsBothNumbers) {
  std::ostringstream out, err, json_out;
  ASSERT_EQ(plan_command({"--max-batch", "8", "--steps", "4", "--slot-stride", "5"}, out, err), 0)
      << err.str();
  EXPECT_NE(out.str().find("[8x8x5]"), std::string::npos) << out.str();  // out_cache_loc
  EXPECT_NE(out.str().find("draft forwards: num_steps 4 (steps, each with its expand table); "
                           "out_cache_loc rows: slot_stride 5 slots (1 per row never read)"),
            std::string::npos)
      << out.str();
  ASSERT_EQ(plan_command({"--max-batch", "8", "--steps", "4", "--json"}, json_out, err), 0);
  const json doc = json::parse(json_out.str());
  EXPECT_EQ(as_int(doc.members.at("num_steps"), "num_steps"), 4);
  EXPECT_EQ(as_int(doc.members.at("slot_stride"), "slot_stride"), 4);  // the default
}

TEST(CliPlan, BadValuesNameTheFlag) {
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"--topk", "0"}, "--topk: 0 is below the minimum 1 (the range is 1 to the limit 1024)"},
      {{"--steps", "five"}, "--steps: 'five' is not an integer"},
      {{"--max-batch", "16", "--buckets", "1,4"},
       "--buckets: the largest bucket 4 is below max_batch 16"},
      {{"--page-size"}, "--page-size: missing value"},
      {{"--bogus", "1"}, "unknown flag '--bogus'"},
      // Regressions (issue 11): no silent truncation, no blaming the wrong flag.
      {{"--max-batch", "8", "--buckets", "4294967297"},
       "--buckets: 4294967297 does not fit in int32"},
      {{"--max-batch", "2147483647"}, "--max-batch: 2147483647 exceeds the limit 1048576"},
      {{"--max-batch", "8", "--buckets", "2147483647,8"},
       "--buckets[0]: 2147483647 exceeds max_batch 8"},
      {{"--max-context", "2147483647"}, "--max-context: 2147483647 exceeds the limit 268435456"},
      {{"--kv-slots", "8589934593", "--page-size", "1"},
       "--kv-slots: 8589934593 slots at page_size 1"},
      {{"--steps", "4", "--slot-stride", "3"},
       "--slot-stride: 3 is outside [num_steps 4, 65536] (0 = num_steps"},
  };
  for (const auto& c : cases) {
    std::ostringstream out, err;
    EXPECT_EQ(plan_command(c.args, out, err), 2) << c.message;
    EXPECT_NE(err.str().find(c.message), std::string::npos) << err.str();
  }
}

// Issue 18: `plan --json FILE` said "FILE: missing value"; as
// `run --json FILE` it now writes the file, and `--json` alone (or `--json -`) prints JSON.
TEST(CliPlan, JsonGoesToStdoutOrToTheNamedFile) {
  const std::string path = ::testing::TempDir() + "specgraph_plan_test.json";
  std::remove(path.c_str());
  std::ostringstream out, err;
  ASSERT_EQ(plan_command({"--max-batch", "8", "--json", path, "--topk", "2"}, out, err), 0)
      << err.str();
  EXPECT_TRUE(out.str().empty()) << out.str();
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ostringstream want, want_err;
  ASSERT_EQ(plan_command({"--max-batch", "8", "--topk", "2", "--json"}, want, want_err), 0);
  EXPECT_EQ(text, want.str());
  EXPECT_EQ(as_int(json::parse(text).members.at("buckets").items.back(), "bucket"), 8) << text;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--json", "--max-batch", "8", "--topk", "2"},
        std::vector<std::string>{"--max-batch", "8", "--topk", "2", "--json", "-"},
        std::vector<std::string>{"--max-batch", "8", "--topk", "2", "--json=-"}}) {
    std::ostringstream o, e;
    ASSERT_EQ(plan_command(args, o, e), 0) << e.str();
    EXPECT_EQ(o.str(), want.str());
  }
  std::ostringstream o, e;
  EXPECT_EQ(plan_command({"--json", "/nonexistent-specgraph-dir/plan.json"}, o, e), 2);
  EXPECT_NE(e.str().find("--json: cannot write '/nonexistent-specgraph-dir/plan.json'"),
            std::string::npos)
      << e.str();
  std::remove(path.c_str());
}

// Issue 18: `specgraph metadata` and `metadata expand --help` said "unknown command".
TEST(CliMetadata, UsageListsTheCommandsAndEachCommandsInputFields) {
  auto call = [](const std::vector<std::string>& args) {
    std::istringstream in("{}");
    std::ostringstream out, err;
    const int code = metadata_command(args, in, out, err);
    return result{code, out.str(), err.str()};
  };
  const result bare = call({});
  EXPECT_EQ(bare.code, 2);
  for (const result& r : {bare, call({"--help"})}) {
    EXPECT_NE(r.out.find("expand"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("fallback"), std::string::npos) << r.out;
  }
  EXPECT_EQ(call({"--help"}).code, 0);
  const result expand = call({"expand", "--help"});
  EXPECT_EQ(expand.code, 0) << expand.err;
  for (const char* field : {"page_size", "topk", "decode_length", "slots_read", "last_page_len",
                            "cache_loc", "capacity"}) {
    EXPECT_NE(expand.out.find(std::string("  ") + field + " "), std::string::npos) << field;
  }
  const result fallback = call({"fallback", "-h"});
  EXPECT_EQ(fallback.code, 0) << fallback.err;
  for (const char* field : {"seq_len", "max_count", "capacity"}) {
    EXPECT_NE(fallback.out.find(std::string("  ") + field + " "), std::string::npos) << field;
  }
  const result unknown = call({"expnad"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("unknown metadata command 'expnad' (commands: expand, fallback"),
            std::string::npos)
      << unknown.err;
  const result extra = call({"expand", "case.json"});
  EXPECT_EQ(extra.code, 2);
  EXPECT_NE(extra.err.find("takes no arguments"), std::string::npos) << extra.err;
  // The command itself still runs on stdin.
  const result runs = call({"fallback"});
  EXPECT_EQ(runs.code, 2);
  EXPECT_NE(runs.err.find("seq_len: missing"), std::string::npos) << runs.err;
}

}  // namespace
}  // namespace specgraph::tools
