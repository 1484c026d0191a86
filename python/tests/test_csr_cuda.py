"""The CSR ops on a GPU (docs/csr.md): CUDA arenas and outputs equal to the host path byte for
byte, the ops recorded in torch.cuda.graph replaying later rounds as eager calls write them, and
DraftGraphs handing captured forwards each step's CSR buffers (the engine's bound outputs).
Skipped visibly without a GPU; a failure with REQUIRE_GPU=1 (the GPU check)."""

from __future__ import annotations

import random

import pytest

from conftest import need_cuda

torch = need_cuda()
np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import specgraph.torch as sgt  # noqa: E402
import csr_reference as cref  # noqa: E402

FIELDS = dict(max_batch=8, topk=2, num_steps=3, page_size=4, max_context_len=64, pool_rows=9,
              kv_slots=1 << 12, buckets=(2, 4, 8), formats="both", csr_int64=True)


def make(device, **extra):
    plan = specgraph.make_plan(specgraph.DraftConfig(**{**FIELDS, **extra}))
    arena = (torch.empty(plan.total_bytes, dtype=torch.uint8, device="cuda") if device == "cuda"
             else specgraph.host_arena(plan, framework="torch"))
    return plan, arena, specgraph.buffers(plan, arena)


def random_round(cfg, rng, bs):
    pool = [rng.randrange(1, cfg.pool_rows) for _ in range(bs)]
    seq = [rng.randint(1, cfg.max_context_len - 12) for _ in range(bs)]  # rows wide enough
    slots = [rng.randrange(cfg.kv_slots) for _ in range(bs * cfg.topk * cfg.num_steps)]
    return pool, seq, slots


def stage(bufs, device, pool, seq, slots):
    t = [torch.tensor(x, dtype=torch.int64, device=device) for x in (pool, seq, slots)]
    return specgraph.stage_(bufs, len(seq), *t)


def test_cuda_csr_ops_equal_the_host_path():
    plan, arena, bufs = make("cuda")
    _, h_arena, host = make("cpu")
    cfg = plan.config
    rng = random.Random(1)
    r2t_list = [[rng.randrange(cfg.kv_slots) for _ in range(cfg.max_context_len)]
                for _ in range(cfg.pool_rows)]
    r2t = torch.tensor(r2t_list, dtype=torch.int32, device="cuda")
    h_r2t = r2t.cpu()
    for i in range(6):
        pool, seq, slots = random_round(cfg, rng, rng.randint(1, 8))
        outs = []
        for b_, dev, table in ((bufs, "cuda", r2t), (host, "cpu", h_r2t)):
            b = stage(b_, dev, pool, seq, slots)
            specgraph.round_setup_(b_, b, table)
            ip = torch.full((3, plan.max_rows + 5), -7, dtype=torch.int32, device=dev)
            ix = torch.full((3, plan.layout["csr_capacity"][-1] + 3), -7, dtype=torch.int64,
                            device=dev)
            out = specgraph.bind_csr_outputs(b_, ip[:, :-2], ix)
            if i % 2:
                specgraph.csr_round_indices_(b_, b, table)
                specgraph.csr_round_indices_(b_, b, table, out=out)
            else:
                for s in range(cfg.num_steps):
                    specgraph.csr_step_indices_(b_, b, s, table)
                    specgraph.csr_step_indices_(b_, b, s, table, out=out)
            outs.append((ip, ix))
        torch.cuda.synchronize()
        assert torch.equal(arena.cpu(), h_arena)
        assert torch.equal(outs[0][0].cpu(), outs[1][0]) and torch.equal(outs[0][1].cpu(),
                                                                          outs[1][1])
    specgraph.check_guards(bufs)


