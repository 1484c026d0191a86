#!/usr/bin/env python3
"""The expand metadata as engines compute it today, a chain of torch ops, against specgraph's
fused op (through the Python package), on the same inputs in one run.

The chain, in this project's words (docs/metadata.md section 3; bench/multipass_baseline.hpp
is the same chain as C++ kernels):
  1. repeat last_page_len per branch          lpl_rows = last_page_len.repeat_interleave(topk)
  2. divide the first d slots by the page size pages = cache_loc[:, :d] // page_size
  3. compare neighbours                       is_new = pages[:, j] != pages[:, j - 1]
  4. cumulative sum                           pos = cumsum(is_new) - 1
  5. scatter into the zeroed table            table.scatter_(1, pos, pages)
  6. seqlen                                   cache_seqlen = lpl_rows + d
specgraph's step_metadata_ does all of it in one kernel (one pass per row) into the static table.

Both are checked equal, then timed: on a GPU with CUDA events, eagerly (launches included) and as
CUDA graphs (replay only); on CPU tensors by wall time (specgraph's host executor). Also the
per-call host overhead of the ops, through torch.ops and directly.

    python bench/peer_torch.py [--json FILE] [--iters N] [--buckets 1,8,32,128]
Exit status 1 when an output differs. Plot: scripts/plot_bench.py --peer-torch FILE OUT_DIR.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time

try:
    import torch
except ImportError:
    print("peer_torch: torch is not installed; nothing to compare")
    sys.exit(0)

import specgraph


def chain(cache_loc, last_page_len, topk, page_size, d):
    """Today's engine approach: one tensor op (one kernel on CUDA) per line, temporaries."""
    lpl_rows = last_page_len.repeat_interleave(topk)
    pages = torch.div(cache_loc[:, :d], page_size, rounding_mode="floor")
    is_new = torch.ones_like(pages, dtype=torch.int32)
    is_new[:, 1:] = (pages[:, 1:] != pages[:, :-1]).to(torch.int32)
    pos = torch.cumsum(is_new, dim=1) - 1
    table = torch.zeros(pages.shape[0], d + 1, dtype=torch.int32, device=pages.device)
    table.scatter_(1, pos.long(), pages.to(torch.int32))
    return table, lpl_rows + d


