// The Python extension's CSR draft-decode index ops (csr_ops.hpp, docs/csr.md): into the plan's
// arena or into the engine's own kv_indptr / kv_indices tensors. Like ops.cpp, every op takes
// the arena tensor (its framework decides the stream) and checks everything on the host before
// it enqueues anything: nothing is written when an argument is refused.
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>
#include <string>

#include "python/src/binding.hpp"
#include "specgraph/csr_ops.hpp"

namespace specgraph::python {

namespace {

void check_csr_plan(const plan& p) {
  SPECGRAPH_EXPECTS(!p.layout.csr_kv_indices.empty(), "formats",
                    std::string(to_string(p.config.formats)) +
                        ": this plan holds no CSR indices (DraftConfig(formats=\"csr\") or "
                        "\"both\")");
}

// One 2-D output, [rows][width] with a row stride in elements and unit column stride.
struct rows_2d {
  std::int64_t rows = 0, width = 0, stride = 0;
  std::int64_t bytes_spanned(std::int64_t item) const {
    return rows == 0 ? 0 : ((rows - 1) * stride + width) * item;
  }
};

rows_2d geometry(const char* field, const ffi::TensorView& t, DLDevice device) {
  SPECGRAPH_EXPECTS(
      t.device().device_type == device.device_type && t.device().device_id == device.device_id,
      field,
      "on " + describe_device(t.device()) + ", but the arena is on " + describe_device(device));
  SPECGRAPH_EXPECTS(t.ndim() == 2, field,
                    "shape " + describe_shape(t) + ", expected 2-D [num_steps, entries per step]");
  rows_2d g{t.size(0), t.size(1), t.size(1)};
  if (!t.IsContiguous()) {  // strides are given (a null strides array means contiguous)
    SPECGRAPH_EXPECTS(t.stride(1) == 1, field,
                      "column stride " + std::to_string(t.stride(1)) +
                          ", expected 1 (rows may be strided, their entries must be adjacent)");
    g.stride = t.stride(0);
    SPECGRAPH_EXPECTS(g.stride >= g.width, field,
                      "row stride " + std::to_string(g.stride) + " is below the row width " +
                          std::to_string(g.width) + " (rows would overlap)");
  }
  return g;
}

std::string entries(const rows_2d& g) {
  return std::to_string(g.rows * g.width) + " entries";
}

bool overlap(const void* a, std::int64_t a_bytes, const void* b, std::int64_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a);  // NOLINT: address comparison only
  const auto y = reinterpret_cast<std::uintptr_t>(b);  // NOLINT
  return a_bytes > 0 && b_bytes > 0 && x < y + static_cast<std::uintptr_t>(b_bytes) &&
         y < x + static_cast<std::uintptr_t>(a_bytes);
}

// The engine's kv_indptr / kv_indices checked against the plan's exact capacities, named in
// every refusal with its size and the size needed; `arena` and `req_to_token` (either may be
// null) must not share memory with them.
csr_outputs outputs_of(const buffers_ref& b, const ffi::TensorView& kv_indptr,
                       const ffi::TensorView& kv_indices, const void* arena,
                       const ffi::TensorView* req_to_token) {
  const plan& p = *b->plan;
  check_csr_plan(p);
  const draft_config& c = p.config;
  const std::int64_t rows = p.max_rows();
  const std::int64_t widest = p.layout.csr_capacity.back();  // C_(num_steps - 1)
  const DLDataType pt = kv_indptr.dtype();
  SPECGRAPH_EXPECTS(pt.code == kDLInt && pt.bits == 32 && pt.lanes == 1, "kv_indptr",
                    "dtype " + describe_dtype(pt) + ", expected int32");
  const rows_2d ip = geometry("kv_indptr", kv_indptr, b->device);
  SPECGRAPH_EXPECTS(ip.rows >= c.num_steps && ip.width >= rows + 1, "kv_indptr",
                    "shape " + describe_shape(kv_indptr) + " (" + entries(ip) +
                        "), needs [num_steps " + std::to_string(c.num_steps) +
                        ", max_rows + 1 = " + std::to_string(rows + 1) + "] (" +
                        std::to_string(c.num_steps * (rows + 1)) + " entries)");
  const DLDataType it = kv_indices.dtype();
  const bool i64 = it.code == kDLInt && it.bits == 64 && it.lanes == 1;
  SPECGRAPH_EXPECTS(
      i64 || (it.code == kDLInt && it.bits == 32 && it.lanes == 1), "kv_indices",
      "dtype " + describe_dtype(it) + ", expected int32 (FlashInfer's) or int64 (Triton's)");
  const rows_2d ix = geometry("kv_indices", kv_indices, b->device);
  SPECGRAPH_EXPECTS(
      ix.rows >= c.num_steps && ix.width >= widest, "kv_indices",
      "shape " + describe_shape(kv_indices) + " (" + entries(ix) + "), needs [num_steps " +
          std::to_string(c.num_steps) + ", " + std::to_string(widest) + "] (" +
          std::to_string(c.num_steps * widest) +
          " entries): step s holds up to max_rows * (max_context_len + s + 1) entries, the "
          "widest C_" +
          std::to_string(c.num_steps - 1) + " = " + std::to_string(rows) + " * (" +
          std::to_string(c.max_context_len) + " + " + std::to_string(c.num_steps) +
          "); size the rows by the plan (plan.layout[\"csr_capacity\"]), not max_bs * topk * "
          "max_context_len");
  const std::int64_t ip_bytes = ip.bytes_spanned(4);
  const std::int64_t ix_bytes = ix.bytes_spanned(i64 ? 8 : 4);
  SPECGRAPH_EXPECTS(!overlap(address_of(kv_indptr), ip_bytes, address_of(kv_indices), ix_bytes),
                    "kv_indices", "shares memory with kv_indptr");
  const auto arena_bytes = static_cast<std::int64_t>(p.total_bytes);
  SPECGRAPH_EXPECTS(!overlap(address_of(kv_indptr), ip_bytes, arena, arena_bytes), "kv_indptr",
                    "shares memory with the arena (the plan's own CSR buffers need no outputs)");
  SPECGRAPH_EXPECTS(!overlap(address_of(kv_indices), ix_bytes, arena, arena_bytes), "kv_indices",
                    "shares memory with the arena (the plan's own CSR buffers need no outputs)");
  if (req_to_token != nullptr) {
    const std::int64_t table = req_to_token->numel() * 4;
    SPECGRAPH_EXPECTS(!overlap(address_of(kv_indptr), ip_bytes, address_of(*req_to_token), table),
                      "kv_indptr", "shares memory with req_to_token");
    SPECGRAPH_EXPECTS(!overlap(address_of(kv_indices), ix_bytes, address_of(*req_to_token), table),
                      "kv_indices", "shares memory with req_to_token");
  }
  csr_outputs out;
  out.kv_indptr = static_cast<std::int32_t*>(address_of(kv_indptr));
  out.kv_indptr_stride = ip.stride;
  out.kv_indptr_size = ip.rows == 0 ? 0 : (ip.rows - 1) * ip.stride + ip.width;
  out.kv_indices = address_of(kv_indices);
  out.kv_indices_type = i64 ? index_type::int64 : index_type::int32;
  out.kv_indices_stride = ix.stride;
  out.kv_indices_size = ix.rows == 0 ? 0 : (ix.rows - 1) * ix.stride + ix.width;
  check_csr_outputs(p, out);  // the library's own bind-time check (the same sizes)
  return out;
}

// Bind time (no op): the outputs checked once; returns [kv_indices is int64, kv_indptr's row
// stride, kv_indices' row stride]. Host work only.
ffi::Array<std::int64_t> csr_check_outputs(buffers_ref b, ffi::TensorView arena,
                                           ffi::TensorView kv_indptr, ffi::TensorView kv_indices) {
  const csr_outputs out =
      outputs_of(b, kv_indptr, kv_indices, buffers_of(b, arena).base(), nullptr);
  return {out.kv_indices_type == index_type::int64 ? 1 : 0, out.kv_indptr_stride,
          out.kv_indices_stride};
}

void csr_step_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket, std::int64_t step,
                 ffi::TensorView req_to_token) {
  op_range r(op_id::csr_step_indices);
  const draft_buffers bufs = buffers_of(b, arena);
  check_csr_plan(*b->plan);
  csr_step_indices(executor_for(b->device), bufs, int32_arg("bucket", bucket),
                   int32_arg("step", step), tables_of(b, req_to_token));
}

