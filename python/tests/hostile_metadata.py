"""Hostile cases of specgraph.metadata (host kernels at function level) and of DraftGraphs
(torch CPU arenas); registered into hostile_cases.CASES."""

from __future__ import annotations

from typing import Any, Callable

BASE = dict(topk=2, page_size=4, decode_length=2)  # batch 2: rows 4, cache_loc [4, 3]


def _expand(c: Any, **kw: Any) -> Any:
    import specgraph.metadata as md

    np = c.np
    args = dict(cache_loc=np.arange(12, dtype=np.int64).reshape(4, 3) * 5,
                last_page_len=np.array([1, 3], dtype=np.int32), **BASE)
    args.update(kw)
    r = md.expand_page_table(args.pop("cache_loc"), args.pop("last_page_len"), **args)
    return (np.asarray(r.page_table).tolist(), np.asarray(r.cache_seqlen).tolist(),
            [tuple(v) for v in r.violations])


def _fallback(c: Any, seq_len: Any = 100, max_count: Any = 8, capacity: Any = 8) -> Any:
    import specgraph.metadata as md

    r = md.sparse_fallback(seq_len, max_count, capacity)
    return r.indices.tolist(), [tuple(v) for v in r.violations]


def register(add: Callable[..., None], scalar_op: Callable[..., None], value: Callable, plain:
             Callable) -> None:
    from hostile_cases import Call

    np_only = ("numpy",)
    for arg, good, bad, i64 in [("topk", [2], [0, -1, 2**30], False),
                                ("page_size", [4, 8], [0, -4], False),
                                ("decode_length", [1, 3], [0, 2**40], False),
                                ("slots_read", [1, 3], [0, 4], False),
                                ("capacity", [3, 5], [0, 2**40], False),
                                ("kv_slots", [100, 2**62], [0, -1], True)]:
        scalar_op("expand_page_table", arg, good, bad,
                  lambda c, v, arg=arg: _expand(c, **{arg: v}), fws=np_only, int64=i64,
                  optional=arg in ("slots_read", "capacity"))
    arrays = {
        "last_page_len=int64": (lambda np: dict(last_page_len=np.array([1, 3], np.int64)), "ok",
                                "last_page_len"),
        "last_page_len=list": (lambda np: dict(last_page_len=[1, 3]), "ok", "last_page_len"),
        "last_page_len=2**32+3": (lambda np: dict(last_page_len=np.array([2**32 + 3, 1])),
                                  "refuse", "last_page_len"),
        "last_page_len=float": (lambda np: dict(last_page_len=np.array([2.7, 1.0])), "refuse",
                                "last_page_len"),
        "last_page_len=bool": (lambda np: dict(last_page_len=np.array([True, False])), "refuse",
                               "last_page_len"),
        "last_page_len=str": (lambda np: dict(last_page_len="ab"), "refuse", "last_page_len"),
        "last_page_len=None": (lambda np: dict(last_page_len=None), "refuse", "last_page_len"),
        "last_page_len=2-D": (lambda np: dict(last_page_len=np.array([[1], [3]], np.int32)),
                              "either", "last_page_len"),
        "cache_loc=float": (lambda np: dict(cache_loc=np.ones((4, 3)) * 1.5), "refuse",
                            "cache_loc"),
        "cache_loc=uint64": (lambda np: dict(cache_loc=np.full((4, 3), 2**63, np.uint64)),
                             "refuse", "cache_loc"),
        "cache_loc=int32": (lambda np: dict(cache_loc=np.arange(12, dtype=np.int32)
                                            .reshape(4, 3) * 5), "ok", "cache_loc"),
        "cache_loc=rows": (lambda np: dict(cache_loc=np.zeros((3, 4), np.int64)), "refuse",
                           "cache_loc"),
        "cache_loc=None": (lambda np: dict(cache_loc=None), "refuse", "cache_loc"),
        "cache_loc=3-D": (lambda np: dict(cache_loc=np.zeros((2, 2, 3), np.int64)), "refuse",
                          "cache_loc"),
    }
    for label, (kw, expect, field) in arrays.items():
        add(f"expand_page_table.{label}", np_only, lambda c, kw=kw, e=expect, f=field: Call(
            lambda: _expand(c, **kw(c.np)), e, f))
    outs = {
        "page_table=ok": (lambda np: np.full((4, 6), -7, np.int32), "ok"),
        "page_table=rows": (lambda np: np.full((3, 6), -7, np.int32), "refuse"),
        "page_table=narrow": (lambda np: np.full((4, 2), -7, np.int32), "refuse"),
        "page_table=int64": (lambda np: np.full((4, 6), -7, np.int64), "refuse"),
        "page_table=strided": (lambda np: np.full((4, 12), -7, np.int32)[:, ::2], "refuse"),
        "page_table=readonly": (lambda np: _readonly(np.full((4, 6), -7, np.int32)), "refuse"),
        "page_table=list": (lambda np: [[0] * 6] * 4, "refuse"),
        "cache_seqlen=short": (lambda np: np.full(3, -7, np.int32), "refuse"),
        "cache_seqlen=float": (lambda np: np.full(4, -7, np.float32), "refuse"),
        "cache_seqlen=readonly": (lambda np: _readonly(np.full(4, -7, np.int32)), "refuse"),
    }
    for label, (make, expect) in outs.items():
        key = label.split("=")[0]

        def build(c: Any, make: Any = make, expect: str = expect, key: str = key) -> Any:
            out = make(c.np)
            return Call(lambda: _expand(c, **{key: out}), expect, key,
                        outputs=(out,) if hasattr(out, "shape") else ())
        add(f"expand_page_table.{label}", np_only, build)
    for arg, good, bad in [("seq_len", [0, 100], [-1, 2**31, 2**40]),
                           ("max_count", [0, 8], [-1, 2**30, 2**40]),
                           ("capacity", [1, 8], [0, 2**30, 2**40])]:
        scalar_op("sparse_fallback", arg, good, bad,
                  lambda c, v, arg=arg: _fallback(c, **{arg: v}), fws=np_only)
    _register_draft_graphs(add, scalar_op)
    _register_remaining(add)


