// The Python extension's CSR draft-decode index ops (csr_ops.hpp, docs/csr.md): one function
// per op, from the staged or the bound inputs (an optional source) into the plan's arena or the
// engine's own kv_indptr / kv_indices tensors (an optional target). Like ops.cpp, every op takes
// the arena tensor (its framework decides the stream) and checks everything on the host before
// it enqueues anything: nothing is written when an argument is refused.
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "python/src/binding.hpp"
#include "specgraph/csr_ops.hpp"
#include "specgraph/kv_indices.hpp"

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
  return out;  // the library's own check (the same sizes) runs when a csr_target is made
}

// Bind time (no op): the outputs checked once; returns [kv_indices is int64, kv_indptr's row
// stride, kv_indices' row stride]. Host work only.
ffi::Array<std::int64_t> csr_check_outputs(buffers_ref b, ffi::TensorView arena,
                                           ffi::TensorView kv_indptr, ffi::TensorView kv_indices) {
  const csr_target target(
      *b->plan, outputs_of(b, kv_indptr, kv_indices, buffers_of(b, arena).base(), nullptr));
  const csr_outputs& out = target.outputs();
  return {out.kv_indices_type == index_type::int64 ? 1 : 0, out.kv_indptr_stride,
          out.kv_indices_stride};
}

// The CSR draft-decode indices from the source into the target: step `step`, the step the
// device counter holds (step None), or every step of the round (whole, step None).
void csr_indices_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                    ffi::Optional<std::int64_t> step, bool whole, ffi::TensorView req_to_token,
                    opt_tensor kv_indptr, opt_tensor kv_indices, source_arg source) {
  if (whole) {
    SPECGRAPH_EXPECTS(!step.has_value(), "step",
                      "given with whole_round: the whole round is every step; pass step None");
  }
  op_range r(whole              ? op_id::csr_round_indices
             : step.has_value() ? op_id::csr_step_indices
                                : op_id::csr_indices_device);
  const draft_buffers bufs = buffers_of(b, arena);
  check_csr_plan(*b->plan);
  const engine_tables tables = tables_of(b, req_to_token);
  const csr_target out = target_of(b, kv_indptr, kv_indices, bufs.base(), req_to_token);
  const round_source in = source_of(b, source);
  const std::int32_t at = int32_arg("bucket", bucket);
  const round_step s = whole              ? specgraph::whole_round
                       : step.has_value() ? round_step(int32_arg("step", step.value()))
                                          : at_device_step;
  csr_indices(executor_for(b->device), bufs, at, s, tables, out, in);
}

