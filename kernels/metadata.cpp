// Host-side validation and launchers of the metadata kernels (metadata.hpp).
#include "specgraph/metadata.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "device/checks.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/expand_page_table.hpp"
#include "kernels/prefix_metadata.hpp"
#include "kernels/sparse_indices.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/limits.hpp"

namespace specgraph {
namespace {

using detail::at_least;
using detail::at_most;
using detail::between;
using detail::in_range;
using detail::indexed;
using detail::not_null;

// Launch on an executor / run inline on the host: validation first, then the row kernel.
template <class K>
void launch_builtin(executor& ex, const typename K::params& p, cuda_rows_fn cuda_run) {
  validate(p);
  ex.launch(make_kernel_launch<K>(p, K::rows(p), cuda_run));
}
template <class K>
void run_on_host(const typename K::params& p) {
  validate_contents_host(p);
  host_run_rows<K>(&p, K::rows(p));
}

// Strides and capacities of the int32 tables: at most 2^31 columns, so row * stride (rows below
// 2^24) stays inside int64 and every column index fits int32.
constexpr std::int64_t max_columns = std::int64_t{1} << 31;

void rows_within_limit(std::int64_t batch, std::int64_t topk) {
  // Both factors are >= 1 and int32 here: the product fits int64.
  SPECGRAPH_EXPECTS(batch * topk <= limits::max_rows, "batch",
                    std::to_string(batch) + " * topk " + std::to_string(topk) + " = " +
                        std::to_string(batch * topk) + " rows exceeds the limit " +
                        std::to_string(limits::max_rows));
}

}  // namespace

const char* to_string(stage_kind k) noexcept {
  switch (k) {
    case stage_kind::intra: return "intra";
    case stage_kind::succ: return "succ";
    case stage_kind::inter: return "inter";
  }
  return "unknown";
}

std::int32_t stage_key_length(const sparse_stage& s) noexcept {
  return kernels::sparse_stage_kernel::key_length(s);
}

std::vector<sparse_stage> sparse_stages(std::int32_t seq_len, std::int32_t chunk_len) {
  between("seq_len", seq_len, 1, limits::max_keys, "the limit");
  between("chunk_len", chunk_len, 1, limits::max_keys, "the limit");
  std::vector<sparse_stage> stages;
  // int64: prev + chunk_len and 2 * chunk_len reach 2^31 for values near the limits.
  const std::int64_t chunk = chunk_len;
  for (std::int64_t prev = 0; prev < seq_len; prev += chunk) {
    sparse_stage s;
    s.prev = static_cast<std::int32_t>(prev);
    s.end = static_cast<std::int32_t>(std::min<std::int64_t>(prev + chunk, seq_len));
    s.chunk_len = chunk_len;
    s.chunk_q_len = s.end - s.prev;
    s.kind = stage_kind::intra;
    stages.push_back(s);
    if (prev - chunk >= 0) {
      s.kind = stage_kind::succ;
      stages.push_back(s);
    }
    if (prev - 2 * chunk >= 0) {
      s.kind = stage_kind::inter;
      stages.push_back(s);
    }
  }
  return stages;
}

std::int32_t sparse_capacity(const std::vector<std::int32_t>& sizes, std::int32_t keys) {
  std::int32_t cap = 0;
  for (std::size_t h = 0; h < sizes.size(); ++h) {
    at_least(indexed("sizes", static_cast<std::int64_t>(h)), sizes[h], 0);
    cap = std::max(cap, std::min(sizes[h], keys));
  }
  return std::max(cap, 1);  // a buffer of at least one entry, so capacity is never 0
}

// ---- expand -------------------------------------------------------------------------------
void validate(const expand_params& p) {
  between("page_size", p.page_size, 1, limits::max_page_size, "the limit");
  between("topk", p.topk, 1, limits::max_topk, "the limit");
  at_least("batch", p.batch, 1);
  rows_within_limit(p.batch, p.topk);
  // Packed rows (request stride 0) hold the slots read; an engine's tensor read in place
  // (request stride set) was checked against its shape by the caller (check_engine_inputs).
  const bool packed = p.cache_loc_request_stride == 0;
  if (packed) {
    between("cache_loc_stride", p.cache_loc_stride, 1, max_columns, "the limit");
  } else {
    between("cache_loc_stride", p.cache_loc_stride, 0, limits::max_input_stride, "the limit");
    between("cache_loc_request_stride", p.cache_loc_request_stride, 0, limits::max_input_stride,
            "the limit");
  }
  between("cache_loc.stride", p.cache_loc.stride, 0, limits::max_input_stride, "the limit");
  const std::int64_t row_slots = packed ? p.cache_loc_stride : limits::max_num_steps;
  if (p.device_step != nullptr) {
    // The step is read on the device: the strides must hold the widest step.
    between("device_steps", p.device_steps, 1, limits::max_num_steps, "the limit");
    if (packed) at_least("cache_loc_stride", p.cache_loc_stride, p.device_steps);
    between("slots_read", p.slots_read, 0, row_slots, "the cache_loc row stride");
    between("page_table_stride", p.page_table_stride, static_cast<std::int64_t>(p.device_steps) + 1,
            max_columns, "the limit");
  } else {
    between("decode_length", p.decode_length, 1, limits::max_num_steps, "the limit");
    at_least("slots_read", p.slots_read, 1);
    at_most("slots_read", p.slots_read, row_slots, "the cache_loc row stride");
    at_least("capacity", p.capacity, 1);
    between("page_table_stride", p.page_table_stride, p.capacity, max_columns, "the limit");
  }
  at_least("slot_limit", p.slot_limit, 1);
  not_null("cache_loc", p.cache_loc.data);
  not_null("last_page_len", p.last_page_len);
  not_null("page_table", p.page_table);
  not_null("cache_seqlen", p.cache_seqlen);
  not_null("guard", p.guard);
}

void validate_contents_host(const expand_params& p) {
  validate(p);
  for (std::int32_t r = 0; r < p.batch; ++r) {
    in_range(indexed("last_page_len", r), p.last_page_len[r], 0, p.page_size, "page_size");
  }
  std::int32_t slots_read = p.slots_read;
  if (p.device_step != nullptr) {  // host memory here: the step can be read and checked
    in_range("device_step", *p.device_step, 0, p.device_steps, "device_steps");
    if (slots_read == 0) slots_read = *p.device_step + 1;
  }
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.topk;
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int32_t j = 0; j < slots_read; ++j) {
      const std::int64_t slot = kernels::expand_page_table_kernel::slot_at(
          p, static_cast<std::int32_t>(row / p.topk), static_cast<std::int32_t>(row % p.topk), j);
      in_range(indexed("cache_loc", row, j), slot, 0, p.slot_limit, "slot_limit");
      SPECGRAPH_EXPECTS(slot / p.page_size <= limits::max_page_id, indexed("cache_loc", row, j),
                        std::to_string(slot) + " is on page " + std::to_string(slot / p.page_size) +
                            ", above the int32 page-table limit " +
                            std::to_string(limits::max_page_id));
    }
  }
}

