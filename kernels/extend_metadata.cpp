// Host-side validation, sizing and launchers of the draft-extend metadata (extend_metadata.hpp).
#include "specgraph/extend_metadata.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "device/checks.hpp"
#include "kernels/builtin_kernels.hpp"
#include "kernels/extend_fill.hpp"
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

constexpr const int* layout_bounds = extend_layout_bounds;
constexpr const char* const* layout_names = extend_layout_names;

}  // namespace

std::int32_t* extend_field(const extend_tables& t, int i) noexcept {
  switch (i) {
    case 0: return t.position;
    case 1: return t.out_cache_loc;
    case 2: return t.select_index;
    case 3: return t.page_table;
    case 4: return t.cache_seqlen;
    case 5: return t.cu_seqlens_q;
    case 6: return t.cu_seqlens_k;
    case 7: return t.max_seqlen_k;
    case 8: return t.prefix_qo_indptr;
    case 9: return t.prefix_kv_indptr;
    case 10: return t.prefix_kv_indices;
    case 11: return t.full_qo_indptr;
    case 12: return t.full_kv_indptr;
    case 13: return t.full_kv_indices;
    case 14: return t.full_kv_last_page_len;
    default: return nullptr;
  }
}

void set_extend_field(extend_tables& t, int i, std::int32_t* p) noexcept {
  switch (i) {
    case 0: t.position = p; break;
    case 1: t.out_cache_loc = p; break;
    case 2: t.select_index = p; break;
    case 3: t.page_table = p; break;
    case 4: t.cache_seqlen = p; break;
    case 5: t.cu_seqlens_q = p; break;
    case 6: t.cu_seqlens_k = p; break;
    case 7: t.max_seqlen_k = p; break;
    case 8: t.prefix_qo_indptr = p; break;
    case 9: t.prefix_kv_indptr = p; break;
    case 10: t.prefix_kv_indices = p; break;
    case 11: t.full_qo_indptr = p; break;
    case 12: t.full_kv_indptr = p; break;
    case 13: t.full_kv_indices = p; break;
    case 14: t.full_kv_last_page_len = p; break;
    default: break;
  }
}

extend_field_shape extend_shape_of(int i, const extend_params& p) {
  const std::int64_t b = p.batch, w = p.extend_tokens;
  const std::string sizes = ", batch " + std::to_string(b) + ", max_seq_len " +
                            std::to_string(p.max_seq_len) + ", W " + std::to_string(w);
  switch (i) {
    case 0:
    case 1: return {b * w, 0, false, "batch * W"};
    case 3:
      return {b, p.page_capacity, true,
              "[batch, page_capacity]: page_capacity = ceil((max_seq_len " +
                  std::to_string(p.max_seq_len) + " + W " + std::to_string(w) + ") / page_size " +
                  std::to_string(p.page_size) + ") for every admissible length"};
    case 7: return {1, 0, false, "1"};
    case 10:
      return {p.prefix_kv_capacity, 0, false, "prefix_kv_capacity = batch * max_seq_len" + sizes};
    case 13:
      return {p.full_kv_capacity, 0, false, "full_kv_capacity = batch * (max_seq_len + W)" + sizes};
    case 2:
    case 4:
    case 14: return {b, 0, false, "batch"};
    default: return {b + 1, 0, false, "batch + 1"};  // cu_seqlens and the indptrs
  }
}

extend_layouts extend_layouts_of(const extend_tables& t, const char* prefix) {
  bool set[4] = {false, false, false, false};
  for (int layout = 0; layout < 4; ++layout) {
    const int first = layout_bounds[layout], last = layout_bounds[layout + 1];
    int given = 0, missing = -1;
    std::string names;
    for (int i = first; i < last; ++i) {
      if (extend_field(t, i) != nullptr) {
        ++given;
      } else {
        if (missing < 0) missing = i;
        names += std::string(names.empty() ? "" : ", ") + extend_field_names[i];
      }
    }
    SPECGRAPH_EXPECTS(given == 0 || missing < 0,
                      std::string(prefix) + extend_field_names[missing < 0 ? first : missing],
                      std::to_string(given) + " of its " + std::to_string(last - first) +
                          " output pointers set; set all of them or none (the " +
                          layout_names[layout] + " layout; missing " + names + ")");
    set[layout] = given != 0;
  }
  return {set[0], set[1], set[2], set[3]};
}

