"""Hostile arenas: the arena's memory changed under the buffers (freed, shrunk, swapped) before
every op, and bad arenas, plans and flags handed to buffers(); registered into
hostile_cases.CASES."""

from __future__ import annotations

from typing import Any, Callable

from hostile_cases import Call, Ctx, _value


def register(_add: Callable[..., None]) -> None:
    """The arena's memory changed under the buffers, or a bad arena handed to buffers()."""
    ops = {
        "initialize_": lambda c: c.sg.initialize_(c.bufs),
        "stage_": lambda c: c.sg.stage_(c.bufs, 2, c.rpi, c.seq, c.ocl),
        "round_setup_": lambda c: c.sg.round_setup_(c.bufs, 2, c.r2t),
        "step_metadata_": lambda c: c.sg.step_metadata_(c.bufs, 2, 1),
        "count_violations_": lambda c: c.sg.count_violations_(c.bufs, c.t([0], "int32")),
        "read_guards": lambda c: c.sg.read_guards(c.bufs),
        "check_guards": lambda c: c.sg.check_guards(c.bufs),
    }
    for op, fn in ops.items():
        for how in ("freed", "shrunk", "replaced"):
            def build(ctx: Ctx, fn: Any = fn, how: str = how) -> Call:
                st = ctx.arena.untyped_storage()
                if how == "replaced":
                    ctx.arena.set_(ctx.torch.zeros(ctx.plan.total_bytes + 512, dtype=ctx.torch.uint8,
                                                   device=ctx.arena.device).untyped_storage(), 256,
                                   (ctx.plan.total_bytes,))
                else:
                    st.resize_(0 if how == "freed" else 100)
                return Call(lambda: fn(ctx), "refuse", "arena")
            _add(f"{op}.arena:{how}", ("torch", "cuda"), build)
    arenas = {
        "None": lambda c: None, "list": lambda c: [0] * c.plan.total_bytes,
        "int32": lambda c: c.t([0] * c.plan.total_bytes, "int32"),
        "short": lambda c: c.arena[: c.plan.total_bytes - 1],
        "misaligned": lambda c: _misaligned(c), "2-D": lambda c: c.arena.reshape(2, -1),
        "strided": lambda c: _strided(c),
        "meta": lambda c: c.torch.empty(c.plan.total_bytes, dtype=c.torch.uint8, device="meta"),
    }
    for label, make in arenas.items():
        fws = ("torch",) if label == "meta" else ("numpy", "torch")
        _add(f"buffers.arena:{label}", fws, lambda c, make=make: Call(
            lambda: c.sg.buffers(c.plan, make(c)), "refuse", "arena"))
    for label, v, e in [("plan=None", None, "refuse"), ("plan=cfg", "cfg", "refuse")]:
        _add(f"buffers.{label}", ("numpy",), lambda c, v=v, e=e: Call(
            lambda: c.sg.buffers(c.cfg if v == "cfg" else v, c.arena), e, "plan"))
    for label, v, e in [("np.True_", ("np", "bool_", True), "ok"), ("1", 1, "refuse"),
                        ("'yes'", "yes", "refuse")]:
        _add(f"buffers.initialize={label}", ("numpy",), lambda c, v=v, e=e: Call(
            lambda: c.sg.buffers(c.plan, c.sg.host_arena(c.plan), initialize=_value(v)) and None,
            e, "initialize"))


def _misaligned(c: Ctx) -> Any:
    if c.fw == "numpy":
        raw = c.np.zeros(c.plan.total_bytes + 512, dtype=c.np.uint8)
        s = (-raw.ctypes.data) % 256 + 8
    else:
        raw = c.torch.zeros(c.plan.total_bytes + 512, dtype=c.torch.uint8)
        s = (-raw.data_ptr()) % 256 + 8
    return raw[s: s + c.plan.total_bytes]


def _strided(c: Ctx) -> Any:
    if c.fw == "numpy":
        raw = c.np.zeros(2 * c.plan.total_bytes + 512, dtype=c.np.uint8)
        s = (-raw.ctypes.data) % 256
    else:
        raw = c.torch.zeros(2 * c.plan.total_bytes + 512, dtype=c.torch.uint8)
        s = (-raw.data_ptr()) % 256
    return raw[s: s + 2 * c.plan.total_bytes: 2]
