"""The ops as torch.library custom ops, torch.ops.specgraph.* (imported when the process imports
torch, through specgraph/__init__.py's import hook, or with torch already imported, by `import
specgraph`; a torch arena and `import specgraph.torch` import it too). It registers the ops and
fills specgraph._torch_registry, where the ops find them; nothing below imports it at its top.

Registered with torch.library.Library(...).define/impl: the eager call goes straight from the
dispatcher into the Python implementation and the extension, without the per-call cost of the
torch.library.custom_op decorator path. Each op declares what it mutates (Tensor(a!) arena, the
violation flag, or the engine's CSR outputs, Tensor(b!)? kv_indptr / Tensor(c!)? kv_indices),
has a fake implementation (nothing to allocate: the ops return nothing), so torch.compile traces
them as ordinary ops and torch.profiler shows them by name. One schema per op: an op reading a
round source ends with the bound inputs' tensors as optional tensors (all None: the staged
inputs), an op writing CSR indices takes the engine's outputs as optional mutated tensors.

Buffers cannot travel through the dispatcher: an op names them by an int handle, a key into a
table of the buffers' C++ objects, removed when the Buffers is collected (captured graphs need
no handle). Bound inputs likewise: `int inputs` is the handle of the source bind_inputs checked,
used when the op's tensors are its tensors (else the op checks the tensors it was given). Through torch.ops an eager call costs the dispatcher's Python-kernel path on top of
the direct call (about 4 us on CPU here); buffers(..., torch_ops=False) skips it.
"""

from __future__ import annotations

import itertools
import weakref
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Tuple

import torch

from . import _check, _ffi
from ._torch_registry import fill
from .errors import InvalidArgument

INT32_MAX = (1 << 31) - 1

# handle -> (the Buffers' C++ object, the plan's bytes, the arena's address, its storage, the
# storage's address and the bytes it must hold): what Buffers._intact compares, without a
# reference to the Buffers (which would keep it alive)
_OBJECTS: Dict[int, Any] = {}
_next_handle = itertools.count(1)

# The optional round source every op reading one ends with: the bound inputs' tensors
# (specgraph.bind_inputs) and the handle of their checked source; all None: the staged inputs.
_SOURCE = ("Tensor? req_pool_indices=None, Tensor? seq_lens=None, Tensor? out_cache_loc=None, "
           "Tensor? real_batch=None, int inputs=0")
# The optional CSR target: the engine's kv_indptr / kv_indices (specgraph.bind_csr_outputs,
# declared mutated); None: the arena's own CSR buffers.
_TARGET = "Tensor(b!)? kv_indptr=None, Tensor(c!)? kv_indices=None"

