// `specgraph metadata accept`: one round after verify as JSON (docs/round-cli.md): the round
// spec's worked examples E1..E3 verbatim, every output field; an idle rank, a padded bucket and
// B = 0; finished requests by stop token and by budget. The expected outputs are written out by
// hand from the spec's numbers (sections 3-7 and 11), never computed by the library.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/cli_accept_support.hpp"

namespace specgraph::tools {
namespace {

TEST(CliAccept, E1ChainStopToken) {
  const cli_result r = run_accept_cli(e1());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, e1_output);
}

TEST(CliAccept, E2TreeWithAPaddedRow) {
  const cli_result r = run_accept_cli(e2());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"accepted_nodes\":[[0,1,3],[]],\"accept_length\":[2,0],\"accept_index\":[[0,1,3],"
            "[-1,-1,-1]],\"predict\":[[11,12,0,30],[0,0,0,0]],\"bonus_token\":[30,0],"
            "\"output_token\":[[11,12,30],[]],\"new_seq_len\":[9,1],\"kv_moves\":[[108,109]],"
            "\"extend\":{\"input_id\":[[11,12,30],[]],\"hidden_source\":[[0,1,3],[]],"
            "\"select_index\":[2,7]},\"finished\":[0,0],\"emit_len\":[3,0],\"slots_to_free\":[[],"
            "[]],\"allocated_len\":[17,0],\"pages_taken\":3,\"req_to_token_writes\":[[1,14,400],"
            "[1,15,401],[1,16,402]],\"next_round\":{\"active\":[1,0],\"seq_len\":[9,1],"
            "\"root_token\":[30,0],\"draft_position\":[[9,9],[0,0]],\"draft_out_cache_loc\":[[[109,"
            "110],[111,112]],[[0,0],[0,0]]],\"tail_copies\":[],\"verify_out_cache_loc\":[[109,110,"
            "111,112],[0,0,0,0]]},\"violations\":[]}\n");
}

TEST(CliAccept, E3PagedTreeWithPrefixTailCopy) {
  const cli_result r = run_accept_cli(e3());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"accepted_nodes\":[[0,1,3]],\"accept_length\":[2],\"accept_index\":[[0,1,3]],"
            "\"predict\":[[11,12,0,30]],\"bonus_token\":[30],\"output_token\":[[11,12,30]],"
            "\"new_seq_len\":[9],\"kv_moves\":[[8,9]],\"extend\":{\"input_id\":[[11,12,30]],"
            "\"hidden_source\":[[0,1,3]],\"select_index\":[2]},\"finished\":[0],\"emit_len\":[3],"
            "\"slots_to_free\":[[]],\"allocated_len\":[28],\"pages_taken\":1,"
            "\"req_to_token_writes\":[[1,24,52],[1,25,53],[1,26,54],[1,27,55]],\"next_round\":{"
            "\"active\":[1],\"seq_len\":[9],\"root_token\":[30],\"draft_position\":[[9,9]],"
            "\"draft_out_cache_loc\":[[[9,10],[29,30]]],\"tail_copies\":[[28,8]],"
            "\"verify_out_cache_loc\":[[9,10,11,28]]},\"violations\":[]}\n");
}

// E3's default reserve is R1 = 16; the same case with SGLang's 2 R1 = 32 takes
// ceil_page(9 + 32) = 44: 5 pages past position 24, a row of 44, a ring of exactly 5.
TEST(CliAccept, E3WithSglangsReserve) {
  fields f = e3();
  set(f, "reserve", "32");
  set(f, "req_to_token", "[" + zeros(44) + "," + e3_row(44) + "]");
  set(f, "free_pages", "[13,4,6,1,10]");
  const cli_result r = run_accept_cli(f);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"allocated_len\":[44],\"pages_taken\":5,\"req_to_token_writes\":[[1,24,"
                       "52],[1,25,53],[1,26,54],[1,27,55],[1,28,16],[1,29,17],[1,30,18],[1,31,"
                       "19],[1,32,24],[1,33,25],[1,34,26],[1,35,27],[1,36,4],[1,37,5],[1,38,6],"
                       "[1,39,7],[1,40,40],[1,41,41],[1,42,42],[1,43,43]],"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"violations\":[]}"), std::string::npos) << r.out;
}

