"""ExtendGraphs on a GPU: one graph per bucket captured with torch.cuda.graph into the draft
graphs' pool, replayed over fresh random rounds (idle ranks, padded buckets, accept 0..W, every
format, the section's or the engine's accepted lengths), each replay's tables equal to
extend_reference.py over a poisoned section, and the forward, recorded in the graph, copying this
replay's tables. Skipped visibly without a GPU; a failure with REQUIRE_GPU=1 (the GPU check)."""

from __future__ import annotations

import pytest

from conftest import need_cuda

torch = need_cuda()

import test_extend_graphs as cpu  # noqa: E402


@pytest.mark.parametrize("formats", ["fa3", "csr", "both"])
def test_replayed_rounds_match_the_reference_and_the_forward_sees_them(formats):
    cpu.random_rounds(formats, device="cuda", rounds=16, seed=5)


def test_no_allocation_during_replay():
    plan = cpu.make_plan("both", 4, 16, 40)
    rtt = torch.randint(0, 1 << 20, (cpu.POOL_ROWS, 44), dtype=torch.int32, device="cuda")
    dg = cpu.draft_graphs(plan, rtt, "cuda")
    eg = cpu.ExtendGraphs(dg, lambda v: None, checked="off")
    eg.capture()
    dg.stage_(3, torch.ones(3, dtype=torch.int32, device="cuda"),
              torch.full((3,), 9, dtype=torch.int32, device="cuda"),
              torch.zeros((3, 2, plan.config.slot_stride), dtype=torch.int64, device="cuda"))
    eg.stage_([1, 2, 4])
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    for _ in range(5):
        eg.run()
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    assert eg.replays == {4: 5}
