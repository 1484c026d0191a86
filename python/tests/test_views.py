"""Every field of every StepView against the C++ step_view (draft_buffers::view, read through
the extension's step_view_layout): for every bucket and step, per-step and device-step mode,
over numpy and torch (CPU) arenas, each view's dtype, shape, element strides, the byte offset of
its data in the arena, and the values it reads from a randomly filled arena."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph import _ffi  # noqa: E402
from specgraph.buffers import StepView  # noqa: E402

CONFIGS = [
    dict(max_batch=6, topk=1, num_steps=3, page_size=1, max_context_len=40, pool_rows=9,
         kv_slots=1 << 12),
    dict(max_batch=12, topk=4, num_steps=4, page_size=16, max_context_len=200, pool_rows=13,
         kv_slots=1 << 20, buckets=(2, 5, 12)),
    dict(max_batch=5, topk=2, num_steps=5, page_size=4, max_context_len=64, pool_rows=7,
         kv_slots=1 << 16, device_steps=True),
    dict(max_batch=8, topk=3, num_steps=2, page_size=8, max_context_len=48, pool_rows=5,
         kv_slots=1 << 16, device_steps=True, device_depth=True),
    dict(max_batch=5, topk=3, num_steps=3, page_size=4, max_context_len=24, pool_rows=6,
         kv_slots=1 << 16, buckets=(2, 5), formats="both", csr_int64=True),
    dict(max_batch=4, topk=2, num_steps=4, page_size=2, max_context_len=20, pool_rows=5,
         kv_slots=1 << 16, buckets=(1, 4), formats="csr", device_steps=True),
]


def csr_contract(plan, cv, bucket, step):
    """kv_indptr / kv_indices: (dtype, shape, element strides, byte offset) from the C++ view
    (offsets, strides) and the plan's buffer list (dtype), or None without CSR. Per step: the
    step's rows cut to the bucket; device_steps: every step's rows from step 0's."""
    if not plan.config.has_csr:
        assert cv["kv_indptr"] == -1 and cv["kv_indices"] == -1
        return {"kv_indptr": None, "kv_indices": None}
    c, rows = plan.config, bucket * plan.config.topk
    dtype = plan.find("csr.kv_indices", None if c.device_steps else step).dtype
    assert cv["csr_capacity"] == plan.max_rows * (c.max_context_len + step + 1)
    if c.device_steps:  # the C++ view(bucket, s) points at step s: step 0's is s rows back
        ip, ix = cv["csr_kv_indptr_stride"], cv["csr_kv_indices_stride"]
        item = 8 if dtype == "int64" else 4
        return {"kv_indptr": ("int32", (c.num_steps, rows + 1), (ip, 1),
                              cv["kv_indptr"] - 4 * step * ip),
                "kv_indices": (dtype, (c.num_steps, rows * (c.max_context_len + c.num_steps)),
                               (ix, 1), cv["kv_indices"] - item * step * ix)}
    return {"kv_indptr": ("int32", (rows + 1,), (1,), cv["kv_indptr"]),
            "kv_indices": (dtype, (rows * (c.max_context_len + step + 1),), (1,),
                           cv["kv_indices"])}


SCALARS = ("bucket", "step", "decode_length", "topk", "page_size", "rows")


def contract(cv, device_steps):
    """Each array field's dtype, shape and element strides as the C++ step_view documents them
    (include/specgraph/buffers.hpp), from the C++ view's own scalars; None: no array."""
    b, rows, topk = cv["bucket"], cv["rows"], cv["topk"]
    table_width = cv["expand_stride"] if device_steps else cv["expand_capacity"]
    fields = {
        "req_pool_index": ("int32", (b,), (1,)),
        "seq_len": ("int32", (b,), (1,)),
        "out_cache_loc": ("int64", (b, topk, cv["cache_loc_stride"]),
                          (topk * cv["cache_loc_stride"], cv["cache_loc_stride"], 1)),
        "real_batch": ("int32", (1,), (1,)),
        "last_page_len": ("int32", (b,), (1,)),
        "prefix_seqlen": ("int32", (b,), (1,)),
        "prefix_page_table": ("int32", (b, cv["prefix_capacity"]), (cv["prefix_stride"], 1)),
        "cu_seqlens_q": ("int32", (b + 1,), (1,)),
        "expand_page_table": ("int32", (rows, table_width), (cv["expand_stride"], 1)),
        "expand_cache_seqlen": ("int32", (rows,), (1,)),
        "confidence": ("float32", (rows,), (1,)),
        "device_step": ("int32", (1,), (1,)) if device_steps else None,
    }
    for name in ("prefix_page_table", "expand_page_table", "expand_cache_seqlen"):
        if cv[name] == -1:  # a csr-only plan: no FA3 tables
            fields[name] = None
    return fields


