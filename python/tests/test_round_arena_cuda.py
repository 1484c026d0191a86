"""The round after verify on a GPU (docs/round-graphs.md): after_verify_ over a CUDA arena with
CUDA tensors, rounds back to back, every output, the staged seq_len and out_cache_loc,
allocated_len, req_to_token, the ring head and the stall word against the independent reference
scripts/outside-check/accept_spec_reference.py (round_arena_run.py), every other arena byte
unchanged; and the op recorded once in torch.cuda.graph, replayed for later rounds (the real
batch, the ring tail and every content read on the device). Mirrors test_round_arena.py's
rounds test. Skipped visibly without a GPU; a failure with REQUIRE_GPU=1 (the GPU check)."""

from __future__ import annotations

import random

import pytest

from conftest import need_cuda

torch = need_cuda()
np = pytest.importorskip("numpy")

from specgraph.round_arena import after_verify_  # noqa: E402
from round_arena_run import Engine, plan_for  # noqa: E402

SHAPES = [(1, 3, 1, 4), (2, 2, 4, 5), (3, 2, 2, 7), (2, 3, 16, 6)]


@pytest.mark.parametrize("shape", SHAPES, ids=["-".join(map(str, s)) for s in SHAPES])
def test_rounds_back_to_back_over_cuda_tensors_match_the_reference(shape):
    for seed in range(2):
        rng = random.Random(51000 + seed)
        eng = Engine(plan_for(*shape), rng, "torch", "cuda")
        eng.admit(6, eng.new_rows(rng.randint(1, 6), []))
        for _ in range(6):
            eng.round()
            torch.cuda.synchronize()
            eng.refill(rng.randint(0, 24))
            eng.carry_on(arrivals=rng.randint(0, 2) if rng.random() < 0.3 else 0)


class Captured(Engine):
    """The op captured once per bucket over static tensors; each round copies the host's
    table, ring and tail into them and replays."""

    def launch(self, bucket, real_batch, count, budget):
        assert real_batch is None
        key = (bucket, count, budget)
        if getattr(self, "_key", None) != key:
            self._r2t = torch.from_numpy(self.rtt).cuda()
            self._ring = torch.from_numpy(self.ring).cuda()
            self._tail = torch.zeros(1, dtype=torch.int64, device="cuda")
            self._graph = torch.cuda.CUDAGraph()
            # capture writes nothing (a recorded launch), so the state is untouched until replay
            with torch.cuda.graph(self._graph):
                after_verify_(self.bufs, bucket, self._r2t, self._ring, self._tail,
                              stop_token_count=count, budget=budget)
            self._key = key
        self._r2t.copy_(torch.from_numpy(self.rtt))
        self._ring.copy_(torch.from_numpy(self.ring))
        self._tail.fill_(self.tail)
        self._graph.replay()
        torch.cuda.synchronize()
        return self._r2t


def test_the_op_captured_in_a_cuda_graph_serves_every_round():
    rng = random.Random(61)
    eng = Captured(plan_for(2, 2, 4, 5), rng, "torch", "cuda")
    eng.admit(4, eng.new_rows(4, []))
    for _ in range(6):
        eng.round(stop_count=1, budget=True)
        eng.refill(rng.randint(0, 24))
        eng.carry_on(bucket=4)  # the same bucket: the same graph
