// Planning: every static buffer a draft round touches, sized exactly, in one arena.
//
// make_plan() runs on the host, allocates nothing and may be called at any time. It produces
// (a) a typed layout: the byte offset of every buffer as a field, per step for per-step buffers
// and per stage kind for the sparse ones, which is all the operations and drivers use, and
// (b) the same buffers as a named list for reports (report_text, report_json). The arena is
// `total_bytes` bytes at an `arena_alignment`-aligned base: memory specgraph allocates
// (draft_runtime) or memory the engine supplies (draft_buffers over a pointer, e.g. a tensor in
// its graph memory pool). Every offset is fixed for the plan's lifetime, so every pointer baked
// into a captured graph stays valid while the arena does.
//
// Ranges (docs/metadata.md section 8): every field below is checked by validate() against the
// limits in limits.hpp, chosen so that every product and sum the plan and the kernels compute
// fits the type it is computed in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "specgraph/extend_metadata.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/round_fields.hpp"

namespace specgraph {

// Dual-chunk sparse attention settings (docs/metadata.md section 6).
struct sparse_config {
  std::int32_t heads = 0;                   // [1, limits::max_heads]
  std::vector<std::int32_t> vertical_size;  // per head, [0, limits::max_sparse_size]
  std::vector<std::int32_t> slash_size;     // per head, [0, limits::max_sparse_size]
  std::int32_t max_keys = 0;                // the longest key range a stage sees, [1, max_keys]
};

// Which draft-decode metadata a plan holds (docs/csr.md): FA3's page tables (the prefix and
// expand tables draft_runtime runs), the CSR kv_indptr / kv_indices that FlashInfer and Triton
// read, or both. draft_runtime writes, in every replay mode, the formats the plan holds.
enum class metadata_formats : std::int32_t { fa3 = 0, csr = 1, both = 2 };
const char* to_string(metadata_formats f) noexcept;

struct draft_config {
  std::int32_t max_batch = 0;        // largest real batch (requests) per round
  std::int32_t topk = 0;             // draft branches per request
  std::int32_t num_steps = 0;        // draft forwards per round: expand tables, graphs
  std::int32_t page_size = 0;        // KV page size (tokens)
  std::int32_t max_context_len = 0;  // columns of req_to_token
  std::int32_t pool_rows = 0;        // rows of req_to_token (request pool)
  // KV pool size in slots; every slot id must be < kv_slots, and every page id
  // (kv_slots - 1) / page_size must fit the int32 page tables.
  std::int64_t kv_slots = 0;
  // Batch-size buckets, strictly increasing, each <= max_batch, the last == max_batch;
  // empty = default_buckets(max_batch).
  std::vector<std::int32_t> buckets;
  std::optional<sparse_config> sparse;
  // Checked mode: after each round the guard words are read back (a synchronisation) and any
  // violation raises guard_violation; kernels also check the branch layout of real rows.
  bool checked = false;
  // Also capture one whole-round graph per bucket (all num_steps steps in one graph), so a full
  // round is a single graph launch instead of num_steps; run_round(num_steps) then uses it. The
  // step graphs stay for the steps shorter (adaptive) rounds replay, 0 .. num_steps - 2: the
  // last step runs only inside the round graph (replay(num_steps - 1) is refused), so the
  // graphs per bucket stay num_steps, each of them replayed.
  bool round_graphs = false;
  // Device step counter (docs/device-rounds.md): one graph per bucket holds one step; the
  // kernels read the step from a device word the graph advances, so the same graph is replayed
  // depth times. The expand table is one buffer num_steps + 1 wide, but step s may still write
  // only its first s + 2 columns and reads only d = s + 1 slots. Captures buckets graphs instead
  // of buckets x num_steps. Not with round_graphs.
  bool device_steps = false;
  // With device_steps: also one round graph per bucket, a WHILE node around the step, whose
  // depth the device decides (run_round_on_device): it continues while the step is below the
  // round's max_depth and any real row's confidence reaches the round's threshold.
  bool device_depth = false;
  metadata_formats formats = metadata_formats::fa3;
  // CSR kv_indices as int64 (Triton's) instead of int32 (FlashInfer's).
  bool csr_int64 = false;
  // Slots per branch row of out_cache_loc ([batch][topk][slot_stride]), the row stride staging
  // copies and the expand kernels read at; 0 = num_steps (make_plan fills it in), else in
  // [num_steps, limits::max_slot_stride]. SGLang runs S - 1 draft forwards over rows S wide:
  // num_steps = S - 1, slot_stride = S. Step s reads only the first s + 1 slots of a row; the
  // slot_stride - num_steps extra slots are copied with the row but never read (docs/engines.md).
  std::int32_t slot_stride = 0;
  // D, the draft-tree tokens the target verifies per request (docs/verify.md), in
  // [0, max_draft_tokens]: 0 = no verify section; otherwise the arena also holds the verify
  // metadata of the largest bucket at seq_len up to max_context_len (M), exactly sized: the FA3
  // cascade tables with FA3 (formats fa3 or both), FlashInfer's indptrs, kv_indices and packed
  // mask with CSR (csr or both), their scratch and three guard words (plan_layout::verify).
  std::int32_t verify_tokens = 0;
  // With verify_tokens = W > 0: also the draft-extend section (docs/extend-graphs.md), the
  // metadata of the draft model's extend forward over each request's verify window of W tokens
  // for the largest bucket at seq_len <= max_context_len, exactly sized: the tokens layout
  // always, FA3's tables (C1) with formats fa3 or both, the CSR prefix (C2p) and full (C2f)
  // layouts with csr or both; the accepted lengths (an input), scratch and five guard words
  // (plan_layout::extend). Refused without verify_tokens (the window is the verify tree).
  bool draft_extend = false;
  // With verify_tokens = D > 0: also the round section (docs/round-graphs.md), the buffers of
  // the round after verify for the largest bucket, exactly sized: the engine-written inputs
  // (tree, draft tokens, target predictions [B][D]), the per-row state (allocated_len,
  // max_new_tokens_left), the stop token ids, the outputs of acceptance, commit and the next
  // round, the ring head, the stall word, scratch and seven guard words (plan_layout::round).
  // Refused without verify_tokens (the tree is the verify tree).
  bool round_on_device = false;
  // R, positions kept allocated past the committed length (next_round_params::reserve):
  // -1 = next_round_reserve(topk, num_steps, verify_tokens, page_size), else [0, 2^28].
  std::int32_t round_reserve = -1;
  // M, the largest committed seq_len a request may reach (the engine's context limit): a round
  // at seq_len' <= M allocates up to ceil_page(M + R), which every req_to_token row (at least
  // max_context_len wide) must hold. -1 = derived: the largest M with ceil_page(M + R) <=
  // max_context_len (refused, naming round_reserve, when that M is below 1: the reserve alone
  // does not fit). Else [1, 2^28], refused (round_max_seq_len) when ceil_page(M + R) >
  // max_context_len. Resolved in plan_layout::round.max_seq_len.
  std::int32_t round_max_seq_len = -1;
  // Stop token ids the round section holds, [0, max_stop_tokens] (commit_metadata.hpp).
  std::int32_t max_stop_tokens = 0;
};

// The common speculative-decoding bucket list: 1..8, 10..32 step 2, 40..64 step 4, 72..256
// step 8, then step 16; values above max_batch dropped and max_batch itself appended when it is
// not in the list, so every batch 1..max_batch has a bucket. max_batch in [1, limits::max_batch].
std::vector<std::int32_t> default_buckets(std::int32_t max_batch);

// Throws invalid_argument naming the field ("topk", "buckets[3]", "sparse.vertical_size[1]"),
// its value and the limit.
void validate(const draft_config& c);

enum class dtype { int32, int64, float32, guard, uint8 };
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

// Stage kinds of dual-chunk sparse attention, in guard and layout order.
inline constexpr std::int32_t sparse_stage_kinds = 3;  // intra, succ, inter

// The typed layout: byte offsets into the arena, and the widths the kernels need. What the
// operations use after planning; no name is looked up on any path after make_plan().
struct plan_layout {
  // Static inputs, written per round by staging, packed back to back (4-byte aligned) so host
  // staging copies them with one transfer: the real batch, the round's control words, then the
  // per-request indices.
  std::size_t real_batch = 0;      // int32[1]
  std::size_t device_step = 0;     // int32[1]: the step the kernels are at (device_steps mode),
                                   // reset to 0 by staging; after a round, the depth it ran
  std::size_t max_depth = 0;       // int32[1]: the round's depth limit (device_depth mode)
  std::size_t min_confidence = 0;  // float32[1]: the round's continue threshold (device_depth)
  std::size_t iterations = 0;      // int32[1]: WHILE bodies run this round, counted by the
                                   // condition (device_depth), reset to 0 by staging
  std::size_t progress = 0;        // int32[1]: the round's progress (round_progress, guard.hpp):
                                   // staging and begin_round set it to staged, setup_round
                                   // to set up (docs/metadata.md section 11)
  std::size_t req_pool_index = 0;  // int32[max_bucket]
  std::size_t seq_len = 0;         // int32[max_bucket]
  std::size_t small_inputs_bytes = 0;  // real_batch .. end of seq_len
  std::size_t out_cache_loc = 0;       // int64[max_bucket][topk][slot_stride]
  // Step-invariant prefix metadata (computed once per round).
  std::size_t last_page_len = 0;      // int32[max_bucket]
  std::size_t prefix_seqlen = 0;      // int32[max_bucket]
  std::size_t prefix_page_table = 0;  // int32[max_bucket][prefix_capacity]
  std::int32_t prefix_capacity = 0;   // ceil(max_context_len / page_size), also the row stride
  std::size_t cu_seqlens_q = 0;       // int32[max_bucket + 1]
  std::size_t prefix_refused = 0;     // int32[max_bucket]: the prefix kernels' scratch
  // int32[2][max_bucket]: per request the leading cells of its prefix row that may be non-zero
  // (the high-water mark), then the prefix kernels' snapshot of them (fa3 plans only).
  std::size_t prefix_high_water = 0;
  // Per step s: expand page table int32[max_rows][expand_stride[s]] (s + 2 columns writable)
  // and cache_seqlen int32[max_rows]. Per-step mode: a buffer per step, s + 2 wide; device_steps
  // mode: every step shares one buffer num_steps + 1 wide.
  std::vector<std::size_t> expand_page_table;    // [num_steps]
  std::vector<std::int32_t> expand_stride;       // [num_steps]
  std::vector<std::size_t> expand_cache_seqlen;  // [num_steps]
  // float32[max_rows]: one confidence per query row, written by the engine's forward (the
  // device_depth continue signal).
  std::size_t confidence = 0;
  // Sparse (all zero without a sparse config).
  struct sparse_inputs {
    std::size_t vertical = 0, vertical_count = 0, vertical_size = 0;  // [heads][stride], [heads]
    std::size_t slash = 0, slash_count = 0, slash_size = 0;
    std::int32_t vertical_stride = 0, slash_stride = 0;
  } sparse_in;
  struct sparse_stage_buffers {
    std::size_t vertical = 0, vertical_count = 0;  // int32[heads][vertical_capacity], [heads]
    std::size_t slash = 0, slash_count = 0;        // int32[heads][slash_capacity], [heads]
    std::int32_t vertical_capacity = 0, slash_capacity = 0;
  } sparse_stage[sparse_stage_kinds];
  // CSR draft-decode indices (formats csr or both; docs/csr.md): kv_indptr int32[num_steps]
  // [max_rows + 1]; per step s kv_indices int32 or int64 [csr_capacity[s]], exactly
  // C_s = max_rows * (max_context_len + s + 1); the kernels' scratch int32[3 * max_bucket].
  // Per-step mode: a buffer per step. device_steps mode: one buffer [num_steps][stride], stride
  // = C_(num_steps - 1), step s at s * stride (its first C_s entries writable).
  std::size_t csr_kv_indptr = 0;
  std::vector<std::size_t> csr_kv_indices;  // [num_steps] (empty without CSR)
  std::vector<std::int64_t> csr_capacity;   // [num_steps]
  std::int64_t csr_kv_indices_stride = 0;   // elements between steps (device_steps), else 0
  std::size_t csr_scratch = 0;
  std::int32_t guard_csr_base = 0;  // guard_csr(s) = guard_csr_base + s
  std::int32_t guard_csr(std::int32_t step) const { return guard_csr_base + step; }
  bool has_fa3 = true;
  // The verify section (config.verify_tokens > 0; docs/verify.md "Plan and graphs"): byte
  // offsets of the target-verify metadata of the largest bucket B at seq_len <= M =
  // max_context_len, each exactly the size a full bucket at seq_len = M fills. FA3 (has_fa3):
  // prefix page_table int32[B][prefix_capacity], cache_seqlen [B], cu_seqlens_q/k [B + 1],
  // expand page_table int32[B * D][D], cache_seqlen [B * D], cu_seqlens_q/k [B * D + 1].
  // FlashInfer (CSR): qo/kv/mask/packed indptrs int32[B + 1], kv_indices int32[B * (M + D)],
  // kv_last_page_len [B], packed mask uint8[B * ceil(D * (M + D) / 8)]. Offsets of a layout the
  // plan does not hold are 0. Guard words guard_base .. guard_base + verify_guard_count - 1
  // (bad input and the prefix table, kv_indices, the packed mask).
  struct verify_section {
    std::int32_t draft_tokens = 0;     // D; 0: no section (everything below is 0)
    std::int32_t prefix_capacity = 0;  // ceil(M / page_size), also the prefix row stride
    std::int64_t kv_indices_capacity = 0;
    std::int64_t packed_mask_capacity = 0;  // bytes
    std::int64_t scratch_words = 0;         // verify_scratch_words(B, D), int64
    std::size_t prefix_page_table = 0, prefix_cache_seqlen = 0, prefix_cu_seqlens_q = 0,
                prefix_cu_seqlens_k = 0;
    std::size_t expand_page_table = 0, expand_cache_seqlen = 0, expand_cu_seqlens_q = 0,
                expand_cu_seqlens_k = 0;
    std::size_t qo_indptr = 0, kv_indptr = 0, kv_indices = 0, kv_last_page_len = 0, mask_indptr = 0,
                packed_mask = 0, packed_mask_indptr = 0;
    std::size_t scratch = 0;
    std::size_t begin = 0, end = 0;  // the section's bytes: [begin, end)
    std::int32_t guard_base = 0;
    bool fa3 = false, flashinfer = false;
    bool enabled() const { return draft_tokens > 0; }
  } verify;
  // The draft-extend section (config.draft_extend; docs/extend-graphs.md): byte offsets of the
  // draft-extend metadata of the largest bucket B at seq_len <= M with window W = verify_tokens,
  // by extend_field_names index (extend_metadata.hpp; 0 for a layout the plan does not hold),
  // each exactly the size a full bucket at seq_len = M fills (extend_exact_tables), and its
  // input: accept_len int32[B], the accepted tokens of each request (staged, or written by the
  // engine's acceptance on the device). Guard words guard_base .. guard_base +
  // extend_guard_count - 1 (bad input, the page table, prefix and full kv_indices, accept
  // lengths of 0).
  struct extend_section {
    std::int32_t extend_tokens = 0;  // W; 0: no section (everything below is 0)
    bool tokens = false, fa3 = false, prefix = false, full = false;  // the layouts held
    std::int32_t page_capacity = 0;  // ceil((M + W) / page_size), also the page-table stride
    std::int64_t prefix_kv_capacity = 0, full_kv_capacity = 0;  // B * M, B * (M + W)
    std::int64_t scratch_words = 0;                             // extend_scratch_words(B), int64
    std::size_t field[extend_field_count] = {};                 // by extend_field_names index
    std::size_t accept_len = 0;
    std::size_t scratch = 0;
    std::size_t begin = 0, end = 0;  // the section's bytes: [begin, end)
    std::int32_t guard_base = 0;
    bool enabled() const { return extend_tokens > 0; }
  } extend;
  // The round section (config.round_on_device; docs/round-graphs.md): byte offsets of the
  // buffers of the round after verify for the largest bucket B (D = verify_tokens, S =
  // num_steps + 1), by round_field_names index (round_ops.hpp), each exactly sized for B
  // (round_field_elements). The state the next round reads is the draft section's staged
  // req_pool_index, seq_len and out_cache_loc themselves: acceptance and the commit read the
  // committed length from the staged seq_len, the next round writes its seq_len and draft slots
  // back into them. Guard words guard_base .. guard_base + round_guard_count - 1 (acceptance 2,
  // commit 2, next round 3).
  struct round_section {
    std::int32_t draft_tokens = 0;   // D; 0: no section (everything below is 0)
    std::int32_t reserve = 0;        // R, resolved (config.round_reserve or the default)
    std::int32_t max_seq_len = 0;    // M, resolved (config.round_max_seq_len or the derived one)
    std::int32_t stop_capacity = 0;  // config.max_stop_tokens
    std::size_t field[round_field_count] = {};  // by round_field_names index
    std::size_t begin = 0, end = 0;             // the section's bytes: [begin, end)
    std::int32_t guard_base = 0;
    bool enabled() const { return draft_tokens > 0; }
  } round;
  // Guard words: one per launch site (see the guard_* indices below).
  std::size_t guards = 0;
  std::int32_t guard_count = 0;
  // The last guard word, "round.order": an op run out of the round's order (violation_kind
  // order). Reset when a round starts (staging, begin_round), never by setup_round.
  std::int32_t guard_order = 0;

