// Draft-extend metadata (docs/extend.md): after verify, the draft model runs one extend forward
// over each request's whole verify window of W tokens; its logits and hidden state at the
// selected row seed the next round. Four layouts are written from the same inputs:
//   * tokens: each window token's position and KV slot, and each request's select index;
//   * FA3 (C1): cache_seqlen, cu_seqlens_q/k and a page table wide enough for seq_len + W, every
//     column past a row's pages cleared (no stale page id from an earlier round survives);
//   * CSR prefix layout (C2p: Triton's graph and eager paths, FlashInfer's eager path): the
//     committed prefix's token slots only (the window's K/V come from the forward's own tensors);
//   * CSR full layout (C2f: FlashInfer's graph replay): prefix + window token slots, page size 1.
//
// Launchers follow metadata.hpp's rules: every scalar parameter is validated on the host first
// (invalid_argument naming the field, its value and the limit; nothing launched or written); the
// kernels are enqueued on the executor's stream (asynchronous, no synchronisation, no allocation:
// capture-safe); input contents in device memory (pool rows, seq_len, accept_len, every slot
// read) are checked by the kernels (a request with a bad value is recorded as bad_input in
// guard[0] and written as a padded request); every store into a buffer whose size the caller
// chooses is checked against its capacity and a refused store is recorded. Nothing is read from
// a host mirror: every extent comes from the device's lengths, so one graph per bucket serves
// every round.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "specgraph/guard.hpp"

