"""DraftGraphs: a pure-Python capture driver over torch.cuda.graph.

    graphs = specgraph.torch.DraftGraphs(bufs, forward, req_to_token=req_to_token,
                                         pool=torch.cuda.graph_pool_handle(),
                                         before_capture=lambda bucket, step: tp_barrier())
    report = graphs.capture()          # graph(B, s) for every bucket (largest first) and step
    per round:
        graphs.stage_(bs, req_pool_indices, seq_lens, out_cache_loc)   # eager, current stream
        graphs.run_round(depth)        # replay steps 0..depth-1 on the current stream

graph(B, s) = [round_setup_ (step 0 only)] + [step_metadata_(s)] + [forward(view(B, s))], the same
sequence the C++ draft_runtime captures; with round_graphs one graph per bucket holds the whole
round instead (step_graphs=True adds those of the steps shorter rounds replay). With a device
step counter (DraftConfig(device_steps=True), docs/device-rounds.md) one graph per bucket holds one step, [round_setup_ (runs on the device at step 0 only)] +
[step_metadata_device_] + [forward(view(B, 0))] + [advance_step_], replayed depth times: the
forward reads the step from view.device_step. With the device-decided depth
(DraftConfig(device_depth=True)) that body is captured with torch (keep_graph=True) and
specgraph.round_graph wraps a copy of it in a WHILE node whose condition reads the forward's
view.confidence: run_round() is one launch and the device decides the depth (stage_'s max_depth
and min_confidence), left in DraftGraphs.depth. torch.cuda.graph itself records no WHILE node.
The forward is the engine's: it reads the static buffers through the StepView it is given and
must only enqueue work on the current stream (it runs inside torch.cuda.graph).
With CSR in the plan (DraftConfig(formats="csr" or "both"), docs/csr.md) each step's graph
also writes that step's kv_indptr / kv_indices before the forward (into the arena, or into the
engine's buffers bound with specgraph.bind_csr_outputs and passed as csr_outputs), and the
view carries them (view.kv_indptr, view.kv_indices). The bodies: specgraph._capture.

On a CPU arena (no CUDA) nothing is captured: capture() runs the warm-ups and run_round the same
sequence eagerly, so the driver's logic is usable and testable without a GPU.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

try:
    import torch
except ImportError as _e:  # say what to install, not a bare "No module named 'torch'"
    from ._deps import INSTALL

    raise ModuleNotFoundError(
        "specgraph.torch (DraftGraphs over torch.cuda.graph) needs torch, which is not "
        f"installed: {INSTALL['torch']} (import specgraph works without it)",
        name="torch") from _e

from . import _check, _env
from . import _torch_ops  # noqa: F401  (registers torch.ops.specgraph.*)
from ._capture import (ROUND, AsyncFlag, CaptureReport, Forward, GraphTiming, StepBody,
                       begin_in_place, capture_graphs, failing, graph_keys, run_device_depth_round,
                       step_graph_count, warm_up_round)
from .buffers import Buffers
from .csr import CsrOutputs
from .errors import CaptureFailed, GuardViolation, InvalidArgument
from .inputs import BoundInputs
from .ops import RoundGraph, check_guards, count_violations_, round_graph, stage_

logger = logging.getLogger("specgraph")

MAX_WARMUPS = 100  # eager runs of a graph's work before its capture

__all__ = ["CaptureReport", "DraftGraphs", "Forward", "GraphTiming", "MAX_WARMUPS", "ROUND"]


class DraftGraphs:
    """Captures and replays the draft steps of every bucket with torch.cuda.graph.

    bufs: Buffers over a torch arena. forward(view): the engine's step forward. req_to_token:
    int32 [pool_rows, max_context_len] on the arena's device; must not move while the graphs
    exist. buckets: a subset of plan.buckets to capture (default all). pool: a graph memory pool
    handle to share (torch.cuda.graph_pool_handle(); default a new one for these graphs).
    stream: the capture stream (default a new side stream). warmups: eager runs of each graph's
    work on the capture stream before capturing it (0..MAX_WARMUPS). before_capture(bucket, step): called right
    before each capture (step ROUND for a round graph), e.g. the engine's TP barrier.
    round_graphs: capture a whole-round graph per bucket (default plan.config.round_graphs).
    step_graphs: capture step graphs too (default: not round_graphs). Each mode captures exactly
    the graphs it replays: per-step mode a graph per step; round mode (round_graphs=True) only
    the round graphs (run_round at full depth; replay(s) and shorter rounds are refused); both
    flags: the round graph and the graphs of steps 0..num_steps-2, which shorter rounds replay
    (the last step runs only in the round graph); device steps one body per bucket. graph_keys
    lists them.
    checked: "off", "async" or "sync" (default SPECGRAPH_CHECKED): the guard check after each
    round (see specgraph._env). capture_error_mode: passed to torch.cuda.graph. csr_outputs
    (plans with CSR): the engine's kv_indptr / kv_indices from specgraph.bind_csr_outputs, which
    each step's graph writes instead of the arena's CSR buffers (the views then point there).
    inputs: the engine's static inputs from specgraph.bind_inputs, read in place by every
    graph (nothing staged per round): start each round with begin_round_ instead of stage_.
    """

    def __init__(self, bufs: Buffers, forward: Forward, *, req_to_token: torch.Tensor,
                 buckets: Optional[Sequence[int]] = None, pool: Any = None,
                 stream: Optional[torch.cuda.Stream] = None, warmups: int = 2,
                 before_capture: Optional[Callable[[int, int], None]] = None,
                 round_graphs: Optional[bool] = None, checked: Optional[str] = None,
                 capture_error_mode: str = "global",
                 step_graphs: Optional[bool] = None,
                 csr_outputs: Optional[CsrOutputs] = None,
                 inputs: Optional[BoundInputs] = None) -> None:
        if not isinstance(bufs, Buffers) or bufs.framework != "torch":
            raise InvalidArgument(
                "bufs: DraftGraphs needs Buffers over a torch arena: specgraph.buffers(plan, "
                "arena) with arena = torch.empty(plan.total_bytes, dtype=torch.uint8, "
                "device=\"cuda\"), or specgraph.host_arena(plan, framework=\"torch\") on the CPU",
                field="bufs")
        if not callable(forward):
            raise TypeError(f"forward: expected a callable (view) -> None, got "
                            f"{_check.type_name(forward)}")
        self.bufs = bufs
        self.plan = bufs.plan
        self.forward = forward
        self.req_to_token = _check.tensor("req_to_token", req_to_token, bufs.arena, "torch")
        if buckets is not None and (isinstance(buckets, (str, bytes)) or
                                    not hasattr(buckets, "__iter__")):
            raise TypeError(f"buckets: expected a sequence of ints, got "
                            f"{_check.type_name(buckets)}")
        chosen = [_check.member(f"buckets[{i}]", b, self.plan.buckets, "the planned buckets")
                  for i, b in enumerate(buckets or ())] or list(self.plan.buckets)
        self.buckets: Tuple[int, ...] = tuple(sorted(set(chosen), reverse=True))
        self.device: torch.device = bufs.arena.device
        self.mode = "cuda_graph" if self.device.type == "cuda" else "eager"
        self.pool = pool
        self.stream = stream
        self.warmups = _check.int_in("warmups", warmups, 0, MAX_WARMUPS)
        if before_capture is not None and not callable(before_capture):
            raise TypeError(f"before_capture: expected a callable (bucket, step) or None, got "
                            f"{_check.type_name(before_capture)}")
        self.before_capture = before_capture
        self.round_graphs = self.plan.config.round_graphs if round_graphs is None else (
            _check.boolean("round_graphs", round_graphs))
        self.device_steps = self.plan.config.device_steps
        self.device_depth = self.plan.config.device_depth
        if self.device_steps and self.round_graphs:
            raise InvalidArgument("round_graphs: not with a device step counter",
                                  field="round_graphs")
        self.step_graphs = not self.round_graphs if step_graphs is None else (
            _check.boolean("step_graphs", step_graphs))
        if not (self.step_graphs or self.round_graphs or self.device_steps):
            raise InvalidArgument("step_graphs: False without round_graphs captures nothing to "
                                  "replay (pass round_graphs=True, or leave step_graphs out)",
                                  field="step_graphs")
        if checked is not None and not isinstance(checked, str):
            raise TypeError(f"checked: expected one of {', '.join(_env.CHECKED_MODES)} (a str), "
                            f"got {_check.type_name(checked)}")
        self.checked = _env.CHECKED if checked is None else str(checked)
        if self.checked not in _env.CHECKED_MODES:
            raise InvalidArgument(f"checked: {self.checked!r} is not off, async or sync",
                                  field="checked")
        self.capture_error_mode = capture_error_mode
        self._body = StepBody(bufs, forward, self.req_to_token, csr_outputs, inputs)
        self.inputs = self._body.inputs
        self.report: Optional[CaptureReport] = None
        self._graphs: Dict[Tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._rounds: Dict[int, RoundGraph] = {}  # device_depth: bucket -> its round graph
        # Launches per graph key (eagerly, on a CPU arena, the work each launch stands for).
        self.replays: Counter[Tuple[int, int]] = Counter()
        self.bucket = 0  # of the last stage_()
        self.batch = 0
        self.rounds = 0  # stage_ / begin_round_ calls: ExtendGraphs drops a round staged before
        self._next_step = 0
        # async checking: the count on the device and its pinned host copy (the shared AsyncFlag).
        self._async = AsyncFlag(self.device, 1, torch.int32)
        self._flag = self._async.flag
        self._flag_bucket = 0
        # device_depth on a CPU arena: the condition word the host loop reads after each body.
        self._condition = torch.zeros(1, dtype=torch.int32, device=self.device)

    # ---- capture ---------------------------------------------------------------------------
    def _record(self, bucket: int, step: int) -> None:
        self._body.record(bucket, step, self.device_steps)

    def _step_graph_count(self) -> int:
        return step_graph_count(self.plan.config.num_steps, self.round_graphs, self.step_graphs)

    @property
    def graph_keys(self) -> List[Tuple[int, int]]:
        """(bucket, step) of every graph capture() captures, in capture order (step ROUND for a
        round graph; device steps: step 0, the body). On a CPU arena: the warm-ups it runs."""
        return graph_keys(self.buckets, self.plan.config.num_steps, self.round_graphs,
                          self.step_graphs, self.device_steps)

    def _launch(self, key: Tuple[int, int]) -> None:
        """One replay of graph `key`; eagerly (CPU arena) the same work."""
        if self.mode == "cuda_graph":
            self._graphs[key].replay()
        else:
            self._record(*key)
        self.replays[key] += 1

    def capture(self) -> CaptureReport:
        """Captures every graph: per bucket (largest first) and step, warmups on the capture
        stream, before_capture, then torch.cuda.graph into the shared pool. Raises CaptureFailed
        naming (bucket, step) when the forward raises or does something capture forbids.
        With a device step counter it is set to 0 before every warm-up and every capture, so
        each warm-up runs step 0 (and the counter is 0 afterwards). On a CPU arena only the
        warm-ups run (eagerly). Synchronises; not during another capture. Logs one line
        (CaptureReport.line())."""
        start = time.perf_counter()
        timings: List[GraphTiming] = []
        in_pool_bytes = 0
        if self.mode == "cuda_graph":
            def round_graph_of(key: Tuple[int, ...], g: Any) -> None:
                if self.device_depth:  # the body graph stays alive (keep_graph)
                    self._rounds[key[0]] = round_graph(self.bufs, key[0], g, inputs=self.inputs)

            before = self.before_capture
            done = capture_graphs(
                self.graph_keys, device=self.device, stream=self.stream, pool=self.pool,
                warmups=self.warmups, warm_up=lambda k: self._warm_up(k[0], k[1]),
                record=lambda k: self._record(k[0], k[1]),
                failing_at=lambda k, what: failing(k[0], k[1], what),
                before_capture=None if before is None else (lambda k: before(k[0], k[1])),
                reset=self._reset_step,  # the counter as staging leaves it (not recorded)
                keep_graph=self.device_depth, after_capture=round_graph_of,
                capture_error_mode=self.capture_error_mode)
            self.pool = done.pool
            self._graphs.update({(k[0], k[1]): g for k, g in done.graphs.items()})
            timings, in_pool_bytes = done.timings, done.pool_bytes
        else:  # eager: the same warm-ups, so a forward's first calls are the same on a CPU
            for bucket, step in self.graph_keys:
                self._warm_up(bucket, step)
            self._reset_step()
        self.report = CaptureReport(len(self._graphs), time.perf_counter() - start, timings,
                                    max(in_pool_bytes, 0), self.plan.total_bytes, self.mode)
        logger.info(self.report.line())
        return self.report

    def _warm_up(self, bucket: int, step: int) -> None:
        """The warm-ups of graph(bucket, step) on the current stream. With a device step counter
        each runs the body at step 0: the counter is reset before each one (it advances once per
        body, and warm-ups of every bucket would otherwise run it past num_steps, where the
        forward would index its per-step outputs out of range)."""
        with failing(bucket, step, "warmup"):
            for _ in range(self.warmups):
                self._reset_step()
                warm_up_round(self.bufs, bucket, step, self.inputs)
                self._record(bucket, step)

    def _reset_step(self) -> None:
        """device_steps: the counter to 0, as staging sets it, on the current stream."""
        if self.device_steps:
            self.bufs.device_step.zero_()

    @property
    def captured(self) -> bool:
        return self.report is not None

    def can_run(self, bs: int) -> bool:
        """Whether a round of bs requests (0: an idle rank) has a captured graph: the smallest
        bucket >= bs was captured."""
        bs = _check.index("bs", bs)
        if not self.captured or not 0 <= bs <= self.plan.max_bucket:
            return False
        return self.plan.round_bucket(bs) in self.buckets

    # ---- per round -------------------------------------------------------------------------
    def stage_(self, bs: int, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
               out_cache_loc: torch.Tensor, max_depth: int = 0,
               min_confidence: float = float("-inf"), bucket: Optional[int] = None) -> int:
        """specgraph.stage_ for the next round, eagerly on the current stream; returns the
        bucket. bs 0: an idle rank (every row padding). bucket: the caller's (data-parallel
        attention: the bucket of the largest batch across ranks), a captured bucket >= bs;
        None: the smallest >= bs. max_depth (0: num_steps) and min_confidence: the round's
        controls in device_depth mode. No sync; not for use inside a capture."""
        if self.inputs is not None:
            raise InvalidArgument("stage_: the inputs are read in place (DraftGraphs(..., "
                                  "inputs=)): call begin_round_(bucket) instead", field="stage_")
        bs = _check.index("bs", bs)
        if bucket is None and not self.can_run(bs):
            raise InvalidArgument(f"bs: {bs} has no captured bucket (captured: "
                                  f"{list(self.buckets)}; capture() first)", field="bs")
        chosen = self.plan.round_bucket(bs, bucket)  # an unplanned or too small one, by name
        if not self.captured or chosen not in self.buckets:
            raise InvalidArgument(f"bucket: {chosen} was not captured (captured: "
                                  f"{list(self.buckets)}; capture() first)", field="bucket")
        self.bucket = stage_(self.bufs, bs, req_pool_indices, seq_lens, out_cache_loc,
                             max_depth, min_confidence, chosen)
        self.batch = bs
        self._next_step = 0
        self.rounds += 1
        return self.bucket

    def begin_round_(self, bucket: int, max_depth: int = 0,
                     min_confidence: float = float("-inf")) -> int:
        """With inputs= bound: the next round replays `bucket` (a captured bucket, e.g. the
        engine's own padded batch size), reading the engine's static inputs where they are.
        device_steps / device_depth: also specgraph.begin_round_ (the counters, max_depth,
        min_confidence). Current stream; no sync; returns the bucket."""
        return begin_in_place(self, bucket, max_depth, min_confidence)

    def replay(self, step: int) -> None:
        """Replays graph(staged bucket, step) on the current stream. Steps run in order 0, 1, ...
        after each stage_() (step 0 again restarts the round). Never allocates or syncs."""
        step = _check.index("step", step)
        if self.bucket == 0:
            raise InvalidArgument("step: nothing staged (call stage_ first)", field="step")
        if self.device_depth:
            raise InvalidArgument("step: the device decides the depth; run_round() runs the "
                                  "round in one launch", field="step")
        if not (self.step_graphs or self.device_steps):
            raise InvalidArgument(f"step: {step}: round mode captured no step graphs (run_round() "
                                  "runs the whole round; DraftGraphs(..., step_graphs=True) "
                                  "captures them too)", field="step")
        if not self.device_steps and step >= self._step_graph_count():
            raise InvalidArgument(f"step: {step} runs only inside the round graph (run_round() at "
                                  f"full depth); step graphs exist for steps 0.."
                                  f"{self._step_graph_count() - 1}, which shorter rounds replay",
                                  field="step")
        # Step 0 may restart a round, except with a device step counter (only staging resets it).
        if step != self._next_step and (step != 0 or self.device_steps):
            raise InvalidArgument(f"step: {step} out of order (expected {self._next_step})",
                                  field="step")
        self._launch((self.bucket, 0 if self.device_steps else step))
        self._next_step = step + 1

    def run_round(self, depth: Optional[int] = None) -> None:
        """Replays steps 0..depth-1 (default every step; fewer is adaptive speculation): one
        launch of the round graph when round_graphs and depth == num_steps, else one per step.
        device_depth: no depth; one launch of the bucket's round graph, the device decides.
        Then the guard check of `checked`: sync reads the guard words back (a synchronisation)
        and raises GuardViolation naming buffer, step, bucket and row; async raises, at a later
        run_round or poll(), once a non-syncing count of an earlier round has landed non-zero."""
        n = self.plan.config.num_steps
        if self.device_depth and depth is not None:
            raise InvalidArgument(f"depth: {depth} given, but the device decides the depth "
                                  "(pass max_depth and min_confidence to stage_)", field="depth")
        depth = n if depth is None else _check.index("depth", depth)
        if not 1 <= depth <= n:
            raise InvalidArgument(f"depth: {depth} is outside [1, num_steps {n}]", field="depth")
        if self.round_graphs and not self.step_graphs and depth != n:
            raise InvalidArgument(f"depth: {depth} needs step graphs, which round mode does not "
                                  f"capture (only full rounds, depth {n}; "
                                  "DraftGraphs(..., step_graphs=True) captures both)",
                                  field="depth")
        if self.checked == "async":
            self.poll()
        if self.device_depth:
            self._run_device_depth_round()
        elif self.round_graphs and depth == n:
            if self.bucket == 0:
                raise InvalidArgument("step: nothing staged (call stage_ first)", field="step")
            self._launch((self.bucket, ROUND))
            self._next_step = n
        else:
            for s in range(depth):
                self.replay(s)
        if self.checked == "sync":
            check_guards(self.bufs, self.bucket)
        elif self.checked == "async":
            count_violations_(self.bufs, self._flag)
            self._async.record()
            self._flag_bucket = self.bucket

    def _run_device_depth_round(self) -> None:
        run_device_depth_round(self)

    @property
    def depth(self) -> torch.Tensor:
        """device_depth mode: int32 [1] on the device, the depth the last round ran (the device
        step counter; reading it on the host syncs)."""
        return self.bufs.device_step

    def poll(self) -> None:
        """async mode: raises GuardViolation if the count of an earlier round has landed and is
        non-zero. Never waits."""
        landed = self._async.landed()
        count = 0 if landed is None else landed[0]
        if count:
            raise GuardViolation(
                f"{count} guard violation(s) in an earlier round (bucket {self._flag_bucket}); "
                "SPECGRAPH_CHECKED=sync or specgraph.check_guards() names buffer, step and row",
                violations=count, bucket=self._flag_bucket)

    @property
    def violations(self) -> torch.Tensor:
        """int32 [1] on the device: the count of the last async check (assert on it yourself,
        e.g. torch._assert_async(graphs.violations[0] == 0))."""
        return self._flag
