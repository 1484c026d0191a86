"""What a DraftGraphs graph records, per capture mode, and the capture report (specgraph.torch).

The body of graph(bucket, step):
  per step (and each step of a round graph): [round_setup_ (step 0 only)] +
    [step_metadata_(s) (plans with FA3 tables)] + [csr_step_indices_(s) (plans with CSR)] +
    [forward(view(bucket, s))];
  device step counter: [round_setup_ (its kernels run on the device at step 0 only)] +
    [step_metadata_device_ (FA3)] + [csr_indices_device_ (CSR)] + [forward(view(bucket, 0))]
    + [advance_step_].
The forward's view carries this step's FA3 tables and CSR buffers: the plan's arena, or the
engine's own kv_indptr / kv_indices when DraftGraphs was given bound CSR outputs.
Also: which graphs each mode captures (exactly those it replays), the report (one timing per
graph, the totals, the log line) and the errors naming (bucket, step).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch

from . import _check
from . import csr as _csr
from .buffers import Buffers, StepView
from .errors import CaptureFailed, InvalidArgument
from .inputs import _bound, begin_round_
from .ops import (advance_step_, continue_condition_host, round_setup_, stage_, step_metadata_,
                  step_metadata_device_)

ROUND = -1  # the step of a whole-round graph in reports

Forward = Callable[[StepView], None]


def step_graph_count(num_steps: int, round_graphs: bool, step_graphs: bool) -> int:
    """Step graphs per bucket: every step's in per-step mode; with round graphs only those of
    the steps shorter rounds replay (the last step runs only inside the round graph)."""
    if not step_graphs:
        return 0
    return num_steps - (1 if round_graphs else 0)


def graph_keys(buckets: Sequence[int], num_steps: int, round_graphs: bool, step_graphs: bool,
               device_steps: bool) -> List[Tuple[int, int]]:
    """(bucket, step) of every graph a mode captures, in capture order: exactly what it replays.
    Device steps (and device depth, whose round graph loops over it): one body, step 0."""
    if device_steps:
        return [(b, 0) for b in buckets]
    steps = list(range(step_graph_count(num_steps, round_graphs, step_graphs)))
    return [(b, s) for b in buckets for s in steps + ([ROUND] if round_graphs else [])]


class GraphTiming(NamedTuple):
    bucket: int
    step: int  # ROUND (-1) for a whole-round graph
    seconds: float  # warmups excluded: the capture itself


class CaptureReport(NamedTuple):
    graphs: int
    seconds: float  # the whole capture(), warmups and barriers included
    per_graph: List[GraphTiming]  # in capture order (largest bucket first)
    pool_bytes: int  # the graph pool's segments in torch's allocator after capture
    arena_bytes: int
    mode: str  # "cuda_graph", or "eager" on a CPU arena

    def line(self) -> str:
        """The one log line per capture: parseable, fixed format. On a CPU arena nothing is
        captured (CUDA graphs need a CUDA arena) and the line says so instead of "0 graphs"."""
        if self.mode == "eager":
            return (f"specgraph capture: none, eager mode on a CPU arena (run_round runs the ops "
                    f"and the forward directly; CUDA graphs need a CUDA arena), arena "
                    f"{self.arena_bytes} bytes")
        return (f"specgraph capture: {self.graphs} graphs in {self.seconds:.3f} s, "
                f"pool {self.pool_bytes / (1 << 20):.1f} MiB, arena {self.arena_bytes} bytes")


def pool_bytes(pool: Any, device: torch.device) -> Optional[int]:
    """Bytes of the segments torch's allocator holds for graph pool `pool` on `device`."""
    try:
        segments = torch.cuda.memory_snapshot(mempool_id=pool, include_traces=False)
    except Exception:  # older torch: no per-pool snapshot
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return sum(int(s.get("total_size", 0)) for s in segments if s.get("device", index) == index)


@contextlib.contextmanager
def failing(bucket: int, step: int, what: str) -> Iterator[None]:
    """Turns any exception into CaptureFailed naming (bucket, step)."""
    try:
        yield
    except CaptureFailed:
        raise
    except Exception as e:
        where = "the round graph" if step == ROUND else f"step {step}"
        raise CaptureFailed(f"{what} of bucket {bucket}, {where} failed: "
                            f"{type(e).__name__}: {e}", bucket=bucket, step=step) from e


