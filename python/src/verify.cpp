// The Python extension's target-verify metadata op (verify_metadata.hpp, docs/verify.md): the FA3
// cascade tables and/or FlashInfer's indices and packed mask, written into tensors the caller
// owns. Everything is checked on the host before anything is written (invalid_argument naming
// the buffer, its size and the size needed); then, on CUDA memory, the kernels are enqueued on
// the environment stream (torch's current stream for a torch tensor argument: capture-safe, no
// synchronisation), on host memory the host twin runs after validate_contents_host.
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>
#include <string>
#include <vector>

#include "device/checks.hpp"
#include "python/src/binding.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/verify_metadata.hpp"
#include "specgraph/verify_ops.hpp"

namespace specgraph::python {

namespace {

// A memory span for the overlap checks.
struct span {
  const char* field;
  std::uintptr_t start;
  std::int64_t bytes;
};

span span_of(const char* field, const ffi::TensorView& t, std::int64_t bytes) {
  return {field, reinterpret_cast<std::uintptr_t>(address_of(t)),  // NOLINT: address only
          bytes};
}

std::int64_t item_bytes(const ffi::TensorView& t) {
  return (t.dtype().bits * t.dtype().lanes + 7) / 8;
}

bool same_device(DLDevice a, DLDevice b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

void check_device(const char* field, const ffi::TensorView& t, DLDevice device) {
  SPECGRAPH_EXPECTS(same_device(t.device(), device), field,
                    "on " + describe_device(t.device()) + ", but req_to_token is on " +
                        describe_device(device) + " (every tensor of the call on one device)");
}

// Output field i of the tables: C++'s shape of it (verify_shape_of) against the tensor, then
// its address (and a table's row stride) into p. Returns the span.
span out_field(int i, const ffi::TensorView& t, DLDevice device, verify_params& p) {
  const char* field = verify_field_names[i];
  const verify_field_shape need = verify_shape_of(i, p);
  check_device(field, t, device);
  const DLDataType dt = t.dtype();
  const bool ok = need.bytes ? (dt.code == kDLUInt && dt.bits == 8 && dt.lanes == 1)
                             : (dt.code == kDLInt && dt.bits == 32 && dt.lanes == 1);
  SPECGRAPH_EXPECTS(
      ok, field, "dtype " + describe_dtype(dt) + ", expected " + (need.bytes ? "uint8" : "int32"));
  set_verify_field(p, i, address_of(t));
  if (!need.table) {  // a vector
    SPECGRAPH_EXPECTS(t.ndim() == 1 && t.IsContiguous(), field,
                      "shape " + describe_shape(t) + ", expected a contiguous 1-D tensor");
    SPECGRAPH_EXPECTS(t.numel() >= need.rows, field,
                      std::to_string(t.numel()) + (need.bytes ? " bytes" : " entries") +
                          ", needs " + std::to_string(need.rows) + " (" + need.formula + ")");
    return span_of(field, t, t.numel() * item_bytes(t));
  }
  // A table [>= rows][>= cols]: unit column stride, rows at any stride >= their width.
  SPECGRAPH_EXPECTS(t.ndim() == 2, field, "shape " + describe_shape(t) + ", expected 2-D");
  std::int64_t stride = t.size(1);
  if (!t.IsContiguous()) {
    SPECGRAPH_EXPECTS(t.stride(1) == 1, field,
                      "column stride " + std::to_string(t.stride(1)) + ", expected 1");
    stride = t.stride(0);
    SPECGRAPH_EXPECTS(stride >= t.size(1), field,
                      "row stride " + std::to_string(stride) + " is below the row width " +
                          std::to_string(t.size(1)) + " (rows would overlap)");
  }
  SPECGRAPH_EXPECTS(t.size(0) >= need.rows && t.size(1) >= need.cols, field,
                    "shape " + describe_shape(t) + ", needs [" + std::to_string(need.rows) + ", " +
                        std::to_string(need.cols) + "] or larger (" + need.formula + ")");
  (i == 0 ? p.prefix_stride : p.expand_stride) = stride;
  const std::int64_t used = t.size(0) == 0 ? 0 : (t.size(0) - 1) * stride + t.size(1);
  return span_of(field, t, used * 4);
}

// One layout's tensors, in the tables' field order from `first`; a None or a short list leaves
// the fields null (the one layouts rule, verify_layouts_of, then refuses a partial layout by its
// first missing field).
void out_layout(const char* layout, const ffi::Array<ffi::Optional<ffi::Tensor>>& ts, int first,
                int count, DLDevice device, verify_params& p, std::vector<span>& spans) {
  SPECGRAPH_EXPECTS(static_cast<int>(ts.size()) <= count, layout,
                    std::to_string(ts.size()) + " tensors, more than its " + std::to_string(count) +
                        " (" + verify_field_names[first] + " ... " +
                        verify_field_names[first + count - 1] + ")");
  int k = 0;
  for (const ffi::Optional<ffi::Tensor>& t : ts) {
    if (t.has_value()) {
      const ffi::Tensor tensor = t.value();
      spans.push_back(out_field(first + k, tensor, device, p));
    }
    ++k;
  }
}

void check_no_overlap(const std::vector<span>& spans, std::size_t first_output) {
  for (std::size_t i = first_output; i < spans.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      const span& a = spans[i];
      const span& b = spans[j];
      const bool overlap = a.bytes > 0 && b.bytes > 0 &&
                           a.start < b.start + static_cast<std::uintptr_t>(b.bytes) &&
                           b.start < a.start + static_cast<std::uintptr_t>(a.bytes);
      SPECGRAPH_EXPECTS(!overlap, a.field, std::string("shares memory with ") + b.field);
    }
  }
}

// The whole op, a thin call of verify_metadata (verify_ops.hpp) over the caller's tensors: the
// scalars and the layouts rule are checked in C++ (validate), each buffer against the shape C++
// gives for it (verify_shape_of). fa3: its 8 tensors (a None or fewer is refused by the rule),
// flashinfer likewise its 7 (docs/verify.md sections 2-3); guard: int32, >= 30 entries
// (three guard words), reset by the call; scratch: int64 of verify_scratch_words(batch, D)
// (CUDA only; the host twin brings its own). A capacity of -1 is the exact one
// (verify_exact_tables: what verify_metadata_ passes); `metadata.verify` passes any (a short one
// refuses stores, recorded).
void verify_metadata_op(ffi::TensorView req_to_token, ffi::TensorView req_pool_index,
                        ffi::TensorView seq_len, ffi::TensorView custom_mask,
                        std::int64_t draft_tokens, std::int64_t page_size, std::int64_t max_seq_len,
                        std::int64_t real_batch, bool mask_exact, std::int64_t slot_limit,
                        std::int64_t prefix_capacity, std::int64_t kv_indices_capacity,
                        std::int64_t packed_mask_capacity,
                        ffi::Array<ffi::Optional<ffi::Tensor>> fa3,
                        ffi::Array<ffi::Optional<ffi::Tensor>> flashinfer, ffi::TensorView guard,
                        ffi::Optional<ffi::Tensor> scratch) {
  const DLDevice device = req_to_token.device();
  SPECGRAPH_EXPECTS(device.device_type == kDLCPU || device.device_type == kDLCUDA, "req_to_token",
                    "on " + describe_device(device) + ": specgraph runs on cpu or cuda memory");
  SPECGRAPH_EXPECTS(req_to_token.ndim() == 2, "req_to_token",
                    "shape " + describe_shape(req_to_token) + ", expected [pool_rows, width]");
  check_int_tensor("req_to_token", req_to_token, int_kind::int32, 1, device);
  check_int_tensor("seq_len", seq_len, int_kind::int32, 1, device);
  SPECGRAPH_EXPECTS(seq_len.ndim() == 1, "seq_len",
                    "shape " + describe_shape(seq_len) + ", expected [batch]");
  check_int_tensor("req_pool_index", req_pool_index, int_kind::int32, 1, device);
  SPECGRAPH_EXPECTS(req_pool_index.numel() == seq_len.numel(), "req_pool_index",
                    std::to_string(req_pool_index.numel()) +
                        " entries, expected one per request, " + std::to_string(seq_len.numel()));
  const DLDataType mt = custom_mask.dtype();
  SPECGRAPH_EXPECTS((mt.code == kDLUInt || mt.code == kDLBool) && mt.bits == 8 && mt.lanes == 1,
                    "custom_mask",
                    "dtype " + describe_dtype(mt) + ", expected uint8 or bool (one byte a cell)");
  check_device("custom_mask", custom_mask, device);
  // Empty is accepted: an idle rank (real_batch 0) has no mask cells; the length is checked
  // against the formula on the host or on the device.
  SPECGRAPH_EXPECTS(custom_mask.IsContiguous(), "custom_mask",
                    "shape " + describe_shape(custom_mask) + ", expected contiguous cells");

  verify_params p;
  p.req_to_token = static_cast<const std::int32_t*>(address_of(req_to_token));
  p.req_to_token_stride = req_to_token.size(1);
  p.pool_rows = int32_arg("pool_rows", req_to_token.size(0));
  p.req_pool_index = static_cast<const std::int32_t*>(address_of(req_pool_index));
  p.seq_len = static_cast<const std::int32_t*>(address_of(seq_len));
  p.batch = int32_arg("batch", seq_len.numel());
  p.real_batch = int32_arg("real_batch", real_batch);
  p.draft_tokens = int32_arg("draft_tokens", draft_tokens);
  p.page_size = int32_arg("page_size", page_size);
  p.max_seq_len = int32_arg("max_seq_len", max_seq_len);
  p.custom_mask = static_cast<const std::uint8_t*>(address_of(custom_mask));
  p.mask_cells = custom_mask.numel();
  p.mask_length_exact = mask_exact;
  p.slot_limit = slot_limit;
  // The scalars first (C++'s checks, once): every size below is derived from them. A capacity
  // of -1 is the exact one.
  p.prefix_capacity = prefix_capacity == -1 ? 0 : int32_arg("prefix_capacity", prefix_capacity);
  p.kv_indices_capacity = kv_indices_capacity == -1 ? 0 : kv_indices_capacity;
  p.packed_mask_capacity = packed_mask_capacity == -1 ? 0 : packed_mask_capacity;
  validate_scalars(p);
  const verify_tables exact =
      verify_exact_tables(p.batch, p.max_seq_len, p.page_size, p.draft_tokens);
  if (prefix_capacity == -1) p.prefix_capacity = exact.prefix_capacity;
  if (kv_indices_capacity == -1) p.kv_indices_capacity = exact.kv_indices_capacity;
  if (packed_mask_capacity == -1) p.packed_mask_capacity = exact.packed_mask_capacity;
  validate_scalars(p);

  // Every input and output as a span: no output may share memory with anything else.
  const std::int64_t batch = p.batch;
  std::vector<span> spans{
      span_of("req_to_token", req_to_token, req_to_token.numel() * 4),
      span_of("req_pool_index", req_pool_index, batch * 4),
      span_of("seq_len", seq_len, batch * 4),
      span_of("custom_mask", custom_mask, custom_mask.numel()),
  };
  const std::size_t first_output = spans.size();
  out_layout("fa3", fa3, 0, verify_fa3_fields, device, p, spans);
  out_layout("flashinfer", flashinfer, verify_fa3_fields, verify_field_count - verify_fa3_fields,
             device, p, spans);
  check_device("guard", guard, device);
  check_int_tensor("guard", guard, int_kind::int32, verify_guard_count * 10, device);
  spans.push_back(span_of("guard", guard, guard.numel() * 4));
  SPECGRAPH_EXPECTS(reinterpret_cast<std::uintptr_t>(address_of(guard)) % 8 == 0,  // NOLINT
                    "guard", "not 8-byte aligned (a guard word holds an int64)");
  p.guard = static_cast<guard_word*>(address_of(guard));
  const bool host = device.device_type == kDLCPU;
  SPECGRAPH_EXPECTS(host || scratch.has_value(), "scratch",
                    "missing: CUDA runs need int64 scratch of verify_scratch_words(batch, D)");
  if (scratch.has_value()) {
    const ffi::Tensor s = scratch.value();
    check_device("scratch", s, device);
    check_int_tensor("scratch", s, int_kind::int64, 1, device);
    const std::int64_t words = verify_scratch_words(p.batch, p.draft_tokens);
    SPECGRAPH_EXPECTS(s.numel() >= words, "scratch",
                      std::to_string(s.numel()) + " int64 words, needs " + std::to_string(words) +
                          " (verify_scratch_words: 5 * batch + 2 * batch * D)");
    spans.push_back(span_of("scratch", s, s.numel() * 8));
    if (!host) p.scratch = static_cast<std::int64_t*>(address_of(s));  // the host twin: its own
  }
  check_no_overlap(spans, first_output);
  run_verify_metadata(executor_for(device), p, /*host_memory=*/host);
}

// The verify tables of a bucket of `batch` at the longest seq_len M with D verify tokens, as C++
// defines them (docs/verify.md section 6): {"capacity": [prefix columns, kv_indices, packed
// mask bytes, mask cells, scratch words], "fields": one [name, layout, rows, cols, bytes,
// formula] per field in the tables' order (verify_shape_of: cols -1 for a vector)}. Python's
// VerifyFa3 / VerifyFlashInfer and every size it allocates or slices come from here.
ffi_map verify_tables_of(std::int64_t batch, std::int64_t max_seq_len, std::int64_t draft_tokens,
                         std::int64_t page_size) {
  verify_params p;
  p.batch = int32_arg("max_batch", batch);
  p.real_batch = p.batch;
  p.max_seq_len = int32_arg("max_seq_len", max_seq_len);
  p.draft_tokens = int32_arg("draft_tokens", draft_tokens);
  p.page_size = int32_arg("page_size", page_size);
  p.req_to_token_stride = 1;
  p.pool_rows = 1;
  // The bucket is the plan's max_batch here: named so (validate_scalars would say "batch").
  detail::between("max_batch", p.batch, 1, limits::max_batch, "the limit");
  validate_scalars(p);
  static_cast<verify_tables&>(p) =
      verify_exact_tables(p.batch, p.max_seq_len, p.page_size, p.draft_tokens);
  ffi::Array<ffi::Any> fields;
  for (int i = 0; i < verify_field_count; ++i) {
    const verify_field_shape s = verify_shape_of(i, p);
    fields.push_back(ffi::Array<ffi::Any>{ffi::String(verify_field_names[i]),
                                          ffi::String(i < verify_fa3_fields ? "fa3" : "flashinfer"),
                                          s.rows, s.table ? s.cols : std::int64_t{-1}, s.bytes,
                                          ffi::String(s.formula)});
  }
  const ffi::Array<std::int64_t> capacity{
      p.prefix_capacity, p.kv_indices_capacity, p.packed_mask_capacity,
      verify_mask_cells_capacity(p.batch, p.max_seq_len, p.draft_tokens),
      verify_scratch_words(p.batch, p.draft_tokens)};
  return ffi_map{{"capacity", capacity}, {"fields", fields}};
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("specgraph.verify_metadata", checked<&verify_metadata_op>::call)
      .def("specgraph.verify_tables", checked<&verify_tables_of>::call);
}

}  // namespace specgraph::python
