// The draft-decode metadata kernels: parameter structs, host-side validation and launchers.
//
// Semantics are those of docs/metadata.md (sections 2, 3 and 6). Every params struct is trivially
// copyable and holds raw pointers into executor memory ("device" memory: real device memory on
// the cuda executor, host memory on the host executor). All launchers:
//   * validate every scalar parameter on the host first and throw specgraph::invalid_argument
//     naming the field, its value and the limit; nothing is launched or written then;
//   * enqueue one kernel on the executor's stream (asynchronous; no synchronisation, no
//     allocation), so they may be called during graph capture;
//   * never store outside a buffer's capacity: such stores are skipped and recorded in the guard
//     word (see guard.hpp).
// Input *contents* (slot values, last_page_len values) live in device memory and are checked by
// the kernel itself: a row with a bad input value is written as a padded row (a sparse head:
// empty), never left with an earlier round's contents, and a bad_input violation is recorded.
// `*_host()` variants additionally scan the contents on the host and throw
// before anything is written; they require host-accessible memory.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "specgraph/guard.hpp"
#include "specgraph/index_ref.hpp"

namespace specgraph {

class executor;

// ---- Expand page table (docs/metadata.md section 3) ----------------------------------------
struct expand_params {
  // Slot ids, int64 or int32: slot j of branch t of request r is element
  // r * cache_loc_request_stride + t * cache_loc_stride + j * cache_loc.stride. Packed (the
  // arena's staged inputs): [batch*topk][cache_loc_stride], element stride 1, request stride 0.
  index_ref cache_loc;
  std::int64_t cache_loc_stride = 0;  // elements between branch rows (the arena: slot_stride)
  // Elements between requests; 0: topk * cache_loc_stride (packed rows). When set (an engine's
  // own tensor read in place), the strides are only range-checked (the caller checked the
  // tensor's shape): slots_read <= cache_loc_stride is required of packed rows only.
  std::int64_t cache_loc_request_stride = 0;
  std::int32_t slots_read = 0;                  // leading slots read per row; the runtime uses d
  std::int32_t decode_length = 0;               // d = step + 1
  const std::int32_t* last_page_len = nullptr;  // [batch]
  std::int32_t batch = 0;                       // requests (rows = batch * topk)
  std::int32_t topk = 0;
  std::int32_t page_size = 0;
  std::int32_t* page_table = nullptr;    // [batch*topk][page_table_stride]
  std::int64_t page_table_stride = 0;    // >= capacity
  std::int32_t capacity = 0;             // columns of each row that may be written
  std::int32_t* cache_seqlen = nullptr;  // [batch*topk]
  guard_word* guard = nullptr;           // required
  // Exclusive upper bound for slot ids (the KV pool size); the default accepts any slot >= 0.
  std::int64_t slot_limit = std::numeric_limits<std::int64_t>::max();
  // Optional layout check (docs/metadata.md section 3): rows of requests r < *layout_check_batch
  // are checked against the branch allocation of section 1. Null disables the check. A pointer
  // (not a value) so a captured graph checks whatever real batch was staged for the round.
  const std::int32_t* layout_check_batch = nullptr;
  // Optional, executor memory. Requests r >= *padding_from (the device real batch of inputs
  // read in place; clamped to [0, batch]) and requests with refused[r] != 0 (the round's
  // prefix.refused flags: a request the prefix check refused is padding in every table of its
  // round) are written as padded requests' rows (every cell the dummy page 0, cache_seqlen
  // 1 % page_size + d) without reading their slots, recording nothing and never layout-checked.
  const std::int32_t* padding_from = nullptr;
  const std::int32_t* refused = nullptr;
  // Device step counter (docs/device-rounds.md): when set, the step s is read from here at run time
  // and decode_length = s + 1, capacity = s + 2 and the guard word guard[s] follow from it
  // (decode_length and capacity above are ignored); slots_read 0 means d. s must lie in
  // [0, device_steps), else row 0 records bad_input in guard[0] and nothing is written.
  const std::int32_t* device_step = nullptr;
  std::int32_t device_steps = 0;  // the steps a round may have; page_table_stride >= it + 1
};

// ---- Prefix metadata (docs/metadata.md section 2) ------------------------------------------
struct prefix_params {
  const std::int32_t* req_to_token = nullptr;  // [pool_rows][req_to_token_stride]
  std::int64_t req_to_token_stride = 0;        // columns per pool row: the table's real stride
  // The longest accepted seq_len (max_context_len), <= req_to_token_stride; 0: the stride.
  std::int32_t max_seq_len = 0;
  std::int32_t pool_rows = 0;
  // [batch], int32 or int64 at any element stride (the arena's staged int32 inputs, or an
  // engine's static input tensors read in place); every value is range-checked in int64 on the
  // device before it is narrowed.
  index_ref req_pool_index;
  index_ref seq_len;
  std::int32_t batch = 0;
  std::int32_t topk = 0;
  std::int32_t page_size = 0;
  std::int32_t* last_page_len = nullptr;  // [batch]
  std::int32_t* prefix_seqlen = nullptr;  // [batch]
  std::int32_t* page_table = nullptr;     // [batch][page_table_stride]
  std::int64_t page_table_stride = 0;
  std::int32_t capacity = 0;             // ceil(max_context_len / page_size) for the static table
  std::int32_t* cu_seqlens_q = nullptr;  // [batch + 1]
  guard_word* guard = nullptr;
  std::int64_t slot_limit = std::numeric_limits<std::int64_t>::max();
  // Optional, executor memory: requests r >= *padding_from (the device real batch of inputs
  // read in place, clamped to [0, batch]) are read as padded requests (pool row 0, seq_len 1)
  // whatever req_pool_index and seq_len hold there. Null: every request of the batch is read.
  const std::int32_t* padding_from = nullptr;
  // Scratch, [batch] int32 in executor memory: one flag per request the check pass refused.
  // launch_prefix_metadata zeroes it first; prefix_metadata_host needs none (null is fine).
  std::int32_t* refused = nullptr;
  // When set, both passes do nothing unless *run_when_zero == 0 (device_steps mode: the round's
  // setup is part of the one step graph and runs at step 0 only).
  const std::int32_t* run_when_zero = nullptr;
  // Optional per-request high-water marks, [batch] int32 in executor memory (docs/metadata.md
  // section 2): high_water[r] is how many leading cells of row r may be non-zero. When set, the
  // fill pass writes only the cells below max(new pages, previous mark) (the row's pages and
  // the zeros that clear what the previous round left beyond them) and updates the mark; a mark
  // outside [0, capacity] (corrupted) counts as capacity, so the whole row is rewritten. The
  // marks must describe the table: zero with a zeroed table (initialize_buffers). Null: every
  // cell of the row is written. high_water_before is the check pass's scratch ([batch] int32:
  // the marks as the round found them), required with high_water on the launcher.
  std::int32_t* high_water = nullptr;
  std::int32_t* high_water_before = nullptr;
};

// ---- Sparse vertical/slash staging (docs/metadata.md section 6) ----------------------------
enum class stage_kind : std::int32_t { intra = 0, succ = 1, inter = 2 };
const char* to_string(stage_kind k) noexcept;

// One chunk stage: the queries of [prev, end) against the keys of this stage's kind.
struct sparse_stage {
  stage_kind kind = stage_kind::intra;
  std::int32_t prev = 0;  // chunk start
  std::int32_t end = 0;   // K: keys seen (exclusive end of the chunk)
  std::int32_t chunk_len = 0;
  std::int32_t chunk_q_len = 0;  // query length of the stage
};

// Key length of a stage: intra end - prev, succ chunk_len, inter prev - chunk_len.
std::int32_t stage_key_length(const sparse_stage& s) noexcept;

// The stages of a sequence split into chunks of `chunk_len` (= chunk_size - local_size): for
// every chunk start prev = 0, chunk_len, ... < seq_len, with end = min(prev + chunk_len, seq_len)
// and chunk_q_len = end - prev: intra always, succ when prev - chunk_len >= 0, inter when
// prev - 2 * chunk_len >= 0. Throws invalid_argument for seq_len < 1 or chunk_len < 1.
std::vector<sparse_stage> sparse_stages(std::int32_t seq_len, std::int32_t chunk_len);

// Capacity of a stage's per-head vertical buffer (Vcap): the largest per-head vertical size,
// clamped to the keys seen (`keys`, the stage's end). The slash buffer (Scap) is the largest
// per-head slash size, unclamped (docs/metadata.md section 6). Never below 1.
std::int32_t sparse_capacity(const std::vector<std::int32_t>& sizes, std::int32_t keys);

struct sparse_stage_params {
  const std::int32_t* vertical = nullptr;  // [heads][vertical_stride], input order kept
  std::int32_t vertical_stride = 0;
  const std::int32_t* vertical_count = nullptr;  // [heads] entries of each head's selection
  const std::int32_t* vertical_size = nullptr;   // [heads] configured vertical size (fallback cap)
  const std::int32_t* slash = nullptr;           // [heads][slash_stride]
  std::int32_t slash_stride = 0;
  const std::int32_t* slash_count = nullptr;  // [heads]
  const std::int32_t* slash_size = nullptr;   // [heads] configured slash size (fallback cap)
  std::int32_t heads = 0;
  sparse_stage stage;
  std::int32_t* out_vertical = nullptr;  // [heads][vertical_capacity], INT32_MAX when unused
  std::int32_t vertical_capacity = 0;
  std::int32_t* out_vertical_count = nullptr;  // [heads]
  std::int32_t* out_slash = nullptr;           // [heads][slash_capacity], INT32_MIN when unused
  std::int32_t slash_capacity = 0;
  std::int32_t* out_slash_count = nullptr;  // [heads]
  guard_word* guard = nullptr;
};

// Validation (throws specgraph::invalid_argument; writes nothing).
void validate(const expand_params& p);
void validate(const prefix_params& p);
void validate(const sparse_stage_params& p);
// Scans input contents too; requires host-accessible memory.
void validate_contents_host(const expand_params& p);
void validate_contents_host(const prefix_params& p);
void validate_contents_host(const sparse_stage_params& p);

// Launchers: enqueue on the executor's stream. Asynchronous, capture-safe.
void launch_expand_page_table(executor& ex, const expand_params& p);
// Enqueues three operations: a reset of p.refused (a memset; with run_when_zero a kernel that
// clears it at step 0 only, so the flags last the round), a check pass and a fill pass, each
// parallel over (request, page) cells with one thread per cell (docs/metadata.md section 2).
void launch_prefix_metadata(executor& ex, const prefix_params& p);
void launch_sparse_stage(executor& ex, const sparse_stage_params& p);

// Immediate host computation (no executor): validates parameters and contents, then runs the
// per-row code on the calling thread. For tools and tests on host memory.
void expand_page_table_host(const expand_params& p);
void prefix_metadata_host(const prefix_params& p);
void sparse_stage_host(const sparse_stage_params& p);

// Sparse fallback (docs/metadata.md section 6): evenly spaced indices for an empty selection.
// count = min(max_count, seq_len); step = max(1, ceil(seq_len / count)); indices 0, step, ...
// (< seq_len), at most count of them. Writes at most `capacity` entries into `out`; an index
// that does not fit is recorded in `guard` (may be null). Returns the number written, which is
// at most min(count, capacity): size `out` by that. Ranges: seq_len in [0, 2^30], max_count
// and capacity in [0, 2^24] (capacity >= 1).
std::int32_t sparse_fallback_host(std::int32_t seq_len, std::int32_t max_count, std::int32_t* out,
                                  std::int32_t capacity, guard_word* guard);

}  // namespace specgraph