class StepBody:
    """Records the work of one graph: the ops of the plan's formats, then the forward."""

    def __init__(self, bufs: Buffers, forward: Forward, req_to_token: torch.Tensor,
                 csr_outputs: Optional[_csr.CsrOutputs], inputs: Any = None) -> None:
        cfg = bufs.plan.config
        self.bufs = bufs
        self.forward = forward
        self.req_to_token = req_to_token
        self.fa3 = bool(bufs.plan.layout["has_fa3"])
        self.csr = cfg.has_csr
        if csr_outputs is not None and not isinstance(csr_outputs, _csr.CsrOutputs):
            raise TypeError("csr_outputs: expected specgraph.CsrOutputs (from "
                            "specgraph.bind_csr_outputs) or None, got "
                            f"{_check.type_name(csr_outputs)}")
        if csr_outputs is not None and not self.csr:
            raise InvalidArgument(f"csr_outputs: given, but the plan's formats is "
                                  f"{cfg.formats!r} (no CSR indices to write; use \"csr\" or "
                                  "\"both\")", field="csr_outputs")
        self.csr_outputs = csr_outputs
        # The engine's static inputs read in place (specgraph.bind_inputs), or None: staged.
        self.inputs = None if inputs is None else _bound(inputs)

    def view(self, bucket: int, step: int) -> StepView:
        """What the forward of graph(bucket, step) receives."""
        v = self.bufs.view(bucket, step)
        if self.csr_outputs is not None:
            kv_indptr, kv_indices = _csr.step_csr_views(self.bufs, bucket, step, self.csr_outputs)
            v = v._replace(kv_indptr=kv_indptr, kv_indices=kv_indices)
        return v

    def record(self, bucket: int, step: int, device_steps: bool) -> None:
        bufs, r2t, ins = self.bufs, self.req_to_token, self.inputs
        if device_steps:  # one body for every step: the step is the device counter's
            round_setup_(bufs, bucket, r2t, inputs=ins)
            if self.fa3:
                step_metadata_device_(bufs, bucket, inputs=ins)
            if self.csr:
                _csr.csr_indices_device_(bufs, bucket, r2t, out=self.csr_outputs, inputs=ins)
            self.forward(self.view(bucket, 0))
            advance_step_(bufs)
            return
        steps = range(bufs.plan.config.num_steps) if step == ROUND else (step,)
        for s in steps:
            if s == 0:
                round_setup_(bufs, bucket, r2t, inputs=ins)
            if self.fa3:
                step_metadata_(bufs, bucket, s, inputs=ins)
            if self.csr:
                _csr.csr_step_indices_(bufs, bucket, s, r2t, out=self.csr_outputs, inputs=ins)
            self.forward(self.view(bucket, s))


def warm_up_round(bufs: Buffers, bucket: int, step: int, inputs: Any) -> None:
    """Before a warm-up of graph(bucket, step 0 or the round) with staged inputs: an idle round
    staged into the bucket (every row a padding row), so the warm-up runs in the round's order
    over defined rows (docs/metadata.md section 11); nothing is read from the engine."""
    if inputs is None and step in (0, ROUND):
        stage_(bufs, 0, bufs.req_pool_index, bufs.seq_len, bufs.out_cache_loc, bucket=bucket)


def run_device_depth_round(g: Any) -> None:
    """DraftGraphs' device_depth round: one launch of the bucket's round graph; eagerly (CPU
    arena), the same loop: the body, then the condition kernel into a flag, while it says
    continue (the body runs at least once, as the WHILE node's initial value is 1)."""
    if g.bucket == 0:
        raise InvalidArgument("step: nothing staged (call stage_ first)", field="step")
    if g.mode == "cuda_graph":
        g._rounds[g.bucket].launch()
    else:
        for _ in range(g.plan.config.num_steps):  # the condition stops by max_depth
            g._record(g.bucket, 0)
            continue_condition_host(g.bufs, g.bucket, g._condition, inputs=g.inputs)
            if not int(g._condition[0]):
                break
    g.replays[(g.bucket, 0)] += 1  # the body, looped over by its round graph
    g._next_step = g.plan.config.num_steps


def begin_in_place(g: Any, bucket: int, max_depth: int, min_confidence: float) -> int:
    """DraftGraphs.begin_round_: the next round of a DraftGraphs bound to inputs read in place."""
    if g.inputs is None:
        raise InvalidArgument("begin_round_: no inputs bound (DraftGraphs(..., "
                              "inputs=specgraph.bind_inputs(...))); stage_ the round instead",
                              field="begin_round_")
    bucket = g.bufs._bucket(_check.index("bucket", bucket))
    if not g.captured or bucket not in g.buckets:
        raise InvalidArgument(f"bucket: {bucket} was not captured (captured: {list(g.buckets)}; "
                              "capture() first)", field="bucket")
    if g.device_steps or g.device_depth:
        begin_round_(g.bufs, max_depth, min_confidence)
    g.bucket, g.batch, g._next_step = bucket, bucket, 0
    g.rounds += 1
    return bucket


