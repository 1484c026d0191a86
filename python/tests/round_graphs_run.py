"""K rounds of specgraph.round_graphs.RoundGraphs driven three ways (test_round_graphs.py on CPU
tensors, test_round_graphs_cuda.py on a GPU):

  (a) RoundGraphs.run(K): K whole rounds back to back, no host step in between;
  (b) the same rounds op by op from Python on a second arena: DraftGraphs.run_round,
      VerifyGraphs.stage_ / run, after_verify_(part="accept_commit"), ExtendGraphs.stage_ (the
      host's accept_length + 1) / run, after_verify_(part="next");
  (c) the independent reference scripts/outside-check/accept_spec_reference.py (round_arena_run
      loads it), chained over the rounds on host lists.

The engine's verify forward is a toy target model: it writes a fixed random tree per row and
draft / target tokens hashed from (the verify round's seq_len, pool row, node), so accepted
lengths vary from round to round; (c) computes the same hash on the host. The extend forward
logs, per round at a device counter, what acceptance and the commit wrote and what draft extend
reads (its accept_len and the staged seq_len)."""

from __future__ import annotations

import random
from typing import Any, Dict, List

import numpy as np
import torch

import specgraph
import specgraph.torch as sgt
from specgraph.extend_graphs import ExtendGraphs
from specgraph.round_arena import after_verify_, round_view
from specgraph.round_graphs import RoundGraphs
from specgraph.verify_graphs import VerifyGraphs
from round_arena_run import ref

TOKENS = 3  # a small alphabet: drafts are often accepted
POOL_ROWS = 9
LOG = 16  # rounds the extend forward's log holds
# (topk, num_steps, page size, D)
SHAPES = [(1, 3, 1, 4), (2, 2, 4, 5), (2, 3, 2, 7)]


def token(seq: Any, pool: Any, node: Any, salt: int) -> Any:
    """The toy model's token for (seq_len, pool row, node): the same on torch and numpy int64."""
    x = seq * 1009 + pool * 9176 + node * 131 + salt * 7
    return (x * x % 1000003) % TOKENS


def make_plan(topk: int, num_steps: int, ps: int, d: int, extend: bool = True, m: int = 96,
              **more: Any):
    return specgraph.make_plan(specgraph.DraftConfig(
        max_batch=4, topk=topk, num_steps=num_steps, page_size=ps, max_context_len=m,
        pool_rows=POOL_ROWS, kv_slots=1 << 22, buckets=(2, 4), verify_tokens=d,
        round_on_device=True, max_stop_tokens=2, draft_extend=extend, **more))


