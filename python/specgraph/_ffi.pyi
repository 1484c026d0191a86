# Type stubs for the extension's functions (python/src/*.cpp), registered as tvm-ffi globals
# "specgraph.<name>" and exposed here by tvm_ffi.init_ffi_api. Tensor arguments accept anything
# with __dlpack__ (numpy arrays, torch tensors, tvm_ffi.Tensor); a torch CUDA tensor among the
# arguments makes torch's current stream the stream of the call. The public API (specgraph.*)
# wraps these; call them directly only to skip its checks and dispatch.
from typing import Any, Dict, List, Optional, Sequence, Union

import tvm_ffi

Tensor = Any  # an object with __dlpack__
Plan = tvm_ffi.Object  # specgraph.Plan (C++ plan_obj)
Buffers = tvm_ffi.Object  # specgraph.Buffers (C++ buffers_obj)
RoundGraph = tvm_ffi.Object  # specgraph.RoundGraph (C++ round_graph_obj)
# An op's round source: the engine's inputs checked once by bind_inputs (C++ inputs_obj), or
# None: the inputs staged into the arena.
Source = Optional[tvm_ffi.Object]
DType = Union[str, tvm_ffi.dtype]

# ---- plans (bindings.cpp): host only ----------------------------------------------------------
def make_plan(max_batch: int, topk: int, num_steps: int, page_size: int, max_context_len: int,
              pool_rows: int, kv_slots: int, buckets: Sequence[int], checked: bool,
              round_graphs: bool, device_steps: bool, device_depth: bool, sparse_heads: int,
              vertical_size: Sequence[int], slash_size: Sequence[int],
              sparse_max_keys: int, formats: int, csr_int64: bool, slot_stride: int,
              verify_tokens: int, draft_extend: bool, round_on_device: bool,
              round_reserve: int, round_max_seq_len: int, max_stop_tokens: int) -> Plan:
    """formats: 0 fa3, 1 csr, 2 both; slot_stride 0: num_steps; verify_tokens 0: none;
    draft_extend: the draft-extend section, round_on_device: the round section (both need
    verify_tokens); round_reserve -1: the default R; round_max_seq_len -1: the derived M."""
def default_buckets(max_batch: int) -> List[int]: ...
def bucket_for(plan: Plan, batch: int) -> int: ...
def round_bucket(plan: Plan, batch: int, bucket: int) -> int: ...
def plan_info(plan: Plan) -> Any:
    """Map: buffers, buckets, total_bytes, today, prefix_table_bytes, expand_table_bytes,
    layout, report_text, report_json."""
def arena_view(arena: Tensor, offset: int, dtype: DType, shape: Sequence[int]) -> tvm_ffi.Tensor:
    """A zero-copy view of `arena` that keeps it alive."""
def expand_page_table_host(cache_loc: Tensor, last_page_len: Tensor, page_table: Tensor,
                           cache_seqlen: Tensor, topk: int, page_size: int, decode_length: int,
                           slots_read: int, capacity: int, kv_slots: int) -> List[List[int]]:
    """Host arrays only; returns the violating rows' guard words [count, kind, kernel, row,
    column, capacity, value]."""
def sparse_fallback(seq_len: int, max_count: int, out: Tensor, capacity: int) -> List[int]:
    """[written, count, kind, kernel, row, column, capacity, value]."""
def sparse_stages(seq_len: int, chunk_len: int) -> List[List[int]]:
    """[kind, prev, end, chunk_len, chunk_q_len] per stage."""
def describe_guard(violations: int, kind: int, kernel: int, row: int, column: int,
                   capacity: int, value: int) -> str: ...
def guard_facts() -> Dict[str, Any]:
    """{"word_int32s", "verify_words", "kinds", "kernels"}: a guard word's int32s, the verify
    guard words, the kind and kernel names by id (guard.hpp)."""
def build_info() -> List[Any]:
    """[version, why CUDA is unavailable ("" if available), has NVTX, built with CUDA]."""
def limits() -> Dict[str, int]:
    """specgraph/limits.hpp: max_topk, max_num_steps, max_keys, max_sparse_size, ..."""
def set_nvtx(on: bool) -> None: ...
def stream_for(t: Tensor) -> int:
    """The stream an op on t would enqueue on (0 on the CPU)."""
def raise_for_test(kind: str, message: str) -> None: ...

