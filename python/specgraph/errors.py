"""The exceptions specgraph raises. Every C++ exception maps to one of them, message intact:

=========================================  =============================================
C++                                        Python
=========================================  =============================================
specgraph::invalid_argument                InvalidArgument (a ValueError), .field
specgraph::guard_violation, a set guard    GuardViolation, .buffer .step .bucket .row ...
specgraph::capture_failed, capture_violation  CaptureFailed, .bucket .step
specgraph::cuda_error, unavailable         CudaError, .code
specgraph::error, other std::exception     SpecgraphError
=========================================  =============================================
"""

from __future__ import annotations

from typing import Any

from ._tvm import tvm_ffi


class SpecgraphError(Exception):
    """Base class of specgraph's exceptions.

    Attributes come from the C++ error (its extra context) or from keyword arguments when raised
    in Python; an attribute the error does not carry reads as None.
    """

    def __init__(self, message: str = "", **attrs: Any) -> None:
        super().__init__(message)
        self._attrs = attrs

    def _attr(self, name: str) -> Any:
        if name in self._attrs:
            return self._attrs[name]
        ffi_error = getattr(self, "__tvm_ffi_error__", None)
        context = getattr(ffi_error, "extra_context", None)
        if context is not None and name in context:
            value = context[name]
            return value if not isinstance(value, tvm_ffi.core.String) else str(value)
        return None


class InvalidArgument(SpecgraphError, ValueError):
    """A value out of its allowed range; raised before anything is written.

    `field` names the argument or element ("topk", "seq_lens[3]", "out_cache_loc[0][1][2]").
    """

    @property
    def field(self) -> str | None:
        v = self._attr("field")
        return None if v is None else str(v)


class GuardViolation(SpecgraphError, RuntimeError):
    """A kernel refused a store (or found a bad input or layout) and recorded it.

    `buffer` and `step` (None: all steps) name the buffer; `bucket` and `row` where; `kind`,
    `kernel`, `column`, `capacity`, `value` and `violations` (how many were recorded) are the
    guard word's details.
    """

    buffer = property(lambda self: _str(self._attr("buffer")))
    bucket = property(lambda self: self._attr("bucket"))
    row = property(lambda self: self._attr("row"))
    column = property(lambda self: self._attr("column"))
    kind = property(lambda self: _str(self._attr("kind")))
    kernel = property(lambda self: _str(self._attr("kernel")))
    capacity = property(lambda self: self._attr("capacity"))
    value = property(lambda self: self._attr("value"))
    violations = property(lambda self: self._attr("violations"))

    @property
    def step(self) -> int | None:
        s = self._attr("step")
        return None if s is None or s < 0 else int(s)


class CaptureFailed(SpecgraphError, RuntimeError):
    """Capturing graph(bucket, step) failed (the forward raised or did what capture forbids).

    `step` is None for a whole-round graph or when the failure is not tied to one graph.
    """

    @property
    def bucket(self) -> int | None:
        return self._attr("bucket")

    @property
    def step(self) -> int | None:
        s = self._attr("step")
        return None if s is None or s < 0 else int(s)


class CudaError(SpecgraphError, RuntimeError):
    """A CUDA call failed (`code` is the cudaError_t), or CUDA is unavailable (`code` None)."""

    @property
    def code(self) -> int | None:
        return self._attr("code")


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


tvm_ffi.register_error("specgraph.InvalidArgument", InvalidArgument)
tvm_ffi.register_error("specgraph.GuardViolation", GuardViolation)
tvm_ffi.register_error("specgraph.CaptureFailed", CaptureFailed)
tvm_ffi.register_error("specgraph.CudaError", CudaError)
tvm_ffi.register_error("specgraph.SpecgraphError", SpecgraphError)