def _register_remaining(add: Callable[..., None]) -> None:
    """sparse_stage_, round_graph and host_arena."""
    from hostile_cases import ALL, Call

    def stage_call(c: Any, how: str) -> Any:
        st = c.sg.sparse_stages(100, 32)[1]
        v = {"tuple": tuple(st), "np-fields": st._replace(prev=c.np.int64(st.prev),
                                                          end=c.np.int32(st.end)),
             "None": None, "int": 3, "short": tuple(st)[:4], "kind=x": st._replace(kind="x"),
             "kind=5": st._replace(kind=5), "kind=-1": st._replace(kind=-1),
             "prev=2**63": st._replace(prev=2**63), "prev=-1": st._replace(prev=-1),
             "end=2**40": st._replace(end=2**40), "prev='0'": st._replace(prev="0"),
             "chunk_len=2.0": st._replace(chunk_len=2.0), "dict": st._asdict()}[how]
        return lambda: c.sg.sparse_stage_(c.bufs, v)
    for how, expect, field in [("tuple", "ok", "stage"), ("np-fields", "ok", "stage"),
                               ("None", "refuse", "stage"), ("int", "refuse", "stage"),
                               ("short", "refuse", "stage"), ("kind=x", "refuse", "kind"),
                               ("kind=5", "refuse", "kind"), ("kind=-1", "refuse", "kind"),
                               ("prev=2**63", "refuse", "stage.prev"),
                               ("prev=-1", "refuse", "stage.prev"), ("end=2**40", "refuse", "end"),
                               ("prev='0'", "refuse", "stage.prev"),
                               ("chunk_len=2.0", "refuse", "stage.chunk_len"),
                               ("dict", "refuse", "stage")]:
        add(f"sparse_stage_.stage:{how}", ALL, lambda c, how=how, e=expect, f=field: Call(
            stage_call(c, how), e, f,
            twin=(lambda d: stage_call(d, "tuple")) if e == "ok" else None), "sparse")
    for label, body, field in [("cpu", 12345, "arena"), ("str", "x", "step_body"),
                               ("None", None, "step_body")]:
        add(f"round_graph.step_body={label}", ("numpy", "torch"), lambda c, b=body, f=field: Call(
            lambda: c.sg.round_graph(c.bufs, 2, b), "refuse", f), "depth")
    for label, plan, fw, field in [("plan=None", None, "numpy", "plan"),
                                   ("plan=cfg", "cfg", "numpy", "plan"),
                                   ("framework=jax", "plan", "jax", "framework"),
                                   ("framework=None", "plan", None, "framework")]:
        add(f"host_arena.{label}", ("numpy",), lambda c, p=plan, fw=fw, f=field: Call(
            lambda: c.sg.host_arena({"plan": c.plan, "cfg": c.cfg}.get(p), framework=fw),
            "refuse", f))