  // Guard word indices: staging, prefix, expand step s, sparse stage kind k.
  static constexpr std::int32_t guard_stage = 0;
  static constexpr std::int32_t guard_prefix = 1;
  static constexpr std::int32_t guard_expand(std::int32_t step) { return 2 + step; }
  std::int32_t guard_sparse(std::int32_t kind) const { return 2 + num_steps + kind; }
  std::int32_t num_steps = 0;
};

// What the same configuration costs when sized the way engines size it today: the prefix page
// table max_context_len columns wide and one copy per step; expand tables num_steps wide.
struct engine_sizing {
  std::size_t prefix_table_bytes = 0;
  std::size_t expand_table_bytes = 0;
  // CSR: num_steps rows of max_bucket * topk * max_context_len entries (SGLang's draft buffers).
  std::size_t csr_indices_bytes = 0;
  std::size_t total_bytes = 0;
};

struct plan {
  draft_config config;               // validated, with buckets filled in
  plan_layout layout;                // typed offsets (what the operations use)
  std::vector<buffer_spec> buffers;  // the same buffers by name, in arena order (reports)
  std::size_t total_bytes = 0;
  engine_sizing today;  // the comparison sizing
  std::size_t our_prefix_table_bytes = 0;
  std::size_t our_expand_table_bytes = 0;
  // The CSR kv_indices bytes: the sum of the exact C_s (0 without CSR); with device_steps
  // num_steps x C_(num_steps - 1).
  std::size_t our_csr_indices_bytes = 0;
  // The expand tables and cache_seqlens in each mode, whatever this plan's mode (reports).
  std::size_t per_step_expand_bytes = 0;
  std::size_t device_steps_expand_bytes = 0;
  // The verify section's bytes (0 without it), and the custom mask engines reserve for the same
  // verify forward: max_batch * D * max_context_len bytes, one byte per cell (SGLang).
  std::size_t our_verify_bytes = 0;
  std::size_t engine_verify_mask_bytes = 0;
  // SGLang's FlashInfer verify kv_indices: max_num_tokens (max_batch * D) x max_context_len int32.
  std::size_t engine_verify_kv_indices_bytes = 0;
  // The draft-extend section's bytes (0 without it), and what SGLang 0.5.23 reserves for the
  // same forward at max_batch and max_context_len: FA3's page table (int32, ceil(M / ps) wide),
  // Triton's int64 kv_indices, FlashInfer's int32 kv_indices with its unread one-byte mask, the
  // CSR ones max_batch * W * max_context_len entries each (extend_engine_reservations).
  std::size_t our_extend_bytes = 0;
  std::size_t engine_extend_fa3_bytes = 0;
  std::size_t engine_extend_triton_bytes = 0;
  std::size_t engine_extend_flashinfer_bytes = 0;
  // The round section's bytes (0 without it), and what SGLang 0.5.23 keeps for the same
  // buffers where the spec fixes it exactly: its KV move pairs sized B x S (padding included)
  // against our B x num_steps, and its standing reserve 2 * R1 against R1 per request.
  std::size_t our_round_bytes = 0;
  std::int64_t round_kv_move_pairs = 0, engine_kv_move_pairs = 0;
  std::int64_t round_reserve_per_request = 0, engine_reserve_per_request = 0;

