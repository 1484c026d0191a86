// An independent reference for the CSR draft-decode KV indices (docs/csr.md), written from the
// format's definition (per row: the kept prefix positions, then the branch's draft positions),
// not from the kernels: lists are built per row and concatenated, capacities applied afterwards.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "specgraph/guard.hpp"
#include "specgraph/kv_indices.hpp"

namespace specgraph::testing {

struct kv_case {
  std::int32_t page_size = 1, entry_page_size = 1, topk = 1, num_steps = 1;
  std::int32_t slot_stride = 0;  // draft slots per branch region; 0: num_steps
  std::int32_t window = 0, sink = 0, max_seq_len = 0;
  std::int32_t pool_rows = 1;
  std::int64_t width = 1;                  // W: entries per pool row
  std::vector<std::int32_t> req_to_token;  // [pool_rows][W]
  std::vector<std::int32_t> req_pool_index, seq_len;
  std::int64_t slot_limit = INT64_MAX;
  bool int64_indices = false;
  std::int32_t first_step = 0, step_count = 1;
  std::int32_t capacity = 0, capacity_growth = 0;
  std::int64_t indices_stride = 0, indptr_stride = 0;
  std::int32_t batch() const { return static_cast<std::int32_t>(seq_len.size()); }
  std::int32_t rows() const { return batch() * topk; }
  std::int64_t step_capacity(std::int32_t k) const {  // int64: capacity and growth are fuzzed
    return capacity + std::int64_t{k} * capacity_growth;
  }
  std::int64_t step_offset(std::int32_t k) const {
    std::int64_t offset = 0;
    for (std::int32_t j = 0; j < k; ++j)
      offset += indices_stride > 0 ? indices_stride : step_capacity(j);
    return offset;
  }
  std::int64_t indices_size() const { return step_offset(step_count) + 3; }  // + 3 canary cells
};

// The launch parameters of a case (pointers left for the caller); `batch` given apart, since a
// fuzzed case decides its batch before its inputs exist.
inline kv_indices_params kv_params_of(const kv_case& c, std::int32_t batch) {
  kv_indices_params p;
  p.req_to_token_stride = c.width;
  p.pool_rows = c.pool_rows;
  p.entry_page_size = c.entry_page_size;
  p.batch = batch;
  p.topk = c.topk;
  p.num_steps = c.num_steps;
  p.slot_stride = c.slot_stride;
  p.page_size = c.page_size;
  p.window = c.window;
  p.sink = c.sink;
  p.max_seq_len = c.max_seq_len;
  p.first_step = c.first_step;
  p.step_count = c.step_count;
  p.kv_indptr_stride = c.indptr_stride;
  p.capacity = c.capacity;
  p.capacity_growth = c.capacity_growth;
  p.kv_indices_stride = c.indices_stride;
  p.slot_limit = c.slot_limit;
  return p;
}

struct kv_record {
  violation_kind kind;
  std::int32_t row, column;
  std::int64_t value;
};

struct kv_expected {
  std::vector<std::vector<std::int32_t>> indptr;  // [step_count][N + 1]
  std::vector<std::vector<std::int64_t>> ids;     // [step_count][used]: every id, stored or not
  std::vector<std::vector<kv_record>> records;    // [step_count]: every guard record
};

inline kv_expected kv_reference(const kv_case& c) {
  const std::int64_t E = c.entry_page_size, ps = c.page_size;
  const std::int32_t d_max = c.first_step + c.step_count;
  kv_expected out;
  out.indptr.assign(c.step_count, {0});
  out.ids.assign(c.step_count, {});
  out.records.assign(c.step_count, {});
  // A refused request's rows are a padded request's (docs/csr.md section 2): pool row 0,
  // seq_len 1 (one kept position, its regions from S), each out-of-range slot stored as the
  // dummy slot 0; empty should seq_len 1 be past max_seq_len or pool row 0 too narrow even for
  // that.
  const std::int64_t S = c.slot_stride == 0 ? c.num_steps : c.slot_stride;
  const std::int64_t pad_region = ps == 1 ? S : ps * ((1 % ps + S + ps - 1) / ps);
  const bool pad_fits =
      c.max_seq_len >= 1 && 1 + (c.topk - 1) * pad_region + d_max - 1 < c.width * E;
  auto pad_id = [&](std::int32_t t, std::int64_t i) {  // entry i of branch t's padded row
    const std::int64_t p = i == 0 ? 0 : 1 + t * pad_region + (i - 1);
    const std::int64_t id = static_cast<std::int64_t>(c.req_to_token[p / E]) * E + p % E;
    const bool bad = id < 0 || id >= c.slot_limit || (!c.int64_indices && id > INT32_MAX);
    return bad ? std::int64_t{0} : id;
  };
  for (std::int32_t r = 0; r < c.batch(); ++r) {
    const std::int32_t pool = c.req_pool_index[r];
    const std::int64_t seq = c.seq_len[r];
    // Scalars first: a request that fails one is one record and no entries.
    bool ok = true;
    std::int64_t value = 0;
    if (pool < 0 || pool >= c.pool_rows) {
      ok = false;
      value = pool;
    } else if (seq < 0 || seq > c.max_seq_len) {
      ok = false;
      value = seq;
    }
    std::vector<std::int64_t> kept;
    std::int64_t region = 0;
    if (ok) {
      for (std::int64_t p = 0; p < seq; ++p) {
        const bool in_window =
            c.window == 0 || seq <= c.window + c.sink || p < c.sink || p >= seq - c.window;
        if (in_window) kept.push_back(p);
      }
      // Each branch owns S = slot_stride draft slots, rounded up to whole pages after the
      // prefix's partial page (S positions at page size 1).
      region = ps == 1 ? S : ps * ((seq % ps + S + ps - 1) / ps);
      if (seq + (c.topk - 1) * region + d_max - 1 >= c.width * E) {
        ok = false;
        value = seq;
      }
    }
    if (!ok) out.records[0].push_back({violation_kind::bad_input, r * c.topk, -1, value});
    // Every position the launch reads, per branch; a bad slot refuses the whole request.
    std::vector<std::vector<std::int64_t>> branch_ids(c.topk);
    bool refused = !ok;  // this request's own records only (a scan of all of them is O(batch^2))
    for (std::int32_t t = 0; ok && t < c.topk; ++t) {
      std::vector<std::int64_t> positions = kept;
      for (std::int32_t j = 0; j < d_max; ++j) positions.push_back(seq + t * region + j);
      for (std::size_t i = 0; i < positions.size(); ++i) {
        const std::int64_t p = positions[i];
        const std::int64_t id =
            static_cast<std::int64_t>(c.req_to_token[pool * c.width + p / E]) * E + p % E;
        branch_ids[t].push_back(id);
        const bool bad = id < 0 || id >= c.slot_limit || (!c.int64_indices && id > INT32_MAX);
        const bool checked_here = t == 0 || i >= kept.size();
        if (bad && checked_here) {
          refused = true;
          out.records[0].push_back(
              {violation_kind::bad_input, r * c.topk + t, static_cast<std::int32_t>(i), id});
        }
      }
    }
    for (std::int32_t k = 0; k < c.step_count; ++k) {
      const std::size_t d = static_cast<std::size_t>(c.first_step + k + 1);
      const std::size_t len = !refused ? kept.size() + d : (pad_fits ? 1 + d : 0);
      for (std::int32_t t = 0; t < c.topk; ++t) {
        auto& indptr = out.indptr[k];
        indptr.push_back(indptr.back() + static_cast<std::int32_t>(len));
        for (std::size_t i = 0; i < len; ++i) {
          out.ids[k].push_back(refused ? pad_id(t, static_cast<std::int64_t>(i))
                                       : branch_ids[t][i]);
        }
      }
    }
  }
  // Capacity: every id at a flat index >= the step's capacity is a refused store of its row.
  for (std::int32_t k = 0; k < c.step_count; ++k) {
    const auto& indptr = out.indptr[k];
    for (std::size_t f = static_cast<std::size_t>(c.step_capacity(k)); f < out.ids[k].size(); ++f) {
      const auto row = static_cast<std::int32_t>(
          std::upper_bound(indptr.begin(), indptr.end(), static_cast<std::int32_t>(f)) -
          indptr.begin() - 1);
      out.records[k].push_back(
          {violation_kind::capacity, row, static_cast<std::int32_t>(f), out.ids[k][f]});
    }
  }
  return out;
}

}  // namespace specgraph::testing
