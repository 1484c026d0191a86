"""RoundGraphs: the whole EAGLE round as one CUDA graph per bucket, over the three Python drivers
(docs/round-graphs.md section 6, the Python twin of draft_runtime's device-round graphs).

    dg = specgraph.torch.DraftGraphs(bufs, draft_forward, req_to_token=req_to_token)
    vg = specgraph.verify_graphs.VerifyGraphs(verify_forward, outputs=outputs,
                                              req_to_token=req_to_token, plan=bufs.plan)
    eg = specgraph.extend_graphs.ExtendGraphs(dg, extend_forward)   # plans with draft_extend
    rg = specgraph.round_graphs.RoundGraphs(dg, vg, eg, ring, ring_tail, stop_token_count=1)
    rg.capture()                           # graph(B) per bucket, into dg's pool
    rg.stage_(bs, req_pool_indices, seq_lens, out_cache_loc)    # the first round only
    v = round_view(bufs, rg.bucket)        # v.allocated_len[:] = ...; v.stop_token_ids[:] = ...
    rg.run(8)                              # 8 replays back to back, no host sync
    ...v.finished, v.free_begin / v.free_end, v.stall: the host steps in (docs section 6.4)...

graph(B), in this order (the C++ graph's, docs/round-graphs.md section 6.1):
  1. dg's step bodies for steps 0 .. num_steps - 1 (round_setup_ at step 0, each step's metadata,
     the engine's draft forward);
  2. the verify round: the staged req_pool_index and seq_len copied into vg's static inputs (the
     verify round is the draft round's requests; padded rows are pool row 0, seq_len 1 as vg
     pads them), then vg's body: verify_metadata_ and the engine's verify forward, which writes
     the round section's parent, draft_token and target_predict (round_view);
  3. after_verify_(part="accept_commit"): the section's guard reset, acceptance, the commit;
  4. with draft_extend, the handoff: the accept_len the extend graphs read (the tensor bound with
     ExtendGraphs(..., accept_len=), else the section's) = accept_length + 1 for real rows, 1
     for padded rows, 0 for a length outside [0, num_steps] (draft extend records and pads it),
     as the C++ launch_extend_handoff; then eg's body: extend_arena_ and the extend forward;
  5. after_verify_(part="next"): seq_len' and the draft slots into the staged inputs;
  6. the guard tally: for every guard word of the arena and of vg's outputs, the rounds in
     which it was set are counted, and the word as the first of them left it is kept (the
     rounds reset the live words; check() reads the tally and names that first round's row,
     column and value).
Draft extend runs before the next round: it reads the staged seq_len as the verify round's,
which the next round overwrites. The verify mask is vg's static mask buffer (vg.stage_ fills
it): a draft forward that needs another writes it there (docs/round-graphs.md section 6.2).

On a CPU arena nothing is captured: capture() runs the warm-ups and run(k) runs the same body
eagerly k times, so the driver is usable and testable without a GPU (as the three drivers).

| function                | stream                      | synchronises             | capture-safe |
|-------------------------|-----------------------------|--------------------------|--------------|
| RoundGraphs(...)        | none (host checks)          | no                       | no           |
| capture                 | a side stream, then joined  | yes                      | no           |
| stage_                  | current                     | no                       | no (eager)   |
| run(k)                  | current                     | no (checked="sync": yes) | no (replays) |
| check                   | current                     | yes (reads the tally)    | no           |
| rounds_with_violations  | current                     | yes                      | no           |
| first_violation         | current                     | yes                      | no           |
| poll                    | none                        | no (never waits)         | no           |
| reset_guards            | current                     | no                       | yes          |
| accept_len              | none (a view)               | no                       | yes          |
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
        "specgraph.round_graphs (RoundGraphs over torch.cuda.graph) needs torch, which is not "
        f"installed: {INSTALL['torch']} (import specgraph works without it)",
        name="torch") from _e

from . import _check, _env
from ._capture import ROUND, AsyncFlag, CaptureReport, GraphTiming, capture_graphs, warm_up_round
from ._guard_names import WORD_INT32S, Violation, word_violation
from .errors import CaptureFailed, GuardViolation, InvalidArgument
from .extend_arena import extend_view
from .extend_graphs import ExtendGraphs
from .ops import read_guards, stage_
from .round_arena import after_verify_, round_view
from .torch import MAX_WARMUPS, DraftGraphs
from .verify import GUARD_SHAPE
from .verify_graphs import VerifyGraphs

logger = logging.getLogger("specgraph")

MAX_ROUNDS = 1 << 20  # run(k): k in [1, MAX_ROUNDS], as the C++ launch_device_rounds

__all__ = ["MAX_ROUNDS", "RoundGraphs"]


@contextlib.contextmanager
def _failing(bucket: int, what: str) -> Iterator[None]:
    try:
        yield
    except CaptureFailed:
        raise
    except Exception as e:
        raise CaptureFailed(f"{what} of the device-round graph of bucket {bucket} failed: "
                            f"{type(e).__name__}: {e}", bucket=bucket, step=ROUND) from e


def _refuse(field: str, why: str) -> None:
    raise InvalidArgument(f"{field}: {why}", field=field)


class RoundGraphs:
    """Captures and replays the whole round of every bucket with torch.cuda.graph.

    draft_graphs: a DraftGraphs over a plan with a round section (DraftConfig(verify_tokens=D,
    round_on_device=True)), staged inputs (no inputs=) and neither device_steps nor device_depth
    (the round runs num_steps steps); its req_to_token is the table every op reads and the round
    writes. verify_graphs: a VerifyGraphs of the same plan's verify section (plan=) over that
    very req_to_token tensor. extend_graphs: an ExtendGraphs of draft_graphs when the plan has
    draft_extend, else None. ring: the engine's int32 [ring_capacity] free page ids; ring_tail:
    its int64 [1] tail counter (both read on the device every round; they must not move).
    stop_token_count: the first ids of round_view(...).stop_token_ids in use. budget: True reads
    max_new_tokens_left and the commit runs it down in place each round (default False: no
    budget). A row that finished (a stop token or its budget) idles until the host restages it
    and clears its finished flag (docs/round-graphs.md section 4). buckets: a subset of
    draft_graphs.buckets, each also a bucket of verify_graphs and extend_graphs (default all of
    draft_graphs'). pool (default draft_graphs.pool), stream, warmups, before_capture(bucket),
    checked, capture_error_mode: as ExtendGraphs.
    """

    def __init__(self, draft_graphs: DraftGraphs, verify_graphs: VerifyGraphs,
                 extend_graphs: Optional[ExtendGraphs], ring: torch.Tensor,
                 ring_tail: torch.Tensor, *, stop_token_count: int = 0, budget: bool = False,
                 buckets: Optional[Sequence[int]] = None, pool: Any = None,
                 stream: Optional[torch.cuda.Stream] = None, warmups: int = 2,
                 before_capture: Optional[Callable[[int], None]] = None,
                 checked: Optional[str] = None, capture_error_mode: str = "global") -> None:
        dg, vg, eg = draft_graphs, verify_graphs, extend_graphs
        for name, x, kind in (("draft_graphs", dg, DraftGraphs),
                              ("verify_graphs", vg, VerifyGraphs)):
            if not isinstance(x, kind):
                raise TypeError(f"{name}: expected specgraph.{kind.__module__.split('.')[-1]}."
                                f"{kind.__name__}, got {_check.type_name(x)}")
        cfg = dg.plan.config
        if not cfg.round_on_device:
            _refuse("round_on_device", "false: the draft graphs' plan has no round section; "
                    "pass DraftConfig(verify_tokens=D, round_on_device=True)")
        if dg.inputs is not None:
            _refuse("inputs", "the draft graphs read bound inputs in place, but the round writes "
                    "the next round's seq_len and draft slots into the staged inputs "
                    "(DraftGraphs without inputs=, the first round staged with stage_)")
        if dg.device_steps or dg.device_depth:
            _refuse("device_steps", "the draft graphs' plan has a device step counter "
                    "(device_steps or device_depth); the round graph runs num_steps steps: "
                    "plan without them")
        if (vg.d, vg.m, vg.ps) != (cfg.verify_tokens, cfg.max_context_len, cfg.page_size):
            _refuse("verify_graphs", f"D {vg.d}, M {vg.m}, page size {vg.ps}, but the plan's "
                    f"are {cfg.verify_tokens}, {cfg.max_context_len}, {cfg.page_size}: build "
                    "VerifyGraphs(..., plan=draft_graphs.plan)")
        r2t = dg.req_to_token
        if vg.req_to_token is not r2t:
            _refuse("req_to_token", "the verify graphs read another req_to_token tensor than the "
                    "draft graphs; the round writes the table every metadata op reads: pass "
                    "VerifyGraphs(..., req_to_token=draft_graphs.req_to_token)")
        if cfg.draft_extend and eg is None:
            _refuse("extend_graphs", "None, but the plan has draft_extend: pass "
                    "ExtendGraphs(draft_graphs, extend_forward)")
        if eg is not None and (not isinstance(eg, ExtendGraphs) or eg.draft_graphs is not dg):
            what = "the ExtendGraphs of other draft graphs" if isinstance(eg, ExtendGraphs) \
                else _check.type_name(eg)
            _refuse("extend_graphs", "expected the ExtendGraphs of these draft graphs "
                    f"(ExtendGraphs(draft_graphs, ...)), got {what}")
        self.device: torch.device = dg.device
        for name, t, dtype, ok in (("ring", ring, torch.int32, lambda t: t.dim() == 1),
                                   ("ring_tail", ring_tail, torch.int64,
                                    lambda t: tuple(t.shape) == (1,))):
            if not isinstance(t, torch.Tensor) or t.device != self.device or \
                    t.dtype != dtype or not ok(t) or not t.is_contiguous():
                shape = "[ring_capacity] page ids" if name == "ring" else "[1] (the tail)"
                got = (f"{t.dtype} {tuple(t.shape)} on {t.device}"
                       if isinstance(t, torch.Tensor) else _check.type_name(t))
                _refuse(name, f"expected a contiguous {dtype} tensor {shape} on "
                        f"{self.device}, got {got}")
        chosen = [_check.member(f"buckets[{i}]", b, dg.buckets, "the draft graphs' buckets")
                  for i, b in enumerate(buckets or ())] or list(dg.buckets)
        for b in chosen:
            for name, held in (("verify_graphs", vg.buckets),
                               ("extend_graphs", () if eg is None else eg.buckets)):
                if (eg is not None or name == "verify_graphs") and b not in held:
                    _refuse("buckets", f"bucket {b} is not one of the {name}' buckets "
                            f"{list(held)}: pass buckets= a subset of both")
        self.buckets: Tuple[int, ...] = tuple(sorted(set(chosen), reverse=True))
        self.plan, self.bufs = dg.plan, dg.bufs
        self.draft_graphs, self.verify_graphs, self.extend_graphs = dg, vg, eg
        self.req_to_token, self.ring, self.ring_tail = r2t, ring, ring_tail
        cap = self.plan.layout["round"]["stop_capacity"]
        self.stop_token_count = _check.int_in("stop_token_count", stop_token_count, 0, cap)
        self.budget = _check.boolean("budget", budget)
        self.mode = dg.mode
        self.pool = dg.pool if pool is None else pool
        self.stream = stream
        self.warmups = _check.int_in("warmups", warmups, 0, MAX_WARMUPS)
        if before_capture is not None and not callable(before_capture):
            raise TypeError(f"before_capture: expected a callable (bucket) or None, got "
                            f"{_check.type_name(before_capture)}")
        self.before_capture = before_capture
        self.checked = _env.CHECKED if checked is None else checked
        if self.checked not in _env.CHECKED_MODES:
            _refuse("checked", f"{self.checked!r} is not off, async or sync")
        self.capture_error_mode = capture_error_mode
        # The handoff's row index and the guard tally (rounds in which each word was set): the
        # arena's words, then vg's.
        self._rows = torch.arange(self.buckets[0], dtype=torch.int32, device=self.device)
        self._words = int(self.plan.layout["guard_count"])
        self.tally = torch.zeros(self._words + GUARD_SHAPE[0], dtype=torch.int64,
                                 device=self.device)
        # Each word as it was in the first round that set it, and that round (1-based, counted
        # since the last reset): check() names its row, column and value.
        self._first = torch.zeros(self._words + GUARD_SHAPE[0], WORD_INT32S, dtype=torch.int32,
                                  device=self.device)
        self._first_round = torch.zeros_like(self.tally)
        self._round = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._graphs: Dict[int, Any] = {}
        self.replays: Counter[int] = Counter()
        self.report: Optional[CaptureReport] = None
        self.bucket = 0  # of the staged round (0: none)
        self.batch = 0
        self._async = AsyncFlag(self.device, 1, torch.int64)

    # ---- the body ----------------------------------------------------------------------------
    def accept_len(self, bucket: int) -> torch.Tensor:
        """The accept_len [bucket] the extend graphs read, which the handoff writes."""
        eg = self.extend_graphs
        if eg is not None and eg.accept_len is not None:
            return eg.accept_len[:bucket]
        return extend_view(self.bufs, bucket).accept_len

    def _after_verify(self, bucket: int, part: str) -> None:
        after_verify_(self.bufs, bucket, self.req_to_token, self.ring, self.ring_tail,
                      stop_token_count=self.stop_token_count, budget=self.budget, part=part)

    def _record(self, bucket: int) -> None:
        b, bufs, vg, eg = bucket, self.bufs, self.verify_graphs, self.extend_graphs
        self.draft_graphs._body.record(b, ROUND, False)  # steps 0 .. num_steps - 1
        # The verify round is the draft round's requests, as staged (or as the last round left
        # them); padded rows are pool 0, seq_len 1 there, as vg's own padding.
        vg._pool[:b].copy_(bufs.req_pool_index[:b])
        vg._seq[:b].copy_(bufs.seq_len[:b])
        vg._record(b)
        self._after_verify(b, "accept_commit")
        if eg is not None:
            acc = round_view(bufs, b).accept_length
            ok = (acc >= 0) & (acc <= self.plan.config.num_steps)
            real = torch.where(ok, acc + 1, torch.zeros_like(acc))
            self.accept_len(b).copy_(torch.where(self._rows[:b] < bufs.real_batch, real,
                                                 torch.ones_like(acc)))
            # Rows acceptance accepted nothing for (idle, stalled) are inactive: padded there.
            eg._record(b, accept_index=round_view(bufs, b).accept_index)
        self._after_verify(b, "next")
        raw = torch.cat([bufs.guards, vg.outputs.guard.reshape(GUARD_SHAPE)])
        self._round.add_(1)
        set_now = raw[:, 0] != 0
        fresh = set_now & (self.tally == 0)
        self._first.copy_(torch.where(fresh[:, None], raw, self._first))
        self._first_round.copy_(torch.where(fresh, self._round, self._first_round))
        self.tally.add_(set_now.to(torch.int64))

    # ---- capture -----------------------------------------------------------------------------
    def capture(self) -> CaptureReport:
        """Captures graph(B) for every bucket (largest first): warm-ups on the capture stream
        over an idle round staged into B (capture before staging rounds), before_capture(B),
        then torch.cuda.graph into the pool. Raises CaptureFailed naming the bucket. On a CPU
        arena only the warm-ups run (eagerly). Drops a staged round and empties the guard
        tally. Synchronises; not during another capture."""
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
        self.bucket = self.batch = 0
        self.reset_guards()
        self.report = CaptureReport(len(self._graphs), time.perf_counter() - start, timings,
                                    in_pool, self.plan.total_bytes, self.mode)
        logger.info("round graphs: %s", self.report.line())
        return self.report

    def _warm_up(self, bucket: int) -> None:
        with _failing(bucket, "warmup"):
            for _ in range(self.warmups):
                warm_up_round(self.bufs, bucket, ROUND, None)  # an idle round: defined rows
                self._record(bucket)

    # ---- per round ---------------------------------------------------------------------------
    def stage_(self, bs: int, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
               out_cache_loc: torch.Tensor, bucket: Optional[int] = None) -> int:
        """specgraph.stage_ of a round (the first one, or after the host stepped in), eagerly on
        the current stream, no sync; returns the bucket: `bucket` (captured here, >= bs) or the
        smallest planned bucket >= bs, which must be captured here. The engine then writes the
        round section's per-row state (round_view: allocated_len, max_new_tokens_left, the
        stop ids, ring_head, stall) as for after_verify_. Refusals: "bs", "bucket"."""
        bs = _check.index("bs", bs)
        chosen = self.plan.round_bucket(bs, bucket)  # an unplanned or too small one, by name
        if self.report is None or chosen not in self.buckets:
            _refuse("bucket", f"{chosen} has no device-round graph (captured: "
                    f"{list(self.buckets) if self.report else []}; capture() first)")
        self.bucket = stage_(self.bufs, bs, req_pool_indices, seq_lens, out_cache_loc,
                             bucket=chosen)
        self.batch = bs
        return self.bucket

    def run(self, k: int = 1) -> None:
        """Replays graph(staged bucket) k times back to back on the current stream (eagerly on
        a CPU arena: the body k times): k whole rounds, no host sync, no host work in between.
        Then the check of `checked`: sync calls check() (a sync); async raises at a later run()
        or poll() once the tally's count has landed. The tally is sticky, as C++'s guard
        summary: it keeps raising until reset_guards(). Refusals (nothing run): "k" (outside
        [1, MAX_ROUNDS]), "capture" (before capture()), "stage_" (before stage_)."""
        k = _check.int_in("k", k, 1, MAX_ROUNDS)
        if self.report is None:
            _refuse("capture", "run before capture(): no device-round graphs exist")
        if self.bucket == 0:
            _refuse("stage_", "run before stage_: no round is staged (stage the first round; "
                    "later rounds read what the last one left)")
        if self.checked == "async":
            self.poll()
        for _ in range(k):
            if self.mode == "cuda_graph":
                self._graphs[self.bucket].replay()
            else:
                self._record(self.bucket)
        self.replays[self.bucket] += k
        if self.checked == "sync":
            self.check()
        elif self.checked == "async":
            self._async.flag.copy_(self.tally.sum().reshape(1))
            self._async.record()

    def rounds_with_violations(self) -> Dict[str, int]:
        """{guard word: rounds in which it was set} since capture() or reset_guards(), the
        arena's words by their names (read_guards) and vg's as "verify word i". Synchronises."""
        counts = [int(x) for x in self.tally.cpu()]
        return {n: c for n, c in zip(self._names(), counts) if c}

    def _names(self) -> List[str]:
        """The tally's words: the arena's by their names (read_guards), then vg's."""
        return [w.buffer for w in read_guards(self.bufs)] + \
            [f"verify word {i}" for i in range(GUARD_SHAPE[0])]

    def first_violation(self, word: str) -> Optional[Tuple[int, Violation]]:
        """(round, details) of a word of rounds_with_violations() as the first round that set
        it left it (round: 1-based since capture() or reset_guards()); None when it was never
        set. Synchronises."""
        i = self._names().index(word)
        if int(self.tally[i]) == 0:
            return None
        return int(self._first_round[i]), word_violation(self._first[i].cpu().tolist())

    def check(self) -> None:
        """Raises GuardViolation naming the first guard word set in any round since capture()
        or reset_guards(), with the number of rounds, and the details (row, column, capacity,
        value) as the first round that set it recorded them. Synchronises."""
        found = self.rounds_with_violations()
        if found:
            word, rounds = next(iter(found.items()))
            first = self.first_violation(word)
            assert first is not None
            at, v = first
            raise GuardViolation(f"device-round graph of bucket {self.bucket}: {word} was set "
                                 f"in {rounds} round(s) since the last reset_guards(), first in "
                                 f"round {at}: {v.describe()} (all set words: {found})",
                                 buffer=word, bucket=self.bucket, violations=rounds, row=v.row,
                                 column=v.column, kind=v.kind, kernel=v.kernel,
                                 capacity=v.capacity, value=v.value)

    def poll(self) -> None:
        """async mode: raises once an earlier run's tally has landed non-zero. Never waits."""
        landed = self._async.landed()
        if landed and landed[0]:
            raise GuardViolation(f"round graphs: guard words set {landed[0]} time(s) in earlier "
                                 "rounds; check() names them", violations=landed[0])

    def reset_guards(self) -> None:
        """Empties the guard tally and the first rounds' details (stream-ordered fills, no
        sync)."""
        for t in (self.tally, self._first, self._first_round, self._round):
            t.zero_()
