"""CSR indices under the device step counter (docs/device-rounds.md) from Python: one body
replayed step after step writes the step the counter holds, into the arena or the engine's
bound outputs, equal to the independent reference in csr_reference.py with every other row
untouched; a spent counter writes nothing and is recorded; DraftGraphs' device-step and
device-depth bodies hand the forward every step's rows."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import csr_reference as cref  # noqa: E402

FIELDS = dict(max_batch=6, topk=2, num_steps=4, page_size=4, max_context_len=48, pool_rows=7,
              kv_slots=1 << 12, buckets=(3, 6), device_steps=True)
POISON = -7


def make(framework="numpy", **extra):
    plan = specgraph.make_plan(specgraph.DraftConfig(**{**FIELDS, **extra}))
    arena = specgraph.host_arena(plan, framework=framework)
    return plan, arena, specgraph.buffers(plan, arena)


def random_round(cfg, rng, bs=0):
    bs = bs or rng.randint(1, cfg.max_batch)
    pool = [rng.randrange(1, cfg.pool_rows) for _ in range(bs)]
    seq = [rng.randint(1, cfg.max_context_len) for _ in range(bs)]
    slots = [rng.randrange(cfg.kv_slots) for _ in range(bs * cfg.topk * cfg.num_steps)]
    return pool, seq, slots


def case_of(cfg, bucket, pool, seq, r2t):
    bs = len(seq)
    return cref.Case(seq + [1] * (bucket - bs), pool + [0] * (bucket - bs),
                     np.asarray(r2t, np.int64), cfg.topk, cfg.num_steps, cfg.page_size,
                     slot_limit=cfg.kv_slots, max_seq_len=cfg.max_context_len)


@pytest.mark.parametrize("formats,bound,int64", [("both", False, False), ("csr", False, True),
                                                 ("both", True, True), ("csr", True, False)])
def test_one_body_replayed_writes_the_counters_step(formats, bound, int64):
    plan, arena, bufs = make(formats=formats, csr_int64=int64)
    cfg = plan.config
    n = cfg.num_steps
    rng = random.Random(1935)
    r2t = np.array([[rng.randrange(cfg.kv_slots) for _ in range(cfg.max_context_len)]
                    for _ in range(cfg.pool_rows)], np.int32)
    for _ in range(8):
        pool, seq, slots = random_round(cfg, rng)
        depth = rng.randint(1, n)
        bucket = specgraph.stage_(bufs, len(seq), np.array(pool), np.array(seq),
                                  np.array(slots))
        rows = bucket * cfg.topk
        case = case_of(cfg, bucket, pool, seq, r2t)
        out = None
        if bound:
            ip = np.full((n, plan.max_rows + 3), POISON, np.int32)
            ix = np.full((n, plan.layout["csr_capacity"][-1]), POISON,
                         np.int64 if int64 else np.int32)
            out = specgraph.bind_csr_outputs(bufs, ip[:, :-2], ix)
        else:
            whole = bufs.view(plan.buckets[-1], 0)  # every step's rows, the whole stride
            whole.kv_indptr[:] = POISON
            whole.kv_indices[:] = POISON
        for s in range(depth):  # the one body, the same calls at every step
            specgraph.round_setup_(bufs, bucket, r2t)
            if formats == "both":
                specgraph.step_metadata_device_(bufs, bucket)
            specgraph.csr_indices_device_(bufs, bucket, r2t, out=out)
            v = bufs.view(bucket, 0)
            if bound:
                v_ip, v_ix = ip, ix
            else:
                v_ip, v_ix = v.kv_indptr, v.kv_indices
                assert v_ip.shape == (n, rows + 1)
                assert v_ix.shape == (n, rows * (cfg.max_context_len + n))
            want_ip, want_ix = cref.steps(case, [s], s + 1)[s]
            assert v_ip[s, : rows + 1].tolist() == want_ip, f"step {s}"
            assert v_ix[s, : len(want_ix)].tolist() == want_ix, f"step {s}"
            assert (v_ix[s, len(want_ix):] == POISON).all()
            assert (v_ix[s + 1:] == POISON).all() and (v_ip[s + 1:] == POISON).all()
            if not bound:  # the step's own buffer is that row
                assert bufs.csr_kv_indices(s).ctypes.data == v_ix[s].ctypes.data
            specgraph.advance_step_(bufs)
        words = specgraph.read_guards(bufs)
        base = plan.layout["guard_csr_base"]
        for s in range(n):
            bad = s < depth and cref.refused(case, s + 1, not int64)
            assert (words[base + s].violations > 0) == bool(bad), (s, words[base + s])


def test_a_spent_counter_writes_nothing_and_is_recorded():
    plan, arena, bufs = make(formats="csr")
    cfg = plan.config
    r2t = np.zeros((cfg.pool_rows, cfg.max_context_len), np.int32)
    pool, seq, slots = random_round(cfg, random.Random(5), 3)
    bucket = specgraph.stage_(bufs, 3, np.array(pool), np.array(seq), np.array(slots))
    specgraph.round_setup_(bufs, bucket, r2t)
    for spent in (cfg.num_steps, cfg.num_steps + 5):
        bufs.device_step[0] = spent
        before = arena.copy()
        specgraph.csr_indices_device_(bufs, bucket, r2t)
        changed = np.flatnonzero(arena != before)
        g, sc = plan.layout["guards"], plan.find("csr.scratch")
        assert ((changed >= g) & (changed < g + plan.layout["guard_count"] * 40) |
                (changed >= sc.offset) & (changed < sc.offset + sc.bytes)).all()
        w = specgraph.read_guards(bufs)[plan.layout["guard_csr_base"]]
        assert (w.buffer, w.step, w.kind, w.row, w.column, w.capacity, w.value) == (
            "csr.kv_indices", 0, "bad input", 0, -1, cfg.num_steps, cfg.num_steps)
    with pytest.raises(specgraph.InvalidArgument) as e:
        _, _, per_step = make(formats="csr", device_steps=False)
        specgraph.csr_indices_device_(per_step, 6, r2t)
    assert e.value.field == "device_steps"


def test_draft_graphs_device_modes_hand_the_forward_every_steps_rows():
    from conftest import need_torch

    torch = need_torch()
    import specgraph.torch as sgt

    for extra, bound in (({}, False), ({"device_depth": True}, True)):
        plan, arena, bufs = make("torch", formats="both", **extra)
        cfg = plan.config
        rng = random.Random(77)
        r2t_list = [[rng.randrange(cfg.kv_slots) for _ in range(cfg.max_context_len)]
                    for _ in range(cfg.pool_rows)]
        r2t = torch.tensor(r2t_list, dtype=torch.int32)
        out = None
        if bound:
            out = specgraph.bind_csr_outputs(
                bufs, torch.zeros(cfg.num_steps, plan.max_rows + 1, dtype=torch.int32),
                torch.zeros(cfg.num_steps, plan.layout["csr_capacity"][-1], dtype=torch.int32))
        calls = []

        def forward(v: specgraph.StepView) -> None:
            s = int(v.device_step[0])
            n = int(v.kv_indptr[s, -1])
            calls.append((s, v.kv_indptr[s].clone(), v.kv_indices[s, :n].clone(),
                          v.kv_indptr.data_ptr()))
            v.confidence.fill_(1.0)  # device_depth: keep going

        g = sgt.DraftGraphs(bufs, forward, req_to_token=r2t, csr_outputs=out)
        g.capture()
        pool, seq, slots = random_round(cfg, rng, 4)
        seq = [min(x, 30) for x in seq]  # rows wide enough for every branch region
        calls.clear()
        bucket = g.stage_(4, *(torch.tensor(x) for x in (pool, seq, slots)))
        if bound:
            g.run_round()
        else:
            g.run_round(3)
        case = case_of(cfg, bucket, pool, seq, r2t_list)
        assert [c[0] for c in calls] == list(range(cfg.num_steps if bound else 3))
        for s, indptr, indices, ptr in calls:
            want_ip, want_ix = cref.steps(case, [s], s + 1)[s]
            assert indptr.tolist() == want_ip and indices.tolist() == want_ix
            assert ptr == (out.kv_indptr.data_ptr() if bound else bufs.csr_kv_indptr(0).data_ptr())


def test_device_csr_ops_pass_opcheck():
    from conftest import need_torch

    torch = need_torch()
    plan, arena, bufs = make("torch", formats="both", csr_int64=True)
    cfg = plan.config
    r2t = torch.zeros(cfg.pool_rows, cfg.max_context_len, dtype=torch.int32)
    ip = torch.zeros(cfg.num_steps, plan.max_rows + 1, dtype=torch.int32)
    ix = torch.zeros(cfg.num_steps, plan.layout["csr_capacity"][-1], dtype=torch.int64)
    ops = torch.ops.specgraph
    # In the round's order (docs/metadata.md section 11): an idle round staged and set up.
    z = torch.zeros(cfg.max_batch * cfg.topk * cfg.num_steps, dtype=torch.int64)
    specgraph.stage_(bufs, 0, z, z, z, bucket=6)
    specgraph.round_setup_(bufs, 6, r2t)
    # csr_indices_device_ is csr_indices_ with step None (the device counter's step)
    torch.library.opcheck(ops.csr_indices_.default, (arena, bufs.handle, 6, None, False, r2t))
    torch.library.opcheck(ops.csr_indices_.default,
                          (arena, bufs.handle, 6, None, False, r2t, ip, ix))