void csr_round_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                  ffi::TensorView req_to_token) {
  op_range r(op_id::csr_round_indices);
  const draft_buffers bufs = buffers_of(b, arena);
  check_csr_plan(*b->plan);
  csr_round_indices(executor_for(b->device), bufs, int32_arg("bucket", bucket),
                    tables_of(b, req_to_token));
}

void csr_step_out_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket, std::int64_t step,
                     ffi::TensorView req_to_token, ffi::TensorView kv_indptr,
                     ffi::TensorView kv_indices) {
  op_range r(op_id::csr_step_indices);
  const draft_buffers bufs = buffers_of(b, arena);
  const engine_tables tables = tables_of(b, req_to_token);
  const csr_outputs out = outputs_of(b, kv_indptr, kv_indices, bufs.base(), &req_to_token);
  csr_step_indices(executor_for(b->device), bufs, int32_arg("bucket", bucket),
                   int32_arg("step", step), tables, out);
}

void csr_round_out_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                      ffi::TensorView req_to_token, ffi::TensorView kv_indptr,
                      ffi::TensorView kv_indices) {
  op_range r(op_id::csr_round_indices);
  const draft_buffers bufs = buffers_of(b, arena);
  const engine_tables tables = tables_of(b, req_to_token);
  const csr_outputs out = outputs_of(b, kv_indptr, kv_indices, bufs.base(), &req_to_token);
  csr_round_indices(executor_for(b->device), bufs, int32_arg("bucket", bucket), tables, out);
}