void launch_expand_page_table(executor& ex, const expand_params& p) {
  launch_builtin<kernels::expand_page_table_kernel>(ex, p, kernels::cuda_expand_page_table());
}

void expand_page_table_host(const expand_params& p) {
  run_on_host<kernels::expand_page_table_kernel>(p);
}

// ---- prefix -------------------------------------------------------------------------------
void validate(const prefix_params& p) {
  between("page_size", p.page_size, 1, limits::max_page_size, "the limit");
  between("topk", p.topk, 1, limits::max_topk, "the limit");
  at_least("batch", p.batch, 1);
  rows_within_limit(p.batch, p.topk);
  between("pool_rows", p.pool_rows, 1, limits::max_pool_rows, "the limit");
  if (p.max_seq_len == 0) {
    between("req_to_token_stride", p.req_to_token_stride, 1, limits::max_context_len, "the limit");
  } else {
    between("max_seq_len", p.max_seq_len, 1, limits::max_context_len, "the limit");
    // A wider table (engines allocate req_to_token wider) is read at its own stride.
    between("req_to_token_stride", p.req_to_token_stride, p.max_seq_len, max_columns, "the limit");
  }
  at_least("capacity", p.capacity, 1);
  between("page_table_stride", p.page_table_stride, p.capacity, max_columns, "the limit");
  at_least("slot_limit", p.slot_limit, 1);
  not_null("req_to_token", p.req_to_token);
  not_null("req_pool_index", p.req_pool_index.data);
  not_null("seq_len", p.seq_len.data);
  between("req_pool_index.stride", p.req_pool_index.stride, 0, limits::max_input_stride,
          "the limit");
  between("seq_len.stride", p.seq_len.stride, 0, limits::max_input_stride, "the limit");
  not_null("last_page_len", p.last_page_len);
  not_null("prefix_seqlen", p.prefix_seqlen);
  not_null("page_table", p.page_table);
  not_null("cu_seqlens_q", p.cu_seqlens_q);
  not_null("guard", p.guard);
}

