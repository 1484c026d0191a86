// make_plan(): validation against limits.hpp, the typed layout and the named buffer list.
#include "specgraph/plan.hpp"

#include <algorithm>
#include <string>

#include "device/checks.hpp"
#include "graphs/plan_parts.hpp"
#include "specgraph/error.hpp"
#include "specgraph/extend_metadata.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph {
namespace {

using detail::align_up;
using detail::arena_builder;
using detail::at_least;
using detail::between;
using detail::indexed;

// The config field whose value sizes a buffer, for the arena-limit error.
const char* sizing_field(const std::string& buffer) {
  if (buffer == "prefix.page_table" || buffer == "csr.kv_indices") return "max_context_len";
  if (buffer.rfind("sparse.", 0) == 0) return "sparse";
  if (buffer == "input.out_cache_loc") return "slot_stride";
  if (buffer.rfind("verify.", 0) == 0) return "verify_tokens";
  if (buffer.rfind("extend.", 0) == 0) return "draft_extend";
  if (buffer.rfind("after_verify.", 0) == 0) return "round_on_device";
  return "max_batch";
}

}  // namespace

std::vector<std::int32_t> default_buckets(std::int32_t max_batch) {
  between("max_batch", max_batch, 1, limits::max_batch, "the limit");
  std::vector<std::int32_t> b;
  // int64 loop variable: x + step never wraps even for max_batch near the limit.
  auto add_range = [&](std::int64_t from, std::int64_t to, std::int64_t step) {
    for (std::int64_t x = from; x <= to && x <= max_batch; x += step) {
      b.push_back(static_cast<std::int32_t>(x));
    }
  };
  add_range(1, 8, 1);
  add_range(10, 32, 2);
  add_range(40, 64, 4);
  add_range(72, 256, 8);
  add_range(272, max_batch, 16);
  if (b.back() != max_batch) b.push_back(max_batch);
  return b;
}

const char* to_string(metadata_formats f) noexcept {
  switch (f) {
    case metadata_formats::fa3: return "fa3";
    case metadata_formats::csr: return "csr";
    case metadata_formats::both: return "both";
  }
  return "?";
}

const char* to_string(dtype t) noexcept {
  switch (t) {
    case dtype::int32: return "int32";
    case dtype::int64: return "int64";
    case dtype::float32: return "float32";
    case dtype::guard: return "guard_word";
    case dtype::uint8: return "uint8";
  }
  return "?";
}

std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::int32: return 4;
    case dtype::int64: return 8;
    case dtype::float32: return 4;
    case dtype::guard: return sizeof(guard_word);
    case dtype::uint8: return 1;
  }
  return 0;
}

