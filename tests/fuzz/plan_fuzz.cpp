// libFuzzer harness: an arbitrary draft_config (sparse included) decoded from the bytes, through
// validate, make_plan, bucket_for, report_text and report_json, and the same values through the
// `specgraph plan` command.
//
// Promises checked:
//   * validate and make_plan throw only invalid_argument, with a field and a one-line printable
//     "<field>: ..." message; when validate refuses, make_plan refuses with the same field;
//   * a plan's buffers are disjoint, aligned, inside total_bytes (a multiple of 256, at most
//     limits::max_arena_bytes), sized shape x dtype, and the typed layout points at them;
//   * buckets are strictly increasing, >= 1, the last == max_batch, and bucket_for(b) is the
//     smallest bucket >= b for every b sampled (and refuses 0 and max_batch + 1);
//   * report_text names every buffer; report_json parses with tools/json and agrees with the plan;
//   * `specgraph plan` with the same flags exits 0 exactly when make_plan accepts the config.
#include <algorithm>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/verify_metadata.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "tools/json.hpp"
#include "tools/plan_command.hpp"

namespace {

using specgraph::draft_config;
using specgraph::invalid_argument;
using specgraph::fuzz::reader;
namespace limits = specgraph::limits;

draft_config decode(reader& in) {
  draft_config c;
  c.max_batch = in.value32(1, 64, limits::max_batch);
  c.topk = in.value32(1, 16, limits::max_topk);
  c.num_steps = in.value32(1, 8, limits::max_num_steps);
  c.page_size = in.value32(1, 64, limits::max_page_size);
  c.max_context_len = in.value32(1, 8192, limits::max_context_len);
  c.pool_rows = in.value32(1, 512, limits::max_pool_rows);
  c.kv_slots = in.value(1, 1 << 16, limits::max_kv_slots);
  const std::uint8_t options = in.byte();
  c.checked = (options & 1) != 0;
  c.round_graphs = (options & 2) != 0;
  if ((options & 4) != 0) {
    // Explicit buckets: increasing steps from a start, sometimes broken on purpose.
    const auto n = static_cast<std::int32_t>(in.small(1, 24));
    std::int32_t b = in.value32(1, 4, limits::max_batch);
    for (std::int32_t i = 0; i < n; ++i) {
      c.buckets.push_back(b);
      const std::uint8_t step = in.byte();
      // Wrapping: past INT32_MAX the list stops increasing, which validate() must refuse.
      b = step >= 0xf0 ? in.value32(1, 64, limits::max_batch)
                       : static_cast<std::int32_t>(static_cast<std::uint32_t>(b) + 1u + step % 8u);
    }
    if ((options & 8) != 0) c.buckets.push_back(c.max_batch);  // usually makes them valid
  }
  if ((options & 16) != 0) {
    specgraph::sparse_config s;
    s.heads = in.value32(1, 8, limits::max_heads);
    s.max_keys = in.value32(1, 4096, limits::max_keys);
    // Sizes per head; a mismatched count sometimes. Capped so a huge head count stays cheap.
    const std::int64_t wanted = std::clamp<std::int64_t>(s.heads, 0, limits::max_heads);
    const std::int64_t n = (options & 32) != 0 ? in.small(0, 16) : wanted;
    std::vector<std::int32_t> pool_v, pool_s;
    for (int i = 0; i < 4; ++i) {
      pool_v.push_back(in.value32(0, 64, limits::max_sparse_size));
      pool_s.push_back(in.value32(0, 64, limits::max_sparse_size));
    }
    for (std::int64_t h = 0; h < n; ++h) {
      s.vertical_size.push_back(pool_v[static_cast<std::size_t>(h % 4)]);
      s.slash_size.push_back(pool_s[static_cast<std::size_t>((h + 1) % 4)]);
    }
    c.sparse = s;
  }
  return c;
}

void check_plan(const draft_config& c, const specgraph::plan& p) {
  const auto& b = p.config.buckets;
  FUZZ_CHECK(!b.empty(), "a plan without buckets");
  FUZZ_CHECK(b.front() >= 1, "first bucket %d", b.front());
  for (std::size_t i = 1; i < b.size(); ++i) {
    FUZZ_CHECK(b[i] > b[i - 1], "buckets not strictly increasing at %zu: %d, %d", i, b[i - 1],
               b[i]);
  }
  FUZZ_CHECK(b.back() == c.max_batch, "last bucket %d, max_batch %d", b.back(), c.max_batch);
  FUZZ_CHECK(p.max_bucket() == c.max_batch, "max_bucket %d", p.max_bucket());
  if (!c.buckets.empty()) FUZZ_CHECK(b == c.buckets, "configured buckets changed by the plan");

  // bucket_for: the smallest bucket >= batch, for a sample of batches.
  std::vector<std::int32_t> batches = {1, c.max_batch, b.front(), (c.max_batch + 1) / 2};
  for (std::size_t i = 0; i < b.size() && i < 6; ++i) {
    batches.push_back(b[i]);
    if (b[i] > 1) batches.push_back(b[i] - 1);
    if (b[i] < c.max_batch) batches.push_back(b[i] + 1);
  }
  for (const std::int32_t batch : batches) {
    const std::int32_t got = p.bucket_for(batch);
    const auto it = std::lower_bound(b.begin(), b.end(), batch);
    FUZZ_CHECK(it != b.end() && got == *it, "bucket_for(%d) = %d", batch, got);
    FUZZ_CHECK(p.has_bucket(got), "bucket_for(%d) = %d is not a bucket", batch, got);
  }
  for (const std::int32_t batch : {0, c.max_batch + 1}) {
    try {
      (void)p.bucket_for(batch);
      FUZZ_CHECK(false, "bucket_for(%d) accepted", batch);
    } catch (const invalid_argument& e) {
      specgraph::fuzz::check_invalid_argument(e, "bucket_for");
    }
  }

  // Buffers: disjoint, aligned, inside the arena, sized by shape and dtype.
  FUZZ_CHECK(p.total_bytes % specgraph::arena_alignment == 0, "total_bytes %zu", p.total_bytes);
  FUZZ_CHECK(p.total_bytes <= static_cast<std::size_t>(limits::max_arena_bytes),
             "total_bytes %zu above the arena limit", p.total_bytes);
  std::vector<const specgraph::buffer_spec*> sorted;
  for (const auto& buf : p.buffers) {
    FUZZ_CHECK(buf.alignment == specgraph::arena_alignment || buf.alignment == 4,
               "%s: alignment %zu", buf.name.c_str(), buf.alignment);
    FUZZ_CHECK(buf.offset % buf.alignment == 0, "%s: offset %zu not aligned to %zu",
               buf.name.c_str(), buf.offset, buf.alignment);
    FUZZ_CHECK(!buf.shape.empty() && buf.capacity == buf.shape.back(), "%s: capacity %lld",
               buf.name.c_str(), static_cast<long long>(buf.capacity));
    std::size_t elements = 1;
    for (const std::int64_t d : buf.shape) {
      FUZZ_CHECK(d >= 1, "%s: dimension %lld", buf.name.c_str(), static_cast<long long>(d));
      elements *= static_cast<std::size_t>(d);
    }
    FUZZ_CHECK(buf.bytes == elements * specgraph::size_of(buf.type), "%s: %zu bytes for %zu x %zu",
               buf.name.c_str(), buf.bytes, elements, specgraph::size_of(buf.type));
    FUZZ_CHECK(buf.offset + buf.bytes <= p.total_bytes, "%s: [%zu, +%zu) outside %zu bytes",
               buf.name.c_str(), buf.offset, buf.bytes, p.total_bytes);
    sorted.push_back(&buf);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* x, const auto* y) { return x->offset < y->offset; });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    FUZZ_CHECK(sorted[i - 1]->offset + sorted[i - 1]->bytes <= sorted[i]->offset,
               "%s [%zu, +%zu) overlaps %s at %zu", sorted[i - 1]->name.c_str(),
               sorted[i - 1]->offset, sorted[i - 1]->bytes, sorted[i]->name.c_str(),
               sorted[i]->offset);
  }

  // The typed layout is the same buffers.
  const specgraph::plan_layout& l = p.layout;
  const std::int64_t rows = static_cast<std::int64_t>(c.max_batch) * c.topk;
  FUZZ_CHECK(l.prefix_page_table == p.find("prefix.page_table").offset, "prefix table offset");
  FUZZ_CHECK(l.prefix_capacity ==
                 (static_cast<std::int64_t>(c.max_context_len) + c.page_size - 1) / c.page_size,
             "prefix capacity %d", l.prefix_capacity);
  FUZZ_CHECK(p.find("prefix.page_table").capacity == l.prefix_capacity, "prefix table width");
  FUZZ_CHECK(l.out_cache_loc == p.find("input.out_cache_loc").offset, "out_cache_loc offset");
  FUZZ_CHECK(l.guards == p.find("guards").offset, "guards offset");
  // staging, prefix, one per step, the sparse stages, one per CSR step, the verify words, and
  // last the round's order (docs/metadata.md section 11).
  const std::int32_t guards_wanted = 2 + c.num_steps + (c.sparse ? 3 : 0) +
                                     (l.csr_kv_indices.empty() ? 0 : c.num_steps) +
                                     (l.verify.enabled() ? specgraph::verify_guard_count : 0) + 1;
  FUZZ_CHECK(l.guard_count == guards_wanted, "guard_count %d, want %d", l.guard_count,
             guards_wanted);
  FUZZ_CHECK(l.guard_order == l.guard_count - 1, "guard_order %d of %d words", l.guard_order,
             l.guard_count);
  FUZZ_CHECK(l.expand_page_table.size() == static_cast<std::size_t>(c.num_steps),
             "expand offsets for %zu steps", l.expand_page_table.size());
  for (std::int32_t s = 0; s < c.num_steps; ++s) {
    if (s >= 8 && s != c.num_steps - 1) continue;  // find() is a linear search: a sample
    const auto& t = p.find("expand.page_table", s);
    FUZZ_CHECK(l.expand_page_table[static_cast<std::size_t>(s)] == t.offset, "expand offset %d", s);
    FUZZ_CHECK(t.shape.size() == 2 && t.shape[0] == rows && t.shape[1] == s + 2,
               "expand.page_table step %d is not [%lld, %d]", s, static_cast<long long>(rows),
               s + 2);
    FUZZ_CHECK(l.expand_cache_seqlen[static_cast<std::size_t>(s)] ==
                   p.find("expand.cache_seqlen", s).offset,
               "cache_seqlen offset %d", s);
  }
  FUZZ_CHECK(l.real_batch + l.small_inputs_bytes <= l.out_cache_loc, "small inputs overlap");

  // Reports.
  const std::string text = p.report_text();
  std::set<std::string> names;
  for (const auto& buf : p.buffers) names.insert(buf.name);
  for (const auto& name : names) {
    FUZZ_CHECK(text.find(name) != std::string::npos, "report_text lacks %s", name.c_str());
  }
  const std::string report = p.report_json();
  const std::string total_field = "\"total_bytes\":" + std::to_string(p.total_bytes) + ",";
  FUZZ_CHECK(report.rfind("{\"buffers\":[{", 0) == 0 && report.back() == '}' &&
                 report.find(total_field) != std::string::npos,
             "report_json frame");
  if (report.size() > (std::size_t{1} << 16)) return;  // tens of thousands of buckets: too slow
  specgraph::tools::json doc;
  try {
    doc = specgraph::tools::json::parse(report);
  } catch (const specgraph::tools::json_error& e) {
    FUZZ_CHECK(false, "report_json does not parse: %s", e.what());
  }
  FUZZ_CHECK(doc.type == specgraph::tools::json::kind::object, "report_json is not an object");
  const auto* buffers = specgraph::tools::member(doc, "buffers");
  const auto* buckets = specgraph::tools::member(doc, "buckets");
  const auto* total = specgraph::tools::member(doc, "total_bytes");
  FUZZ_CHECK(buffers && buffers->items.size() == p.buffers.size(), "report_json buffers");
  FUZZ_CHECK(buckets && buckets->items.size() == b.size(), "report_json buckets");
  for (std::size_t i = 0; i < b.size(); ++i) {
    FUZZ_CHECK(buckets->items[i].integral && buckets->items[i].integer == b[i],
               "report_json bucket %zu", i);
  }
  FUZZ_CHECK(total && total->integral && total->integer == static_cast<std::int64_t>(p.total_bytes),
             "report_json total_bytes");
}

