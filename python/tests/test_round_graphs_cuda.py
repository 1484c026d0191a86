"""RoundGraphs on a GPU: one graph per bucket captured with torch.cuda.graph into the draft
graphs' pool, K rounds replayed back to back by one run(K), against the same rounds driven op
by op and the independent reference (round_graphs_run.py, as test_round_graphs.py on the CPU);
no allocation during the replays; the graph count. Skipped visibly without a GPU; a failure
with REQUIRE_GPU=1 (the GPU check)."""

from __future__ import annotations

import pytest

from conftest import need_cuda

torch = need_cuda()

import round_graphs_run as run  # noqa: E402


@pytest.mark.parametrize("shape", run.SHAPES, ids=["-".join(map(str, s)) for s in run.SHAPES])
def test_k_replays_match_op_by_op_and_the_reference(shape):
    for seed in range(3):
        run.three_ways(shape, 9100 + seed, device="cuda", k=8)
    run.three_ways(shape, 9200, device="cuda", bound=True)
    run.three_ways(shape, 9300, device="cuda", extend=False)


def test_one_graph_per_bucket_and_no_allocation_during_replay():
    case = run.Case(run.make_plan(*run.SHAPES[1]), 9400)
    a = run.Side(case, "cuda", True)
    assert a.rg.report.graphs == len(a.rg.buckets) and a.rg.report.mode == "cuda_graph"
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    a.rg.run(5)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    assert a.rg.replays == {case.bucket: 5}
