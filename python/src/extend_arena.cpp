// The Python extension's draft-extend op over the plan's arena (extend_ops.hpp, docs/extend.md):
// the draft-extend metadata of a bucket written into the arena's draft-extend section
// (DraftConfig(draft_extend=True), W = verify_tokens) or into the engine's own tensors, from the
// round's staged requests and real batch and the section's (or the engine's) accepted lengths,
// all read on the device. Like verify_arena.cpp, the arena tensor decides the device (and, for
// torch CUDA tensors, the stream: torch's current one); everything is checked on the host before
// anything is enqueued. Also stage_accept_len and the section's views (their offsets and shapes,
// from draft_buffers::extend: Python derives none of them).
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>
#include <string>
#include <vector>

#include "python/src/binding.hpp"
#include "python/src/extend_fields.hpp"
#include "specgraph/extend_ops.hpp"

namespace specgraph::python {
namespace {

using tensor_list = ffi::Array<ffi::Optional<ffi::Tensor>>;

// The bucket's exact shapes (what every engine tensor is checked against), from the section's
// view: draft_buffers::extend refuses "draft_extend" (no section) and "bucket" first.
extend_params bucket_shapes(const draft_buffers& bufs, std::int32_t bucket) {
  const extend_view v = bufs.extend(bucket);
  const draft_config& c = bufs.plan().config;
  extend_params p;
  static_cast<extend_tables&>(p) =
      extend_exact_tables(bucket, c.max_context_len, c.page_size, v.extend_tokens);
  p.batch = p.real_batch = bucket;
  p.extend_tokens = v.extend_tokens;
  p.page_size = c.page_size;
  p.max_seq_len = c.max_context_len;
  return p;
}

// accept_len: None (the section's) or int32 [bucket] on the arena's device, read in place;
// outputs: each layout's tensors in the tables' order, or none (all four empty: the section).
void extend_arena_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                     ffi::TensorView req_to_token, ffi::Optional<ffi::Tensor> accept_len,
                     tensor_list tokens, tensor_list fa3, tensor_list prefix, tensor_list full) {
  const draft_buffers bufs = buffers_of(b, arena);
  const std::int32_t bk = int32_arg("bucket", bucket);
  extend_params shape = bucket_shapes(bufs, bk);
  extend_inputs in;
  in.tables = tables_of(b, req_to_token);
  std::vector<span> spans{span_of("req_to_token", req_to_token, req_to_token.numel() * 4)};
  if (accept_len.has_value()) {
    const ffi::Tensor a = accept_len.value();
    check_int_tensor("accept_len", a, int_kind::int32, 0, b->device);
    SPECGRAPH_EXPECTS(a.ndim() == 1 && a.size(0) == bk, "accept_len",
                      "shape " + describe_shape(a) + ", expected [" + std::to_string(bk) +
                          "] (one accepted length per request of the bucket, in [0, W])");
    in.accept_len = static_cast<const std::int32_t*>(address_of(a));
    spans.push_back(span_of("accept_len", a, a.numel() * 4));
  }
  const tensor_list* sets[] = {&tokens, &fa3, &prefix, &full};
  bool given = false;
  for (const tensor_list* s : sets) given = given || !s->empty();
  extend_tables engine;
  if (given) {
    const std::size_t first_output = spans.size();
    for (int l = 0; l < extend_layout_count; ++l) out_layout(l, *sets[l], b->device, shape, spans);
    check_no_overlap(spans, first_output);
    engine = shape;  // the tensors' pointers and row stride, the bucket's exact capacities
    in.outputs = &engine;
  }
  extend_metadata(executor_for(b->device), bufs, bk, in);
}

void stage_accept_len_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                         ffi::Array<std::int64_t> accept_len) {
  const draft_buffers bufs = buffers_of(b, arena);
  std::vector<std::int32_t> lengths;
  lengths.reserve(accept_len.size());
  for (std::size_t i = 0; i < accept_len.size(); ++i) {  // the range: stage_accept_len's
    lengths.push_back(int32_arg(("accept_len[" + std::to_string(i) + "]").c_str(), accept_len[i]));
  }
  stage_accept_len(executor_for(b->device), bufs, int32_arg("bucket", bucket), lengths);
}

// The section's views for `bucket` (draft_buffers::extend): {"fields": one [name, layout, byte
// offset, rows, cols] per field the plan holds (cols -1: a vector; rows and cols the bucket's
// exact shape, extend_shape_of), "accept_len": its byte offset, "scratch": [byte offset, int64
// words], "guard": [first guard word, count], "capacity": [page columns (the page table's row
// stride), prefix kv_indices, full kv_indices] (0 for a layout not held), "extend_tokens": W}.
ffi_map extend_section(buffers_ref b, std::int64_t bucket) {
  const draft_buffers& bufs = b->buffers;
  const std::int32_t bk = int32_arg("bucket", bucket);
  const extend_view v = bufs.extend(bk);
  const extend_params shape = bucket_shapes(bufs, bk);
  const auto offset = [&](const void* p) {
    return static_cast<std::int64_t>(static_cast<const unsigned char*>(p) - bufs.base());
  };
  ffi::Array<ffi::Any> fields;
  for (int l = 0; l < extend_layout_count; ++l) {
    for (int i = extend_layout_bounds[l]; i < extend_layout_bounds[l + 1]; ++i) {
      const std::int32_t* p = extend_field(v, i);
      if (p == nullptr) continue;
      const extend_field_shape s = extend_shape_of(i, shape);
      fields.push_back(ffi::Array<ffi::Any>{ffi::String(extend_field_names[i]),
                                            ffi::String(extend_layout_names[l]), offset(p), s.rows,
                                            s.table ? s.cols : std::int64_t{-1}});
    }
  }
  const plan_layout::extend_section& e = bufs.plan().layout.extend;
  return ffi_map{
      {"fields", fields},
      {"accept_len", offset(v.accept_len)},
      {"scratch", ffi::Array<std::int64_t>{offset(v.scratch), e.scratch_words}},
      {"guard", ffi::Array<std::int64_t>{e.guard_base, std::int64_t{extend_guard_count}}},
      {"capacity",
       ffi::Array<std::int64_t>{v.page_capacity, v.prefix_kv_capacity, v.full_kv_capacity}},
      {"extend_tokens", static_cast<std::int64_t>(v.extend_tokens)},
  };
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("specgraph.extend_arena", checked<&extend_arena_op>::call)
      .def("specgraph.stage_accept_len", checked<&stage_accept_len_op>::call)
      .def("specgraph.extend_section", checked<&extend_section>::call);
}

}  // namespace specgraph::python