# ---- buffers and ops (ops.cpp): every op takes the buffers' arena, whose framework decides
# the stream; enqueued on it, no synchronisation unless stated ------------------------------
def make_buffers(plan: Plan, arena: Tensor, initialize: bool) -> Buffers: ...
def initialize(bufs: Buffers, arena: Tensor) -> None: ...
def stage(bufs: Buffers, arena: Tensor, batch: int, req_pool_indices: Optional[Tensor],
          seq_lens: Optional[Tensor], out_cache_loc: Optional[Tensor], max_depth: int,
          min_confidence: float, bucket: int) -> int:
    """Returns the bucket (bucket 0: the smallest >= batch). The three inputs None: the round
    over the bound inputs begins (controls only; batch and bucket unused; the staged bucket
    returned unchanged); some None: InvalidArgument naming the first missing one."""
def round_setup(bufs: Buffers, arena: Tensor, bucket: int, req_to_token: Tensor,
                source: Source) -> None: ...
def step_metadata(bufs: Buffers, arena: Tensor, bucket: int, step: Optional[int],
                  source: Source) -> None:
    """step None: the step the device counter holds (device_steps plans)."""
def advance_step(bufs: Buffers, arena: Tensor) -> None: ...
def sparse_stage(bufs: Buffers, arena: Tensor, kind: int, prev: int, end: int, chunk_len: int,
                 chunk_q_len: int) -> None: ...
def count_violations(bufs: Buffers, arena: Tensor, out: Tensor) -> None: ...
def read_guards(bufs: Buffers, arena: Tensor) -> List[List[Any]]:
    """[violations, kind, kernel, row, column, capacity, value, buffer, step] per word: buffer
    and step (-1: all steps) as check_guards names them (guard_site_of). Synchronises."""
def check_guards(bufs: Buffers, arena: Tensor, bucket: int) -> None:
    """Synchronises; raises GuardViolation."""
def staged_bucket(bufs: Buffers) -> int: ...
def step_view_layout(bufs: Buffers, bucket: int, step: int) -> Any:
    """Map: the C++ step_view of (bucket, step), its scalars and each pointer as a byte offset
    into the arena (-1: null). Host work only; for checking StepView against it."""

# ---- device-decided depth (round_graph.cpp) ---------------------------------------------------
def round_graph(bufs: Buffers, arena: Tensor, bucket: int, cuda_graph: int,
                source: Source) -> RoundGraph:
    """Wraps a copy of the step body cudaGraph_t into the bucket's WHILE round and instantiates
    it. CUDA arenas; host work; not inside a capture."""
def launch_round_graph(graph: RoundGraph, arena: Tensor) -> None:
    """One launch on the current stream; no sync; not inside a capture."""
def round_graph_bucket(graph: RoundGraph) -> int: ...
def continue_condition_host(bufs: Buffers, arena: Tensor, bucket: int, flag: Tensor,
                            source: Source) -> None:
    """CPU arenas: the round's condition kernel writes 1 (continue) or 0 into flag (int32 [1])."""

# ---- CSR draft-decode indices (csr.cpp): like the ops above ------------------------------------
def csr_check_outputs(bufs: Buffers, arena: Tensor, kv_indptr: Tensor,
                      kv_indices: Tensor) -> List[int]:
    """Host checks only: [kv_indices is int64, kv_indptr row stride, kv_indices row stride]."""
# Into the arena (kv_indptr, kv_indices None) or the engine's outputs (both given; checked as
# csr_check_outputs checks them); step None: the step the device counter holds, or with
# whole_round every step of the round (a step with whole_round: InvalidArgument "step").
def csr_indices(bufs: Buffers, arena: Tensor, bucket: int, step: Optional[int],
                whole_round: bool, req_to_token: Tensor, kv_indptr: Optional[Tensor],
                kv_indices: Optional[Tensor], source: Source) -> None: ...
def kv_indices_used_host(seq_len: Tensor, req_pool_index: Tensor, req_to_token: Tensor, topk: int,
                         num_steps: int, page_size: int, entry_page_size: int, window: int,
                         sink: int, slot_stride: int, slot_limit: int, int64: bool) -> List[int]:
    """Host arrays: validates every content; the entries each step uses."""
def kv_indices_run_host(seq_len: Tensor, req_pool_index: Tensor, req_to_token: Tensor, topk: int,
                        num_steps: int, page_size: int, entry_page_size: int, window: int,
                        sink: int, slot_stride: int, slot_limit: int, kv_indptr: Tensor,
                        kv_indices: Tensor,
                        capacity: Sequence[int]) -> List[List[int]]:
    """Host arrays: every step into row s; each step's guard word."""