std::int64_t extend_scratch_words(std::int32_t batch) {
  return 4 * static_cast<std::int64_t>(batch);
}

std::int64_t extend_page_columns(std::int32_t max_seq_len, std::int32_t page_size,
                                 std::int32_t extend_tokens) {
  return (static_cast<std::int64_t>(max_seq_len) + extend_tokens + page_size - 1) / page_size;
}

std::int64_t extend_prefix_kv_capacity(std::int32_t batch, std::int32_t max_seq_len) {
  return static_cast<std::int64_t>(batch) * max_seq_len;
}

std::int64_t extend_full_kv_capacity(std::int32_t batch, std::int32_t max_seq_len,
                                     std::int32_t extend_tokens) {
  return static_cast<std::int64_t>(batch) *
         (static_cast<std::int64_t>(max_seq_len) + extend_tokens);
}

extend_tables extend_exact_tables(std::int32_t batch, std::int32_t max_seq_len,
                                  std::int32_t page_size, std::int32_t extend_tokens) {
  extend_tables t;
  t.page_capacity =
      static_cast<std::int32_t>(extend_page_columns(max_seq_len, page_size, extend_tokens));
  t.page_stride = t.page_capacity;
  t.prefix_kv_capacity = extend_prefix_kv_capacity(batch, max_seq_len);
  t.full_kv_capacity = extend_full_kv_capacity(batch, max_seq_len, extend_tokens);
  return t;
}

extend_params extend_sizing(std::int32_t batch, std::int32_t max_seq_len, std::int32_t page_size,
                            std::int32_t extend_tokens) {
  extend_params p;
  static_cast<extend_tables&>(p) =
      extend_exact_tables(batch, max_seq_len, page_size, extend_tokens);
  p.batch = batch;
  p.extend_tokens = extend_tokens;
  p.page_size = page_size;
  p.max_seq_len = max_seq_len;
  return p;
}

extend_engine_reservation extend_engine_reservations(std::int32_t max_batch,
                                                     std::int32_t max_context_len,
                                                     std::int32_t page_size,
                                                     std::int32_t extend_tokens) {
  const std::int64_t b = max_batch, m = max_context_len, w = extend_tokens;
  extend_engine_reservation r;
  r.fa3_page_table = b * ((m + page_size - 1) / page_size);
  r.triton_kv_indices = b * w * m;  // max_num_tokens * max_context_len, int64
  r.flashinfer_kv_indices = b * w * m;
  r.flashinfer_mask_bytes = b * w * m;
  return r;
}

std::string extend_capacity_report(std::int32_t max_batch, std::int32_t max_seq_len,
                                   std::int32_t page_size, std::int32_t extend_tokens) {
  const std::int64_t b = max_batch, w = extend_tokens;
  const extend_tables t = extend_exact_tables(max_batch, max_seq_len, page_size, extend_tokens);
  const extend_engine_reservation e =
      extend_engine_reservations(max_batch, max_seq_len, page_size, extend_tokens);
  // int32 cells: tokens 2 * B * W + B; fa3 table + cache_seqlen + 2 cu_seqlens + max_seqlen_k;
  // prefix kv_indices + 2 indptrs; full kv_indices + 2 indptrs + kv_last_page_len.
  const std::int64_t tokens_bytes = 4 * (2 * b * w + b);
  const std::int64_t fa3_bytes = 4 * (b * t.page_capacity + b + 2 * (b + 1) + 1);
  const std::int64_t prefix_bytes = 4 * (t.prefix_kv_capacity + 2 * (b + 1));
  const std::int64_t full_bytes = 4 * (t.full_kv_capacity + 2 * (b + 1) + b);
  const std::int64_t engine_csr =
      8 * e.triton_kv_indices + 4 * e.flashinfer_kv_indices + e.flashinfer_mask_bytes;
  auto times = [](std::int64_t num, std::int64_t den) {  // num / den to one decimal, den > 0
    const std::int64_t tenths = (10 * num + den / 2) / den;
    return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + "x";
  };
  std::string s =
      "extend (W = " + std::to_string(w) + "): tokens " + std::to_string(tokens_bytes) +
      " bytes; fa3 page table " + std::to_string(b) + " x " + std::to_string(t.page_capacity) +
      ", " + std::to_string(fa3_bytes) + " bytes (engine table " + std::to_string(b) + " x " +
      std::to_string(e.fa3_page_table / (b > 0 ? b : 1)) + ": " +
      std::to_string(t.page_capacity - e.fa3_page_table / (b > 0 ? b : 1)) +
      " columns short at the context edge); prefix kv_indices " +
      std::to_string(t.prefix_kv_capacity) + ", full kv_indices " +
      std::to_string(t.full_kv_capacity) + ", " + std::to_string(prefix_bytes + full_bytes) +
      " bytes; engine CSR reservations (int64 Triton + int32 FlashInfer + its unread "
      "mask) " +
      std::to_string(engine_csr) + " bytes";
  if (prefix_bytes + full_bytes > 0) s += " (" + times(engine_csr, prefix_bytes + full_bytes) + ")";
  return s + "\n";
}

