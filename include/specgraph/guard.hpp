// Guard words: how a kernel reports a store it refused to make.
//
// Every store into a static buffer is checked against that buffer's capacity. An out-of-capacity
// store is skipped and recorded here, so an engine gets a named error instead of silently
// corrupted graph memory and an illegal memory access much later. Of all violations recorded
// since the last reset, the word holds the one with the lowest (row, column), and counts them
// all: deterministic, so the host and GPU executors report the same details for the same input
// (docs/metadata.md section 7).
#pragma once

#include <cstdint>
#include <string>

namespace specgraph {

enum class kernel_id : std::int32_t {
  none = 0,
  expand_page_table = 1,
  prefix_metadata = 2,
  sparse_fallback = 3,
  sparse_stage = 4,
  stage_inputs = 5,
  draft_kv_indices = 6,
  verify_metadata = 7,           // bad input of the verify kernels (docs/verify.md)
  verify_prefix_page_table = 8,  // FA3 prefix table columns past prefix_capacity
  verify_kv_indices = 9,         // FlashInfer kv_indices past kv_indices_capacity
  verify_packed_mask = 10,       // FlashInfer packed mask bytes past packed_mask_capacity
  // The round's ops, as the order check (kind order, guard word round.order) names them.
  round_setup = 11,    // setup_round
  step_metadata = 12,  // step_metadata (a step or at_device_step)
  csr_indices = 13,    // csr_indices (a step, whole_round or at_device_step): "csr_step_indices"
  // Draft extend (docs/extend.md).
  extend_metadata = 14,               // bad input of the draft-extend kernels
  extend_page_table = 15,             // FA3 page-table columns past page_capacity
  extend_triton_kv_indices = 16,      // CSR prefix-layout kv_indices past their capacity
  extend_flashinfer_kv_indices = 17,  // CSR full-layout kv_indices past their capacity
  extend_select_index = 18,           // a real request's accept length of 0
  // Greedy tree acceptance (docs/accept.md).
  accept_metadata = 19,  // bad input of the acceptance kernel (seq_len, parent, depth)
  accept_outputs = 20,   // acceptance outputs past their capacity
  // The commit (docs/commit.md).
  commit_metadata = 21,  // bad input of the commit kernel
  commit_outputs = 22,   // commit outputs past their capacity
  // The next round's inputs (docs/next-round.md).
  next_round_alloc = 23,    // a row too narrow for its allocation, or the page ring short
  next_round_slots = 24,    // bad input, or a next-round position past allocated_len
  next_round_outputs = 25,  // next-round outputs past their capacity
};

enum class violation_kind : std::int32_t {
  none = 0,
  capacity = 1,   // a store at column >= capacity was skipped
  layout = 2,     // the branch slot layout of docs/metadata.md section 1 does not hold
  bad_input = 3,  // an input value is out of range (negative slot, last_page_len >= page_size, ...)
  // An op ran out of the round's order (docs/metadata.md section 11): column the step (-1: the
  // device step, or none), capacity the progress it needs, value the progress it found.
  order = 4,
  // A real request's accept length was 0 (docs/extend.md): its select_index is r * W (row the
  // request's first window token); row the request, value 0.
  accept_len = 5,
  // A row's allocation nxt is past its req_to_token width: row the request, column -1, capacity
  // the width, value nxt (docs/next-round.md); the row takes no page.
  row_width = 6,
  // The page ring holds fewer pages than the round takes: row -1, column -1, capacity the pages
  // available (clamped to int32), value the pages needed; no row takes a page.
  ring = 7,
  // A next-round position is not backed (>= allocated_len): row the request, column the
  // smallest such position, capacity allocated_len, value the position; its slot is given as 0.
  unbacked = 8,
};

// The round's progress, kept in the arena's round.progress word (docs/metadata.md section 11):
// staging (or begin_round) starts a round, setup_round sets it up, the steps need it set up.
enum class round_progress : std::int32_t {
  none = 0,    // nothing staged since the arena was initialised
  staged = 1,  // staged (or begun with begin_round), not set up
  set_up = 2,  // setup_round ran for this round
};

// Trivially copyable; lives in device memory, one per kernel launch site. Zero means "clean".
struct guard_word {
  std::int32_t violations;  // number of violations recorded since the last reset
  std::int32_t kind;        // violation_kind of the recorded violation (lowest row, column)
  std::int32_t kernel;      // kernel_id of the recorded violation
  std::int32_t row;         // row (or request, or head) of the recorded violation
  std::int32_t column;      // column that was not written (or the offending input column)
  std::int32_t capacity;    // capacity of the buffer (or the limit the value broke)
  std::int64_t value;       // the value that would have been stored / the offending input value
  // The recorded violation's (row, column) as one order key (kernels/guard_ops.hpp: larger is
  // earlier; its top bit is set while a GPU thread writes the details); 0 when clean.
  std::uint64_t first;
};

const char* to_string(kernel_id k) noexcept;
const char* to_string(violation_kind k) noexcept;
const char* to_string(round_progress p) noexcept;

// One line describing the first violation, e.g.
// "capacity violation in expand_page_table: row 1, column 2, capacity 2, value 2 (3 in total)".
std::string describe(const guard_word& g);

}  // namespace specgraph
