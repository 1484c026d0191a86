"""Every op's first checks (the Buffers, and a tensor argument on the arena's framework and
device) and its one call, one layer below the ops that use them (ops, inputs, csr,
verify_arena)."""

from __future__ import annotations

from typing import Any, Dict

from . import _check, _ffi
from ._torch_registry import OPS as _torch
from .buffers import Buffers


def ready(bufs: Buffers) -> Buffers:
    """Buffers whose arena still holds the plan's memory (TypeError for anything else)."""
    if not isinstance(bufs, Buffers):
        raise TypeError(f"bufs: expected specgraph.Buffers, got {_check.type_name(bufs)}")
    if not bufs.handle or not _torch.is_compiling():  # compiled: the op's implementation checks
        bufs._check_arena()
    return bufs


def tensor(bufs: Buffers, field: str, value: Any) -> Any:
    """`value` checked as a tensor of the arena's framework and device, named `field`."""
    return _check.tensor(field, value, bufs.arena, bufs.framework)


# op name -> the extension's function of that name without the trailing underscore
_FFI: Dict[str, Any] = {}


def _direct(op: str) -> Any:
    fn = _FFI.get(op)
    if fn is None:
        fn = _FFI[op] = getattr(_ffi, op.rstrip("_"))
    return fn


def run(bufs: Buffers, op: str, *args: Any) -> Any:
    """The op `op` over bufs: torch.ops.specgraph.<op> for Buffers with a torch handle (so
    torch.compile, opcheck and the profiler see it), else the extension's function of the same
    name without the trailing underscore. Its arguments are the same on both paths."""
    if bufs.handle:
        return getattr(_torch, op)(bufs.arena, bufs.handle, *args)
    return _direct(op)(bufs._obj, bufs.arena, *args)


def run_from(source: Any, bufs: Buffers, op: str, *args: Any) -> Any:
    """run() of an op that reads a round source, its last argument: a BoundInputs, or
    inputs.STAGED (the inputs staged into the arena). On the torch path the source travels as
    its tensors and its handle (torch.compile sees what the op reads), else as the extension's
    checked object."""
    if bufs.handle:
        return getattr(_torch, op)(bufs.arena, bufs.handle, *args, *source._tensors)
    return _direct(op)(bufs._obj, bufs.arena, *args, source._obj)
