// The round spec's worked examples E1..E3 (section 11) as `metadata accept` inputs, a field list
// the tests edit one field at a time, and the runner (tests/cli_accept_test.cpp,
// tests/cli_accept_bad_input_test.cpp).
#pragma once

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tools/metadata_command.hpp"

namespace specgraph::tools {

struct cli_result {
  int code;
  std::string out, err;
};

inline cli_result run_accept_cli(const std::string& input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  const int code = metadata_accept(in, out, err);
  return {code, out.str(), err.str()};
}

// A JSON object's members in order, as key and literal value.
using fields = std::vector<std::pair<std::string, std::string>>;

inline std::string to_json(const fields& f) {
  std::string s = "{";
  for (const auto& [key, value] : f) s += (s.size() > 1 ? "," : "") + ("\"" + key + "\":" + value);
  return s + "}";
}
inline cli_result run_accept_cli(const fields& f) {
  return run_accept_cli(to_json(f));
}
inline void set(fields& f, const std::string& key, const std::string& value) {
  for (auto& [k, v] : f) {
    if (k == key) {
      v = value;
      return;
    }
  }
  f.emplace_back(key, value);
}
inline void erase(fields& f, const std::string& key) {
  for (auto it = f.begin(); it != f.end(); ++it) {
    if (it->first == key) {
      f.erase(it);
      return;
    }
  }
}

// "[base + 0, ..., base + n - 1, 0, ..., 0]", width cells.
inline std::string slots_row(int base, int n, int width) {
  std::string s = "[";
  for (int p = 0; p < width; ++p) s += (p ? "," : "") + std::to_string(p < n ? base + p : 0);
  return s + "]";
}
inline std::string zeros(int width) {
  return slots_row(0, 0, width);
}

// E1: topk 1 chains, ps 1, num_steps 3, D 4, seq_len [5, 3] on pool rows 1 and 2
// (req_to_token[1][p] = 100 + p for p < 13, req_to_token[2][p] = 200 + p for p < 11, rows 16
// wide: request 0 allocates to 16), SGLang's reserve 8, ring 300..304, stop token 6.
inline fields e1(int width = 16) {
  return {{"page_size", "1"},
          {"topk", "1"},
          {"num_steps", "3"},
          {"num_draft_tokens", "4"},
          {"seq_len", "[5,3]"},
          {"req_pool_index", "[1,2]"},
          {"req_to_token", "[" + zeros(width) + "," + slots_row(100, 13, width) + "," +
                               slots_row(200, 11, width) + "]"},
          {"parent", "[[-1,0,1,2],[-1,0,1,2]]"},
          {"draft_token", "[[7,11,12,13],[4,5,6,8]]"},
          {"target_predict", "[[11,12,9,0],[5,6,8,3]]"},
          {"allocated_len", "[13,11]"},
          {"free_pages", "[300,301,302,303,304]"},
          {"reserve", "8"},
          {"stop_token_ids", "[6]"}};
}

inline const std::string e1_output =
    "{\"accepted_nodes\":[[0,1,2],[0,1,2,3]],\"accept_length\":[2,3],\"accept_index\":[[0,1,2,"
    "-1],[4,5,6,7]],\"predict\":[[11,12,9,0],[5,6,8,3]],\"bonus_token\":[9,3],\"output_token\":"
    "[[11,12,9],[5,6,8,3]],\"new_seq_len\":[8,7],\"kv_moves\":[],\"extend\":{\"input_id\":[[11,"
    "12,9],[5,6,8,3]],\"hidden_source\":[[0,1,2],[4,5,6,7]],\"select_index\":[2,7]},"
    "\"finished\":[0,1],\"emit_len\":[3,2],\"slots_to_free\":[[],[206,207,208,209,210]],"
    "\"allocated_len\":[16,11],\"pages_taken\":3,\"req_to_token_writes\":[[1,13,300],[1,14,"
    "301],[1,15,302]],\"next_round\":{\"active\":[1,0],\"seq_len\":[8,1],\"root_token\":[9,0],"
    "\"draft_position\":[[8],[0]],\"draft_out_cache_loc\":[[[108,109,110]],[[0,0,0]]],"
    "\"tail_copies\":[],\"verify_out_cache_loc\":[[108,109,110,111],[0,0,0,0]]},"
    "\"violations\":[]}\n";

// E2: topk 2, ps 1, num_steps 2, D 4, seq_len [6, 1] with row 1 padded (real_batch 1), pool
// row 1 with 100 + p for p < 14 (17 wide: the allocation reaches 17), SGLang's reserve 8, ring
// 400..403; tree parent [-1, 0, 0, 1], tokens 7 11 21 12, targets 11 12 5 30.
inline fields e2(int width = 17) {
  return {{"page_size", "1"},
          {"topk", "2"},
          {"num_steps", "2"},
          {"num_draft_tokens", "4"},
          {"seq_len", "[6,1]"},
          {"req_pool_index", "[1,0]"},
          {"req_to_token", "[" + zeros(width) + "," + slots_row(100, 14, width) + "]"},
          {"parent", "[[-1,0,0,1],[-1,0,0,1]]"},
          {"draft_token", "[[7,11,21,12],[0,0,0,0]]"},
          {"target_predict", "[[11,12,5,30],[0,0,0,0]]"},
          {"allocated_len", "[14,0]"},
          {"free_pages", "[400,401,402,403]"},
          {"reserve", "8"},
          {"real_batch", "1"}};
}

// E3's row: pages 5 9 2 7 3 11 back positions 0..23 (position 4q + o on page P is slot 4P + o).
inline std::string e3_row(int width) {
  std::string s = "[";
  const int pages[] = {5, 9, 2, 7, 3, 11};
  for (int p = 0; p < width; ++p)
    s += (p ? "," : "") + std::to_string(p < 24 ? 4 * pages[p / 4] + p % 4 : 0);
  return s + "]";
}

// E3: E2's request at ps 4 (pool row 1, 28 wide: the allocation reaches 28), allocated_len 24,
// the default reserve R1 = 16, ring 13 4 6.
inline fields e3() {
  return {{"page_size", "4"},
          {"topk", "2"},
          {"num_steps", "2"},
          {"num_draft_tokens", "4"},
          {"seq_len", "[6]"},
          {"req_pool_index", "[1]"},
          {"req_to_token", "[" + zeros(28) + "," + e3_row(28) + "]"},
          {"parent", "[[-1,0,0,1]]"},
          {"draft_token", "[[7,11,21,12]]"},
          {"target_predict", "[[11,12,5,30]]"},
          {"allocated_len", "[24]"},
          {"free_pages", "[13,4,6]"}};
}

}  // namespace specgraph::tools
