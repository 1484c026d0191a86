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
  std::int32_t slot_stride = 0;       // slots per out_cache_loc row; 0: num_steps
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

// req_to_token: [pool_rows][max_context_len]; the round's real inputs: `batch` requests (0: an
// idle rank, every row padding), their slot rows c.stride() wide. `bucket`: the caller's
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

  // Prefix: whole pages only; every cell past the prefix holds the dummy page 0.
  m.prefix_table.assign(static_cast<std::size_t>(B) * m.prefix_columns, 0);
  for (std::int32_t r = 0; r < B; ++r) {
    const std::int32_t len = m.seq_len[static_cast<std::size_t>(r)];
    const std::int32_t partial = len % ps;
    m.last_page_len.push_back(partial);
    m.prefix_seqlen.push_back(len - partial);
    const std::int32_t* tokens =
        req_to_token.data() +
        static_cast<std::size_t>(m.req_pool_index[static_cast<std::size_t>(r)]) * c.max_context_len;
    for (std::int32_t j = 0; j * ps < len - partial; ++j) {
      m.prefix_table[static_cast<std::size_t>(r) * m.prefix_columns + j] = tokens[j * ps] / ps;
    }
  }
  for (std::int32_t r = 0; r <= B; ++r) m.cu_seqlens_q.push_back(r * topk);

  // Expand: the row's first d slots, one entry per run of equal pages, zeros after.
  for (std::int32_t s = 0; s < depth; ++s) {
    const std::int32_t d = s + 1, width = s + 2;
    std::vector<std::int32_t> table(static_cast<std::size_t>(rows) * width, 0), seqlens;
    std::vector<std::int64_t> probes;
    for (std::int32_t row = 0; row < rows; ++row) {
      const std::int32_t r = row / topk;
      seqlens.push_back(m.last_page_len[static_cast<std::size_t>(r)] + d);
      std::int32_t runs = 0;
      std::int64_t last = -1;
      for (std::int32_t j = 0; j < d; ++j) {
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
  }
  return m;
}

}  // namespace specgraph::testing