// Every request padded (an idle rank): nothing accepted, committed, freed or allocated; every
// per-request list empty, select_index r * D + D - 1, the next round inactive.
TEST(CliAccept, RealBatchZero) {
  fields f = e1();
  set(f, "real_batch", "0");
  const cli_result r = run_accept_cli(f);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"accepted_nodes\":[[],[]],\"accept_length\":[0,0],\"accept_index\":[[-1,-1,-1,-1],"
            "[-1,-1,-1,-1]],\"predict\":[[0,0,0,0],[0,0,0,0]],\"bonus_token\":[0,0],"
            "\"output_token\":[[],[]],\"new_seq_len\":[5,3],\"kv_moves\":[],\"extend\":{"
            "\"input_id\":[[],[]],\"hidden_source\":[[],[]],\"select_index\":[3,7]},"
            "\"finished\":[0,0],\"emit_len\":[0,0],\"slots_to_free\":[[],[]],\"allocated_len\":[13,"
            "11],\"pages_taken\":0,\"req_to_token_writes\":[],\"next_round\":{\"active\":[0,0],"
            "\"seq_len\":[1,1],\"root_token\":[0,0],\"draft_position\":[[0],[0]],"
            "\"draft_out_cache_loc\":[[[0,0,0]],[[0,0,0]]],\"tail_copies\":[],"
            "\"verify_out_cache_loc\":[[0,0,0,0],[0,0,0,0]]},\"violations\":[]}\n");
}

// A padded row's inputs are not checked: a zero length and an allocated_len past the row.
TEST(CliAccept, PaddedRowInputsUnread) {
  fields f = e1();
  set(f, "real_batch", "1");
  set(f, "seq_len", "[5,0]");
  set(f, "allocated_len", "[13,99]");
  const cli_result r = run_accept_cli(f);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"accepted_nodes\":[[0,1,2],[]],\"accept_length\":[2,0],"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"new_seq_len\":[8,0],"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"finished\":[0,0],\"emit_len\":[3,0],\"slots_to_free\":[[],[]],"
                       "\"allocated_len\":[16,99],\"pages_taken\":3,"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"violations\":[]}"), std::string::npos) << r.out;
}

TEST(CliAccept, EmptyBucket) {
  const cli_result r =
      run_accept_cli(R"({"page_size":1,"topk":1,"num_steps":3,"num_draft_tokens":4,"seq_len":[],)"
                     R"("req_pool_index":[],"req_to_token":[[0]],"parent":[],"draft_token":[],)"
                     R"("target_predict":[],"allocated_len":[],"free_pages":[]})");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"accepted_nodes\":[],\"accept_length\":[],\"accept_index\":[],\"predict\":[],"
            "\"bonus_token\":[],\"output_token\":[],\"new_seq_len\":[],\"kv_moves\":[],"
            "\"extend\":{\"input_id\":[],\"hidden_source\":[],\"select_index\":[]},\"finished\":[],"
            "\"emit_len\":[],\"slots_to_free\":[],\"allocated_len\":[],\"pages_taken\":0,"
            "\"req_to_token_writes\":[],\"next_round\":{\"active\":[],\"seq_len\":[],"
            "\"root_token\":[],\"draft_position\":[],\"draft_out_cache_loc\":[],"
            "\"tail_copies\":[],\"verify_out_cache_loc\":[]},\"violations\":[]}\n");
}