namespace specgraph {

class executor;

// W, the verify window (SGLang's num_draft_tokens, the tree size with its root): in
// [1, max_extend_tokens].
inline constexpr std::int32_t max_extend_tokens = 1 << 10;

// Where the draft-extend metadata is written: one type for the kernels' parameters
// (extend_params), the arena's section and the engine's own buffers. A layout is all of its
// pointers or none (extend_layouts_of); at least one layout is set. Sizes for `batch` requests
// (B, padded rows included), window W and the longest admissible seq_len M:
struct extend_tables {
  // tokens: three pointers. Token row t = r * W + j is window token j of request r.
  std::int32_t* position = nullptr;       // [batch * W]: seq_len[r] + j (padded rows 0)
  std::int32_t* out_cache_loc = nullptr;  // [batch * W]: req_to_token[pool][seq_len + j] (0)
  std::int32_t* select_index = nullptr;   // [batch]: r * W + accept_len - 1 (see below)
  // FA3 (C1): five pointers. L[r] = seq_len[r] + W for real rows, 1 for padded rows.
  std::int32_t* page_table = nullptr;    // [batch][page_stride]
  std::int64_t page_stride = 0;          // >= page_capacity
  std::int32_t page_capacity = 0;        // columns written per row (exact: ceil((M + W) / ps))
  std::int32_t* cache_seqlen = nullptr;  // [batch]: L
  std::int32_t* cu_seqlens_q = nullptr;  // [batch + 1]: r * W
  std::int32_t* cu_seqlens_k = nullptr;  // [batch + 1]: prefix sums of L
  std::int32_t* max_seqlen_k = nullptr;  // [1]: max(L), 0 when batch is 0 (max_seqlen_q is W)
  // CSR prefix layout (C2p): three pointers. kv_len = seq_len (padded rows 0).
  std::int32_t* prefix_qo_indptr = nullptr;  // [batch + 1]: r * W
  std::int32_t* prefix_kv_indptr = nullptr;  // [batch + 1]: prefix sums of kv_len
  std::int32_t* prefix_kv_indices =
      nullptr;                          // [prefix_kv_capacity]: req_to_token[pool][0..seq_len)
  std::int64_t prefix_kv_capacity = 0;  // elements (exact: batch * M), < 2^31
  // CSR full layout (C2f): four pointers.
  std::int32_t* full_qo_indptr = nullptr;         // [batch + 1]: r * W
  std::int32_t* full_kv_indptr = nullptr;         // [batch + 1]: prefix sums of L
  std::int32_t* full_kv_indices = nullptr;        // [full_kv_capacity]: req_to_token[pool][0..L);
                                                  // a padded row: req_to_token[0][0]
  std::int64_t full_kv_capacity = 0;              // elements (exact: batch * (M + W)), < 2^31
  std::int32_t* full_kv_last_page_len = nullptr;  // [batch]: 1
};

// The tables' buffers by index (Python's field order): tokens' three, fa3's five, prefix's three,
// full's four.
inline constexpr int extend_field_count = 15;
inline constexpr const char* extend_field_names[extend_field_count] = {
    "position",         "out_cache_loc",    "select_index",         "page_table",
    "cache_seqlen",     "cu_seqlens_q",     "cu_seqlens_k",         "max_seqlen_k",
    "prefix_qo_indptr", "prefix_kv_indptr", "prefix_kv_indices",    "full_qo_indptr",
    "full_kv_indptr",   "full_kv_indices",  "full_kv_last_page_len"};
// The four layouts, in extend_layouts order, and each one's fields [first, last) of
// extend_field_names: layout k holds extend_layout_bounds[k] .. extend_layout_bounds[k + 1] - 1.
inline constexpr int extend_layout_count = 4;
inline constexpr const char* extend_layout_names[extend_layout_count] = {"tokens", "fa3", "prefix",
                                                                         "full"};
inline constexpr int extend_layout_bounds[extend_layout_count + 1] = {0, 3, 8, 11, 15};
// Field i's buffer (null: not set); set_extend_field stores p there. Host and device.
std::int32_t* extend_field(const extend_tables& t, int i) noexcept;
void set_extend_field(extend_tables& t, int i, std::int32_t* p) noexcept;

// What field i needs (extend_params below: its batch, W, capacities and, for the formula, M and
// ps): a vector of rows cells, or (table) rows of cols cells at any stride >= cols (the page
// table); int32 cells, and the formula in words for messages. Host only.
struct extend_field_shape {
  std::int64_t rows = 0;
  std::int64_t cols = 0;  // tables only
  bool table = false;
  std::string formula;
};
struct extend_params;
extend_field_shape extend_shape_of(int i, const extend_params& p);

// The one all-or-none rule: which layouts t sets. A layout with some but not all of its pointers
// is refused (invalid_argument naming `prefix` + its first missing pointer, the count and the
// fix); nothing is written. Host only.
struct extend_layouts {
  bool tokens = false;
  bool fa3 = false;
  bool prefix = false;  // C2p
  bool full = false;    // C2f
};
extend_layouts extend_layouts_of(const extend_tables& t, const char* prefix = "");

struct extend_params : extend_tables {
  // req_to_token[pool_rows][req_to_token_stride]: token slot of each position of a pool row.
  // Window token j of request r sits at position seq_len[r] + j. Pool row 0 backs padded rows.
  const std::int32_t* req_to_token = nullptr;
  std::int64_t req_to_token_stride = 0;  // [1, 2^31); seq_len + W <= stride per real request
  std::int32_t pool_rows = 0;            // [1, limits::max_pool_rows]
  const std::int32_t* req_pool_index = nullptr;  // [batch], in [0, pool_rows)
  // [batch]: the committed length BEFORE the window (the value verify took), in [0, max_seq_len].
  const std::int32_t* seq_len = nullptr;
  // [batch]: the tokens verify accepted (the bonus token included), in [0, W]. 0 (other engines
  // produce it) selects row r * W and is recorded in guard[4] (violation_kind accept_len).
  const std::int32_t* accept_len = nullptr;
  std::int32_t batch = 0;       // B (the bucket when padded), [0, limits::max_batch]
  std::int32_t real_batch = 0;  // [0, batch]: requests r >= real_batch are padding
  // Optional, executor memory [1]: when set, the kernels read the real batch here at run time
  // and real_batch above is ignored past validation (set it to batch). A value outside
  // [0, batch] is clamped into it and recorded as bad_input in guard[0] (row -1, column -2,
  // capacity batch, value the word).
  const std::int32_t* real_batch_at = nullptr;
  // Optional, executor memory: acceptance's accept_index ([batch][accept_index_stride], any
  // int32; accept_params). A real row whose first entry is negative accepted nothing (acceptance
  // wrote it as padding: an idle row, a stalled round, a tree it refused) and is written as a
  // padded row, unchecked and unrecorded. Such a row in a device round is inactive (staged
  // seq_len 1): its window, positions 1 .. W of its row, is the request's committed prefix, which
  // the extend forward would overwrite at out_cache_loc. The device round passes its section's.
  // null: every real row is read.
  const std::int32_t* accept_index = nullptr;
  std::int64_t accept_index_stride = 0;  // [1, 2^31) when accept_index is set: S, num_steps + 1
  std::int32_t extend_tokens = 0;        // W, [1, max_extend_tokens]; batch * W <= limits::max_rows
  std::int32_t page_size = 0;            // ps of the FA3 page table, [1, limits::max_page_size]
  // M, the largest admissible seq_len, [0, limits::max_context_len]: sizes the launch;
  // batch * (M + W) must fit int32 (the indptrs are int32).
  std::int32_t max_seq_len = 0;
  // Exclusive upper bound for token slots (the KV pool).
  std::int64_t slot_limit = std::numeric_limits<std::int64_t>::max();

  // The outputs are the extend_tables above: each layout all of its pointers or none.

