// Internal: the pieces of make_plan() shared by its implementation files (plan.cpp: the draft
// buffers; plan_verify.cpp: the target-verify section; plan_extend.cpp: the draft-extend one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "specgraph/plan.hpp"

namespace specgraph::detail {

inline std::size_t align_up(std::size_t x, std::size_t a) {
  return (x + a - 1) / a * a;
}

// Appends buffers in arena order, keeping the named list (reports) and returning each offset
// (the typed layout). Sizes are int64 products of validated fields: each factor is bounded by
// limits.hpp, so no product here exceeds 2^51 and the running offset stays far inside int64.
class arena_builder {
 public:
  explicit arena_builder(std::vector<buffer_spec>& out) : out_(&out) {}
  std::size_t add(std::string name, std::int32_t step, std::vector<std::int64_t> shape, dtype t,
                  std::size_t alignment = arena_alignment) {
    offset_ = align_up(offset_, alignment);
    buffer_spec b;
    b.alignment = alignment;
    b.name = std::move(name);
    b.step = step;
    b.shape = std::move(shape);
    b.type = t;
    b.capacity = b.shape.back();
    std::int64_t elements = 1;
    for (const std::int64_t d : b.shape) elements *= d;
    b.bytes = static_cast<std::size_t>(elements) * size_of(t);
    b.offset = offset_;
    offset_ += b.bytes;
    out_->push_back(std::move(b));
    return out_->back().offset;
  }
  std::size_t end() const { return offset_; }

 private:
  std::vector<buffer_spec>* out_;
  std::size_t offset_ = 0;
};

// plan_verify.cpp: the verify_tokens checks of validate(draft_config), and the verify section
// appended to the arena (guard words from guard_base on; config validated, buckets filled in).
void validate_verify(const draft_config& c);
void add_verify_section(arena_builder& a, plan& p, std::int32_t guard_base);
// plan_extend.cpp: the draft_extend checks of validate(draft_config) (after validate_verify),
// and the draft-extend section appended to the arena (guard words from guard_base on).
void validate_extend(const draft_config& c);
void add_extend_section(arena_builder& a, plan& p, std::int32_t guard_base);
// plan_round.cpp: the round_on_device, round_reserve, round_max_seq_len (the rows hold
// ceil_page(M + R)) and max_stop_tokens checks of
// validate(draft_config) (after validate_verify), and the round section appended to the arena
// (guard words from guard_base on).
void validate_round(const draft_config& c);
void add_round_section(arena_builder& a, plan& p, std::int32_t guard_base);

}  // namespace specgraph::detail
