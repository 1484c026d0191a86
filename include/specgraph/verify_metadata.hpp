// Target-verify metadata of a draft tree (docs/verify.md): the target model checks a tree of D
// draft tokens per request in one forward. Two layouts are written from the same inputs:
//   * FA3 cascade: a prefix table (paged, one sequence per request, D queries) and an expand table
//     (one sequence per query token, token slots, the attended slots packed to the front);
//   * FlashInfer: one paged prefill at page size 1 with a custom mask: qo/kv indptrs, kv_indices
//     over prefix and verify tokens, and the tree mask bit-packed per request.
//
// Launchers follow metadata.hpp's rules: every scalar parameter is validated on the host first
// (invalid_argument naming the field, its value and the limit; nothing launched or written); the
// kernels are enqueued on the executor's stream (asynchronous, no synchronisation, no allocation:
// capture-safe); input contents in device memory are checked by the kernels (a request with a bad
// value is recorded as bad_input in guard[0] and gets empty sequences); every store into a buffer
// whose size the caller chooses is checked against its capacity and a refused store is recorded.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "specgraph/guard.hpp"

namespace specgraph {

class executor;

// The tree size D (root included): verify_params::draft_tokens is in [1, max_draft_tokens].
inline constexpr std::int32_t max_draft_tokens = 1 << 10;

// The verify tables: where the two layouts are written, one type for the kernels' parameters
// (verify_params), the arena's section (verify_view, buffers.hpp), the engine's own buffers
// (verify_engine_outputs, verify_ops.hpp) and Python (specgraph.VerifyFa3 / VerifyFlashInfer,
// whose fields are verify_field_names). A layout is all of its pointers or none
// (verify_layouts_of, the one rule). Sizes for `batch` requests and D verify tokens:
struct verify_tables {
  // FA3 cascade: eight pointers.
  std::int32_t* prefix_page_table = nullptr;    // [batch][prefix_stride]
  std::int64_t prefix_stride = 0;               // >= prefix_capacity
  std::int32_t prefix_capacity = 0;             // columns written per row (exact: ceil(M / ps))
  std::int32_t* prefix_cache_seqlen = nullptr;  // [batch]
  std::int32_t* prefix_cu_seqlens_q = nullptr;  // [batch + 1]
  std::int32_t* prefix_cu_seqlens_k = nullptr;  // [batch + 1]
  std::int32_t* expand_page_table = nullptr;    // [batch * D][expand_stride]
  std::int64_t expand_stride = 0;               // >= D
  std::int32_t* expand_cache_seqlen = nullptr;  // [batch * D]
  std::int32_t* expand_cu_seqlens_q = nullptr;  // [batch * D + 1]
  std::int32_t* expand_cu_seqlens_k = nullptr;  // [batch * D + 1]
  // FlashInfer: seven pointers.
  std::int32_t* qo_indptr = nullptr;           // [batch + 1]
  std::int32_t* kv_indptr = nullptr;           // [batch + 1]
  std::int32_t* kv_indices = nullptr;          // [kv_indices_capacity]
  std::int64_t kv_indices_capacity = 0;        // elements (exact: batch * (M + D)), < 2^31
  std::int32_t* kv_last_page_len = nullptr;    // [batch]
  std::int32_t* mask_indptr = nullptr;         // [batch + 1]
  std::uint8_t* packed_mask = nullptr;         // [packed_mask_capacity]
  std::int64_t packed_mask_capacity = 0;       // bytes (exact: batch * ceil(D * (M + D) / 8))
  std::int32_t* packed_mask_indptr = nullptr;  // [batch + 1]
};

// The tables' buffers by index, in the order above (Python's field order): fa3's eight, then
// flashinfer's seven.
inline constexpr int verify_field_count = 15;
inline constexpr int verify_fa3_fields = 8;
inline constexpr const char* verify_field_names[verify_field_count] = {
    "prefix_page_table", "prefix_cache_seqlen", "prefix_cu_seqlens_q", "prefix_cu_seqlens_k",
    "expand_page_table", "expand_cache_seqlen", "expand_cu_seqlens_q", "expand_cu_seqlens_k",
    "qo_indptr",         "kv_indptr",           "kv_indices",          "kv_last_page_len",
    "mask_indptr",       "packed_mask",         "packed_mask_indptr"};
// Field i's buffer (null: not set); set_verify_field stores p there (a uint8_t* for the
// packed mask, int32_t* otherwise). Host and device.
void* verify_field(const verify_tables& t, int i) noexcept;
void set_verify_field(verify_tables& t, int i, void* p) noexcept;

// What field i needs (verify_params below: its batch, D, capacities and, for the formula, M and
// ps): a vector of rows cells, or (table) rows of cols cells at any stride >= cols (the prefix
// and expand page tables); uint8 cells for the packed mask (int32 otherwise), and the formula
// in words for messages. Host only.
struct verify_field_shape {
  std::int64_t rows = 0;
  std::int64_t cols = 0;  // tables only
  bool table = false;
  bool bytes = false;
  std::string formula;
};
struct verify_params;
verify_field_shape verify_shape_of(int i, const verify_params& p);

// The one all-or-none rule: which layouts t sets. A layout with some but not all of its pointers
// is refused (invalid_argument naming `prefix` + its first missing pointer, the count and the
// fix); nothing is written. Host only.
struct verify_layouts {
  bool fa3 = false;
  bool flashinfer = false;
};
verify_layouts verify_layouts_of(const verify_tables& t, const char* prefix = "");

struct verify_params : verify_tables {
  // req_to_token[pool_rows][req_to_token_stride]: token slot of each position of a pool row.
  // Verify token j of request r sits at position seq_len[r] + j.
  const std::int32_t* req_to_token = nullptr;
  std::int64_t req_to_token_stride = 0;          // W, [1, 2^31); seq_len + D <= W per request
  std::int32_t pool_rows = 0;                    // [1, limits::max_pool_rows]
  const std::int32_t* req_pool_index = nullptr;  // [batch], in [0, pool_rows)
  const std::int32_t* seq_len = nullptr;  // [batch], committed prefix WITHOUT the D verify tokens,
                                          // in [1, max_seq_len]
  std::int32_t batch = 0;                 // bs (the bucket when padded), [1, limits::max_batch]
  std::int32_t real_batch = 0;            // [0, batch]: requests r >= real_batch are padding
  // Optional, executor memory [1]: when set, the kernels read the real batch here at run time
  // and real_batch above is ignored past validation (set it to batch): one graph per bucket then
  // serves every real batch (the plan's staged real batch, verify_ops.hpp). A value outside
  // [0, batch] is clamped into it and recorded as bad_input in guard[0] (row -1, column -2,
  // capacity batch, value the word).
  const std::int32_t* real_batch_at = nullptr;
  std::int32_t draft_tokens = 0;  // D, [1, max_draft_tokens]; batch * D <= max_rows
  std::int32_t page_size = 0;     // ps of the FA3 prefix table, [1, max_page_size]
  // M, the largest admissible seq_len, [1, limits::max_context_len]: sizes the launch;
  // batch * D * (M + D) must fit int32 (mask_indptr is int32).
  std::int32_t max_seq_len = 0;
  // The engine's tree mask, one byte per cell (nonzero = attend), its full layout: request r's
  // block starts at sum(D * (seq_len[r'] + D) for r' < r), row i at + i * (seq_len[r] + D).
  // Padded requests have no cells (they attend everything). May be null when mask_cells is 0
  // (an idle rank, real_batch 0: nothing is read).
  const std::uint8_t* custom_mask = nullptr;
  // Cells in custom_mask. mask_length_exact: the formula's sum over the real requests must equal
  // it (a seq_len that already includes D is refused, not read shifted); otherwise it is only a
  // bound (a static buffer under graph replay): nothing past it is ever read.
  std::int64_t mask_cells = 0;
  bool mask_length_exact = true;
  // Exclusive upper bound for token slots (the KV pool).
  std::int64_t slot_limit = std::numeric_limits<std::int64_t>::max();

