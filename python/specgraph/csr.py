"""The CSR draft-decode indices (docs/csr.md) over a plan's buffers: kv_indptr / kv_indices per
draft step, the layout FlashInfer's and Triton's paged decode read. For plans made with
DraftConfig(formats="csr" or "both").

    bufs = specgraph.buffers(plan, arena)
    bucket = specgraph.stage_(bufs, bs, req_pool_indices, seq_lens, out_cache_loc)
    specgraph.round_setup_(bufs, bucket, req_to_token)         # resets the CSR guard words
    specgraph.csr_step_indices_(bufs, bucket, step, req_to_token)
    bufs.csr_kv_indptr(step), bufs.csr_kv_indices(step)         # zero-copy views

or into the engine's own buffers, bound (and checked) once:

    out = specgraph.bind_csr_outputs(bufs, kv_indptr, kv_indices)   # [num_steps, ...] each
    specgraph.csr_round_indices_(bufs, bucket, req_to_token, out=out)

Like the other ops: arguments checked on the host first (InvalidArgument naming the field,
nothing written), then kernels on the current stream of the arena's framework, no
synchronisation, capture-safe; every store checked against its step's exact capacity (a refused
one is recorded in the step's guard word, "csr.kv_indices"). With a torch arena the calls go
through torch.ops.specgraph.csr_step_indices_ / csr_round_indices_ (custom ops with fake
implementations; csr_indices_device_ is csr_step_indices_ with step None).

| op                  | stream  | synchronises | capture-safe |
|---------------------|---------|--------------|--------------|
| bind_csr_outputs    | none (host checks) | no | yes      |
| csr_step_indices_   | current | no           | yes          |
| csr_round_indices_  | current | no           | yes          |
| csr_indices_device_ | current | no           | yes          |

Each op takes inputs=: the engine's static inputs read in place (specgraph.bind_inputs) instead
of the staged ones, and out=: the bound outputs instead of the plan's buffers. Both are passed
down as values (None: the staged inputs, the arena), one call whatever they are; with a torch
arena the bound tensors and outputs are the torch op's optional tensor arguments (the outputs
declared mutated, Tensor(b!)? kv_indptr, Tensor(c!)? kv_indices).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

from . import _check, _ffi
from . import _op_args as _ops
from .buffers import Buffers
from .errors import InvalidArgument
from .inputs import _source


class CsrOutputs(NamedTuple):
    """The engine's kv_indptr / kv_indices, checked once by bind_csr_outputs."""

    kv_indptr: Any  # int32 [>= num_steps, >= max_rows + 1], rows at any stride
    kv_indices: Any  # int32 or int64 [>= num_steps, >= C_(num_steps-1)], rows at any stride
    int64: bool  # kv_indices is int64
    kv_indptr_stride: int  # row strides, in elements
    kv_indices_stride: int


def bind_csr_outputs(bufs: Buffers, kv_indptr: Any, kv_indices: Any) -> CsrOutputs:
    """Checks the engine's output buffers against the plan once, before any op writes them.

    kv_indptr: int32 [num_steps, max_rows + 1] or larger; kv_indices: int32 (FlashInfer) or
    int64 (Triton) [num_steps, C] with C >= the widest step's exact capacity
    C_(num_steps-1) = max_rows * (max_context_len + num_steps) (plan.layout["csr_capacity"]);
    step s writes row s. Rows may be strided (a slice of a wider buffer), their entries must
    be adjacent; on the arena's device; sharing no memory with each other or the arena.
    Refused with InvalidArgument naming the buffer ("kv_indices"), its shape and size and the
    size needed: an engine's max_bs * topk * max_context_len rows are too short (they have no
    room for the draft entries). Host work only (call it outside torch.compile); nothing is
    written.
    """
    _ops.ready(bufs)
    kv_indptr = _ops.tensor(bufs, "kv_indptr", kv_indptr)
    kv_indices = _ops.tensor(bufs, "kv_indices", kv_indices)
    i64, sp, si = (int(x) for x in _ffi.csr_check_outputs(bufs._obj, bufs.arena, kv_indptr,
                                                            kv_indices))
    return CsrOutputs(kv_indptr, kv_indices, bool(i64), sp, si)


def _out(out: Any) -> Optional[CsrOutputs]:
    if out is not None and not isinstance(out, CsrOutputs):
        raise TypeError("out: expected specgraph.CsrOutputs (from bind_csr_outputs) or None, "
                        f"got {_check.type_name(out)}")
    return out


