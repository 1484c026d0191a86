"""Every C++ exception maps to one Python class, message intact."""

from __future__ import annotations

import pytest

import specgraph
from specgraph import _ffi

MESSAGE = "x: 3 is outside [0, limit 2) \u2014 with text after"


@pytest.mark.parametrize("kind,cls,attrs", [
    ("invalid_argument", specgraph.InvalidArgument, {"field": "the_field"}),
    ("guard_violation", specgraph.GuardViolation, {}),
    ("capture_failed", specgraph.CaptureFailed, {"bucket": 8, "step": 3}),
    ("capture_violation", specgraph.CaptureFailed, {"bucket": None, "step": None}),
    ("cuda_error", specgraph.CudaError, {"code": 700}),
    ("unavailable", specgraph.CudaError, {"code": None}),
    ("error", specgraph.SpecgraphError, {}),
    ("runtime_error", specgraph.SpecgraphError, {}),
])
def test_cpp_exceptions_map_to_python_classes(kind, cls, attrs):
    with pytest.raises(cls) as e:
        _ffi.raise_for_test(kind, MESSAGE)
    assert type(e.value) is cls
    assert str(e.value) == MESSAGE
    for name, value in attrs.items():
        assert getattr(e.value, name) == value
    assert isinstance(e.value, specgraph.SpecgraphError)


def test_bad_alloc_is_a_memory_error():
    with pytest.raises(MemoryError):
        _ffi.raise_for_test("bad_alloc", "")


def test_class_hierarchy():
    assert issubclass(specgraph.InvalidArgument, ValueError)
    for cls in (specgraph.GuardViolation, specgraph.CaptureFailed, specgraph.CudaError):
        assert issubclass(cls, RuntimeError)
    e = specgraph.CaptureFailed("capture of bucket 4, step 1 failed", bucket=4, step=1)
    assert (e.bucket, e.step) == (4, 1)
    e = specgraph.InvalidArgument("bs: 0 is below the minimum 1", field="bs")
    assert e.field == "bs"
    e = specgraph.GuardViolation("round", violations=3)
    assert e.violations == 3 and e.row is None


def test_errors_keep_their_message_through_a_real_call():
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.default_buckets(0)
    assert str(e.value) == "max_batch: 0 is outside [1, limits::max_batch 1048576]" or \
        str(e.value).startswith("max_batch: 0 ")
    assert e.value.field == "max_batch"


def test_guard_names_mirror_the_cpp_ids():
    """specgraph._guard_names, the one Python list of guard kind and kernel names (served by the
    extension, guard_facts): each id must describe to the same name in C++ (guard.hpp's
    to_string), and one id past the list must not (a kernel the list missed goes red here)."""
    from specgraph._guard_names import KERNELS, KINDS

    for i, name in enumerate(KERNELS[1:], start=1):
        text = str(_ffi.describe_guard(1, 1, i, 0, 0, 4, 9))
        assert name in text, (i, name, text)
    past = str(_ffi.describe_guard(1, 1, len(KERNELS), 0, 0, 4, 9))
    assert not any(n in past for n in KERNELS[1:]), past
    for i, name in enumerate(KINDS[1:], start=1):
        assert name in str(_ffi.describe_guard(1, i, 1, 0, 0, 4, 9)), (i, name)
