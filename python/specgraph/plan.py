"""Plans: every static buffer of a draft round, sized exactly, in one arena (host only)."""

from __future__ import annotations

import bisect
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from . import _ffi
from .config import DraftConfig, _int


class BufferSpec(NamedTuple):
    """One static buffer of the arena (docs/metadata.md section 8)."""

    name: str  # e.g. "expand.page_table"
    step: Optional[int]  # the draft step, or None for a step-invariant buffer
    shape: Tuple[int, ...]
    dtype: str  # "int32", "int64", "float32" or "guard_word" (40 bytes)
    capacity: int  # writable columns per row (the last dimension)
    offset: int  # byte offset in the arena
    bytes: int
    alignment: int


class EngineSizing(NamedTuple):
    """The same configuration sized the way engines size it today (for comparison)."""

    prefix_table_bytes: int  # max_context_len wide, one copy per step
    expand_table_bytes: int  # num_steps wide for every step
    total_bytes: int


class Plan:
    """The exact sizes and offsets of one DraftConfig; immutable. Made by make_plan().

    Everything here is host data computed once: no device is touched, nothing is allocated, and
    any method may be called at any time, during a capture included.
    """

    def __init__(self, config: DraftConfig, handle: Any) -> None:
        info = _ffi.plan_info(handle)
        self.config = config
        self._handle = handle  # the C++ plan (shared with every Buffers made from it)
        self.buffers: Tuple[BufferSpec, ...] = tuple(
            BufferSpec(str(b[0]), None if int(b[1]) < 0 else int(b[1]), tuple(int(d) for d in b[2]),
                       str(b[3]), int(b[4]), int(b[5]), int(b[6]), int(b[7]))
            for b in info["buffers"])
        self.buckets: Tuple[int, ...] = tuple(int(b) for b in info["buckets"])
        self.total_bytes: int = int(info["total_bytes"])
        self.engine_sizing = EngineSizing(*(int(x) for x in info["today"]))
        self.prefix_table_bytes: int = int(info["prefix_table_bytes"])
        self.expand_table_bytes: int = int(info["expand_table_bytes"])
        self.layout: Dict[str, Any] = _plain(info["layout"])
        self._text = str(info["report_text"])
        self._json = str(info["report_json"])
        # bucket_for without a call into C++: _bucket_of[bs] for bs in 1..max_bucket.
        self._bucket_of: List[int] = [0] * (self.max_bucket + 1)
        for bs in range(1, self.max_bucket + 1):
            self._bucket_of[bs] = self.buckets[bisect.bisect_left(self.buckets, bs)]

    @property
    def max_bucket(self) -> int:
        return self.buckets[-1]

    @property
    def max_rows(self) -> int:
        """Query rows of the largest bucket: max_bucket * topk."""
        return self.max_bucket * self.config.topk

    def bucket_for(self, bs: int) -> int:
        """The smallest bucket >= bs; InvalidArgument ("batch") outside [1, max_bucket]."""
        if type(bs) is int and 0 < bs <= self.max_bucket:
            return self._bucket_of[bs]
        return int(_ffi.bucket_for(self._handle, _int("batch", bs)))  # raises, naming the limit

    def round_bucket(self, bs: int, bucket: Optional[int] = None) -> int:
        """The bucket a round of bs real requests replays (bs 0: an idle rank, every row padding):
        `bucket` when the caller chose one (data-parallel attention: the bucket of the largest
        batch across ranks, after the engine's all-reduce), which must be a planned bucket >= bs;
        None or 0: the smallest bucket >= bs (the first bucket for bs 0). InvalidArgument
        ("batch" outside [0, max_batch]; "bucket" naming the value, the table and the batch)."""
        if bucket is None or (type(bucket) is int and bucket == 0):
            if type(bs) is int and 0 < bs <= self.max_bucket:
                return self._bucket_of[bs]
            bucket = 0
        return int(_ffi.round_bucket(self._handle, _int("batch", bs), _int("bucket", bucket)))

    def find(self, name: str, step: Optional[int] = None) -> BufferSpec:
        """The buffer called `name` (for `step`; None: step-invariant). KeyError if absent."""
        for b in self.buffers:
            if b.name == name and b.step == step:
                return b
        raise KeyError(f"{name} (step {step})" if step is not None else name)

    def report(self) -> str:
        """A table of every buffer (name, step, shape, dtype, capacity, offset, bytes) and how it
        compares with today's engine sizing: the C++ plan.report_text()."""
        return self._text

    def to_json(self) -> str:
        """The plan as JSON, exactly what `specgraph plan --json` prints (plan.report_json())."""
        return self._json

    def __repr__(self) -> str:
        c = self.config
        return (f"Plan(max_batch={c.max_batch}, topk={c.topk}, num_steps={c.num_steps}, "
                f"page_size={c.page_size}, total_bytes={self.total_bytes}, "
                f"buckets={len(self.buckets)})")


def _plain(v: Any) -> Any:
    """tvm-ffi containers as Python dicts, lists and ints."""
    if hasattr(v, "items"):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (str, int, float)):
        return v
    if hasattr(v, "__iter__"):
        return [_plain(x) for x in v]
    return v


def make_plan(config: DraftConfig) -> Plan:
    """Plans `config`: every static buffer, sized exactly, in one arena (host only, allocates
    nothing, capture-safe). The config was validated when it was made."""
    if not isinstance(config, DraftConfig):
        raise TypeError(f"config: expected DraftConfig, got {type(config).__name__}")
    return Plan(config, config._plan)  # type: ignore[attr-defined]
