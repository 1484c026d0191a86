"""The CSR ops on the torch path (CPU tensors): torch.ops.specgraph.csr_* equal to the numpy
path byte for byte, opcheck (schemas, fake implementations), torch.compile (aot_eager and
inductor, fullgraph), the profiler, and DraftGraphs handing each step's kv_indptr / kv_indices
to the forward (the arena's or the engine's bound outputs) in the per-step and round bodies,
against the independent reference in csr_reference.py. Skipped visibly without torch."""

from __future__ import annotations

import os
import random

import pytest

from conftest import need_torch

torch = need_torch()
np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import specgraph.torch as sgt  # noqa: E402
from specgraph import _capture  # noqa: E402
import csr_reference as cref  # noqa: E402

FIELDS = dict(max_batch=5, topk=3, num_steps=3, page_size=4, max_context_len=40, pool_rows=6,
              kv_slots=1 << 12, buckets=(2, 5))
POISON = -7


def make(framework="torch", **extra):
    plan = specgraph.make_plan(specgraph.DraftConfig(**{**FIELDS, "formats": "both", **extra}))
    arena = specgraph.host_arena(plan, framework=framework)
    return plan, arena, specgraph.buffers(plan, arena)


def round_inputs(cfg, rng: random.Random, bs: int):
    pool = [rng.randrange(1, cfg.pool_rows) for _ in range(bs)]
    seq = [rng.randint(1, cfg.max_context_len - 16) for _ in range(bs)]  # rows wide enough
    slots = [rng.randrange(cfg.kv_slots) for _ in range(bs * cfg.topk * cfg.num_steps)]
    r2t = [[rng.randrange(cfg.kv_slots) for _ in range(cfg.max_context_len)]
           for _ in range(cfg.pool_rows)]
    return pool, seq, slots, r2t


def want_steps(cfg, bucket, pool, seq, r2t, d_max=None):
    bs = len(seq)
    case = cref.Case(seq + [1] * (bucket - bs), pool + [0] * (bucket - bs),
                     np.array(r2t, np.int64), cfg.topk, cfg.num_steps, cfg.page_size,
                     slot_limit=cfg.kv_slots, max_seq_len=cfg.max_context_len)
    return {s: cref.steps(case, [s], d_max or s + 1)[s] for s in range(cfg.num_steps)}


def outputs(plan, lib, int64: bool, strided: bool):
    n, rows, widest = plan.config.num_steps, plan.max_rows, plan.layout["csr_capacity"][-1]
    pad = 4 if strided else 0
    dt = (lib.int64 if int64 else lib.int32)
    if lib is torch:
        return (torch.full((n, rows + 1 + pad), POISON, dtype=torch.int32),
                torch.full((n, widest + pad), POISON, dtype=dt), pad)
    return (np.full((n, rows + 1 + pad), POISON, np.int32), np.full((n, widest + pad), POISON, dt),
            pad)


@pytest.mark.parametrize("int64,strided", [(False, False), (True, True)])
def test_torch_path_equals_the_numpy_path(int64, strided):
    rng = random.Random(1901)
    plan, arena, bufs = make(csr_int64=int64)
    _, n_arena, nbufs = make("numpy", csr_int64=int64)
    cfg = plan.config
    for i in range(6):
        pool, seq, slots, r2t = round_inputs(cfg, rng, rng.randint(1, 5))
        t_r2t, n_r2t = torch.tensor(r2t, dtype=torch.int32), np.array(r2t, np.int32)
        b = specgraph.stage_(bufs, len(seq), torch.tensor(pool), torch.tensor(seq),
                             torch.tensor(slots))
        assert b == specgraph.stage_(nbufs, len(seq), np.array(pool), np.array(seq),
                                     np.array(slots))
        specgraph.round_setup_(bufs, b, t_r2t)
        specgraph.round_setup_(nbufs, b, n_r2t)
        tp, ti, pad = outputs(plan, torch, int64, strided)
        npp, nix, _ = outputs(plan, np, int64, strided)
        w = plan.layout["csr_capacity"][-1]
        t_out = specgraph.bind_csr_outputs(bufs, tp[:, : tp.shape[1] - pad], ti[:, :w])
        n_out = specgraph.bind_csr_outputs(nbufs, npp[:, : npp.shape[1] - pad], nix[:, :w])
        if i % 2:
            specgraph.csr_round_indices_(bufs, b, t_r2t)
            specgraph.csr_round_indices_(nbufs, b, n_r2t)
            specgraph.csr_round_indices_(bufs, b, t_r2t, out=t_out)
            specgraph.csr_round_indices_(nbufs, b, n_r2t, out=n_out)
        else:
            for s in range(cfg.num_steps):
                specgraph.csr_step_indices_(bufs, b, s, t_r2t)
                specgraph.csr_step_indices_(nbufs, b, s, n_r2t)
                specgraph.csr_step_indices_(bufs, b, s, t_r2t, out=t_out)
                specgraph.csr_step_indices_(nbufs, b, s, n_r2t, out=n_out)
        assert arena.numpy().tobytes() == n_arena.tobytes()
        assert np.array_equal(tp.numpy(), npp) and np.array_equal(ti.numpy(), nix)
        # Into the outputs, a round is one launch refusing by the last step's reads; into the
        # arena every step is its own launch.
        want = want_steps(cfg, b, pool, seq, r2t, cfg.num_steps if i % 2 else None)
        in_arena = want_steps(cfg, b, pool, seq, r2t)
        rows = b * cfg.topk
        for s, (ip, ix) in want.items():
            assert tp[s, : rows + 1].tolist() == ip and ti[s, : len(ix)].tolist() == ix
            assert (ti[s, len(ix):] == POISON).all() and (tp[s, rows + 1:] == POISON).all()
            ip, ix = in_arena[s]
            assert bufs.csr_kv_indptr(s)[: rows + 1].tolist() == ip
            assert bufs.csr_kv_indices(s)[: len(ix)].tolist() == ix