SCHEMAS = {
    "initialize_": "initialize_(Tensor(a!) arena, int handle) -> ()",
    # the three inputs None: a round over the bound inputs starts (begin_round_), the round's
    # controls written, bs and bucket unused
    "stage_": "stage_(Tensor(a!) arena, int handle, int bs, Tensor? req_pool_indices, "
              "Tensor? seq_lens, Tensor? out_cache_loc, int max_depth, float min_confidence, "
              "int bucket=0) -> ()",
    "round_setup_": "round_setup_(Tensor(a!) arena, int handle, int bucket, "
                    f"Tensor req_to_token, {_SOURCE}) -> ()",
    # step None: the step the device counter holds (step_metadata_device_)
    "step_metadata_": f"step_metadata_(Tensor(a!) arena, int handle, int bucket, int? step, "
                      f"{_SOURCE}) -> ()",
    "advance_step_": "advance_step_(Tensor(a!) arena, int handle) -> ()",
    "sparse_stage_": "sparse_stage_(Tensor(a!) arena, int handle, int kind, int prev, int end, "
                     "int chunk_len, int chunk_q_len) -> ()",
    "count_violations_": "count_violations_(Tensor arena, int handle, Tensor(a!) out) -> ()",
    "check_guards": "check_guards(Tensor arena, int handle, int bucket) -> ()",
    # CSR draft-decode indices (specgraph.csr) into the arena or the engine's outputs (the
    # arena's guard words and scratch are written too): step `step` (csr_step_indices_), step
    # None the device counter's step (csr_indices_device_) or, with whole_round, every step
    # (csr_round_indices_).
    "csr_indices_": "csr_indices_(Tensor(a!) arena, int handle, int bucket, int? step, "
                    f"bool whole_round, Tensor req_to_token, {_TARGET}, {_SOURCE}) -> ()",
    # Target-verify metadata (specgraph.verify) into the caller's tensors: the FA3 set (8 or
    # none), the FlashInfer set (7 or none), the guard words and the optional scratch.
    "verify_metadata_": "verify_metadata_(Tensor req_to_token, Tensor req_pool_indices, "
                        "Tensor seq_lens, Tensor custom_mask, int draft_tokens, int page_size, "
                        "int max_seq_len, int real_batch, bool mask_exact, int slot_limit, "
                        "int prefix_capacity, int kv_indices_capacity, "
                        "int packed_mask_capacity, Tensor(a!)[] fa3, Tensor(b!)[] flashinfer, "
                        "Tensor(c!) guard, Tensor(d!)[] scratch) -> ()",
    # Draft-extend metadata (specgraph.extend) into the caller's tensors: each layout's set
    # (tokens 3, fa3 5, prefix 3, full 4, or none), the guard words and the optional scratch;
    # real_batch_at: the real batch read on the device (None: the int real_batch).
    "extend_metadata_": "extend_metadata_(Tensor req_to_token, Tensor req_pool_indices, "
                        "Tensor seq_lens, Tensor accept_lens, Tensor? real_batch_at, "
                        "int extend_tokens, int page_size, int max_seq_len, int real_batch, "
                        "int slot_limit, int page_capacity, int prefix_kv_capacity, "
                        "int full_kv_capacity, Tensor(a!)[] tokens, Tensor(b!)[] fa3, "
                        "Tensor(c!)[] prefix, Tensor(d!)[] full, Tensor(e!) guard, "
                        "Tensor(f!)[] scratch) -> ()",
    # Draft-extend metadata over the arena's section (specgraph.extend_arena): accept_len None
    # reads the section's; accept_index None: every real row read; engine False writes the section's tables, True the engine's (each
    # layout's set or none); the section's guard words and scratch either way.
    "extend_arena_": "extend_arena_(Tensor(a!) arena, int handle, int bucket, "
                     "Tensor req_to_token, Tensor? accept_len, Tensor? accept_index, bool engine, "
                     "Tensor(b!)[] tokens, "
                     "Tensor(c!)[] fa3, Tensor(d!)[] prefix, Tensor(e!)[] full) -> ()",
    # The round after verify over the arena's round section (specgraph.round_arena): the
    # engine's req_to_token is written (the rows that allocate), the ring and its tail read;
    # real_batch -1: the staged word; part: "all", "accept_commit" or "next" (C++'s names).
    "after_verify_": "after_verify_(Tensor(a!) arena, int handle, int bucket, "
                     "Tensor(b!) req_to_token, Tensor ring, Tensor ring_tail, int real_batch, "
                     "int stop_token_count, bool budget, str part=\"all\") -> ()",
}


def register(bufs: Any) -> int:
    handle = next(_next_handle)
    _OBJECTS[handle] = (bufs._obj, bufs.plan.total_bytes, bufs._base, bufs._storage,
                        bufs._storage_start, bufs._storage_need)
    weakref.finalize(bufs, _OBJECTS.pop, handle, None)
    return handle


# handle -> (the checked source of a BoundInputs, its tensors' addresses): what a torch op's
# source arguments are compared with (the same tensors: the source checked at bind time)
_INPUTS: Dict[int, Any] = {}


def register_inputs(bound: Any) -> int:
    """A handle for a BoundInputs over Buffers with a torch handle (bind_inputs)."""
    handle = next(_next_handle)
    _INPUTS[handle] = (bound._obj, _addresses(*bound._args()))
    weakref.finalize(bound, _INPUTS.pop, handle, None)
    return handle


def _addresses(*tensors: Any) -> Tuple[int, ...]:
    return tuple(0 if t is None else t.data_ptr() for t in tensors)


def _source(obj: Any, pool: Any, seq: Any, slots: Any, rb: Any, handle: int) -> Any:
    """The extension's source for a torch op's source arguments: None (no tensors: the staged
    inputs), the checked source bind_inputs made when these are its tensors (every eager call),
    else these tensors checked now (copies made by torch.compile's functionalization or opcheck,
    or a call without a handle)."""
    if pool is None and seq is None and slots is None and rb is None:
        return None
    known = _INPUTS.get(handle)
    if known is not None and known[1] == _addresses(pool, seq, slots, rb):
        return known[0]
    for field, t in (("req_pool_indices", pool), ("seq_lens", seq), ("out_cache_loc", slots)):
        if t is None:
            raise InvalidArgument(f"{field}: None, but other bound inputs were given (bound "
                                  "inputs are req_pool_indices, seq_lens and out_cache_loc, "
                                  "optionally real_batch)", field=field)
    return _ffi.bind_inputs(obj, pool, seq, slots, rb)


