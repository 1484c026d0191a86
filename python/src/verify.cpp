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

#include "python/src/binding.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph::python {

namespace {

constexpr std::int64_t int32_max = 0x7fffffff;

constexpr const char* fa3_names[] = {
    "prefix_page_table", "prefix_cache_seqlen", "prefix_cu_seqlens_q", "prefix_cu_seqlens_k",
    "expand_page_table", "expand_cache_seqlen", "expand_cu_seqlens_q", "expand_cu_seqlens_k"};
constexpr const char* flashinfer_names[] = {"qo_indptr",         "kv_indptr",   "kv_indices",
                                            "kv_last_page_len",  "mask_indptr", "packed_mask",
                                            "packed_mask_indptr"};

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

// A 1-D output of `need` cells or more (contiguous), int32 or (packed_mask) uint8.
span out_1d(const char* field, const ffi::TensorView& t, DLDevice device, std::int64_t need,
            const std::string& formula, bool bytes) {
  check_device(field, t, device);
  const DLDataType dt = t.dtype();
  const bool ok = bytes ? (dt.code == kDLUInt && dt.bits == 8 && dt.lanes == 1)
                        : (dt.code == kDLInt && dt.bits == 32 && dt.lanes == 1);
  SPECGRAPH_EXPECTS(ok, field,
                    "dtype " + describe_dtype(dt) + ", expected " + (bytes ? "uint8" : "int32"));
  SPECGRAPH_EXPECTS(t.ndim() == 1 && t.IsContiguous(), field,
                    "shape " + describe_shape(t) + ", expected a contiguous 1-D tensor");
  SPECGRAPH_EXPECTS(t.numel() >= need, field,
                    std::to_string(t.numel()) + (bytes ? " bytes" : " entries") + ", needs " +
                        std::to_string(need) + " (" + formula + ")");
  return span_of(field, t, t.numel() * item_bytes(t));
}

// A 2-D int32 output [>= rows][>= width]: unit column stride, rows at any stride >= width.
// Returns the span; *stride gets the row stride.
span out_2d(const char* field, const ffi::TensorView& t, DLDevice device, std::int64_t rows,
            std::int64_t width, const std::string& formula, std::int64_t* stride) {
  check_device(field, t, device);
  const DLDataType dt = t.dtype();
  SPECGRAPH_EXPECTS(dt.code == kDLInt && dt.bits == 32 && dt.lanes == 1, field,
                    "dtype " + describe_dtype(dt) + ", expected int32");
  SPECGRAPH_EXPECTS(t.ndim() == 2, field, "shape " + describe_shape(t) + ", expected 2-D");
  *stride = t.size(1);
  if (!t.IsContiguous()) {
    SPECGRAPH_EXPECTS(t.stride(1) == 1, field,
                      "column stride " + std::to_string(t.stride(1)) + ", expected 1");
    *stride = t.stride(0);
    SPECGRAPH_EXPECTS(*stride >= t.size(1), field,
                      "row stride " + std::to_string(*stride) + " is below the row width " +
                          std::to_string(t.size(1)) + " (rows would overlap)");
  }
  SPECGRAPH_EXPECTS(t.size(0) >= rows && t.size(1) >= width, field,
                    "shape " + describe_shape(t) + ", needs [" + std::to_string(rows) + ", " +
                        std::to_string(width) + "] or larger (" + formula + ")");
  const std::int64_t used = t.size(0) == 0 ? 0 : (t.size(0) - 1) * *stride + t.size(1);
  return span_of(field, t, used * 4);
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

std::string capacity_formula(const char* what, std::int64_t batch, std::int64_t m, std::int64_t d) {
  return std::string(what) + ", batch " + std::to_string(batch) + ", max_seq_len " +
         std::to_string(m) + ", D " + std::to_string(d);
}

// The whole op. fa3: 8 tensors or none, flashinfer: 7 or none (docs/verify.md sections 2-3);
// guard: int32, >= 30 entries (three guard words), reset by the call; scratch: int64 of
// verify_scratch_words(batch, D) (CUDA only; the host twin brings its own). The capacities are
// the caller's: verify_metadata_ passes the exact ones (ceil(M / ps), batch * (M + D),
// batch * ceil(D * (M + D) / 8)), `metadata.verify` any (a short one refuses stores, recorded).
void verify_metadata_op(ffi::TensorView req_to_token, ffi::TensorView req_pool_index,
                        ffi::TensorView seq_len, ffi::TensorView custom_mask,
                        std::int64_t draft_tokens, std::int64_t page_size, std::int64_t max_seq_len,
                        std::int64_t real_batch, bool mask_exact, std::int64_t slot_limit,
                        std::int64_t prefix_capacity, std::int64_t kv_indices_capacity,
                        std::int64_t packed_mask_capacity, ffi::Array<ffi::Tensor> fa3,
                        ffi::Array<ffi::Tensor> flashinfer, ffi::TensorView guard,
                        ffi::Optional<ffi::Tensor> scratch) {
  const DLDevice device = req_to_token.device();
  SPECGRAPH_EXPECTS(device.device_type == kDLCPU || device.device_type == kDLCUDA, "req_to_token",
                    "on " + describe_device(device) + ": specgraph runs on cpu or cuda memory");
  // The scalars first: every size below is derived from them.
  SPECGRAPH_EXPECTS(draft_tokens >= 1 && draft_tokens <= max_draft_tokens, "draft_tokens",
                    std::to_string(draft_tokens) + " is outside [1, the limit " +
                        std::to_string(max_draft_tokens) + "]");
  SPECGRAPH_EXPECTS(page_size >= 1 && page_size <= limits::max_page_size, "page_size",
                    std::to_string(page_size) + " is outside [1, the limit " +
                        std::to_string(limits::max_page_size) + "]");
  SPECGRAPH_EXPECTS(max_seq_len >= 1 && max_seq_len <= limits::max_context_len, "max_seq_len",
                    std::to_string(max_seq_len) + " is outside [1, the limit " +
                        std::to_string(limits::max_context_len) + "]");
  SPECGRAPH_EXPECTS(req_to_token.ndim() == 2, "req_to_token",
                    "shape " + describe_shape(req_to_token) + ", expected [pool_rows, width]");
  check_int_tensor("req_to_token", req_to_token, int_kind::int32, 1, device);
  check_int_tensor("seq_len", seq_len, int_kind::int32, 1, device);
  SPECGRAPH_EXPECTS(seq_len.ndim() == 1 && seq_len.numel() <= limits::max_batch, "seq_len",
                    "shape " + describe_shape(seq_len) + ", expected [batch], batch in [1, " +
                        std::to_string(limits::max_batch) + "]");
  const std::int64_t batch = seq_len.numel();
  check_int_tensor("req_pool_index", req_pool_index, int_kind::int32, 1, device);
  SPECGRAPH_EXPECTS(req_pool_index.numel() == batch, "req_pool_index",
                    std::to_string(req_pool_index.numel()) +
                        " entries, expected one per request, " + std::to_string(batch));
  const DLDataType mt = custom_mask.dtype();
  SPECGRAPH_EXPECTS((mt.code == kDLUInt || mt.code == kDLBool) && mt.bits == 8 && mt.lanes == 1,
                    "custom_mask",
                    "dtype " + describe_dtype(mt) + ", expected uint8 or bool (one byte a cell)");
  check_device("custom_mask", custom_mask, device);
  // Empty is accepted: an idle rank (real_batch 0) has no mask cells; the length is checked
  // against the formula below (on the host) or on the device.
  SPECGRAPH_EXPECTS(custom_mask.IsContiguous(), "custom_mask",
                    "shape " + describe_shape(custom_mask) + ", expected contiguous cells");

  verify_params p;
  p.req_to_token = static_cast<const std::int32_t*>(address_of(req_to_token));
  p.req_to_token_stride = req_to_token.size(1);
  p.pool_rows = int32_arg("pool_rows", req_to_token.size(0));
  p.req_pool_index = static_cast<const std::int32_t*>(address_of(req_pool_index));
  p.seq_len = static_cast<const std::int32_t*>(address_of(seq_len));
  p.batch = static_cast<std::int32_t>(batch);
  p.real_batch = int32_arg("real_batch", real_batch);
  p.draft_tokens = static_cast<std::int32_t>(draft_tokens);
  p.page_size = static_cast<std::int32_t>(page_size);
  p.max_seq_len = static_cast<std::int32_t>(max_seq_len);
  p.custom_mask = static_cast<const std::uint8_t*>(address_of(custom_mask));
  p.mask_cells = custom_mask.numel();
  p.mask_length_exact = mask_exact;
  p.slot_limit = slot_limit;
  p.prefix_capacity = int32_arg("prefix_capacity", prefix_capacity);
  p.kv_indices_capacity = int32_arg("kv_indices_capacity", kv_indices_capacity);
  p.packed_mask_capacity = int32_arg("packed_mask_capacity", packed_mask_capacity);

  // Every input and output as a span: no output may share memory with anything else.
  std::vector<span> spans{
      span_of("req_to_token", req_to_token, req_to_token.numel() * 4),
      span_of("req_pool_index", req_pool_index, batch * 4),
      span_of("seq_len", seq_len, batch * 4),
      span_of("custom_mask", custom_mask, custom_mask.numel()),
  };
  const std::size_t first_output = spans.size();
  SPECGRAPH_EXPECTS(fa3.empty() || fa3.size() == 8, "fa3",
                    std::to_string(fa3.size()) + " tensors, expected all 8 (" +
                        "prefix_page_table ... expand_cu_seqlens_k) or none");
  SPECGRAPH_EXPECTS(flashinfer.empty() || flashinfer.size() == 7, "flashinfer",
                    std::to_string(flashinfer.size()) + " tensors, expected all 7 (" +
                        "qo_indptr ... packed_mask_indptr) or none");
  SPECGRAPH_EXPECTS(!fa3.empty() || !flashinfer.empty(), "fa3",
                    "no output set: pass the fa3 tensors, the flashinfer tensors, or both");
  const std::int64_t d = draft_tokens, m = max_seq_len, rows = batch * d;
  if (!fa3.empty()) {
    SPECGRAPH_EXPECTS(p.prefix_capacity >= 0, "prefix_capacity",
                      std::to_string(p.prefix_capacity) + " is below the minimum 0");
    const std::vector<ffi::Tensor> t(fa3.begin(), fa3.end());
    spans.push_back(out_2d(fa3_names[0], t[0], device, batch, p.prefix_capacity,
                           "[batch, prefix_capacity]: prefix_capacity = ceil(max_seq_len " +
                               std::to_string(m) + " / page_size " + std::to_string(page_size) +
                               ") for every admissible length",
                           &p.prefix_stride));
    spans.push_back(out_1d(fa3_names[1], t[1], device, batch, "batch", false));
    spans.push_back(out_1d(fa3_names[2], t[2], device, batch + 1, "batch + 1", false));
    spans.push_back(out_1d(fa3_names[3], t[3], device, batch + 1, "batch + 1", false));
    spans.push_back(out_2d(fa3_names[4], t[4], device, rows, d,
                           "[batch * D, D] = [" + std::to_string(batch) + " * " +
                               std::to_string(d) + ", " + std::to_string(d) + "]",
                           &p.expand_stride));
    spans.push_back(out_1d(fa3_names[5], t[5], device, rows, "batch * D", false));
    spans.push_back(out_1d(fa3_names[6], t[6], device, rows + 1, "batch * D + 1", false));
    spans.push_back(out_1d(fa3_names[7], t[7], device, rows + 1, "batch * D + 1", false));
    auto i32 = [&](int k) { return static_cast<std::int32_t*>(address_of(t[k])); };
    p.prefix_page_table = i32(0);
    p.prefix_cache_seqlen = i32(1);
    p.prefix_cu_seqlens_q = i32(2);
    p.prefix_cu_seqlens_k = i32(3);
    p.expand_page_table = i32(4);
    p.expand_cache_seqlen = i32(5);
    p.expand_cu_seqlens_q = i32(6);
    p.expand_cu_seqlens_k = i32(7);
  }
  if (!flashinfer.empty()) {
    SPECGRAPH_EXPECTS(p.kv_indices_capacity >= 0, "kv_indices_capacity",
                      std::to_string(p.kv_indices_capacity) + " is below the minimum 0");
    SPECGRAPH_EXPECTS(p.packed_mask_capacity >= 0, "packed_mask_capacity",
                      std::to_string(p.packed_mask_capacity) + " is below the minimum 0");
    const std::vector<ffi::Tensor> t(flashinfer.begin(), flashinfer.end());
    spans.push_back(out_1d(flashinfer_names[0], t[0], device, batch + 1, "batch + 1", false));
    spans.push_back(out_1d(flashinfer_names[1], t[1], device, batch + 1, "batch + 1", false));
    spans.push_back(out_1d(
        flashinfer_names[2], t[2], device, p.kv_indices_capacity,
        capacity_formula("kv_indices_capacity = batch * (max_seq_len + D)", batch, m, d), false));
    spans.push_back(out_1d(flashinfer_names[3], t[3], device, batch, "batch", false));
    spans.push_back(out_1d(flashinfer_names[4], t[4], device, batch + 1, "batch + 1", false));
    spans.push_back(
        out_1d(flashinfer_names[5], t[5], device, p.packed_mask_capacity,
               capacity_formula("packed_mask_capacity = batch * ceil(D * (max_seq_len + D) / 8); "
                                "max_seq_len counts the prefix WITHOUT the D verify tokens",
                                batch, m, d),
               true));
    spans.push_back(out_1d(flashinfer_names[6], t[6], device, batch + 1, "batch + 1", false));
    auto i32 = [&](int k) { return static_cast<std::int32_t*>(address_of(t[k])); };
    p.qo_indptr = i32(0);
    p.kv_indptr = i32(1);
    p.kv_indices = i32(2);
    p.kv_last_page_len = i32(3);
    p.mask_indptr = i32(4);
    p.packed_mask = static_cast<std::uint8_t*>(address_of(t[5]));
    p.packed_mask_indptr = i32(6);
  }
  check_device("guard", guard, device);
  check_int_tensor("guard", guard, int_kind::int32, verify_guard_count * 10, device);
  spans.push_back(span_of("guard", guard, guard.numel() * 4));
  SPECGRAPH_EXPECTS(reinterpret_cast<std::uintptr_t>(address_of(guard)) % 8 == 0,  // NOLINT
                    "guard", "not 8-byte aligned (a guard word holds an int64)");
  p.guard = static_cast<guard_word*>(address_of(guard));
  executor& ex = executor_for(device);
  if (device.device_type == kDLCUDA) {
    SPECGRAPH_EXPECTS(scratch.has_value(), "scratch",
                      "missing: CUDA runs need int64 scratch of verify_scratch_words(batch, D)");
  }
  if (scratch.has_value()) {
    const ffi::Tensor s = scratch.value();
    check_device("scratch", s, device);
    check_int_tensor("scratch", s, int_kind::int64, 1, device);
    const std::int64_t words = verify_scratch_words(p.batch, p.draft_tokens);
    SPECGRAPH_EXPECTS(s.numel() >= words, "scratch",
                      std::to_string(s.numel()) + " int64 words, needs " + std::to_string(words) +
                          " (verify_scratch_words: 5 * batch + 2 * batch * D)");
    spans.push_back(span_of("scratch", s, s.numel() * 8));
    p.scratch = static_cast<std::int64_t*>(address_of(s));
  }
  check_no_overlap(spans, first_output);
  if (device.device_type == kDLCPU) {
    validate_contents_host(p);  // every content, the mask's length included; nothing written
    ex.fill_bytes(p.guard, 0, sizeof(guard_word) * verify_guard_count);
    p.scratch = nullptr;  // the host twin brings its own
    verify_metadata_host(p);
    return;
  }
  validate(p);
  ex.fill_bytes(p.guard, 0, sizeof(guard_word) * verify_guard_count);
  launch_verify_metadata(ex, p);
}

// [prefix columns, kv_indices, packed mask bytes, mask cells, scratch words] of a bucket of
// `batch` at the longest seq_len M with D verify tokens (docs/verify.md section 6).
ffi::Array<std::int64_t> verify_capacities(std::int64_t batch, std::int64_t max_seq_len,
                                           std::int64_t draft_tokens, std::int64_t page_size) {
  SPECGRAPH_EXPECTS(batch >= 1 && batch <= limits::max_batch, "max_batch",
                    std::to_string(batch) + " is outside [1, the limit " +
                        std::to_string(limits::max_batch) + "]");
  SPECGRAPH_EXPECTS(draft_tokens >= 1 && draft_tokens <= max_draft_tokens, "draft_tokens",
                    std::to_string(draft_tokens) + " is outside [1, the limit " +
                        std::to_string(max_draft_tokens) + "]");
  SPECGRAPH_EXPECTS(page_size >= 1 && page_size <= limits::max_page_size, "page_size",
                    std::to_string(page_size) + " is outside [1, the limit " +
                        std::to_string(limits::max_page_size) + "]");
  SPECGRAPH_EXPECTS(max_seq_len >= 1 && max_seq_len <= limits::max_context_len, "max_seq_len",
                    std::to_string(max_seq_len) + " is outside [1, the limit " +
                        std::to_string(limits::max_context_len) + "]");
  const auto b = static_cast<std::int32_t>(batch), m = static_cast<std::int32_t>(max_seq_len);
  const auto d = static_cast<std::int32_t>(draft_tokens);
  const std::int64_t cells = verify_mask_cells_capacity(b, m, d);
  SPECGRAPH_EXPECTS(
      cells <= int32_max, "max_seq_len",
      std::to_string(batch) + " requests x " + std::to_string(d) + " queries x (" +
          std::to_string(m) + " + " + std::to_string(d) + ") keys = " + std::to_string(cells) +
          " mask cells exceeds the int32 mask_indptr limit " + std::to_string(int32_max));
  return {verify_prefix_columns(m, static_cast<std::int32_t>(page_size)),
          verify_kv_indices_capacity(b, m, d), verify_packed_mask_capacity(b, m, d), cells,
          verify_scratch_words(b, d)};
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("specgraph.verify_metadata", checked<&verify_metadata_op>::call)
      .def("specgraph.verify_capacities", checked<&verify_capacities>::call);
}

}  // namespace specgraph::python