// The same values as `specgraph plan` flags (the command has no sparse flags).
void check_command(const draft_config& c, bool accepted) {
  std::vector<std::string> args = {"--max-batch",   std::to_string(c.max_batch),
                                   "--topk",        std::to_string(c.topk),
                                   "--steps",       std::to_string(c.num_steps),
                                   "--page-size",   std::to_string(c.page_size),
                                   "--max-context", std::to_string(c.max_context_len),
                                   "--pool-rows",   std::to_string(c.pool_rows),
                                   "--kv-slots",    std::to_string(c.kv_slots)};
  if (!c.buckets.empty()) {
    std::string list;
    for (const std::int32_t b : c.buckets) list += (list.empty() ? "" : ",") + std::to_string(b);
    args.push_back("--buckets");
    args.push_back(list);
  }
  if (c.checked) args.push_back("--json");
  std::ostringstream out, err;
  int code = -1;
  try {
    code = specgraph::tools::plan_command(args, out, err);
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "specgraph plan let an exception escape: %s", e.what());
  }
  FUZZ_CHECK(code == (accepted ? 0 : 2),
             "specgraph plan exited %d where make_plan %s the config (pool_rows %d); stderr: %s",
             code, accepted ? "accepts" : "refuses", c.pool_rows, err.str().c_str());
  if (code == 2) {
    const std::string e = err.str();
    FUZZ_CHECK(out.str().empty() && e.rfind("specgraph: error: --", 0) == 0 &&
                   e.find('\n') == e.size() - 1 &&
                   specgraph::fuzz::printable_line(e.substr(0, e.size() - 1)),
               "specgraph plan: bad error output '%s'", e.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in(data, size);
  const draft_config c = decode(in);

  std::string validate_field;
  try {
    specgraph::validate(c);
  } catch (const invalid_argument& e) {
    specgraph::fuzz::check_invalid_argument(e, "validate");
    validate_field = e.field();
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "validate threw a non-invalid_argument: %s", e.what());
  }

  bool accepted = false;
  try {
    const specgraph::plan p = specgraph::make_plan(c);
    FUZZ_CHECK(validate_field.empty(), "make_plan accepted what validate refused (%s)",
               validate_field.c_str());
    accepted = true;
    check_plan(c, p);
  } catch (const invalid_argument& e) {
    specgraph::fuzz::check_invalid_argument(e, "make_plan");
    FUZZ_CHECK(validate_field.empty() || validate_field == e.field(),
               "validate refused '%s', make_plan '%s'", validate_field.c_str(), e.field().c_str());
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "make_plan threw a non-invalid_argument: %s", e.what());
  }

  if (!c.sparse) check_command(c, accepted);
  return 0;
}