def test_csr_ops_recorded_in_cuda_graphs_replay_later_rounds():
    plan, arena, bufs = make("cuda")
    cfg = plan.config
    rng = random.Random(2)
    r2t_list = [[rng.randrange(cfg.kv_slots) for _ in range(cfg.max_context_len)]
                for _ in range(cfg.pool_rows)]
    r2t = torch.tensor(r2t_list, dtype=torch.int32, device="cuda")
    ip = torch.full((3, plan.max_rows + 1), -7, dtype=torch.int32, device="cuda")
    ix = torch.full((3, plan.layout["csr_capacity"][-1]), -7, dtype=torch.int64, device="cuda")
    out = specgraph.bind_csr_outputs(bufs, ip, ix)
    stage(bufs, "cuda", *random_round(cfg, rng, 8))  # warm up
    specgraph.round_setup_(bufs, 8, r2t)
    specgraph.csr_round_indices_(bufs, 8, r2t, out=out)
    torch.cuda.synchronize()
    graphs, s = [], torch.cuda.Stream()
    for step in range(cfg.num_steps):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            if step == 0:
                specgraph.round_setup_(bufs, 8, r2t)
            specgraph.csr_step_indices_(bufs, 8, step, r2t)
            specgraph.csr_step_indices_(bufs, 8, step, r2t, out=out)
        graphs.append(g)
    for _ in range(5):
        pool, seq, slots = random_round(cfg, rng, rng.randint(5, 8))
        stage(bufs, "cuda", pool, seq, slots)
        for g in graphs:
            g.replay()
        torch.cuda.synchronize()
        case = cref.Case(seq + [1] * (8 - len(seq)), pool + [0] * (8 - len(seq)),
                         np.array(r2t_list, np.int64), cfg.topk, cfg.num_steps, cfg.page_size,
                         slot_limit=cfg.kv_slots, max_seq_len=cfg.max_context_len)
        for step in range(cfg.num_steps):
            want_ip, want_ix = cref.steps(case, [step], step + 1)[step]
            assert ip[step].tolist() == want_ip and ix[step, : len(want_ix)].tolist() == want_ix
            assert bufs.csr_kv_indptr(step).tolist() == want_ip
            assert bufs.csr_kv_indices(step)[: len(want_ix)].tolist() == want_ix
    specgraph.check_guards(bufs)


@pytest.mark.parametrize("device_steps", [False, True])
def test_draft_graphs_capture_each_steps_csr_before_the_forward(device_steps):
    plan, arena, bufs = make("cuda", device_steps=device_steps)
    cfg = plan.config
    rng = random.Random(3)
    r2t_list = [[rng.randrange(cfg.kv_slots) for _ in range(cfg.max_context_len)]
                for _ in range(cfg.pool_rows)]
    r2t = torch.tensor(r2t_list, dtype=torch.int32, device="cuda")
    ip = torch.zeros(3, plan.max_rows + 1, dtype=torch.int32, device="cuda")
    ix = torch.zeros(3, plan.layout["csr_capacity"][-1], dtype=torch.int64, device="cuda")
    out = specgraph.bind_csr_outputs(bufs, ip, ix)
    seen = torch.zeros(cfg.num_steps, plan.max_rows + 1, dtype=torch.int32, device="cuda")

    def forward(v: specgraph.StepView) -> None:  # copies the step's kv_indptr it was handed
        if v.device_step is None:
            seen[v.step, : v.rows + 1].copy_(v.kv_indptr)
        else:  # the step on the device: a clamped row index, no host read
            row = v.device_step.long().clamp(max=cfg.num_steps - 1)
            seen.index_copy_(0, row, torch.nn.functional.pad(
                v.kv_indptr.index_select(0, row), (0, plan.max_rows - v.rows)))

    g = sgt.DraftGraphs(bufs, forward, req_to_token=r2t, csr_outputs=out, checked="sync")
    g.capture()
    for _ in range(4):
        pool, seq, slots = random_round(cfg, rng, rng.randint(1, 8))
        bucket = g.stage_(len(seq), *(torch.tensor(x, device="cuda") for x in (pool, seq, slots)))
        g.run_round()
        torch.cuda.synchronize()
        rows = bucket * cfg.topk
        case = cref.Case(seq + [1] * (bucket - len(seq)), pool + [0] * (bucket - len(seq)),
                         np.array(r2t_list, np.int64), cfg.topk, cfg.num_steps, cfg.page_size,
                         slot_limit=cfg.kv_slots, max_seq_len=cfg.max_context_len)
        for step in range(cfg.num_steps):
            want_ip, want_ix = cref.steps(case, [step], step + 1)[step]
            assert seen[step, : rows + 1].tolist() == want_ip, step
            assert ip[step, : rows + 1].tolist() == want_ip
            assert ix[step, : len(want_ix)].tolist() == want_ix
