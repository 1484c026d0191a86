// Host-side validation, sizing and launchers of the target-verify metadata (verify_metadata.hpp).
#include "specgraph/verify_metadata.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "device/checks.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/verify_fill.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/row_kernel.hpp"

namespace specgraph {
namespace {

using detail::at_least;
using detail::at_most;
using detail::between;
using detail::in_range;
using detail::indexed;
using detail::not_null;

constexpr std::int64_t int32_max = 0x7fffffff;
// cuda_rows launches ceil(rows / 128) blocks: at most 2^31 - 1 of them.
constexpr std::int64_t max_launch_cells = int32_max * 128;

}  // namespace

void* verify_field(const verify_tables& t, int i) noexcept {
  switch (i) {
    case 0: return t.prefix_page_table;
    case 1: return t.prefix_cache_seqlen;
    case 2: return t.prefix_cu_seqlens_q;
    case 3: return t.prefix_cu_seqlens_k;
    case 4: return t.expand_page_table;
    case 5: return t.expand_cache_seqlen;
    case 6: return t.expand_cu_seqlens_q;
    case 7: return t.expand_cu_seqlens_k;
    case 8: return t.qo_indptr;
    case 9: return t.kv_indptr;
    case 10: return t.kv_indices;
    case 11: return t.kv_last_page_len;
    case 12: return t.mask_indptr;
    case 13: return t.packed_mask;
    case 14: return t.packed_mask_indptr;
    default: return nullptr;
  }
}

void set_verify_field(verify_tables& t, int i, void* p) noexcept {
  auto* q = static_cast<std::int32_t*>(p);
  switch (i) {
    case 0: t.prefix_page_table = q; break;
    case 1: t.prefix_cache_seqlen = q; break;
    case 2: t.prefix_cu_seqlens_q = q; break;
    case 3: t.prefix_cu_seqlens_k = q; break;
    case 4: t.expand_page_table = q; break;
    case 5: t.expand_cache_seqlen = q; break;
    case 6: t.expand_cu_seqlens_q = q; break;
    case 7: t.expand_cu_seqlens_k = q; break;
    case 8: t.qo_indptr = q; break;
    case 9: t.kv_indptr = q; break;
    case 10: t.kv_indices = q; break;
    case 11: t.kv_last_page_len = q; break;
    case 12: t.mask_indptr = q; break;
    case 13: t.packed_mask = static_cast<std::uint8_t*>(p); break;
    case 14: t.packed_mask_indptr = q; break;
    default: break;
  }
}

verify_field_shape verify_shape_of(int i, const verify_params& p) {
  const std::int64_t b = p.batch, d = p.draft_tokens, rows = b * d;
  const std::string sizes = ", batch " + std::to_string(b) + ", max_seq_len " +
                            std::to_string(p.max_seq_len) + ", D " + std::to_string(d);
  switch (i) {
    case 0:
      return {b, p.prefix_capacity, true, false,
              "[batch, prefix_capacity]: prefix_capacity = ceil(max_seq_len " +
                  std::to_string(p.max_seq_len) + " / page_size " + std::to_string(p.page_size) +
                  ") for every admissible length"};
    case 1: return {b, 0, false, false, "batch"};
    case 4:
      return {rows, d, true, false,
              "[batch * D, D] = [" + std::to_string(b) + " * " + std::to_string(d) + ", " +
                  std::to_string(d) + "]"};
    case 5: return {rows, 0, false, false, "batch * D"};
    case 6:
    case 7: return {rows + 1, 0, false, false, "batch * D + 1"};
    case 10:
      return {p.kv_indices_capacity, 0, false, false,
              "kv_indices_capacity = batch * (max_seq_len + D)" + sizes};
    case 11: return {b, 0, false, false, "batch"};
    case 13:
      return {p.packed_mask_capacity, 0, false, true,
              "packed_mask_capacity = batch * ceil(D * (max_seq_len + D) / 8); max_seq_len "
              "counts the prefix WITHOUT the D verify tokens" +
                  sizes};
    default: return {b + 1, 0, false, false, "batch + 1"};  // 2, 3 and the indptrs 8, 9, 12, 14
  }
}

verify_layouts verify_layouts_of(const verify_tables& t, const char* prefix) {
  bool set[2] = {false, false};
  for (int layout = 0; layout < 2; ++layout) {
    const int first = layout == 0 ? 0 : verify_fa3_fields;
    const int last = layout == 0 ? verify_fa3_fields : verify_field_count;
    int given = 0, missing = -1;
    std::string names;
    for (int i = first; i < last; ++i) {
      if (verify_field(t, i) != nullptr) {
        ++given;
      } else {
        if (missing < 0) missing = i;
        names += std::string(names.empty() ? "" : ", ") + verify_field_names[i];
      }
    }
    SPECGRAPH_EXPECTS(given == 0 || missing < 0,
                      std::string(prefix) + verify_field_names[missing < 0 ? first : missing],
                      std::to_string(given) + " of its " + std::to_string(last - first) +
                          " output pointers set; set all of them or none (the " +
                          (layout == 0 ? "fa3" : "flashinfer") + " layout; missing " + names + ")");
    set[layout] = given != 0;
  }
  return {set[0], set[1]};
}

verify_tables verify_exact_tables(std::int32_t batch, std::int32_t max_seq_len,
                                  std::int32_t page_size, std::int32_t draft_tokens) {
  verify_tables t;
  t.prefix_capacity = static_cast<std::int32_t>(verify_prefix_columns(max_seq_len, page_size));
  t.prefix_stride = t.prefix_capacity;
  t.expand_stride = draft_tokens;
  t.kv_indices_capacity = verify_kv_indices_capacity(batch, max_seq_len, draft_tokens);
  t.packed_mask_capacity = verify_packed_mask_capacity(batch, max_seq_len, draft_tokens);
  return t;
}

std::int64_t verify_prefix_columns(std::int32_t max_seq_len, std::int32_t page_size) {
  return (static_cast<std::int64_t>(max_seq_len) + page_size - 1) / page_size;
}

std::int64_t verify_kv_indices_capacity(std::int32_t batch, std::int32_t max_seq_len,
                                        std::int32_t draft_tokens) {
  return static_cast<std::int64_t>(batch) * (static_cast<std::int64_t>(max_seq_len) + draft_tokens);
}

std::int64_t verify_packed_mask_capacity(std::int32_t batch, std::int32_t max_seq_len,
                                         std::int32_t draft_tokens) {
  const std::int64_t cells = static_cast<std::int64_t>(draft_tokens) *
                             (static_cast<std::int64_t>(max_seq_len) + draft_tokens);
  return batch * ((cells + 7) / 8);
}

std::int64_t verify_mask_cells_capacity(std::int32_t batch, std::int32_t max_seq_len,
                                        std::int32_t draft_tokens) {
  return static_cast<std::int64_t>(draft_tokens) *
         verify_kv_indices_capacity(batch, max_seq_len, draft_tokens);
}

std::string verify_capacity_report(std::int32_t max_batch, std::int32_t max_seq_len,
                                   std::int32_t page_size, std::int32_t draft_tokens) {
  const std::int64_t b = max_batch, m = max_seq_len, d = draft_tokens;
  const std::int64_t pages = verify_prefix_columns(max_seq_len, page_size);
  const std::int64_t kv = verify_kv_indices_capacity(max_batch, max_seq_len, draft_tokens);
  const std::int64_t packed = verify_packed_mask_capacity(max_batch, max_seq_len, draft_tokens);
  const std::int64_t sglang_mask = b * d * m;
  // int32 cells: the prefix table, its three vectors, the expand table and its three, the five
  // FlashInfer vectors and kv_indices; the packed mask in bytes.
  const std::int64_t fa3_bytes = 4 * (b * pages + 3 * b + 2 + b * d * d + 3 * b * d + 2);
  const std::int64_t flashinfer_bytes = 4 * (kv + 5 * b + 4) + packed;
  std::string s = "verify (D = " + std::to_string(d) + "): fa3 prefix table " + std::to_string(b) +
                  " x " + std::to_string(pages) + ", expand table " + std::to_string(b * d) +
                  " x " + std::to_string(d) + ", " + std::to_string(fa3_bytes) +
                  " bytes; flashinfer kv_indices " + std::to_string(b) + " x (" +
                  std::to_string(m) + " + " + std::to_string(d) + ") = " + std::to_string(kv) +
                  ", packed mask " + std::to_string(packed) + " bytes, " +
                  std::to_string(flashinfer_bytes) + " bytes in all; engine mask reservation " +
                  std::to_string(b) + " x " + std::to_string(d) + " x " + std::to_string(m) +
                  " = " + std::to_string(sglang_mask) + " bytes";
  auto times = [](std::int64_t num, std::int64_t den) {  // num / den to one decimal, den > 0
    const std::int64_t tenths = (10 * num + den / 2) / den;
    return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + "x";
  };
  if (packed > 0) s += " (" + times(sglang_mask, packed) + " the packed mask)";
  // SGLang's FlashInfer verify graphs also size kv_indices as max_num_tokens x max_context_len
  // int32, max_num_tokens = max_batch x D.
  const std::int64_t sglang_kv = 4 * b * d * m;
  s += "; engine kv_indices reservation " + std::to_string(b) + " x " + std::to_string(d) + " x " +
       std::to_string(m) + " x 4 = " + std::to_string(sglang_kv) + " bytes (" +
       times(sglang_kv, 4 * kv) + " kv_indices)";
  return s + "\n";
}

std::int64_t verify_mask_cells(const std::int32_t* seq_len, std::int32_t real_batch,
                               std::int32_t draft_tokens) {
  std::int64_t cells = 0;
  for (std::int32_t r = 0; r < real_batch; ++r) {
    cells += static_cast<std::int64_t>(draft_tokens) *
             (static_cast<std::int64_t>(seq_len[r]) + draft_tokens);
  }
  return cells;
}

void validate_scalars(const verify_params& p) {
  between("page_size", p.page_size, 1, limits::max_page_size, "the limit");
  between("draft_tokens", p.draft_tokens, 1, max_draft_tokens, "the limit");
  between("batch", p.batch, 1, limits::max_batch, "the limit");
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.draft_tokens;
  at_most("batch", rows, limits::max_rows, "the row limit (batch * draft_tokens)");
  // 0: an idle rank (data-parallel attention replays the verify graph there too), every
  // request padding.
  between("real_batch", p.real_batch, 0, p.batch, "batch");
  between("max_seq_len", p.max_seq_len, 1, limits::max_context_len, "the limit");
  between("req_to_token_stride", p.req_to_token_stride, 1, int32_max, "the limit");
  between("pool_rows", p.pool_rows, 1, limits::max_pool_rows, "the limit");
  // mask_indptr (int32) reaches batch * D * (M + D); every other int32 output stays below it.
  const std::int64_t cells = verify_mask_cells_capacity(p.batch, p.max_seq_len, p.draft_tokens);
  SPECGRAPH_EXPECTS(cells <= int32_max, "max_seq_len",
                    std::to_string(p.batch) + " requests x " + std::to_string(p.draft_tokens) +
                        " queries x (" + std::to_string(p.max_seq_len) + " + " +
                        std::to_string(p.draft_tokens) + ") keys = " + std::to_string(cells) +
                        " mask cells exceeds the int32 mask_indptr limit " +
                        std::to_string(int32_max));
  between("mask_cells", p.mask_cells, 0, std::int64_t{1} << 62, "the limit");
  at_least("slot_limit", p.slot_limit, 1);
  between("prefix_capacity", p.prefix_capacity, 0, int32_max, "the limit");
  const std::int64_t pages = verify_prefix_columns(p.max_seq_len, p.page_size);
  at_most("prefix_capacity", p.batch * (p.prefix_capacity > pages ? p.prefix_capacity : pages),
          max_launch_cells, "the launch limit in cells (batch * prefix columns)");
  between("kv_indices_capacity", p.kv_indices_capacity, 0, int32_max, "the limit");
  between("packed_mask_capacity", p.packed_mask_capacity, 0, int32_max, "the limit");
}

void validate(const verify_params& p) {
  validate_scalars(p);
  not_null("req_to_token", p.req_to_token);
  not_null("req_pool_index", p.req_pool_index);
  not_null("seq_len", p.seq_len);
  // An empty mask (no real request's cells: an idle rank) may have no storage at all; a mask
  // shorter than the formula is refused on the device before it is read.
  if (p.mask_cells > 0) not_null("custom_mask", p.custom_mask);
  not_null("guard", p.guard);
  const verify_layouts set = verify_layouts_of(p);
  SPECGRAPH_EXPECTS(set.fa3 || set.flashinfer, "fa3",
                    "no output set: set the fa3 pointers, the flashinfer pointers, or both");
  if (set.fa3) {
    between("prefix_stride", p.prefix_stride, p.prefix_capacity, std::int64_t{1} << 40,
            "the limit");
    between("expand_stride", p.expand_stride, p.draft_tokens, int32_max, "the limit");
  }
}

void validate_contents_host(const verify_params& p) {
  validate(p);
  const std::int32_t d = p.draft_tokens;
  for (std::int32_t r = 0; r < p.batch; ++r) {
    const std::int32_t pool_row = p.req_pool_index[r];
    in_range(indexed("req_pool_index", r), pool_row, 0, p.pool_rows, "pool_rows");
    between(indexed("seq_len", r), p.seq_len[r], 1, p.max_seq_len, "max_seq_len");
    const std::int64_t positions = static_cast<std::int64_t>(p.seq_len[r]) + d;
    if (positions > p.req_to_token_stride) {
      detail::throw_invalid(
          __FILE__, __LINE__, indexed("seq_len", r),
          std::to_string(p.seq_len[r]) + " + " + std::to_string(d) + " verify tokens needs " +
              std::to_string(positions) + " positions, past the row width req_to_token_stride " +
              std::to_string(p.req_to_token_stride) + "; widen the rows to max_seq_len + D");
    }
    const std::int32_t* row = p.req_to_token + pool_row * p.req_to_token_stride;
    for (std::int64_t pos = 0; pos < positions; ++pos) {
      in_range(indexed("req_to_token", pool_row, pos), row[pos], 0, p.slot_limit, "slot_limit");
    }
  }
  const std::int64_t needed = verify_mask_cells(p.seq_len, p.real_batch, d);
  if (p.mask_length_exact ? needed == p.mask_cells : needed <= p.mask_cells) return;
  const std::int64_t doubled = static_cast<std::int64_t>(d) * d * p.real_batch;
  std::string why = std::to_string(p.mask_cells) + " cells, the formula sum(D * (seq_len + D)) " +
                    "over the real requests gives " + std::to_string(needed);
  if (p.mask_cells == needed - doubled) {
    why +=
        ": seq_len seems to include the D verify tokens already (the mask is D * D * "
        "real_batch = " +
        std::to_string(doubled) + " cells shorter); pass seq_len without the verify tokens";
  } else {
    why += p.mask_length_exact ? " (the mask's length must equal it)"
                               : " (the mask buffer must hold it)";
  }
  detail::throw_invalid(__FILE__, __LINE__, "custom_mask", why);
}

namespace {

// The passes, in order, on `run` (an executor's launch or the host loop).
template <class Run>
void run_passes(const verify_params& p, Run&& run) {
  run(make_kernel_launch<kernels::verify_check_kernel>(p, kernels::verify_check_kernel::rows(p),
                                                       kernels::cuda_verify_check()));
  run(make_kernel_launch<kernels::verify_scan_kernel>(p, kernels::verify_scan_kernel::rows(p),
                                                      kernels::cuda_verify_scan()));
  run(make_kernel_launch<kernels::verify_count_kernel>(p, kernels::verify_count_kernel::rows(p),
                                                       kernels::cuda_verify_count()));
  run(make_kernel_launch<kernels::verify_scan_rows_kernel>(
      p, kernels::verify_scan_rows_kernel::rows(p), kernels::cuda_verify_scan_rows()));
  if (p.prefix_page_table != nullptr) {
    run(make_kernel_launch<kernels::verify_prefix_fill_kernel>(
        p, kernels::verify_prefix_fill_kernel::rows(p), kernels::cuda_verify_prefix_fill()));
    run(make_kernel_launch<kernels::verify_expand_fill_kernel>(
        p, kernels::verify_expand_fill_kernel::rows(p), kernels::cuda_verify_expand_fill()));
  }
  if (p.kv_indices != nullptr) {
    run(make_kernel_launch<kernels::verify_kv_fill_kernel>(
        p, kernels::verify_kv_fill_kernel::rows(p), kernels::cuda_verify_kv_fill()));
    run(make_kernel_launch<kernels::verify_mask_fill_kernel>(
        p, kernels::verify_mask_fill_kernel::rows(p), kernels::cuda_verify_mask_fill()));
  }
}

}  // namespace

void launch_verify_metadata(executor& ex, const verify_params& p) {
  validate(p);
  not_null("scratch", p.scratch);
  ex.fill_bytes(p.scratch, 0, static_cast<std::size_t>(p.batch) * sizeof(std::int64_t));
  run_passes(p, [&](const kernel_launch& l) { ex.launch(l); });
}

void verify_metadata_host(const verify_params& p) {
  validate_contents_host(p);
  std::vector<std::int64_t> scratch(
      static_cast<std::size_t>(verify_scratch_words(p.batch, p.draft_tokens)), 0);
  verify_params q = p;
  q.scratch = scratch.data();
  run_passes(q, [](const kernel_launch& l) { l.host_run(l.params, l.rows); });
}

void run_verify_metadata(executor& ex, const verify_params& p, bool host_memory) {
  if (host_memory) {
    validate_contents_host(p);  // every content, the mask's length included; nothing written
  } else {
    validate(p);
    not_null("scratch", p.scratch);
  }
  // The guard words start clean each verify round (setup_round resets the plan's too).
  ex.fill_bytes(p.guard, 0, sizeof(guard_word) * verify_guard_count);
  if (host_memory) {
    verify_metadata_host(p);
  } else {
    launch_verify_metadata(ex, p);
  }
}

}  // namespace specgraph
