"""Hostile (and legitimate-but-unusual) calls on every public entry point of the Python package,
and a runner that executes them in a worker process under an address-space cap.

A case names one call with one argument replaced; it is rebuilt from its name in a fresh setup
(plan, arena, buffers, inputs, one good round staged), so a worker needs only the names. Each
case expects "ok" (it must work and, where a plain-int twin exists, leave the same bytes as it),
"refuse" (InvalidArgument with .field, or TypeError starting with the argument's name) or
"either". The runner snapshots the arena and every caller-owned output around the call.
Outcomes: pass, crash (the worker died), hang, write-on-refusal, unnamed (wrong exception or
no/other field), accepted (a hostile value went through), refused-legit (a legal call refused).

hostile_runner.py runs them (python hostile_runner.py prints a tally).
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

BIG = [2**31, 2**32 + 3, 2**63, 2**64, -2**63 - 1, 10**30]
WRONG_TYPES = [2.0, 2.5, "2", None, True, [2], b"2"]
CONFIGS = {
    "base": dict(max_batch=4, topk=2, num_steps=3, page_size=4, max_context_len=64, pool_rows=8,
                 kv_slots=1024, buckets=(2, 4)),
    "depth": dict(max_batch=4, topk=2, num_steps=3, page_size=4, max_context_len=64, pool_rows=8,
                  kv_slots=1024, buckets=(2, 4), device_steps=True, device_depth=True),
    "sparse": dict(max_batch=4, topk=2, num_steps=3, page_size=4, max_context_len=64,
                   pool_rows=8, kv_slots=1024, buckets=(2, 4), sparse=("sparse",)),
}


class Case(NamedTuple):
    name: str
    fw: str  # "numpy", "torch" (CPU) or "cuda"
    cfg: str
    build: Callable[["Ctx"], "Call"]


class Call(NamedTuple):
    fn: Callable[[], Any]
    expect: str  # "ok", "refuse", "either"
    field: str  # the argument a refusal must name
    outputs: Tuple[Any, ...] = ()  # caller-owned arrays that must not change on refusal
    twin: Optional[Callable[["Ctx"], Callable[[], Any]]] = None  # the plain-int equivalent


_PLANS: Dict[str, Any] = {}


class Ctx:
    """A fresh plan, arena and buffers on one framework, one good round staged."""

    def __init__(self, fw: str, cfg: str, mutable_arena: bool = False) -> None:
        import numpy as np
        import specgraph

        self.np, self.sg, self.fw = np, specgraph, fw
        if cfg not in _PLANS:  # plans are immutable: one per configuration and process
            fields = dict(CONFIGS[cfg])
            if "sparse" in fields:
                fields["sparse"] = specgraph.SparseConfig(heads=2, vertical_size=(4, 2),
                                                          slash_size=(3, 5), max_keys=256)
            _PLANS[cfg] = specgraph.make_plan(specgraph.DraftConfig(**fields))
        self.plan = _PLANS[cfg]
        self.cfg = self.plan.config
        n = self.plan.total_bytes
        if fw == "numpy":
            self.arena = specgraph.host_arena(self.plan)
        else:
            import torch

            self.torch = torch
            dev = "cuda" if fw == "cuda" else "cpu"
            raw = torch.zeros(n + 256, dtype=torch.uint8, device=dev)  # resizable storage
            start = (-raw.data_ptr()) % 256
            self.arena = raw[start: start + n]
        self.bufs = specgraph.buffers(self.plan, self.arena)
        c = self.cfg
        if "inputs" not in _PLANS:
            rng = random.Random(7)
            _PLANS["inputs"] = (
                [rng.randrange(c.kv_slots) for _ in range(2 * c.topk * c.num_steps)],
                [[rng.randrange(c.kv_slots) for _ in range(c.max_context_len)]
                 for _ in range(c.pool_rows)])
        slots, table = _PLANS["inputs"]
        self.rpi = self.t([1, 3], "int32")
        self.seq = self.t([9, 13], "int32")
        self.ocl = self.t(slots, "int64")
        self.r2t = self.t(table, "int32")
        specgraph.stage_(self.bufs, 2, self.rpi, self.seq, self.ocl)

    def t(self, values: Any, dtype: str) -> Any:
        """An array of this framework (torch dtypes by name, e.g. "bfloat16")."""
        if self.fw == "numpy":
            return self.np.array(values, dtype=dtype)
        dev = "cuda" if self.fw == "cuda" else "cpu"
        return self.torch.tensor(values, dtype=getattr(self.torch, dtype), device=dev)

    def snapshot(self, x: Any) -> Optional[bytes]:
        try:
            if type(x).__module__.startswith("torch"):
                st = x.untyped_storage()
                if not st.data_ptr() or x.data_ptr() + x.nbytes > st.data_ptr() + st.nbytes():
                    return None  # freed or shrunk under the tensor: unreadable
                return x.detach().cpu().contiguous().view(-1).view(self.torch.uint8).numpy().tobytes()
            return self.np.ascontiguousarray(x).tobytes()
        except Exception:  # freed storage: nothing to compare
            return None


# ---- the cases ------------------------------------------------------------------------------
CASES: List[Case] = []
_NAMES: set = set()


def _add(name: str, fws: Tuple[str, ...], build: Callable[[Ctx], Call], cfg: str = "base") -> None:
    for fw in fws:
        if f"{name}@{fw}" not in _NAMES:  # a value listed twice is one case
            _NAMES.add(f"{name}@{fw}")
            CASES.append(Case(f"{name}@{fw}", fw, cfg, build))


def _scalar_variants(good: List[Any], bad_values: List[Any], int64: bool = False,
                     optional: bool = False) -> List[Tuple[str, Any, str]]:
    """(label, value, expect) for one int argument: numpy twins of the good values must work.
    int64: values that fit int64 may be legal (the extension checks the range); optional: None
    is legal."""
    out = []
    for g in good:
        out.append((f"np.int64({g})", ("np", "int64", g), "ok"))
        if -2**31 <= g < 2**31:
            out.append((f"np.int32({g})", ("np", "int32", g), "ok"))
    for b in bad_values + BIG + WRONG_TYPES + [("np", "float64", 2.0), ("np", "bool_", True)]:
        legal = (int64 and isinstance(b, int) and not isinstance(b, bool) and
                 -2**63 <= b < 2**63) or (optional and b is None)
        out.append((repr(b), b, "either" if legal else "refuse"))
    out.append(("np.uint64(2**64-1)", ("np", "uint64", 2**64 - 1), "refuse"))
    return out


def _value(v: Any) -> Any:
    if isinstance(v, tuple) and len(v) == 3 and v[0] == "np":
        import numpy as np

        return getattr(np, v[1])(v[2])
    return v


def _plain(v: Any) -> Any:
    return v[2] if isinstance(v, tuple) and len(v) == 3 and v[0] == "np" else v


ALL = ("numpy", "torch", "cuda")


def _scalar_op(op: str, arg: str, good: List[Any], bad: List[Any],
               call: Callable[[Ctx, Any], Any], fws: Tuple[str, ...] = ALL, cfg: str = "base",
               field: Optional[str] = None, int64: bool = False, optional: bool = False,
               setup: Optional[Callable[[Ctx], Any]] = None) -> None:
    """setup(ctx), when given, runs before the call (and before its twin), outside the snapshot:
    the round's earlier ops, so that a legal call is made in the round's order."""
    def prepared(c: Ctx) -> Ctx:
        if setup is not None:
            setup(c)
        return c

    for label, v, expect in _scalar_variants(good, bad, int64, optional):
        def twin_of(c: Ctx, v: Any = v) -> Callable[[], Any]:
            d = prepared(c)
            return lambda: call(d, _plain(v))

        def build(ctx: Ctx, v: Any = v, expect: str = expect,
                  twin_of: Callable[[Ctx], Callable[[], Any]] = twin_of) -> Call:
            prepared(ctx)
            twin = twin_of if expect == "ok" else None
            return Call(lambda: call(ctx, _value(v)), expect, field or arg, twin=twin)
        _add(f"{op}.{arg}={label}", fws, build, cfg)


def _tensor_variants(ctx: Ctx, good_values: List[Any], dtype: str) -> Dict[str, Tuple[Any, str]]:
    """Hostile versions of one integer tensor argument: label -> (value, expect)."""
    np = ctx.np
    n = len(good_values)
    flat = np.array(good_values).reshape(-1).tolist()
    shape = np.array(good_values).shape
    like = lambda vals, dt: ctx.t(np.array(vals).reshape(shape).tolist(), dt)
    out: Dict[str, Tuple[Any, str]] = {
        "float32": (like([float(x) + 0.5 for x in flat], "float32"), "refuse"),
        "float64": (like([float(x) for x in flat], "float64"), "refuse"),
        "bool": (like([True] * len(flat), "bool"), "refuse"),
        "int16": (like(flat, "int16"), "refuse"),
        "uint8": (like([x % 256 for x in flat], "uint8"), "refuse"),
        "short": (ctx.t(good_values[:0], dtype), "refuse"),
        "None": (None, "refuse"), "list": (list(good_values), "refuse"), "int": (3, "refuse"),
        "str": ("x", "refuse"),
        "strided": (ctx.t([x for x in good_values for _ in (0, 1)], dtype)[::2],
                    "refuse" if n > 1 else "either"),
    }
    if ctx.fw == "numpy":
        ro = np.array(good_values, dtype=dtype)
        ro.flags.writeable = False
        out["readonly"] = (ro, "either")
    else:
        out["bfloat16"] = (ctx.t([1.0] * n, "bfloat16"), "refuse")
        out["meta"] = (ctx.torch.zeros(shape, dtype=getattr(ctx.torch, dtype), device="meta"),
                       "refuse")
        out["numpy"] = (np.array(good_values, dtype=dtype), "refuse")
    return out


def _tensor_op(op: str, arg: str, good: Callable[[Ctx], List[Any]], dtype: str,
               call: Callable[[Ctx, Any], Any], fws: Tuple[str, ...] = ALL, cfg: str = "base",
               output: bool = False, extra: Optional[Dict[str, Tuple[Any, str]]] = None) -> None:
    labels = ["float32", "float64", "bool", "int16", "uint8", "short", "None", "list", "int",
              "str", "strided", "readonly", "bfloat16", "meta", "numpy"] + list(extra or {})
    for label in labels:
        def build(ctx: Ctx, label: str = label) -> Call:
            variants = _tensor_variants(ctx, good(ctx), dtype)
            for k, (f, e) in (extra or {}).items():
                variants[k] = (f(ctx), e)
            if label not in variants:
                return Call(lambda: None, "ok", arg)  # not applicable on this framework
            v, expect = variants[label]
            outs = (v,) if output and v is not None and hasattr(v, "shape") else ()
            return Call(lambda: call(ctx, v), expect, arg, outputs=outs)
        _add(f"{op}.{arg}:{label}", fws, build, cfg)


def _register() -> None:
    sg_stage = lambda c, **kw: c.sg.stage_(c.bufs, kw.get("bs", 2), kw.get("rpi", c.rpi),
                                           kw.get("seq", c.seq), kw.get("ocl", c.ocl),
                                           kw.get("md", 0), kw.get("mc", float("-inf")))
    _scalar_op("stage_", "bs", [0, 1, 2, 4], [-1, 5], lambda c, v: c.sg.stage_(
        c.bufs, v, c.t([1, 3, 0, 2], "int32"), c.t([9, 13, 1, 64], "int32"),
        c.t(list(range(4 * 6)), "int64")))
    _scalar_op("stage_", "max_depth", [0, 3], [-1, 4], lambda c, v: sg_stage(c, md=v), cfg="depth")
    for label, v, expect in [("nan", float("nan"), "refuse"), ("str", "x", "refuse"),
                             ("None", None, "refuse"), ("list", [0.5], "refuse"),
                             ("np.float32", ("np", "float32", 0.5), "ok"),
                             ("np.int64", ("np", "int64", 1), "ok"), ("inf", math.inf, "ok"),
                             ("1e300", 1e300, "ok"), ("bool", True, "refuse")]:
        _add(f"stage_.min_confidence={label}", ALL, lambda c, v=v, e=expect: Call(
            lambda: sg_stage(c, mc=_value(v)), e, "min_confidence",
            twin=(lambda d: lambda: sg_stage(d, mc=float(_plain(v)))) if e == "ok" else None),
            "depth")
    _tensor_op("stage_", "req_pool_indices", lambda c: [1, 3], "int32",
               lambda c, v: sg_stage(c, rpi=v),
               extra={"int64": (lambda c: c.t([1, 3], "int64"), "ok"),
                      "2**32+1": (lambda c: c.t([2**32 + 1, 3], "int64"), "refuse"),
                      "negative": (lambda c: c.t([-1, 3], "int32"), "either")})
    _tensor_op("stage_", "seq_lens", lambda c: [9, 13], "int32", lambda c, v: sg_stage(c, seq=v),
               extra={"int64": (lambda c: c.t([9, 13], "int64"), "ok"),
                      "max_context_len": (lambda c: c.t([64, 64], "int32"), "ok"),
                      "2**32+3": (lambda c: c.t([2**32 + 3, 13], "int64"), "either"),
                      "2-D": (lambda c: c.t([[9], [13]], "int32"), "either")})
    _tensor_op("stage_", "out_cache_loc", lambda c: list(range(12)), "int64",
               lambda c, v: sg_stage(c, ocl=v),
               extra={"int32": (lambda c: c.t(list(range(12)), "int32"), "ok")})  # int32 or int64
    rs = lambda c, b, r=Ctx: c.sg.round_setup_(c.bufs, b, c.r2t if r is Ctx else r)
    _scalar_op("round_setup_", "bucket", [2, 4], [0, 1, 3, 5, -2], lambda c, v: rs(c, v))
    _tensor_op("round_setup_", "req_to_token", lambda c: [[0] * 64] * 8, "int32",
               lambda c, v: rs(c, 2, v),
               extra={"1-D": (lambda c: c.t([0] * 64 * 8, "int32"), "refuse"),
                      "narrow": (lambda c: c.t([[0] * 63] * 8, "int32"), "refuse"),
                      "int64": (lambda c: c.t([[0] * 64] * 8, "int64"), "refuse")})
    # The step ops run after the round's setup (docs/metadata.md section 11: out of order they
    # are refused by name, the op named rather than the argument).
    set_up = lambda c: rs(c, 2)
    _scalar_op("step_metadata_", "bucket", [2, 4], [0, 3, 5],
               lambda c, v: c.sg.step_metadata_(c.bufs, v, 0), setup=set_up)
    _scalar_op("step_metadata_", "step", [0, 2], [-1, 3],
               lambda c, v: c.sg.step_metadata_(c.bufs, 2, v), setup=set_up)
    _scalar_op("step_metadata_device_", "bucket", [2, 4], [0, 3, 5],
               lambda c, v: c.sg.step_metadata_device_(c.bufs, v), cfg="depth", setup=set_up)
    _scalar_op("check_guards", "bucket", [2, 4], [-1, 3, 5],
               lambda c, v: c.sg.check_guards(c.bufs, v), optional=True)
    _scalar_op("continue_condition_host", "bucket", [2, 4], [0, 3, 5], lambda c, v: (
        c.sg.continue_condition_host(c.bufs, v, c.t([7], "int32"))), fws=("numpy", "torch"),
        cfg="depth")
    _tensor_op("continue_condition_host", "flag", lambda c: [7], "int32",
               lambda c, v: c.sg.continue_condition_host(c.bufs, 2, v), fws=("numpy", "torch"),
               cfg="depth", output=True)
    _tensor_op("count_violations_", "out", lambda c: [7], "int32",
               lambda c, v: c.sg.count_violations_(c.bufs, v), output=True,
               extra={"int64": (lambda c: c.t([7], "int64"), "refuse")})
    _register_views_and_config()
    _register_metadata()


def _register_views_and_config() -> None:
    _scalar_op("view", "bucket", [2, 4], [0, 1, 3, 5], lambda c, v: c.bufs.view(v, 0)._replace(
        **{k: None for k in ("req_pool_index", "seq_len", "out_cache_loc", "real_batch",
                             "last_page_len", "prefix_seqlen", "prefix_page_table",
                             "cu_seqlens_q", "expand_page_table", "expand_cache_seqlen",
                             "confidence", "device_step")}), fws=("numpy", "torch"))
    _scalar_op("view", "step", [0, 2], [-1, 3], lambda c, v: tuple(c.bufs.view(2, v)[:6]),
               fws=("numpy", "torch"))
    _scalar_op("expand_page_table", "step", [0, 2], [-1, 3],
               lambda c, v: c.bufs.expand_page_table(v).shape, fws=("numpy",))
    _scalar_op("bucket_for", "bs", [1, 3, 4], [0, -1, 5],
               lambda c, v: c.plan.bucket_for(v), fws=("numpy",), field="batch")
    _scalar_op("default_buckets", "max_batch", [1, 4], [0, -1, 2**21],
               lambda c, v: c.sg.default_buckets(v), fws=("numpy",))
    _scalar_op("sparse_stages", "seq_len", [1, 100], [0, -1], lambda c, v: c.sg.sparse_stages(v, 32),
               fws=("numpy",))
    _scalar_op("sparse_stage_views", "kind", [0, 2], [-1, 3], lambda c, v: _sparse_views(c, v),
               fws=("numpy",), field="kind")
    base = CONFIGS["base"]
    for f in ("max_batch", "topk", "num_steps", "page_size", "max_context_len", "pool_rows",
              "kv_slots"):
        _scalar_op("DraftConfig", f, [base[f]], [0, -1], lambda c, v, f=f: _cfg(c, **{f: v}),
                   fws=("numpy",), int64=f == "kv_slots")
    for label, v, expect, field in [
            ("buckets=np.array", lambda np: np.array([2, 4]), "ok", "buckets"),
            ("buckets=np.scalars", lambda np: (np.int32(2), np.int64(4)), "ok", "buckets"),
            ("buckets=[2**63]", lambda np: [2**63], "refuse", "buckets[0]"),
            ("buckets=[2.0,4]", lambda np: [2.0, 4], "refuse", "buckets[0]"),
            ("buckets='24'", lambda np: "24", "refuse", "buckets"),
            ("buckets=[4,2]", lambda np: [4, 2], "refuse", "buckets"),
            ("checked=np.True_", lambda np: np.True_, "ok", "checked"),
            ("checked=1", lambda np: 1, "refuse", "checked"),
            ("sparse=str", lambda np: "x", "refuse", "sparse")]:
        key = label.split("=")[0]
        _add(f"DraftConfig.{label}", ("numpy",), lambda c, v=v, e=expect, f=field, k=key: Call(
            lambda: _cfg(c, **{k: v(c.np)}), e, f))
    for label, kw, expect, field in [
            ("heads=0", dict(heads=0, vertical_size=(4,), slash_size=(4,), max_keys=64),
             "refuse", "sparse.heads"),
            ("heads=-1", dict(heads=-1, vertical_size=(4,), slash_size=(4,), max_keys=64),
             "refuse", "sparse.heads"),
            ("heads=2**63", dict(heads=2**63, vertical_size=(4,), slash_size=(4,), max_keys=64),
             "refuse", "sparse.heads"),
            ("sizes=short", dict(heads=2, vertical_size=(4,), slash_size=(4, 4), max_keys=64),
             "refuse", "sparse.vertical_size"),
            ("max_keys=np.int64", dict(heads=1, vertical_size=(4,), slash_size=(4,),
                                       max_keys=("np", "int64", 64)), "ok", "sparse"),
            ("vertical=np.array", dict(heads=1, vertical_size="arr", slash_size=(4,),
                                       max_keys=64), "ok", "sparse")]:
        _add(f"SparseConfig.{label}", ("numpy",), lambda c, kw=kw, e=expect, f=field: Call(
            lambda: _cfg(c, sparse=_sparse_cfg(c, kw)), e, f))


def _cfg(c: Ctx, **kw: Any) -> Any:
    return c.sg.make_plan(c.sg.DraftConfig(**{**CONFIGS["base"], **kw})).total_bytes


def _sparse_cfg(c: Ctx, kw: Dict[str, Any]) -> Any:
    kw = {k: (c.np.array([4]) if v == "arr" else _value(v)) for k, v in kw.items()}
    return c.sg.SparseConfig(**kw)


def _sparse_views(c: Ctx, kind: Any) -> Any:
    sp = c.sg.SparseConfig(heads=2, vertical_size=(4, 2), slash_size=(3, 5), max_keys=256)
    plan = c.sg.make_plan(c.sg.DraftConfig(**{**CONFIGS["base"], "sparse": sp}))
    bufs = c.sg.buffers(plan, c.sg.host_arena(plan))
    return tuple(v.shape for v in bufs.sparse_stage_views(kind))


def _register_metadata() -> None:
    import hostile_arena
    from hostile_metadata import register

    hostile_arena.register(_add)
    register(_add, _scalar_op, _value, _plain)


_register()
BY_NAME = {c.name: c for c in CASES}