class Case:
    """One case's first round and its per-case constants, as host lists."""

    def __init__(self, plan, seed: int) -> None:
        rng = random.Random(seed)
        c = plan.config
        self.plan, self.rng = plan, rng
        self.d, self.ps, self.width = c.verify_tokens, c.page_size, c.max_context_len
        self.real = rng.randint(1, 4)
        self.bucket = plan.round_bucket(self.real)
        reserve = plan.layout["round"]["reserve"]
        pages = rng.sample(range(1, (1 << 22) // self.ps), 600)
        self.pool = rng.sample(range(1, POOL_ROWS), self.real)
        self.seq = [rng.randint(1, 24) for _ in range(self.real)]
        self.al = [min(self.width, s + self.d + rng.randint(0, reserve)) for s in self.seq]
        self.rtt = np.full((POOL_ROWS, self.width), -9, np.int32)
        self.rtt[0] = np.arange(self.width)  # the padding rows' pool row: read, never written
        for p, a in zip(self.pool, self.al):
            for q in range(-(-a // self.ps)):
                page = pages.pop()
                n = min(self.ps, a - q * self.ps)
                self.rtt[p, q * self.ps: q * self.ps + n] = page * self.ps + np.arange(n)
        self.ring = np.array(pages[:256], np.int32)  # every page published: tail 256
        self.parent = np.zeros((4, self.d), np.int32)
        for r in range(4):  # valid trees of depth <= num_steps, some orphans
            depth = [0] * self.d
            self.parent[r, 0] = -1
            for i in range(1, self.d):
                open_ = [u for u in range(i) if depth[u] < c.num_steps]
                p = rng.choice(open_) if open_ and rng.random() > 0.1 else -1
                self.parent[r, i] = p
                depth[i] = depth[p] + 1 if p >= 0 else c.num_steps + 1
        self.left = [rng.choice([3, 6, 12, 60]) for _ in range(4)]
        self.stops = [TOKENS + 1, 1]  # the first never drafted, the second often
        self.stop_count = rng.randint(0, 2)
        self.budget = rng.random() < 0.5
        self.salt = rng.randrange(1000)


class Logger:
    """The extend forward: per round (a device counter) the round section's acceptance and
    commit outputs, the accept_len draft extend reads and the staged seq_len it reads."""

    def __init__(self, plan, bufs, device, accept_len) -> None:
        self.bufs, self.accept_len = bufs, accept_len  # accept_len(bucket) -> the read tensor
        s = plan.config.num_steps + 1
        self.n = torch.zeros(1, dtype=torch.int64, device=device)
        z = lambda *shape: torch.zeros((LOG, 4) + shape, dtype=torch.int32,  # noqa: E731
                                       device=device)
        self.w = plan.config.verify_tokens
        self.log = dict(accept_index=z(s), accept_length=z(), bonus=z(), finished=z(),
                        accept_len=z(), seq_len=z(), extend_slot=z())

    def __call__(self, v) -> None:
        b, rv = v.bucket, round_view(self.bufs, v.bucket)
        at = self.n.clamp(max=LOG - 1)
        got = dict(accept_index=rv.accept_index, accept_length=rv.accept_length,
                   bonus=rv.bonus, finished=rv.finished, accept_len=self.accept_len(b),
                   seq_len=self.bufs.seq_len[:b],
                   # the extend metadata's first window slot per row (0: a padded row)
                   extend_slot=v.tokens.out_cache_loc[: b * self.w : self.w])
        for name, t in got.items():
            self.log[name][:, :b].index_copy_(0, at, t.reshape((1,) + tuple(t.shape)))
        self.n.add_(1)

    def rounds(self, k: int, b: int) -> Dict[str, List[Any]]:
        assert int(self.n[0]) == k
        return {n: t[:k, :b].cpu().tolist() for n, t in self.log.items()}


class Side:
    """One arena with its drivers and the engine's tensors (a or b)."""

    def __init__(self, case: Case, device: str, round_driver: bool, bound: bool = False) -> None:
        plan, c = case.plan, case.plan.config
        self.case, self.device = case, device
        arena = specgraph.host_arena(plan, framework="torch") if device == "cpu" else \
            torch.zeros(plan.total_bytes, dtype=torch.uint8, device=device)
        self.bufs = bufs = specgraph.buffers(plan, arena)
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        self.t = t
        self.rtt, self.ring = t(case.rtt), t(case.ring)
        self.tail = t(np.array([case.ring.size], np.int64))
        parent = t(case.parent)
        node = torch.arange(case.d, device=device)[None, :]

        def verify_forward(v) -> None:
            rv = round_view(bufs, v.bucket)
            seq, pool = v.seq_lens.long()[:, None], v.req_pool_indices.long()[:, None]
            rv.parent.copy_(parent[: v.bucket])
            rv.draft_token.copy_(token(seq, pool, node, case.salt))
            rv.target_predict.copy_(token(seq, pool, node, case.salt + 1))

        self.dg = sgt.DraftGraphs(bufs, lambda v: None, req_to_token=self.rtt, warmups=1)
        self.vg = VerifyGraphs(verify_forward, outputs=specgraph.verify_outputs(
            4, c.max_context_len, c.verify_tokens, c.page_size, device=device),
            req_to_token=self.rtt, plan=plan, warmups=1)
        self.acc = torch.full((4,), 7, dtype=torch.int32, device=device) if bound else None
        self.eg = self.rg = None
        self.logger = None
        if c.draft_extend:
            self.logger = Logger(plan, bufs, device, lambda b: (
                self.rg.accept_len(b) if self.rg is not None else
                specgraph.extend_arena.extend_view(bufs, b).accept_len))
            self.eg = ExtendGraphs(self.dg, self.logger, accept_len=self.acc, warmups=1)
        if round_driver:
            self.rg = RoundGraphs(self.dg, self.vg, self.eg, self.ring, self.tail,
                                  stop_token_count=case.stop_count, budget=case.budget,
                                  warmups=1)
            self.rg.capture()
        else:
            self.dg.capture()
            self.vg.capture()
            if self.eg is not None:
                self.eg.capture()
        if self.logger is not None:
            self.logger.n.zero_()  # the warm-ups logged too
        self.stage()

    def stage(self) -> None:
        case, c = self.case, self.case.plan.config
        pool, seq = self.t(np.array(case.pool, np.int32)), self.t(np.array(case.seq, np.int32))
        slots = self.t(np.zeros(case.real * c.topk * c.slot_stride, np.int64))
        drv = self.rg if self.rg is not None else self.dg
        assert drv.stage_(case.real, pool, seq, slots, bucket=case.bucket) == case.bucket
        v = round_view(self.bufs, case.bucket)
        b, real = case.bucket, case.real
        v.allocated_len.copy_(self.t(np.array(case.al + [0] * (b - real), np.int32)))
        v.max_new_tokens_left.copy_(self.t(np.array(case.left[:b], np.int32)))
        v.stop_token_ids.copy_(self.t(np.array(case.stops, np.int32)))
        v.ring_head.zero_()
        v.stall.zero_()

    def op_by_op(self, k: int) -> None:
        """(b): the rounds driven from Python, one op at a time."""
        case, bufs = self.case, self.bufs
        b, real, d = case.bucket, case.real, case.d
        args = (bufs, b, self.rtt, self.ring, self.tail)
        kw = dict(stop_token_count=case.stop_count, budget=case.budget)
        for _ in range(k):
            self.dg.run_round()
            seq = bufs.seq_len[:real].cpu().tolist()  # the verify mask's exact length
            mask = torch.ones(sum(d * (s + d) for s in seq), dtype=torch.uint8,
                              device=self.device)
            self.vg.stage_(real, bufs.req_pool_index, bufs.seq_len, mask, bucket=b)
            self.vg.run()
            after_verify_(*args, **kw, part="accept_commit")
            if self.eg is not None:
                acc = round_view(bufs, b).accept_length[:real].cpu().tolist()
                self.eg.stage_([a + 1 for a in acc])
                self.eg.run()
            after_verify_(*args, **kw, part="next")

    def final(self) -> Dict[str, Any]:
        b = self.case.bucket
        v = round_view(self.bufs, b)
        ns = self.case.plan.config.num_steps
        return dict(seq_len=v.seq_len.cpu().tolist(), allocated_len=v.allocated_len.cpu().tolist(),
                    left=v.max_new_tokens_left.cpu().tolist(),
                    req_to_token=self.rtt.cpu().tolist(), ring_head=int(v.ring_head[0]),
                    stall=int(v.stall[0]), slots=v.out_cache_loc[:, :, :ns].cpu().tolist(),
                    finished=v.finished.cpu().tolist(), bonus=v.bonus.cpu().tolist())


def reference(case: Case, k: int) -> Dict[str, Any]:
    """(c): the independent reference chained over k rounds on host lists. A row that
    finished (a stop token or its budget) is idle in the rounds after it (the reference's
    `idle` input): padding, no pages, still finished, its budget kept. "rounds": how many ran."""
    c, b, real = case.plan.config, case.bucket, case.real
    seq = case.seq + [1] * (b - real)
    pool = case.pool + [0] * (b - real)
    al = case.al + [0] * (b - real)
    rtt = case.rtt.copy()
    head = 0
    left = list(case.left[:b])
    node = np.arange(case.d)[None, :]
    per: Dict[str, List[Any]] = {n: [] for n in ("accept_index", "accept_length", "bonus",
                                                 "finished", "accept_len", "seq_len",
                                                 "extend_slot")}
    rounds = 0
    idle = [False] * b
    for _ in range(k):
        rounds += 1
        s, p = np.array(seq, np.int64)[:, None], np.array(pool, np.int64)[:, None]
        d = dict(page_size=case.ps, topk=c.topk, num_steps=c.num_steps,
                 num_draft_tokens=case.d, seq_len=list(seq), req_pool_index=list(pool),
                 req_to_token=rtt.tolist(), parent=case.parent[:b].tolist(),
                 draft_token=token(s, p, node, case.salt).tolist(),
                 target_predict=token(s, p, node, case.salt + 1).tolist(),
                 allocated_len=list(al), free_pages=case.ring[head:].tolist(),
                 reserve=case.plan.layout["round"]["reserve"],
                 stop_token_ids=case.stops[: case.stop_count], real_batch=real,
                 idle=list(idle))
        if case.budget:
            d["max_new_tokens_left"] = list(left)
        want = ref.accept(d)
        per["accept_index"].append(want["accept_index"])
        per["accept_length"].append(want["accept_length"])
        per["bonus"].append(want["bonus_token"])
        per["finished"].append([int(f) for f in want["finished"]])
        per["accept_len"].append([a + 1 if r < real else 1
                                  for r, a in enumerate(want["accept_length"])])
        per["seq_len"].append(list(seq))
        # The round graphs' extend pads a row acceptance accepted nothing for (an idle one):
        # its window at seq_len 1 would be its own committed prefix.
        per["extend_slot"].append([int(rtt[pool[r]][seq[r]]) if r < real and not idle[r] else 0
                                   for r in range(b)])
        for row, q, slot in want["req_to_token_writes"]:
            rtt[row][q] = slot
        seq, al = list(want["next_round"]["seq_len"]), list(want["allocated_len"])
        head += want["pages_taken"]
        if case.budget:  # the commit runs the budget down in place on the live real rows
            left = [x - want["emit_len"][r] if r < real and not idle[r] else x
                    for r, x in enumerate(left)]
        idle = [r < real and bool(f) for r, f in enumerate(want["finished"])]
        last = want
    nr = last["next_round"]
    return dict(rounds=rounds, per=per, seq_len=seq, allocated_len=al, left=left, req_to_token=rtt.tolist(),
                ring_head=head, stall=int(any(x["kind"] == "ring" for x in last["violations"])),
                slots=nr["draft_out_cache_loc"], finished=per["finished"][-1],
                bonus=per["bonus"][-1])


def three_ways(shape, seed: int, device: str = "cpu", k: int = 6, extend: bool = True,
               bound: bool = False) -> Dict[str, int]:
    """(a), (b) and (c) over one case: every round's acceptance, commit and draft extend's
    inputs, and the final state, equal. Returns what the rounds saw."""
    case = Case(make_plan(*shape, extend=extend), seed)
    want = reference(case, k)
    k = want["rounds"]
    a = Side(case, device, round_driver=True, bound=bound)
    b = Side(case, device, round_driver=False)
    a.rg.run(k)
    b.op_by_op(k)
    got_a, got_b = a.final(), b.final()
    names = ["seq_len", "allocated_len", "req_to_token", "ring_head", "stall", "slots",
             "finished", "bonus"] + (["left"] if case.budget else [])
    for name in names:
        assert got_a[name] == want[name], (name, "round graphs", seed)
        assert got_b[name] == want[name], (name, "op by op", seed)
    if extend:
        rounds_a = a.logger.rounds(k, case.bucket)
        rounds_b = b.logger.rounds(k, case.bucket)
        for name, rows in want["per"].items():
            exp = [np.array(r, np.int64).reshape(np.array(rounds_a[name][i]).shape).tolist()
                   for i, r in enumerate(rows)]
            assert rounds_a[name] == exp, (name, "round graphs", seed)
            if name != "extend_slot":  # op by op: the extend graph alone reads every real row
                assert rounds_b[name] == exp, (name, "op by op", seed)
    assert a.rg.replays[case.bucket] == k
    per = want["per"]
    assert a.rg.rounds_with_violations() == {}, a.rg.rounds_with_violations()
    return dict(rounds=k, accepted=sum(map(sum, per["accept_length"])),
                finished=sum(map(sum, per["finished"])), padded=case.bucket - case.real,
                pages=want["ring_head"])
