"""Runs hostile_cases in worker processes under an address-space cap (RLIMIT_AS), one case at a
time, and classifies each: pass, crash, hang, write-on-refusal, unnamed, accepted,
refused-legit, twin-differs. A crashed or hung worker is replaced and the run continues with the
next case.

    python hostile_runner.py [--count N] [--seed S] [--fw numpy,torch] [--show KIND]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import random
import resource
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
AS_CAP = 4 << 30  # torch maps about 3 GiB of address space at import


def _named(e: BaseException, field: str) -> bool:
    from specgraph import InvalidArgument

    msg = str(e)
    if isinstance(e, InvalidArgument):
        f = e.field or ""
        return bool(f) and (f.startswith(field) or field.startswith(f)) and msg.startswith(f)
    if isinstance(e, TypeError):
        return msg.startswith(field)
    return False


def run_one(name: str) -> Dict[str, Any]:
    """One case in this process: the outcome and the exception's text."""
    from hostile_cases import BY_NAME, Ctx

    case = BY_NAME[name]
    try:
        ctx = Ctx(case.fw, case.cfg)
        call = case.build(ctx)
    except Exception as e:  # noqa: BLE001 (a bug of the case, not of specgraph)
        return dict(outcome="case-error", text=f"{type(e).__name__}: {e}"[:300])
    watched = [ctx.arena, *call.outputs]
    before = [ctx.snapshot(x) for x in watched]
    try:
        result, exc = call.fn(), None
    except Exception as e:  # noqa: BLE001 (classified below)
        result, exc = None, e
    after = [ctx.snapshot(x) for x in watched]
    changed = any(b is not None and a != b for a, b in zip(after, before))
    text = "" if exc is None else f"{type(exc).__name__}: {exc}"[:300]
    if exc is None:
        if call.expect == "refuse":
            return dict(outcome="accepted", text=repr(result)[:200])
        if call.twin is not None:
            twin_ctx = Ctx(case.fw, case.cfg)
            try:
                twin_result = call.twin(twin_ctx)()
            except Exception as e:  # noqa: BLE001
                return dict(outcome="twin-differs", text=f"twin raised {type(e).__name__}: {e}")
            same = (repr(twin_result) == repr(result)
                    and twin_ctx.snapshot(twin_ctx.arena) == ctx.snapshot(ctx.arena))
            if not same:
                return dict(outcome="twin-differs", text=f"{result!r:.100} vs {twin_result!r:.100}")
        return dict(outcome="pass", text="")
    if call.expect == "ok":
        return dict(outcome="refused-legit", text=text)
    if changed:
        return dict(outcome="write-on-refusal", text=text)
    if not _named(exc, call.field):
        return dict(outcome="unnamed", text=f"(want {call.field}) {text}")
    return dict(outcome="pass", text=text)


def worker() -> None:
    """Reads case names from stdin, writes START/RESULT lines (flushed) to stdout."""
    sys.path.insert(0, HERE)
    import hostile_cases  # noqa: F401  (and specgraph, numpy, tvm_ffi: before any case is timed)

    print("READY", flush=True)
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        print("START " + name, flush=True)
        if name.startswith("FUZZ "):  # FUZZ <framework> <seed> <calls>: hostile_fuzz
            from hostile_fuzz import Fuzz

            _, fw, seed, calls = name.split()
            r = Fuzz(fw, int(seed)).run(int(calls))
            r["outcome"] = "pass" if not r["failure_count"] else "fuzz-failures"
        else:
            r = run_one(name)
        print("RESULT " + json.dumps([name, r]), flush=True)


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_CAP, AS_CAP))


class _Worker:
    def __init__(self) -> None:
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, preexec_fn=_cap, cwd=HERE)
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:  # the imports are not the first case's time
            self.ready = self.lines.get(timeout=600) == "READY\n"
        except queue.Empty:
            self.ready = False

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, name: str, timeout: float) -> Dict[str, Any]:
        assert self.p.stdin is not None
        if not self.ready:
            return dict(outcome="crash", text="the worker did not start")
        try:
            self.p.stdin.write(name + "\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            return dict(outcome="crash", text="worker gone")
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                self.p.kill()
                return dict(outcome="hang", text=f"no answer in {timeout} s")
            if line is None:
                rc = self.p.wait()
                return dict(outcome="crash", text=f"worker exit {rc}")
            if line.startswith("RESULT "):
                return json.loads(line[7:])[1]

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.stdin.close()  # type: ignore[union-attr]
            self.p.wait(timeout=30)


def run_cases(names: List[str], timeout: float = 60.0) -> Dict[str, Dict[str, Any]]:
    """Every case in a capped worker; a new worker after a crash or a hang. The timeout detects
    hangs, it times nothing: on the shared 2-core machine (load average 21, a torch install
    unpacking beside it) cases that take milliseconds once went past 60 s, hence 180 s."""
    results: Dict[str, Dict[str, Any]] = {}
    w: Optional[_Worker] = None
    for name in names:
        if w is None:
            w = _Worker()
        r = results[name] = w.run(name, timeout)
        if r["outcome"] in ("crash", "hang"):
            w = None
    if w is not None:
        w.close()
    return results


def run_groups(groups: List[List[str]], timeout: float = 60.0) -> Dict[str, Dict[str, Any]]:
    """run_cases on each group at once, one worker each (the machine's cores in parallel)."""
    results: Dict[str, Dict[str, Any]] = {}
    threads = [threading.Thread(target=lambda g=g: results.update(run_cases(g, timeout)))
               for g in groups if g]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def available(frameworks: Tuple[str, ...]) -> List[str]:
    """The case names runnable here, of the given frameworks."""
    sys.path.insert(0, HERE)
    from hostile_cases import CASES

    have = {"numpy"}
    try:
        import torch

        have.add("torch")
        import specgraph

        if torch.cuda.is_available() and specgraph.CUDA_AVAILABLE:
            have.add("cuda")
    except ImportError:
        pass
    return [c.name for c in CASES if c.fw in have and c.fw in frameworks]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--count", type=int, default=0, help="a random sample of N (0: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fw", default="numpy,torch,cuda")
    ap.add_argument("--show", default="", help="outcomes to list, comma-separated")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.worker:
        worker()
        return
    names = available(tuple(a.fw.split(",")))
    if a.count:
        names = random.Random(a.seed).sample(names, min(a.count, len(names)))
    t0 = time.monotonic()
    results = run_cases(names)
    tally = collections.Counter(r["outcome"] for r in results.values())
    print(f"{len(names)} cases in {time.monotonic() - t0:.1f} s: " +
          ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    show = set(a.show.split(",")) if a.show else set(tally) - {"pass"}
    for n, r in results.items():
        if r["outcome"] in show:
            print(f"  {r['outcome']:16} {n}: {r['text']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
