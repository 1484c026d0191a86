"""The torch path on a GPU: the current stream, ops recorded in torch.cuda.graph, DraftGraphs
over a small torch forward with a shared pool, no allocation during replay, padded buckets.
Skipped visibly without a GPU; a failure with REQUIRE_GPU=1 (the GPU check)."""

from __future__ import annotations

import random

import pytest

from conftest import need_cuda

torch = need_cuda()
np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import specgraph.torch as sgt  # noqa: E402
from specgraph import _ffi  # noqa: E402
import reference as ref  # noqa: E402
from forwards import counter_forward  # noqa: E402

FIELDS = dict(max_batch=8, topk=2, num_steps=3, page_size=4, max_context_len=64, pool_rows=9,
              kv_slots=1 << 12, buckets=(2, 4, 8))


def cuda_bufs(**extra):
    plan = specgraph.make_plan(specgraph.DraftConfig(**{**FIELDS, **extra}))
    arena = torch.empty(plan.total_bytes, dtype=torch.uint8, device="cuda")
    return plan, arena, specgraph.buffers(plan, arena)


def inputs(r: ref.Round, dtype=torch.int64):
    return (torch.tensor(r.pool, dtype=dtype, device="cuda"),
            torch.tensor(r.seq, dtype=dtype, device="cuda"),
            torch.tensor(r.slots, dtype=torch.int64, device="cuda"))


def eager_round(bufs, r, r2t, dtype=torch.int64):
    b = specgraph.stage_(bufs, r.bs, *inputs(r, dtype))
    specgraph.round_setup_(bufs, b, r2t)
    for s in range(bufs.plan.config.num_steps):
        specgraph.step_metadata_(bufs, b, s)
    return b


def test_cuda_ops_equal_the_host_ops():
    plan, arena, bufs = cuda_bufs()
    host = specgraph.buffers(plan, specgraph.host_arena(plan))
    rng = random.Random(1)
    r2t = ref.random_req_to_token(plan.config, rng)
    r2t_cuda = torch.tensor(r2t, dtype=torch.int32, device="cuda")
    for i in range(10):
        r = ref.random_round(plan.config, rng)
        eager_round(bufs, r, r2t_cuda, torch.int32 if i % 2 else torch.int64)
        b = specgraph.stage_(host, r.bs, np.array(r.pool), np.array(r.seq), np.array(r.slots))
        specgraph.round_setup_(host, b, np.array(r2t, dtype=np.int32))
        for s in range(plan.config.num_steps):
            specgraph.step_metadata_(host, b, s)
        torch.cuda.synchronize()
        assert arena.cpu().numpy().tobytes() == host.arena.tobytes()
    specgraph.check_guards(bufs)


def test_ops_use_the_current_stream():
    plan, arena, bufs = cuda_bufs()
    assert _ffi.stream_for(arena) == torch.cuda.current_stream().cuda_stream
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # the arena's initialisation ran on the default
    with torch.cuda.stream(s):
        assert _ffi.stream_for(arena) == s.cuda_stream
        r = ref.random_round(plan.config, random.Random(2), bs=3)
        eager_round(bufs, r, torch.zeros(9, 64, dtype=torch.int32, device="cuda"))
    s.synchronize()
    assert bufs.seq_len[:3].tolist() == r.seq


def test_ops_recorded_in_a_cuda_graph_replay_equal_eager():
    plan, g_arena, g_bufs = cuda_bufs()
    _, e_arena, e_bufs = cuda_bufs()
    rng = random.Random(3)
    r2t = torch.tensor(ref.random_req_to_token(plan.config, rng), dtype=torch.int32,
                       device="cuda")
    eager_round(g_bufs, ref.random_round(plan.config, rng, bs=8), r2t)  # warm up
    torch.cuda.synchronize()
    graphs = []
    s = torch.cuda.Stream()
    for step in range(plan.config.num_steps):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):  # global capture mode: a stray stream would fail
            if step == 0:
                specgraph.round_setup_(g_bufs, 8, r2t)
            specgraph.step_metadata_(g_bufs, 8, step)
            flag = specgraph.count_violations_(g_bufs, torch.zeros(1, dtype=torch.int32,
                                                                   device="cuda"))
        graphs.append(g)
    for _ in range(6):
        r = ref.random_round(plan.config, rng, bs=rng.randint(5, 8))
        specgraph.stage_(g_bufs, r.bs, *inputs(r))
        for g in graphs:
            g.replay()
        eager_round(e_bufs, r, r2t)
        torch.cuda.synchronize()
        assert torch.equal(g_arena, e_arena)
        assert int(flag[0]) == 0


