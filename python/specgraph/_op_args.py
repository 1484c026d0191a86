"""Every op's first checks (the Buffers, and a tensor argument on the arena's framework and
device), one layer below the ops that use them (ops, inputs, csr, verify_arena)."""

from __future__ import annotations

from typing import Any

from . import _check
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
