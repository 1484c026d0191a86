"""Argument checks shared by the public functions, run before anything is allocated or written.

The contract (docs/python.md, "Bad input"): a value of the right type but outside its range
raises InvalidArgument (a ValueError) whose .field names the argument and whose message gives
the value and the limit; a value of the wrong type raises TypeError whose message starts with
the argument's name and says what was expected. Python ints and numpy integer scalars are
interchangeable (bools are not ints here); nothing is narrowed silently.
"""

from __future__ import annotations

import numbers
import operator
import sys
from typing import Any, Optional, Sequence

from .errors import InvalidArgument

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def type_name(value: Any) -> str:
    """The type as a user would spell it: "float", "numpy.bool", "torch.Tensor"."""
    t = type(value)
    mod = t.__module__.split(".")[0]
    return t.__name__ if mod == "builtins" else f"{mod}.{t.__name__}"


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ in ("bool_", "bool") and \
        type(value).__module__ == "numpy"


def index(field: str, value: Any) -> int:
    """value as a Python int in int64 (an int or a numpy integer; not a bool or a float)."""
    if type(value) is int:
        v = value
    else:
        if _is_bool(value):
            raise TypeError(f"{field}: expected an int, got {type_name(value)}")
        try:
            v = operator.index(value)
        except TypeError:
            raise TypeError(f"{field}: expected an int, got {type_name(value)}") from None
    if not INT64_MIN <= v <= INT64_MAX:
        raise InvalidArgument(f"{field}: {v} does not fit in int64 [{INT64_MIN}, {INT64_MAX}]",
                              field=field)
    return v


def int_in(field: str, value: Any, lo: int, hi: int, limit: str = "") -> int:
    """index(), then lo <= value <= hi, refused naming the value and the bounds."""
    v = index(field, value)
    if not lo <= v <= hi:
        raise InvalidArgument(f"{field}: {v} is outside [{lo}, {limit + ' ' if limit else ''}{hi}]",
                              field=field)
    return v


def optional_int(field: str, value: Any) -> Optional[int]:
    return None if value is None else index(field, value)


def boolean(field: str, value: Any) -> bool:
    """A bool or a numpy bool."""
    if not _is_bool(value):
        raise TypeError(f"{field}: expected a bool, got {type_name(value)}")
    return bool(value)


def real(field: str, value: Any) -> float:
    """A float, an int or a numpy number (not a bool) as a Python float."""
    if type(value) is float:
        return value
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(f"{field}: expected a float, got {type_name(value)}")
    try:
        return float(value)
    except OverflowError:
        raise InvalidArgument(f"{field}: {value} does not fit in a float", field=field) from None


def tensor(field: str, value: Any, arena: Any, framework: str) -> Any:
    """A tensor argument of an op over `arena`: a torch.Tensor on the arena's device for a torch
    arena (a meta tensor would make the dispatcher run the fake kernel and write nothing); an
    array with __dlpack__ otherwise. dtype, shape and contents are the extension's to check."""
    if framework == "torch":
        torch = sys.modules["torch"]
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{field}: expected a torch.Tensor on {arena.device}, "
                            f"got {type_name(value)}")
        if value.device != arena.device:
            raise InvalidArgument(f"{field}: on {value.device}, but the arena is on "
                                  f"{arena.device}", field=field)
        return value
    if not hasattr(value, "__dlpack__"):
        raise TypeError(f"{field}: expected an array (numpy.ndarray or a tensor with "
                        f"__dlpack__), got {type_name(value)}")
    flags = getattr(value, "flags", None)
    if flags is not None and not getattr(flags, "writeable", True):
        raise InvalidArgument(f"{field}: a read-only array (DLPack cannot pass it on; pass a "
                              "writeable copy)", field=field)
    return value


def torch_arena_intact(field: str, arena: Any, base: int, nbytes: int) -> None:
    """A torch arena still has memory for the plan at the address the buffers were made over:
    its data pointer is `base` and its storage covers [base, base + nbytes). A storage that was
    freed (resize_(0)), shrunk or swapped (set_) since is refused before any kernel runs."""
    ptr = arena.data_ptr()
    if ptr != base:
        raise InvalidArgument(
            f"{field}: its memory moved (data pointer {ptr:#x}, the buffers were made over "
            f"{base:#x}); make new buffers over the arena", field=field)
    storage_covers(field, arena, nbytes)


def member(field: str, value: Any, allowed: Sequence[int], what: str) -> int:
    """An int that is one of `allowed`, else InvalidArgument naming `field` (the caller's)."""
    v = index(field, value)
    if v not in allowed:
        raise InvalidArgument(f"{field}: {v} is not one of {what} {list(allowed)}", field=field)
    return v


def storage_covers(field: str, arena: Any, nbytes: int) -> None:
    """A torch tensor's storage holds `nbytes` from its data pointer (not freed, not shrunk);
    a strided view of it (stride 0: expand()) is refused as not contiguous first."""
    if arena.dim() == 1 and arena.numel() > 1 and arena.stride(0) != 1:
        raise InvalidArgument(
            f"{field}: not contiguous (stride {arena.stride(0)}, e.g. an expand()ed or sliced "
            "view): pass a contiguous 1-D uint8 tensor (torch.empty(plan.total_bytes, "
            "dtype=torch.uint8, device=...), or .contiguous())", field=field)
    ptr = arena.data_ptr()
    st = arena.untyped_storage()
    start, size = st.data_ptr(), st.nbytes()
    if not start or not start <= ptr or ptr + nbytes > start + size:
        raise InvalidArgument(
            f"{field}: its storage holds {max(start + size - ptr, 0) if start else 0} bytes "
            f"from the arena's start, the plan needs {nbytes} (freed or resized under the "
            "buffers?)", field=field)


def int_array(field: str, values: Any, dtype: str, np: Any) -> Any:
    """values as a contiguous numpy array of `dtype` (int32 or int64), converted only when every
    element fits exactly: a float, bool or non-numeric array, or an element out of the dtype's
    range, is refused naming the element; nothing is truncated or wrapped."""
    if values is None or isinstance(values, (str, bytes)):
        raise TypeError(f"{field}: expected an integer array, got {type_name(values)}")
    a = np.asarray(values)
    if a.size == 0 and not isinstance(values, np.ndarray):
        a = a.astype(dtype)  # an empty list (an idle rank) has no element to convert wrongly
    if a.dtype.kind not in "iu":
        raise InvalidArgument(f"{field}: dtype {a.dtype}, expected {dtype} (integers are not "
                              "converted from other kinds)", field=field)
    if a.dtype != dtype and a.size:
        info = np.iinfo(dtype)
        bad = np.flatnonzero((a < info.min) | (a > info.max)) if a.dtype.kind == "i" or \
            a.dtype.itemsize < 8 else np.flatnonzero(a > np.uint64(info.max))
        if bad.size:
            where = np.unravel_index(int(bad[0]), a.shape)
            name = field + "".join(f"[{int(i)}]" for i in where)
            raise InvalidArgument(f"{name}: {int(a[where])} does not fit in {dtype}", field=name)
    return np.ascontiguousarray(a, dtype=dtype)
