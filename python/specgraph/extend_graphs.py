"""ExtendGraphs: the draft-extend forward as one CUDA graph per bucket, the sibling of
specgraph.torch.DraftGraphs and specgraph.verify_graphs.VerifyGraphs (docs/extend-graphs.md
section 3, "Python").

    dg = specgraph.torch.DraftGraphs(bufs, draft_forward, req_to_token=req_to_token)
    dg.capture()
    eg = specgraph.extend_graphs.ExtendGraphs(dg, extend_forward)   # dg's plan, arena, pool
    eg.capture()
    per round:
        dg.stage_(bs, req_pool_indices, seq_lens, out_cache_loc)   # the round (verify's too)
        dg.run_round(); ...verify...; acceptance
        eg.stage_(accept_len)          # host lengths, one per request of dg's staged round
        eg.run()                       # one replay of graph(dg's staged bucket)

The plan is dg's and must hold a draft-extend section (DraftConfig(verify_tokens=W,
draft_extend=True)). graph(B) = [extend_arena_(bufs, B, req_to_token, accept_len=)] +
[forward(extend_view(bufs, B))]: the op reads the round dg staged (pool rows, seq_lens without
the window, the real batch, all on the device) and the accepted lengths, either the section's
(stage_ copies them in) or the engine's int32 tensor bound once (accept_len=, at least the
largest bucket's entries; graph(B) reads its first B in place, which the engine's acceptance
writes, and stage_() then takes no lengths). The forward is the engine's extend forward; it reads
the metadata through the ExtendView it is given (the section's views, the same every replay) and
must only enqueue work on the current stream. The graphs are captured in the order the plan's
buckets run largest first, with the capture loop DraftGraphs and VerifyGraphs share
(specgraph._capture.capture_graphs), into dg's pool unless pool= is given.

On a CPU arena (no CUDA) nothing is captured: capture() runs the warm-ups and run() the same
body eagerly, so the driver is usable and testable without a GPU (as DraftGraphs, VerifyGraphs).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

try:
    import torch
except ImportError as _e:
    from ._deps import INSTALL

    raise ModuleNotFoundError(
        "specgraph.extend_graphs (ExtendGraphs over torch.cuda.graph) needs torch, which is not "
        f"installed: {INSTALL['torch']} (import specgraph works without it)",
        name="torch") from _e

from . import _check, _env
from . import _torch_ops  # noqa: F401  (registers torch.ops.specgraph.*)
from ._capture import AsyncFlag, CaptureReport, GraphTiming, capture_graphs, warm_up_round
from .errors import CaptureFailed, GuardViolation, InvalidArgument
from .extend import extend_violations
from .extend_arena import ExtendView, extend_arena_, extend_view, stage_accept_len
from .torch import MAX_WARMUPS, DraftGraphs

logger = logging.getLogger("specgraph")

__all__ = ["ExtendGraphs", "ExtendView"]


@contextlib.contextmanager
def _failing(bucket: int, what: str) -> Iterator[None]:
    try:
        yield
    except CaptureFailed:
        raise
    except Exception as e:
        raise CaptureFailed(f"{what} of the extend graph of bucket {bucket} failed: "
                            f"{type(e).__name__}: {e}", bucket=bucket) from e


class ExtendGraphs:
    """Captures and replays the draft-extend forward of every bucket with torch.cuda.graph.

    draft_graphs: the DraftGraphs whose plan (with a draft-extend section), arena, req_to_token
    and staged rounds the extend graphs use. forward(view): the engine's extend forward.
    buckets: a subset of draft_graphs.buckets (default all of them). accept_len: None (the
    section's, staged by stage_), else the engine's int32 tensor of at least the largest
    bucket's entries on the arena's device, read in place; it must not move while the graphs
    exist. pool: the graph pool (default draft_graphs.pool, so the draft and extend graphs share
    one). stream, warmups, before_capture(bucket), capture_error_mode: as DraftGraphs. checked:
    "off", "async" or "sync" (default SPECGRAPH_CHECKED): the guard check after each run().
    """

    def __init__(self, draft_graphs: DraftGraphs, forward: Callable[[ExtendView], None], *,
                 buckets: Optional[Sequence[int]] = None, accept_len: Any = None,
                 pool: Any = None, stream: Optional[torch.cuda.Stream] = None, warmups: int = 2,
                 before_capture: Optional[Callable[[int], None]] = None,
                 checked: Optional[str] = None, capture_error_mode: str = "global") -> None:
        if not isinstance(draft_graphs, DraftGraphs):
            raise TypeError(f"draft_graphs: expected specgraph.torch.DraftGraphs, got "
                            f"{_check.type_name(draft_graphs)}")
        if not callable(forward):
            raise TypeError(f"forward: expected a callable (view) -> None, got "
                            f"{_check.type_name(forward)}")
        dg = draft_graphs
        self.plan = dg.plan
        if not self.plan.config.draft_extend:
            raise InvalidArgument("draft_extend: false: the draft graphs' plan has no "
                                  "draft-extend section; pass DraftConfig(verify_tokens=W, "
                                  "draft_extend=True)", field="draft_extend")
        if dg.inputs is not None:
            raise InvalidArgument("inputs: the draft graphs read bound inputs in place, but the "
                                  "extend op reads the staged round (DraftGraphs without "
                                  "inputs=, rounds staged with stage_)", field="inputs")
        if buckets is not None and (isinstance(buckets, (str, bytes)) or
                                    not hasattr(buckets, "__iter__")):
            raise TypeError(f"buckets: expected a sequence of ints, got "
                            f"{_check.type_name(buckets)}")
        chosen = [_check.member(f"buckets[{i}]", b, dg.buckets, "the draft graphs' buckets")
                  for i, b in enumerate(buckets or ())] or list(dg.buckets)
        self.buckets: Tuple[int, ...] = tuple(sorted(set(chosen), reverse=True))
        self.draft_graphs = dg
        self.bufs = dg.bufs
        self.forward = forward
        self.req_to_token = dg.req_to_token
        self.device: torch.device = dg.device
        self.mode = dg.mode
        self.w = self.plan.config.verify_tokens
        if accept_len is not None:
            if not isinstance(accept_len, torch.Tensor) or accept_len.device != self.device \
                    or accept_len.dtype != torch.int32 or accept_len.dim() != 1 \
                    or accept_len.numel() < self.buckets[0] or not accept_len.is_contiguous():
                raise InvalidArgument(
                    f"accept_len: expected a contiguous int32 tensor [>= {self.buckets[0]}] on "
                    f"{self.device} (the largest bucket's lengths), got "
                    f"{_check.type_name(accept_len)}"
                    + (f" {accept_len.dtype} {tuple(accept_len.shape)} on {accept_len.device}"
                       if isinstance(accept_len, torch.Tensor) else ""), field="accept_len")
        self.accept_len = accept_len
        self.pool = dg.pool if pool is None else pool
        self.stream = stream
        self.warmups = _check.int_in("warmups", warmups, 0, MAX_WARMUPS)
        if before_capture is not None and not callable(before_capture):
            raise TypeError(f"before_capture: expected a callable (bucket) or None, got "
                            f"{_check.type_name(before_capture)}")
        self.before_capture = before_capture
        self.checked = _env.CHECKED if checked is None else checked
        if self.checked not in _env.CHECKED_MODES:
            raise InvalidArgument(f"checked: {self.checked!r} is not off, async or sync",
                                  field="checked")
        self.capture_error_mode = capture_error_mode
        self._graphs: Dict[int, Any] = {}
        self.replays: Counter[int] = Counter()
        self.report: Optional[CaptureReport] = None
        self.bucket = 0  # of the staged extend round (0: none)
        self._round = -1  # draft_graphs.rounds when it was staged: a new round drops it
        self._async = AsyncFlag(self.device, 1, torch.int32)

    # ---- the body ----------------------------------------------------------------------------
    def view(self, bucket: int) -> ExtendView:
        """The section's views for the bucket (specgraph.extend_arena.extend_view)."""
        return extend_view(self.bufs, bucket)

    def _record(self, bucket: int, accept_index: Any = None) -> None:
        """The body of graph(bucket); accept_index: acceptance's [bucket, S] (RoundGraphs), whose
        rows it accepted nothing for are padded in the metadata."""
        acc = None if self.accept_len is None else self.accept_len[:bucket]
        extend_arena_(self.bufs, bucket, self.req_to_token, accept_len=acc,
                      accept_index=accept_index)
        self.forward(self.view(bucket))

    @property
    def graph_keys(self) -> List[int]:
        """The bucket of every graph capture() captures, in capture order (largest first). On a
        CPU arena: the warm-ups it runs."""
        return list(self.buckets)

    # ---- capture -----------------------------------------------------------------------------
    def capture(self) -> CaptureReport:
        """Captures graph(B) for every bucket (largest first): warm-ups on the capture stream
        (over an idle round staged into B: capture before staging rounds), before_capture(B),
        then torch.cuda.graph into the pool. Raises CaptureFailed naming the bucket. On a CPU
        arena only the warm-ups run (eagerly). Drops a staged extend round. Synchronises."""
        start = time.perf_counter()
        timings: List[GraphTiming] = []
        in_pool = 0
        if self.mode == "cuda_graph":
            before = self.before_capture
            done = capture_graphs(
                [(b,) for b in self.buckets], device=self.device, stream=self.stream,
                pool=self.pool, warmups=self.warmups, warm_up=lambda k: self._warm_up(k[0]),
                record=lambda k: self._record(k[0]), failing_at=lambda k, w: _failing(k[0], w),
                before_capture=None if before is None else (lambda k: before(k[0])),
                capture_error_mode=self.capture_error_mode)
            self.pool = done.pool
            self._graphs.update({k[0]: g for k, g in done.graphs.items()})
            timings, in_pool = done.timings, done.pool_bytes
        else:
            for b in self.buckets:
                self._warm_up(b)
        self.bucket = 0
        self.report = CaptureReport(len(self._graphs), time.perf_counter() - start, timings,
                                    in_pool, self.plan.total_bytes, self.mode)
        logger.info("extend graphs: %s", self.report.line())
        return self.report

    def _warm_up(self, bucket: int) -> None:
        with _failing(bucket, "warmup"):
            for _ in range(self.warmups):
                warm_up_round(self.bufs, bucket, 0, None)  # an idle round: defined rows
                if self.accept_len is None:
                    stage_accept_len(self.bufs, bucket, [])
                self._record(bucket)

    # ---- per round ---------------------------------------------------------------------------
    def stage_(self, accept_len: Optional[Sequence[int]] = None) -> int:
        """Stages the extend round of the draft graphs' staged round (DraftGraphs.stage_ first);
        returns its bucket. accept_len: host ints in [0, W], one per request of that round,
        copied into the section (padded rows 1; stage_accept_len: on CUDA it may block the host
        until the stream reaches the copy); with accept_len= bound at construction, None (the
        engine's tensor is read in place). Refusals (InvalidArgument, nothing copied): "stage_"
        (no round staged, or its bucket not captured here), "accept_len" (a count other than the
        round's requests, or lengths given with a bound tensor), "accept_len[i]" (outside
        [0, W])."""
        dg = self.draft_graphs
        if dg.bucket == 0:
            raise InvalidArgument("stage_: no round is staged: the extend round is the draft "
                                  "graphs' staged round; call DraftGraphs.stage_ first",
                                  field="stage_")
        if self.report is None or dg.bucket not in self.buckets:
            raise InvalidArgument(f"stage_: the staged round's bucket {dg.bucket} has no extend "
                                  f"graph (captured: {list(self.buckets)}; capture() first)",
                                  field="stage_")
        if self.accept_len is not None:
            if accept_len is not None:
                raise InvalidArgument("accept_len: the engine's tensor is bound (ExtendGraphs("
                                      "..., accept_len=)) and read in place; call stage_() "
                                      "without lengths", field="accept_len")
        else:
            if accept_len is None or isinstance(accept_len, (str, bytes)) or \
                    not hasattr(accept_len, "__len__"):
                raise InvalidArgument(f"accept_len: expected a sequence of {dg.batch} ints (one "
                                      f"per request of the staged round), got "
                                      f"{_check.type_name(accept_len)}", field="accept_len")
            if len(accept_len) != dg.batch:
                raise InvalidArgument(f"accept_len: {len(accept_len)} lengths for the staged "
                                      f"round of {dg.batch} requests; pass one per request of "
                                      "that round", field="accept_len")
            for i, v in enumerate(accept_len):
                _check.int_in(f"accept_len[{i}]", v, 0, self.w)
            stage_accept_len(self.bufs, dg.bucket, list(accept_len))
        self.bucket, self._round = dg.bucket, dg.rounds
        return self.bucket

    def run(self) -> None:
        """Replays graph(staged bucket) on the current stream (eagerly on a CPU arena), then the
        guard check of `checked`: sync reads the section's guard words back (a sync) and raises
        GuardViolation naming the kernel, the bucket and the request (an accepted length of 0
        included); async raises at a later run() or poll() once a count has landed. Refusals:
        "capture" (before capture()), "stage_" (before stage_, or a new round was staged since)."""
        if self.report is None:
            raise InvalidArgument("capture: run before capture(): no extend graphs exist",
                                  field="capture")
        if self.bucket == 0 or self._round != self.draft_graphs.rounds:
            why = "nothing staged" if self.bucket == 0 else "a new round was staged since"
            raise InvalidArgument(f"stage_: run before stage_ ({why}): stage the round's "
                                  "accepted lengths first", field="stage_")
        if self.checked == "async":
            self.poll()
        if self.mode == "cuda_graph":
            self._graphs[self.bucket].replay()
        else:
            self._record(self.bucket)
        self.replays[self.bucket] += 1
        if self.checked == "sync":
            self.check()
        elif self.checked == "async":
            self._async.flag.copy_(self.view(self.bucket).guard[:, 0].sum().reshape(1))
            self._async.record()

    def check(self) -> None:
        """Raises GuardViolation for the first guard word of the section with a violation.
        Synchronises (reads device memory)."""
        found = extend_violations(self.view(self.bucket).guard)
        if found:
            v = found[0]
            raise GuardViolation(f"extend graph of bucket {self.bucket}: {v.describe()}",
                                 buffer=v.kernel, bucket=self.bucket, row=v.row,
                                 column=v.column, kind=v.kind, kernel=v.kernel,
                                 capacity=v.capacity, value=v.value, violations=v.violations)

    def poll(self) -> None:
        """async mode: raises once an earlier run's count has landed non-zero. Never waits."""
        landed = self._async.landed()
        if landed and landed[0]:
            raise GuardViolation(f"extend graphs: {landed[0]} guard violation(s) in an earlier "
                                 "run; checked=\"sync\" names the kernel and the request",
                                 violations=landed[0])
