// The Python extension's ops: buffers over a caller's arena and the capture-safe operations of
// ops.hpp. Every op receives the arena tensor as an argument, so that tvm-ffi sets the
// environment stream of a torch CUDA arena (torch's current stream) for the call: that is the
// stream the op enqueues on. On CPU memory the host executor runs the same kernels inline.
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "python/src/binding.hpp"
#include "specgraph/guard.hpp"
#include "specgraph/ops.hpp"

namespace specgraph::python {
namespace {

bool same_device(DLDevice a, DLDevice b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

}  // namespace

// The buffers over the op's arena argument: normally the arena the buffers were made over; under
// torch.compile's functionalization it may be a copy of it (written, then copied back), so any
// arena of the plan's size on the same device is accepted, each call over its own address.
draft_buffers buffers_of(const buffers_ref& b, const ffi::TensorView& arena) {
  void* base = address_of(arena);
  if (base == static_cast<void*>(b->buffers.base())) return b->buffers;
  SPECGRAPH_EXPECTS(arena.data_ptr() != nullptr, "arena", "no memory (a null data pointer)");
  const DLDataType dt = arena.dtype();
  SPECGRAPH_EXPECTS(arena.ndim() == 1 && dt.code == kDLUInt && dt.bits == 8 && dt.lanes == 1 &&
                        arena.IsContiguous() &&
                        arena.size(0) >= static_cast<std::int64_t>(b->plan->total_bytes),
                    "arena",
                    describe_shape(arena) + " " + describe_dtype(dt) +
                        (arena.IsContiguous() ? "" : " (not contiguous)") +
                        ", expected a contiguous 1-D uint8 tensor of the plan's " +
                        std::to_string(b->plan->total_bytes) + " bytes");
  SPECGRAPH_EXPECTS(same_device(arena.device(), b->device), "arena",
                    "on " + describe_device(arena.device()) + ", but the buffers are on " +
                        describe_device(b->device));
  return draft_buffers(*b->plan, base);
}

// req_to_token as the ops read it: int32 [>= pool_rows, max_context_len], contiguous, on the
// buffers' device.
engine_tables tables_of(const buffers_ref& b, const ffi::TensorView& req_to_token) {
  const draft_config& c = b->plan->config;
  // Engines allocate req_to_token wider than max_context_len: its rows are read at the
  // tensor's own width (contiguous, so the row stride is size(1)).
  SPECGRAPH_EXPECTS(req_to_token.ndim() == 2 && req_to_token.size(0) >= c.pool_rows &&
                        req_to_token.size(1) >= c.max_context_len,
                    "req_to_token",
                    "shape " + describe_shape(req_to_token) +
                        ", expected [pool_rows >= " + std::to_string(c.pool_rows) +
                        ", columns >= max_context_len " + std::to_string(c.max_context_len) + "]");
  check_int_tensor("req_to_token", req_to_token, int_kind::int32, 1, b->device);
  return {static_cast<const std::int32_t*>(address_of(req_to_token)), req_to_token.size(1)};
}

namespace {

buffers_ref make_buffers(plan_ref p, ffi::Tensor arena, bool initialize) {
  const DLDataType dt = arena.dtype();
  SPECGRAPH_EXPECTS(arena.ndim() == 1 && dt.code == kDLUInt && dt.bits == 8 && dt.lanes == 1,
                    "arena",
                    "expected a 1-D uint8 tensor, got " + std::to_string(arena.ndim()) + "-D " +
                        describe_dtype(dt));
  SPECGRAPH_EXPECTS(arena.IsContiguous(), "arena", "not contiguous");
  const auto bytes = static_cast<std::int64_t>(p->plan->total_bytes);
  SPECGRAPH_EXPECTS(
      arena.size(0) >= bytes, "arena",
      std::to_string(arena.size(0)) + " bytes, the plan needs " + std::to_string(bytes));
  const DLDevice d = arena.device();
  SPECGRAPH_EXPECTS(d.device_type == kDLCPU || d.device_type == kDLCUDA, "arena",
                    "on " + describe_device(d) + ": specgraph runs on cpu or cuda memory");
  auto n = ffi::make_object<buffers_obj>();
  n->plan = p->plan;
  n->arena = arena;
  n->device = d;
  n->buffers = draft_buffers(*n->plan, address_of(ffi::TensorView(arena)));  // checks alignment
  if (initialize) {
    op_range r(op_id::initialize);
    initialize_buffers(executor_for(d), n->buffers);
  }
  return buffers_ref(n);
}

void initialize(buffers_ref b, ffi::TensorView arena) {
  op_range r(op_id::initialize);
  initialize_buffers(executor_for(b->device), buffers_of(b, arena));
}

// A Python float as float: beyond float's range it saturates to +-inf (a plain conversion of an
// out-of-range double is undefined behaviour); NaN stays NaN for stage_round to refuse by name.
float to_float(double v) {
  constexpr double most = std::numeric_limits<float>::max();
  if (v > most) return std::numeric_limits<float>::infinity();
  if (v < -most) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(v);
}

std::int64_t load(const ffi::TensorView& t, bool is64, std::int64_t i) {
  return is64 ? static_cast<const std::int64_t*>(address_of(t))[i]
              : static_cast<const std::int32_t*>(address_of(t))[i];
}

// Host memory can be read here: check the contents as draft_runtime::stage() does, naming the
// element, before anything is written (docs/metadata.md section 4).
void check_host_contents(const draft_config& c, std::int32_t batch, const ffi::TensorView& pool,
                         bool pool64, const ffi::TensorView& seq, bool seq64,
                         const ffi::TensorView& slots, bool slots64) {
  for (std::int32_t i = 0; i < batch; ++i) {
    const std::string at = "[" + std::to_string(i) + "]";
    const std::int64_t row = load(pool, pool64, i);
    SPECGRAPH_EXPECTS(
        row >= 0 && row < c.pool_rows, "req_pool_indices" + at,
        std::to_string(row) + " is outside [0, pool_rows " + std::to_string(c.pool_rows) + ")");
    const std::int64_t len = load(seq, seq64, i);
    SPECGRAPH_EXPECTS(len >= 1 && len <= c.max_context_len, "seq_lens" + at,
                      std::to_string(len) + " is outside [1, max_context_len " +
                          std::to_string(c.max_context_len) + "]");
  }
  if (batch == 0) return;
  // Rows slot_stride apart; only their first num_steps slots are read (the rest may hold anything).
  for (std::int64_t row = 0; row < static_cast<std::int64_t>(batch) * c.topk; ++row) {
    for (std::int64_t j = 0; j < c.num_steps; ++j) {
      const std::int64_t slot = load(slots, slots64, row * c.slot_stride + j);
      if (slot >= 0 && slot < c.kv_slots) continue;
      SPECGRAPH_EXPECTS(
          false,
          "out_cache_loc[" + std::to_string(row / c.topk) + "][" + std::to_string(row % c.topk) +
              "][" + std::to_string(j) + "]",
          std::to_string(slot) + " is outside [0, kv_slots " + std::to_string(c.kv_slots) + ")");
    }
  }
}

// The round's start. With the three inputs: they are copied into the static inputs of `bucket`
// (stage_round); with none (the engine's inputs bound, read in place): only the round's
// controls (begin_round), `batch` and `bucket` unused. Returns the staged bucket.
std::int64_t stage(buffers_ref b, ffi::TensorView arena, std::int64_t batch, opt_tensor pool_in,
                   opt_tensor seq_in, opt_tensor slots_in, std::int64_t max_depth,
                   double min_confidence, std::int64_t bucket) {
  const bool begins = !pool_in.has_value() && !seq_in.has_value() && !slots_in.has_value();
  op_range r(begins ? op_id::begin_round : op_id::stage);
  const draft_buffers bufs = buffers_of(b, arena);
  if (begins) {
    begin_round(executor_for(b->device), bufs, int32_arg("max_depth", max_depth),
                to_float(min_confidence));
    return b->staged_bucket;
  }
  const auto given = [](const opt_tensor& t, const char* field) {
    SPECGRAPH_EXPECTS(t.has_value(), field,
                      "None, but other inputs were given: stage the three inputs, or none of "
                      "them to begin a round over the bound inputs");
  };
  given(pool_in, "req_pool_indices");
  given(seq_in, "seq_lens");
  given(slots_in, "out_cache_loc");
  const ffi::Tensor pool_held = pool_in.value(), seq_held = seq_in.value(),
                    slots_held = slots_in.value();
  const ffi::TensorView req_pool_indices(pool_held), seq_lens(seq_held), out_cache_loc(slots_held);
  const draft_config& c = b->plan->config;
  SPECGRAPH_EXPECTS(
      batch >= 0 && batch <= c.max_batch, "bs",
      std::to_string(batch) + " is outside [0, max_batch " + std::to_string(c.max_batch) + "]");
  const bool pool64 = check_int_tensor("req_pool_indices", req_pool_indices,
                                       int_kind::int32_or_int64, batch, b->device);
  const bool seq64 =
      check_int_tensor("seq_lens", seq_lens, int_kind::int32_or_int64, batch, b->device);
  // Flat (>= bs * topk * slot_stride elements) or [>= bs, topk, slot_stride]: a 3-D tensor of
  // another shape (e.g. [bs, slot_stride, topk], transposed then copied) would be misread.
  if (out_cache_loc.ndim() == 3) {
    SPECGRAPH_EXPECTS(out_cache_loc.size(0) >= batch && out_cache_loc.size(1) == c.topk &&
                          out_cache_loc.size(2) == c.slot_stride,
                      "out_cache_loc",
                      "shape " + describe_shape(out_cache_loc) + ", expected [>= bs " +
                          std::to_string(batch) + ", topk " + std::to_string(c.topk) +
                          ", slot_stride " + std::to_string(c.slot_stride) +
                          "] (or a flat tensor of >= bs * topk * slot_stride elements)");
  }
  const bool slots64 =
      check_int_tensor("out_cache_loc", out_cache_loc, int_kind::int32_or_int64,
                       batch * c.topk * static_cast<std::int64_t>(c.slot_stride), b->device);
  const auto bs = static_cast<std::int32_t>(batch);
  const std::int32_t chosen = int32_arg("bucket", bucket);  // checked by stage_round
  if (b->device.device_type == kDLCPU) {
    check_host_contents(c, bs, req_pool_indices, pool64, seq_lens, seq64, out_cache_loc, slots64);
  }
  device_round_inputs in;
  in.batch = bs;
  in.req_pool_index =
      pool64 ? index_array(static_cast<const std::int64_t*>(address_of(req_pool_indices)))
             : index_array(static_cast<const std::int32_t*>(address_of(req_pool_indices)));
  in.seq_len = seq64 ? index_array(static_cast<const std::int64_t*>(address_of(seq_lens)))
                     : index_array(static_cast<const std::int32_t*>(address_of(seq_lens)));
  in.out_cache_loc = slots64
                         ? index_array(static_cast<const std::int64_t*>(address_of(out_cache_loc)))
                         : index_array(static_cast<const std::int32_t*>(address_of(out_cache_loc)));
  in.max_depth = int32_arg("max_depth", max_depth);  // its range: stage_round
  in.min_confidence = to_float(min_confidence);
  in.bucket = chosen;  // 0: the smallest bucket >= bs
  const std::int32_t staged = stage_round(executor_for(b->device), bufs, in);
  b->staged_bucket = staged;
  return staged;
}

// The round's step-0 work, from the staged inputs or the bound ones (source).
void round_setup(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                 ffi::TensorView req_to_token, source_arg source) {
  op_range r(op_id::round_setup);
  const draft_buffers bufs = buffers_of(b, arena);
  const engine_tables tables = tables_of(b, req_to_token);
  const std::int32_t at = int32_arg("bucket", bucket);
  setup_round(executor_for(b->device), bufs, at, tables, source_of(b, source));
}

// One step's expand metadata; step None: the step the device counter holds (device_steps mode,
// docs/device-rounds.md).
void step_metadata_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                      ffi::Optional<std::int64_t> step, source_arg source) {
  op_range r(step.has_value() ? op_id::step_metadata : op_id::step_metadata_device);
  const draft_buffers bufs = buffers_of(b, arena);
  const std::int32_t at = int32_arg("bucket", bucket);
  executor& ex = executor_for(b->device);
  const round_step s =
      step.has_value() ? round_step(int32_arg("step", step.value())) : at_device_step;
  step_metadata(ex, bufs, at, s, source_of(b, source));
}

void advance_step_op(buffers_ref b, ffi::TensorView arena) {
  op_range r(op_id::advance_step);
  advance_step(executor_for(b->device), buffers_of(b, arena));
}

void sparse_stage_op(buffers_ref b, ffi::TensorView arena, std::int64_t kind, std::int64_t prev,
                     std::int64_t end, std::int64_t chunk_len, std::int64_t chunk_q_len) {
  op_range r(op_id::sparse_stage);
  const draft_buffers bufs = buffers_of(b, arena);
  SPECGRAPH_EXPECTS(kind >= 0 && kind < sparse_stage_kinds, "kind",
                    std::to_string(kind) + " is not intra (0), succ (1) or inter (2)");
  sparse_stage s;
  s.kind = static_cast<stage_kind>(kind);
  s.prev = int32_arg("prev", prev);
  s.end = int32_arg("end", end);
  s.chunk_len = int32_arg("chunk_len", chunk_len);
  s.chunk_q_len = int32_arg("chunk_q_len", chunk_q_len);
  stage_sparse(executor_for(b->device), bufs, s);
}

void count_violations_op(buffers_ref b, ffi::TensorView arena, ffi::TensorView out) {
  op_range r(op_id::count_violations);
  const draft_buffers bufs = buffers_of(b, arena);
  check_int_tensor("out", out, int_kind::int32, 1, b->device);
  count_violations(executor_for(b->device), bufs, static_cast<std::int32_t*>(address_of(out)));
}

// Every guard word as [violations, kind, kernel, row, column, capacity, value, buffer, step]:
// buffer and step (-1: all steps) are guard_site_of's, the labels check_guards raises with, so
// Python never re-derives them. Synchronises.
ffi::Array<ffi::Any> read_guards_op(buffers_ref b, ffi::TensorView arena) {
  const std::vector<guard_word> words = read_guards(executor_for(b->device), buffers_of(b, arena));
  ffi::Array<ffi::Any> out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const guard_word& g = words[i];
    const guard_site site = guard_site_of(*b->plan, static_cast<std::int32_t>(i));
    out.push_back(ffi::Array<ffi::Any>{
        static_cast<std::int64_t>(g.violations), static_cast<std::int64_t>(g.kind),
        static_cast<std::int64_t>(g.kernel), static_cast<std::int64_t>(g.row),
        static_cast<std::int64_t>(g.column), static_cast<std::int64_t>(g.capacity), g.value,
        ffi::String(site.buffer), static_cast<std::int64_t>(site.step)});
  }
  return out;
}

// Reads the guard words (synchronises) and raises GuardViolation for the first set one, with
// raise_guard_violations' message and its parts as attributes. bucket 0: the last staged one.
void check_guards(buffers_ref b, ffi::TensorView arena, std::int64_t bucket) {
  op_range r(op_id::check_guards);
  const std::vector<guard_word> words = read_guards(executor_for(b->device), buffers_of(b, arena));
  const auto at = static_cast<std::int32_t>(bucket > 0 ? bucket : b->staged_bucket);
  for (std::size_t i = 0; i < words.size(); ++i) {
    const guard_word& g = words[i];
    if (g.violations == 0) continue;
    const guard_site site = guard_site_of(*b->plan, static_cast<std::int32_t>(i));
    std::string message;
    try {
      raise_guard_violations(*b->plan, words, at);
    } catch (const guard_violation& e) {
      message = e.what();
    }
    throw_kind(kind_guard_violation, message,
               {{"buffer", ffi::String(site.buffer)},
                {"step", static_cast<std::int64_t>(site.step)},
                {"bucket", static_cast<std::int64_t>(at)},
                {"row", static_cast<std::int64_t>(g.row)},
                {"column", static_cast<std::int64_t>(g.column)},
                {"kind", ffi::String(to_string(static_cast<violation_kind>(g.kind)))},
                {"kernel", ffi::String(to_string(static_cast<kernel_id>(g.kernel)))},
                {"capacity", static_cast<std::int64_t>(g.capacity)},
                {"value", static_cast<std::int64_t>(g.value)},
                {"violations", static_cast<std::int64_t>(g.violations)},
                {"guard", static_cast<std::int64_t>(i)}});
  }
}

std::int64_t staged_bucket(buffers_ref b) {
  return b->staged_bucket;
}

// The C++ step_view of (bucket, step) (draft_buffers::view): its scalars, and each pointer as a
// byte offset into the arena (-1 when null), for checking the Python StepView against it.
// Pure host work: nothing is read or written.
ffi_map step_view_layout(buffers_ref b, std::int64_t bucket, std::int64_t step) {
  const step_view v = b->buffers.view(int32_arg("bucket", bucket), int32_arg("step", step));
  const unsigned char* base = b->buffers.base();
  const auto offset = [&](const void* p) -> std::int64_t {
    return p == nullptr ? -1 : static_cast<const unsigned char*>(p) - base;
  };
  return ffi_map{{"bucket", static_cast<std::int64_t>(v.bucket)},
                 {"step", static_cast<std::int64_t>(v.step)},
                 {"decode_length", static_cast<std::int64_t>(v.decode_length)},
                 {"topk", static_cast<std::int64_t>(v.topk)},
                 {"page_size", static_cast<std::int64_t>(v.page_size)},
                 {"rows", static_cast<std::int64_t>(v.rows)},
                 {"req_pool_index", offset(v.req_pool_index)},
                 {"seq_len", offset(v.seq_len)},
                 {"out_cache_loc", offset(v.out_cache_loc)},
                 {"cache_loc_stride", v.cache_loc_stride},
                 {"real_batch", offset(v.real_batch)},
                 {"last_page_len", offset(v.last_page_len)},
                 {"prefix_seqlen", offset(v.prefix_seqlen)},
                 {"prefix_page_table", offset(v.prefix_page_table)},
                 {"prefix_stride", v.prefix_stride},
                 {"prefix_capacity", static_cast<std::int64_t>(v.prefix_capacity)},
                 {"cu_seqlens_q", offset(v.cu_seqlens_q)},
                 {"expand_page_table", offset(v.expand_page_table)},
                 {"expand_capacity", static_cast<std::int64_t>(v.expand_capacity)},
                 {"expand_stride", static_cast<std::int64_t>(v.expand_stride)},
                 {"expand_cache_seqlen", offset(v.expand_cache_seqlen)},
                 {"device_step", offset(v.device_step)},
                 {"confidence", offset(v.confidence)},
                 {"kv_indptr", offset(v.csr_kv_indptr)},
                 {"kv_indices", offset(v.csr_kv_indices)},
                 {"csr_capacity", v.csr_capacity},
                 {"csr_kv_indptr_stride", v.csr_kv_indptr_stride},
                 {"csr_kv_indices_stride", v.csr_kv_indices_stride}};
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::ObjectDef<buffers_obj>();
  refl::GlobalDef()
      .def("specgraph.make_buffers", checked<&make_buffers>::call)
      .def("specgraph.initialize", checked<&initialize>::call)
      .def("specgraph.stage", checked<&stage>::call)
      .def("specgraph.round_setup", checked<&round_setup>::call)
      .def("specgraph.step_metadata", checked<&step_metadata_op>::call)
      .def("specgraph.advance_step", checked<&advance_step_op>::call)
      .def("specgraph.sparse_stage", checked<&sparse_stage_op>::call)
      .def("specgraph.count_violations", checked<&count_violations_op>::call)
      .def("specgraph.read_guards", checked<&read_guards_op>::call)
      .def("specgraph.check_guards", checked<&check_guards>::call)
      .def("specgraph.staged_bucket", staged_bucket)
      .def("specgraph.step_view_layout", checked<&step_view_layout>::call);
}

}  // namespace specgraph::python
