#include "tools/metadata_command.hpp"

#include <algorithm>
#include <cstdint>
#include <istream>
#include <iterator>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/expand_page_table.hpp"
#include "specgraph/error.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/metadata.hpp"
#include "tools/cli_text.hpp"
#include "tools/json.hpp"
#include "tools/metadata_io.hpp"

namespace specgraph::tools {
namespace {

// The table cells one `metadata expand` may print: the inspection tool is for crash dumps of a
// few rows, not for tables of gigabytes (which a declared capacity alone could demand).
constexpr std::int64_t max_output_cells = std::int64_t{1} << 24;

void check_output_size(std::int32_t capacity, std::int64_t rows) {
  if (capacity < 1)
    throw json_error("capacity: " + std::to_string(capacity) + " is below the minimum 1");
  // rows <= the input's size and capacity <= INT32_MAX: the product fits int64.
  if (rows * capacity > max_output_cells) {
    throw json_error("capacity: " + std::to_string(capacity) + " columns x " +
                     std::to_string(rows) + " rows exceeds the limit of " +
                     std::to_string(max_output_cells) + " table cells");
  }
}

constexpr const char* metadata_usage =
    "usage: specgraph metadata <command> < case.json\n"
    "  Runs one metadata kernel on a case given as a JSON object on stdin (a crash dump, a spec\n"
    "  vector) and prints the result as JSON; a store past the capacity is refused and listed.\n"
    "\n"
    "commands:\n"
    "  expand     the step's expand page table and cache seqlens (metadata expand --help)\n"
    "  fallback   the sparse fallback's evenly spaced indices (metadata fallback --help)\n"
    "  kv-indices the CSR draft-decode kv_indptr / kv_indices of every step (docs/csr.md)\n"
    "  verify     a draft tree's FA3 cascade tables and FlashInfer indices + mask "
    "(docs/verify.md)\n"
    "  extend     the draft-extend tokens, FA3 tables and CSR indices (docs/extend.md)\n"
    "  accept     a round after verify: acceptance, commit, next round (docs/round-cli.md)\n";

constexpr const char* expand_usage =
    "usage: specgraph metadata expand < case.json\n"
    "input: one JSON object with the fields\n"
    "  page_size      int, tokens per KV page, >= 1\n"
    "  topk           int, draft branches per request, >= 1\n"
    "  decode_length  int, d: the step's tokens per branch (step s: d = s + 1)\n"
    "  slots_read     int, slots of each cache_loc row the kernel reads (default decode_length)\n"
    "  last_page_len  [batch] ints, tokens in each request's last prefix page, in [0, page_size)\n"
    "  cache_loc      [batch * topk] rows of equal width: each branch's KV slots (int64 >= 0)\n"
    "  capacity       int, columns of the page table the case writes into, >= 1\n"
    "output: {\"page_table\": [rows][capacity], \"cache_seqlen\": [rows], \"violations\": [...]}\n"
    "example: {\"page_size\":4,\"topk\":2,\"decode_length\":1,\"slots_read\":2,\n"
    "          \"last_page_len\":[3],\"cache_loc\":[[23,24],[31,32]],\"capacity\":2}\n";

constexpr const char* fallback_usage =
    "usage: specgraph metadata fallback < case.json\n"
    "input: one JSON object with the fields\n"
    "  seq_len    int, the sequence length the indices cover, in [0, 2^30]\n"
    "  max_count  int, the most indices to produce, in [0, 2^24]\n"
    "  capacity   int, slots of the index buffer, in [1, 2^24]\n"
    "output: {\"indices\": [...], \"violations\": [...]}\n"
    "example: {\"seq_len\":48,\"max_count\":4,\"capacity\":4} gives [0,12,24,36]\n";

constexpr const char* kv_indices_usage =
    "usage: specgraph metadata kv-indices < case.json\n"
    "input: one JSON object with the fields (docs/csr.md)\n"
    "  page_size, topk, num_steps  ints >= 1\n"
    "  seq_len          [batch] ints >= 0, committed tokens per request\n"
    "  req_pool_index   [batch] ints, each request's row of req_to_token\n"
    "  req_to_token     rows of equal width: token slots (or page ids with entry_page_size > 1)\n"
    "  entry_page_size  int, positions per req_to_token entry (default 1)\n"
    "  window, sink     ints, the draft attention window and its sink tokens (default 0: off)\n"
    "  capacity         [num_steps] ints, entries each step may store (default: what it uses)\n"
    "output: {\"kv_indptr\": [num_steps][N + 1], \"kv_indices\": [num_steps][...], "
    "\"violations\": [...]}\n";

constexpr const char* verify_usage =
    "usage: specgraph metadata verify < case.json\n"
    "input: one JSON object with the fields (docs/verify.md)\n"
    "  page_size, num_draft_tokens  ints >= 1 (num_draft_tokens = D, the tree size)\n"
    "  seq_len          [batch] ints >= 1, committed tokens per request WITHOUT the D verify "
    "tokens\n"
    "  req_pool_index   [batch] ints, each request's row of req_to_token\n"
    "  req_to_token     rows of equal width >= seq_len + D: token slots\n"
    "  custom_mask      0/1 ints, the tree mask in the engine's full layout (real requests only)\n"
    "  real_batch       int, requests that are not padding (default batch)\n"
    "  prefix_capacity, kv_indices_capacity, packed_mask_capacity  ints (default: what is used)\n"
    "output: {\"fa3\": {\"prefix\": {...}, \"expand\": {...}}, \"flashinfer\": {...}, "
    "\"violations\": [...]}\n";

constexpr const char* extend_usage =
    "usage: specgraph metadata extend < case.json\n"
    "input: one JSON object with the fields (docs/extend.md)\n"
    "  page_size, num_draft_tokens  ints >= 1 (num_draft_tokens = W, the verify window)\n"
    "  seq_len          [bs] ints >= 0, committed tokens per request BEFORE the window\n"
    "  accept_len       [bs] ints in [0, W], tokens verify accepted (the bonus token included)\n"
    "  req_pool_index   [bs] ints, each request's row of req_to_token\n"
    "  req_to_token     rows of equal width >= seq_len + W: token slots (row 0 backs padding)\n"
    "  bucket           int >= bs, the padded batch B (default bs)\n"
    "  page_table_capacity  int >= 1 (default: the widest row's ceil((seq_len + W) / ps))\n"
    "  triton_kv_capacity, flashinfer_kv_capacity  ints >= 0 (default: what is used)\n"
    "output: {\"tokens\": {...}, \"fa3\": {...}, \"triton\": {...}, \"flashinfer\": {...}, "
    "\"violations\": [...]}\n";

constexpr const char* accept_usage =
    "usage: specgraph metadata accept < case.json\n"
    "input: one JSON object with the fields (docs/round-cli.md)\n"
    "  page_size, topk, num_steps, num_draft_tokens  ints >= 1 (num_draft_tokens = D)\n"
    "  seq_len          [bs] ints, committed tokens per request before the round (>= 1 if real)\n"
    "  req_pool_index   [bs] ints, each request's row of req_to_token\n"
    "  req_to_token     rows of equal width W: token slots (row 0 backs padding)\n"
    "  parent           [bs][D] ints, the tree: parent[0] = -1, parent[i] in [-1, i)\n"
    "  draft_token      [bs][D] ints, node i's draft token (node 0: the previous bonus)\n"
    "  target_predict   [bs][D] ints, the target's argmax at node i\n"
    "  allocated_len    [bs] ints, backed positions: seq_len + D <= allocated_len <= W if real\n"
    "  free_pages       ints >= 0, the ring of free pages from its head (slots at page_size 1)\n"
    "  reserve          int >= 0, positions kept allocated past seq_len (default R1)\n"
    "  real_batch       int in [0, bs], requests that are not padding (default bs)\n"
    "  stop_token_ids   ints, tokens that finish a request (default none)\n"
    "  max_new_tokens_left  [bs] ints >= 1, each request's remaining budget (default none)\n"
    "output: {\"accepted_nodes\", \"accept_length\", ..., \"next_round\": {...}, "
    "\"violations\": [...]}\n";

bool is_help(const std::string& arg) {
  return arg == "--help" || arg == "-h" || arg == "help";
}

}  // namespace

int metadata_command(const std::vector<std::string>& args, std::istream& in, std::ostream& out,
                     std::ostream& err) {
  if (args.empty()) {  // like `specgraph` alone: the usage, exit status 2
    out << metadata_usage;
    return 2;
  }
  if (is_help(args[0])) {
    out << metadata_usage;
    return 0;
  }
  const bool expand = args[0] == "expand", fallback = args[0] == "fallback";
  const bool kv = args[0] == "kv-indices", verify = args[0] == "verify";
  const bool extend = args[0] == "extend", accept = args[0] == "accept";
  if (!expand && !fallback && !kv && !verify && !extend && !accept) {
    err << "specgraph: error: unknown metadata command " << echo(args[0])
        << " (commands: expand, fallback, kv-indices, verify, extend, accept; run 'specgraph "
           "metadata "
           "--help')\n";
    return 2;
  }
  if (args.size() > 1) {
    if (args.size() == 2 && is_help(args[1])) {
      out << (expand   ? expand_usage
              : kv     ? kv_indices_usage
              : verify ? verify_usage
              : extend ? extend_usage
              : accept ? accept_usage
                       : fallback_usage);
      return 0;
    }
    err << "specgraph: error: metadata " << args[0] << " takes no arguments (got " << echo(args[1])
        << "); it reads the case from stdin (run 'specgraph metadata " << args[0] << " --help')\n";
    return 2;
  }
  if (kv) return metadata_kv_indices(in, out, err);
  if (verify) return metadata_verify(in, out, err);
  if (extend) return metadata_extend(in, out, err);
  if (accept) return metadata_accept(in, out, err);
  return expand ? metadata_expand(in, out, err) : metadata_fallback(in, out, err);
}

int metadata_expand(std::istream& in, std::ostream& out, std::ostream& err) {
  return guarded(err, [&] {
    const json doc = read_object(in);
    expect_only_keys(doc, {"page_size", "topk", "decode_length", "slots_read", "last_page_len",
                           "cache_loc", "capacity"});
    expand_params p;
    p.page_size = as_int32(required(doc, "page_size"), "page_size");
    p.topk = as_int32(required(doc, "topk"), "topk");
    p.decode_length = as_int32(required(doc, "decode_length"), "decode_length");
    p.capacity = as_int32(required(doc, "capacity"), "capacity");
    const json* slots_read = member(doc, "slots_read");
    p.slots_read = slots_read ? as_int32(*slots_read, "slots_read") : p.decode_length;

    // Fields are named variables (not temporaries) so no reference below binds to the result of
    // a call that was given a temporary (GCC 13's -Wdangling-reference).
    const std::string lpl_field = "last_page_len", rows_field = "cache_loc";
    std::vector<std::int32_t> last_page_len;
    const json& lpl_value = required(doc, lpl_field);
    const std::vector<json>& lpl = as_array(lpl_value, lpl_field);
    for (std::size_t i = 0; i < lpl.size(); ++i) {
      last_page_len.push_back(as_int32(lpl[i], "last_page_len[" + std::to_string(i) + "]"));
    }
    if (last_page_len.empty()) throw json_error("last_page_len: empty (batch must be >= 1)");
    p.batch = static_cast<std::int32_t>(last_page_len.size());

    const json& rows_value = required(doc, rows_field);
    const std::vector<json>& rows = as_array(rows_value, rows_field);
    const std::int64_t want_rows = static_cast<std::int64_t>(p.batch) * std::max(p.topk, 1);
    if (static_cast<std::int64_t>(rows.size()) != want_rows) {
      throw json_error("cache_loc: " + std::to_string(rows.size()) +
                       " rows, expected batch * topk = " + std::to_string(want_rows));
    }
    std::vector<std::int64_t> cache_loc;
    std::size_t width = 0;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const std::string field = "cache_loc[" + std::to_string(r) + "]";
      const std::vector<json>& row = as_array(rows[r], field);
      if (r == 0) width = row.size();
      if (row.size() != width) {
        throw json_error(field + ": " + std::to_string(row.size()) +
                         " slots, expected the width of row 0, " + std::to_string(width));
      }
      for (std::size_t j = 0; j < row.size(); ++j) {
        cache_loc.push_back(as_int(row[j], field + "[" + std::to_string(j) + "]"));
      }
    }
    p.cache_loc_stride = static_cast<std::int64_t>(width);
    p.cache_loc = cache_loc.data();
    p.last_page_len = last_page_len.data();

    // Validate the parameters before sizing anything by them (pointers are set below).
    check_output_size(p.capacity, want_rows);
    const std::size_t n_rows = static_cast<std::size_t>(want_rows);
    std::vector<std::int32_t> table(n_rows * static_cast<std::size_t>(p.capacity), 0);
    std::vector<std::int32_t> cache_seqlen(n_rows, 0);
    guard_word guard{};
    p.page_table = table.data();
    p.page_table_stride = p.capacity;
    p.cache_seqlen = cache_seqlen.data();
    p.guard = &guard;
    validate_contents_host(p);  // throws naming the field; nothing written

    // Row by row with a guard each, so every violating row is listed (a kernel launch records
    // only the first violation in detail).
    std::vector<guard_word> row_guards(n_rows, guard_word{});
    for (std::size_t r = 0; r < n_rows; ++r) {
      expand_params row_params = p;
      row_params.guard = &row_guards[r];
      kernels::expand_page_table_kernel::run_row(row_params, static_cast<std::int64_t>(r));
    }

    out << "{\"page_table\":[";
    for (std::size_t r = 0; r < n_rows; ++r) {
      out << (r ? "," : "");
      write_list(out, table.data() + r * static_cast<std::size_t>(p.capacity),
                 static_cast<std::size_t>(p.capacity));
    }
    out << "],\"cache_seqlen\":";
    write_list(out, cache_seqlen.data(), n_rows);
    out << ",\"violations\":[";
    bool first = true;
    for (const guard_word& g : row_guards) {
      if (g.violations == 0) continue;
      out << (first ? "" : ",");
      write_violation(out, g);
      first = false;
    }
    out << "]}\n";
  });
}

int metadata_fallback(std::istream& in, std::ostream& out, std::ostream& err) {
  return guarded(err, [&] {
    const json doc = read_object(in);
    expect_only_keys(doc, {"seq_len", "max_count", "capacity"});
    const std::int32_t seq_len = as_int32(required(doc, "seq_len"), "seq_len");
    const std::int32_t max_count = as_int32(required(doc, "max_count"), "max_count");
    const std::int32_t capacity = as_int32(required(doc, "capacity"), "capacity");
    // Sized by what can be written, min(capacity, max_count, seq_len), never by the declared
    // capacity alone; the ranges themselves are checked by sparse_fallback_host.
    const std::int32_t most = std::max(1, std::min({capacity, max_count, seq_len}));
    std::vector<std::int32_t> indices(static_cast<std::size_t>(most), 0);
    guard_word guard{};
    const std::int32_t n =
        sparse_fallback_host(seq_len, max_count, indices.data(), capacity, &guard);
    out << "{\"indices\":";
    write_list(out, indices.data(), static_cast<std::size_t>(n));
    out << ",\"violations\":[";
    if (guard.violations != 0) write_violation(out, guard);
    out << "]}\n";
  });
}

}  // namespace specgraph::tools