void validate(const draft_config& c) {
  between("max_batch", c.max_batch, 1, limits::max_batch, "the limit");
  between("topk", c.topk, 1, limits::max_topk, "the limit");
  const std::int64_t rows = static_cast<std::int64_t>(c.max_batch) * c.topk;  // < 2^30
  SPECGRAPH_EXPECTS(rows <= limits::max_rows, "max_batch",
                    std::to_string(c.max_batch) + " * topk " + std::to_string(c.topk) + " = " +
                        std::to_string(rows) + " rows exceeds the limit " +
                        std::to_string(limits::max_rows));
  between("num_steps", c.num_steps, 1, limits::max_num_steps, "the limit");
  if (c.slot_stride != 0) {
    SPECGRAPH_EXPECTS(
        c.slot_stride >= c.num_steps && c.slot_stride <= limits::max_slot_stride, "slot_stride",
        std::to_string(c.slot_stride) + " is outside [num_steps " + std::to_string(c.num_steps) +
            ", " + std::to_string(limits::max_slot_stride) +
            "] (0 = num_steps; a row must hold a slot for every draft forward)");
  }
  between("page_size", c.page_size, 1, limits::max_page_size, "the limit");
  between("max_context_len", c.max_context_len, 1, limits::max_context_len, "the limit");
  between("pool_rows", c.pool_rows, 1, limits::max_pool_rows, "the limit");
  between("kv_slots", c.kv_slots, 1, limits::max_kv_slots, "the limit");
  // Page ids are int32 in every table: the largest, (kv_slots - 1) / page_size, must fit.
  const std::int64_t largest_page = (c.kv_slots - 1) / c.page_size;
  SPECGRAPH_EXPECTS(largest_page <= limits::max_page_id, "kv_slots",
                    std::to_string(c.kv_slots) + " slots at page_size " +
                        std::to_string(c.page_size) + " give page ids up to " +
                        std::to_string(largest_page) + ", above the int32 page-table limit " +
                        std::to_string(limits::max_page_id));
  for (std::size_t i = 0; i < c.buckets.size(); ++i) {
    // int64: the previous bucket + 1 cannot wrap.
    const std::int64_t minimum = i == 0 ? 1 : static_cast<std::int64_t>(c.buckets[i - 1]) + 1;
    at_least(indexed("buckets", static_cast<std::int64_t>(i)), c.buckets[i], minimum);
    detail::at_most(indexed("buckets", static_cast<std::int64_t>(i)), c.buckets[i], c.max_batch,
                    "max_batch");
  }
  if (!c.buckets.empty()) {
    SPECGRAPH_EXPECTS(c.buckets.back() == c.max_batch, "buckets",
                      "the largest bucket " + std::to_string(c.buckets.back()) +
                          " is below max_batch " + std::to_string(c.max_batch) +
                          " (a batch of max_batch would have no bucket)");
  }
  SPECGRAPH_EXPECTS(!c.device_depth || c.device_steps, "device_depth",
                    "true requires device_steps (the round graph loops over the step graph)");
  SPECGRAPH_EXPECTS(!(c.device_steps && c.round_graphs), "round_graphs",
                    "true cannot be combined with device_steps (use device_depth for one launch "
                    "per round)");
  between("formats", static_cast<std::int32_t>(c.formats), 0, 2, "the last format (both = 2)");
  if (c.formats != metadata_formats::fa3) {
    // CSR kv_indptr is int32: the last step's C_s = rows * (max_context_len + num_steps) must fit.
    const std::int64_t last = rows * (static_cast<std::int64_t>(c.max_context_len) + c.num_steps);
    SPECGRAPH_EXPECTS(last <= 0x7fffffff, "max_context_len",
                      std::to_string(c.max_context_len) + ": the CSR step capacity " +
                          std::to_string(rows) + " rows x (max_context_len + num_steps) = " +
                          std::to_string(last) + " exceeds the int32 kv_indptr limit 2147483647");
  }
  if (c.sparse) {
    const sparse_config& s = *c.sparse;
    between("sparse.heads", s.heads, 1, limits::max_heads, "the limit");
    between("sparse.max_keys", s.max_keys, 1, limits::max_keys, "the limit");
    SPECGRAPH_EXPECTS(s.vertical_size.size() == static_cast<std::size_t>(s.heads),
                      "sparse.vertical_size",
                      std::to_string(s.vertical_size.size()) +
                          " entries, expected heads = " + std::to_string(s.heads));
    SPECGRAPH_EXPECTS(s.slash_size.size() == static_cast<std::size_t>(s.heads), "sparse.slash_size",
                      std::to_string(s.slash_size.size()) +
                          " entries, expected heads = " + std::to_string(s.heads));
    for (std::size_t h = 0; h < s.vertical_size.size(); ++h) {
      const auto i = static_cast<std::int64_t>(h);
      between(indexed("sparse.vertical_size", i), s.vertical_size[h], 0, limits::max_sparse_size,
              "the limit");
      between(indexed("sparse.slash_size", i), s.slash_size[h], 0, limits::max_sparse_size,
              "the limit");
    }
  }
  detail::validate_verify(c);
  detail::validate_extend(c);
  detail::validate_round(c);
}

