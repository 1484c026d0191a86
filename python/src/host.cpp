// The Python extension's host-side helpers: the function-level metadata kernels on host arrays
// (crash dumps and the published vectors, like `specgraph metadata expand|fallback`), the sparse
// stage list, guard descriptions, zero-copy arena views for frameworks other than numpy and
// torch, build facts, and two hooks for the tests (the stream an op would use, and every C++
// exception type by name).
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "python/src/binding.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/metadata.hpp"
#include "specgraph/runtime.hpp"
#include "specgraph/verify_metadata.hpp"

namespace specgraph::python {
namespace {

// A zero-copy typed view of `bytes` of a 1-D uint8 arena at `offset`, holding a reference to the
// arena (for frameworks other than numpy and torch, which slice natively).
ffi::Tensor arena_view(ffi::Tensor arena, std::int64_t offset, DLDataType dtype,
                       ffi::Array<std::int64_t> shape_in) {
  const DLDataType a = arena.dtype();
  SPECGRAPH_EXPECTS(arena.ndim() == 1 && a.code == kDLUInt && a.bits == 8 && a.lanes == 1, "arena",
                    "expected a 1-D uint8 tensor");
  SPECGRAPH_EXPECTS(arena.IsContiguous(), "arena", "not contiguous");
  std::vector<std::int64_t> shape(shape_in.begin(), shape_in.end());
  const std::int64_t item = (dtype.bits * dtype.lanes + 7) / 8;
  std::int64_t numel = 1;
  for (const std::int64_t d : shape) {
    SPECGRAPH_EXPECTS(d >= 0, "shape", std::to_string(d) + " is negative");
    numel *= d;
  }
  SPECGRAPH_EXPECTS(offset >= 0 && offset + numel * item <= arena.size(0), "offset",
                    std::to_string(offset) + " + " + std::to_string(numel * item) +
                        " bytes exceeds the arena's " + std::to_string(arena.size(0)));
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  DLTensor proto = *arena.GetDLTensorPtr();
  proto.data = static_cast<unsigned char*>(arena.data_ptr()) + arena.byte_offset() + offset;
  proto.byte_offset = 0;
  proto.dtype = dtype;
  proto.ndim = static_cast<std::int32_t>(shape.size());
  proto.shape = shape.data();
  proto.strides = strides.data();
  TVMFFIObjectHandle out = nullptr;
  TVM_FFI_CHECK_SAFE_CALL(TVMFFITensorCreateUnsafeView(
      ffi::detail::ObjectUnsafe::TVMFFIObjectPtrFromObjectRef(arena), &proto, &out));
  return ffi::Tensor(ffi::detail::ObjectUnsafe::ObjectPtrFromOwned<ffi::TensorObj>(
      static_cast<TVMFFIObject*>(out)));
}

ffi::Array<std::int64_t> guard_list(const guard_word& g) {
  return {g.violations, g.kind, g.kernel, g.row, g.column, g.capacity, g.value};
}

void check_host(const char* field, const ffi::TensorView& t) {
  SPECGRAPH_EXPECTS(t.device().device_type == kDLCPU, field,
                    "on " + describe_device(t.device()) + ": the host kernels read host memory");
}

// docs/metadata.md section 3 on host arrays: cache_loc int64 [rows][width], last_page_len int32
// [batch], page_table int32 [rows][stride >= capacity], cache_seqlen int32 [rows]. Validates
// everything first (nothing written on failure), then runs row by row so every violating row
// is reported (one guard word each, as `specgraph metadata expand` does).
ffi::Array<ffi::Any> expand_page_table_host(ffi::TensorView cache_loc,
                                            ffi::TensorView last_page_len,
                                            ffi::TensorView page_table,
                                            ffi::TensorView cache_seqlen, std::int64_t topk,
                                            std::int64_t page_size, std::int64_t decode_length,
                                            std::int64_t slots_read, std::int64_t capacity,
                                            std::int64_t kv_slots) {
  for (const auto& [field, t] : {std::pair{"cache_loc", &cache_loc},
                                 {"last_page_len", &last_page_len},
                                 {"page_table", &page_table},
                                 {"cache_seqlen", &cache_seqlen}}) {
    check_host(field, *t);
  }
  const DLDevice cpu{kDLCPU, 0};
  check_int_tensor("last_page_len", last_page_len, int_kind::int32, 1, cpu);
  expand_params p;
  p.topk = int32_arg("topk", topk);
  p.page_size = int32_arg("page_size", page_size);
  p.decode_length = int32_arg("decode_length", decode_length);
  p.slots_read = int32_arg("slots_read", slots_read);
  p.capacity = int32_arg("capacity", capacity);
  p.slot_limit = kv_slots;
  p.batch = int32_arg("last_page_len", last_page_len.numel());
  const std::int64_t rows = p.batch * static_cast<std::int64_t>(std::max(p.topk, 1));
  SPECGRAPH_EXPECTS(cache_loc.ndim() == 2 && cache_loc.size(0) == rows, "cache_loc",
                    "shape " + describe_shape(cache_loc) +
                        ", expected [batch * topk = " + std::to_string(rows) + ", width]");
  check_int_tensor("cache_loc", cache_loc, int_kind::int64, 1, cpu);
  SPECGRAPH_EXPECTS(page_table.ndim() == 2 && page_table.size(0) == rows, "page_table",
                    "shape " + describe_shape(page_table) +
                        ", expected [batch * topk = " + std::to_string(rows) + ", stride]");
  check_int_tensor("page_table", page_table, int_kind::int32, 1, cpu);
  check_int_tensor("cache_seqlen", cache_seqlen, int_kind::int32, rows, cpu);
  p.cache_loc = static_cast<const std::int64_t*>(address_of(cache_loc));
  p.cache_loc_stride = cache_loc.size(1);
  p.last_page_len = static_cast<const std::int32_t*>(address_of(last_page_len));
  p.page_table = static_cast<std::int32_t*>(address_of(page_table));
  p.page_table_stride = page_table.size(1);
  p.cache_seqlen = static_cast<std::int32_t*>(address_of(cache_seqlen));
  guard_word scratch{};
  p.guard = &scratch;
  validate_contents_host(p);
  ffi::Array<ffi::Any> violations;
  for (std::int64_t r = 0; r < rows; ++r) {
    expand_params row = p;
    guard_word g{};
    row.batch = 1;
    row.topk = 1;
    row.last_page_len = p.last_page_len + r / p.topk;
    row.cache_loc =
        static_cast<const std::int64_t*>(address_of(cache_loc)) + r * p.cache_loc_stride;
    row.page_table = p.page_table + r * p.page_table_stride;
    row.cache_seqlen = p.cache_seqlen + r;
    row.guard = &g;
    expand_page_table_host(row);
    if (g.violations != 0) {
      g.row = static_cast<std::int32_t>(r);
      violations.push_back(guard_list(g));
    }
  }
  return violations;
}

// docs/metadata.md section 6's fallback into a host int32 array of `capacity` (or more) entries.
// Returns [count written, guard word...].
ffi::Array<std::int64_t> sparse_fallback(std::int64_t seq_len, std::int64_t max_count,
                                         ffi::TensorView out, std::int64_t capacity) {
  check_host("out", out);
  const std::int32_t cap = int32_arg("capacity", capacity);
  check_int_tensor("out", out, int_kind::int32,
                   std::max<std::int64_t>(1, std::min<std::int64_t>({cap, max_count, seq_len})),
                   DLDevice{kDLCPU, 0});
  guard_word g{};
  const std::int32_t n =
      sparse_fallback_host(int32_arg("seq_len", seq_len), int32_arg("max_count", max_count),
                           static_cast<std::int32_t*>(address_of(out)), cap, &g);
  ffi::Array<std::int64_t> result{n};
  for (const std::int64_t v : guard_list(g)) result.push_back(v);
  return result;
}

// [kind, prev, end, chunk_len, chunk_q_len] per stage.
ffi::Array<ffi::Any> sparse_stages(std::int64_t seq_len, std::int64_t chunk_len) {
  ffi::Array<ffi::Any> out;
  for (const sparse_stage& s :
       specgraph::sparse_stages(int32_arg("seq_len", seq_len), int32_arg("chunk_len", chunk_len))) {
    out.push_back(ffi::Array<std::int64_t>{static_cast<std::int64_t>(s.kind), s.prev, s.end,
                                           s.chunk_len, s.chunk_q_len});
  }
  return out;
}

ffi::String describe_guard(std::int64_t violations, std::int64_t kind, std::int64_t kernel,
                           std::int64_t row, std::int64_t column, std::int64_t capacity,
                           std::int64_t value) {
  guard_word g{};
  g.violations = static_cast<std::int32_t>(violations);
  g.kind = static_cast<std::int32_t>(kind);
  g.kernel = static_cast<std::int32_t>(kernel);
  g.row = static_cast<std::int32_t>(row);
  g.column = static_cast<std::int32_t>(column);
  g.capacity = static_cast<std::int32_t>(capacity);
  g.value = value;
  return describe(g);
}

// The stream an op on `t` enqueues on: the environment stream of t's device (torch's current
// stream while a torch tensor is an argument). For the stream tests; 0 on the CPU.
std::int64_t stream_for(ffi::TensorView t) {
  if (t.device().device_type != kDLCUDA) return 0;
  return reinterpret_cast<std::int64_t>(TVMFFIEnvGetStream(kDLCUDA, t.device().device_id));
}

// For the error-mapping tests: throws one of the C++ exceptions by name, message given.
void raise_for_test(ffi::String kind, ffi::String message) {
  const std::string k = kind, m = message;
  if (k == "invalid_argument") throw invalid_argument("the_field", m, "python/src/bindings.cpp:1");
  if (k == "guard_violation") throw guard_violation(m);
  if (k == "capture_failed") throw capture_failed(8, 3, m);
  if (k == "capture_violation") throw capture_violation(m);
  if (k == "cuda_error") throw cuda_error(700, m);
  if (k == "unavailable") throw unavailable(m);
  if (k == "error") throw error(m);
  if (k == "bad_alloc") throw std::bad_alloc();
  throw std::runtime_error(m);
}

// The ranges of specgraph/limits.hpp, for the Python checks that run before an allocation.
ffi_map limits_map() {
  return ffi_map{{"max_rows", limits::max_rows},
                 {"max_batch", static_cast<std::int64_t>(limits::max_batch)},
                 {"max_topk", static_cast<std::int64_t>(limits::max_topk)},
                 {"max_num_steps", static_cast<std::int64_t>(limits::max_num_steps)},
                 {"max_page_size", static_cast<std::int64_t>(limits::max_page_size)},
                 {"max_context_len", static_cast<std::int64_t>(limits::max_context_len)},
                 {"max_pool_rows", static_cast<std::int64_t>(limits::max_pool_rows)},
                 {"max_kv_slots", limits::max_kv_slots},
                 {"max_heads", static_cast<std::int64_t>(limits::max_heads)},
                 {"max_sparse_size", static_cast<std::int64_t>(limits::max_sparse_size)},
                 {"max_keys", static_cast<std::int64_t>(limits::max_keys)}};
}

// The guard-word facts Python reads instead of restating them (issue 29 item 4): a word's size in
// int32s, the verify guard words per call, and the kind and kernel names by id (guard.hpp's
// to_string, up to the first id it does not know).
ffi_map guard_facts() {
  const auto names = [](auto of) {
    ffi::Array<ffi::String> out;
    for (std::int32_t id = 0; id < 1024; ++id) {
      const std::string name = of(id);
      if (name == "unknown") break;
      out.push_back(ffi::String(name));
    }
    return out;
  };
  return ffi_map{
      {"word_int32s", static_cast<std::int64_t>(sizeof(guard_word) / sizeof(std::int32_t))},
      {"verify_words", static_cast<std::int64_t>(verify_guard_count)},
      {"kinds", names([](std::int32_t i) { return to_string(static_cast<violation_kind>(i)); })},
      {"kernels", names([](std::int32_t i) { return to_string(static_cast<kernel_id>(i)); })}};
}

ffi::Array<ffi::Any> build_info() {
  bool nvtx = false;
#if defined(SPECGRAPH_PY_HAS_NVTX)
  nvtx = true;
#endif
  return {
    ffi::String(SPECGRAPH_PY_VERSION),
        ffi::String(cuda_available() ? "" : cuda_unavailable_reason()), nvtx,
#if defined(SPECGRAPH_HAS_CUDA)
        true
#else
        false
#endif
  };
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("specgraph.arena_view", checked<&arena_view>::call)
      .def("specgraph.expand_page_table_host", checked<&expand_page_table_host>::call)
      .def("specgraph.sparse_fallback", checked<&sparse_fallback>::call)
      .def("specgraph.sparse_stages", checked<&sparse_stages>::call)
      .def("specgraph.describe_guard", describe_guard)
      .def("specgraph.build_info", build_info)
      .def("specgraph.limits", limits_map)
      .def("specgraph.guard_facts", guard_facts)
      .def("specgraph.set_nvtx", set_nvtx_enabled)
      .def("specgraph.raise_for_test", checked<&raise_for_test>::call)
      .def("specgraph.stream_for", stream_for);
}

}  // namespace specgraph::python