void validate_contents_host(const prefix_params& p) {
  validate(p);
  for (std::int32_t r = 0; r < p.batch; ++r) {
    const std::int64_t pool_row = p.req_pool_index.load(r);
    in_range(indexed("req_pool_index", r), pool_row, 0, p.pool_rows, "pool_rows");
    const std::int64_t seq_len = p.seq_len.load(r);
    at_least(indexed("seq_len", r), seq_len, 0);
    at_most(indexed("seq_len", r), seq_len,
            p.max_seq_len > 0 ? std::int64_t{p.max_seq_len} : p.req_to_token_stride,
            "max_context_len");
    const std::int32_t* tokens = p.req_to_token + pool_row * p.req_to_token_stride;
    for (std::int64_t pos = 0; pos + p.page_size <= seq_len; pos += p.page_size) {
      in_range(indexed("req_to_token", pool_row, pos), tokens[pos], 0, p.slot_limit, "slot_limit");
    }
  }
}

void launch_prefix_metadata(executor& ex, const prefix_params& p) {
  validate(p);
  not_null("refused", p.refused);
  if (p.high_water != nullptr) not_null("high_water_before", p.high_water_before);
  if (p.run_when_zero != nullptr) {
    ex.launch(
        make_kernel_launch<kernels::prefix_clear_kernel>(p, p.batch, kernels::cuda_prefix_clear()));
  } else {
    ex.fill_bytes(p.refused, 0, static_cast<std::size_t>(p.batch) * sizeof(std::int32_t));
  }
  const std::int64_t cells = kernels::prefix_check_kernel::rows(p);
  ex.launch(
      make_kernel_launch<kernels::prefix_check_kernel>(p, cells, kernels::cuda_prefix_check()));
  ex.launch(make_kernel_launch<kernels::prefix_fill_kernel>(p, cells, kernels::cuda_prefix_fill()));
}

void prefix_metadata_host(const prefix_params& p) {
  validate_contents_host(p);
  // The host computation supplies its own scratch: the caller's pointers are host memory here.
  std::vector<std::int32_t> refused(static_cast<std::size_t>(p.batch), 0);
  std::vector<std::int32_t> marks(static_cast<std::size_t>(p.batch), 0);
  prefix_params q = p;
  q.refused = refused.data();
  q.high_water_before = marks.data();
  const std::int64_t cells = kernels::prefix_check_kernel::rows(q);
  host_run_rows<kernels::prefix_check_kernel>(&q, cells);
  host_run_rows<kernels::prefix_fill_kernel>(&q, cells);
}

