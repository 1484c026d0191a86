// Per-request code of the step-invariant prefix metadata (docs/metadata.md section 2).
// Host+device.
//
// Preconditions (validate(prefix_params)): page_size >= 1, topk >= 1, batch >= 1, capacity >= 1,
// page_table_stride >= capacity, req_to_token_stride >= 1, pool_rows >= 1, pointers non-null.
// One call per request in [0, batch).
#pragma once

#include <cstdint>

#include "kernels/guard_ops.hpp"
#include "specgraph/metadata.hpp"

namespace specgraph::kernels {

struct prefix_metadata_kernel {
  using params = prefix_params;
  static constexpr const char* name = "prefix_metadata";
  static constexpr kernel_id id = kernel_id::prefix_metadata;

  static std::int64_t rows(const params& p) { return p.batch; }

  SPECGRAPH_HD static void run_row(const params& p, std::int64_t row64) {
    const auto r = static_cast<std::int32_t>(row64);
    // cu_seqlens_q does not depend on the inputs: every query row of a request shares its prefix.
    p.cu_seqlens_q[r] = r * p.topk;
    if (r == p.batch - 1) p.cu_seqlens_q[p.batch] = p.batch * p.topk;

    const std::int32_t pool_row = p.req_pool_index[r];
    const std::int32_t seq_len = p.seq_len[r];
    if (pool_row < 0 || pool_row >= p.pool_rows) {
      guard_record(p.guard, violation_kind::bad_input, id, r, -1, p.pool_rows, pool_row);
      return;
    }
    if (seq_len < 0 || seq_len > p.req_to_token_stride) {
      guard_record(p.guard, violation_kind::bad_input, id, r, -1,
                   static_cast<std::int32_t>(p.req_to_token_stride), seq_len);
      return;
    }
    const std::int32_t last_page_len = seq_len % p.page_size;
    const std::int32_t prefix_seqlen = seq_len - last_page_len;
    const std::int32_t prefix_pages = prefix_seqlen / p.page_size;
    const std::int32_t* tokens =
        p.req_to_token + static_cast<std::int64_t>(pool_row) * p.req_to_token_stride;
    for (std::int32_t j = 0; j < prefix_pages; ++j) {
      const std::int32_t slot = tokens[static_cast<std::int64_t>(j) * p.page_size];
      if (slot < 0 || slot >= p.slot_limit) {
        guard_record(p.guard, violation_kind::bad_input, id, r, j * p.page_size, -1, slot);
        return;
      }
    }

    p.last_page_len[r] = last_page_len;
    p.prefix_seqlen[r] = prefix_seqlen;
    std::int32_t* table_row = p.page_table + row64 * p.page_table_stride;
    for (std::int32_t j = 0; j < prefix_pages; ++j) {
      const std::int32_t slot = tokens[static_cast<std::int64_t>(j) * p.page_size];
      checked_store(table_row, j, p.capacity, slot / p.page_size, p.guard, id, r);
    }
    // Cells past the prefix get the dummy page 0: nothing stale from an earlier round survives.
    for (std::int32_t j = prefix_pages; j < p.capacity; ++j) table_row[j] = 0;
  }
};

}  // namespace specgraph::kernels