void validate_scalars(const extend_params& p) {
  between("page_size", p.page_size, 1, limits::max_page_size, "the limit");
  between("extend_tokens", p.extend_tokens, 1, max_extend_tokens, "the limit");
  between("batch", p.batch, 0, limits::max_batch, "the limit");
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.extend_tokens;
  at_most("batch", rows, limits::max_rows, "the row limit (batch * extend_tokens)");
  // 0: an idle rank (data-parallel attention replays the extend graph there too).
  between("real_batch", p.real_batch, 0, p.batch, "batch");
  between("max_seq_len", p.max_seq_len, 0, limits::max_context_len, "the limit");
  between("req_to_token_stride", p.req_to_token_stride, 1, int32_max, "the limit");
  between("pool_rows", p.pool_rows, 1, limits::max_pool_rows, "the limit");
  // The full kv_indptr (int32) reaches batch * (M + W); every other int32 output stays below it.
  const std::int64_t keys = extend_full_kv_capacity(p.batch, p.max_seq_len, p.extend_tokens);
  SPECGRAPH_EXPECTS(keys <= int32_max, "max_seq_len",
                    std::to_string(p.batch) + " requests x (" + std::to_string(p.max_seq_len) +
                        " + " + std::to_string(p.extend_tokens) +
                        ") keys = " + std::to_string(keys) + " exceeds the int32 indptr limit " +
                        std::to_string(int32_max));
  at_least("slot_limit", p.slot_limit, 1);
  between("page_capacity", p.page_capacity, 0, int32_max, "the limit");
  const std::int64_t pages = extend_page_columns(p.max_seq_len, p.page_size, p.extend_tokens);
  at_most("page_capacity", p.batch * (p.page_capacity > pages ? p.page_capacity : pages),
          max_launch_cells, "the launch limit in cells (batch * page columns)");
  between("prefix_kv_capacity", p.prefix_kv_capacity, 0, int32_max, "the limit");
  between("full_kv_capacity", p.full_kv_capacity, 0, int32_max, "the limit");
  if (p.accept_index != nullptr) {
    between("accept_index_stride", p.accept_index_stride, 1, int32_max, "the limit");
  }
}

void validate(const extend_params& p) {
  validate_scalars(p);
  not_null("req_to_token", p.req_to_token);
  if (p.batch > 0) {
    not_null("req_pool_index", p.req_pool_index);
    not_null("seq_len", p.seq_len);
    not_null("accept_len", p.accept_len);
  }
  not_null("guard", p.guard);
  const extend_layouts set = extend_layouts_of(p);
  SPECGRAPH_EXPECTS(set.tokens || set.fa3 || set.prefix || set.full, "tokens",
                    "no output set: set the pointers of at least one layout (tokens, fa3, "
                    "prefix, full)");
  if (set.fa3) {
    between("page_stride", p.page_stride, p.page_capacity, std::int64_t{1} << 40, "the limit");
  }
}