_ARENA = (None, None)  # the target of an op without out=: the plan's own CSR buffers


def _target(out: Any) -> Tuple[Any, Any]:
    """out= of an op as its target arguments: (kv_indptr, kv_indices), (None, None) for the
    arena."""
    return _ARENA if _out(out) is None else (out.kv_indptr, out.kv_indices)


def _csr_plan(bufs: Buffers) -> None:
    if not bufs.plan.config.has_csr:
        raise InvalidArgument("formats: 'fa3': this plan holds no CSR indices "
                              "(DraftConfig(formats=\"csr\") or \"both\")", field="formats")


def csr_step_indices_(bufs: Buffers, bucket: int, step: int, req_to_token: Any,
                      out: Optional[CsrOutputs] = None, *, inputs: Any = None) -> None:
    """Step `step`'s kv_indptr (bucket * topk + 1 entries) and kv_indices for `bucket`, from the
    staged round (stage_) and req_to_token (int32 [>= pool_rows, >= max_context_len], read at
    its own width); into the plan's buffers (bufs.csr_kv_indptr(step),
    bufs.csr_kv_indices(step)) or row `step` of the bound outputs. round_setup_ resets the step's
    guard word: run it first in the round. Current stream; no sync; capture-safe."""
    bucket, step = _ops.ready(bufs)._bucket(bucket), bufs._step(step)
    _csr_plan(bufs)
    req_to_token = _ops.tensor(bufs, "req_to_token", req_to_token)
    _ops.run_from(_source(inputs), bufs, "csr_indices_", bucket, step, False, req_to_token,
                  *_target(out))


def csr_round_indices_(bufs: Buffers, bucket: int, req_to_token: Any,
                       out: Optional[CsrOutputs] = None, *, inputs: Any = None) -> None:
    """Every step of the round at once (into the bound outputs: one launch), as
    csr_step_indices_ for each step. Current stream; no sync; capture-safe."""
    bucket = _ops.ready(bufs)._bucket(bucket)
    _csr_plan(bufs)
    req_to_token = _ops.tensor(bufs, "req_to_token", req_to_token)
    _ops.run_from(_source(inputs), bufs, "csr_indices_", bucket, None, True, req_to_token,
                  *_target(out))


def csr_indices_device_(bufs: Buffers, bucket: int, req_to_token: Any,
                        out: Optional[CsrOutputs] = None, *, inputs: Any = None) -> None:
    """Device step counter (DraftConfig(device_steps=True), docs/device-rounds.md): the indices
    of the step the counter (bufs.device_step) holds when the kernels run, read on the device,
    written as csr_step_indices_ writes that step (the arena's or the bound outputs' row s). A
    counter outside [0, num_steps) writes nothing and records bad input in the CSR guard word
    of step 0. One graph per bucket serves every step. Current stream; no sync; capture-safe."""
    bucket = _ops.ready(bufs)._bucket(bucket)
    _csr_plan(bufs)
    if not bufs.plan.config.device_steps:
        raise InvalidArgument("device_steps: false: the plan has no device step counter (use "
                              "csr_step_indices_)", field="device_steps")
    req_to_token = _ops.tensor(bufs, "req_to_token", req_to_token)
    # torch.ops.specgraph.csr_indices_ with step None: the device counter's step
    _ops.run_from(_source(inputs), bufs, "csr_indices_", bucket, None, False, req_to_token,
                  *_target(out))


def step_csr_views(bufs: Buffers, bucket: int, step: int,
                   out: Optional[CsrOutputs] = None) -> Tuple[Any, Any]:
    """(kv_indptr, kv_indices) of graph(bucket, step), sliced to the bucket: int32
    [bucket * topk + 1] and [bucket * topk * (max_context_len + step + 1)], the plan's buffers
    or the bound outputs' row `step`; device_steps: every step's rows, [num_steps, ...] (as
    StepView says). Views, no copy; host work only."""
    bucket, step = bufs._bucket(bucket), bufs._step(step)
    _csr_plan(bufs)
    c = bufs.plan.config
    rows = bucket * c.topk
    out = _out(out)
    if out is None:
        v = bufs.view(bucket, step)
        return v.kv_indptr, v.kv_indices
    if c.device_steps:
        n = c.num_steps
        return (out.kv_indptr[:n, : rows + 1],
                out.kv_indices[:n, : rows * (c.max_context_len + n)])
    return (out.kv_indptr[step][: rows + 1],
            out.kv_indices[step][: rows * (c.max_context_len + step + 1)])