// ---- sparse -------------------------------------------------------------------------------
void validate(const sparse_stage_params& p) {
  between("heads", p.heads, 1, limits::max_heads, "the limit");
  between("vertical_stride", p.vertical_stride, 0, limits::max_sparse_size, "the limit");
  between("slash_stride", p.slash_stride, 0, limits::max_sparse_size, "the limit");
  between("vertical_capacity", p.vertical_capacity, 1, limits::max_sparse_size, "the limit");
  between("slash_capacity", p.slash_capacity, 1, limits::max_sparse_size, "the limit");
  const sparse_stage& s = p.stage;
  between("stage.chunk_len", s.chunk_len, 1, limits::max_keys, "the limit");
  between("stage.prev", s.prev, 0, limits::max_keys, "the limit");
  between("stage.end", s.end, static_cast<std::int64_t>(s.prev) + 1, limits::max_keys, "the limit");
  at_least("stage.chunk_q_len", s.chunk_q_len, 1);
  at_most("stage.chunk_q_len", s.chunk_q_len, s.end - s.prev, "the chunk length end - prev");
  if (s.kind == stage_kind::succ) {
    at_least("stage.prev", s.prev, s.chunk_len);  // prev - chunk_len >= 0
  } else if (s.kind == stage_kind::inter) {
    at_least("stage.prev", s.prev, 2LL * s.chunk_len);  // prev - 2 * chunk_len >= 0
  } else {
    SPECGRAPH_EXPECTS(s.kind == stage_kind::intra, "stage.kind",
                      std::to_string(static_cast<int>(s.kind)) + " is not intra, succ or inter");
  }
  not_null("vertical", p.vertical);
  not_null("vertical_count", p.vertical_count);
  not_null("vertical_size", p.vertical_size);
  not_null("slash_size", p.slash_size);
  not_null("slash", p.slash);
  not_null("slash_count", p.slash_count);
  not_null("out_vertical", p.out_vertical);
  not_null("out_vertical_count", p.out_vertical_count);
  not_null("out_slash", p.out_slash);
  not_null("out_slash_count", p.out_slash_count);
  not_null("guard", p.guard);
}

void validate_contents_host(const sparse_stage_params& p) {
  validate(p);
  for (std::int32_t h = 0; h < p.heads; ++h) {
    const std::int32_t v = p.vertical_count[h];
    const std::int32_t s = p.slash_count[h];
    at_least(indexed("vertical_count", h), v, 0);
    at_most(indexed("vertical_count", h), v, p.vertical_stride, "vertical_stride");
    at_least(indexed("slash_count", h), s, 0);
    at_most(indexed("slash_count", h), s, p.slash_stride, "slash_stride");
    at_least(indexed("vertical_size", h), p.vertical_size[h], 0);
    at_least(indexed("slash_size", h), p.slash_size[h], 0);
    // Key positions of the stage's keys: [0, end), as the kernel requires.
    for (std::int32_t i = 0; i < v; ++i) {
      in_range(indexed("vertical", h, i),
               p.vertical[static_cast<std::int64_t>(h) * p.vertical_stride + i], 0, p.stage.end,
               "stage.end");
    }
    for (std::int32_t i = 0; i < s; ++i) {
      in_range(indexed("slash", h, i), p.slash[static_cast<std::int64_t>(h) * p.slash_stride + i],
               0, p.stage.end, "stage.end");
    }
  }
}

void launch_sparse_stage(executor& ex, const sparse_stage_params& p) {
  launch_builtin<kernels::sparse_stage_kernel>(ex, p, kernels::cuda_sparse_stage());
}

void sparse_stage_host(const sparse_stage_params& p) {
  run_on_host<kernels::sparse_stage_kernel>(p);
}

std::int32_t sparse_fallback_host(std::int32_t seq_len, std::int32_t max_count, std::int32_t* out,
                                  std::int32_t capacity, guard_word* guard) {
  between("seq_len", seq_len, 0, limits::max_keys, "the limit");
  between("max_count", max_count, 0, limits::max_sparse_size, "the limit");
  between("capacity", capacity, 1, limits::max_sparse_size, "the limit");
  not_null("out", out);
  return kernels::sparse_fallback(seq_len, max_count, out, capacity, guard, 0);
}

}  // namespace specgraph
