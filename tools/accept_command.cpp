// `specgraph metadata accept`: the bookkeeping of one speculative round after the target's verify
// forward (docs/round-cli.md), given as JSON: greedy acceptance, the commit and the next round's
// inputs, composed on the host executor in that order over tables sized by the input
// (accept_round.cpp). This file reads and checks the case, every check before anything runs.
#include <algorithm>
#include <cstdint>
#include <istream>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "tools/accept_command.hpp"
#include "tools/json.hpp"
#include "tools/metadata_command.hpp"
#include "tools/metadata_io.hpp"

namespace specgraph::tools {
namespace {

// The cells one `metadata accept` may print: a crash dump's few requests, not an engine's arena.
constexpr std::int64_t max_output_cells = std::int64_t{1} << 24;
// The largest reserve (next_round_params::reserve).
constexpr std::int32_t max_reserve = 1 << 28;

std::string at(std::size_t r) {
  return "[" + std::to_string(r) + "]";
}

std::int32_t scalar_in(const json& doc, const std::string& field, std::int64_t hi,
                       const std::string& hi_name) {
  const std::int32_t v = as_int32(required(doc, field), field);
  if (v < 1 || v > hi) {
    throw json_error(field + ": " + std::to_string(v) + " is outside [1, " + hi_name + " " +
                     std::to_string(hi) + "]");
  }
  return v;
}

// A per-request list of exactly bs entries.
std::vector<std::int32_t> per_request(const json& doc, const std::string& field, std::size_t bs) {
  std::vector<std::int32_t> v = int32_items(doc, field);
  if (v.size() != bs) {
    throw json_error(field + ": " + std::to_string(v.size()) +
                     " entries, expected one per request (seq_len has " + std::to_string(bs) + ")");
  }
  return v;
}

// A [bs][D] input, flattened row by row.
std::vector<std::int32_t> tree_rows(const json& doc, const std::string& field, std::size_t bs,
                                    std::int32_t d) {
  const std::vector<json>& rows = as_array(required(doc, field), field);
  if (rows.size() != bs) {
    throw json_error(field + ": " + std::to_string(rows.size()) +
                     " rows, expected one per request (seq_len has " + std::to_string(bs) + ")");
  }
  std::vector<std::int32_t> flat;
  for (std::size_t r = 0; r < bs; ++r) {
    const std::string row_field = field + at(r);
    const std::vector<json>& row = as_array(rows[r], row_field);
    if (row.size() != static_cast<std::size_t>(d)) {
      throw json_error(row_field + ": " + std::to_string(row.size()) +
                       " nodes, expected num_draft_tokens " + std::to_string(d));
    }
    for (std::size_t i = 0; i < row.size(); ++i)
      flat.push_back(as_int32(row[i], row_field + at(i)));
  }
  return flat;
}

// parent[0] = -1, parent[i] in [-1, i), every node reachable from the root at depth <= num_steps.
void check_tree(const accept_case& c, std::size_t r) {
  const auto d = static_cast<std::size_t>(c.draft_tokens);
  const std::int32_t* parent = c.parent.data() + r * d;
  const std::string field = "parent" + at(r);
  if (parent[0] != -1) {
    throw json_error(field + "[0]: " + std::to_string(parent[0]) + " is not -1 (the root)");
  }
  std::vector<std::int32_t> depth(d, -1);  // -1: unreachable (an orphan or below one)
  depth[0] = 0;
  for (std::size_t i = 1; i < d; ++i) {
    if (parent[i] < -1 || parent[i] >= static_cast<std::int32_t>(i)) {
      throw json_error(field + at(i) + ": " + std::to_string(parent[i]) + " is outside [-1, " +
                       std::to_string(i) + ")");
    }
    if (parent[i] >= 0 && depth[static_cast<std::size_t>(parent[i])] >= 0) {
      depth[i] = depth[static_cast<std::size_t>(parent[i])] + 1;  // <= i < 2^10
      if (depth[i] > c.num_steps) {
        throw json_error(field + at(i) + ": node " + std::to_string(i) + " is at depth " +
                         std::to_string(depth[i]) + ", deeper than num_steps " +
                         std::to_string(c.num_steps));
      }
    }
  }
}

void read_req_to_token(const json& doc, accept_case& c) {
  const std::vector<json>& rows = as_array(required(doc, "req_to_token"), "req_to_token");
  if (rows.empty()) {
    throw json_error("req_to_token: empty (at least 1 row: pool row 0 backs padded rows)");
  }
  if (rows.size() > static_cast<std::size_t>(limits::max_pool_rows)) {
    throw json_error("req_to_token: " + std::to_string(rows.size()) +
                     " rows is above the maximum limits::max_pool_rows " +
                     std::to_string(limits::max_pool_rows));
  }
  std::size_t width = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::string field = "req_to_token" + at(r);
    const std::vector<json>& row = as_array(rows[r], field);
    if (r == 0) width = row.size();
    if (row.size() != width || width == 0) {
      throw json_error(field + ": " + std::to_string(row.size()) +
                       " entries, expected the width of row 0, " + std::to_string(width) +
                       " (>= 1)");
    }
    for (std::size_t j = 0; j < row.size(); ++j) {
      const std::string cell = field + at(j);
      const std::int64_t v = as_int(row[j], cell);
      if (v < 0 || v > std::numeric_limits<std::int32_t>::max()) {
        throw json_error(cell + ": " + std::to_string(v) + " is outside [0, 2^31)");
      }
      c.req_to_token.push_back(static_cast<std::int32_t>(v));
    }
  }
  c.pool_rows = static_cast<std::int32_t>(rows.size());
  c.width = static_cast<std::int64_t>(width);
}

// The real rows' lengths, budgets and page runs (section 10's "for real rows").
void check_real_row(const accept_case& c, std::size_t r) {
  const std::int64_t s = c.seq_len[r], alloc = c.allocated_len[r];
  if (s < 1 || s > limits::max_context_len) {
    throw json_error("seq_len" + at(r) + ": " + std::to_string(s) +
                     " is outside [1, limits::max_context_len " +
                     std::to_string(limits::max_context_len) + "]");
  }
  if (alloc < s + c.draft_tokens) {
    throw json_error("allocated_len" + at(r) + ": " + std::to_string(alloc) +
                     " is below seq_len + num_draft_tokens " + std::to_string(s + c.draft_tokens) +
                     " (the verify window is allocated)");
  }
  if (alloc > c.width) {
    throw json_error("allocated_len" + at(r) + ": " + std::to_string(alloc) +
                     " is above the req_to_token row width " + std::to_string(c.width));
  }
  if (alloc % c.page_size != 0) {
    const std::int64_t row = c.req_pool_index[r];
    const std::int64_t slot = c.req_to_token[static_cast<std::size_t>(row * c.width + alloc - 1)];
    if ((slot + 1) % c.page_size != alloc % c.page_size) {
      throw json_error("allocated_len" + at(r) + ": " + std::to_string(alloc) +
                       " ends a partial page but req_to_token[" + std::to_string(row) + "][" +
                       std::to_string(alloc - 1) + "] = " + std::to_string(slot) +
                       " is not at offset " + std::to_string((alloc - 1) % c.page_size) +
                       " of its page (page_size " + std::to_string(c.page_size) + ")");
    }
  }
  if (c.has_budget && c.max_new_tokens_left[r] < 1) {
    throw json_error("max_new_tokens_left" + at(r) + ": " +
                     std::to_string(c.max_new_tokens_left[r]) +
                     " is below the minimum 1 (a real request still running)");
  }
}

// The output cells a case prints, bounded before any buffer is sized.
void check_output_size(const accept_case& c) {
  const std::int64_t bs = c.batch, d = c.draft_tokens, k = c.topk, ps = c.page_size;
  if (bs * k * c.num_steps > max_output_cells) {
    throw json_error("topk: " + std::to_string(k) + " x num_steps " + std::to_string(c.num_steps) +
                     " x " + std::to_string(bs) + " requests draft slots exceeds the limit of " +
                     std::to_string(max_output_cells));
  }
  if (k > 1 && ps > 1 && bs * (k - 1) * (ps - 1) * 2 > max_output_cells) {
    throw json_error("page_size: " + std::to_string(ps) + " with topk " + std::to_string(k) +
                     " x " + std::to_string(bs) +
                     " requests prefix-tail copy cells exceeds the limit of " +
                     std::to_string(max_output_cells));
  }
  if (bs * (c.num_steps + 1) > max_output_cells || bs * d > max_output_cells) {
    throw json_error("seq_len: " + std::to_string(bs) + " requests x num_steps + 1 " +
                     std::to_string(c.num_steps + 1) + " accept_index cells exceeds the limit of " +
                     std::to_string(max_output_cells));
  }
}

}  // namespace

