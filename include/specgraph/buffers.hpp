// Typed, non-owning views of a plan's buffers at a base address.
//
//   plan p = make_plan(cfg);
//   draft_buffers b(p, arena);   // arena: p.total_bytes bytes, arena_alignment-aligned, owned by
//                                // the caller (e.g. a tensor in the engine's graph memory pool)
//   b.expand_page_table(2);      // int32[max_rows][4]
//   b.view(bucket, step);        // everything a forward reads for graph(bucket, step)
//
// Everything here is pointer arithmetic over the plan's typed layout: no allocation, no name
// lookup, no device access, so it may be called anywhere, during capture included. The plan
// must outlive the view; the memory must stay at the same address while graphs that use it
// exist.
#pragma once

#include <cstddef>
#include <cstdint>

#include "specgraph/config.hpp"
#include "specgraph/extend_metadata.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/metadata.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/round_view.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph {

class executor;

// The sparse index buffers of the plan (all null when the config has no sparse settings).
struct sparse_view {
  std::int32_t heads = 0;
  std::int32_t* vertical_in = nullptr;  // [heads][vertical_in_stride]: the engine's selection
  std::int32_t vertical_in_stride = 0;
  std::int32_t* vertical_count_in = nullptr;  // [heads]
  std::int32_t* vertical_size = nullptr;      // [heads], from the config (initialize_buffers)
  std::int32_t* slash_in = nullptr;
  std::int32_t slash_in_stride = 0;
  std::int32_t* slash_count_in = nullptr;
  std::int32_t* slash_size = nullptr;
  struct stage_buffers {
    std::int32_t* vertical = nullptr;  // [heads][vertical_capacity]
    std::int32_t vertical_capacity = 0;
    std::int32_t* vertical_count = nullptr;
    std::int32_t* slash = nullptr;  // [heads][slash_capacity]
    std::int32_t slash_capacity = 0;
    std::int32_t* slash_count = nullptr;
    guard_word* guard = nullptr;
  } stages[sparse_stage_kinds];  // indexed by stage_kind

  bool enabled() const { return heads > 0; }
  // Params for launch_sparse_stage() staging `stage` from the input buffers into the
  // stage-kind's buffers.
  sparse_stage_params params(const sparse_stage& stage) const;
};

// What a forward sees for graph(bucket, step). Every pointer is into the arena and stays valid
// while it does; every table comes with its capacity.
struct step_view {
  executor* ex = nullptr;          // set by the driver that calls the forward (null otherwise)
  device_stream stream = nullptr;  // that executor's stream (null on the host executor)
  std::int32_t bucket = 0;
  std::int32_t step = 0;
  std::int32_t decode_length = 0;  // step + 1
  std::int32_t topk = 0;
  std::int32_t page_size = 0;
  std::int32_t rows = 0;  // bucket * topk query rows (padded rows included)

  // Static inputs (padded to the bucket by staging).
  const std::int32_t* req_pool_index = nullptr;  // [bucket]
  const std::int32_t* seq_len = nullptr;         // [bucket]
  const std::int64_t* out_cache_loc = nullptr;   // [bucket*topk][cache_loc_stride]
  std::int64_t cache_loc_stride = 0;             // slot_stride (>= num_steps)
  const std::int32_t* real_batch = nullptr;      // [1] the staged real batch

  // Step-invariant prefix metadata (computed by the round's setup).
  const std::int32_t* last_page_len = nullptr;      // [bucket]
  const std::int32_t* prefix_seqlen = nullptr;      // [bucket]
  const std::int32_t* prefix_page_table = nullptr;  // [bucket][prefix_stride]
  std::int64_t prefix_stride = 0;
  std::int32_t prefix_capacity = 0;            // ceil(max_context_len / page_size)
  const std::int32_t* cu_seqlens_q = nullptr;  // [bucket + 1]

  // This step's expand metadata.
  const std::int32_t* expand_page_table = nullptr;    // [rows][expand_stride]
  std::int32_t expand_capacity = 0;                   // d + 1 columns hold this step's table
  std::int32_t expand_stride = 0;                     // row stride: d + 1, or num_steps + 1
  const std::int32_t* expand_cache_seqlen = nullptr;  // [rows]

  // device_steps mode: the graph is captured once for every step, so `step`, `decode_length`
  // and `expand_capacity` above describe step 0 only; kernels read the step from here at run
  // time (d = *device_step + 1, capacity d + 1). Null in per-step mode.
  const std::int32_t* device_step = nullptr;
  // One confidence per query row, written by the forward: the device_depth continue signal.
  float* confidence = nullptr;  // [rows]