  // [extend_guard_count]: guard[0] bad input (kernel_id extend_metadata), guard[1] the page
  // table's refused columns (extend_page_table), guard[2] prefix kv_indices
  // (extend_triton_kv_indices), guard[3] full kv_indices (extend_flashinfer_kv_indices),
  // guard[4] accept lengths of 0 (extend_select_index).
  guard_word* guard = nullptr;
  // Executor memory, extend_scratch_words(batch) int64 (launchers only; the host twin supplies
  // its own when null).
  std::int64_t* scratch = nullptr;
};

inline constexpr std::int32_t extend_guard_count = 5;

std::int64_t extend_scratch_words(std::int32_t batch);

// Exact capacities for a bucket of `batch` requests, the longest seq_len `max_seq_len` (M) and
// window W (each reached by a full bucket at seq_len = M):
std::int64_t extend_page_columns(std::int32_t max_seq_len, std::int32_t page_size,
                                 std::int32_t extend_tokens);  // ceil((M + W) / ps)
std::int64_t extend_prefix_kv_capacity(std::int32_t batch, std::int32_t max_seq_len);  // B * M
std::int64_t extend_full_kv_capacity(std::int32_t batch, std::int32_t max_seq_len,
                                     std::int32_t extend_tokens);  // B * (M + W)
// The exact capacities as tables without pointers: page_capacity = page_stride =
// ceil((M + W) / ps), prefix_kv_capacity and full_kv_capacity as above (the one place the
// formulas are applied: the plan's section, the arena's views, the ops and Python ask here).
// Host only; arguments in the ranges of extend_params.
extend_tables extend_exact_tables(std::int32_t batch, std::int32_t max_seq_len,
                                  std::int32_t page_size, std::int32_t extend_tokens);
// The same as launch parameters without pointers: extend_exact_tables with batch, W, page size
// and M set, what extend_shape_of needs to size each field of a bucket (the plan's section,
// Python's views). Host only; arguments in the ranges of extend_params.
extend_params extend_sizing(std::int32_t batch, std::int32_t max_seq_len, std::int32_t page_size,
                            std::int32_t extend_tokens);
// What SGLang 0.5.23 reserves for the same draft-extend forward (docs/extend.md), in elements:
// FA3's page table max_batch x ceil(max_context_len / ps) int32, Triton's kv_indices and
// FlashInfer's kv_indices max_batch * W * max_context_len (int64 and int32) and FlashInfer's
// unread custom mask of the same number of bytes.
struct extend_engine_reservation {
  std::int64_t fa3_page_table = 0;         // int32 elements
  std::int64_t triton_kv_indices = 0;      // int64 elements
  std::int64_t flashinfer_kv_indices = 0;  // int32 elements
  std::int64_t flashinfer_mask_bytes = 0;
};
extend_engine_reservation extend_engine_reservations(std::int32_t max_batch,
                                                     std::int32_t max_context_len,
                                                     std::int32_t page_size,
                                                     std::int32_t extend_tokens);
// One line for `specgraph plan --extend`: the exact draft-extend buffers of a bucket of
// `max_batch` at `max_seq_len` (M), page size ps and window W, beside SGLang's reservations at
// max_context_len = M. Host only; arguments in the ranges of extend_params.
std::string extend_capacity_report(std::int32_t max_batch, std::int32_t max_seq_len,
                                   std::int32_t page_size, std::int32_t extend_tokens);

// The scalars only (page_size, extend_tokens, batch, real_batch, max_seq_len and its int32
// limit, req_to_token_stride, pool_rows, slot_limit, the capacities and strides); throws
// invalid_argument naming the field.
void validate_scalars(const extend_params& p);
// validate_scalars, the pointers and the layouts rule (extend_layouts_of; at least one layout).
// Throws invalid_argument; writes nothing.
void validate(const extend_params& p);
// Also scans the contents (pool rows, seq_len against M and the row width, accept_len, every
// slot read against slot_limit); host memory. Throws invalid_argument naming the request.
void validate_contents_host(const extend_params& p);

// Enqueues on the executor's stream: a check pass over requests (inputs, L, kv lengths into
// scratch), a scan over requests (cu_seqlens_k, both kv_indptrs, max_seqlen_k), and the fill
// passes of each layout set (token rows, page-table cells, kv_indices entries). Asynchronous,
// capture-safe, no allocation; scratch must be set; nothing launched for batch 0 but the scan
// (which writes the indptrs' single 0 entry and max_seqlen_k = 0).
void launch_extend_metadata(executor& ex, const extend_params& p);
// The same computation on the calling thread over host memory, after validate_contents_host.
void extend_metadata_host(const extend_params& p);
// The whole draft-extend computation over tables the caller owns, without a plan (Python's
// extend_metadata_, the CLI; the arena op ends here too). Checks p (validate; with host_memory
// every content too, validate_contents_host) and throws invalid_argument before anything is
// written; then resets p.guard's extend_guard_count words and, with host_memory (every pointer
// in host memory), runs the host twin on the calling thread (synchronous), else enqueues the
// kernels on ex's stream (asynchronous, no allocation, capture-safe; p.scratch must be set).
void run_extend_metadata(executor& ex, const extend_params& p, bool host_memory);

}  // namespace specgraph