// ---- specgraph.metadata.draft_kv_indices: the kernels' host twin on host arrays ---------------
// (like `specgraph metadata kv-indices`: crash dumps, windows and page-granular tables). The
// request arrays are int32 [batch]; req_to_token int32 [pool_rows][W]; every content is checked
// first (invalid_argument naming the element; nothing computed from bad input).
kv_indices_params host_params(const ffi::TensorView& seq_len, const ffi::TensorView& pool,
                              const ffi::TensorView& r2t, std::int64_t topk, std::int64_t num_steps,
                              std::int64_t page_size, std::int64_t entry_page_size,
                              std::int64_t window, std::int64_t sink, std::int64_t slot_stride,
                              std::int64_t slot_limit) {
  const DLDevice cpu{kDLCPU, 0};
  for (const auto& [field, t] :
       {std::pair{"seq_len", &seq_len}, {"req_pool_index", &pool}, {"req_to_token", &r2t}}) {
    SPECGRAPH_EXPECTS(t->device().device_type == kDLCPU, field,
                      "on " + describe_device(t->device()) + ": the host kernels read host memory");
  }
  check_int_tensor("seq_len", seq_len, int_kind::int32, 1, cpu);
  check_int_tensor("req_pool_index", pool, int_kind::int32, seq_len.numel(), cpu);
  SPECGRAPH_EXPECTS(pool.numel() == seq_len.numel(), "req_pool_index",
                    std::to_string(pool.numel()) + " entries, expected one per request, " +
                        std::to_string(seq_len.numel()));
  SPECGRAPH_EXPECTS(r2t.ndim() == 2, "req_to_token",
                    "shape " + describe_shape(r2t) + ", expected [pool_rows, width]");
  check_int_tensor("req_to_token", r2t, int_kind::int32, 1, cpu);
  kv_indices_params p;
  p.req_to_token = static_cast<const std::int32_t*>(address_of(r2t));
  p.req_to_token_stride = r2t.size(1);
  p.pool_rows = int32_arg("pool_rows", r2t.size(0));
  p.entry_page_size = int32_arg("entry_page_size", entry_page_size);
  p.req_pool_index = static_cast<const std::int32_t*>(address_of(pool));
  p.seq_len = static_cast<const std::int32_t*>(address_of(seq_len));
  p.batch = int32_arg("batch", seq_len.numel());
  p.topk = int32_arg("topk", topk);
  p.num_steps = int32_arg("num_steps", num_steps);
  p.slot_stride = int32_arg("slot_stride", slot_stride);  // 0: num_steps; range in validate
  p.page_size = int32_arg("page_size", page_size);
  p.window = int32_arg("window", window);
  p.sink = int32_arg("sink", sink);
  const auto* lengths = static_cast<const std::int32_t*>(address_of(seq_len));
  p.max_seq_len = std::max(0, *std::max_element(lengths, lengths + p.batch));
  p.first_step = 0;
  p.step_count = std::max(p.num_steps, 1);
  p.kv_indptr_stride = static_cast<std::int64_t>(p.batch) * std::max(p.topk, 1) + 1;
  p.slot_limit = slot_limit;
  return p;
}

// Validates everything; returns the entries each step uses.
ffi::Array<std::int64_t> kv_indices_used_host(ffi::TensorView seq_len, ffi::TensorView pool,
                                              ffi::TensorView r2t, std::int64_t topk,
                                              std::int64_t num_steps, std::int64_t page_size,
                                              std::int64_t entry_page_size, std::int64_t window,
                                              std::int64_t sink, std::int64_t slot_stride,
                                              std::int64_t slot_limit, bool int64) {
  kv_indices_params p = host_params(seq_len, pool, r2t, topk, num_steps, page_size, entry_page_size,
                                    window, sink, slot_stride, slot_limit);
  std::int32_t indptr = 0, i32 = 0;
  std::int64_t i64 = 0;
  guard_word g{};
  p.kv_indptr = &indptr;
  if (int64) {
    p.kv_indices_i64 = &i64;
  } else {
    p.kv_indices_i32 = &i32;
  }
  p.guard = &g;
  validate_contents_host(p);
  ffi::Array<std::int64_t> used;
  for (std::int32_t s = 0; s < p.num_steps; ++s) {
    used.push_back(kv_indices_used(static_cast<const std::int32_t*>(p.seq_len.data), p.batch,
                                   p.topk, p.window, p.sink, s));
  }
  return used;
}

