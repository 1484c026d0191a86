"""Inputs read in place (docs/engines.md, "Inputs read in place").

An engine's draft graph runner already keeps static input tensors for every captured batch size.
Bound once, the round's ops read them where they are (pointer, dtype and strides baked into a
capture), so nothing is copied per round and stage_ is not needed:

    inputs = specgraph.bind_inputs(bufs, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
                                   out_cache_loc=out_cache_loc.view(max_bs, topk, -1))
    specgraph.begin_round_(bufs)                 # device_steps / device_depth plans only
    specgraph.round_setup_(bufs, bucket, req_to_token, inputs=inputs)
    specgraph.step_metadata_(bufs, bucket, step, inputs=inputs)

bind_inputs checks the tensors once and returns a BoundInputs holding the extension's checked
source; every op taking inputs= passes it down as its source (None: the staged inputs), and
with a torch arena the ops go through torch.ops.specgraph.* with the bound tensors as optional
tensor arguments (torch.compile, opcheck and the profiler see them).

The values are checked on the device as staged ones are (each loaded as int64 and range-checked
before it is narrowed): a bad value refuses its row, which is written as a padding row and
counted in the guard words (check_guards names it); nothing is written out of bounds.

| function      | stream  | synchronises | capture-safe |
|---------------|---------|--------------|--------------|
| bind_inputs   | none (host checks) | no | yes       |
| begin_round_  | current | no           | yes (the values are baked in) |
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Tuple

from . import _check, _ffi
from . import _op_args as _ops
from .buffers import Buffers


class BoundInputs:
    """The engine's static inputs, checked once by bind_inputs: the tensors (kept alive) and the
    extension's checked source that the ops read them through."""

    __slots__ = ("req_pool_indices", "seq_lens", "out_cache_loc", "real_batch", "_obj",
                 "_tensors", "__weakref__")

    def __init__(self, req_pool_indices: Any, seq_lens: Any, out_cache_loc: Any,
                 real_batch: Optional[Any], obj: Any) -> None:
        self.req_pool_indices = req_pool_indices  # int32 or int64 [>= max bucket], any stride
        self.seq_lens = seq_lens  # int32 or int64 [>= max bucket], any element stride
        self.out_cache_loc = out_cache_loc  # int64 or int32 [>= max bucket, topk, >= num_steps]
        self.real_batch = real_batch  # int32 [1] the engine writes each round, or None
        self._obj = obj  # the extension's checked source (C++ specgraph.BoundInputs)
        # The torch ops' source arguments: the tensors and the handle of the checked source
        # (0: none registered, the op checks the tensors itself).
        self._tensors: Tuple[Any, ...] = (*self._args(), 0)

    def _args(self) -> Tuple[Any, Any, Any, Optional[Any]]:
        return self.req_pool_indices, self.seq_lens, self.out_cache_loc, self.real_batch

    def __iter__(self) -> Iterator[Any]:
        return iter(self._args())

    def __repr__(self) -> str:
        return ("BoundInputs(" + ", ".join(f"{n}={_describe(t)}" for n, t in zip(
            ("req_pool_indices", "seq_lens", "out_cache_loc", "real_batch"), self._args())) + ")")


def _describe(t: Any) -> str:
    return "None" if t is None else f"{getattr(t, 'dtype', '?')} {list(getattr(t, 'shape', ()))}"


class _Staged:
    """The source of an op without inputs=: the inputs stage_ copied into the arena (no
    tensors: the torch schema's defaults, None, which the dispatcher then need not convert)."""

    __slots__ = ()
    _obj = None
    _tensors = ()


STAGED = _Staged()


def bind_inputs(bufs: Buffers, *, req_pool_indices: Any, seq_lens: Any, out_cache_loc: Any,
                real_batch: Optional[Any] = None) -> BoundInputs:
    """Checks the engine's static input tensors against the plan once and returns them bound,
    for the ops' inputs= keyword and DraftGraphs(..., inputs=).

    req_pool_indices, seq_lens: int32 or int64, 1-D with at least the largest bucket's
    elements, at any (non-negative) element stride. out_cache_loc: int64 or int32
    [>= largest bucket, topk, >= num_steps] at any strides (SGLang's flat buffer:
    out_cache_loc.view(max_bs, topk, -1)). real_batch: an int32 [1] the engine writes with each
    round's real batch: the rows at or past it (clamped to the bucket) are padding rows (pool
    row 0, seq_len 1, slots 0) whatever the tensors hold there, in every mode and format. None:
    every row of the replayed bucket is read as real (engines that pad their own rows with pool
    row 0, seq_len 1 and slots 0, specgraph's padding row), and the checked-mode branch-layout
    check does not run. All on the arena's
    device; they must not move or change strides while captured graphs read them.

    Refused with InvalidArgument naming the tensor, its dtype, shape and strides and what is
    needed. Host work only; nothing is read or written.
    """
    _ops.ready(bufs)
    pool = _ops.tensor(bufs, "req_pool_indices", req_pool_indices)
    seq = _ops.tensor(bufs, "seq_lens", seq_lens)
    slots = _ops.tensor(bufs, "out_cache_loc", out_cache_loc)
    rb = None if real_batch is None else _ops.tensor(bufs, "real_batch", real_batch)
    bound = BoundInputs(pool, seq, slots, rb, _ffi.bind_inputs(bufs._obj, pool, seq, slots, rb))
    if bufs.handle:  # the torch ops find the checked source by this handle
        from . import _torch_ops

        bound._tensors = (pool, seq, slots, rb, _torch_ops.register_inputs(bound))
    return bound


def _bound(inputs: Any) -> BoundInputs:
    if not isinstance(inputs, BoundInputs):
        raise TypeError("inputs: expected specgraph.BoundInputs (from bind_inputs) or None, got "
                        f"{_check.type_name(inputs)}")
    return inputs


def _source(inputs: Any) -> Any:
    """inputs= of an op as its source: None, the staged inputs (STAGED); or a BoundInputs."""
    return STAGED if inputs is None else _bound(inputs)


def begin_round_(bufs: Buffers, max_depth: int = 0,
                 min_confidence: float = float("-inf")) -> None:
    """Starts a round whose inputs are read in place, in device_steps / device_depth plans:
    resets the device step counter and the WHILE iteration count to 0 and writes the round's
    max_depth (0: num_steps, else 1..num_steps) and min_confidence, and nothing else (no input
    copy). Call it before the round's first replay. One kernel on the current stream; no sync;
    capture-safe (the values are baked into a capture)."""
    _ops.ready(bufs)
    max_depth = _check.index("max_depth", max_depth)
    min_confidence = _check.real("min_confidence", min_confidence)
    # stage_ without inputs: the round's controls only (the inputs are bound)
    _ops.run(bufs, "stage_", 0, None, None, None, max_depth, min_confidence, 0)