def _round_setup(obj: Any, arena: Any, bucket: int, r2t: Any, pool: Any = None, seq: Any = None,
                 slots: Any = None, rb: Any = None, inputs: int = 0) -> None:
    _ffi.round_setup(obj, arena, bucket, r2t, _source(obj, pool, seq, slots, rb, inputs))


def _step_metadata(obj: Any, arena: Any, bucket: int, step: Any, pool: Any = None,
                   seq: Any = None, slots: Any = None, rb: Any = None, inputs: int = 0) -> None:
    _ffi.step_metadata(obj, arena, bucket, step, _source(obj, pool, seq, slots, rb, inputs))


def _csr_indices(obj: Any, arena: Any, bucket: int, step: Any, whole_round: bool, r2t: Any,
                 ip: Any = None, ix: Any = None, pool: Any = None, seq: Any = None,
                 slots: Any = None, rb: Any = None, inputs: int = 0) -> None:
    _ffi.csr_indices(obj, arena, bucket, step, whole_round, r2t, ip, ix,
                     _source(obj, pool, seq, slots, rb, inputs))


def _obj(handle: int) -> Any:
    try:
        return _OBJECTS[handle]
    except KeyError:
        raise InvalidArgument(f"handle: {handle} names no live specgraph Buffers",
                              field="handle") from None


def _on_arena(fn: Callable[..., Any], writes: bool = True) -> Callable[..., None]:
    """fn(obj, arena, *args) through the dispatcher. torch.compile's functionalization (and
    opcheck) may hand the op a copy of the arena; on the CPU such a copy can miss the 256-byte
    alignment, and the op then runs on an aligned copy of it, copied back if the op writes the
    arena (a path eager calls never take)."""

    def impl(arena: torch.Tensor, handle: int, *args: Any) -> None:
        obj, nbytes, base, st, start, need = _obj(handle)
        # Freed or shrunk memory is never written: the arena as made (cheap), or a copy of it.
        if arena.data_ptr() != base or st.data_ptr() != start or st.nbytes() < need:
            _check.storage_covers("arena", arena, nbytes)
        try:
            fn(obj, arena, *args)
        except InvalidArgument as e:
            if e.field != "arena" or arena.is_cuda or arena.data_ptr() % 256 == 0:
                raise
            scratch = torch.empty(arena.numel() + 256, dtype=torch.uint8)
            start = (-scratch.data_ptr()) % 256
            aligned = scratch[start: start + arena.numel()]
            aligned.copy_(arena)
            fn(obj, aligned, *args)
            if writes:
                arena.copy_(aligned)

    return impl


def _stage(obj: Any, arena: Any, bs: int, pool: Any, seq: Any, slots: Any, max_depth: int,
           min_confidence: float, bucket: int = 0) -> Any:
    """The schema's default bucket (0: the smallest >= bs) where the dispatcher leaves it out."""
    return _ffi.stage(obj, arena, bs, pool, seq, slots, max_depth, min_confidence, bucket)


def _narrow(field: str, t: Any) -> Any:
    """A torch int tensor as int32: int64 on the CPU checked element by element (refused naming
    the first that does not fit), on CUDA clamped to [-1, INT32_MAX], values the kernels refuse
    and record (no host read, capture-safe)."""
    if t.dtype == torch.int32:
        return t
    if t.dtype != torch.int64:
        raise InvalidArgument(f"{field}: dtype {t.dtype}, expected torch.int32 or torch.int64",
                              field=field)
    if t.is_cuda:
        return t.clamp(-1, INT32_MAX).to(torch.int32)
    bad = ((t < -(1 << 31)) | (t > INT32_MAX)).nonzero()
    if bad.numel():
        i = int(bad[0][0]) if bad.dim() > 1 else int(bad[0])
        raise InvalidArgument(f"{field}[{i}]: {int(t.reshape(-1)[i])} does not fit in int32",
                              field=f"{field}[{i}]")
    return t.to(torch.int32)


