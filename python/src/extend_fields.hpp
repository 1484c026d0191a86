// The draft-extend output tensors' checks (extend.cpp), shared by the plan-free op and the arena
// op (extend_arena.cpp): each tensor against C++'s shape of its field for the call
// (extend_shape_of), its address into the tables, and the overlap checks.
#pragma once

#include <tvm/ffi/container/array.h>
#include <tvm/ffi/optional.h>

#include <cstdint>
#include <vector>

#include "python/src/binding.hpp"
#include "specgraph/extend_metadata.hpp"

namespace specgraph::python {

// A memory span for the overlap checks.
struct span {
  const char* field;
  std::uintptr_t start;
  std::int64_t bytes;
};
span span_of(const char* field, const ffi::TensorView& t, std::int64_t bytes);

// Throws invalid_argument naming `field` unless t is on `device` (req_to_token's).
void check_device(const char* field, const ffi::TensorView& t, DLDevice device);

// Output field i: C++'s shape of it (extend_shape_of(i, p)) against the tensor (int32; a
// contiguous vector, or the page table with unit column stride and rows at any stride), then its
// address (and the page table's row stride) into p. Returns its span.
span out_field(int i, const ffi::TensorView& t, DLDevice device, extend_params& p);

// Layout `layout` (extend_layout_names order) of the tensors in the tables' order; a None or a
// short list leaves fields null (the layouts rule of extend_layouts_of then names the first
// missing one).
void out_layout(int layout, const ffi::Array<ffi::Optional<ffi::Tensor>>& ts, DLDevice device,
                extend_params& p, std::vector<span>& spans);

// Throws invalid_argument naming the first span from first_output on that shares memory with
// any span before it.
void check_no_overlap(const std::vector<span>& spans, std::size_t first_output);

}  // namespace specgraph::python