plan make_plan(const draft_config& config) {
  validate(config);
  plan p;
  p.config = config;
  if (p.config.buckets.empty()) p.config.buckets = default_buckets(config.max_batch);
  if (p.config.slot_stride == 0) p.config.slot_stride = config.num_steps;
  const draft_config& c = p.config;
  const std::int64_t max_bucket = p.max_bucket();
  const std::int64_t rows = max_bucket * c.topk;  // <= limits::max_rows
  // int64: max_context_len + page_size < 2^29.
  const std::int64_t prefix_cols =
      (static_cast<std::int64_t>(c.max_context_len) + c.page_size - 1) / c.page_size;
  plan_layout& l = p.layout;
  l.num_steps = c.num_steps;
  l.prefix_capacity = static_cast<std::int32_t>(prefix_cols);  // <= max_context_len

  arena_builder a(p.buffers);
  l.real_batch = a.add("input.real_batch", all_steps, {1}, dtype::int32);
  l.device_step = a.add("round.step", all_steps, {1}, dtype::int32, 4);
  l.max_depth = a.add("round.max_depth", all_steps, {1}, dtype::int32, 4);
  l.min_confidence = a.add("round.min_confidence", all_steps, {1}, dtype::float32, 4);
  l.iterations = a.add("round.iterations", all_steps, {1}, dtype::int32, 4);
  l.progress = a.add("round.progress", all_steps, {1}, dtype::int32, 4);
  l.req_pool_index = a.add("input.req_pool_index", all_steps, {max_bucket}, dtype::int32, 4);
  l.seq_len = a.add("input.seq_len", all_steps, {max_bucket}, dtype::int32, 4);
  l.small_inputs_bytes = a.end() - l.real_batch;
  l.out_cache_loc =
      a.add("input.out_cache_loc", all_steps, {max_bucket, c.topk, c.slot_stride}, dtype::int64);
  // Step-invariant prefix metadata: once, not once per step; ceil(max_context_len / ps) wide.
  l.last_page_len = a.add("prefix.last_page_len", all_steps, {max_bucket}, dtype::int32);
  l.prefix_seqlen = a.add("prefix.seqlen", all_steps, {max_bucket}, dtype::int32);
  const bool fa3 = c.formats != metadata_formats::csr;
  const bool csr = c.formats != metadata_formats::fa3;
  l.has_fa3 = fa3;
  if (fa3) {
    l.prefix_page_table =
        a.add("prefix.page_table", all_steps, {max_bucket, prefix_cols}, dtype::int32);
  }
  l.cu_seqlens_q = a.add("prefix.cu_seqlens_q", all_steps, {max_bucket + 1}, dtype::int32);
  l.prefix_refused = a.add("prefix.refused", all_steps, {max_bucket}, dtype::int32);  // scratch
  if (fa3) {
    // Row 0: per request, the leading cells of its prefix row that may be non-zero; row 1: the
    // prefix kernels' snapshot of row 0 (docs/metadata.md section 2).
    l.prefix_high_water = a.add("prefix.high_water", all_steps, {2, max_bucket}, dtype::int32);
  }
  // Expand metadata: per step exactly d + 1 = s + 2 columns; with device steps one table the
  // widest step's width, shared by every step (each still writes only its own s + 2 columns).
  if (!fa3) {
    // CSR only: no FA3 tables.
  } else if (c.device_steps) {
    const std::size_t table =
        a.add("expand.page_table", all_steps, {rows, c.num_steps + 1}, dtype::int32);
    const std::size_t seqlen = a.add("expand.cache_seqlen", all_steps, {rows}, dtype::int32);
    for (std::int32_t s = 0; s < c.num_steps; ++s) {
      l.expand_page_table.push_back(table);
      l.expand_stride.push_back(c.num_steps + 1);
      l.expand_cache_seqlen.push_back(seqlen);
    }
  } else {
    for (std::int32_t s = 0; s < c.num_steps; ++s) {
      l.expand_page_table.push_back(a.add("expand.page_table", s, {rows, s + 2}, dtype::int32));
      l.expand_stride.push_back(s + 2);
      l.expand_cache_seqlen.push_back(a.add("expand.cache_seqlen", s, {rows}, dtype::int32));
    }
  }
  l.confidence = a.add("round.confidence", all_steps, {rows}, dtype::float32);
  if (csr) {
    // Exact per-step capacities C_s = rows * (max_context_len + s + 1) (docs/csr.md).
    l.csr_kv_indptr = a.add("csr.kv_indptr", all_steps, {c.num_steps, rows + 1}, dtype::int32);
    const dtype t = c.csr_int64 ? dtype::int64 : dtype::int32;
    for (std::int32_t s = 0; s < c.num_steps; ++s) {
      l.csr_capacity.push_back(rows * (static_cast<std::int64_t>(c.max_context_len) + s + 1));
    }
    if (c.device_steps) {
      // One buffer, a row per step as wide as the widest step, so the kernel that reads the
      // step on the device finds step s at s * stride; step s still writes only C_s entries.
      l.csr_kv_indices_stride = l.csr_capacity.back();
      const std::size_t base =
          a.add("csr.kv_indices", all_steps, {c.num_steps, l.csr_kv_indices_stride}, t);
      for (std::int32_t s = 0; s < c.num_steps; ++s) {
        l.csr_kv_indices.push_back(base + static_cast<std::size_t>(s) *
                                              static_cast<std::size_t>(l.csr_kv_indices_stride) *
                                              (c.csr_int64 ? 8 : 4));
      }
      p.our_csr_indices_bytes = p.buffers.back().bytes;
    } else {
      for (std::int32_t s = 0; s < c.num_steps; ++s) {
        l.csr_kv_indices.push_back(
            a.add("csr.kv_indices", s, {l.csr_capacity[static_cast<std::size_t>(s)]}, t));
        p.our_csr_indices_bytes += p.buffers.back().bytes;
      }
    }
    l.csr_scratch = a.add("csr.scratch", all_steps, {3 * max_bucket}, dtype::int32);
  }
  if (c.sparse) {
    const sparse_config& sp = *c.sparse;
    const std::int64_t heads = sp.heads;
    const std::int32_t max_v = std::max<std::int32_t>(
        1, *std::max_element(sp.vertical_size.begin(), sp.vertical_size.end()));
    const std::int32_t max_s =
        std::max<std::int32_t>(1, *std::max_element(sp.slash_size.begin(), sp.slash_size.end()));
    auto& in = l.sparse_in;
    in.vertical_stride = max_v;
    in.slash_stride = max_s;
    in.vertical = a.add("sparse.vertical_in", all_steps, {heads, max_v}, dtype::int32);
    in.vertical_count = a.add("sparse.vertical_count_in", all_steps, {heads}, dtype::int32);
    in.vertical_size = a.add("sparse.vertical_size", all_steps, {heads}, dtype::int32);
    in.slash = a.add("sparse.slash_in", all_steps, {heads, max_s}, dtype::int32);
    in.slash_count = a.add("sparse.slash_count_in", all_steps, {heads}, dtype::int32);
    in.slash_size = a.add("sparse.slash_size", all_steps, {heads}, dtype::int32);
    // Per stage kind, sized per head (section 6): Vcap the largest vertical size clamped to the
    // keys seen, Scap the largest slash size.
    std::int32_t vcap = 1, scap = 1;
    for (std::int32_t h = 0; h < sp.heads; ++h) {
      vcap = std::max(vcap, std::min(sp.vertical_size[static_cast<std::size_t>(h)], sp.max_keys));
      scap = std::max(scap, sp.slash_size[static_cast<std::size_t>(h)]);  // not clamped (spec)
    }
    const char* kinds[sparse_stage_kinds] = {"intra", "succ", "inter"};
    for (std::int32_t k = 0; k < sparse_stage_kinds; ++k) {
      const std::string base = std::string("sparse.") + kinds[k];
      auto& st = l.sparse_stage[k];
      st.vertical_capacity = vcap;
      st.slash_capacity = scap;
      st.vertical = a.add(base + ".vertical", all_steps, {heads, vcap}, dtype::int32);
      st.vertical_count = a.add(base + ".vertical_count", all_steps, {heads}, dtype::int32);
      st.slash = a.add(base + ".slash", all_steps, {heads, scap}, dtype::int32);
      st.slash_count = a.add(base + ".slash_count", all_steps, {heads}, dtype::int32);
    }
  }
  l.guard_csr_base = 2 + c.num_steps + (c.sparse ? sparse_stage_kinds : 0);
  l.guard_count = l.guard_csr_base + (csr ? c.num_steps : 0);
  if (c.verify_tokens > 0) {
    detail::add_verify_section(a, p, l.guard_count);
    l.guard_count += verify_guard_count;
  }
  if (c.draft_extend) {
    detail::add_extend_section(a, p, l.guard_count);
    l.guard_count += extend_guard_count;
  }
  if (c.round_on_device) {
    detail::add_round_section(a, p, l.guard_count);
    l.guard_count += round_guard_count;
  }
  l.guard_order = l.guard_count++;  // the last word: setup_round resets every word before it
  l.guards = a.add("guards", all_steps, {l.guard_count}, dtype::guard);
  p.total_bytes = align_up(a.end(), arena_alignment);

  if (p.total_bytes > static_cast<std::size_t>(limits::max_arena_bytes)) {
    const buffer_spec& largest = *std::max_element(
        p.buffers.begin(), p.buffers.end(),
        [](const buffer_spec& x, const buffer_spec& y) { return x.bytes < y.bytes; });
    SPECGRAPH_EXPECTS(false, sizing_field(largest.name),
                      "the arena would need " + std::to_string(p.total_bytes) +
                          " bytes, above the limit " + std::to_string(limits::max_arena_bytes) +
                          " (largest buffer " + largest.name + ", " +
                          std::to_string(largest.bytes) + " bytes)");
  }

  if (fa3) p.our_prefix_table_bytes = p.find("prefix.page_table").bytes;
  for (const buffer_spec& b : p.buffers) {
    if (b.name == "expand.page_table") p.our_expand_table_bytes += b.bytes;
  }
  // Both modes' expand tables + cache_seqlens, for the side-by-side report (int64, < 2^45).
  const std::int64_t steps = c.num_steps;
  p.per_step_expand_bytes =
      static_cast<std::size_t>(rows * (steps * (steps + 3) / 2) * 4 + rows * steps * 4);
  p.device_steps_expand_bytes = static_cast<std::size_t>(rows * (steps + 1) * 4 + rows * 4);
  // Below 2^40 * 2^10 * 2^28: inside size_t.
  p.today.prefix_table_bytes = !fa3 ? 0
                                    : static_cast<std::size_t>(c.num_steps) *
                                          static_cast<std::size_t>(max_bucket) *
                                          static_cast<std::size_t>(c.max_context_len) * 4;
  p.today.expand_table_bytes = !fa3 ? 0
                                    : static_cast<std::size_t>(c.num_steps) *
                                          static_cast<std::size_t>(rows) *
                                          static_cast<std::size_t>(c.num_steps) * 4;
  // CSR as engines size it: num_steps rows of max_bs * topk * max_context_len (< 2^31 each).
  p.today.csr_indices_bytes =
      !csr ? 0
           : static_cast<std::size_t>(c.num_steps) * static_cast<std::size_t>(rows) *
                 static_cast<std::size_t>(c.max_context_len) * (c.csr_int64 ? 8 : 4);
  // Everything else is the same in both sizings.
  p.today.total_bytes = p.total_bytes - p.our_prefix_table_bytes - p.our_expand_table_bytes -
                        p.our_csr_indices_bytes + p.today.prefix_table_bytes +
                        p.today.expand_table_bytes + p.today.csr_indices_bytes;
  return p;
}

