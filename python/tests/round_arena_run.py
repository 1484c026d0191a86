"""Rounds of specgraph.round_arena.after_verify_ as an engine would drive them, and their
comparison with the independent reference scripts/outside-check/accept_spec_reference.py
(../shared/spec/round-on-device.md sections 2 to 7, written from the spec alone), loaded by path.

An Engine holds the host's side: the req_to_token table, the ring of free pages (its tail), the
pages not handed out yet, and the requests it staged. Each round writes a fresh random tree
into the section (real rows valid trees of depth <= num_steps with some orphans, padded rows
junk), runs the op, and checks every output cell, the staged seq_len and out_cache_loc,
allocated_len, req_to_token, the ring head, the stall word and the guard words against the
reference on the same inputs; every arena byte outside what the op may write is unchanged.
Used by test_round_arena.py (numpy, torch CPU) and test_round_arena_cuda.py (CUDA tensors)."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

import specgraph
from specgraph.round_arena import after_verify_, round_view

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "outside-check" / \
    "accept_spec_reference.py"
_spec = importlib.util.spec_from_file_location("accept_spec_reference", _PATH)
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)  # type: ignore[union-attr]

POISON = 0xA5
TOKENS = 6  # a small alphabet, so drafts are often accepted


def plan_for(topk: int, num_steps: int, ps: int, d: int, m: int = 160, stops: int = 3,
             buckets=(2, 4, 6), reserve: int = -1):
    cfg = specgraph.DraftConfig(max_batch=buckets[-1], topk=topk, num_steps=num_steps,
                                page_size=ps, max_context_len=m, pool_rows=9, kv_slots=1 << 22,
                                buckets=buckets, verify_tokens=d, round_on_device=True,
                                round_reserve=reserve, max_stop_tokens=stops)
    return specgraph.make_plan(cfg)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Engine:
    """The host's side of the rounds over one arena (framework "numpy" or "torch"; device for
    torch tensors: "cpu" or "cuda")."""

    def __init__(self, plan, rng: random.Random, framework: str = "numpy", device: str = "cpu",
                 ring_capacity: int = 96, extra_columns: int = 0) -> None:
        self.plan, self.rng, self.framework, self.device = plan, rng, framework, device
        c = plan.config
        self.ps, self.width = c.page_size, c.max_context_len + extra_columns
        if framework == "numpy":
            self.arena = specgraph.host_arena(plan)
        elif device == "cpu":
            self.arena = specgraph.host_arena(plan, framework="torch")
        else:
            import torch
            self.arena = torch.zeros(plan.total_bytes, dtype=torch.uint8, device=device)
        self.bufs = specgraph.buffers(plan, self.arena)
        self.rtt = np.full((c.pool_rows, self.width), -9, np.int32)
        pages = rng.sample(range(1, (1 << 22) // self.ps), 4096)
        self.pages = pages  # ids never handed out yet
        self.ring = np.array([pages.pop() for _ in range(ring_capacity)], np.int32)
        self.head = self.tail = 0  # the host's copy of the device head, its own tail
        self.refill(ring_capacity)

    def arr(self, a: Any) -> Any:
        if self.framework == "numpy":
            return a
        import torch
        return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def host(self, t: Any) -> np.ndarray:
        return t.cpu().numpy() if hasattr(t, "cpu") else np.asarray(t)

    def refill(self, n: int) -> None:
        """Publishes n more free pages (never past the unconsumed ones)."""
        cap = self.ring.size
        n = min(n, cap - (self.tail - self.head))
        for e in range(self.tail, self.tail + n):
            self.ring[e % cap] = self.pages.pop()
        self.tail += n

    def admit(self, bucket: int, rows: List[Dict[str, int]]) -> None:
        """Stages `rows` ({"pool", "seq", "al"}; new ones get fresh pages for [0, al)) into
        `bucket`, and writes their allocated_len, the ring head and a clear stall word."""
        ps = self.ps
        for r in rows:
            if r.pop("new", False):
                row = self.rtt[r["pool"]]
                row[:] = -9
                for p in range(cdiv(r["al"], ps)):
                    page = self.pages.pop()
                    row[p * ps: min((p + 1) * ps, r["al"])] = \
                        page * ps + np.arange(min(ps, r["al"] - p * ps))
        c = self.plan.config
        real = len(rows)
        pool = np.array([r["pool"] for r in rows] + [0], np.int32)
        seq = np.array([r["seq"] for r in rows] + [1], np.int32)
        slots = np.zeros(max(real, 1) * c.topk * c.slot_stride, np.int64)
        self.bufs_arena_poison()
        assert specgraph.stage_(self.bufs, real, self.arr(pool), self.arr(seq), self.arr(slots),
                                bucket=bucket) == bucket
        v = round_view(self.bufs, bucket)
        al = np.array([r["al"] for r in rows] + [0] * (bucket - real), np.int32)
        v.allocated_len[...] = self.arr(al)
        # The engine clears a staged row's finished flag (else acceptance and the commit read
        # it as idle); padded rows keep the poison, which nothing may read as idle.
        v.finished[:real] = 0
        v.ring_head[...] = self.arr(np.array([self.head], np.int64))
        v.stall[...] = self.arr(np.zeros(1, np.int32))
        self.bucket, self.real = bucket, real

    def bufs_arena_poison(self) -> None:
        self.arena[...] = POISON

    def new_rows(self, n: int, used: List[int]) -> List[Dict[str, int]]:
        c, rng = self.plan.config, self.rng
        free = [p for p in range(c.pool_rows) if p not in used]
        rng.shuffle(free)
        reserve = self.plan.layout["round"]["reserve"]
        out = []
        for pool in free[:n]:
            seq = rng.randint(1, 24)
            al = min(self.width, seq + c.verify_tokens + rng.randint(0, reserve))
            out.append(dict(pool=pool, seq=seq, al=al, new=True))
        return out

    def tree(self, v) -> Dict[str, Any]:
        """A fresh random round: the tree, tokens, budget and stop ids, written into the section."""
        c, rng, d = self.plan.config, self.rng, self.plan.config.verify_tokens
        b = self.bucket
        parent = np.zeros((b, d), np.int32)
        for r in range(b):
            depth = [0] * d
            parent[r, 0] = -1
            for i in range(1, d):
                if r >= self.real:
                    parent[r, i] = rng.randint(-1000, 1000)  # padding: never read
                    continue
                open_ = [u for u in range(i) if depth[u] < c.num_steps]  # reachable, shallow
                p = rng.choice(open_) if open_ and rng.random() > 0.1 else -1
                parent[r, i] = p
                depth[i] = depth[p] + 1 if p >= 0 else c.num_steps + 1
        draft = np.array([[rng.randrange(TOKENS) for _ in range(d)] for _ in range(b)], np.int32)
        target = np.array([[rng.randrange(TOKENS) for _ in range(d)] for _ in range(b)], np.int32)
        left = np.array([rng.choice([1, 2, 3, 50]) for _ in range(b)], np.int32)
        cap = self.plan.layout["round"]["stop_capacity"]
        stops = [rng.randrange(TOKENS, TOKENS + 3) if rng.random() < 0.7 else rng.randrange(TOKENS)
                 for _ in range(cap)]
        for name, a in (("parent", parent), ("draft_token", draft), ("target_predict", target),
                        ("max_new_tokens_left", left)):
            getattr(v, name)[...] = self.arr(a)
        if cap:
            v.stop_token_ids[...] = self.arr(np.array(stops, np.int32))
        return dict(parent=parent, draft=draft, target=target, left=left, stops=stops)

    def round(self, real_batch: Optional[int] = None, stop_count: Optional[int] = None,
              budget: Optional[bool] = None) -> Dict[str, Any]:
        """One round: a fresh tree, the op, every cell against the reference. Returns the
        reference's output."""
        rng, c = self.rng, self.plan.config
        v = round_view(self.bufs, self.bucket)
        t = self.tree(v)
        cap = self.plan.layout["round"]["stop_capacity"]
        count = rng.randint(0, cap) if stop_count is None else stop_count
        budget = rng.random() < 0.7 if budget is None else budget
        b, h = self.bucket, self.host
        seq = h(v.seq_len).tolist()
        pool = h(v.req_pool_index).tolist()
        al = h(v.allocated_len).tolist()
        assert int(h(self.bufs.real_batch)[0]) == self.real
        d = dict(page_size=self.ps, topk=c.topk, num_steps=c.num_steps,
                 num_draft_tokens=c.verify_tokens, seq_len=seq, req_pool_index=pool,
                 req_to_token=self.rtt.tolist(), parent=t["parent"].tolist(),
                 draft_token=t["draft"].tolist(), target_predict=t["target"].tolist(),
                 allocated_len=al, free_pages=[int(self.ring[e % self.ring.size])
                                               for e in range(self.head, self.tail)],
                 reserve=self.plan.layout["round"]["reserve"], stop_token_ids=t["stops"][:count],
                 real_batch=self.real if real_batch is None else real_batch)
        if budget:
            d["max_new_tokens_left"] = t["left"].tolist()
        want = ref.accept(d)
        rtt_before = self.rtt.copy()
        arena = self.arena if self.framework == "numpy" else self.arena.cpu().numpy()
        before = np.array(arena, copy=True)
        r2t = self.launch(b, real_batch, count, budget)
        self.rtt = h(r2t).copy()
        after = self.arena if self.framework == "numpy" else self.arena.cpu().numpy()
        self.check(v, want, d, rtt_before, before, np.asarray(after))
        self.head += want["pages_taken"]
        return want

    def launch(self, bucket: int, real_batch: Optional[int], count: int, budget: bool) -> Any:
        """The op over the host's table, ring and tail; returns the table it wrote (a captured
        engine replaces this with a graph replay over static tensors)."""
        r2t, ring = self.arr(self.rtt), self.arr(self.ring)
        after_verify_(self.bufs, bucket, r2t, ring, self.arr(np.array([self.tail], np.int64)),
                      real_batch=real_batch, stop_token_count=count, budget=budget)
        return r2t

    def check(self, v, want, d, rtt_before, before, after) -> None:
        c, b, h, ps = self.plan.config, self.bucket, self.host, self.ps
        D, S, ns, k = c.verify_tokens, c.num_steps + 1, c.num_steps, c.topk
        nr = want["next_round"]
        eq = lambda name, got, exp: np.testing.assert_array_equal(  # noqa: E731
            h(got), np.array(exp, np.int64).reshape(h(got).shape), err_msg=name)
        eq("accept_index", v.accept_index, want["accept_index"])
        eq("accept_length", v.accept_length, want["accept_length"])
        eq("predict", v.predict, want["predict"])
        eq("accept_tokens", v.accept_tokens, [t + [0] * (D - len(t)) for t in want["output_token"]])
        eq("bonus", v.bonus, want["bonus_token"])
        eq("new_seq_len", v.new_seq_len, want["new_seq_len"])
        eq("select_index", v.select_index, want["extend"]["select_index"])
        eq("finished", v.finished, [int(f) for f in want["finished"]])
        eq("emit_len", v.emit_len, want["emit_len"])
        if "max_new_tokens_left" in d:
            # The commit writes the budget back in place: m - emit_len on the real rows, the
            # padded rows' cells untouched (no real row here starts below 1).
            left, real = d["max_new_tokens_left"], d["real_batch"]
            eq("max_new_tokens_left", v.max_new_tokens_left,
               [left[r] - want["emit_len"][r] if r < real else left[r] for r in range(b)])
        fb, fe = h(v.free_begin).tolist(), h(v.free_end).tolist()
        for r in range(b):
            if want["finished"][r]:
                row = rtt_before[d["req_pool_index"][r]]
                assert row[fb[r]: fe[r]].tolist() == want["slots_to_free"][r], r
                assert fe[r] == d["allocated_len"][r] or fb[r] == fe[r], r
            else:
                assert (fb[r], fe[r]) == (0, 0), r
        # kv moves: entry k - 1 of a row is (V[k], V[n_k]) for a moved node, else (-1, -1);
        # in row order, the moved entries are the reference's list.
        mv = h(v.kv_move).reshape(b, ns, 2)
        moved = [p.tolist() for r in range(b) for p in mv[r] if p[0] != -1]
        assert moved == want["kv_moves"]
        assert all((p == -1).all() or p[0] != -1 for r in range(b) for p in mv[r])
        eq("allocated_len", v.allocated_len, want["allocated_len"])
        rtt = rtt_before.copy()
        for row, p, slot in want["req_to_token_writes"]:
            rtt[row][p] = slot
        np.testing.assert_array_equal(self.rtt, rtt, err_msg="req_to_token")
        eq("active", v.active, [int(a) for a in nr["active"]])
        eq("seq_len (staged, next round)", v.seq_len, nr["seq_len"])
        eq("root_token", v.root_token, nr["root_token"])
        eq("draft_position", v.draft_position, nr["draft_position"])
        slots = h(v.out_cache_loc)
        eq("out_cache_loc (staged)", slots[:, :, :ns], nr["draft_out_cache_loc"])
        eq("verify_out_cache_loc", v.verify_out_cache_loc, nr["verify_out_cache_loc"])
        if v.tail_copy is not None:
            tc = h(v.tail_copy).reshape(-1, 2)
            assert [p.tolist() for p in tc if p[0] != -1] == nr["tail_copies"]
            assert all(p[1] != -1 or p[0] == -1 for p in tc)
        else:
            assert nr["tail_copies"] == []
        kinds = {x["kind"] for x in want["violations"]}
        assert int(h(v.ring_head)[0]) == self.head + want["pages_taken"]
        assert int(h(v.stall)[0]) == int("ring" in kinds)
        words = [int(w) for w in h(v.guard)[:, 0]]
        alloc = bool(kinds & {"ring", "row_width"})
        assert words[4] != 0 if alloc else words[4] == 0, (words, want["violations"])
        assert (words[5] != 0) == ("unbacked" in kinds), (words, want["violations"])
        assert words[:4] == [0] * 4 and words[6] == 0, words
        # Every byte outside what the op may write is as it was (the bucket's rows of each
        # output past its shape, the larger buckets' rows, the rest of the arena).
        may = np.zeros(after.size, bool)
        unwritten = ("parent", "draft_token", "target_predict", "stop_token_ids", "req_pool_index")
        if "max_new_tokens_left" not in d:
            unwritten += ("max_new_tokens_left",)  # budget=False: not even read
        for f in v._fields:
            t = getattr(v, f)
            if f in unwritten or not hasattr(t, "shape"):
                continue
            start = self.offset(t)
            may[start: start + h(t).nbytes] = True
        s = self.plan.find("after_verify.scratch")
        may[s.offset: s.offset + s.bytes] = True
        assert (after[~may] == before[~may]).all(), np.flatnonzero(after[~may] != before[~may])[:8]

    def offset(self, t: Any) -> int:
        if hasattr(t, "data_ptr"):
            return t.data_ptr() - self.arena.data_ptr()
        return t.ctypes.data - self.arena.ctypes.data

    def carry_on(self, bucket: Optional[int] = None, arrivals: int = 0) -> None:
        """The host between rounds: if every real row went on, nothing (the next round reads the
        staged state the op wrote); else restage the rows that go on (their new length and
        allocation), plus `arrivals` new requests, in `bucket` (None: the smallest)."""
        v = round_view(self.bufs, self.bucket)
        h = self.host
        act, seq = h(v.active).tolist(), h(v.new_seq_len).tolist()
        pool, al = h(v.req_pool_index).tolist(), h(v.allocated_len).tolist()
        fin = h(v.finished).tolist()
        if all(act[: self.real]) and arrivals == 0 and bucket in (None, self.bucket):
            return
        rows = [dict(pool=pool[r], seq=seq[r], al=al[r]) for r in range(self.real)
                if not fin[r] and seq[r] + self.plan.config.verify_tokens <= al[r]]
        rows += self.new_rows(arrivals, [r["pool"] for r in rows])
        rows = rows[: self.plan.max_bucket]
        self.admit(bucket or self.plan.round_bucket(len(rows)), rows)