def test_csr_ops_pass_opcheck():
    plan, arena, bufs = make()
    cfg = plan.config
    pool, seq, slots, r2t = round_inputs(cfg, random.Random(2), 3)
    r2t = torch.tensor(r2t, dtype=torch.int32)
    b = specgraph.stage_(bufs, 3, torch.tensor(pool), torch.tensor(seq), torch.tensor(slots))
    specgraph.round_setup_(bufs, b, r2t)
    ip, ix, _ = outputs(plan, torch, True, False)
    h, ops = bufs.handle, torch.ops.specgraph
    op = ops.csr_indices_.default  # a step, or with whole_round every step
    for args in [(arena, h, b, 1, False, r2t), (arena, h, b, None, True, r2t),
                 (arena, h, b, 2, False, r2t, ip, ix), (arena, h, b, None, True, r2t, ip, ix)]:
        torch.library.opcheck(op, args)
    # the engine's outputs are optional arguments, declared mutated
    schema = str(op._schema)
    assert "Tensor(a!) arena" in schema and "Tensor(b!)? kv_indptr" in schema
    assert "Tensor(c!)? kv_indices" in schema


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_sees_the_csr_ops(backend):
    if backend == "inductor" and os.environ.get("SPECGRAPH_SKIP_INDUCTOR") == "1":
        pytest.skip("SPECGRAPH_SKIP_INDUCTOR=1")
    plan, arena, bufs = make()
    cfg = plan.config
    pool, seq, slots, r2t_list = round_inputs(cfg, random.Random(3), 4)
    r2t = torch.tensor(r2t_list, dtype=torch.int32)
    ip, ix, _ = outputs(plan, torch, False, False)
    out = specgraph.bind_csr_outputs(bufs, ip, ix)

    def round_fn(arena, pool, seq, slots, r2t, ip, ix):
        bucket = specgraph.stage_(bufs, 4, pool, seq, slots)
        specgraph.round_setup_(bufs, bucket, r2t)
        specgraph.csr_step_indices_(bufs, bucket, 1, r2t)
        specgraph.csr_round_indices_(bufs, bucket, r2t, out=out)
        off = plan.find("csr.kv_indptr").offset + 4 * (plan.max_rows + 1)  # step 1's row
        return arena[off: off + 4 * 16].view(torch.int32) + ip[2, :16] + ix[0, :16]

    args = (torch.tensor(pool), torch.tensor(seq), torch.tensor(slots), r2t)
    eager = round_fn(arena, *args, ip, ix).clone()
    want = (arena.clone(), ip.clone(), ix.clone())
    specgraph.initialize_(bufs)
    ip.fill_(POISON)
    ix.fill_(POISON)
    got = torch.compile(round_fn, backend=backend, fullgraph=True)(arena, *args, ip, ix)
    assert torch.equal(got, eager)
    assert torch.equal(arena, want[0])  # the mutations reached the caller's tensors
    assert torch.equal(ip, want[1]) and torch.equal(ix, want[2])
    w = want_steps(cfg, 5, pool, seq, r2t_list, cfg.num_steps)
    assert ip[2, :16].tolist() == w[2][0] and ix[0, :len(w[0][1])].tolist() == w[0][1]