def _readonly(a: Any) -> Any:
    a.flags.writeable = False
    return a


def _graphs(c: Any, **kw: Any) -> Any:
    from specgraph.torch import DraftGraphs

    args = dict(req_to_token=c.r2t)
    args.update(kw)
    forward = args.pop("forward", lambda view: None)
    return DraftGraphs(c.bufs, forward, **args)


def _stage_args(c: Any) -> Any:
    return c.t([1, 3, 0, 2], "int32"), c.t([9, 13, 5, 7], "int32"), c.t(list(range(24)), "int64")


def _captured(c: Any) -> Any:
    g = _graphs(c)
    g.capture()
    return g


def _staged(c: Any, bs: Any = 2) -> Any:
    g = _captured(c)
    g.stage_(bs, *_stage_args(c))
    return g


def _register_draft_graphs(add: Callable[..., None], scalar_op: Callable[..., None]) -> None:
    from hostile_cases import Call, _plain, _scalar_variants, _value

    tor = ("torch",)
    for label, kw, expect, field in [
            ("forward=None", dict(forward=None), "refuse", "forward"),
            ("req_to_token=list", dict(req_to_token=[[0]]), "refuse", "req_to_token"),
            ("buckets=[3]", dict(buckets=[3]), "refuse", "buckets"),
            ("buckets=['2']", dict(buckets=["2"]), "refuse", "buckets"),
            ("buckets=[np.int64(2)]", dict(buckets="np2"), "ok", "buckets"),
            ("warmups=-1", dict(warmups=-1), "refuse", "warmups"),
            ("warmups='2'", dict(warmups="2"), "refuse", "warmups"),
            ("checked='maybe'", dict(checked="maybe"), "refuse", "checked"),
            ("checked=True", dict(checked=True), "refuse", "checked"),
            ("round_graphs='yes'", dict(round_graphs="yes"), "refuse", "round_graphs")]:
        def build(c: Any, kw: Any = kw, expect: str = expect, field: str = field) -> Any:
            if kw.get("buckets") == "np2":
                kw = dict(buckets=[c.np.int64(2)])
            return Call(lambda: _graphs(c, **kw) and None, expect, field)
        add(f"DraftGraphs.{label}", tor, build)
    add("DraftGraphs.bufs=numpy", tor, lambda c: Call(
        lambda: __import__("specgraph.torch").torch.DraftGraphs(
            c.sg.buffers(c.plan, c.sg.host_arena(c.plan)), lambda v: None, req_to_token=c.r2t),
        "refuse", "bufs"))
    for label, v, expect in _scalar_variants([0, 1, 4], [-1, 5]):
        def build_stage(c: Any, v: Any = v, expect: str = expect) -> Any:
            g = _captured(c)  # the setup (it may write the arena); the call is the staging alone
            twin = (lambda d: (lambda: _captured(d).stage_(_plain(v), *_stage_args(d)))) \
                if expect == "ok" else None
            return Call(lambda: g.stage_(_value(v), *_stage_args(c)), expect, "bs", twin=twin)
        add(f"DraftGraphs.stage_.bs={label}", tor, build_stage)
    for label, v, expect in _scalar_variants([1, 3], [0, -1, 4], optional=True):
        def build(c: Any, v: Any = v, expect: str = expect) -> Any:
            g = _staged(c)
            twin = (lambda d: (lambda: _staged(d).run_round(_plain(v)))) if expect == "ok" else None
            return Call(lambda: g.run_round(_value(v)), expect, "depth", twin=twin)
        add(f"DraftGraphs.run_round.depth={label}", tor, build)
