// An independent model of one draft round, written from docs/metadata.md (sections 1-4) and
// nothing else: plain loops over the definitions, its own bucket choice and padding, no call
// into the library's kernels, plan or bucket code. The runtime tests compare every path of the
// library (replay, run_round, whole-round graphs, run_eager, stage, stage_device) with it, so a
// bug in what the runtime hands the kernels cannot hide behind the kernels agreeing with
// themselves.
#pragma once

#include <cstdint>
#include <vector>

namespace specgraph::testing {

struct model_config {
  std::int32_t topk = 0, num_steps = 0, page_size = 0, max_context_len = 0;
  std::vector<std::int32_t> buckets;  // strictly increasing
  // Input ranges (sections 2, 3): pool rows [0, pool_rows), lengths [0, max_context_len], slots
  // [0, kv_slots). 0: every input is taken to be in range.
  std::int32_t pool_rows = 0;
  std::int64_t kv_slots = 0;
  // Columns per row of req_to_token (an engine's table may be wider); 0: max_context_len.
  std::int64_t req_to_token_stride = 0;
  std::int32_t slot_stride = 0;  // slots per out_cache_loc row; 0: num_steps
  std::int32_t stride() const { return slot_stride == 0 ? num_steps : slot_stride; }
};

struct model_round {
  std::int32_t bucket = 0, real_batch = 0, prefix_columns = 0;
  // The padded static inputs (section 4).
  std::vector<std::int32_t> req_pool_index, seq_len;  // [bucket]
  std::vector<std::int64_t> out_cache_loc;            // [bucket][topk][slot_stride]
  // Prefix metadata (section 2).
  std::vector<std::int32_t> last_page_len, prefix_seqlen;  // [bucket]
  std::vector<std::int32_t> prefix_table;                  // [bucket][prefix_columns]
  std::vector<std::int32_t> cu_seqlens_q;                  // [bucket + 1]
  // Expand metadata of steps 0..depth-1 (section 3), and what the engine probe reads from them.
  std::vector<std::vector<std::int32_t>> expand_table;  // [step][rows][step + 2]
  std::vector<std::vector<std::int32_t>> cache_seqlen;  // [step][rows]
  std::vector<std::vector<std::int64_t>> probe;         // [step][rows]
  // Refused inputs the guards must count: prefix (one per request whose pool row or length is
  // out of range, else one per page whose slot is), and per step one per refused query row
  // (rows of a request refused at the prefix are padding and not counted again).
  std::int32_t prefix_violations = 0;
  std::vector<std::int32_t> expand_violations;  // [step]
};

// The smallest bucket holding `batch` (section 4).
inline std::int32_t model_bucket(const model_config& c, std::int32_t batch) {
  for (const std::int32_t b : c.buckets) {
    if (b >= batch) return b;
  }
  return -1;
}

// FNV-1a over what a consumer of the step reads, in the order testing/engine_probe.hpp folds it.
inline std::int64_t model_probe(const std::vector<std::int32_t>& expand_row,
                                std::int32_t cache_seqlen, const std::int32_t* prefix_row,
                                std::int32_t prefix_columns, std::int32_t prefix_seqlen) {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](std::int64_t v) { h = (h ^ static_cast<std::uint64_t>(v)) * 1099511628211ULL; };
  for (const std::int32_t x : expand_row) mix(x);
  mix(cache_seqlen);
  for (std::int32_t c = 0; c < prefix_columns; ++c) mix(prefix_row[c]);
  mix(prefix_seqlen);
  return static_cast<std::int64_t>(h);
}

