// Draft-decode KV indices in CSR form (docs/csr.md): per draft step, kv_indptr over the query
// rows and kv_indices, the token slots each row attends. The layout FlashInfer's and Triton's
// paged decode read during multi-step draft decode (topk >= 1, any page size).
//
// Launchers follow metadata.hpp's rules: every scalar parameter is validated on the host first
// (invalid_argument naming the field, its value and the limit; nothing launched or written); the
// kernels are enqueued on the executor's stream (asynchronous, no synchronisation, no allocation:
// capture-safe); input contents in device memory are checked by the kernels (a request with a bad
// value is recorded as bad_input in guard[0] and its rows are a padded request's: pool row 0,
// seq_len 1, docs/csr.md section 2); every kv_indices store is
// checked against its step's capacity and a refused store is recorded in that step's guard word.
#pragma once

#include <cstdint>
#include <limits>

#include "specgraph/guard.hpp"
#include "specgraph/index_ref.hpp"

namespace specgraph {

class executor;

struct kv_indices_params {
  // req_to_token[pool_rows][req_to_token_stride]: entry e of a pool row covers the positions
  // [e * entry_page_size, (e + 1) * entry_page_size); the token slot at position p is
  // entry(p / E) * E + p % E (E = 1: the entry is the slot itself).
  const std::int32_t* req_to_token = nullptr;
  std::int64_t req_to_token_stride = 0;  // W, [1, 2^31)
  std::int32_t pool_rows = 0;            // [1, limits::max_pool_rows]
  std::int32_t entry_page_size = 1;      // E, [1, limits::max_page_size]
  // [batch], int32 or int64 at any element stride (index_ref), range-checked in int64 on the
  // device: pool rows in [0, pool_rows), seq_len in [0, max_seq_len].
  index_ref req_pool_index;
  index_ref seq_len;
  std::int32_t batch = 0;      // requests (bucket size when padded), >= 1
  std::int32_t topk = 0;       // [1, limits::max_topk]; rows N = batch * topk
  std::int32_t num_steps = 0;  // the round's draft steps, [1, max_num_steps]
  // Draft slots per branch in req_to_token (draft_config::slot_stride): the branch regions are
  // laid out from it (docs/csr.md). 0 means num_steps; otherwise [num_steps,
  // limits::max_slot_stride]. SGLang: num_steps = S - 1 draft forwards, slot_stride = S.
  std::int32_t slot_stride = 0;
  std::int32_t page_size = 0;  // ps, [1, limits::max_page_size]
  std::int32_t window = 0;     // draft attention window, 0 = off
  std::int32_t sink = 0;       // sink tokens kept with a window
  // The largest admissible seq_len (M): sizes the launch; a larger seq_len is bad input.
  std::int32_t max_seq_len = 0;
  // The launch computes steps first_step .. first_step + step_count - 1 (of num_steps).
  std::int32_t first_step = 0;
  std::int32_t step_count = 0;
  // Launch step k (step first_step + k) writes kv_indptr + k * kv_indptr_stride, N + 1 entries.
  std::int32_t* kv_indptr = nullptr;
  std::int64_t kv_indptr_stride = 0;  // >= N + 1
  // Exactly one of the two: int32 (FlashInfer) or int64 (Triton) token slots.
  std::int32_t* kv_indices_i32 = nullptr;
  std::int64_t* kv_indices_i64 = nullptr;
  // Launch step k may write `capacity + k * capacity_growth` entries, starting at element
  // k * kv_indices_stride; stride 0 packs the steps back to back (each after the previous
  // step's capacity). The exact sizing is capacity = R * (Lmax + first_step + 1), growth = R.
  std::int32_t capacity = 0;
  std::int32_t capacity_growth = 0;
  std::int64_t kv_indices_stride = 0;
  guard_word* guard = nullptr;  // [step_count]: guard[k] for launch step k; bad input in guard[0]
  // Exclusive upper bound for token slots (the KV pool); int32 output also needs <= INT32_MAX.
  std::int64_t slot_limit = std::numeric_limits<std::int64_t>::max();
  // Executor memory, kv_indices_scratch_ints(batch) int32 (launchers only; the host twin
  // supplies its own when null).
  std::int32_t* scratch = nullptr;
  // Device step counter (docs/device-rounds.md), executor memory, or null. When set, the launch
  // computes only the step the counter holds, read by the kernels: counter s in
  // [first_step, first_step + step_count) is launch step k = s - first_step, written exactly as a
  // launch of that step alone would write it (kv_indptr row k, kv_indices at step k's offset with
  // capacity + k * capacity_growth, guard[k]). A counter outside that range writes nothing and
  // records bad_input in guard[0] (row 0, column -1, capacity first_step + step_count, value the
  // counter). The grid covers one step's cells.
  const std::int32_t* device_step = nullptr;
  // Optional, executor memory: requests r >= *padding_from (the device real batch of inputs
  // read in place, clamped to [0, batch]) are read as padded requests (pool row 0, seq_len 1)
  // whatever req_pool_index and seq_len hold there. Null: every request is read.
  const std::int32_t* padding_from = nullptr;
  // Optional, executor memory, [batch]: the round's prefix.refused flags. A flagged request is
  // refused by this launch too (its rows a padded request's), as any request the launch's own
  // check refuses. Null: none.
  const std::int32_t* refused = nullptr;
};

inline std::int64_t kv_indices_scratch_ints(std::int32_t batch) {
  return 3 * static_cast<std::int64_t>(batch);
}

// Lmax: the most prefix entries a row keeps, max_seq_len or min(max_seq_len, window + sink).
std::int64_t kv_kept_max(std::int32_t max_seq_len, std::int32_t window, std::int32_t sink);
// C_s = rows * (Lmax + step + 1): the exact kv_indices capacity of a step.
std::int64_t kv_indices_step_capacity(std::int64_t rows, std::int64_t kept_max, std::int32_t step);
// Entries step s uses: topk * sum(Lw) + N * (s + 1), computed on the host from host memory.
// Requires validated seq_len values (each in [0, max_seq_len]).
std::int64_t kv_indices_used(const std::int32_t* seq_len, std::int32_t batch, std::int32_t topk,
                             std::int32_t window, std::int32_t sink, std::int32_t step);

// Throws invalid_argument; writes nothing.
void validate(const kv_indices_params& p);
// Also scans the contents (pool rows, seq_len, row widths, every entry read); host memory.
void validate_contents_host(const kv_indices_params& p);

// Enqueues on the executor's stream: a memset of the scratch's flags, a check pass over
// (row, entry) cells, a scan over requests and a fill pass over (step, row, entry) cells.
// Asynchronous, capture-safe, no allocation.
void launch_draft_kv_indices(executor& ex, const kv_indices_params& p);
// The same computation on the calling thread over host memory, after validate_contents_host.
void draft_kv_indices_host(const kv_indices_params& p);

}  // namespace specgraph
