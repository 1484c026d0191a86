// `specgraph metadata accept` (docs/round-cli.md): violations listed one by one (a row too
// narrow for its allocation, each row; a short ring; a next-round position not backed, each row
// with its smallest position), and bad input refused as one line naming the field, exit 2,
// nothing on stdout. Expected values are written out from the round spec's rules.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cli_accept_support.hpp"

namespace specgraph::tools {
namespace {

std::string after(const std::string& out, const std::string& key) {
  const std::size_t at = out.find("\"" + key + "\":");
  return at == std::string::npos ? "<no " + key + ">" : out.substr(at);
}

// E2's row is 16 wide: its allocation max(14, 9 + 8) = 17 does not fit; it takes nothing and
// still runs the next round from its 14 backed positions.
TEST(CliAcceptViolations, RowTooNarrow) {
  const cli_result r = run_accept_cli(e2(16));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(after(r.out, "allocated_len"),
            "\"allocated_len\":[14,0],\"pages_taken\":0,\"req_to_token_writes\":[],"
            "\"next_round\":{\"active\":[1,0],\"seq_len\":[9,1],\"root_token\":[30,0],"
            "\"draft_position\":[[9,9],[0,0]],\"draft_out_cache_loc\":[[[109,110],[111,112]],[[0,"
            "0],[0,0]]],\"tail_copies\":[],\"verify_out_cache_loc\":[[109,110,111,112],[0,0,0,0]]},"
            "\"violations\":[{\"kind\":\"row_width\",\"kernel\":\"accept_alloc\",\"row\":0,"
            "\"need\":17,\"width\":16}]}\n");
}

// Both of E1's requests go on (no stop token) in rows 14 wide: one violation per row.
TEST(CliAcceptViolations, EveryNarrowRowListed) {
  fields f = e1(14);
  erase(f, "stop_token_ids");
  const cli_result r = run_accept_cli(f);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(after(r.out, "allocated_len"),
            "\"allocated_len\":[13,11],\"pages_taken\":0,\"req_to_token_writes\":[],"
            "\"next_round\":{\"active\":[1,1],\"seq_len\":[8,7],\"root_token\":[9,3],"
            "\"draft_position\":[[8],[7]],\"draft_out_cache_loc\":[[[108,109,110]],[[207,208,"
            "209]]],\"tail_copies\":[],\"verify_out_cache_loc\":[[108,109,110,111],[207,208,209,"
            "210]]},\"violations\":[{\"kind\":\"row_width\",\"kernel\":\"accept_alloc\",\"row\":0,"
            "\"need\":16,\"width\":14},{\"kind\":\"row_width\",\"kernel\":\"accept_alloc\","
            "\"row\":1,\"need\":15,\"width\":14}]}\n");
}

// E1 needs 3 pages from a ring of 2: no row allocates and the next round is all padding.
TEST(CliAcceptViolations, ShortRing) {
  for (const char* ring : {"[300,301]", "[]"}) {
    fields f = e1();
    set(f, "free_pages", ring);
    const cli_result r = run_accept_cli(f);
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string available = std::string(ring) == "[]" ? "0" : "2";
    EXPECT_EQ(after(r.out, "allocated_len"),
              "\"allocated_len\":[13,11],\"pages_taken\":0,\"req_to_token_writes\":[],"
              "\"next_round\":{\"active\":[0,0],\"seq_len\":[1,1],\"root_token\":[0,0],"
              "\"draft_position\":[[0],[0]],\"draft_out_cache_loc\":[[[0,0,0]],[[0,0,0]]],"
              "\"tail_copies\":[],\"verify_out_cache_loc\":[[0,0,0,0],[0,0,0,0]]},"
              "\"violations\":[{\"kind\":\"ring\",\"kernel\":\"accept_alloc\",\"need\":3,"
              "\"available\":" +
                  available + "}]}\n");
    // The acceptance and the commit are not affected.
    EXPECT_NE(r.out.find("\"finished\":[0,1],\"emit_len\":[3,2],\"slots_to_free\":[[],[206,207,"
                         "208,209,210]],"),
              std::string::npos)
        << r.out;
  }
}

// Row 0 too narrow (16 > 15) takes nothing; row 1 needs 4 pages of a ring of 2: both listed.
TEST(CliAcceptViolations, NarrowRowAndShortRing) {
  fields f = e1(15);
  erase(f, "stop_token_ids");
  set(f, "free_pages", "[300,301]");
  const cli_result r = run_accept_cli(f);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(after(r.out, "violations"),
            "\"violations\":[{\"kind\":\"row_width\",\"kernel\":\"accept_alloc\",\"row\":0,"
            "\"need\":16,\"width\":15},{\"kind\":\"ring\",\"kernel\":\"accept_alloc\",\"need\":4,"
            "\"available\":2}]}\n");
  EXPECT_NE(r.out.find("\"pages_taken\":0,\"req_to_token_writes\":[],\"next_round\":{"
                       "\"active\":[0,0],"),
            std::string::npos)
      << r.out;
}

// Reserve 0 and windows allocated to exactly seq_len + D: the next round's positions past
// allocated_len are given slot 0 (never the stale 109.. of the row), one violation per row
// with its smallest position.
TEST(CliAcceptViolations, UnbackedPositions) {
  fields f = e1();
  erase(f, "stop_token_ids");
  set(f, "reserve", "0");
  set(f, "allocated_len", "[9,7]");
  const cli_result r = run_accept_cli(f);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(after(r.out, "allocated_len"),
            "\"allocated_len\":[9,7],\"pages_taken\":0,\"req_to_token_writes\":[],"
            "\"next_round\":{\"active\":[1,1],\"seq_len\":[8,7],\"root_token\":[9,3],"
            "\"draft_position\":[[8],[7]],\"draft_out_cache_loc\":[[[108,0,0]],[[0,0,0]]],"
            "\"tail_copies\":[],\"verify_out_cache_loc\":[[108,0,0,0],[0,0,0,0]]},"
            "\"violations\":[{\"kind\":\"unbacked\",\"kernel\":\"next_round_slots\",\"row\":0,"
            "\"position\":9,\"allocated\":9},{\"kind\":\"unbacked\",\"kernel\":"
            "\"next_round_slots\",\"row\":1,\"position\":7,\"allocated\":7}]}\n");
}

// E3 allocated to 12 with reserve 0: branch 1's region starts at position 12, past the row's
// backed positions (its tail copy's destination, its drafts 13, 14 and verify position 12).
TEST(CliAcceptViolations, UnbackedBranchRegion) {
  fields f = e3();
  set(f, "reserve", "0");
  set(f, "allocated_len", "[12]");
  const cli_result r = run_accept_cli(f);
  ASSERT_EQ(r.code, 0) << r.err;
  // The copy into the unbacked hole is given slot 0 too (its source, slot 8, is backed).
  EXPECT_NE(r.out.find("\"draft_out_cache_loc\":[[[9,10],[0,0]]],\"tail_copies\":[[0,8]],"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"verify_out_cache_loc\":[[9,10,11,0]]},\"violations\":[{\"kind\":"
                       "\"unbacked\",\"kernel\":\"next_round_slots\",\"row\":0,\"position\":12,"
                       "\"allocated\":12}]}\n"),
            std::string::npos)
      << r.out;
}

struct bad_case {
  fields input;
  std::string field_and_value;  // the error line's start after "specgraph: error: "
};

std::vector<bad_case> bad_cases() {
  std::vector<bad_case> cases;
  auto add = [&](fields f, const std::string& key, const std::string& value,
                 const std::string& expect) {
    set(f, key, value);
    cases.push_back({f, expect});
  };
  const fields base = e1();
  add(base, "pagesize", "1", "'pagesize': unknown key");
  add(base, "page_size", "0", "page_size: 0 is outside [1, limits::max_page_size");
  add(base, "topk", "0", "topk: 0 is outside [1, limits::max_topk");
  add(base, "topk", "1025", "topk: 1025 is outside [1, limits::max_topk 1024]");
  add(base, "num_steps", "0", "num_steps: 0 is outside [1, max_accept_steps");
  add(base, "num_draft_tokens", "1025", "num_draft_tokens: 1025 is outside [1, max_accept_tokens");
  add(base, "num_draft_tokens", "\"4\"", "num_draft_tokens: expected an integer");
  add(base, "seq_len", "5", "seq_len: expected a list");
  add(base, "seq_len", "[5,2.5]", "seq_len[1]: expected an integer");
  add(base, "req_pool_index", "[1]", "req_pool_index: 1 entries, expected one per request");
  add(base, "allocated_len", "[13,11,4]", "allocated_len: 3 entries, expected one per request");
  add(base, "parent", "[[-1,0,1,2]]", "parent: 1 rows, expected one per request");
  add(base, "draft_token", "[[7,11,12,13],[4,5,6]]", "draft_token[1]: 3 nodes, expected");
  add(base, "target_predict", "[[11,12,9,0],[5,6,8,2147483648]]",
      "target_predict[1][3]: 2147483648 does not fit in int32");
  add(base, "parent", "[[0,0,1,2],[-1,0,1,2]]", "parent[0][0]: 0 is not -1");
  add(base, "parent", "[[-1,0,1,2],[-1,0,2,2]]", "parent[1][2]: 2 is outside [-1, 2)");
  add(base, "parent", "[[-1,0,1,-2],[-1,0,1,2]]", "parent[0][3]: -2 is outside [-1, 3)");
  add(base, "num_steps", "2", "parent[0][3]: node 3 is at depth 3, deeper than num_steps 2");
  add(base, "req_to_token", "[]", "req_to_token: empty");
  add(base, "req_to_token", "[[0,0],[1,2,3]]", "req_to_token[1]: 3 entries, expected the width");
  add(base, "req_to_token", "[[0],[-1],[0]]", "req_to_token[1][0]: -1 is outside [0, 2^31)");
  add(base, "req_pool_index", "[1,3]", "req_pool_index[1]: 3 is outside [0, pool_rows 3)");
  add(base, "req_pool_index", "[-1,2]", "req_pool_index[0]: -1 is outside [0, pool_rows 3)");
  add(base, "seq_len", "[0,3]", "seq_len[0]: 0 is outside [1, limits::max_context_len");
  add(base, "allocated_len", "[8,11]", "allocated_len[0]: 8 is below seq_len + num_draft_tokens 9");
  add(base, "allocated_len", "[13,17]",
      "allocated_len[1]: 17 is above the req_to_token row width 16");
  add(base, "max_new_tokens_left", "[1,0]", "max_new_tokens_left[1]: 0 is below the minimum 1");
  add(base, "max_new_tokens_left", "[1]", "max_new_tokens_left: 1 entries, expected one per");
  add(base, "real_batch", "3", "real_batch: 3 is outside [0, bs 2]");
  add(base, "real_batch", "-1", "real_batch: -1 is outside [0, bs 2]");
  add(base, "reserve", "-1", "reserve: -1 is outside [0, 2^28]");
  add(base, "reserve", "268435457", "reserve: 268435457 is outside [0, 2^28]");
  add(base, "free_pages", "[300,-5]", "free_pages[1]: -5 is outside [0, 2^31 / page_size 1)");
  add(base, "stop_token_ids", "[2147483648]", "stop_token_ids[0]: 2147483648 does not fit");
  add(base, "free_pages", "{}", "free_pages: expected a list");
  // The default reserve R1 at page_size 2^20, topk 1024: 2^31 positions, past 2^28.
  fields huge = base;
  erase(huge, "reserve");
  set(huge, "page_size", "1048576");
  add(huge, "topk", "1024", "reserve: the default R1 2147483648");
  // A page id whose slots pass int32 at page size 4.
  add(e3(), "free_pages", "[536870912]",
      "free_pages[0]: 536870912 is outside [0, 2^31 / page_size 4)");
  // E3 allocated to 22 (mid-page) where position 21's slot is not at page offset 1.
  fields partial = e3();
  set(partial, "allocated_len", "[22]");
  std::string row = e3_row(28);
  row.replace(row.find(",45,"), 4, ",47,");
  add(partial, "req_to_token", "[" + zeros(28) + "," + row + "]",
      "allocated_len[0]: 22 ends a partial page but req_to_token[1][21] = 47");
  fields missing = base;
  erase(missing, "free_pages");
  cases.push_back({missing, "free_pages: missing"});
  cases.push_back({{{"page_size", "1"}}, "topk: missing"});
  return cases;
}

TEST(CliAcceptBadInput, RefusedByNameWithNothingOnStdout) {
  const std::vector<bad_case> cases = bad_cases();
  EXPECT_GE(cases.size(), 20u);
  for (const bad_case& c : cases) {
    SCOPED_TRACE(to_json(c.input));
    const cli_result r = run_accept_cli(c.input);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    const std::string prefix = "specgraph: error: " + c.field_and_value;
    EXPECT_EQ(r.err.substr(0, prefix.size()), prefix) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // one line
  }
}

TEST(CliAcceptBadInput, NotJson) {
  for (const char* text : {"", "[1,2]", "{\"page_size\":1,"}) {
    const cli_result r = run_accept_cli(std::string(text));
    EXPECT_EQ(r.code, 2) << text;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("specgraph: error: ", 0), 0u) << r.err;
  }
}

}  // namespace
}  // namespace specgraph::tools