accept_case read_accept_case(const json& doc) {
  expect_only_keys(
      doc, {"page_size", "topk", "num_steps", "num_draft_tokens", "seq_len", "req_pool_index",
            "req_to_token", "parent", "draft_token", "target_predict", "allocated_len",
            "free_pages", "reserve", "real_batch", "stop_token_ids", "max_new_tokens_left"});
  accept_case c;
  c.page_size = scalar_in(doc, "page_size", limits::max_page_size, "limits::max_page_size");
  c.topk = scalar_in(doc, "topk", limits::max_topk, "limits::max_topk");
  c.num_steps = scalar_in(doc, "num_steps", max_accept_steps, "max_accept_steps");
  c.draft_tokens = scalar_in(doc, "num_draft_tokens", max_accept_tokens, "max_accept_tokens");
  c.seq_len = int32_items(doc, "seq_len");
  if (c.seq_len.size() > static_cast<std::size_t>(limits::max_batch)) {
    throw json_error("seq_len: " + std::to_string(c.seq_len.size()) +
                     " requests is above the maximum limits::max_batch " +
                     std::to_string(limits::max_batch));
  }
  const std::size_t bs = c.seq_len.size();
  c.batch = static_cast<std::int32_t>(bs);
  c.req_pool_index = per_request(doc, "req_pool_index", bs);
  c.allocated_len = per_request(doc, "allocated_len", bs);
  c.parent = tree_rows(doc, "parent", bs, c.draft_tokens);
  c.draft_token = tree_rows(doc, "draft_token", bs, c.draft_tokens);
  c.target_predict = tree_rows(doc, "target_predict", bs, c.draft_tokens);
  if (member(doc, "max_new_tokens_left") != nullptr) {
    c.has_budget = true;
    c.max_new_tokens_left = per_request(doc, "max_new_tokens_left", bs);
  }
  c.real_batch = c.batch;
  if (const json* v = member(doc, "real_batch")) {
    c.real_batch = as_int32(*v, "real_batch");
    if (c.real_batch < 0 || c.real_batch > c.batch) {  // 0: an idle rank, every row padding
      throw json_error("real_batch: " + std::to_string(c.real_batch) + " is outside [0, bs " +
                       std::to_string(c.batch) + "]");
    }
  }
  if (const json* v = member(doc, "reserve")) {
    c.reserve = as_int32(*v, "reserve");
    if (c.reserve < 0 || c.reserve > max_reserve) {
      throw json_error("reserve: " + std::to_string(c.reserve) + " is outside [0, 2^28]");
    }
  } else {  // R1 (int64): up to about 2^30 at the page-size and topk limits
    const std::int64_t r1 = next_round_reserve(c.topk, c.num_steps, c.draft_tokens, c.page_size);
    if (r1 > max_reserve) {
      throw json_error("reserve: the default R1 " + std::to_string(r1) +
                       " of page_size, topk and num_steps is above the maximum 2^28");
    }
    c.reserve = static_cast<std::int32_t>(r1);
  }
  read_req_to_token(doc, c);
  c.free_pages = int32_items(doc, "free_pages");
  for (std::size_t i = 0; i < c.free_pages.size(); ++i) {
    // The page's last slot, page * ps + ps - 1, must be an int32 slot of req_to_token.
    const std::int64_t last = std::int64_t{c.free_pages[i]} * c.page_size + c.page_size - 1;
    if (c.free_pages[i] < 0 || last > std::numeric_limits<std::int32_t>::max()) {
      throw json_error("free_pages" + at(i) + ": " + std::to_string(c.free_pages[i]) +
                       " is outside [0, 2^31 / page_size " + std::to_string(c.page_size) +
                       ") (its slots are int32)");
    }
  }
  if (member(doc, "stop_token_ids") != nullptr)
    c.stop_token_ids = int32_items(doc, "stop_token_ids");
  if (c.stop_token_ids.size() > static_cast<std::size_t>(max_stop_tokens)) {
    throw json_error("stop_token_ids: " + std::to_string(c.stop_token_ids.size()) +
                     " ids is above the maximum max_stop_tokens " +
                     std::to_string(max_stop_tokens));
  }
  for (std::size_t r = 0; r < bs; ++r) check_tree(c, r);
  for (std::size_t r = 0; r < bs; ++r) {
    if (c.req_pool_index[r] < 0 || c.req_pool_index[r] >= c.pool_rows) {
      throw json_error("req_pool_index" + at(r) + ": " + std::to_string(c.req_pool_index[r]) +
                       " is outside [0, pool_rows " + std::to_string(c.pool_rows) + ")");
    }
  }
  for (std::size_t r = 0; r < static_cast<std::size_t>(c.real_batch); ++r) check_real_row(c, r);
  check_output_size(c);
  return c;
}

int metadata_accept(std::istream& in, std::ostream& out, std::ostream& err) {
  return guarded(err, [&] {
    const json doc = read_object(in);
    const accept_case c = read_accept_case(doc);
    const accept_round round = run_accept_round(c);  // the library checks everything again
    write_accept_round(out, c, round);
  });
}

}  // namespace specgraph::tools