def _torch_impl(req_to_token: Any, pool: Any, seq: Any, mask: Any, d: int, ps: int, m: int,
                rb: int, exact: bool, limit: int, cp: int, ck: int, cm: int, fa3: List[Any],
                fi: List[Any], guard: Any, scratch: List[Any]) -> None:
    """torch.ops.specgraph.verify_metadata_'s implementation (eager, on the tensors' device)."""
    pool = _narrow("req_pool_indices", pool.reshape(-1))
    seq = _narrow("seq_lens", seq.reshape(-1))
    sc = scratch[0] if scratch else None
    if sc is None and req_to_token.is_cuda:  # in the graph pool under capture
        batch = max(int(seq.numel()), 1)
        try:  # the extension's count (verify_tables: verify_scratch_words(batch, D))
            words = int(_ffi.verify_tables(batch, m, d, ps)["capacity"][4])
        except InvalidArgument:  # out-of-range scalars: verify_metadata refuses them by name,
            words = 1  # before it looks at the scratch
        sc = torch.empty(words, dtype=torch.int64, device=req_to_token.device)
    _ffi.verify_metadata(req_to_token, pool.contiguous(), seq.contiguous(), mask, d, ps, m, rb,
                         exact, limit, cp, ck, cm, fa3, fi, guard, sc)


def _extend_impl(req_to_token: Any, pool: Any, seq: Any, acc: Any, at: Any, w: int, ps: int,
                 m: int, rb: int, limit: int, cp: int, ck: int, cf: int, tokens: List[Any],
                 fa3: List[Any], prefix: List[Any], full: List[Any], guard: Any,
                 scratch: List[Any]) -> None:
    """torch.ops.specgraph.extend_metadata_'s implementation (eager, on the tensors' device)."""
    pool = _narrow("req_pool_indices", pool.reshape(-1))
    seq = _narrow("seq_lens", seq.reshape(-1))
    acc = _narrow("accept_lens", acc.reshape(-1))
    sc = scratch[0] if scratch else None
    if sc is None and req_to_token.is_cuda:  # in the graph pool under capture
        try:  # the extension's count (extend_tables: extend_scratch_words(batch))
            words = int(_ffi.extend_tables(int(seq.numel()), m, w, ps)["capacity"][3])
        except InvalidArgument:  # out-of-range scalars: extend_metadata refuses them by name,
            words = 1  # before it looks at the scratch
        sc = torch.empty(max(words, 1), dtype=torch.int64, device=req_to_token.device)
    _ffi.extend_metadata(req_to_token, pool.contiguous(), seq.contiguous(), acc.contiguous(),
                         at, w, ps, m, rb, limit, cp, ck, cf, tokens, fa3, prefix, full, guard,
                         sc)


def _after_verify(obj: Any, arena: torch.Tensor, bucket: int, req_to_token: torch.Tensor,
                  ring: torch.Tensor, ring_tail: torch.Tensor, real_batch: int,
                  stop_token_count: int, budget: bool, part: str = "all") -> None:
    """The dispatcher leaves out an argument equal to its schema default (part="all")."""
    _ffi.after_verify(obj, arena, bucket, req_to_token, ring, ring_tail, real_batch,
                      stop_token_count, budget, part)


def _nothing(*args: Any) -> None:
    return None


_IMPLS = {
    "initialize_": _on_arena(_ffi.initialize),
    "stage_": _on_arena(_stage),
    "round_setup_": _on_arena(_round_setup),
    "step_metadata_": _on_arena(_step_metadata),
    "advance_step_": _on_arena(_ffi.advance_step),
    "sparse_stage_": _on_arena(_ffi.sparse_stage),
    "count_violations_": _on_arena(_ffi.count_violations, writes=False),
    "check_guards": _on_arena(_ffi.check_guards, writes=False),
    "csr_indices_": _on_arena(_csr_indices),
    "verify_metadata_": _torch_impl,
    "extend_metadata_": _extend_impl,
    "extend_arena_": _on_arena(_ffi.extend_arena),
    "after_verify_": _on_arena(_after_verify),
}

_lib = torch.library.Library("specgraph", "DEF")
for _name, _schema in SCHEMAS.items():
    _lib.define(_schema)
    # One implementation for every backend: the extension dispatches on the arena's device.
    _lib.impl(_name, _IMPLS[_name], "CompositeExplicitAutograd")
    torch.library.register_fake(f"specgraph::{_name}", _nothing, lib=_lib)

# The overloads themselves: calling them skips the packet's overload resolution.
OPS = SimpleNamespace(**{n: getattr(torch.ops.specgraph, n).default for n in SCHEMAS})
OPS.is_compiling = torch.compiler.is_compiling
# check_guards synchronises and returns nothing, so a compiled graph would drop it: under
# torch.compile specgraph.check_guards runs eagerly instead (a graph break; an error with
# fullgraph=True), after the compiled work before it.
OPS.check_guards = torch._dynamo.disable(OPS.check_guards)
fill(**vars(OPS))  # where the ops (ops.py, csr.py) find them
