// Planning: every static buffer a draft round touches, sized exactly, in one arena.
//
// plan() runs on the host, allocates nothing and may be called at any time. The runtime carves
// its single arena allocation by the plan's byte offsets and never reallocates it while graphs
// exist, so every pointer baked into a captured graph stays valid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace specgraph {

// Dual-chunk sparse attention settings (draft-metadata.md section 6).
struct sparse_config {
  std::int32_t heads = 0;
  std::vector<std::int32_t> vertical_size;  // per head
  std::vector<std::int32_t> slash_size;     // per head
  std::int32_t max_keys = 0;                // the longest key range a stage sees (K)
};

struct draft_config {
  std::int32_t max_batch = 0;        // largest real batch (requests) per round
  std::int32_t topk = 0;             // draft branches per request
  std::int32_t num_steps = 0;        // draft steps per round
  std::int32_t page_size = 0;        // KV page size (tokens)
  std::int32_t max_context_len = 0;  // columns of req_to_token
  std::int32_t pool_rows = 0;        // rows of req_to_token (request pool)
  std::int64_t kv_slots = 0;         // KV pool size in slots; every slot id must be < kv_slots
  // Batch-size buckets, strictly increasing; empty = default_buckets(max_batch).
  std::vector<std::int32_t> buckets;
  std::optional<sparse_config> sparse;
  // Checked mode: after each round the guard words are read back (a synchronisation) and any
  // violation raises guard_violation; kernels also check the branch layout of real rows.
  bool checked = false;
  // Also capture one whole-round graph per bucket (all num_steps steps in one graph), so a full
  // round is a single graph launch instead of num_steps; run_round(num_steps) then uses it.
  // Doubles the graphs captured; the per-step graphs stay (adaptive depth, replay(s)).
  bool round_graphs = false;
};

// The common speculative-decoding bucket list: 1..8, 10..32 step 2, 40..64 step 4, 72..256
// step 8, then step 16; values above max_batch dropped and max_batch itself appended when it is
// not in the list, so every batch 1..max_batch has a bucket.
std::vector<std::int32_t> default_buckets(std::int32_t max_batch);

// Throws invalid_argument naming the field ("topk", "buckets[3]", "sparse.vertical_size[1]").
void validate(const draft_config& c);

enum class dtype { int32, int64, guard };
const char* to_string(dtype t) noexcept;
std::size_t size_of(dtype t) noexcept;

inline constexpr std::int32_t all_steps = -1;
inline constexpr std::size_t arena_alignment = 256;

struct buffer_spec {
  std::string name;                 // e.g. "expand.page_table"
  std::int32_t step = all_steps;    // the draft step, or all_steps for step-invariant buffers
  std::vector<std::int64_t> shape;  // e.g. {max_bucket * topk, step + 2}
  dtype type = dtype::int32;
  std::int64_t capacity = 0;  // writable columns per row (the last dimension)
  std::size_t offset = 0;     // byte offset in the arena, a multiple of alignment
  std::size_t bytes = 0;
  std::size_t alignment = arena_alignment;
};

// What the same configuration costs when sized the way engines size it today: the prefix page
// table max_context_len columns wide and one copy per step; expand tables num_steps wide.
struct engine_sizing {
  std::size_t prefix_table_bytes = 0;
  std::size_t expand_table_bytes = 0;
  std::size_t total_bytes = 0;
};

struct plan {
  draft_config config;               // validated, with buckets filled in
  std::vector<buffer_spec> buffers;  // in arena order
  std::size_t total_bytes = 0;
  engine_sizing today;  // the comparison sizing
  std::size_t our_prefix_table_bytes = 0;
  std::size_t our_expand_table_bytes = 0;

  std::int32_t max_bucket() const { return config.buckets.back(); }
  // The buffer named `name` for `step` (all_steps for step-invariant ones); throws when absent.
  const buffer_spec& find(const std::string& name, std::int32_t step = all_steps) const;
  // The smallest bucket >= batch; throws invalid_argument for batch < 1 or > the largest bucket.
  std::int32_t bucket_for(std::int32_t batch) const;

  std::string report_text() const;  // a table: buffer, step, shape, dtype, capacity, offset, bytes
  std::string report_json() const;
};

plan make_plan(const draft_config& config);

// Guard words in the "guards" buffer: one per launch site.
inline std::int32_t guard_index_prefix() {
  return 0;
}
inline std::int32_t guard_index_expand(std::int32_t step) {
  return 1 + step;
}
inline std::int32_t guard_index_sparse(const draft_config& c, std::int32_t stage_kind) {
  return 1 + c.num_steps + stage_kind;
}

}  // namespace specgraph
