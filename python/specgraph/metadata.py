"""The metadata kernels at function level, on host arrays: for crash dumps, tests and the
published vectors (docs/metadata.md sections 3 and 6), like `specgraph metadata expand|fallback`.

These run the kernels' own per-row code on the calling thread over numpy arrays (or anything
host-resident with __dlpack__); they need numpy. Parameters and contents are validated first
(InvalidArgument naming the field, nothing written); a store that would leave its buffer is
refused and returned as a Violation, never made.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional

from . import _ffi
from ._deps import require

_KINDS = ("none", "capacity", "layout", "bad input")
_KERNELS = ("none", "expand_page_table", "prefix_metadata", "sparse_fallback", "sparse_stage",
            "stage_inputs")


class Violation(NamedTuple):
    """A refused store or bad input, as a guard word records it (docs/metadata.md section 7)."""

    kind: str  # "capacity", "layout" or "bad input"
    kernel: str
    row: int
    column: int
    capacity: int
    value: int
    violations: int  # how many were recorded (this one has the lowest column)

    def describe(self) -> str:
        return str(_ffi.describe_guard(self.violations, _KINDS.index(self.kind),
                                       _KERNELS.index(self.kernel), self.row, self.column,
                                       self.capacity, self.value))


class ExpandResult(NamedTuple):
    page_table: Any  # int32 [batch * topk, capacity] (or the caller's table)
    cache_seqlen: Any  # int32 [batch * topk]
    violations: List[Violation]  # one per violating row, in row order


class FallbackResult(NamedTuple):
    indices: Any  # int32 [n]
    violations: List[Violation]


def _violation(w: Any) -> Violation:
    violations, kind, kernel, row, column, capacity, value = (int(x) for x in w)
    return Violation(_KINDS[kind], _KERNELS[kernel], row, column, capacity, value, violations)


def expand_page_table(cache_loc: Any, last_page_len: Any, *, topk: int, page_size: int,
                      decode_length: int, slots_read: Optional[int] = None,
                      capacity: Optional[int] = None, kv_slots: int = 1 << 62,
                      page_table: Any = None, cache_seqlen: Any = None) -> ExpandResult:
    """Expand metadata (docs/metadata.md section 3) for every row of `cache_loc`.

    cache_loc: int64 [batch * topk, width] slot rows; last_page_len: int32 [batch];
    slots_read: leading slots read per row (default decode_length: the runtime's slice);
    capacity: writable columns (default decode_length + 1). page_table / cache_seqlen: optional
    int32 host arrays to write into ([rows, stride >= capacity] and [rows]); by default zeroed
    new ones. Host only; runs inline.
    """
    np = require("numpy", "specgraph.metadata.expand_page_table")
    lpl = np.ascontiguousarray(np.asarray(last_page_len, dtype=np.int32).reshape(-1))
    rows = lpl.size * max(int(topk), 1)
    loc = np.ascontiguousarray(np.asarray(cache_loc, dtype=np.int64))
    if loc.ndim == 1 and rows:
        loc = loc.reshape(rows, -1)
    d = int(decode_length)
    cap = d + 1 if capacity is None else int(capacity)
    if page_table is None:
        page_table = np.zeros((rows, max(cap, 1)), dtype=np.int32)
    if cache_seqlen is None:
        cache_seqlen = np.zeros(rows, dtype=np.int32)
    found = _ffi.expand_page_table_host(loc, lpl, page_table, cache_seqlen, topk, page_size, d,
                                        d if slots_read is None else slots_read, cap, kv_slots)
    return ExpandResult(page_table, cache_seqlen, [_violation(w) for w in found])


def sparse_fallback(seq_len: int, max_count: int, capacity: int) -> FallbackResult:
    """Evenly spaced indices for an empty selection (docs/metadata.md section 6): count =
    min(max_count, seq_len), step = max(1, ceil(seq_len / count)); at most `capacity` stored,
    an excess index refused and reported. Host only."""
    np = require("numpy", "specgraph.metadata.sparse_fallback")

    out = np.zeros(max(1, min(int(capacity), int(max_count), int(seq_len))), dtype=np.int32)
    r = [int(x) for x in _ffi.sparse_fallback(seq_len, max_count, out, capacity)]
    violations = [_violation(r[1:])] if r[1] else []
    return FallbackResult(out[: r[0]].copy(), violations)