# ---- target-verify metadata (verify.cpp) -----------------------------------------------------
def verify_metadata(req_to_token: Tensor, req_pool_index: Tensor, seq_len: Tensor,
                    custom_mask: Tensor, draft_tokens: int, page_size: int, max_seq_len: int,
                    real_batch: int, mask_exact: bool, slot_limit: int, prefix_capacity: int,
                    kv_indices_capacity: int, packed_mask_capacity: int,
                    fa3: List[Optional[Tensor]], flashinfer: List[Optional[Tensor]],
                    guard: Tensor, scratch: Any) -> None:
    """fa3: its 8 tensors or none, flashinfer: its 7 or none (a None or a short list: refused by
    the one rule, naming the first missing field); capacities -1: the exact ones; scratch None on
    the host. Host checks first; CUDA: enqueued on the environment stream; CPU: the host twin."""
def verify_tables(batch: int, max_seq_len: int, draft_tokens: int,
                  page_size: int) -> Dict[str, Any]:
    """{"capacity": [prefix columns, kv_indices, packed mask bytes, mask cells, scratch words],
    "fields": [[name, layout, rows, cols (-1: a vector), bytes, formula], ...]} in the C++
    tables' order."""
# ---- draft-extend metadata (extend.cpp) --------------------------------------------------------
def extend_metadata(req_to_token: Tensor, req_pool_index: Tensor, seq_len: Tensor,
                    accept_len: Tensor, real_batch_at: Optional[Tensor], extend_tokens: int,
                    page_size: int, max_seq_len: int, real_batch: int, slot_limit: int,
                    page_capacity: int, prefix_kv_capacity: int, full_kv_capacity: int,
                    tokens: List[Optional[Tensor]], fa3: List[Optional[Tensor]],
                    prefix: List[Optional[Tensor]], full: List[Optional[Tensor]],
                    guard: Tensor, scratch: Any) -> None:
    """Each layout its tensors in the tables' order or none (tokens 3, fa3 5, prefix 3, full 4;
    a None or a short list: refused by the one rule, naming the first missing field);
    capacities -1: the exact ones; real_batch_at: int32 [1] read on the device (None: the int);
    scratch None on the host. Host checks first; CUDA: enqueued on the environment stream; CPU:
    the host twin."""
def extend_tables(batch: int, max_seq_len: int, extend_tokens: int,
                  page_size: int) -> Dict[str, Any]:
    """{"capacity": [page columns, prefix kv_indices, full kv_indices, scratch words, guard
    words], "fields": [[name, layout, rows, cols (-1: a vector), formula], ...]} in the C++
    tables' order."""
def verify_arena(bufs: Any, arena: Any, bucket: int, req_to_token: Any, custom_mask: Any,
                 mask_cells: int, mask_exact: bool) -> None: ...
# ---- draft-extend metadata over the plan's arena (extend_arena.cpp) ----------------------------
def extend_arena(bufs: Any, arena: Any, bucket: int, req_to_token: Any,
                 accept_len: Optional[Tensor], engine: bool, tokens: List[Optional[Tensor]],
                 fa3: List[Optional[Tensor]], prefix: List[Optional[Tensor]],
                 full: List[Optional[Tensor]]) -> None:
    """accept_len None: the section's; engine False: the section's tables (the lists empty),
    True: the engine's (each layout all of its tensors or none, at least one). Host checks
    first; the arena's device."""
def stage_accept_len(bufs: Any, arena: Any, bucket: int, accept_len: Sequence[int]) -> None: ...
# ---- the round after verify over the plan's arena (round_arena.cpp) ---------------------------
def after_verify(bufs: Any, arena: Any, bucket: int, req_to_token: Any, ring: Any,
                 ring_tail: Any, real_batch: int, stop_token_count: int, budget: bool,
                 part: str) -> None:
    """real_batch -1: the staged word; part: "all", "accept_commit" or "next" (refused by name
    in C++ otherwise). Host checks first (by name); the arena's device."""

# ---- inputs read in place (inputs.cpp, round_graph.cpp): the engine's static tensors ------------
# pool, seq: int32/int64 [>= max bucket], any stride; slots: int64/int32 [>= max bucket, topk,
# >= num_steps], any strides; real_batch: int32 [1] or None. Checked once, by bind_inputs.
def bind_inputs(bufs: Buffers, pool: Tensor, seq: Tensor, slots: Tensor,
                real_batch: Optional[Tensor]) -> tvm_ffi.Object:
    """Host checks only: InvalidArgument naming the tensor, its dtype, shape and strides; the
    checked source the round ops take (held with the tensors)."""
