// The Python extension's draft-extend op over the plan's arena (extend_ops.hpp, docs/extend.md):
// the draft-extend metadata of a bucket written into the arena's draft-extend section
// (DraftConfig(draft_extend=True), W = verify_tokens) or into the engine's own tensors, from the
// round's staged requests and real batch and the section's (or the engine's) accepted lengths,
// all read on the device. Like verify_arena.cpp, the arena tensor decides the device (and, for
// torch CUDA tensors, the stream: torch's current one); everything is checked on the host before
// anything is enqueued. Also stage_accept_len (the section's views: plan_info's "extend").
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
// accept_index: None, or acceptance's int32 [bucket, num_steps + 1] on the arena's device (a row
// whose first entry is negative is written as padding: extend_inputs::accept_index);
// engine: the engine's outputs, each layout's tensors in the tables' order or none (C++ refuses
// "outputs" when no layout is given); false: the section's tables (the four lists empty).
void extend_arena_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                     ffi::TensorView req_to_token, ffi::Optional<ffi::Tensor> accept_len,
                     ffi::Optional<ffi::Tensor> accept_index, bool engine, tensor_list tokens,
                     tensor_list fa3, tensor_list prefix, tensor_list full) {
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
  if (accept_index.has_value()) {
    const ffi::Tensor a = accept_index.value();
    const std::int64_t s = std::int64_t{bufs.plan().config.num_steps} + 1;
    check_int_tensor("accept_index", a, int_kind::int32, 0, b->device);
    SPECGRAPH_EXPECTS(a.ndim() == 2 && a.size(0) == bk && a.size(1) == s, "accept_index",
                      "shape " + describe_shape(a) + ", expected [" + std::to_string(bk) + ", " +
                          std::to_string(s) + "] (acceptance's accept_index of the bucket)");
    in.accept_index = static_cast<const std::int32_t*>(address_of(a));
    in.accept_index_stride = s;
    spans.push_back(span_of("accept_index", a, a.numel() * 4));
  }
  const tensor_list* sets[] = {&tokens, &fa3, &prefix, &full};
  extend_tables outputs;
  if (engine) {
    const std::size_t first_output = spans.size();
    for (int l = 0; l < extend_layout_count; ++l) out_layout(l, *sets[l], b->device, shape, spans);
    check_no_overlap(spans, first_output);
    outputs = shape;  // the tensors' pointers and row stride, the bucket's exact capacities
    in.outputs = &outputs;
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

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("specgraph.extend_arena", checked<&extend_arena_op>::call)
      .def("specgraph.stage_accept_len", checked<&stage_accept_len_op>::call);
}

}  // namespace specgraph::python
