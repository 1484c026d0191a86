// The ranges of every configuration field and kernel parameter, in one place. Each bound is
// chosen so that the arithmetic the plan and the kernels do on it provably fits the type it is
// done in (the bound is restated beside that arithmetic). validate() and the launchers reject
// anything outside with invalid_argument naming the field, its value and the limit.
#pragma once

#include <cstdint>

namespace specgraph::limits {

// Query rows (bucket * topk) of one round: row indices and row products stay far inside int32,
// and rows * (num_steps + 1) page-table cells stay inside int64 byte counts.
inline constexpr std::int64_t max_rows = std::int64_t{1} << 24;
inline constexpr std::int32_t max_batch = 1 << 20;
inline constexpr std::int32_t max_topk = 1 << 10;
// Draft steps: decode_length d = s + 1 <= 1024, so last_page_len + d < page_size + 1024 fits
// int32 (cache_seqlen) with room to spare.
inline constexpr std::int32_t max_num_steps = 1 << 10;
// Slots per branch row of out_cache_loc (draft_config::slot_stride, >= num_steps): rows *
// slot_stride < 2^24 * 2^16 = 2^40 slot indices stay inside int64 with room to spare.
inline constexpr std::int32_t max_slot_stride = 1 << 16;
inline constexpr std::int32_t max_page_size = 1 << 20;
// Positions of a request: seq_len <= max_context_len < 2^28, so j * page_size <= seq_len and
// seq_len + page_size stay inside int32.
inline constexpr std::int32_t max_context_len = 1 << 28;
inline constexpr std::int32_t max_pool_rows = 1 << 24;
// Slot ids are int64 in out_cache_loc and int32 in req_to_token; page ids are stored in int32
// tables, so (kv_slots - 1) / page_size must be <= INT32_MAX; kv_slots itself <= 2^62 keeps
// slot + page_size inside int64.
inline constexpr std::int64_t max_kv_slots = std::int64_t{1} << 62;
inline constexpr std::int64_t max_page_id = 0x7fffffff;
// Sparse attention: heads, per-head selection sizes and key ranges.
inline constexpr std::int32_t max_heads = 1 << 16;
inline constexpr std::int32_t max_sparse_size = 1 << 24;
inline constexpr std::int32_t max_keys = 1 << 30;
// The whole arena: no device has a terabyte; a plan above this is refused before any
// allocation is tried.
inline constexpr std::int64_t max_arena_bytes = std::int64_t{1} << 40;
// Element strides of an engine's static input tensors read in place (engine_inputs.hpp): an
// offset request * stride + branch * stride + slot * stride (requests < 2^20, branches < 2^10,
// slots < 2^16) stays below 3 * 2^56, inside int64.
inline constexpr std::int64_t max_input_stride = std::int64_t{1} << 36;

}  // namespace specgraph::limits