  // This step's CSR draft-decode indices (formats csr or both; docs/csr.md), null otherwise:
  // kv_indptr int32[rows + 1], kv_indices int32 (int64 with csr_int64) of which the first
  // csr_capacity entries (C_s, the plan's rows) are the step's. device_steps mode: step 0's;
  // step s is at csr_kv_indptr + s * csr_kv_indptr_stride and at csr_kv_indices + s *
  // csr_kv_indices_stride elements, its capacity csr_capacity + s * csr_capacity_growth.
  const std::int32_t* csr_kv_indptr = nullptr;
  const void* csr_kv_indices = nullptr;
  bool csr_int64 = false;
  std::int64_t csr_capacity = 0;
  std::int64_t csr_capacity_growth = 0;    // max_rows: C_(s+1) - C_s
  std::int64_t csr_kv_indptr_stride = 0;   // max_rows + 1
  std::int64_t csr_kv_indices_stride = 0;  // device_steps: C_(num_steps - 1); else 0

  sparse_view sparse;
};

// The verify section of the arena (config.verify_tokens > 0; docs/verify.md "Plan and graphs"):
// what the target's verify forward reads for a bucket, every pointer into the arena. Its tables
// are verify_tables (verify_metadata.hpp), the kernels' own type: the FA3 cascade pointers are
// null without FA3 in the plan's formats, the FlashInfer ones without CSR; the capacities are
// the bucket's exact ones (verify_exact_tables), the strides the plan's (prefix rows
// ceil(M / ps), expand rows D). Vectors hold the plan's largest bucket; a bucket's launch
// writes its first rows only.
struct verify_view : verify_tables {
  executor* ex = nullptr;          // set by the driver that calls the forward (null otherwise)
  device_stream stream = nullptr;  // that executor's stream (null on the host executor)
  std::int32_t bucket = 0;         // requests (padded ones included)
  std::int32_t draft_tokens = 0;   // D: queries per request
  std::int32_t page_size = 0;      // of the FA3 prefix table
  std::int32_t max_seq_len = 0;    // M = max_context_len
  // The staged round (padded to the bucket): the same static inputs as the draft steps'.
  const std::int32_t* real_batch = nullptr;      // [1]
  const std::int32_t* req_pool_index = nullptr;  // [bucket]
  const std::int32_t* seq_len = nullptr;         // [bucket], without the D verify tokens
  // verify_scratch_words(B, D) int64 words, and the section's verify_guard_count guard words.
  std::int64_t* scratch = nullptr;
  guard_word* guard = nullptr;
};

// The draft-extend section of the arena (config.draft_extend; docs/extend-graphs.md): what the
// draft model's extend forward reads for a bucket, every pointer into the arena. Its tables are
// extend_tables (extend_metadata.hpp), the kernels' own type: the tokens layout always, FA3's
// pointers null without FA3 in the plan's formats, the CSR prefix and full ones without CSR;
// the capacities are the bucket's exact ones (extend_exact_tables), the page-table stride the
// plan's ceil((M + W) / ps). Vectors hold the plan's largest bucket; a bucket's launch writes
// its first rows only.
struct extend_view : extend_tables {
  executor* ex = nullptr;          // set by the driver that calls the forward (null otherwise)
  device_stream stream = nullptr;  // that executor's stream (null on the host executor)
  std::int32_t bucket = 0;         // requests (padded ones included)
  std::int32_t extend_tokens = 0;  // W: query tokens per request
  std::int32_t page_size = 0;      // of the FA3 page table
  std::int32_t max_seq_len = 0;    // M = max_context_len
  // The staged round (padded to the bucket): the verify round's requests, seq_len without the
  // window, and the accepted lengths, [bucket] in [0, W] (staged, or written on the device by
  // the engine's acceptance before the extend metadata runs).
  const std::int32_t* real_batch = nullptr;      // [1]
  const std::int32_t* req_pool_index = nullptr;  // [bucket]
  const std::int32_t* seq_len = nullptr;         // [bucket]
  std::int32_t* accept_len = nullptr;            // [bucket]
  // extend_scratch_words(B) int64 words, and the section's extend_guard_count guard words.
  std::int64_t* scratch = nullptr;
  guard_word* guard = nullptr;
};

class draft_buffers {
 public:
  draft_buffers() = default;
  // Throws invalid_argument ("arena") when base is null or not arena_alignment-aligned.
  draft_buffers(const specgraph::plan& p, void* base);

  const specgraph::plan& plan() const noexcept { return *plan_; }
  unsigned char* base() const noexcept { return base_; }
  std::size_t bytes() const noexcept { return plan_->total_bytes; }