// req_to_token: [pool_rows][req_to_token_stride]; the round's real inputs: `batch` requests (0:
// an idle rank, every row padding), their slot rows c.stride() wide. `bucket`: the caller's
// bucket (0: the smallest holding the batch).
inline model_round model_draft_round(
    const model_config& c, const std::vector<std::int32_t>& req_to_token, std::int32_t batch,
    const std::vector<std::int32_t>& req_pool_index, const std::vector<std::int32_t>& seq_len,
    const std::vector<std::int64_t>& out_cache_loc, std::int32_t depth, std::int32_t bucket = 0) {
  model_round m;
  const std::int32_t ps = c.page_size, topk = c.topk, stride = c.stride();
  m.bucket = bucket != 0 ? bucket : model_bucket(c, batch);
  m.real_batch = batch;
  m.prefix_columns = (c.max_context_len + ps - 1) / ps;
  const std::int32_t B = m.bucket, rows = B * topk;

  // Padding: requests past the real batch read one token on the dummy page.
  for (std::int32_t r = 0; r < B; ++r) {
    const bool real = r < batch;
    m.req_pool_index.push_back(real ? req_pool_index[static_cast<std::size_t>(r)] : 0);
    m.seq_len.push_back(real ? seq_len[static_cast<std::size_t>(r)] : 1);
    for (std::int32_t i = 0; i < topk * stride; ++i) {
      m.out_cache_loc.push_back(
          real ? out_cache_loc[static_cast<std::size_t>(r * topk * stride + i)] : 0);
    }
  }

  // Prefix: whole pages only; every cell past the prefix holds the dummy page 0. A request with
  // an input out of range is written as a padded request (pool row 0, one token), whose page
  // is the dummy page should its own slot be out of range.
  const std::int64_t table_stride =
      c.req_to_token_stride > 0 ? c.req_to_token_stride : c.max_context_len;
  const bool checks = c.kv_slots > 0;
  auto bad_slot = [&](std::int64_t slot) { return checks && (slot < 0 || slot >= c.kv_slots); };
  m.prefix_table.assign(static_cast<std::size_t>(B) * m.prefix_columns, 0);
  std::vector<bool> refused_at_prefix(static_cast<std::size_t>(B), false);
  for (std::int32_t r = 0; r < B; ++r) {
    std::int32_t pool = m.req_pool_index[static_cast<std::size_t>(r)];
    std::int32_t len = m.seq_len[static_cast<std::size_t>(r)];
    bool padded = false;
    if (checks && (pool < 0 || pool >= c.pool_rows || len < 0 || len > c.max_context_len)) {
      ++m.prefix_violations;
      padded = true;
    } else {
      const std::int32_t* tokens =
          req_to_token.data() + static_cast<std::size_t>(pool) * table_stride;
      for (std::int32_t j = 0; j * ps < len - len % ps; ++j) {
        if (bad_slot(tokens[j * ps])) {
          ++m.prefix_violations;
          padded = true;
        }
      }
    }
    if (padded) {
      pool = 0;
      len = 1;
      refused_at_prefix[static_cast<std::size_t>(r)] = true;
    }
    const std::int32_t partial = len % ps;
    m.last_page_len.push_back(partial);
    m.prefix_seqlen.push_back(len - partial);
    const std::int32_t* tokens =
        req_to_token.data() + static_cast<std::size_t>(pool) * table_stride;
    for (std::int32_t j = 0; j * ps < len - partial; ++j) {
      const std::int32_t slot = tokens[j * ps];
      m.prefix_table[static_cast<std::size_t>(r) * m.prefix_columns + j] =
          padded && bad_slot(slot) ? 0 : slot / ps;
    }
  }
  for (std::int32_t r = 0; r <= B; ++r) m.cu_seqlens_q.push_back(r * topk);

  // Expand: the row's first d slots, one entry per run of equal pages, zeros after.
  for (std::int32_t s = 0; s < depth; ++s) {
    const std::int32_t d = s + 1, width = s + 2;
    std::vector<std::int32_t> table(static_cast<std::size_t>(rows) * width, 0), seqlens;
    std::vector<std::int64_t> probes;
    std::int32_t violations = 0;
    for (std::int32_t row = 0; row < rows; ++row) {
      const std::int32_t r = row / topk;
      // A row with a slot out of range is written as a padded request's row: every page the
      // dummy page, cache_seqlen 1 % ps + d. So is every row of a request refused at the prefix
      // (section 4: padding in every table of its round), its slots unread and not counted.
      bool refused = refused_at_prefix[static_cast<std::size_t>(r)];
      for (std::int32_t j = 0; j < d && !refused; ++j) {
        if (bad_slot(m.out_cache_loc[static_cast<std::size_t>(row * stride + j)])) {
          refused = true;
          ++violations;
        }
      }
      seqlens.push_back((refused ? 1 % ps : m.last_page_len[static_cast<std::size_t>(r)]) + d);
      std::int32_t runs = 0;
      std::int64_t last = -1;
      for (std::int32_t j = 0; j < d && !refused; ++j) {
        const std::int64_t page = m.out_cache_loc[static_cast<std::size_t>(row * stride + j)] / ps;
        if (runs == 0 || page != last) {
          table[static_cast<std::size_t>(row * width + runs)] = static_cast<std::int32_t>(page);
          ++runs;
          last = page;
        }
      }
      const std::vector<std::int32_t> expand_row(table.begin() + row * width,
                                                 table.begin() + (row + 1) * width);
      probes.push_back(
          model_probe(expand_row, seqlens.back(),
                      m.prefix_table.data() + static_cast<std::size_t>(r) * m.prefix_columns,
                      m.prefix_columns, m.prefix_seqlen[static_cast<std::size_t>(r)]));
    }
    m.expand_table.push_back(table);
    m.cache_seqlen.push_back(seqlens);
    m.probe.push_back(probes);
    m.expand_violations.push_back(violations);
  }
  return m;
}

}  // namespace specgraph::testing