// Request 0 reaches its budget of 2 (a = 3): emit 2, owned 5 + min(3, 3) = 8, positions 8..12
// freed; request 1 (budget 10, no stop token) goes on: max(11, 7 + 8) = 15, four pages.
TEST(CliAccept, FinishedByBudget) {
  fields f = e1();
  erase(f, "stop_token_ids");
  set(f, "max_new_tokens_left", "[2,10]");
  const cli_result r = run_accept_cli(f);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"finished\":[1,0],\"emit_len\":[2,4],\"slots_to_free\":[[108,109,110,"
                       "111,112],[]],\"allocated_len\":[13,15],\"pages_taken\":4,"
                       "\"req_to_token_writes\":[[2,11,300],[2,12,301],[2,13,302],[2,14,303]],"
                       "\"next_round\":{\"active\":[0,1],\"seq_len\":[1,7],\"root_token\":[0,3],"
                       "\"draft_position\":[[0],[7]],\"draft_out_cache_loc\":[[[0,0,0]],[[207,"
                       "208,209]]],\"tail_copies\":[],\"verify_out_cache_loc\":[[0,0,0,0],[207,"
                       "208,209,210]]},\"violations\":[]}\n"),
            std::string::npos)
      << r.out;
}

// A budget of exactly a finishes at the budget; a stop token past a budget of 1 is cut to 1.
TEST(CliAccept, StopTokenCappedByBudget) {
  fields f = e1();
  set(f, "max_new_tokens_left", "[3,1]");
  const cli_result r = run_accept_cli(f);
  ASSERT_EQ(r.code, 0) << r.err;
  // Request 0: a = 3 = m, finished, emit 3, owned 5 + min(3, 4) = 8. Request 1: stop at e = 1
  // capped at m = 1: emit 1, owned 3 + min(4, 2) = 5, positions 5..10 freed.
  EXPECT_NE(r.out.find("\"finished\":[1,1],\"emit_len\":[3,1],\"slots_to_free\":[[108,109,110,"
                       "111,112],[205,206,207,208,209,210]],\"allocated_len\":[13,11],"
                       "\"pages_taken\":0,\"req_to_token_writes\":[],\"next_round\":{"
                       "\"active\":[0,0],"),
            std::string::npos)
      << r.out;
}

// A stop token that is the bonus (the last output token) keeps every token.
TEST(CliAccept, StopTokenAtTheBonus) {
  fields f = e1();
  set(f, "stop_token_ids", "[42,9]");
  const cli_result r = run_accept_cli(f);
  ASSERT_EQ(r.code, 0) << r.err;
  // Request 0 stops on 9 at e = 2: emit 3, owned 5 + min(3, 4) = 8; request 1 goes on.
  EXPECT_NE(r.out.find("\"finished\":[1,0],\"emit_len\":[3,4],\"slots_to_free\":[[108,109,110,"
                       "111,112],[]],\"allocated_len\":[13,15],\"pages_taken\":4,"),
            std::string::npos)
      << r.out;
}

TEST(CliAccept, CommandDispatchAndHelp) {
  std::istringstream in(to_json(e1()));
  std::ostringstream out, err;
  EXPECT_EQ(metadata_command({"accept"}, in, out, err), 0) << err.str();
  EXPECT_EQ(out.str(), e1_output);
  std::istringstream none;
  std::ostringstream help, help_err;
  EXPECT_EQ(metadata_command({"accept", "--help"}, none, help, help_err), 0);
  EXPECT_NE(help.str().find("usage: specgraph metadata accept"), std::string::npos);
  EXPECT_NE(help.str().find("free_pages"), std::string::npos);
  std::ostringstream list, list_err;
  EXPECT_EQ(metadata_command({"--help"}, none, list, list_err), 0);
  EXPECT_NE(list.str().find("  accept "), std::string::npos);
  std::ostringstream extra, extra_err;
  EXPECT_EQ(metadata_command({"accept", "x"}, none, extra, extra_err), 2);
  EXPECT_EQ(extra.str(), "");
  EXPECT_NE(extra_err.str().find("metadata accept takes no arguments"), std::string::npos);
}

}  // namespace
}  // namespace specgraph::tools