# ---- the one capture loop and async check of the Python drivers ----------------------------
# DraftGraphs (specgraph.torch), VerifyGraphs (specgraph.verify_graphs) and ExtendGraphs
# (specgraph.extend_graphs) capture with capture_graphs and check asynchronously with AsyncFlag.

Key = Tuple[int, ...]


class Captured(NamedTuple):
    graphs: Dict[Key, Any]  # key -> torch.cuda.CUDAGraph
    timings: List[GraphTiming]
    pool: Any  # the graph pool handle used (the given one or a new one)
    pool_bytes: int  # the pool's segments after capture (or the growth of reserved memory)


def capture_graphs(keys: Sequence[Key], *, device: torch.device, stream: Any, pool: Any,
                   warmups: int, warm_up: Callable[[Key], None], record: Callable[[Key], None],
                   failing_at: Callable[[Key, str], Any],
                   before_capture: Optional[Callable[[Key], None]] = None,
                   reset: Optional[Callable[[], None]] = None, keep_graph: bool = False,
                   after_capture: Optional[Callable[[Key, Any], None]] = None,
                   capture_error_mode: str = "global") -> Captured:
    """Captures graph(key) for every key in order: (warmups > 0) warm_up(key) on the capture
    stream, before_capture(key), reset() on the capture stream (not recorded), then
    torch.cuda.graph into the pool recording record(key), then after_capture(key, graph) on the
    capture stream (still inside failing_at(key, "capture")). failing_at(key, what) is a context
    manager turning errors into CaptureFailed naming the key. Synchronises before and after; CUDA
    only (the drivers run their warm-ups eagerly on a CPU)."""
    torch.cuda.synchronize(device)
    reserved = torch.cuda.memory_stats(device).get("reserved_bytes.all.current", 0)
    stream = stream or torch.cuda.Stream(device)
    pool = pool if pool is not None else torch.cuda.graph_pool_handle()
    graphs: Dict[Key, Any] = {}
    timings: List[GraphTiming] = []
    for key in keys:
        if warmups:
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                warm_up(key)
            torch.cuda.current_stream(device).wait_stream(stream)
        if before_capture is not None:
            before_capture(key)
        if reset is not None:
            with torch.cuda.stream(stream):
                reset()
        g = torch.cuda.CUDAGraph(keep_graph=True) if keep_graph else torch.cuda.CUDAGraph()
        t0 = time.perf_counter()
        with failing_at(key, "capture"):
            with torch.cuda.graph(g, pool=pool, stream=stream,
                                  capture_error_mode=capture_error_mode):
                record(key)
            if after_capture is not None:
                with torch.cuda.stream(stream):
                    after_capture(key, g)
        timings.append(GraphTiming(key[0], key[1] if len(key) > 1 else 0,
                                   time.perf_counter() - t0))
        graphs[key] = g
    torch.cuda.synchronize(device)
    in_pool = pool_bytes(pool, device)
    if in_pool is None:  # without a per-pool snapshot: the growth of reserved memory
        in_pool = torch.cuda.memory_stats(device).get("reserved_bytes.all.current", 0) - reserved
    return Captured(graphs, timings, pool, max(int(in_pool), 0))


class AsyncFlag:
    """The drivers' async check: counts written on the device (flag), copied without a sync into
    pinned host memory after a run (record), read by the next run or poll once the copy's event
    has completed (landed). Never waits."""

    def __init__(self, device: torch.device, n: int, dtype: Any) -> None:
        cuda = device.type == "cuda"
        self.flag = torch.zeros(n, dtype=dtype, device=device)
        self.host = torch.zeros(n, dtype=dtype, pin_memory=cuda)
        self.event = torch.cuda.Event() if cuda else None
        self.pending = False

    def record(self) -> None:
        """After a run wrote self.flag on the current stream: its copy to the host, no sync."""
        self.host.copy_(self.flag, non_blocking=True)
        if self.event is not None:
            self.event.record()
        self.pending = True

    def landed(self) -> Optional[List[int]]:
        """The counts of the last recorded run once they are on the host (then cleared), else
        None (nothing pending, or the copy still under way)."""
        if not self.pending or (self.event is not None and not self.event.query()):
            return None
        self.pending = False
        return [int(x) for x in self.host]
