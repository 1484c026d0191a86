// The Python extension's draft-extend metadata op (extend_metadata.hpp, docs/extend.md): the
// extend tokens, FA3's tables, the CSR prefix layout (Triton) and the CSR full layout
// (FlashInfer's graph replay), written into tensors the caller owns, whichever layouts it passes.
// Everything is checked on the host before anything is written (invalid_argument naming the
// buffer, its size and the size needed; the one layouts rule of extend_layouts_of); then, on CUDA
// memory, the kernels are enqueued on the environment stream (torch's current stream for a torch
// tensor argument: capture-safe, no synchronisation), on host memory the host twin runs after
// validate_contents_host (run_extend_metadata).
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>
#include <string>
#include <vector>

#include "device/checks.hpp"
#include "python/src/binding.hpp"
#include "python/src/extend_fields.hpp"
#include "specgraph/extend_metadata.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/limits.hpp"

namespace specgraph::python {

namespace {

// The layouts in the tables' field order (extend_metadata.hpp: tokens' three, fa3's five,
// prefix's three, full's four): the names Python groups the fields by.
struct layout_range {
  const char* name;
  int first, count;
};
constexpr layout_range extend_layout_ranges[] = {
    {"tokens", 0, 3}, {"fa3", 3, 5}, {"prefix", 8, 3}, {"full", 11, 4}};
static_assert(11 + 4 == extend_field_count, "the four layouts cover every field");

const char* layout_of(int i) {
  for (const layout_range& l : extend_layout_ranges) {
    if (i >= l.first && i < l.first + l.count) return l.name;
  }
  return "";
}

}  // namespace

// The output tensors' checks, shared with extend_arena.cpp (extend_fields.hpp).
span span_of(const char* field, const ffi::TensorView& t, std::int64_t bytes) {
  return {field, reinterpret_cast<std::uintptr_t>(address_of(t)),  // NOLINT: address only
          bytes};
}

void check_device(const char* field, const ffi::TensorView& t, DLDevice device) {
  const DLDevice d = t.device();
  SPECGRAPH_EXPECTS(d.device_type == device.device_type && d.device_id == device.device_id, field,
                    "on " + describe_device(d) + ", but req_to_token is on " +
                        describe_device(device) + " (every tensor of the call on one device)");
}

// Output field i: C++'s shape of it (extend_shape_of) against the tensor, then its address (and
// the page table's row stride) into p. Returns the span.
span out_field(int i, const ffi::TensorView& t, DLDevice device, extend_params& p) {
  const char* field = extend_field_names[i];
  const extend_field_shape need = extend_shape_of(i, p);
  check_device(field, t, device);
  const DLDataType dt = t.dtype();
  SPECGRAPH_EXPECTS(dt.code == kDLInt && dt.bits == 32 && dt.lanes == 1, field,
                    "dtype " + describe_dtype(dt) + ", expected int32");
  set_extend_field(p, i, static_cast<std::int32_t*>(address_of(t)));
  if (!need.table) {  // a vector
    SPECGRAPH_EXPECTS(t.ndim() == 1 && t.IsContiguous(), field,
                      "shape " + describe_shape(t) + ", expected a contiguous 1-D tensor");
    SPECGRAPH_EXPECTS(t.numel() >= need.rows, field,
                      std::to_string(t.numel()) + " entries, needs " + std::to_string(need.rows) +
                          " (" + need.formula + ")");
    return span_of(field, t, t.numel() * 4);
  }
  // The page table [>= rows][>= cols]: unit column stride, rows at any stride >= their width.
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
  p.page_stride = stride;
  const std::int64_t used = t.size(0) == 0 ? 0 : (t.size(0) - 1) * stride + t.size(1);
  return span_of(field, t, used * 4);
}

// One layout's tensors in the tables' order; a None or a short list leaves the fields null (the
// one layouts rule, extend_layouts_of, then refuses a partial layout by its first missing field).
void out_layout(int layout, const ffi::Array<ffi::Optional<ffi::Tensor>>& ts, DLDevice device,
                extend_params& p, std::vector<span>& spans) {
  const layout_range& l = extend_layout_ranges[layout];
  SPECGRAPH_EXPECTS(static_cast<int>(ts.size()) <= l.count, l.name,
                    std::to_string(ts.size()) + " tensors, more than its " +
                        std::to_string(l.count) + " (" + extend_field_names[l.first] + " ... " +
                        extend_field_names[l.first + l.count - 1] + ")");
  int k = 0;
  for (const ffi::Optional<ffi::Tensor>& t : ts) {
    if (t.has_value()) {
      const ffi::Tensor tensor = t.value();
      spans.push_back(out_field(l.first + k, tensor, device, p));
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

namespace {

void int32_vector(const char* field, const ffi::TensorView& t, std::int64_t n, DLDevice device) {
  check_int_tensor(field, t, int_kind::int32, 0, device);
  SPECGRAPH_EXPECTS(t.ndim() == 1 && t.numel() == n, field,
                    "shape " + describe_shape(t) + ", expected [" + std::to_string(n) +
                        "] (one per request of the bucket, as seq_lens)");
}

// The whole op, a thin call of run_extend_metadata over the caller's tensors: the scalars and
// the layouts rule are checked in C++ (validate), each buffer against the shape C++ gives for it
// (extend_shape_of). tokens / fa3 / prefix / full: each layout's tensors in the tables' order or
// none; real_batch_at: an int32 [1] word on the device the kernels read the real batch from (the
// scalar real_batch is then the bucket); guard: int32 [extend_guard_count * 10], reset by the
// call; scratch: int64 of extend_scratch_words(batch) (CUDA only; the host twin brings its own).
// A capacity of -1 is the exact one (extend_exact_tables: what extend_metadata_ passes);
// `metadata.extend` passes any (a short one refuses stores, recorded).
void extend_metadata_op(ffi::TensorView req_to_token, ffi::TensorView req_pool_index,
                        ffi::TensorView seq_len, ffi::TensorView accept_len,
                        ffi::Optional<ffi::Tensor> real_batch_at, std::int64_t extend_tokens,
                        std::int64_t page_size, std::int64_t max_seq_len, std::int64_t real_batch,
                        std::int64_t slot_limit, std::int64_t page_capacity,
                        std::int64_t prefix_kv_capacity, std::int64_t full_kv_capacity,
                        ffi::Array<ffi::Optional<ffi::Tensor>> tokens,
                        ffi::Array<ffi::Optional<ffi::Tensor>> fa3,
                        ffi::Array<ffi::Optional<ffi::Tensor>> prefix,
                        ffi::Array<ffi::Optional<ffi::Tensor>> full, ffi::TensorView guard,
                        ffi::Optional<ffi::Tensor> scratch) {
  const DLDevice device = req_to_token.device();
  SPECGRAPH_EXPECTS(device.device_type == kDLCPU || device.device_type == kDLCUDA, "req_to_token",
                    "on " + describe_device(device) + ": specgraph runs on cpu or cuda memory");
  SPECGRAPH_EXPECTS(req_to_token.ndim() == 2, "req_to_token",
                    "shape " + describe_shape(req_to_token) + ", expected [pool_rows, width]");
  check_int_tensor("req_to_token", req_to_token, int_kind::int32, 1, device);
  check_int_tensor("seq_lens", seq_len, int_kind::int32, 0, device);
  SPECGRAPH_EXPECTS(seq_len.ndim() == 1, "seq_lens",
                    "shape " + describe_shape(seq_len) + ", expected [batch]");
  const std::int64_t batch = seq_len.numel();
  int32_vector("req_pool_indices", req_pool_index, batch, device);
  int32_vector("accept_lens", accept_len, batch, device);

  extend_params p;
  p.req_to_token = static_cast<const std::int32_t*>(address_of(req_to_token));
  p.req_to_token_stride = req_to_token.size(1);
  p.pool_rows = int32_arg("pool_rows", req_to_token.size(0));
  p.req_pool_index = static_cast<const std::int32_t*>(address_of(req_pool_index));
  p.seq_len = static_cast<const std::int32_t*>(address_of(seq_len));
  p.accept_len = static_cast<const std::int32_t*>(address_of(accept_len));
  p.batch = int32_arg("batch", batch);
  p.real_batch = int32_arg("real_batch", real_batch);
  p.extend_tokens = int32_arg("extend_tokens", extend_tokens);
  p.page_size = int32_arg("page_size", page_size);
  p.max_seq_len = int32_arg("max_seq_len", max_seq_len);
  p.slot_limit = slot_limit;
  // The scalars first (C++'s checks, once): every size below is derived from them. A capacity
  // of -1 is the exact one.
  p.page_capacity = page_capacity == -1 ? 1 : int32_arg("page_capacity", page_capacity);
  p.page_stride = p.page_capacity;
  p.prefix_kv_capacity = prefix_kv_capacity == -1 ? 0 : prefix_kv_capacity;
  p.full_kv_capacity = full_kv_capacity == -1 ? 0 : full_kv_capacity;
  validate_scalars(p);
  const extend_tables exact =
      extend_exact_tables(p.batch, p.max_seq_len, p.page_size, p.extend_tokens);
  if (page_capacity == -1) p.page_capacity = exact.page_capacity;
  p.page_stride = p.page_capacity;  // the tensor's row stride below
  if (prefix_kv_capacity == -1) p.prefix_kv_capacity = exact.prefix_kv_capacity;
  if (full_kv_capacity == -1) p.full_kv_capacity = exact.full_kv_capacity;
  validate_scalars(p);

  // Every input and output as a span: no output may share memory with anything else.
  std::vector<span> spans{
      span_of("req_to_token", req_to_token, req_to_token.numel() * 4),
      span_of("req_pool_indices", req_pool_index, batch * 4),
      span_of("seq_lens", seq_len, batch * 4),
      span_of("accept_lens", accept_len, batch * 4),
  };
  if (real_batch_at.has_value()) {
    const ffi::Tensor rb = real_batch_at.value();
    check_int_tensor("real_batch", rb, int_kind::int32, 1, device);
    p.real_batch_at = static_cast<const std::int32_t*>(address_of(rb));
    spans.push_back(span_of("real_batch", rb, 4));
  }
  const std::size_t first_output = spans.size();
  const ffi::Array<ffi::Optional<ffi::Tensor>>* sets[] = {&tokens, &fa3, &prefix, &full};
  for (int l = 0; l < 4; ++l) out_layout(l, *sets[l], device, p, spans);
  const std::int64_t guard_int32s =
      std::int64_t{extend_guard_count} * static_cast<std::int64_t>(sizeof(guard_word) / 4);
  check_int_tensor("guard", guard, int_kind::int32, guard_int32s, device);
  spans.push_back(span_of("guard", guard, guard.numel() * 4));
  SPECGRAPH_EXPECTS(reinterpret_cast<std::uintptr_t>(address_of(guard)) % 8 == 0,  // NOLINT
                    "guard", "not 8-byte aligned (a guard word holds an int64)");
  p.guard = static_cast<guard_word*>(address_of(guard));
  const bool host = device.device_type == kDLCPU;
  SPECGRAPH_EXPECTS(host || scratch.has_value(), "scratch",
                    "missing: CUDA runs need int64 scratch of extend_scratch_words(batch)");
  if (scratch.has_value()) {
    const ffi::Tensor s = scratch.value();
    check_int_tensor("scratch", s, int_kind::int64, 1, device);
    const std::int64_t words = extend_scratch_words(p.batch);
    SPECGRAPH_EXPECTS(s.numel() >= words, "scratch",
                      std::to_string(s.numel()) + " int64 words, needs " + std::to_string(words) +
                          " (extend_scratch_words(batch))");
    spans.push_back(span_of("scratch", s, s.numel() * 8));
    if (!host) p.scratch = static_cast<std::int64_t*>(address_of(s));  // the host twin: its own
  }
  check_no_overlap(spans, first_output);
  run_extend_metadata(executor_for(device), p, /*host_memory=*/host);
}

// The draft-extend tables of a bucket of `batch` at the longest seq_len M and window W, as C++
// defines them: {"capacity": [page columns, prefix kv_indices, full kv_indices, scratch words,
// guard words], "fields": one [name, layout, rows, cols, formula] per field in the tables' order
// (extend_shape_of: cols -1 for a vector)}. Python's ExtendTokens / ExtendFa3 / ExtendPrefix /
// ExtendFull and every size it allocates come from here.
ffi_map extend_tables_of(std::int64_t batch, std::int64_t max_seq_len, std::int64_t extend_tokens,
                         std::int64_t page_size) {
  extend_params p;
  p.batch = int32_arg("max_batch", batch);
  p.real_batch = p.batch;
  p.max_seq_len = int32_arg("max_seq_len", max_seq_len);
  p.extend_tokens = int32_arg("extend_tokens", extend_tokens);
  p.page_size = int32_arg("page_size", page_size);
  p.req_to_token_stride = 1;
  p.pool_rows = 1;
  // The bucket is the caller's max_batch here: named so (validate_scalars would say "batch").
  detail::between("max_batch", p.batch, 0, limits::max_batch, "the limit");
  static_cast<extend_tables&>(p) =
      extend_exact_tables(p.batch, p.max_seq_len, p.page_size, p.extend_tokens);
  validate_scalars(p);
  ffi::Array<ffi::Any> fields;
  for (int i = 0; i < extend_field_count; ++i) {
    const extend_field_shape s = extend_shape_of(i, p);
    fields.push_back(
        ffi::Array<ffi::Any>{ffi::String(extend_field_names[i]), ffi::String(layout_of(i)), s.rows,
                             s.table ? s.cols : std::int64_t{-1}, ffi::String(s.formula)});
  }
  const ffi::Array<std::int64_t> capacity{p.page_capacity, p.prefix_kv_capacity, p.full_kv_capacity,
                                          extend_scratch_words(p.batch),
                                          std::int64_t{extend_guard_count}};
  return ffi_map{{"capacity", capacity}, {"fields", fields}};
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("specgraph.extend_metadata", checked<&extend_metadata_op>::call)
      .def("specgraph.extend_tables", checked<&extend_tables_of>::call);
}

}  // namespace specgraph::python