def engine_inputs(rng, bs, topk, steps, ps, max_context):
    """A round laid out as engines lay it out: a fresh first page per branch, then whole pages."""
    seq = [rng.randint(1, max_context - steps) for _ in range(bs)]
    next_page, slots = 1, []
    for n in seq:
        lpl = n % ps
        for _ in range(topk):
            pages = list(range(next_page, next_page + 1 + (lpl + steps) // ps))
            next_page += len(pages) + rng.randint(0, 3)  # fragmented
            slots += [pages[(lpl + j) // ps] * ps + (lpl + j) % ps for j in range(steps)]
    return list(range(1, bs + 1)), seq, slots, next_page * ps + ps


def timed(fn, iters, dev):
    """Seconds per call: CUDA events around `iters` calls (GPU), or the wall clock (CPU)."""
    for _ in range(5):
        fn()
    if dev.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t) / iters


def as_graph(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # warm up the allocator on the capture stream
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def host_overhead(bufs, bucket, pool, seq, slots, iters=2000):
    """Per-call host time (us) of stage_ and step_metadata_, via torch.ops and directly."""
    direct = specgraph.buffers(bufs.plan, bufs.arena, initialize=False, torch_ops=False)
    out = {}
    for name, b in (("torch_ops", bufs), ("direct", direct)):
        for op, fn in (("stage_", lambda: specgraph.stage_(b, bucket, pool, seq, slots)),
                       ("step_metadata_", lambda: specgraph.step_metadata_(b, bucket, 0))):
            for _ in range(100):
                fn()
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                for _ in range(iters):
                    fn()
                best = min(best, (time.perf_counter() - t) / iters)
            out[f"{op}_{name}"] = round(best * 1e6, 3)
    if bufs.arena.is_cuda:
        torch.cuda.synchronize()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--buckets", default="1,8,32,128")
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--iters", type=int, default=0, help="default 200 on a GPU, 20 on the CPU")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    gpu = torch.cuda.is_available() and specgraph.CUDA_AVAILABLE
    dev = torch.device("cuda" if gpu else "cpu")
    iters = a.iters or (200 if gpu else 20)
    buckets = [int(b) for b in a.buckets.split(",")]
    max_context = 4096
    rng = random.Random(a.seed)
    results, failures, overhead = [], 0, {}
    for bs in buckets:
        pool, seq, slots, kv_slots = engine_inputs(rng, bs, a.topk, a.steps, a.page_size,
                                                   max_context)
        cfg = specgraph.DraftConfig(max_batch=bs, topk=a.topk, num_steps=a.steps,
                                    page_size=a.page_size, max_context_len=max_context,
                                    pool_rows=bs + 1, kv_slots=kv_slots, buckets=(bs,))
        plan = specgraph.make_plan(cfg)
        arena = (torch.empty(plan.total_bytes, dtype=torch.uint8, device=dev) if gpu
                 else specgraph.host_arena(plan, framework="torch"))
        bufs = specgraph.buffers(plan, arena)
        t = lambda x: torch.tensor(x, device=dev)  # noqa: E731
        pool_t, seq_t, slots_t = t(pool), t(seq), t(slots)
        r2t = torch.zeros(bs + 1, max_context, dtype=torch.int32, device=dev)
        specgraph.stage_(bufs, bs, pool_t, seq_t, slots_t)
        specgraph.round_setup_(bufs, bs, r2t)
        cache_loc = slots_t.view(bs * a.topk, a.steps)
        lpl = seq_t.to(torch.int32) % a.page_size
        rows = bs * a.topk
        for step in sorted({0, a.steps - 1}):
            d = step + 1
            specgraph.step_metadata_(bufs, bs, step)
            table, seqlen = chain(cache_loc, lpl, a.topk, a.page_size, d)
            equal = (torch.equal(table, bufs.expand_page_table(step)[:rows, : d + 1])
                     and torch.equal(seqlen.to(torch.int32), bufs.expand_cache_seqlen(step)[:rows]))
            failures += not equal
            fused = lambda: specgraph.step_metadata_(bufs, bs, step)  # noqa: E731
            peer = lambda: chain(cache_loc, lpl, a.topk, a.page_size, d)  # noqa: E731
            modes = [("eager", fused, peer)]
            if gpu:
                modes.append(("graph", as_graph(fused), as_graph(peer)))
            for mode, f, c in modes:
                tf, tc = timed(f, iters, dev), timed(c, iters, dev)
                results.append(dict(bucket=bs, step=step, rows=rows, mode=mode,
                                    fused_us=round(tf * 1e6, 3), torch_chain_us=round(tc * 1e6, 3),
                                    ratio=round(tc / tf, 2), equal=bool(equal)))
                print(f"bucket {bs:4d} step {step} {mode:5s}: specgraph {tf * 1e6:9.2f} us, "
                      f"torch chain {tc * 1e6:9.2f} us ({tc / tf:5.2f}x)"
                      f"{'' if equal else '  DIFFERENT'}")
        if bs == buckets[0]:
            overhead = host_overhead(bufs, bs, pool_t, seq_t, slots_t)
    print("host overhead per call (us): " + ", ".join(f"{k} {v}" for k, v in overhead.items()))
    doc = dict(benchmark="peer_torch", device=(torch.cuda.get_device_name() if gpu else "cpu"),
               timing="cuda events" if gpu else "wall clock", torch=torch.__version__,
               specgraph=specgraph.__version__, python=platform.python_version(),
               config=dict(topk=a.topk, steps=a.steps, page_size=a.page_size, iters=iters),
               results=results, host_overhead_us=overhead, failures=failures)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    print(f"peer_torch: {len(results)} timings on {doc['device']}, "
          f"{'all outputs equal' if not failures else f'{failures} outputs DIFFER'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