// Device step counter (device_steps plans): the step the counter holds when the kernels run.
void csr_device_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                   ffi::TensorView req_to_token) {
  op_range r(op_id::csr_indices_device);
  const draft_buffers bufs = buffers_of(b, arena);
  check_csr_plan(*b->plan);
  csr_indices_at_device_step(executor_for(b->device), bufs, int32_arg("bucket", bucket),
                             tables_of(b, req_to_token));
}

void csr_device_out_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                       ffi::TensorView req_to_token, ffi::TensorView kv_indptr,
                       ffi::TensorView kv_indices) {
  op_range r(op_id::csr_indices_device);
  const draft_buffers bufs = buffers_of(b, arena);
  const engine_tables tables = tables_of(b, req_to_token);
  const csr_outputs out = outputs_of(b, kv_indptr, kv_indices, bufs.base(), &req_to_token);
  csr_indices_at_device_step(executor_for(b->device), bufs, int32_arg("bucket", bucket), tables,
                             out);
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("specgraph.csr_check_outputs", checked<&csr_check_outputs>::call)
      .def("specgraph.csr_step_indices", checked<&csr_step_op>::call)
      .def("specgraph.csr_round_indices", checked<&csr_round_op>::call)
      .def("specgraph.csr_step_indices_out", checked<&csr_step_out_op>::call)
      .def("specgraph.csr_round_indices_out", checked<&csr_round_out_op>::call)
      .def("specgraph.csr_indices_device", checked<&csr_device_op>::call)
      .def("specgraph.csr_indices_device_out", checked<&csr_device_out_op>::call);
}

}  // namespace specgraph::python