def page_forward(out: torch.Tensor, page_value: torch.Tensor):
    """A small forward: per query row, the sum of its branch pages' values plus cache_seqlen and
    its prefix pages' values plus prefix_seqlen, written into a static output per step."""

    def forward(v: specgraph.StepView) -> None:
        branch = page_value[v.expand_page_table.long()].sum(-1) + v.expand_cache_seqlen
        prefix = page_value[v.prefix_page_table.long()].sum(-1) + v.prefix_seqlen
        out[v.step, : v.rows].copy_(branch + prefix.repeat_interleave(v.topk))

    return forward


def expected(cfg, bucket, r, r2t_list, page_value):
    pool, seq, slots = ref.staged(cfg, bucket, r)
    lpl, pseq, table, _ = ref.prefix(cfg, bucket, pool, seq, r2t_list)
    pv = page_value.cpu().tolist()
    prefix = [sum(pv[p] for p in row) + ps for row, ps in zip(table, pseq)]
    rows = []
    for s in range(cfg.num_steps):
        t, sl = ref.expand(cfg, bucket, s, lpl, slots)
        rows.append([sum(pv[p] for p in t[i]) + sl[i] + prefix[i // cfg.topk]
                     for i in range(bucket * cfg.topk)])
    return rows


def page_world(plan, seed):
    """What the page_forward tests share: the config, a seeded rng, req_to_token (as a list for
    the reference, on the GPU for the ops), a value per page and the forward's output per step."""
    cfg = plan.config
    rng = random.Random(seed)
    r2t_list = ref.random_req_to_token(cfg, rng)
    r2t = torch.tensor(r2t_list, dtype=torch.int32, device="cuda")
    page_value = torch.randint(0, 100, (cfg.kv_slots // cfg.page_size,), device="cuda").float()
    out = torch.zeros(cfg.num_steps, plan.max_rows, device="cuda")
    return cfg, rng, r2t_list, r2t, page_value, out


def expect_steps_run(out, want, rows, num_steps, depth):
    """Steps below depth wrote the reference's rows; the steps after did not run (out was -1)."""
    for s in range(num_steps):
        got = out[s, :rows].tolist()
        assert got == (want[s] if s < depth else [-1.0] * rows), f"step {s} of depth {depth}"


@pytest.mark.parametrize("round_graphs, step_graphs", [(False, None), (True, None), (True, True)])
def test_draft_graphs_over_a_torch_forward_with_a_shared_pool(round_graphs, step_graphs):
    plan, arena, bufs = cuda_bufs(round_graphs=round_graphs)
    cfg, rng, r2t_list, r2t, page_value, out = page_world(plan, 4)
    pool = torch.cuda.graph_pool_handle()
    barriers = []
    graphs = sgt.DraftGraphs(bufs, page_forward(out, page_value), req_to_token=r2t, pool=pool,
                             before_capture=lambda b, s: barriers.append((b, s)),
                             step_graphs=step_graphs)
    report = graphs.capture()
    # Each mode captures what it replays: the steps, the round alone, or the round and the
    # num_steps - 1 step graphs shorter rounds replay.
    per_bucket = cfg.num_steps if not round_graphs or step_graphs else 1
    assert report.graphs == len(plan.buckets) * per_bucket == len(barriers)
    assert [t.bucket for t in report.per_graph][0] == 8  # largest first
    assert report.mode == "cuda_graph" and report.pool_bytes >= 0
    # a second set of graphs in the same pool (as an engine shares its pool across models)
    out2 = torch.zeros_like(out)
    other = sgt.DraftGraphs(bufs, page_forward(out2, page_value), req_to_token=r2t, pool=pool,
                            buckets=[4])
    other.capture()
    for _ in range(8):
        r = ref.random_round(cfg, rng)
        bucket = graphs.stage_(r.bs, *inputs(r))
        depth = rng.randint(1, cfg.num_steps) if graphs.step_graphs else cfg.num_steps
        out.zero_()
        graphs.run_round(depth)
        torch.cuda.synchronize()
        want = expected(cfg, bucket, r, r2t_list, page_value)
        for s in range(depth):
            assert out[s, : bucket * cfg.topk].tolist() == want[s]
    assert set(graphs.replays) <= set(graphs.graph_keys)


def test_no_allocation_during_replay():
    plan, arena, bufs = cuda_bufs()
    cfg = plan.config
    rng = random.Random(5)
    r2t = torch.tensor(ref.random_req_to_token(cfg, rng), dtype=torch.int32, device="cuda")
    out = torch.zeros(cfg.num_steps, plan.max_rows, device="cuda")
    page_value = torch.rand(cfg.kv_slots // cfg.page_size, device="cuda")
    graphs = sgt.DraftGraphs(bufs, page_forward(out, page_value), req_to_token=r2t)
    graphs.capture()
    rounds = [ref.random_round(cfg, rng) for _ in range(10)]
    staged = [inputs(r) for r in rounds]  # the engine's tensors exist before the rounds
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    for r, ins in zip(rounds, staged):
        graphs.stage_(r.bs, *ins)
        graphs.run_round()
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats()
    for key in ("allocation.all.allocated", "segment.all.allocated",
                "reserved_bytes.all.current", "allocated_bytes.all.current"):
        assert after[key] == before[key], key


def test_a_padded_bucket_is_reset_between_rounds():
    plan, arena, bufs = cuda_bufs()
    cfg, rng, r2t_list, r2t, page_value, out = page_world(plan, 6)
    graphs = sgt.DraftGraphs(bufs, page_forward(out, page_value), req_to_token=r2t)
    graphs.capture()
    full = ref.random_round(cfg, rng, bs=8)
    full.seq = [40 + i for i in range(8)]
    graphs.stage_(8, *inputs(full))
    graphs.run_round()
    r = ref.random_round(cfg, rng, bs=5)  # bucket 8: requests 5..7 are padding now
    assert graphs.stage_(5, *inputs(r)) == 8
    graphs.run_round()
    torch.cuda.synchronize()
    assert bufs.seq_len[5:8].tolist() == [1, 1, 1] and bufs.req_pool_index[5:8].tolist() == [0] * 3
    assert (bufs.prefix_page_table[5:8] == 0).all()
    want = expected(cfg, 8, r, r2t_list, page_value)
    for s in range(cfg.num_steps):
        assert out[s, :16].tolist() == want[s]


def test_device_inputs_out_of_range_are_guard_violations():
    plan, arena, bufs = cuda_bufs()
    r = ref.random_round(plan.config, random.Random(7), bs=2)
    pool, seq, slots = inputs(r)
    pool[1] = 1 << 40  # does not fit the int32 tables: refused on the device, named
    specgraph.stage_(bufs, 2, pool, seq, slots)
    flag = specgraph.count_violations_(bufs, torch.full((1,), -1, dtype=torch.int32,
                                                        device="cuda"))
    with pytest.raises(specgraph.GuardViolation) as e:
        specgraph.check_guards(bufs)
    assert e.value.buffer == "input (staging)" and e.value.row == 1
    assert int(flag[0]) == 1


def test_capture_failed_names_bucket_and_step():
    plan, arena, bufs = cuda_bufs()

    def forward(v):
        if (v.bucket, v.step) == (4, 1):
            raise RuntimeError("forward broke")

    graphs = sgt.DraftGraphs(bufs, forward, req_to_token=torch.zeros(
        9, 64, dtype=torch.int32, device="cuda"), warmups=0)
    with pytest.raises(specgraph.CaptureFailed) as e:
        graphs.capture()
    assert (e.value.bucket, e.value.step) == (4, 1) and "forward broke" in str(e.value)
    torch.cuda.synchronize()  # the device and the stream stay usable


def test_draft_graphs_with_a_device_counter_capture_one_graph_per_bucket():
    plan, arena, bufs = cuda_bufs(device_steps=True)
    cfg, rng, r2t_list, r2t, page_value, out = page_world(plan, 5)
    graphs = sgt.DraftGraphs(bufs, counter_forward(cfg, out, page_value), req_to_token=r2t)
    assert graphs.capture().graphs == len(plan.buckets)
    for _ in range(8):
        r = ref.random_round(cfg, rng)
        bucket = graphs.stage_(r.bs, *inputs(r))
        depth = rng.randint(1, cfg.num_steps)
        out.fill_(-1)
        graphs.run_round(depth)
        torch.cuda.synchronize()
        want = expected(cfg, bucket, r, r2t_list, page_value)
        expect_steps_run(out, want, bucket * cfg.topk, cfg.num_steps, depth)
        assert int(bufs.device_step[0]) == depth


def test_draft_graphs_let_the_device_decide_the_depth():
    plan, arena, bufs = cuda_bufs(device_steps=True, device_depth=True)
    cfg, rng, r2t_list, r2t, page_value, out = page_world(plan, 6)
    source = torch.zeros(cfg.num_steps, plan.max_rows, device="cuda")  # confidence per step
    graphs = sgt.DraftGraphs(bufs, counter_forward(cfg, out, page_value, source),
                             req_to_token=r2t)
    assert graphs.capture().graphs == len(plan.buckets)  # one body (and round) per bucket
    depths = set()
    for _ in range(24):
        r = ref.random_round(cfg, rng)
        max_depth = rng.randint(0, cfg.num_steps)
        min_confidence = rng.choice([0.0, 0.5, 1.0])
        levels = [[rng.choice([0.0, 0.5, 1.0]) for _ in range(plan.max_rows)]
                  for _ in range(cfg.num_steps)]
        bucket = graphs.stage_(r.bs, *inputs(r), max_depth, min_confidence)
        real_rows = r.bs * cfg.topk
        levels = [row[:real_rows] + [1.0] * (plan.max_rows - real_rows) for row in levels]
        source.copy_(torch.tensor(levels))
        out.fill_(-1)
        graphs.run_round()  # one launch
        torch.cuda.synchronize()
        depth = ref.decided_depth(cfg, real_rows, max_depth, min_confidence, levels)
        assert int(graphs.depth[0]) == depth
        want = expected(cfg, bucket, r, r2t_list, page_value)
        expect_steps_run(out, want, bucket * cfg.topk, cfg.num_steps, depth)
        depths.add(depth)
    assert depths == set(range(1, cfg.num_steps + 1))
    specgraph.check_guards(bufs)


def test_round_graph_on_the_default_stream():
    """specgraph.round_graph outside DraftGraphs, on torch's default stream (the legacy stream,
    which CUDA cannot capture): the round is captured on a private stream, and launched on the
    default stream it runs the staged depth, the body's steps advancing the counter."""
    plan, arena, bufs = cuda_bufs(device_steps=True, device_depth=True)
    cfg = plan.config
    rng = random.Random(17)
    r2t = torch.tensor(ref.random_req_to_token(cfg, rng), dtype=torch.int32, device="cuda")
    bucket = plan.buckets[-1]
    body = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(body, stream=torch.cuda.Stream()):
        specgraph.round_setup_(bufs, bucket, r2t)
        specgraph.step_metadata_device_(bufs, bucket)
        specgraph.advance_step_(bufs)
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    rg = specgraph.round_graph(bufs, bucket, body)
    for max_depth in (2, cfg.num_steps, 1):
        r = ref.random_round(cfg, rng, bs=bucket)
        specgraph.stage_(bufs, r.bs, *inputs(r), max_depth, float("-inf"))
        rg.launch()
        torch.cuda.synchronize()
        assert int(bufs.device_step[0]) == max_depth
