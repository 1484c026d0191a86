"""The guard words' facts, served by the extension (guard.hpp's violation_kind and kernel_id
names by id, a word's int32s, the verify words; python/src/host.cpp guard_facts), never
restated here; and Violation, one recorded violation, for every module that reads guard words."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from . import _ffi

_FACTS = _ffi.guard_facts()
KINDS = tuple(str(k) for k in _FACTS["kinds"])  # by violation_kind id
KERNELS = tuple(str(k) for k in _FACTS["kernels"])  # by kernel_id
WORD_INT32S = int(_FACTS["word_int32s"])  # one guard word viewed as int32s
VERIFY_WORDS = int(_FACTS["verify_words"])  # the verify metadata's guard words


def kind_name(kind: int) -> str:
    return KINDS[kind] if 0 <= kind < len(KINDS) else str(kind)


def kernel_name(kernel: int) -> str:
    return KERNELS[kernel] if 0 <= kernel < len(KERNELS) else str(kernel)


def describe(violations: int, kind: str, kernel: str, row: int, column: int, capacity: int,
             value: int) -> str:
    """The C++ describe() line of a guard word given by names."""
    k = KINDS.index(kind) if kind in KINDS else 0
    kid = KERNELS.index(kernel) if kernel in KERNELS else 0
    return str(_ffi.describe_guard(violations, k, kid, row, column, capacity, value))


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
        return describe(self.violations, self.kind, self.kernel, self.row, self.column,
                        self.capacity, self.value)


def violation(w: Sequence[Any]) -> Violation:
    """[violations, kind, kernel, row, column, capacity, value] as a Violation."""
    violations, kind, kernel, row, column, capacity, value = (int(x) for x in w[:7])
    return Violation(kind_name(kind), kernel_name(kernel), row, column, capacity, value,
                     violations)


def word_violation(word: Sequence[Any]) -> Violation:
    """One guard word as its WORD_INT32S int32s (guard.hpp's guard_word: six int32 fields, then
    the int64 value as two little-endian halves) as a Violation."""
    w = [int(x) for x in word[:8]]
    return violation(w[:6] + [(w[6] & 0xFFFFFFFF) | (w[7] << 32)])
