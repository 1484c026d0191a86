// The Python extension's inputs read in place (engine_inputs.hpp): an engine's own static input
// tensors (req_pool_indices, seq_lens, out_cache_loc, optionally real_batch) checked once by
// bind_inputs into a BoundInputs object, which the round ops take as their optional source and
// read where they are (any int32 / int64 dtype and strides, baked into a capture). As in ops.cpp,
// the arena tensor is an argument of every op so that tvm-ffi sets torch's current stream for
// the call.
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>
#include <string>
#include <utility>

#include "python/src/binding.hpp"
#include "specgraph/engine_inputs.hpp"

namespace specgraph::python {
namespace {

std::string describe_strides(const ffi::TensorView& t) {
  std::string s = "(";
  for (int i = 0; i < t.ndim(); ++i) s += (i ? ", " : "") + std::to_string(t.stride(i));
  return s + (t.ndim() == 1 ? ",)" : ")");
}

// "int64 [8] stride (2,) on cpu": what a refusal says about the tensor it refuses.
std::string describe_tensor(const ffi::TensorView& t) {
  return describe_dtype(t.dtype()) + " " + describe_shape(t) + " stride " + describe_strides(t) +
         " on " + describe_device(t.device());
}

index_type int_type_of(const char* field, const ffi::TensorView& t, const std::string& needed) {
  const DLDataType dt = t.dtype();
  const bool ok = dt.code == kDLInt && (dt.bits == 32 || dt.bits == 64) && dt.lanes == 1;
  SPECGRAPH_EXPECTS(ok, field, describe_tensor(t) + ", expected " + needed);
  return dt.bits == 64 ? index_type::int64 : index_type::int32;
}

void on_device(const char* field, const ffi::TensorView& t, const buffers_ref& b,
               const std::string& needed) {
  const DLDevice d = t.device();
  SPECGRAPH_EXPECTS(d.device_type == b->device.device_type && d.device_id == b->device.device_id,
                    field,
                    describe_tensor(t) + ", expected " + needed + " on the arena's device " +
                        describe_device(b->device));
  SPECGRAPH_EXPECTS(t.data_ptr() != nullptr, field, describe_tensor(t) + ": no memory");
  for (int i = 0; i < t.ndim(); ++i) {
    SPECGRAPH_EXPECTS(t.stride(i) >= 0, field,
                      describe_tensor(t) + ": a negative stride, expected " + needed);
  }
}

engine_index index_of(const char* field, const ffi::TensorView& t, const buffers_ref& b) {
  const std::int64_t rows = b->plan->max_bucket();
  const std::string needed = "int32 or int64 [>= " + std::to_string(rows) +
                             "] (one element per request of the largest bucket)";
  const index_type type = int_type_of(field, t, needed);
  SPECGRAPH_EXPECTS(t.ndim() == 1 && t.size(0) >= rows, field,
                    describe_tensor(t) + ", expected " + needed);
  on_device(field, t, b, needed);
  engine_index e;
  e.data = address_of(t);
  e.type = type;
  e.stride = t.stride(0);
  return e;
}

engine_slots slots_of(const ffi::TensorView& t, const buffers_ref& b) {
  const draft_config& c = b->plan->config;
  const std::string needed = "int64 or int32 [>= " + std::to_string(b->plan->max_bucket()) +
                             ", topk " + std::to_string(c.topk) + ", >= num_steps " +
                             std::to_string(c.num_steps) +
                             "] ([bs][topk][slots]; view a flat buffer with .view(max_bs, topk, "
                             "-1))";
  const index_type type = int_type_of("out_cache_loc", t, needed);
  SPECGRAPH_EXPECTS(t.ndim() == 3 && t.size(0) >= b->plan->max_bucket() && t.size(1) == c.topk &&
                        t.size(2) >= c.num_steps,
                    "out_cache_loc", describe_tensor(t) + ", expected " + needed);
  on_device("out_cache_loc", t, b, needed);
  engine_slots s;
  s.data = address_of(t);
  s.type = type;
  s.request_stride = t.stride(0);
  s.branch_stride = t.stride(1);
  s.slot_stride = t.stride(2);
  s.slots = t.size(2);
  return s;
}

}  // namespace

engine_inputs inputs_of(const buffers_ref& b, const ffi::TensorView& req_pool_indices,
                        const ffi::TensorView& seq_lens, const ffi::TensorView& out_cache_loc,
                        const opt_tensor& real_batch) {
  engine_inputs in;
  in.req_pool_index = index_of("req_pool_indices", req_pool_indices, b);
  in.seq_len = index_of("seq_lens", seq_lens, b);
  in.out_cache_loc = slots_of(out_cache_loc, b);
  if (real_batch.has_value()) {
    const ffi::Tensor held = real_batch.value();
    const ffi::TensorView t(held);
    const std::string needed = "int32 [1]";
    const DLDataType dt = t.dtype();
    SPECGRAPH_EXPECTS(dt.code == kDLInt && dt.bits == 32 && dt.lanes == 1 && t.numel() == 1,
                      "real_batch", describe_tensor(t) + ", expected " + needed);
    on_device("real_batch", t, b, needed);
    in.real_batch = static_cast<const std::int32_t*>(address_of(t));
  }
  return in;
}

round_source source_of(const buffers_ref& b, const source_arg& source) {
  if (!source.has_value()) return {};
  const inputs_obj* s = source.value().get();
  const bool same_device =
      s->device.device_type == b->device.device_type && s->device.device_id == b->device.device_id;
  if (s->plan == b->plan && same_device) return s->source;  // checked once, by bind_inputs
  return round_source(
      *b->plan, inputs_of(b, s->req_pool_indices, s->seq_lens, s->out_cache_loc, s->real_batch));
}

namespace {

// specgraph.bind_inputs: the tensors checked against the buffers' plan once; the object the
// round ops take as their source. Host work only.
inputs_ref bind_inputs(buffers_ref b, ffi::Tensor req_pool_indices, ffi::Tensor seq_lens,
                       ffi::Tensor out_cache_loc, opt_tensor real_batch) {
  auto n = ffi::make_object<inputs_obj>();
  n->source =
      round_source(*b->plan, inputs_of(b, req_pool_indices, seq_lens, out_cache_loc, real_batch));
  n->plan = b->plan;
  n->device = b->device;
  n->req_pool_indices = std::move(req_pool_indices);
  n->seq_lens = std::move(seq_lens);
  n->out_cache_loc = std::move(out_cache_loc);
  n->real_batch = std::move(real_batch);
  return inputs_ref(std::move(n));
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::ObjectDef<inputs_obj>();
  refl::GlobalDef().def("specgraph.bind_inputs", checked<&bind_inputs>::call);
}

}  // namespace specgraph::python
