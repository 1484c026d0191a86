// The Python extension's verify op over the plan's arena (verify_ops.hpp, docs/verify.md section
// 10): the verify metadata of a bucket written into the arena's verify section
// (DraftConfig(verify_tokens=D)), reading the round's staged requests and real batch. Like
// ops.cpp, the arena tensor decides the device (and, for torch CUDA tensors, the stream: torch's
// current one); everything is checked on the host before anything is enqueued.
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <cstdint>
#include <string>

#include "python/src/binding.hpp"
#include "specgraph/verify_ops.hpp"

namespace specgraph::python {
namespace {

void verify_arena_op(buffers_ref b, ffi::TensorView arena, std::int64_t bucket,
                     ffi::TensorView req_to_token, ffi::TensorView custom_mask,
                     std::int64_t mask_cells, bool mask_exact) {
  const draft_buffers bufs = buffers_of(b, arena);
  const engine_tables tables = tables_of(b, req_to_token);
  const DLDataType dt = custom_mask.dtype();
  SPECGRAPH_EXPECTS(custom_mask.ndim() == 1 && dt.code == kDLUInt && dt.bits == 8 && dt.lanes == 1,
                    "custom_mask",
                    "expected a 1-D uint8 tensor (one byte per cell), got " +
                        std::to_string(custom_mask.ndim()) + "-D " + describe_dtype(dt));
  SPECGRAPH_EXPECTS(custom_mask.IsContiguous(), "custom_mask", "not contiguous");
  SPECGRAPH_EXPECTS(custom_mask.device().device_type == b->device.device_type &&
                        custom_mask.device().device_id == b->device.device_id,
                    "custom_mask",
                    "on " + describe_device(custom_mask.device()) + ", but the arena is on " +
                        describe_device(b->device));
  // -1: the tensor's length; a declared length may not exceed what the tensor holds.
  const std::int64_t cells = mask_cells < 0 ? custom_mask.size(0) : mask_cells;
  SPECGRAPH_EXPECTS(cells <= custom_mask.size(0), "mask_cells",
                    std::to_string(cells) + " exceeds the custom_mask tensor's " +
                        std::to_string(custom_mask.size(0)) + " cells");
  verify_inputs in;
  in.tables = tables;
  in.custom_mask = static_cast<const std::uint8_t*>(address_of(custom_mask));
  in.mask_cells = cells;
  in.mask_length_exact = mask_exact;
  verify_metadata(executor_for(b->device), bufs, int32_arg("bucket", bucket), in);
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef().def("specgraph.verify_arena", checked<&verify_arena_op>::call);
}

}  // namespace specgraph::python