def arena_array(arena_np, offset, dtype, shape, strides):
    """The cells a view of (dtype, shape, element strides) at byte `offset` must read, taken
    straight from the arena's bytes."""
    item = np.dtype(dtype).itemsize
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    flat = arena_np[offset: offset + span * item].view(dtype)
    return np.lib.stride_tricks.as_strided(flat, shape, tuple(s * item for s in strides))


def described(view, framework, arena):
    """(dtype name, shape, element strides, byte offset in the arena, values as numpy)."""
    if framework == "torch":
        return (str(view.dtype).replace("torch.", ""), tuple(view.shape), tuple(view.stride()),
                view.data_ptr() - arena.data_ptr(), view.numpy())
    item = view.dtype.itemsize
    return (view.dtype.name, view.shape, tuple(s // item for s in view.strides),
            view.ctypes.data - arena.ctypes.data, view)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("fields", CONFIGS)
def test_every_view_field_matches_the_cpp_step_view(fields, framework):
    if framework == "torch":
        pytest.importorskip("torch")
    cfg = specgraph.DraftConfig(**fields)
    plan = specgraph.make_plan(cfg)
    arena = specgraph.host_arena(plan, framework=framework)
    bufs = specgraph.buffers(plan, arena)
    arena_np = arena.numpy() if framework == "torch" else arena
    rng = random.Random(20261201)
    # Random bytes everywhere: a view one cell short, long or shifted reads different values.
    arena_np[:] = np.frombuffer(rng.randbytes(arena_np.size), dtype=np.uint8)
    checked = 0
    for bucket in plan.buckets:
        for step in range(cfg.num_steps):
            where = f"bucket {bucket}, step {step}"
            view = bufs.view(bucket, step)
            assert isinstance(view, StepView)
            cv = _ffi.step_view_layout(bufs._obj, bucket, step)
            fields_seen = set()
            for name in SCALARS:
                assert getattr(view, name) == cv[name], f"{where}: {name}"
                fields_seen.add(name)
            for name, want in contract(cv, cfg.device_steps).items():
                fields_seen.add(name)
                got = getattr(view, name)
                if want is None:
                    assert got is None and cv[name] == -1, f"{where}: {name}"
                    continue
                dtype, shape, strides = want
                g_dtype, g_shape, g_strides, g_offset, g_values = described(got, framework, arena)
                assert (g_dtype, g_shape) == (dtype, shape), f"{where}: {name}"
                assert g_strides == strides, f"{where}: {name} strides"
                assert g_offset == cv[name], f"{where}: {name} offset"
                cells = arena_array(arena_np, cv[name], dtype, shape, strides)
                assert np.array_equal(g_values, cells, equal_nan=dtype == "float32"), \
                    f"{where}: {name} values"
                checked += 1
            for name, want in csr_contract(plan, cv, bucket, step).items():
                fields_seen.add(name)
                got = getattr(view, name)
                if want is None:
                    assert got is None, f"{where}: {name}"
                    continue
                g_dtype, g_shape, g_strides, g_offset, g_values = described(got, framework, arena)
                assert (g_dtype, g_shape, g_strides, g_offset) == want, f"{where}: {name}"
                assert np.array_equal(g_values, arena_array(arena_np, want[3], *want[:3])), \
                    f"{where}: {name} values"
                checked += 1
            assert fields_seen == set(StepView._fields), \
                f"fields not checked: {set(StepView._fields) - fields_seen}"
    assert checked >= len(plan.buckets) * cfg.num_steps * 11


def test_the_cpp_view_refuses_what_the_python_view_refuses():
    cfg = specgraph.DraftConfig(**CONFIGS[0])
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    small = plan.buckets[0]
    for bucket, step, field in ((cfg.max_batch + 1, 0, "bucket"), (small, cfg.num_steps, "step"),
                                (small, -1, "step")):
        with pytest.raises(specgraph.InvalidArgument) as e:
            bufs.view(bucket, step)
        assert e.value.field == field
        with pytest.raises(specgraph.InvalidArgument) as e:
            _ffi.step_view_layout(bufs._obj, bucket, step)
        assert e.value.field == field