void validate_contents_host(const extend_params& p) {
  validate(p);
  const std::int32_t w = p.extend_tokens;
  const std::int32_t pad = p.req_to_token[0];
  const auto idle = [&](std::int32_t r) { return kernels::extend_row_idle(p, r); };
  bool padding = p.batch > p.real_batch;  // a padded or idle row reads pad
  for (std::int32_t r = 0; r < p.real_batch && !padding; ++r) padding = idle(r);
  if (padding) in_range("req_to_token[0][0]", pad, 0, p.slot_limit, "slot_limit");
  for (std::int32_t r = 0; r < p.real_batch; ++r) {
    if (idle(r)) continue;  // written as padding, never read
    const std::int32_t pool_row = p.req_pool_index[r];
    in_range(indexed("req_pool_index", r), pool_row, 0, p.pool_rows, "pool_rows");
    between(indexed("seq_len", r), p.seq_len[r], 0, p.max_seq_len, "max_seq_len");
    between(indexed("accept_len", r), p.accept_len[r], 0, w, "num_draft_tokens");
    const std::int64_t positions = static_cast<std::int64_t>(p.seq_len[r]) + w;
    if (positions > p.req_to_token_stride) {
      detail::throw_invalid(
          __FILE__, __LINE__, indexed("seq_len", r),
          std::to_string(p.seq_len[r]) + " + " + std::to_string(w) + " window tokens needs " +
              std::to_string(positions) + " positions, past the row width req_to_token_stride " +
              std::to_string(p.req_to_token_stride) + "; widen the rows to max_seq_len + W");
    }
    const std::int32_t* row = p.req_to_token + pool_row * p.req_to_token_stride;
    for (std::int64_t pos = 0; pos < positions; ++pos) {
      in_range(indexed("req_to_token", pool_row, pos), row[pos], 0, p.slot_limit, "slot_limit");
    }
  }
}

namespace {

// The passes, in order, on `run` (an executor's launch or the host loop); empty grids are not
// launched.
template <class Run>
void run_passes(const extend_params& p, Run&& run) {
  auto pass = [&](const kernel_launch& l) {
    if (l.rows > 0) run(l);
  };
  using namespace kernels;
  pass(make_kernel_launch<extend_check_kernel>(p, extend_check_kernel::rows(p),
                                               cuda_extend_check()));
  pass(make_kernel_launch<extend_scan_kernel>(p, extend_scan_kernel::rows(p), cuda_extend_scan()));
  pass(make_kernel_launch<extend_tokens_fill_kernel>(p, extend_tokens_fill_kernel::rows(p),
                                                     cuda_extend_tokens_fill()));
  pass(make_kernel_launch<extend_page_fill_kernel>(p, extend_page_fill_kernel::rows(p),
                                                   cuda_extend_page_fill()));
  pass(make_kernel_launch<extend_prefix_fill_kernel>(p, extend_prefix_fill_kernel::rows(p),
                                                     cuda_extend_prefix_fill()));
  pass(make_kernel_launch<extend_full_fill_kernel>(p, extend_full_fill_kernel::rows(p),
                                                   cuda_extend_full_fill()));
}

}  // namespace

void launch_extend_metadata(executor& ex, const extend_params& p) {
  validate(p);
  if (p.batch > 0) {
    not_null("scratch", p.scratch);
    ex.fill_bytes(p.scratch, 0, static_cast<std::size_t>(p.batch) * sizeof(std::int64_t));
  }
  run_passes(p, [&](const kernel_launch& l) { ex.launch(l); });
}

void extend_metadata_host(const extend_params& p) {
  validate_contents_host(p);
  std::vector<std::int64_t> scratch(static_cast<std::size_t>(extend_scratch_words(p.batch)) + 1, 0);
  extend_params q = p;
  q.scratch = scratch.data();
  run_passes(q, [](const kernel_launch& l) { l.host_run(l.params, l.rows); });
}

void run_extend_metadata(executor& ex, const extend_params& p, bool host_memory) {
  if (host_memory) {
    validate_contents_host(p);  // every content; nothing written
  } else {
    validate(p);
    if (p.batch > 0) not_null("scratch", p.scratch);
  }
  // The guard words start clean each extend round.
  ex.fill_bytes(p.guard, 0, sizeof(guard_word) * extend_guard_count);
  if (host_memory) {
    extend_metadata_host(p);
  } else {
    launch_extend_metadata(ex, p);
  }
}

}  // namespace specgraph