  // The outputs are the verify_tables above: each layout all of its pointers or none.

  // [3]: guard[0] bad input and the prefix table's refused columns, guard[1] kv_indices,
  // guard[2] the packed mask.
  guard_word* guard = nullptr;
  // Executor memory, verify_scratch_words(batch, D) int64 (launchers only; the host twin supplies
  // its own when null).
  std::int64_t* scratch = nullptr;
};

inline constexpr std::int32_t verify_guard_count = 3;

inline std::int64_t verify_scratch_words(std::int32_t batch, std::int32_t draft_tokens) {
  return 5 * static_cast<std::int64_t>(batch) + 2 * static_cast<std::int64_t>(batch) * draft_tokens;
}

// Exact capacities for a bucket of `batch` requests, the longest seq_len `max_seq_len` (M) and
// D verify tokens (each reached by a full bucket at seq_len = M):
std::int64_t verify_prefix_columns(std::int32_t max_seq_len, std::int32_t page_size);  // ceil(M/ps)
std::int64_t verify_kv_indices_capacity(std::int32_t batch, std::int32_t max_seq_len,
                                        std::int32_t draft_tokens);  // batch * (M + D)
std::int64_t verify_packed_mask_capacity(std::int32_t batch, std::int32_t max_seq_len,
                                         std::int32_t draft_tokens);  // batch*ceil(D*(M+D)/8)
std::int64_t verify_mask_cells_capacity(std::int32_t batch, std::int32_t max_seq_len,
                                        std::int32_t draft_tokens);  // batch * D * (M + D)
// The exact capacities as tables without pointers: prefix_capacity = prefix_stride = ceil(M/ps),
// expand_stride = D, kv_indices_capacity and packed_mask_capacity as above (the one place the
// formulas are applied: the plan's section, the arena's views, the ops and Python ask here).
// Host only; arguments in the ranges of verify_params.
verify_tables verify_exact_tables(std::int32_t batch, std::int32_t max_seq_len,
                                  std::int32_t page_size, std::int32_t draft_tokens);
// One line for `specgraph plan --verify-tokens D`: the exact verify buffers of a bucket of
// `max_batch` at `max_seq_len` (M), page size ps, against what engines reserve for the mask
// (SGLang: max_batch * D * M bytes). Host only; arguments in the ranges of verify_params.
std::string verify_capacity_report(std::int32_t max_batch, std::int32_t max_seq_len,
                                   std::int32_t page_size, std::int32_t draft_tokens);
// Cells of the mask the formula gives for host seq_len values (the real requests only).
std::int64_t verify_mask_cells(const std::int32_t* seq_len, std::int32_t real_batch,
                               std::int32_t draft_tokens);

// The scalars only (everything the buffer sizes derive from: page_size, draft_tokens, batch,
// real_batch, max_seq_len and its int32 mask limit, req_to_token_stride, pool_rows,
// mask_cells, slot_limit, the capacities); throws invalid_argument naming the field.
void validate_scalars(const verify_params& p);
// validate_scalars, the pointers and the layouts rule (verify_layouts_of; at least one layout).
// Throws invalid_argument; writes nothing.
void validate(const verify_params& p);
// Also scans the contents (pool rows, seq_len, row widths, every slot read, the mask length with
// the double-counted-D case named); host memory.
void validate_contents_host(const verify_params& p);

// Enqueues on the executor's stream: a check pass over (request, position) cells, a scan over
// requests, a count pass over expand rows, a scan over them, and the fill passes of each layout
// set. Asynchronous, capture-safe, no allocation; scratch must be set.
void launch_verify_metadata(executor& ex, const verify_params& p);
// The same computation on the calling thread over host memory, after validate_contents_host.
void verify_metadata_host(const verify_params& p);
// The whole verify computation over tables the caller owns, without a plan (Python's
// verify_metadata_; verify_ops.hpp's op over a plan's buffers ends here too). Checks p
// (validate; with host_memory every content too, validate_contents_host) and throws
// invalid_argument before anything is written; then resets p.guard's verify_guard_count words
// and, with host_memory (every pointer in host memory), runs the host twin on the calling
// thread (synchronous), else enqueues the kernels on ex's stream (asynchronous, no allocation,
// capture-safe; p.scratch must be set).
void run_verify_metadata(executor& ex, const verify_params& p, bool host_memory);

}  // namespace specgraph