  std::int32_t max_bucket() const { return config.buckets.back(); }
  std::int32_t max_rows() const { return max_bucket() * config.topk; }
  // The smallest bucket >= batch; throws invalid_argument for batch < 1 or > the largest bucket.
  std::int32_t bucket_for(std::int32_t batch) const;
  // The bucket a round of `batch` real requests (0: an idle rank, every row padding) replays:
  // `bucket` when the caller chose one (data-parallel attention: the bucket of the world's
  // largest batch, after the engine's all-reduce), which must be a planned bucket >= batch;
  // 0 = the smallest bucket >= batch (the first bucket for batch 0). Throws invalid_argument
  // ("batch" outside [0, max_batch], "bucket" naming the value, the table and the batch).
  std::int32_t round_bucket(std::int32_t batch, std::int32_t bucket) const;
  // Whether `bucket` is one of the planned buckets.
  bool has_bucket(std::int32_t bucket) const;

  // For reports and tests only (a name search): the buffer named `name` for `step`
  // (all_steps for step-invariant ones); throws specgraph::error when absent.
  const buffer_spec& find(const std::string& name, std::int32_t step = all_steps) const;
  std::string report_text() const;  // a table: buffer, step, shape, dtype, capacity, offset, bytes
  std::string report_json() const;
  std::string csr_report_line() const;  // report_text's CSR line
  // report_text's verify line (empty without a verify section): the section's buffers and bytes
  // against the engines' mask reservation.
  std::string verify_report_line() const;
  // report_text's draft-extend line (empty without the section): its bytes per layout against
  // the engines' reservations.
  std::string extend_report_line() const;
  // report_text's round line (empty without the section): its bytes, the KV move pairs and the
  // standing reserve against SGLang's.
  std::string round_report_line() const;
};

// Validates and plans. Throws invalid_argument naming the field when the configuration is out of
// range or its arena would exceed limits::max_arena_bytes.
plan make_plan(const draft_config& config);

}  // namespace specgraph
