#!/usr/bin/env python3
"""A small EAGLE-style draft loop in PyTorch, captured with specgraph.torch.DraftGraphs.

A toy draft model (random weights: embedding, Q/K/V, output projection, LM head) runs
`num_steps` draft steps per round for `topk` branches of every request. Its K/V live in a paged
cache (a torch tensor) with a fragmented page allocator; each branch gets a fresh first page with
a copy of its request's partial last page, as engines lay branches out (docs/metadata.md
section 1). Attention is two passes written with torch ops over specgraph's static buffers: the
request's prefix pages (prefix_page_table) and the branch's pages (expand_page_table), merged by
log-sum-exp (section 5). Every graph(bucket, step) is captured with torch.cuda.graph into one
pool; each round is staged and replayed. Sampled rounds are verified against a dense float64
reference that gathers keys by position (req_to_token and out_cache_loc), never through a page
table.

    python examples/torch_draft_loop.py [--rounds N] [--max-batch N] [--seed N]
    python examples/torch_draft_loop.py --device-depth [--min-confidence P]

--device-depth captures one step per bucket (the step read from the device counter) and lets the
device decide each round's depth (docs/device-rounds.md): the forward writes each row's top
softmax probability as its confidence, and the round continues while a real row's reaches
--min-confidence, up to the round's max_depth; one launch per round.

--device auto (the default) captures on the GPU when torch and specgraph see one and otherwise
runs the same loop eagerly on the CPU (no graphs), saying so, as examples/engine_runner.py does;
--device cpu asks for the CPU, --device cuda for the GPU (without one: exit status 1). Under
REQUIRE_GPU=1 (the GPU check) a missing GPU is an error, never a fallback. --help works without
torch; without torch the example says `pip install torch numpy` and exits 0 (1 with
REQUIRE_GPU=1).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as e:  # --help still works; main() says what to install
    np = torch = None
    MISSING = e
else:
    MISSING = None

import specgraph

if torch is not None:
    import specgraph.torch as sgt


def parse():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Without a GPU it runs eagerly on the CPU "
        "(no graphs).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--max-batch", type=int, default=8,
                   help="largest batch; the buckets are the planned list up to it")
    p.add_argument("--topk", type=int, default=4, help="draft branches per request")
    p.add_argument("--steps", type=int, default=4, help="draft steps per round (num_steps)")
    p.add_argument("--page-size", type=int, default=16, help="KV page size in tokens")
    p.add_argument("--max-context", type=int, default=256, help="longest request prefix")
    p.add_argument("--heads", type=int, default=4, help="attention heads of the toy model")
    p.add_argument("--head-dim", type=int, default=32, help="head dimension of the toy model")
    p.add_argument("--vocab", type=int, default=128, help="vocabulary of the toy model")
    p.add_argument("--rounds", type=int, default=20, help="draft rounds to run")
    p.add_argument("--verify-every", type=int, default=4,
                   help="compare every N-th round with the dense float64 reference")
    p.add_argument("--seed", type=int, default=1, help="random seed of model and requests")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                   help="cuda: captured with torch.cuda.graph; cpu: the same loop run eagerly; "
                        "auto: cuda when torch and specgraph see a GPU, else cpu")
    p.add_argument("--device-depth", action="store_true",
                   help="one captured step per bucket; the device decides each round's depth")
    p.add_argument("--min-confidence", type=float, default=0.013,
                   help="--device-depth: continue while a real row's top softmax probability "
                        "reaches this (the toy model is near-uniform: 1/128 = 0.008)")
    return p.parse_args()


class Engine:
    """The engine's side: paged KV, requests, branch pages, the draft model's forward."""

    def __init__(self, a, dev):
        self.a, self.dev = a, dev
        self.rng = random.Random(a.seed)
        g = torch.Generator().manual_seed(a.seed)
        ps, H, D = a.page_size, a.heads, a.head_dim
        self.pool_rows = 2 * a.max_batch + 1  # row 0 reserved for padded requests
        pages_per_request = -(-a.max_context // ps)
        branch_pages = a.max_batch * a.topk * (1 + -(-(a.steps + ps) // ps))
        self.num_pages = 1 + self.pool_rows * pages_per_request + branch_pages
        self.kv_slots = self.num_pages * ps
        self.k_cache = torch.randn(self.kv_slots, H, D, generator=g).to(dev)
        self.v_cache = torch.randn(self.kv_slots, H, D, generator=g).to(dev)
        hd = H * D
        w = lambda *s: (torch.randn(*s, generator=g) / s[0] ** 0.5).to(dev)  # noqa: E731
        self.embed, self.wq, self.wk, self.wv = w(a.vocab, hd), w(hd, hd), w(hd, hd), w(hd, hd)
        self.w_out = w(hd, a.vocab)
        self.free = list(range(1, self.num_pages))  # page 0: the dummy page
        self.rng.shuffle(self.free)  # fragmented: consecutive pages rarely have consecutive ids
        self.req_to_token = torch.zeros(self.pool_rows, a.max_context, dtype=torch.int32)
        self.seq_len = [0] * self.pool_rows
        for row in range(1, self.pool_rows):
            self.seq_len[row] = self.rng.randint(1, a.max_context - a.steps)
            pages = [self.free.pop() for _ in range(-(-self.seq_len[row] // ps))]
            for pos in range(self.seq_len[row]):
                self.req_to_token[row, pos] = pages[pos // ps] * ps + pos % ps
        self.req_to_token = self.req_to_token.to(dev)

    def config(self):
        a = self.a
        return specgraph.DraftConfig(max_batch=a.max_batch, topk=a.topk, num_steps=a.steps,
                                     page_size=a.page_size, max_context_len=a.max_context,
                                     pool_rows=self.pool_rows, kv_slots=self.kv_slots,
                                     device_steps=a.device_depth, device_depth=a.device_depth)

    def new_round(self, bs):
        """Picks bs requests, lays out their branch pages (copying each partial last page) and
        returns (pool rows, seq lens, out_cache_loc [bs][topk][steps], pages to free)."""
        a, ps = self.a, self.a.page_size
        rows = self.rng.sample(range(1, self.pool_rows), bs)
        r2t = self.req_to_token.cpu()
        slots, src, dst, used = [], [], [], []
        for row in rows:
            lpl, pre = self.seq_len[row] % ps, self.seq_len[row] - self.seq_len[row] % ps
            for _ in range(a.topk):
                pages = [self.free.pop() for _ in range(-(-(lpl + a.steps) // ps))]
                used += pages
                src += [int(r2t[row, pre + i]) for i in range(lpl)]
                dst += [pages[0] * ps + i for i in range(lpl)]
                slots += [pages[(lpl + j) // ps] * ps + (lpl + j) % ps for j in range(a.steps)]
        if src:
            s, d = torch.tensor(src, device=self.dev), torch.tensor(dst, device=self.dev)
            self.k_cache[d] = self.k_cache[s]
            self.v_cache[d] = self.v_cache[s]
        return rows, [self.seq_len[r] for r in rows], slots, used

    def forward(self, tokens, attn_out):
        """The draft step's forward over the StepView: reads tokens[step], writes K/V at the
        step's slots, attends (prefix pass + branch pass + merge) and writes the argmax to
        tokens[step + 1]. Only torch ops on the current stream, static shapes: capturable. With
        --device-depth one forward serves every step: the step is a device tensor, read and
        written through index_select / index_copy_, and the confidence is written too."""
        a, ps, H, D = self.a, self.a.page_size, self.a.heads, self.a.head_dim
        kp = self.k_cache.view(-1, ps, H, D)
        vp = self.v_cache.view(-1, ps, H, D)
        scale = D ** -0.5

        def attend(q, k, v, valid):  # q [.., H, D], k/v [.., n, H, D], valid [.., n]
            s = torch.einsum("...hd,...nhd->...hn", q, k) * scale
            s = s.masked_fill(~valid.unsqueeze(-2), float("-inf"))
            lse = torch.logsumexp(s, -1)  # -inf where nothing is valid
            p = torch.where(valid.unsqueeze(-2), torch.exp(s - lse.unsqueeze(-1)), 0.0)
            return torch.einsum("...hn,...nhd->...hd", p, v), lse

        def forward(view: specgraph.StepView) -> None:
            rows, bucket = view.rows, view.bucket
            counter = view.device_step is not None
            s = view.device_step.long() if counter else view.step
            if counter:
                # A spent counter (a graph replayed past the round) writes nothing, as
                # docs/device-rounds.md asks of an engine's forward: every write below keeps the
                # old value where `live` is false, and reads stay in range through the clamp.
                live = (s >= 0) & (s < a.steps)
                s = s.clamp(0, a.steps - 1)
            step_slots = view.out_cache_loc.reshape(rows, a.steps)
            if counter:
                x = self.embed[tokens.index_select(0, s)[0, :rows]]
                slot = step_slots.index_select(1, s)[:, 0]
            else:
                x = self.embed[tokens[s, :rows]]
                slot = step_slots[:, s]
            q, k, v = ((x @ w).view(rows, H, D) for w in (self.wq, self.wk, self.wv))
            if counter:
                k = torch.where(live, k, self.k_cache[slot])
                v = torch.where(live, v, self.v_cache[slot])
            self.k_cache[slot] = k
            self.v_cache[slot] = v
            pre = view.prefix_page_table.long()  # [bucket, cap]
            pk = kp[pre].reshape(bucket, -1, H, D)
            pv = vp[pre].reshape(bucket, -1, H, D)
            n = torch.arange(pk.shape[1], device=x.device)
            o1, l1 = attend(q.view(bucket, a.topk, H, D), pk.unsqueeze(1), pv.unsqueeze(1),
                            (n < view.prefix_seqlen.unsqueeze(-1)).unsqueeze(1))
            # [rows, d + 1]; with the counter [rows, num_steps + 1], the columns past the step's
            # d + 1 stale but never valid: the cache_seqlen mask below ends before them.
            br = view.expand_page_table.long()
            bk, bv = kp[br].reshape(rows, -1, H, D), vp[br].reshape(rows, -1, H, D)
            m = torch.arange(bk.shape[1], device=x.device)
            o2, l2 = attend(q, bk, bv, m < view.expand_cache_seqlen.unsqueeze(-1))
            o1, l1 = o1.reshape(rows, H, D), l1.reshape(rows, H)
            top = torch.maximum(l1, l2)
            w1, w2 = torch.exp(l1 - top).unsqueeze(-1), torch.exp(l2 - top).unsqueeze(-1)
            o = (o1 * w1 + o2 * w2) / (w1 + w2)
            logits = o.reshape(rows, H * D) @ self.w_out
            if counter:
                out_rows, token_rows = attn_out[:, :rows], tokens[:, :rows]
                out_rows.index_copy_(0, s, torch.where(live, o[None],
                                                       out_rows.index_select(0, s)))
                token_rows.index_copy_(0, s + 1, torch.where(
                    live, logits.argmax(-1)[None], token_rows.index_select(0, s + 1)))
                view.confidence.copy_(torch.where(live, torch.softmax(logits, -1).amax(-1),
                                                  view.confidence))
            else:
                attn_out[s, :rows] = o
                tokens[s + 1, :rows] = logits.argmax(-1)

        return forward

    def reference(self, rows, seqs, slots, tokens, attn_out, depth):
        """Max relative error of attn_out against dense float64 attention, keys by position."""
        a, H, D = self.a, self.a.heads, self.a.head_dim
        r2t = self.req_to_token.cpu().numpy()
        kc, vc = self.k_cache.double().cpu().numpy(), self.v_cache.double().cpu().numpy()
        emb = self.embed.double().cpu().numpy()
        wq, wk, wv = (w.double().cpu().numpy() for w in (self.wq, self.wk, self.wv))
        tok, out = tokens.cpu().numpy(), attn_out.double().cpu().numpy()
        worst = 0.0
        for i, (row, n) in enumerate(zip(rows, seqs)):
            ctx = r2t[row, :n].astype(np.int64)
            for t in range(a.topk):
                qrow = i * a.topk + t
                drafts = [emb[tok[j, qrow]] for j in range(depth)]
                for s in range(depth):
                    q = (drafts[s] @ wq).reshape(H, D)
                    k = np.concatenate([kc[ctx], np.stack([(x @ wk).reshape(H, D)
                                                           for x in drafts[: s + 1]])])
                    v = np.concatenate([vc[ctx], np.stack([(x @ wv).reshape(H, D)
                                                           for x in drafts[: s + 1]])])
                    sc = np.einsum("hd,nhd->hn", q, k) * D ** -0.5
                    p = np.exp(sc - sc.max(-1, keepdims=True))
                    o = np.einsum("hn,nhd->hd", p / p.sum(-1, keepdims=True), v)
                    err = np.abs(out[s, qrow] - o).max() / max(np.abs(o).max(), 1e-12)
                    worst = max(worst, float(err))
        return worst


def pick_device(requested):
    """The device to run on ("cuda" or "cpu"), or None (said why) when there is none to run on.
    auto falls back to the CPU, as examples/engine_runner.py does, except under REQUIRE_GPU=1."""
    if requested == "cpu":
        return "cpu"
    if torch.cuda.is_available() and specgraph.CUDA_AVAILABLE:
        return "cuda"
    why = ("torch sees no CUDA device" if not torch.cuda.is_available()
           else specgraph.cuda_unavailable_reason())
    if requested == "auto" and os.environ.get("REQUIRE_GPU") != "1":
        print(f"torch_draft_loop: no GPU here ({why}): running the same loop eagerly on the CPU "
              f"(--device cpu; no graphs)")
        return "cpu"
    print(f"torch_draft_loop: no GPU here ({why}); run it with --device cpu"
          + (" (REQUIRE_GPU=1: no fallback)" if requested == "auto" else ""))
    return None


def main():
    a = parse()
    if MISSING is not None:
        print(f"torch_draft_loop: needs torch and numpy ({MISSING}): pip install torch numpy "
              f"(a CPU build of torch is enough: the loop then runs on the CPU); nothing to run")
        return 1 if os.environ.get("REQUIRE_GPU") == "1" else 0
    a.device = pick_device(a.device)
    if a.device is None:
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(a.device)
    eng = Engine(a, dev)
    plan = specgraph.make_plan(eng.config())
    arena = (torch.zeros(plan.total_bytes, dtype=torch.uint8, device=dev) if a.device == "cuda"
             else specgraph.host_arena(plan, framework="torch"))
    bufs = specgraph.buffers(plan, arena)
    tokens = torch.zeros(a.steps + 1, plan.max_rows, dtype=torch.int64, device=dev)
    attn_out = torch.zeros(a.steps, plan.max_rows, a.heads, a.head_dim, device=dev)
    graphs = sgt.DraftGraphs(bufs, eng.forward(tokens, attn_out), req_to_token=eng.req_to_token,
                             warmups=1)
    report = graphs.capture()
    print(f"torch_draft_loop: {a.device}, max batch {a.max_batch}, topk {a.topk}, {a.steps} steps,"
          f" page size {a.page_size}, {a.heads} heads x {a.head_dim}, {plan.total_bytes} bytes of"
          f" static buffers")
    print(report.line())
    gen = random.Random(a.seed + 1)
    worst, verified, seconds, steps_run = 0.0, 0, 0.0, 0
    depths = [0] * (a.steps + 1)  # device_depth: how often each depth was decided
    early = 0  # device_depth: rounds the confidence stopped before the host's cap
    for rnd in range(a.rounds):
        bs, depth = gen.randint(1, a.max_batch), gen.randint(1, a.steps)
        rows, seqs, slots, used = eng.new_round(bs)
        dv = lambda x: torch.tensor(x, device=dev)  # noqa: E731
        if a.device_depth:  # the host's cap on the depth; the device may stop earlier
            graphs.stage_(bs, dv(rows), dv(seqs), dv(slots), depth, a.min_confidence)
        else:
            graphs.stage_(bs, dv(rows), dv(seqs), dv(slots))
        tokens[0, : bs * a.topk] = torch.tensor([gen.randrange(a.vocab) for _ in
                                                 range(bs * a.topk)], device=dev)
        if a.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        graphs.run_round(None if a.device_depth else depth)
        if a.device == "cuda":
            torch.cuda.synchronize()
        seconds += time.perf_counter() - t0
        if a.device_depth:
            decided = int(graphs.depth[0])
            # Stopping early means no real row's last confidence reached the threshold.
            last = float(bufs.confidence[: bs * a.topk].max())
            if not 1 <= decided <= depth or (decided < depth and last >= a.min_confidence):
                print(f"round {rnd}: the device ran {decided} of at most {depth} steps with a "
                      f"last confidence of {last}")
                return 1
            early += decided < depth
            depth = decided
            depths[depth] += 1
        steps_run += depth
        if rnd % a.verify_every == 0:
            worst = max(worst, eng.reference(rows, seqs, slots, tokens, attn_out, depth))
            verified += 1
        eng.free += used
    specgraph.check_guards(bufs)
    tol = 1e-4
    if a.device_depth:
        print("depths decided on the device (min confidence "
              f"{a.min_confidence}): " + ", ".join(f"{d}: {n}" for d, n in enumerate(depths) if n)
              + f"; {early} of {a.rounds} rounds stopped before the host's cap")
    print(f"rounds: {a.rounds}, {steps_run} steps replayed, {1e3 * seconds / steps_run:.3f} ms "
          f"per step (host-timed, synchronised)")
    status = "PASSED" if worst <= tol else "FAILED"
    print(f"verification: {verified} round{'' if verified == 1 else 's'} against a float64 "
          f"dense reference, max relative "
          f"error {worst:.2e} (tolerance {tol:.0e}): {status}")
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