  // Static inputs.
  std::int32_t* real_batch() const noexcept { return at<std::int32_t>(layout().real_batch); }
  // The round's control words: the device step counter (the depth run, after a round),
  // the depth limit, the continue threshold and the WHILE bodies the condition has counted.
  std::int32_t* device_step() const noexcept { return at<std::int32_t>(layout().device_step); }
  std::int32_t* max_depth() const noexcept { return at<std::int32_t>(layout().max_depth); }
  float* min_confidence() const noexcept { return at<float>(layout().min_confidence); }
  std::int32_t* iterations() const noexcept { return at<std::int32_t>(layout().iterations); }
  // The round's progress word (round_progress, guard.hpp; docs/metadata.md section 11).
  std::int32_t* progress() const noexcept { return at<std::int32_t>(layout().progress); }
  float* confidence() const noexcept { return at<float>(layout().confidence); }
  std::int32_t* req_pool_index() const noexcept {
    return at<std::int32_t>(layout().req_pool_index);
  }
  std::int32_t* seq_len() const noexcept { return at<std::int32_t>(layout().seq_len); }
  std::int64_t* out_cache_loc() const noexcept { return at<std::int64_t>(layout().out_cache_loc); }
  // Prefix metadata.
  std::int32_t* last_page_len() const noexcept { return at<std::int32_t>(layout().last_page_len); }
  std::int32_t* prefix_seqlen() const noexcept { return at<std::int32_t>(layout().prefix_seqlen); }
  std::int32_t* prefix_page_table() const noexcept {
    return at<std::int32_t>(layout().prefix_page_table);
  }
  std::int32_t* cu_seqlens_q() const noexcept { return at<std::int32_t>(layout().cu_seqlens_q); }
  std::int32_t* prefix_refused() const noexcept {
    return at<std::int32_t>(layout().prefix_refused);
  }
  // [max_bucket] per-request high-water marks of the prefix table, then [max_bucket] scratch.
  std::int32_t* prefix_high_water() const noexcept {
    return at<std::int32_t>(layout().prefix_high_water);
  }
  // Step s's expand metadata; throws invalid_argument ("step") outside [0, num_steps).
  std::int32_t* expand_page_table(std::int32_t step) const;
  std::int32_t* expand_cache_seqlen(std::int32_t step) const;
  // CSR draft-decode indices (formats csr or both; docs/csr.md); null without CSR.
  std::int32_t* csr_kv_indptr() const noexcept {
    return layout().csr_kv_indices.empty() ? nullptr : at<std::int32_t>(layout().csr_kv_indptr);
  }
  // Step s's kv_indices, int32 or int64 by config.csr_int64; throws invalid_argument ("step",
  // "formats") outside [0, num_steps) or without CSR.
  void* csr_kv_indices(std::int32_t step) const;
  std::int32_t* csr_scratch() const noexcept {
    return layout().csr_kv_indices.empty() ? nullptr : at<std::int32_t>(layout().csr_scratch);
  }
  // Guard words, plan_layout::guard_count of them.
  guard_word* guards() const noexcept { return at<guard_word>(layout().guards); }

  // Everything a forward reads for graph(bucket, step), with ex/stream null. Throws
  // invalid_argument for a step outside [0, num_steps) or a bucket that is not planned.
  step_view view(std::int32_t bucket, std::int32_t step) const;
  sparse_view sparse() const;
  // The verify section for `bucket` (0: the largest), with ex/stream null. Throws
  // invalid_argument ("verify_tokens") when the plan has no verify section, or ("bucket") for an
  // unplanned bucket.
  verify_view verify(std::int32_t bucket = 0) const;
  // The draft-extend section for `bucket` (0: the largest), with ex/stream null. Throws
  // invalid_argument ("draft_extend") when the plan has no draft-extend section, or ("bucket")
  // for an unplanned bucket.
  extend_view extend(std::int32_t bucket = 0) const;
  // The round section for `bucket` (0: the largest): acceptance, commit and next-round params
  // with the bucket's exact capacities, the engine's tables and ring left unset. Throws
  // invalid_argument ("round_on_device") when the plan has no round section, or ("bucket") for
  // an unplanned bucket. No stream, no device access.
  round_view round(std::int32_t bucket = 0) const;

 private:
  const plan_layout& layout() const noexcept { return plan_->layout; }
  template <class T>
  T* at(std::size_t offset) const noexcept {
    return reinterpret_cast<T*>(base_ + offset);  // NOLINT: typed views of the arena
  }

  const specgraph::plan* plan_ = nullptr;
  unsigned char* base_ = nullptr;
};

}  // namespace specgraph
