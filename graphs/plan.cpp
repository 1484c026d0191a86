#include "specgraph/plan.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <string>

#include "checks.hpp"
#include "specgraph/error.hpp"
#include "specgraph/guard.hpp"

namespace specgraph {
namespace {

using detail::at_least;
using detail::indexed;

std::size_t align_up(std::size_t x, std::size_t a) {
  return (x + a - 1) / a * a;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::vector<std::int32_t> default_buckets(std::int32_t max_batch) {
  at_least("max_batch", max_batch, 1);
  std::vector<std::int32_t> b;
  auto add_range = [&](std::int32_t from, std::int32_t to, std::int32_t step) {
    for (std::int32_t x = from; x <= to && x <= max_batch; x += step) b.push_back(x);
  };
  add_range(1, 8, 1);
  add_range(10, 32, 2);
  add_range(40, 64, 4);
  add_range(72, 256, 8);
  add_range(272, max_batch, 16);
  if (b.back() != max_batch) b.push_back(max_batch);
  return b;
}

const char* to_string(dtype t) noexcept {
  switch (t) {
    case dtype::int32: return "int32";
    case dtype::int64: return "int64";
    case dtype::guard: return "guard_word";
  }
  return "?";
}

std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::int32: return 4;
    case dtype::int64: return 8;
    case dtype::guard: return sizeof(guard_word);
  }
  return 0;
}

void validate(const draft_config& c) {
  at_least("max_batch", c.max_batch, 1);
  at_least("topk", c.topk, 1);
  at_least("num_steps", c.num_steps, 1);
  at_least("page_size", c.page_size, 1);
  at_least("max_context_len", c.max_context_len, 1);
  at_least("pool_rows", c.pool_rows, 1);
  at_least("kv_slots", c.kv_slots, 1);
  // Rows and slot ids are int32 inside the kernels.
  const std::int64_t rows = static_cast<std::int64_t>(c.max_batch) * c.topk;
  SPECGRAPH_EXPECTS(rows <= (1LL << 30), "max_batch",
                    "max_batch * topk = " + std::to_string(rows) + " exceeds the limit 2^30");
  SPECGRAPH_EXPECTS(c.num_steps <= 1024, "num_steps",
                    std::to_string(c.num_steps) + " exceeds the limit 1024");
  for (std::size_t i = 0; i < c.buckets.size(); ++i) {
    at_least(indexed("buckets", i), c.buckets[i], i == 0 ? 1 : c.buckets[i - 1] + 1);
  }
  if (!c.buckets.empty()) {
    SPECGRAPH_EXPECTS(c.buckets.back() >= c.max_batch, "buckets",
                      "the largest bucket " + std::to_string(c.buckets.back()) +
                          " is below max_batch " + std::to_string(c.max_batch));
  }
  if (c.sparse) {
    const sparse_config& s = *c.sparse;
    at_least("sparse.heads", s.heads, 1);
    at_least("sparse.max_keys", s.max_keys, 1);
    SPECGRAPH_EXPECTS(s.vertical_size.size() == static_cast<std::size_t>(s.heads),
                      "sparse.vertical_size",
                      std::to_string(s.vertical_size.size()) +
                          " entries, expected heads = " + std::to_string(s.heads));
    SPECGRAPH_EXPECTS(s.slash_size.size() == static_cast<std::size_t>(s.heads), "sparse.slash_size",
                      std::to_string(s.slash_size.size()) +
                          " entries, expected heads = " + std::to_string(s.heads));
    for (std::size_t h = 0; h < s.vertical_size.size(); ++h) {
      at_least(indexed("sparse.vertical_size", h), s.vertical_size[h], 0);
      at_least(indexed("sparse.slash_size", h), s.slash_size[h], 0);
    }
  }
}

plan make_plan(const draft_config& config) {
  validate(config);
  plan p;
  p.config = config;
  if (p.config.buckets.empty()) p.config.buckets = default_buckets(config.max_batch);
  const draft_config& c = p.config;
  const std::int64_t max_bucket = p.max_bucket();
  const std::int64_t rows = max_bucket * c.topk;
  const std::int64_t prefix_cols = (c.max_context_len + c.page_size - 1) / c.page_size;

  std::size_t offset = 0;
  auto add = [&](std::string name, std::int32_t step, std::vector<std::int64_t> shape, dtype t,
                 std::size_t alignment = arena_alignment) {
    offset = align_up(offset, alignment);
    buffer_spec b;
    b.alignment = alignment;
    b.name = std::move(name);
    b.step = step;
    b.shape = std::move(shape);
    b.type = t;
    b.capacity = b.shape.back();
    std::int64_t elements = 1;
    for (const std::int64_t d : b.shape) elements *= d;
    b.bytes = static_cast<std::size_t>(elements) * size_of(t);
    b.offset = offset;
    offset += b.bytes;
    p.buffers.push_back(std::move(b));
  };

  // Static inputs, written by stage() before each round. The three small ones are packed
  // back to back so stage() copies them with one transfer (and out_cache_loc with another).
  add("input.real_batch", all_steps, {1}, dtype::int32);
  add("input.req_pool_index", all_steps, {max_bucket}, dtype::int32, 4);
  add("input.seq_len", all_steps, {max_bucket}, dtype::int32, 4);
  add("input.out_cache_loc", all_steps, {max_bucket, c.topk, c.num_steps}, dtype::int64);
  // Step-invariant prefix metadata: once, not once per step; ceil(max_context_len / ps) wide.
  add("prefix.last_page_len", all_steps, {max_bucket}, dtype::int32);
  add("prefix.seqlen", all_steps, {max_bucket}, dtype::int32);
  add("prefix.page_table", all_steps, {max_bucket, prefix_cols}, dtype::int32);
  add("prefix.cu_seqlens_q", all_steps, {max_bucket + 1}, dtype::int32);
  // Per-step expand metadata: exactly d + 1 = s + 2 columns.
  for (std::int32_t s = 0; s < c.num_steps; ++s) {
    add("expand.page_table", s, {rows, s + 2}, dtype::int32);
    add("expand.cache_seqlen", s, {rows}, dtype::int32);
  }
  if (c.sparse) {
    const sparse_config& sp = *c.sparse;
    const std::int64_t heads = sp.heads;
    const auto max_v = std::max<std::int64_t>(
        1, *std::max_element(sp.vertical_size.begin(), sp.vertical_size.end()));
    const auto max_s =
        std::max<std::int64_t>(1, *std::max_element(sp.slash_size.begin(), sp.slash_size.end()));
    add("sparse.vertical_in", all_steps, {heads, max_v}, dtype::int32);
    add("sparse.vertical_count_in", all_steps, {heads}, dtype::int32);
    add("sparse.vertical_size", all_steps, {heads}, dtype::int32);
    add("sparse.slash_in", all_steps, {heads, max_s}, dtype::int32);
    add("sparse.slash_count_in", all_steps, {heads}, dtype::int32);
    add("sparse.slash_size", all_steps, {heads}, dtype::int32);
    // Per stage kind, sized per head (section 6): Vcap the largest vertical size clamped to the
    // keys seen, Scap the largest slash size.
    std::int32_t vcap = 1, scap = 1;
    for (std::int32_t h = 0; h < sp.heads; ++h) {
      vcap = std::max(vcap, std::min(sp.vertical_size[static_cast<std::size_t>(h)], sp.max_keys));
      scap = std::max(scap, sp.slash_size[static_cast<std::size_t>(h)]);  // not clamped (spec)
    }
    for (const char* kind : {"intra", "succ", "inter"}) {
      const std::string base = std::string("sparse.") + kind;
      add(base + ".vertical", all_steps, {heads, vcap}, dtype::int32);
      add(base + ".vertical_count", all_steps, {heads}, dtype::int32);
      add(base + ".slash", all_steps, {heads, scap}, dtype::int32);
      add(base + ".slash_count", all_steps, {heads}, dtype::int32);
    }
  }
  const std::int64_t guards = 1 + c.num_steps + (c.sparse ? 3 : 0);
  add("guards", all_steps, {guards}, dtype::guard);
  p.total_bytes = align_up(offset, arena_alignment);

  p.our_prefix_table_bytes = p.find("prefix.page_table").bytes;
  for (std::int32_t s = 0; s < c.num_steps; ++s) {
    p.our_expand_table_bytes += p.find("expand.page_table", s).bytes;
  }
  p.today.prefix_table_bytes = static_cast<std::size_t>(c.num_steps) *
                               static_cast<std::size_t>(max_bucket) *
                               static_cast<std::size_t>(c.max_context_len) * 4;
  p.today.expand_table_bytes = static_cast<std::size_t>(c.num_steps) *
                               static_cast<std::size_t>(rows) *
                               static_cast<std::size_t>(c.num_steps) * 4;
  // Everything else is the same in both sizings.
  p.today.total_bytes = p.total_bytes - p.our_prefix_table_bytes - p.our_expand_table_bytes +
                        p.today.prefix_table_bytes + p.today.expand_table_bytes;
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

std::string plan::report_text() const {
  std::ostringstream s;
  s << std::left << std::setw(28) << "buffer" << std::setw(6) << "step" << std::setw(18) << "shape"
    << std::setw(12) << "dtype" << std::right << std::setw(10) << "capacity" << std::setw(12)
    << "offset" << std::setw(12) << "bytes" << '\n';
  for (const buffer_spec& b : buffers) {
    s << std::left << std::setw(28) << b.name << std::setw(6)
      << (b.step == all_steps ? std::string("all") : std::to_string(b.step)) << std::setw(18)
      << shape_string(b.shape) << std::setw(12) << to_string(b.type) << std::right << std::setw(10)
      << b.capacity << std::setw(12) << b.offset << std::setw(12) << b.bytes << '\n';
  }
  const double ratio = static_cast<double>(today.total_bytes) / static_cast<double>(total_bytes);
  s << "arena: " << total_bytes << " bytes in one allocation (" << buffers.size() << " buffers, "
    << config.buckets.size() << " buckets up to " << max_bucket() << ")\n"
    << "prefix page table: " << our_prefix_table_bytes
    << " bytes once; today's engine sizing: " << today.prefix_table_bytes
    << " bytes (max_context_len wide, one per step)\n"
    << "expand page tables: " << our_expand_table_bytes
    << " bytes (d + 1 wide per step); today's engine sizing: " << today.expand_table_bytes
    << " bytes (num_steps wide per step)\n"
    << "total: " << total_bytes << " bytes vs " << today.total_bytes << " bytes today ("
    << std::fixed << std::setprecision(2) << ratio << "x)\n";
  return s.str();
}

std::string plan::report_json() const {
  std::ostringstream s;
  s << "{\"buffers\":[";
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const buffer_spec& b = buffers[i];
    s << (i ? "," : "") << "{\"name\":\"" << b.name << "\",\"step\":";
    if (b.step == all_steps) {
      s << "\"all\"";
    } else {
      s << b.step;
    }
    s << ",\"shape\":[";
    for (std::size_t d = 0; d < b.shape.size(); ++d) s << (d ? "," : "") << b.shape[d];
    s << "],\"dtype\":\"" << to_string(b.type) << "\",\"capacity\":" << b.capacity
      << ",\"offset\":" << b.offset << ",\"bytes\":" << b.bytes << ",\"alignment\":" << b.alignment
      << '}';
  }
  s << "],\"buckets\":[";
  for (std::size_t i = 0; i < config.buckets.size(); ++i) s << (i ? "," : "") << config.buckets[i];
  const double ratio = static_cast<double>(today.total_bytes) / static_cast<double>(total_bytes);
  s << "],\"total_bytes\":" << total_bytes << ",\"prefix_table_bytes\":" << our_prefix_table_bytes
    << ",\"expand_table_bytes\":" << our_expand_table_bytes
    << ",\"today\":{\"prefix_table_bytes\":" << today.prefix_table_bytes
    << ",\"expand_table_bytes\":" << today.expand_table_bytes
    << ",\"total_bytes\":" << today.total_bytes << "},\"ratio\":" << ratio << "}";
  return s.str();
}

}  // namespace specgraph
