"""Seeded random fuzzing of the ops' Python surface (the stand-in for Hypothesis, which the CI
venv does not have): random sequences of ops on one arena, each argument either good or drawn
from hostile pools (ints at and past every limit, beyond int64, numpy scalars of every width,
floats, bools, strings, arrays of the wrong dtype, length, stride or framework). Oracles:

* a refused call raised InvalidArgument with a field naming one of the op's arguments, or a
  TypeError starting with one, and left the arena and every caller-owned output unchanged;
* an accepted stage_ wrote exactly the staged inputs reference.py computes (docs/metadata.md
  section 4), whatever int widths and numpy scalars carried them;
* nothing else escapes (any other exception is a failure).

    python hostile_fuzz.py --seed S --calls N [--fw numpy|torch]   # prints a JSON summary
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import Any, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reference as ref  # noqa: E402
from hostile_cases import CONFIGS, Ctx  # noqa: E402

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


class Fuzz:
    def __init__(self, fw: str, seed: int) -> None:
        self.ctx = Ctx(fw, "base")
        self.rng = random.Random(seed)
        self.np = self.ctx.np
        self.failures: List[Dict[str, Any]] = []
        self.tally = {"accepted": 0, "refused": 0, "verified": 0}

    # ---- values -------------------------------------------------------------------------------
    def int_value(self, good: int, limit: int) -> Tuple[Any, bool]:
        """A value for an int argument and whether it equals `good` exactly (as an int)."""
        r = self.rng
        choice = r.random()
        if choice < 0.6:
            return self.wrap(good), True
        if choice < 0.8:
            v = r.choice([-1, 0, limit, limit + 1, 2**31, 2**32 + good, 2**63, -2**63 - 1,
                          2**64 + good, r.randrange(-2**70, 2**70), r.randrange(-5, limit + 5)])
            return self.wrap(v), v == good
        return r.choice([float(good), good + 0.5, str(good), None, True, [good], b"1",
                         self.np.float32(good), self.np.bool_(True)]), False

    def wrap(self, v: int) -> Any:
        """v as a Python int or as a numpy integer scalar that holds it exactly."""
        if self.rng.random() < 0.5:
            return v
        fits = [d for d in INT_DTYPES if self.np.iinfo(d).min <= v <= self.np.iinfo(d).max]
        return getattr(self.np, self.rng.choice(fits))(v) if fits else v

    def tensor(self, values: List[int], dtype: str) -> Tuple[Any, bool]:
        c, r = self.ctx, self.rng
        if r.random() < 0.8:
            alt = "int64" if dtype != "int64" and r.random() < 0.5 else dtype
            return c.t(values, alt), True
        kind = r.choice(["float32", "bool", "int16", "short", "list", "none", "strided"])
        if kind == "short":
            return c.t(values[: r.randrange(len(values))], dtype), False
        if kind == "list":
            return list(values), False
        if kind == "none":
            return None, False
        if kind == "strided":
            return c.t([v for v in values for _ in (0, 1)], dtype)[::2], len(values) == 1
        return c.t((self.np.array(values) % 2).tolist(), kind), False

    # ---- one call -----------------------------------------------------------------------------
    def call(self, fields: Tuple[str, ...], fn: Any, outputs: Tuple[Any, ...] = ()) -> bool:
        from specgraph import InvalidArgument

        watched = [self.ctx.arena, *outputs]
        before = [self.ctx.snapshot(x) for x in watched]
        try:
            fn()
        except (InvalidArgument, TypeError) as e:
            self.tally["refused"] += 1
            f = getattr(e, "field", None) if isinstance(e, InvalidArgument) else str(e)
            named = bool(f) and any(str(f).startswith(x) for x in fields) and \
                str(e).startswith(str(f).split(":")[0])
            if not named:
                self.fail("unnamed", fields, e)
            if [self.ctx.snapshot(x) for x in watched] != before:
                self.fail("write-on-refusal", fields, e)
            return False
        except Exception as e:  # noqa: BLE001
            self.fail("wrong exception", fields, e)
            return False
        self.tally["accepted"] += 1
        return True

    def fail(self, what: str, fields: Tuple[str, ...], e: BaseException) -> None:
        self.failures.append({"what": what, "op": fields, "error": f"{type(e).__name__}: {e}"[:200]})

    # ---- the ops ------------------------------------------------------------------------------
    def stage(self) -> None:
        c, cfg, sg = self.ctx, self.ctx.cfg, self.ctx.sg
        bs = self.rng.randint(1, cfg.max_batch)
        pool = [self.rng.randrange(cfg.pool_rows) for _ in range(bs)]
        seq = [self.rng.randint(1, cfg.max_context_len) for _ in range(bs)]
        slots = [self.rng.randrange(cfg.kv_slots) for _ in range(bs * cfg.topk * cfg.num_steps)]
        bs_v, bs_ok = self.int_value(bs, cfg.max_batch)
        p_v, p_ok = self.tensor(pool, "int32")
        s_v, s_ok = self.tensor(seq, "int32")
        o_v, o_ok = self.tensor(slots, "int64")
        got = []
        accepted = self.call(("bs", "req_pool_indices", "seq_lens", "out_cache_loc"),
                             lambda: got.append(sg.stage_(c.bufs, bs_v, p_v, s_v, o_v)))
        if accepted and bs_ok and p_ok and s_ok and o_ok:
            bucket = c.plan.bucket_for(bs)
            want = ref.staged(cfg, bucket, ref.Round(bs, pool, seq, slots))
            have = ([int(x) for x in c.bufs.req_pool_index[:bucket].tolist()],
                    [int(x) for x in c.bufs.seq_len[:bucket].tolist()],
                    [int(x) for x in c.bufs.out_cache_loc[:bucket].reshape(-1).tolist()])
            self.tally["verified"] += 1
            if got != [bucket] or have != tuple(want) or int(c.bufs.real_batch[0]) != bs:
                self.failures.append({"what": "staged wrong", "op": ("stage_",), "error": str(bs)})

    def ops(self) -> None:
        c, sg, r = self.ctx, self.ctx.sg, self.rng
        bucket, _ = self.int_value(r.choice(c.plan.buckets), c.plan.max_bucket)
        step, _ = self.int_value(r.randrange(c.cfg.num_steps), c.cfg.num_steps)
        which = r.randrange(5)
        if which == 0:
            r2t, _ = self.tensor([[0] * c.cfg.max_context_len] * c.cfg.pool_rows, "int32")
            self.call(("bucket", "req_to_token"), lambda: sg.round_setup_(c.bufs, bucket, r2t))
        elif which == 1:
            self.call(("bucket", "step"), lambda: sg.step_metadata_(c.bufs, bucket, step))
        elif which == 2:
            out, _ = self.tensor([5], "int32")
            self.call(("out",), lambda: sg.count_violations_(c.bufs, out),
                      (out,) if hasattr(out, "shape") else ())
        elif which == 3:
            self.call(("bucket",), lambda: sg.check_guards(c.bufs, bucket))
        else:
            self.call(("bucket", "step"), lambda: c.bufs.view(bucket, step))

    def run(self, calls: int) -> Dict[str, Any]:
        from specgraph import GuardViolation

        for _ in range(calls):
            try:
                self.stage() if self.rng.random() < 0.4 else self.ops()
            except GuardViolation:
                pass  # check_guards on a round with refused stores: the guard words' job
        return {"tally": self.tally, "failures": self.failures[:20],
                "failure_count": len(self.failures), "config": CONFIGS["base"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--fw", default="numpy")
    a = ap.parse_args()
    print(json.dumps(Fuzz(a.fw, a.seed).run(a.calls)))


if __name__ == "__main__":
    main()
