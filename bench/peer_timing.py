"""Timing shared by the torch op-chain peers (peer_csr_torch.py, peer_verify_torch.py,
peer_extend_torch.py): import it after torch has been found."""

from __future__ import annotations

import time

import torch


def timed(fn, iters, dev):
    """Seconds per call: CUDA events around `iters` calls on a GPU (cpu seconds None); on the CPU
    the best of `iters` calls by the wall clock and by the process's CPU time (a shared machine's
    waiting shows in the first only)."""
    for _ in range(2):
        fn()
    if dev.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters, None
    wall = cpu = float("inf")
    for _ in range(iters):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
    return wall, cpu


def as_graph(fn):
    """fn captured into a CUDA graph (warmed up on a side stream first); returns its replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay
