#!/usr/bin/env python3
"""An engine's own EAGLE draft graph runner in miniature, with specgraph's ops wired in.

Shaped like the draft CUDA graph runner of an engine such as SGLang: the runner owns its static
input tensors sized for the largest batch (req_pool_indices int64 [max_bs], seq_lens int64
[max_bs], out_cache_loc int64 [max_bs][topk][S]), captures one graph per batch size with its own
torch.cuda.graph and memory pool, and each graph holds the whole draft round: S - 1 draft
forwards over slot rows S wide. specgraph writes the attention metadata inside those graphs,
reading the runner's static inputs in place (bound once; nothing is copied per round): the
FA3-style tables (prefix and expand page tables, sequence lengths) and the CSR indices
(kv_indptr / kv_indices, into the runner's own buffers). Each round replays the bucket of the
"all-reduced" batch (under data-parallel attention, the largest batch across ranks), some rounds
on an idle rank (a real batch of 0).

The toy draft model (random weights; embedding, Q/K/V, LM head) attends twice per step, once
through the FA3 tables (a prefix pass and a branch pass merged by log-sum-exp) and once through
the CSR indices, and every round is checked: both outputs of every real row and draft step
against a dense float64 reference that gathers keys by position (never through a table), the
rows past the bucket left as poisoned, the KV cache written only at the round's draft slots and
the dummy page, and specgraph's guard words clean.

    python examples/engine_runner.py [--rounds N] [--seed N] [--device cpu|cuda]

Without a GPU it runs on the CPU (--device auto, the default: cuda when torch and specgraph see
a GPU, else cpu, saying so; under REQUIRE_GPU=1 a missing GPU is an error instead): the same
runner, the same code path, with each graph's body called eagerly instead of replayed. --device
cuda without a GPU exits 1. --help works without torch; without torch it says
`pip install torch` and exits 0 (1 with REQUIRE_GPU=1), as examples/torch_draft_loop.py does.
docs/engines.md ("A worked adapter") walks through it.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

try:
    import torch
except ImportError as e:  # --help still works; main() says what to install
    torch = None
    MISSING = e
else:
    MISSING = None

import specgraph
import specgraph.csr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if torch is not None:
    from engine_runner_model import ToyDraftModel  # noqa: E402  (the engine's side, next to this)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--max-batch", type=int, default=8, help="largest captured batch size")
    p.add_argument("--topk", type=int, default=2, help="draft branches per request")
    p.add_argument("--slots", type=int, default=4,
                   help="S: out_cache_loc slots per branch row; S - 1 draft forwards per round")
    p.add_argument("--page-size", type=int, default=4, help="KV page size in tokens")
    p.add_argument("--max-context", type=int, default=48, help="longest request prefix")
    p.add_argument("--rounds", type=int, default=12, help="draft rounds to run")
    p.add_argument("--seed", type=int, default=1, help="random seed of model and requests")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                   help="cuda: graphs captured with torch.cuda.graph; cpu: the same runner, "
                        "each graph's body run eagerly; auto: cuda when torch and specgraph see "
                        "a GPU, else cpu")
    return p.parse_args(argv)


class SpecgraphDraftMetadata:
    """What replaces the attention backend's per-step draft metadata: one specgraph plan sized
    from the runner's own numbers, reading the runner's static inputs in place, the FA3 tables
    in its arena, the CSR indices written into the runner's own kv_indptr / kv_indices. Every
    method but __init__ only enqueues work on the current stream (capture-safe)."""

    def __init__(self, runner):
        r, dev = runner, runner.device
        self.req_to_token = r.model.req_to_token
        cfg = specgraph.DraftConfig(
            max_batch=r.max_bs, topk=r.topk, num_steps=r.S - 1, slot_stride=r.S,
            page_size=r.model.page_size, max_context_len=r.model.max_context,
            pool_rows=r.model.pool_rows, kv_slots=r.model.kv_slots,
            buckets=tuple(r.capture_bs), formats="both")
        self.plan = plan = specgraph.make_plan(cfg)
        arena = (torch.empty(plan.total_bytes, dtype=torch.uint8, device=dev) if dev.type == "cuda"
                 else specgraph.host_arena(plan, framework="torch"))
        self.bufs = specgraph.buffers(plan, arena)
        # The runner's own CSR buffers, as Triton's draft backend keeps them (int64 indices),
        # sized exactly: the widest step's capacity, not max_bs * topk * max_context_len.
        kv_indptr = torch.zeros(r.S - 1, plan.max_rows + 1, dtype=torch.int32, device=dev)
        kv_indices = torch.zeros(r.S - 1, plan.layout["csr_capacity"][-1], dtype=torch.int64,
                                 device=dev)
        self.csr = specgraph.bind_csr_outputs(self.bufs, kv_indptr, kv_indices)
        # The runner's static inputs, bound once and read in place by every op (nothing is
        # copied per round). real_batch=None: every row of the replayed bucket is read as
        # real, so the runner pads its rows past the batch, as it does for its own forward.
        self.inputs = specgraph.bind_inputs(self.bufs, req_pool_indices=r.req_pool_indices,
                                            seq_lens=r.seq_lens, out_cache_loc=r.out_cache_loc)
        # What each step's forward reads, per (bucket, step): views, made once.
        self.views = {(b, s): (self.bufs.view(b, s),
                               specgraph.csr.step_csr_views(self.bufs, b, s, self.csr))
                      for b in r.capture_bs for s in range(r.S - 1)}

    def round_setup(self, bucket):
        """In the graph, before the first forward: the prefix table and lengths (step
        invariant) and every step's CSR indices, one launch each, from the runner's inputs."""
        specgraph.round_setup_(self.bufs, bucket, self.req_to_token, inputs=self.inputs)
        specgraph.csr_round_indices_(self.bufs, bucket, self.req_to_token, out=self.csr,
                                     inputs=self.inputs)

    def step(self, bucket, step):
        """In the graph, before the step's forward: the step's expand table. Returns the
        (FA3 view, (kv_indptr, kv_indices)) the forward reads."""
        specgraph.step_metadata_(self.bufs, bucket, step, inputs=self.inputs)
        return self.views[bucket, step]


class EagleDraftRunner:
    """The engine's draft graph runner: its own static inputs and outputs, one graph per
    batch size holding all S - 1 draft forwards, its own graph pool."""

    def __init__(self, model, max_bs, topk, slots, device):
        self.model, self.topk, self.S, self.device = model, topk, slots, device
        self.max_bs = max_bs
        self.capture_bs = [b for b in (1, 2, 4, 8, 16, 32, 64) if b < max_bs] + [max_bs]
        i64 = dict(dtype=torch.int64, device=device)
        # The static inputs, as the engine keeps them; the padding values of a row past the
        # real batch: pool row 0, seq_len 1, every slot 0 (the dummy page).
        self.req_pool_indices = torch.zeros(max_bs, **i64)
        self.seq_lens = torch.ones(max_bs, **i64)
        self.out_cache_loc = torch.zeros(max_bs, topk, slots, **i64)
        rows = max_bs * topk
        self.tokens = torch.zeros(slots, rows, **i64)  # [0]: the round's input; [s + 1]: step s
        shape = (slots - 1, rows, model.heads, model.head_dim)
        self.attn_fa3 = torch.zeros(shape, device=device)  # the forwards' outputs per step
        self.attn_csr = torch.zeros(shape, device=device)
        self.meta = SpecgraphDraftMetadata(self)
        self.graphs, self.pool = {}, None

    def pad_to_bucket(self, batch):
        return next(b for b in self.capture_bs if b >= batch)

    def _round_body(self, bucket):
        """What one graph holds: the whole draft round for `bucket`."""
        self.meta.round_setup(bucket)
        for step in range(self.S - 1):
            fa3, csr = self.meta.step(bucket, step)
            self.model.draft_step(self, bucket, step, fa3, csr)

    def capture(self):
        """One graph per batch size, largest first, into one pool; on the CPU nothing (the
        bodies run eagerly at replay). Returns (graphs, seconds)."""
        if self.device.type != "cuda":
            return 0, 0.0
        t0 = time.perf_counter()
        self.pool = torch.cuda.graph_pool_handle()
        for bucket in reversed(self.capture_bs):
            self._load(0, bucket, None, None, None, None)  # an idle round's inputs
            self._round_body(bucket)  # warm-up: nothing may initialise lazily in the capture
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.pool):
                self._round_body(bucket)
            self.graphs[bucket] = g
        torch.cuda.synchronize()
        return len(self.graphs), time.perf_counter() - t0

    def _load(self, bs, bucket, pool, seq, slots, first_tokens):
        """The engine's copy into its static inputs (rows past the batch padded)."""
        k = self.topk
        if bs:
            self.req_pool_indices[:bs].copy_(pool)
            self.seq_lens[:bs].copy_(seq)
            self.out_cache_loc[:bs].copy_(slots)
            self.tokens[0, :bs * k].copy_(first_tokens)
        self.req_pool_indices[bs:bucket].zero_()
        self.seq_lens[bs:bucket].fill_(1)
        self.out_cache_loc[bs:bucket].zero_()
        self.tokens[0, bs * k:bucket * k].zero_()

    def replay(self, bs, world_batch, pool, seq, slots, first_tokens):
        """One draft round of `bs` real requests in the bucket of `world_batch` (the batch
        after the engine's all-reduce; >= bs). Returns the bucket replayed."""
        bucket = self.pad_to_bucket(max(bs, world_batch))
        self._load(bs, bucket, pool, seq, slots, first_tokens)
        if self.graphs:
            self.graphs[bucket].replay()
        else:
            self._round_body(bucket)
        return bucket


def pick_device(requested):
    """The device to run on ("cuda" or "cpu"), or None (said why) when there is none to run on.
    auto falls back to the CPU, as examples/torch_draft_loop.py does, except under REQUIRE_GPU=1."""
    if requested == "cpu":
        return "cpu"
    if torch.cuda.is_available() and specgraph.CUDA_AVAILABLE:
        return "cuda"
    why = ("torch sees no CUDA device" if not torch.cuda.is_available()
           else specgraph.cuda_unavailable_reason())
    if requested == "auto" and os.environ.get("REQUIRE_GPU") != "1":
        print(f"engine_runner: no GPU here ({why}): running the same runner eagerly on the CPU "
              f"(--device cpu; no graphs)")
        return "cpu"
    print(f"engine_runner: no GPU here ({why}); run it with --device cpu"
          + (" (REQUIRE_GPU=1: no fallback)" if requested == "auto" else ""))
    return None


def main(argv=None):
    a = parse(argv)
    if MISSING is not None:
        print(f"engine_runner: needs torch ({MISSING}): pip install torch (a CPU build is "
              f"enough: the runner then runs on the CPU); nothing to run")
        return 1 if os.environ.get("REQUIRE_GPU") == "1" else 0
    a.device = pick_device(a.device)
    if a.device is None:
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(a.device)
    model = ToyDraftModel(a, dev)
    runner = EagleDraftRunner(model, a.max_batch, a.topk, a.slots, dev)
    graphs, seconds = runner.capture()
    print(f"engine_runner: {a.device}, max batch {a.max_batch}, topk {a.topk}, S = {a.slots} "
          f"slots per row ({a.slots - 1} draft forwards per graph), page size {a.page_size}, "
          f"buckets {runner.capture_bs}")
    print(f"capture: {graphs} graphs in {seconds:.3f} s (one per batch size, one pool)"
          if graphs else "capture: none on the CPU; each round runs the graph's body eagerly")
    gen = random.Random(a.seed + 1)
    nan, tol = float("nan"), 1e-4
    worst = {"fa3": 0.0, "csr": 0.0}
    idle = padded = 0
    spent = 0.0
    for rnd in range(a.rounds):
        bs = 0 if rnd % 4 == 1 else gen.randint(1, a.max_batch)
        world = bs if rnd % 4 == 0 else gen.randint(max(bs, 1), a.max_batch)
        rows, seqs, slots, used = model.new_round(bs, a.topk, a.slots)
        first = [gen.randrange(model.vocab) for _ in range(bs * a.topk)]
        for out in (runner.attn_fa3, runner.attn_csr):
            out.fill_(nan)  # poison: a row the round does not write stays NaN
        runner.tokens[1:].fill_(-1)
        kv_before = (model.k_cache.clone(), model.v_cache.clone())
        t = lambda x: torch.tensor(x, dtype=torch.int64, device=dev)  # noqa: E731
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        bucket = runner.replay(bs, world, t(rows), t(seqs),
                               t(slots).view(bs, a.topk, a.slots), t(first))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        spent += time.perf_counter() - t0
        idle += bs == 0
        padded += bucket > bs
        specgraph.check_guards(runner.meta.bufs)  # raises, naming the row, on any violation
        problem = model.check_round(runner, bucket, rows, seqs, slots, kv_before, worst)
        if problem:
            print(f"round {rnd} (bs {bs}, bucket {bucket}): {problem}: FAILED")
            return 1
        model.free_pages(used)
    ok = max(worst.values()) <= tol
    print(f"rounds: {a.rounds} ({idle} idle, {padded} padded: a bucket above the real batch), "
          f"{1e3 * spent / a.rounds:.3f} ms per round (host-timed: the copy into the runner's "
          f"static inputs and the replay)")
    print(f"checked: every real row and draft step against a float64 dense reference, max "
          f"relative error FA3 tables {worst['fa3']:.2e}, CSR indices {worst['csr']:.2e} "
          f"(tolerance {tol:.0e}); rows past the bucket untouched; KV written only at the "
          f"round's draft slots and the dummy page; guard words clean: "
          f"{'PASSED' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
