// The Python extension's plan side: a draft_config from Python values, plans, their layout and
// reports. The ops over buffers are in ops.cpp; host-side helpers in host.cpp.
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "python/src/binding.hpp"
#include "specgraph/extend_metadata.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/round_fields.hpp"

namespace specgraph::python {
namespace {

std::vector<std::int32_t> int32_list(const std::string& field, const ffi::Array<std::int64_t>& a) {
  std::vector<std::int32_t> out;
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    out.push_back(int32_arg((field + "[" + std::to_string(i) + "]").c_str(), a[i]));
  }
  return out;
}

template <class T>
ffi::Array<std::int64_t> int64_array(const std::vector<T>& v) {
  ffi::Array<std::int64_t> out;
  out.reserve(static_cast<std::int64_t>(v.size()));
  for (const T x : v) out.push_back(static_cast<std::int64_t>(x));
  return out;
}

// The draft_config fields in declaration order; sparse_heads 0 means no sparse settings.
plan_ref make_plan(std::int64_t max_batch, std::int64_t topk, std::int64_t num_steps,
                   std::int64_t page_size, std::int64_t max_context_len, std::int64_t pool_rows,
                   std::int64_t kv_slots, ffi::Array<std::int64_t> buckets, bool checked,
                   bool round_graphs, bool device_steps, bool device_depth,
                   std::int64_t sparse_heads, ffi::Array<std::int64_t> vertical_size,
                   ffi::Array<std::int64_t> slash_size, std::int64_t sparse_max_keys,
                   std::int64_t formats, bool csr_int64, std::int64_t slot_stride,
                   std::int64_t verify_tokens, bool draft_extend, bool round_on_device,
                   std::int64_t round_reserve, std::int64_t round_max_seq_len,
                   std::int64_t max_stop_tokens) {
  draft_config c;
  c.max_batch = int32_arg("max_batch", max_batch);
  c.topk = int32_arg("topk", topk);
  c.num_steps = int32_arg("num_steps", num_steps);
  c.slot_stride = int32_arg("slot_stride", slot_stride);  // 0: num_steps
  c.page_size = int32_arg("page_size", page_size);
  c.max_context_len = int32_arg("max_context_len", max_context_len);
  c.pool_rows = int32_arg("pool_rows", pool_rows);
  c.kv_slots = kv_slots;
  c.buckets = int32_list("buckets", buckets);
  c.checked = checked;
  c.round_graphs = round_graphs;
  c.device_steps = device_steps;
  c.device_depth = device_depth;
  // Its range is validate()'s (the name, the value and the last format).
  c.formats = static_cast<metadata_formats>(int32_arg("formats", formats));
  c.csr_int64 = csr_int64;
  c.verify_tokens = int32_arg("verify_tokens", verify_tokens);  // 0: no verify section
  c.draft_extend = draft_extend;        // with verify_tokens: the draft-extend section
  c.round_on_device = round_on_device;  // with verify_tokens: the round section
  c.round_reserve = int32_arg("round_reserve", round_reserve);              // -1: the default R
  c.round_max_seq_len = int32_arg("round_max_seq_len", round_max_seq_len);  // -1: derived M
  c.max_stop_tokens = int32_arg("max_stop_tokens", max_stop_tokens);        // ranges: validate()'s
  if (sparse_heads != 0) {
    sparse_config s;
    s.heads = int32_arg("sparse.heads", sparse_heads);
    s.vertical_size = int32_list("sparse.vertical_size", vertical_size);
    s.slash_size = int32_list("sparse.slash_size", slash_size);
    s.max_keys = int32_arg("sparse.max_keys", sparse_max_keys);
    c.sparse = std::move(s);
  }
  auto n = ffi::make_object<plan_obj>();
  n->plan = std::make_shared<const plan>(specgraph::make_plan(c));
  return plan_ref(n);
}

ffi::Array<std::int64_t> default_buckets(std::int64_t max_batch) {
  return int64_array(specgraph::default_buckets(int32_arg("max_batch", max_batch)));
}

std::int64_t bucket_for(plan_ref p, std::int64_t batch) {
  return p->plan->bucket_for(int32_arg("batch", batch));
}

std::int64_t round_bucket(plan_ref p, std::int64_t batch, std::int64_t bucket) {
  return p->plan->round_bucket(int32_arg("batch", batch), int32_arg("bucket", bucket));
}

// The draft-extend section as Python's extend_view reads it (empty without one): per planned
// bucket, one [name, layout, byte offset, rows, cols (-1: a vector)] per field the plan holds,
// the bucket's exact shape (extend_shape_of over extend_exact_tables, as draft_buffers::extend
// sizes its view), and its capacities [page columns (the page table's row stride), prefix
// kv_indices, full kv_indices] (0 for a layout not held); the accept_len and scratch offsets,
// the scratch words, the first guard word and W.
ffi_map extend_info(const plan& p) {
  const plan_layout::extend_section& e = p.layout.extend;
  if (!e.enabled()) return ffi_map{};
  const draft_config& c = p.config;
  ffi::Array<ffi::Any> buckets;  // in the plan's bucket order
  for (const std::int32_t bucket : c.buckets) {
    const extend_params shape =
        extend_sizing(bucket, c.max_context_len, c.page_size, e.extend_tokens);
    ffi::Array<ffi::Any> fields;
    for (int l = 0; l < extend_layout_count; ++l) {
      for (int i = extend_layout_bounds[l]; i < extend_layout_bounds[l + 1]; ++i) {
        if (e.field[i] == 0) continue;  // a layout the plan does not hold
        const extend_field_shape f = extend_shape_of(i, shape);
        fields.push_back(ffi::Array<ffi::Any>{
            ffi::String(extend_field_names[i]), ffi::String(extend_layout_names[l]),
            static_cast<std::int64_t>(e.field[i]), f.rows, f.table ? f.cols : std::int64_t{-1}});
      }
    }
    const ffi::Array<std::int64_t> capacity{e.fa3 ? e.page_capacity : 0,
                                            e.prefix ? shape.prefix_kv_capacity : 0,
                                            e.full ? shape.full_kv_capacity : 0};
    buckets.push_back(ffi_map{
        {"bucket", static_cast<std::int64_t>(bucket)}, {"fields", fields}, {"capacity", capacity}});
  }
  return ffi_map{
      {"buckets", buckets},
      {"accept_len", static_cast<std::int64_t>(e.accept_len)},
      {"scratch", ffi::Array<std::int64_t>{static_cast<std::int64_t>(e.scratch), e.scratch_words}},
      {"guard_base", static_cast<std::int64_t>(e.guard_base)},
      {"guard_count", static_cast<std::int64_t>(extend_guard_count)},
      {"extend_tokens", static_cast<std::int64_t>(e.extend_tokens)}};
}

// The round section as Python's round_view reads it (empty without one): per planned bucket,
// one [name, byte offset, dims, dtype] per field of the bucket's exact shape
// (round_field_shape_of, the shapes draft_buffers::round gives its view; a field with no
// elements, stop_token_ids at max_stop_tokens 0, is left out), then D, R and M (resolved: the
// largest committed seq_len the rows hold with the reserve), the stop capacity and the section's
// guard words.
ffi_map round_info(const plan& p) {
  const plan_layout::round_section& r = p.layout.round;
  if (!r.enabled()) return ffi_map{};
  const draft_config& c = p.config;
  ffi::Array<ffi::Any> buckets;  // in the plan's bucket order
  for (const std::int32_t bucket : c.buckets) {
    ffi::Array<ffi::Any> fields;
    for (std::int32_t f = 0; f < round_field_count; ++f) {
      const round_field_shape s = round_field_shape_of(f, bucket, r.draft_tokens, c.num_steps,
                                                       c.topk, c.page_size, r.stop_capacity);
      if (s.elements() == 0) continue;
      fields.push_back(ffi::Array<ffi::Any>{ffi::String(round_field_names[f]),
                                            static_cast<std::int64_t>(r.field[f]),
                                            ffi::Array<std::int64_t>(s.dims, s.dims + s.rank),
                                            ffi::String(s.int64 ? "int64" : "int32")});
    }
    buckets.push_back(ffi_map{{"bucket", static_cast<std::int64_t>(bucket)}, {"fields", fields}});
  }
  return ffi_map{{"buckets", buckets},
                 {"draft_tokens", static_cast<std::int64_t>(r.draft_tokens)},
                 {"reserve", static_cast<std::int64_t>(r.reserve)},
                 {"max_seq_len", static_cast<std::int64_t>(r.max_seq_len)},
                 {"stop_capacity", static_cast<std::int64_t>(r.stop_capacity)},
                 {"guard_base", static_cast<std::int64_t>(r.guard_base)},
                 {"guard_count", static_cast<std::int64_t>(round_guard_count)}};
}

// Everything Python caches about a plan, read once: the buffers as lists [name, step, shape,
// dtype, capacity, offset, bytes, alignment], the typed layout, the sizes and both reports.
ffi_map plan_info(plan_ref ref) {
  const plan& p = *ref->plan;
  const plan_layout& l = p.layout;
  ffi::Array<ffi::Any> buffers;
  for (const buffer_spec& b : p.buffers) {
    buffers.push_back(ffi::Array<ffi::Any>{
        ffi::String(b.name), static_cast<std::int64_t>(b.step),
        ffi::Array<std::int64_t>(b.shape.begin(), b.shape.end()), ffi::String(to_string(b.type)),
        b.capacity, static_cast<std::int64_t>(b.offset), static_cast<std::int64_t>(b.bytes),
        static_cast<std::int64_t>(b.alignment)});
  }
  ffi::Array<ffi::Any> stages;
  for (const auto& s : l.sparse_stage) {
    stages.push_back(ffi_map{{"vertical", static_cast<std::int64_t>(s.vertical)},
                             {"vertical_count", static_cast<std::int64_t>(s.vertical_count)},
                             {"slash", static_cast<std::int64_t>(s.slash)},
                             {"slash_count", static_cast<std::int64_t>(s.slash_count)},
                             {"vertical_capacity", static_cast<std::int64_t>(s.vertical_capacity)},
                             {"slash_capacity", static_cast<std::int64_t>(s.slash_capacity)}});
  }
  const auto& si = l.sparse_in;
  ffi_map layout{
      {"real_batch", static_cast<std::int64_t>(l.real_batch)},
      {"device_step", static_cast<std::int64_t>(l.device_step)},
      {"max_depth", static_cast<std::int64_t>(l.max_depth)},
      {"min_confidence", static_cast<std::int64_t>(l.min_confidence)},
      {"iterations", static_cast<std::int64_t>(l.iterations)},
      {"progress", static_cast<std::int64_t>(l.progress)},
      {"req_pool_index", static_cast<std::int64_t>(l.req_pool_index)},
      {"seq_len", static_cast<std::int64_t>(l.seq_len)},
      {"out_cache_loc", static_cast<std::int64_t>(l.out_cache_loc)},
      {"last_page_len", static_cast<std::int64_t>(l.last_page_len)},
      {"prefix_seqlen", static_cast<std::int64_t>(l.prefix_seqlen)},
      {"prefix_page_table", static_cast<std::int64_t>(l.prefix_page_table)},
      {"prefix_capacity", static_cast<std::int64_t>(l.prefix_capacity)},
      {"cu_seqlens_q", static_cast<std::int64_t>(l.cu_seqlens_q)},
      {"prefix_refused", static_cast<std::int64_t>(l.prefix_refused)},
      {"expand_page_table", int64_array(l.expand_page_table)},
      {"expand_stride", int64_array(l.expand_stride)},
      {"expand_cache_seqlen", int64_array(l.expand_cache_seqlen)},
      {"confidence", static_cast<std::int64_t>(l.confidence)},
      {"guards", static_cast<std::int64_t>(l.guards)},
      {"guard_count", static_cast<std::int64_t>(l.guard_count)},
      {"guard_order", static_cast<std::int64_t>(l.guard_order)},
      {"sparse_vertical", static_cast<std::int64_t>(si.vertical)},
      {"sparse_vertical_count", static_cast<std::int64_t>(si.vertical_count)},
      {"sparse_vertical_size", static_cast<std::int64_t>(si.vertical_size)},
      {"sparse_slash", static_cast<std::int64_t>(si.slash)},
      {"sparse_slash_count", static_cast<std::int64_t>(si.slash_count)},
      {"sparse_slash_size", static_cast<std::int64_t>(si.slash_size)},
      {"sparse_vertical_stride", static_cast<std::int64_t>(si.vertical_stride)},
      {"sparse_slash_stride", static_cast<std::int64_t>(si.slash_stride)},
      {"sparse_stages", stages},
      {"has_fa3", l.has_fa3},
      {"csr_kv_indptr", static_cast<std::int64_t>(l.csr_kv_indptr)},
      {"csr_kv_indices", int64_array(l.csr_kv_indices)},
      {"csr_capacity", int64_array(l.csr_capacity)},
      {"csr_kv_indices_stride", l.csr_kv_indices_stride},
      {"guard_csr_base", static_cast<std::int64_t>(l.guard_csr_base)},
      {"extend", extend_info(p)},
      {"round", round_info(p)},
  };
  return ffi_map{
      {"buffers", buffers},
      {"buckets", int64_array(p.config.buckets)},
      {"total_bytes", static_cast<std::int64_t>(p.total_bytes)},
      {"today", ffi::Array<std::int64_t>{static_cast<std::int64_t>(p.today.prefix_table_bytes),
                                         static_cast<std::int64_t>(p.today.expand_table_bytes),
                                         static_cast<std::int64_t>(p.today.total_bytes)}},
      {"prefix_table_bytes", static_cast<std::int64_t>(p.our_prefix_table_bytes)},
      {"expand_table_bytes", static_cast<std::int64_t>(p.our_expand_table_bytes)},
      {"csr_indices_bytes", static_cast<std::int64_t>(p.our_csr_indices_bytes)},
      {"today_csr_indices_bytes", static_cast<std::int64_t>(p.today.csr_indices_bytes)},
      {"layout", layout},
      {"report_text", ffi::String(p.report_text())},
      {"report_json", ffi::String(p.report_json())},
  };
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::ObjectDef<plan_obj>();
  refl::GlobalDef()
      .def("specgraph.make_plan", checked<&make_plan>::call)
      .def("specgraph.default_buckets", checked<&default_buckets>::call)
      .def("specgraph.bucket_for", checked<&bucket_for>::call)
      .def("specgraph.round_bucket", checked<&round_bucket>::call)
      .def("specgraph.plan_info", checked<&plan_info>::call);
}

}  // namespace specgraph::python
