"""VerifyGraphs: the target-verify forward of a draft tree as one CUDA graph per bucket, the
sibling of specgraph.torch.DraftGraphs (docs/verify.md, "Python").

    vg = specgraph.verify_graphs.VerifyGraphs(forward, outputs=specgraph.verify_outputs(
             max_batch, M, D, ps, device="cuda"), req_to_token=req_to_token, buckets=[1, 2, 4, 8],
             max_seq_len=M, draft_tokens=D, page_size=ps, pool=draft_graphs.pool)
    vg.capture()
    per round:
        vg.stage_(bs, req_pool_indices, seq_lens, custom_mask)   # eager, current stream
        vg.run()                                                 # one replay

With plan=Plan(DraftConfig(..., verify_tokens=D)) the buckets, M, D and page size are the
plan's verify section's (VerifyGraphs(forward, outputs=..., req_to_token=..., plan=plan)).

graph(B) = [verify_metadata_ into `outputs` (the engine's tensors or verify_outputs')] +
[forward(view(B))]: the forward is the engine's verify forward; it reads the metadata through the
VerifyView it is given (the outputs sliced to the bucket) and must only enqueue work on the
current stream. The graphs are captured into `pool` (torch.cuda.graph_pool_handle(); pass
DraftGraphs' to share one pool between the draft and the verify graphs; the op's scratch tensor
is allocated there).

Static inputs: the graphs read req_pool_indices, seq_lens (int32) and the mask (uint8, the
bucket's capacity B * D * (M + D) cells) from buffers of their own, which stage_ fills. Padded
requests (r >= bs) get pool row 0, seq_len 1 and an all-1 mask block, which is what the padding
rule of docs/verify.md section 4 writes for them, so one graph serves every real batch. The mask's
length is checked against the formula on the device (no sync): a mask of another length (the
double-counted D: seq_lens that already include the verify tokens) zeroes the staged lengths, so
every real request gets empty sequences and is recorded as bad input, never read shifted; with
checked="sync" run() raises InvalidArgument naming custom_mask instead.

On a CPU req_to_token (no CUDA) nothing is captured: capture() runs the warm-ups and run() the
same body eagerly, so the driver is usable and testable without a GPU.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

try:
    import torch
except ImportError as _e:
    from ._deps import INSTALL

    raise ModuleNotFoundError(
        "specgraph.verify_graphs (VerifyGraphs over torch.cuda.graph) needs torch, which is not "
        f"installed: {INSTALL['torch']} (import specgraph works without it)",
        name="torch") from _e

from . import _check, _env
from . import _torch_ops  # noqa: F401  (registers torch.ops.specgraph.*)
from ._capture import AsyncFlag, CaptureReport, GraphTiming, capture_graphs
from .config import DraftConfig
from .errors import CaptureFailed, GuardViolation, InvalidArgument
from .plan import Plan, make_plan
from ._torch_ops import _narrow
from .verify import (GUARD_SHAPE, VerifyCapacity, VerifyFa3, VerifyFlashInfer, VerifyOutputs,
                     bucket_outputs, verify_metadata_, verify_tables, verify_violations)

logger = logging.getLogger("specgraph")

MAX_WARMUPS = 100

__all__ = ["VerifyGraphs", "VerifyView"]


class VerifyView(NamedTuple):
    """What the forward of graph(bucket) receives: static tensors, the same every replay."""

    bucket: int
    fa3: Optional[VerifyFa3]  # sliced to the bucket (max_seqlen_q: D prefix, 1 expand)
    flashinfer: Optional[VerifyFlashInfer]  # sliced to the bucket
    req_pool_indices: torch.Tensor  # int32 [bucket], as staged (padding: 0)
    seq_lens: torch.Tensor  # int32 [bucket], without the D verify tokens (padding: 1)
    custom_mask: torch.Tensor  # uint8 [bucket * D * (M + D)]: the staged cells, then all-1


@contextlib.contextmanager
def _failing(bucket: int, what: str) -> Iterator[None]:
    try:
        yield
    except CaptureFailed:
        raise
    except Exception as e:
        raise CaptureFailed(f"{what} of the verify graph of bucket {bucket} failed: "
                            f"{type(e).__name__}: {e}", bucket=bucket) from e


class VerifyGraphs:
    """Captures and replays the verify forward of every bucket with torch.cuda.graph.

    forward(view): the engine's verify forward. outputs: a VerifyOutputs of torch tensors on
    req_to_token's device, at least the exact capacities of the largest bucket (verify_outputs
    allocates them); they must not move while the graphs exist. req_to_token: int32 [pool_rows,
    W >= M + D]. buckets: the batch sizes to capture (largest first). max_seq_len M, draft_tokens
    D, page_size: as verify_metadata_. pool, stream, warmups, before_capture(bucket),
    capture_error_mode: as DraftGraphs. checked: "off", "async" or "sync" (default
    SPECGRAPH_CHECKED): the guard check after each run(). kv_slots: slots must be below it.
    plan: a Plan with a verify section (DraftConfig(verify_tokens=D)), e.g. the draft graphs'
    own: the graphs then follow its verify section, its buckets (buckets= a subset, default all),
    M = max_context_len, D = verify_tokens and page size (the numbers may be left out). Without
    it the numbers are required and VerifyGraphs plans that section itself (self.plan). Every
    size the graphs slice or allocate is C++'s for the bucket (specgraph.verify.verify_tables).
    """

    def __init__(self, forward: Callable[[VerifyView], None], *, outputs: VerifyOutputs,
                 req_to_token: torch.Tensor, buckets: Optional[Sequence[int]] = None,
                 max_seq_len: Optional[int] = None, draft_tokens: Optional[int] = None,
                 page_size: Optional[int] = None, pool: Any = None,
                 stream: Optional[torch.cuda.Stream] = None, warmups: int = 2,
                 before_capture: Optional[Callable[[int], None]] = None,
                 checked: Optional[str] = None, kv_slots: Optional[int] = None,
                 capture_error_mode: str = "global", plan: Optional[Plan] = None) -> None:
        if not callable(forward):
            raise TypeError(f"forward: expected a callable (view) -> None, got "
                            f"{_check.type_name(forward)}")
        if not isinstance(outputs, VerifyOutputs):
            raise TypeError(f"outputs: expected specgraph.VerifyOutputs, got "
                            f"{_check.type_name(outputs)}")
        if not isinstance(req_to_token, torch.Tensor):
            raise TypeError(f"req_to_token: expected a torch.Tensor, got "
                            f"{_check.type_name(req_to_token)}")
        self.plan = self._plan_of(plan, req_to_token, buckets, max_seq_len, draft_tokens,
                                  page_size, kv_slots)
        cfg = self.plan.config
        if buckets is None:
            chosen = sorted(self.plan.buckets, reverse=True)
        else:
            chosen = sorted({_check.member(f"buckets[{i}]", b, self.plan.buckets,
                                           "the planned buckets")
                             for i, b in enumerate(buckets)}, reverse=True)
        if not chosen:
            raise InvalidArgument("buckets: empty, expected at least one batch size",
                                  field="buckets")
        self.buckets: Tuple[int, ...] = tuple(chosen)
        self.d, self.m, self.ps = cfg.verify_tokens, cfg.max_context_len, cfg.page_size
        # C++'s tables of every bucket (verify_tables): the view's slices and the mask's size.
        self._tables = {b: verify_tables(b, self.m, self.d, self.ps) for b in self.buckets}
        self.cap = VerifyCapacity(*self._tables[self.buckets[0]]["capacity"])
        self.forward = forward
        self.outputs = outputs
        self.req_to_token = req_to_token
        self.device: torch.device = req_to_token.device
        for name, t in _tensors(outputs):
            if not isinstance(t, torch.Tensor) or t.device != self.device:
                raise InvalidArgument(f"{name}: expected a torch.Tensor on {self.device} (the "
                                      f"device of req_to_token), got {_check.type_name(t)}"
                                      f"{' on ' + str(t.device) if hasattr(t, 'device') else ''}",
                                      field=name)
        self.mode = "cuda_graph" if self.device.type == "cuda" else "eager"
        self.pool = pool
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
        self.kv_slots = kv_slots
        self.capture_error_mode = capture_error_mode
        b = self.buckets[0]
        # The static inputs, padded throughout until staged.
        self._pool = torch.zeros(b, dtype=torch.int32, device=self.device)
        self._seq = torch.ones(b, dtype=torch.int32, device=self.device)
        self._mask = torch.ones(self.cap.mask_cells, dtype=torch.uint8, device=self.device)
        self._needed = torch.zeros((), dtype=torch.int64, device=self.device)
        self._given = 0
        self._graphs: Dict[int, torch.cuda.CUDAGraph] = {}
        self.replays: Counter[int] = Counter()
        self.report: Optional[CaptureReport] = None
        self.bucket = 0
        self.batch = 0
        # async checking (the shared AsyncFlag): the guard count and the mask check.
        self._async = AsyncFlag(self.device, 2, torch.int64)
        self._flag, self._host_flag = self._async.flag, self._async.host

    @staticmethod
    def _plan_of(plan: Optional[Plan], req_to_token: torch.Tensor,
                 buckets: Optional[Sequence[int]], max_seq_len: Optional[int],
                 draft_tokens: Optional[int], page_size: Optional[int],
                 kv_slots: Optional[int]) -> Plan:
        """The Plan whose verify section the graphs follow: `plan` (its buckets, M, D and page
        size; numbers given too must agree), or one made from the numbers (buckets, M, D, page
        size), the verify section of a one-step plan over req_to_token's rows."""
        if plan is not None:
            if not isinstance(plan, Plan):
                raise TypeError(f"plan: expected a specgraph.Plan or None, got "
                                f"{_check.type_name(plan)}")
            cfg = plan.config
            if cfg.verify_tokens == 0:
                raise InvalidArgument("plan: no verify section (DraftConfig(verify_tokens=D))",
                                      field="verify_tokens")
            for field, given, planned in (("max_seq_len", max_seq_len, cfg.max_context_len),
                                          ("draft_tokens", draft_tokens, cfg.verify_tokens),
                                          ("page_size", page_size, cfg.page_size)):
                if given is not None and given != planned:
                    raise InvalidArgument(f"{field}: {given}, but the plan's is {planned} (leave "
                                          "it out to use the plan's)", field=field)
            return plan
        if isinstance(buckets, (str, bytes)) or not hasattr(buckets, "__iter__"):
            raise TypeError(f"buckets: expected a sequence of ints, got "
                            f"{_check.type_name(buckets)}")
        for field, v in (("max_seq_len", max_seq_len), ("draft_tokens", draft_tokens),
                         ("page_size", page_size)):
            if v is None:
                raise TypeError(f"{field}: required without plan= (or pass a Plan with a verify "
                                "section)")
        chosen = sorted({_check.int_in(f"buckets[{i}]", b, 1, 1 << 20)
                         for i, b in enumerate(buckets)})
        if not chosen:
            raise InvalidArgument("buckets: empty, expected at least one batch size",
                                  field="buckets")
        d = _check.int_in("draft_tokens", draft_tokens, 1, 1 << 10)
        m = _check.index("max_seq_len", max_seq_len)
        ps = _check.index("page_size", page_size)
        verify_tables(chosen[-1], m, d, ps)  # the verify ranges, named as the verify op names them
        rows = int(req_to_token.shape[0]) if req_to_token.dim() == 2 else 1
        # The plan's kv_slots only bounds page ids (int32): the largest it accepts at this page
        # size (the op itself gets kv_slots, the caller's bound on every slot it reads).
        slots = ((1 << 31) - 1) * ps
        return make_plan(DraftConfig(max_batch=chosen[-1], topk=1, num_steps=1, page_size=ps,
                                     max_context_len=m, pool_rows=max(rows, 1), kv_slots=slots,
                                     buckets=tuple(chosen), verify_tokens=d))

    # ---- the body ----------------------------------------------------------------------------
    def view(self, bucket: int) -> VerifyView:
        """The outputs sliced to the bucket (C++'s sizes of it), with the static inputs."""
        o = bucket_outputs(self.outputs, self._tables[bucket]["fields"])
        cells = self._tables[bucket]["capacity"][3]  # B * D * (M + D)
        return VerifyView(bucket, o.fa3, o.flashinfer, self._pool[:bucket], self._seq[:bucket],
                          self._mask[:cells])

    def _record(self, bucket: int) -> None:
        b = bucket
        # Every request of the bucket counts as real: padded ones carry all-1 blocks (stage_).
        verify_metadata_(self.outputs, self.req_to_token, self._pool[:b], self._seq[:b],
                         self._mask[: self._tables[b]["capacity"][3]], draft_tokens=self.d,
                         page_size=self.ps, max_seq_len=self.m, real_batch=b, mask_exact=False,
                         kv_slots=self.kv_slots)
        self.forward(self.view(b))

    # ---- capture -----------------------------------------------------------------------------
    def capture(self) -> CaptureReport:
        """Captures graph(B) for every bucket (largest first): warm-ups on the capture stream,
        before_capture(B), then torch.cuda.graph into the pool. Raises CaptureFailed naming the
        bucket. On a CPU req_to_token only the warm-ups run (eagerly). Synchronises."""
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
        out_bytes = sum(t.numel() * t.element_size() for _, t in _tensors(self.outputs))
        self.report = CaptureReport(len(self._graphs), time.perf_counter() - start, timings,
                                    in_pool, out_bytes, self.mode)
        logger.info("verify graphs: %s", self.report.line())
        return self.report

    def _warm_up(self, bucket: int) -> None:
        with _failing(bucket, "warmup"):
            for _ in range(self.warmups):
                self._record(bucket)

    # ---- per round ---------------------------------------------------------------------------
    def stage_(self, bs: int, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
               custom_mask: torch.Tensor, bucket: Optional[int] = None) -> int:
        """Copies a round's inputs into the static ones, eagerly on the current stream (no
        sync); returns the bucket: the smallest captured >= bs, or `bucket` (captured, >= bs).
        req_pool_indices, seq_lens: [>= bs] int32 or int64 (narrowing as verify_metadata_);
        seq_lens WITHOUT the D verify tokens; custom_mask: uint8 or bool, exactly the real
        requests' cells (sum(D * (seq_len + D))), at most bs * D * (M + D)."""
        bs = _check.int_in("bs", bs, 1, self.buckets[0])
        fits = [b for b in self.buckets if b >= bs]
        chosen = min(fits) if bucket is None else _check.index("bucket", bucket)
        if self.report is None or chosen not in self.buckets or chosen < bs:  # captured ones
            raise InvalidArgument(f"bucket: {chosen} is not a captured bucket >= bs {bs} "
                                  f"(captured: {list(self.buckets)}; capture() first)",
                                  field="bucket")
        for field, t in (("req_pool_indices", req_pool_indices), ("seq_lens", seq_lens),
                         ("custom_mask", custom_mask)):
            if not isinstance(t, torch.Tensor) or t.device != self.device:
                raise InvalidArgument(f"{field}: expected a torch.Tensor on {self.device}",
                                      field=field)
            if t.numel() < (bs if field != "custom_mask" else 1):
                raise InvalidArgument(f"{field}: {t.numel()} entries, expected at least bs {bs}",
                                      field=field)
        n = custom_mask.numel()
        most = verify_tables(bs, self.m, self.d, self.ps)["capacity"][3]  # bs * D * (M + D)
        if n > most:
            raise InvalidArgument(f"custom_mask: {n} cells, more than bs * D * (max_seq_len + D)"
                                  f" = {most} (seq_lens must not include the D verify tokens)",
                                  field="custom_mask")
        if custom_mask.dtype not in (torch.uint8, torch.bool):
            raise InvalidArgument(f"custom_mask: dtype {custom_mask.dtype}, expected uint8 or "
                                  "bool", field="custom_mask")
        pool = _narrow("req_pool_indices", req_pool_indices.reshape(-1)[:bs])
        seq = _narrow("seq_lens", seq_lens.reshape(-1)[:bs])
        d = self.d
        wide = seq.to(torch.int64)
        in_range = (wide >= 1) & (wide <= self.m)
        self._needed.copy_((d * (wide + d) * in_range).sum())
        self._given = n
        # A mask of another length: every real request empty, recorded as bad input (seq 0).
        self._seq[:bs].copy_(torch.where(self._needed == n, seq, torch.zeros_like(seq)))
        self._pool[:bs].copy_(pool)
        self._pool[bs:chosen].fill_(0)
        self._seq[bs:chosen].fill_(1)
        self._mask[:n].copy_(custom_mask.reshape(-1))
        self._mask[n: n + (chosen - bs) * d * (1 + d)].fill_(1)
        self.bucket, self.batch = chosen, bs
        return chosen

    def run(self) -> None:
        """Replays graph(staged bucket) on the current stream (eagerly on a CPU), then the
        guard check of `checked`: sync reads the mask check and the guard words back (a sync)
        and raises InvalidArgument naming custom_mask, or GuardViolation naming the kernel and
        the request; async raises at a later run() or poll() once a count has landed."""
        if self.bucket == 0:
            raise InvalidArgument("bucket: nothing staged (call stage_ first)", field="bucket")
        if self.checked == "async":
            self.poll()
        if self.mode == "cuda_graph":
            self._graphs[self.bucket].replay()
        else:  # host memory: the mask check first (no sync), as the host twin refuses seq_len 0
            self._check_mask()
            self._record(self.bucket)
        self.replays[self.bucket] += 1
        if self.checked == "sync":
            self.check()
        elif self.checked == "async":
            words, n = GUARD_SHAPE  # each word's first int32 counts its violations
            self._flag[0].copy_(self.outputs.guard.reshape(-1)[0::n][:words].sum())
            self._flag[1].copy_(self._needed != self._given)
            self._async.record()

    def check(self) -> None:
        """Raises for the last run: InvalidArgument naming custom_mask when its length
        disagreed with the formula, else GuardViolation for the first guard word with a
        violation. Synchronises (reads device memory)."""
        self._check_mask()
        found = verify_violations(self.outputs.guard)
        if found:
            v = found[0]
            raise GuardViolation(f"verify graph of bucket {self.bucket}: {v.describe()}",
                                 buffer=v.kernel, bucket=self.bucket, row=v.row,
                                 column=v.column, kind=v.kind, kernel=v.kernel,
                                 capacity=v.capacity, value=v.value, violations=v.violations)

    def _check_mask(self) -> None:
        """InvalidArgument naming custom_mask when the staged mask's length disagrees with the
        formula over the staged seq_lens (a device read: a sync on CUDA)."""
        needed = int(self._needed)
        if needed == self._given:
            return
        doubled = self.d * self.d * self.batch
        why = (f"custom_mask: {self._given} cells, the formula sum(D * (seq_len + D)) over the "
               f"real requests gives {needed}")
        if self._given == needed - doubled:
            why += (f": seq_len seems to include the D verify tokens already (the mask is D * D "
                    f"* real_batch = {doubled} cells shorter); pass seq_len without the verify "
                    "tokens")
        raise InvalidArgument(why + " (every real request was left empty)", field="custom_mask")

    def poll(self) -> None:
        """async mode: raises once an earlier run's count has landed non-zero. Never waits."""
        landed = self._async.landed()
        if landed is None:
            return
        count, mask_bad = landed
        if count or mask_bad:
            also = " and a custom_mask of the wrong length" if mask_bad else ""
            raise GuardViolation(f"verify graphs: {count} guard violation(s){also} in an earlier "
                                 "run; checked=\"sync\" names the buffer and the request",
                                 violations=count)


def _tensors(o: VerifyOutputs) -> List[Tuple[str, Any]]:
    named = [("guard", o.guard)]
    for group in (o.fa3, o.flashinfer):
        if group is not None:
            named += list(zip(group._fields, group))
    return named