def test_csr_ops_show_up_in_the_profiler_by_name():
    plan, arena, bufs = make()
    r2t = torch.zeros(plan.config.pool_rows, plan.config.max_context_len, dtype=torch.int32)
    specgraph.stage_(bufs, 2, torch.tensor([1, 2]), torch.tensor([3, 4]),
                     torch.zeros(18, dtype=torch.int64))
    specgraph.round_setup_(bufs, 2, r2t)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        specgraph.csr_step_indices_(bufs, 2, 0, r2t)
        specgraph.csr_round_indices_(bufs, 2, r2t)
    names = {e.name for e in prof.events()}
    # one torch op for a step and for the whole round (the whole_round argument)
    assert "specgraph::csr_indices_" in names


def recorder(calls):
    def forward(v: specgraph.StepView) -> None:
        n = int(v.kv_indptr[-1])
        calls.append((v.bucket, v.step, v.kv_indptr.clone(), v.kv_indices[:n].clone(),
                      v.kv_indptr.data_ptr(), v.kv_indices.data_ptr(), v.kv_indices.numel(),
                      v.expand_page_table is None))
    return forward


@pytest.mark.parametrize("formats,bound", [("both", False), ("csr", False), ("both", True),
                                           ("csr", True)])
def test_draft_graphs_hand_each_step_its_csr_buffers(formats, bound):
    plan, arena, bufs = make(formats=formats, csr_int64=bound)
    cfg = plan.config
    rng = random.Random(4)
    pool, seq, slots, r2t_list = round_inputs(cfg, rng, 3)
    r2t = torch.tensor(r2t_list, dtype=torch.int32)
    out = None
    if bound:
        ip, ix, _ = outputs(plan, torch, True, True)
        out = specgraph.bind_csr_outputs(bufs, ip[:, :-4], ix)
    calls = []
    g = sgt.DraftGraphs(bufs, recorder(calls), req_to_token=r2t, csr_outputs=out,
                        checked="sync")
    g.capture()
    calls.clear()
    assert g.stage_(3, torch.tensor(pool), torch.tensor(seq), torch.tensor(slots)) == 5
    g.run_round(cfg.num_steps)  # eager on the CPU: the step bodies, each step's CSR first
    want = want_steps(cfg, 5, pool, seq, r2t_list)
    assert [(c[0], c[1]) for c in calls] == [(5, s) for s in range(cfg.num_steps)]
    for bucket, s, indptr, indices, p_ptr, i_ptr, i_len, no_fa3 in calls:
        assert indptr.tolist() == want[s][0] and indices.tolist() == want[s][1]
        assert no_fa3 == (formats == "csr")
        assert i_len == 15 * (cfg.max_context_len + s + 1)  # the bucket's exact capacity
        if bound:  # the engine's own buffers, row s
            assert (p_ptr, i_ptr) == (out.kv_indptr[s].data_ptr(), out.kv_indices[s].data_ptr())
        else:
            assert (p_ptr, i_ptr) == (bufs.csr_kv_indptr(s).data_ptr(),
                                      bufs.csr_kv_indices(s).data_ptr())
    # The whole-round body (round_graphs) records the same steps in one graph.
    calls.clear()
    g.stage_(3, torch.tensor(pool), torch.tensor(seq), torch.tensor(slots))
    body = _capture.StepBody(bufs, recorder(calls), r2t, out)
    body.record(5, sgt.ROUND, device_steps=False)
    assert [(c[1], c[2].tolist(), c[3].tolist()) for c in calls] == [
        (s, want[s][0], want[s][1]) for s in range(cfg.num_steps)]


def test_draft_graphs_refuse_outputs_without_csr():
    plan, arena, bufs = make(formats="fa3")
    r2t = torch.zeros(plan.config.pool_rows, plan.config.max_context_len, dtype=torch.int32)
    _, _, cbufs = make()
    out = specgraph.bind_csr_outputs(cbufs, *outputs(cbufs.plan, torch, False, False)[:2])
    with pytest.raises(specgraph.InvalidArgument) as e:
        sgt.DraftGraphs(bufs, lambda v: None, req_to_token=r2t, csr_outputs=out)
    assert e.value.field == "csr_outputs"
    with pytest.raises(TypeError, match="^csr_outputs: expected"):
        sgt.DraftGraphs(cbufs, lambda v: None, req_to_token=r2t, csr_outputs=(1, 2))