// Step s into row s of kv_indptr int32 [num_steps][batch * topk + 1] and kv_indices int32 or
// int64 [num_steps][stride], at most capacity[s] <= stride entries; one launch per step.
// Returns each step's guard word [violations, kind, kernel, row, column, capacity, value].
ffi::Array<ffi::Any> kv_indices_run_host(
    ffi::TensorView seq_len, ffi::TensorView pool, ffi::TensorView r2t, std::int64_t topk,
    std::int64_t num_steps, std::int64_t page_size, std::int64_t entry_page_size,
    std::int64_t window, std::int64_t sink, std::int64_t slot_stride, std::int64_t slot_limit,
    ffi::TensorView kv_indptr, ffi::TensorView kv_indices, ffi::Array<std::int64_t> capacity) {
  kv_indices_params p = host_params(seq_len, pool, r2t, topk, num_steps, page_size, entry_page_size,
                                    window, sink, slot_stride, slot_limit);
  const DLDevice cpu{kDLCPU, 0};
  const std::int64_t rows = p.kv_indptr_stride - 1;
  SPECGRAPH_EXPECTS(
      kv_indptr.ndim() == 2 && kv_indptr.size(0) == p.num_steps && kv_indptr.size(1) == rows + 1,
      "kv_indptr",
      "shape " + describe_shape(kv_indptr) + ", expected [num_steps, " + std::to_string(rows + 1) +
          "]");
  check_int_tensor("kv_indptr", kv_indptr, int_kind::int32, 1, cpu);
  SPECGRAPH_EXPECTS(kv_indices.ndim() == 2 && kv_indices.size(0) == p.num_steps, "kv_indices",
                    "shape " + describe_shape(kv_indices) + ", expected [num_steps, stride]");
  const bool i64 = check_int_tensor("kv_indices", kv_indices, int_kind::int32_or_int64, 1, cpu);
  SPECGRAPH_EXPECTS(static_cast<std::int64_t>(capacity.size()) == p.num_steps, "capacity",
                    std::to_string(capacity.size()) + " entries, expected one per step, " +
                        std::to_string(p.num_steps));
  for (std::int32_t s = 0; s < p.num_steps; ++s) {
    const std::string field = "capacity[" + std::to_string(s) + "]";
    SPECGRAPH_EXPECTS(capacity[s] >= 0 && capacity[s] <= kv_indices.size(1), field,
                      std::to_string(capacity[s]) + " is outside [0, the row width " +
                          std::to_string(kv_indices.size(1)) + "]");
  }
  std::vector<guard_word> guards(static_cast<std::size_t>(p.num_steps), guard_word{});
  p.kv_indptr = static_cast<std::int32_t*>(address_of(kv_indptr));
  void* indices = address_of(kv_indices);
  if (i64) {
    p.kv_indices_i64 = static_cast<std::int64_t*>(indices);
  } else {
    p.kv_indices_i32 = static_cast<std::int32_t*>(indices);
  }
  p.guard = guards.data();
  validate_contents_host(p);  // every step's reads, before anything is written
  for (std::int32_t s = 0; s < p.num_steps; ++s) {
    kv_indices_params q = p;
    q.first_step = s;
    q.step_count = 1;
    q.capacity = static_cast<std::int32_t>(capacity[s]);
    q.kv_indptr = p.kv_indptr + s * (rows + 1);
    if (i64) {
      q.kv_indices_i64 = p.kv_indices_i64 + s * kv_indices.size(1);
    } else {
      q.kv_indices_i32 = p.kv_indices_i32 + s * kv_indices.size(1);
    }
    q.guard = &guards[static_cast<std::size_t>(s)];
    draft_kv_indices_host(q);
  }
  ffi::Array<ffi::Any> out;
  for (const guard_word& g : guards) {
    out.push_back(ffi::Array<std::int64_t>{g.violations, g.kind, g.kernel, g.row, g.column,
                                           g.capacity, g.value});
  }
  return out;
}

}  // namespace

csr_target target_of(const buffers_ref& b, const opt_tensor& kv_indptr,
                     const opt_tensor& kv_indices, const void* arena,
                     const ffi::TensorView& req_to_token) {
  if (!kv_indptr.has_value() && !kv_indices.has_value()) return {};  // the arena
  SPECGRAPH_EXPECTS(kv_indptr.has_value(), "kv_indptr",
                    "not given with kv_indices: the engine's outputs are both or neither");
  SPECGRAPH_EXPECTS(kv_indices.has_value(), "kv_indices",
                    "not given with kv_indptr: the engine's outputs are both or neither");
  const ffi::Tensor indptr_held = kv_indptr.value(), indices_held = kv_indices.value();
  return csr_target(*b->plan, outputs_of(b, ffi::TensorView(indptr_held),
                                         ffi::TensorView(indices_held), arena, &req_to_token));
}

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("specgraph.csr_check_outputs", checked<&csr_check_outputs>::call)
      .def("specgraph.csr_indices", checked<&csr_indices_op>::call)
      .def("specgraph.kv_indices_used_host", checked<&kv_indices_used_host>::call)
      .def("specgraph.kv_indices_run_host", checked<&kv_indices_run_host>::call);
}

}  // namespace specgraph::python