const buffer_spec& plan::find(const std::string& name, std::int32_t step) const {
  for (const buffer_spec& b : buffers) {
    if (b.name == name && b.step == step) return b;
  }
  throw error("plan has no buffer '" + name + "'" +
              (step == all_steps ? std::string() : " for step " + std::to_string(step)));
}

std::int32_t plan::bucket_for(std::int32_t batch) const {
  SPECGRAPH_EXPECTS(batch >= 1, "batch", std::to_string(batch) + " is below the minimum 1");
  SPECGRAPH_EXPECTS(
      batch <= max_bucket(), "batch",
      std::to_string(batch) + " exceeds the largest bucket " + std::to_string(max_bucket()));
  return *std::lower_bound(config.buckets.begin(), config.buckets.end(), batch);
}

std::int32_t plan::round_bucket(std::int32_t batch, std::int32_t bucket) const {
  between("batch", batch, 0, config.max_batch, "max_batch");
  if (bucket == 0) return batch == 0 ? config.buckets.front() : bucket_for(batch);
  // The table as the error shows it: whole up to 24 buckets, else its ends.
  const std::vector<std::int32_t>& all = config.buckets;
  std::string table;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all.size() > 24 && i == 8) {
      table += ", ...";
      i = all.size() - 9;
      continue;
    }
    table += (i == 0 ? "" : ", ") + std::to_string(all[i]);
  }
  SPECGRAPH_EXPECTS(has_bucket(bucket), "bucket",
                    std::to_string(bucket) + " is not a planned bucket (planned: " + table +
                        "); pass one of them, or 0 for the smallest bucket >= the batch");
  SPECGRAPH_EXPECTS(
      bucket >= batch, "bucket",
      std::to_string(bucket) + " is below the batch " + std::to_string(batch) +
          " (its rows cannot hold the round); pass a planned bucket >= " + std::to_string(batch) +
          " (planned: " + table + "), e.g. the bucket of the largest batch across ranks, or 0");
  return bucket;
}

bool plan::has_bucket(std::int32_t bucket) const {
  return std::binary_search(config.buckets.begin(), config.buckets.end(), bucket);
}

}  // namespace specgraph
