"""The CSR views and the device step over the engine's own buffers (docs/csr.md sections 2, 3
and 5): step_csr_views over bound outputs is each step's exact slice, rows * (M + s + 1)
entries, which a full batch at seq_len = M fills to the last entry (and what DraftGraphs hands
the forward); csr_indices_device_ with the engine's inputs read in place writes only the step
the device counter holds, and a counter outside the round writes nothing and is recorded.
Fresh random rounds against the independent model in csr_reference.py, outputs poisoned and
every cell checked."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import csr_reference as cref  # noqa: E402

POISON = -7


def random_fields(rng: random.Random, **extra) -> dict:
    topk, ps, steps = rng.randint(1, 4), rng.choice([1, 2, 4]), rng.randint(2, 4)
    max_batch = rng.randint(1, 4)
    return dict(dict(max_batch=max_batch, topk=topk, num_steps=steps, page_size=ps,
                     max_context_len=rng.randint(4, 24), pool_rows=rng.randint(2, 5),
                     kv_slots=1 << 16, formats=rng.choice(["csr", "both"]),
                     csr_int64=rng.random() < 0.5), **extra)


def wide_r2t(cfg, rng: random.Random):
    """req_to_token rows wide enough for every branch region of seq_len up to M (docs/csr.md
    section 1): no request is refused, so a full batch at seq_len = M fills C_s."""
    ps, s = cfg.page_size, cfg.num_steps
    width = cfg.max_context_len + cfg.topk * ps * (-(-(ps - 1 + s) // ps))
    return np.array([[rng.randrange(cfg.kv_slots) for _ in range(width)]
                     for _ in range(cfg.pool_rows)], np.int32)


def bound_outputs(bufs, int64: bool, pad: int):
    """The engine's kv_indptr / kv_indices, poisoned, rows `pad` entries wider than needed (a
    slice of a wider buffer); returns (indptr, indices, the bound CsrOutputs)."""
    plan = bufs.plan
    n = plan.config.num_steps
    ip = np.full((n, plan.max_rows + 1 + pad), POISON, np.int32)
    ix = np.full((n, plan.layout["csr_capacity"][-1] + pad), POISON,
                 np.int64 if int64 else np.int32)
    return ip, ix, specgraph.bind_csr_outputs(bufs, ip[:, : plan.max_rows + 1], ix)


def case_of(cfg, r2t, pool, seq, bucket):
    bs = len(seq)  # padded requests: seq_len 1 on pool row 0
    return cref.Case(seq + [1] * (bucket - bs), pool + [0] * (bucket - bs),
                     r2t.astype(np.int64), cfg.topk, cfg.num_steps, cfg.page_size,
                     slot_limit=cfg.kv_slots, max_seq_len=cfg.max_context_len)


def test_step_views_over_bound_outputs_are_the_exact_step_slices():
    rng = random.Random(20261202)
    full_seen = 0
    for trial in range(24):
        plan = specgraph.make_plan(specgraph.DraftConfig(**random_fields(rng)))
        cfg = plan.config
        bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
        r2t = wide_r2t(cfg, rng)
        ip, ix, out = bound_outputs(bufs, cfg.csr_int64, pad=rng.randint(1, 9))
        full = trial % 2 == 0  # the full batch at seq_len = M: C_s used to the last entry
        bs = cfg.max_batch if full else rng.randint(1, cfg.max_batch)
        pool = [rng.randrange(1, cfg.pool_rows) for _ in range(bs)]
        seq = [cfg.max_context_len if full else rng.randint(1, cfg.max_context_len)
               for _ in range(bs)]
        slots = np.array([rng.randrange(cfg.kv_slots) for _ in range(bs * cfg.topk *
                                                                     cfg.num_steps)])
        bucket = specgraph.stage_(bufs, bs, np.array(pool), np.array(seq), slots)
        specgraph.round_setup_(bufs, bucket, r2t)
        case = case_of(cfg, r2t, pool, seq, bucket)
        rows, m = bucket * cfg.topk, cfg.max_context_len
        want = cref.steps(case, list(range(cfg.num_steps)), cfg.num_steps)
        for s in range(cfg.num_steps):
            specgraph.csr_step_indices_(bufs, bucket, s, r2t, out=out)
            v_ip, v_ix = specgraph.csr.step_csr_views(bufs, bucket, s, out)
            assert v_ip.shape == (rows + 1,) and v_ix.shape == (rows * (m + s + 1),), (trial, s)
            assert np.shares_memory(v_ix, ix[s]) and v_ix.ctypes.data == ix[s].ctypes.data
            assert v_ip.ctypes.data == ip[s].ctypes.data
            w_ip, w_ix = want[s]
            assert v_ip.tolist() == w_ip, (trial, s)
            assert v_ix[: len(w_ix)].tolist() == w_ix, (trial, s)
            assert (v_ix[len(w_ix):] == POISON).all()  # a short batch leaves the rest
            assert (ix[s, v_ix.size:] == POISON).all()  # past the view: never written
            if full and bucket == bs:
                assert len(w_ix) == v_ix.size  # the last entry of C_s is a real slot
                full_seen += 1
            # the arena's own view of the step: the same exact slice
            a_ip, a_ix = specgraph.csr.step_csr_views(bufs, bucket, s)
            assert a_ip.shape == v_ip.shape and a_ix.shape == v_ix.shape
        assert [g for g in specgraph.read_guards(bufs) if g.violations] == []
    assert full_seen > 0


def test_device_step_views_over_bound_outputs_hold_every_step():
    rng = random.Random(9)
    plan = specgraph.make_plan(specgraph.DraftConfig(**random_fields(rng, device_steps=True)))
    cfg = plan.config
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    ip, ix, out = bound_outputs(bufs, cfg.csr_int64, pad=3)
    for bucket in plan.buckets:
        rows, n = bucket * cfg.topk, cfg.num_steps
        v_ip, v_ix = specgraph.csr.step_csr_views(bufs, bucket, 0, out)
        assert v_ip.shape == (n, rows + 1)
        assert v_ix.shape == (n, rows * (cfg.max_context_len + n))  # the widest step's slice
        assert v_ix.ctypes.data == ix.ctypes.data


def test_draft_graphs_hand_the_forward_the_exact_bound_views(torch_mod):
    """DraftGraphs(csr_outputs=...) on the CPU (eager): each step's forward sees its step's
    whole slice of the engine's buffers, a full batch at seq_len = M written to its last entry."""
    torch = torch_mod
    from specgraph.torch import DraftGraphs

    rng = random.Random(31)
    fields = dict(max_batch=2, topk=2, num_steps=3, page_size=4, max_context_len=8,
                  pool_rows=4, kv_slots=1 << 12, formats="csr")
    plan = specgraph.make_plan(specgraph.DraftConfig(**fields))
    cfg = plan.config
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework="torch"))
    r2t_np = wide_r2t(cfg, rng)
    r2t = torch.from_numpy(r2t_np)
    ip = torch.full((cfg.num_steps, plan.max_rows + 1), POISON, dtype=torch.int32)
    ix = torch.full((cfg.num_steps, plan.layout["csr_capacity"][-1] + 5), POISON,
                    dtype=torch.int32)
    out = specgraph.bind_csr_outputs(bufs, ip, ix)
    seen = {}

    def forward(v):
        seen[int(v.kv_indptr.numel()), int(v.kv_indices.numel())] = (
            v.kv_indptr.tolist(), v.kv_indices.tolist())

    graphs = DraftGraphs(bufs, forward, req_to_token=r2t, csr_outputs=out, warmups=0)
    graphs.capture()
    pool, seq = [1, 3], [cfg.max_context_len] * 2
    slots = torch.randint(0, cfg.kv_slots, (2, cfg.topk, cfg.num_steps), dtype=torch.int64)
    i32 = dict(dtype=torch.int32)
    seen.clear()
    graphs.stage_(2, torch.tensor(pool, **i32), torch.tensor(seq, **i32), slots)
    graphs.run_round(cfg.num_steps)
    rows, m = 2 * cfg.topk, cfg.max_context_len
    want = cref.steps(case_of(cfg, r2t_np, pool, seq, 2), list(range(cfg.num_steps)),
                      cfg.num_steps)
    assert sorted(seen) == [(rows + 1, rows * (m + s + 1)) for s in range(cfg.num_steps)]
    for s in range(cfg.num_steps):
        got_ip, got_ix = seen[rows + 1, rows * (m + s + 1)]
        assert (got_ip, got_ix) == (want[s][0], want[s][1]), s  # every entry a real slot
        assert (ix[s, rows * (m + s + 1):] == POISON).all()


@pytest.mark.parametrize("into", ["arena", "bound"])
def test_the_device_step_in_place_writes_only_the_counters_step(into):
    """csr_indices_device_(..., inputs=): at counter s only step s's rows are written (the
    later steps' rows stay poison), and a counter outside [0, num_steps) writes nothing and
    records bad input in step 0's CSR guard word."""
    rng = random.Random(20261203 if into == "arena" else 77)
    for trial in range(6):
        plan = specgraph.make_plan(specgraph.DraftConfig(**random_fields(
            rng, device_steps=True, max_batch=rng.randint(2, 5))))
        cfg = plan.config
        n = cfg.num_steps
        arena = specgraph.host_arena(plan)
        bufs = specgraph.buffers(plan, arena)
        r2t = wide_r2t(cfg, rng)
        max_bs = plan.max_bucket
        pool = np.zeros(max_bs, np.int64)
        seq = np.ones(max_bs, np.int32)
        slots = np.zeros((max_bs, cfg.topk, n), np.int64)
        real = np.zeros(1, np.int32)
        inputs = specgraph.bind_inputs(bufs, req_pool_indices=pool, seq_lens=seq,
                                       out_cache_loc=slots, real_batch=real)
        bs = rng.randint(1, cfg.max_batch)
        bucket = plan.bucket_for(bs)
        r_pool = [rng.randrange(1, cfg.pool_rows) for _ in range(bs)]
        r_seq = [rng.randint(1, cfg.max_context_len) for _ in range(bs)]
        pool[:bs], seq[:bs], real[0] = r_pool, r_seq, bs  # the engine pads its rows past bs
        rows = bucket * cfg.topk
        if into == "bound":
            v_ip, v_ix, out = bound_outputs(bufs, cfg.csr_int64, pad=2)
        else:
            out = None
            whole = bufs.view(plan.max_bucket, 0)  # every step's rows at the whole stride
            whole.kv_indptr[:] = POISON
            whole.kv_indices[:] = POISON
            v_ip, v_ix = whole.kv_indptr, whole.kv_indices
        want = cref.steps(case_of(cfg, r2t, r_pool, r_seq, bucket), list(range(n)), n)
        specgraph.begin_round_(bufs)
        specgraph.round_setup_(bufs, bucket, r2t, inputs=inputs)
        for s in range(n):
            assert int(bufs.device_step[0]) == s
            specgraph.csr_indices_device_(bufs, bucket, r2t, out=out, inputs=inputs)
            w_ip, w_ix = want[s]
            assert v_ip[s, : rows + 1].tolist() == w_ip, (trial, s)
            assert v_ix[s, : len(w_ix)].tolist() == w_ix, (trial, s)
            assert (v_ix[s, len(w_ix):] == POISON).all()
            assert (v_ip[s + 1:] == POISON).all() and (v_ix[s + 1:] == POISON).all(), (
                f"counter {s}: a later step's rows were written")
            specgraph.advance_step_(bufs)
        assert [g for g in specgraph.read_guards(bufs) if g.violations] == []
        for spent in (n, n + rng.randint(1, 4), -1):
            bufs.device_step[0] = spent
            before = (arena.copy(), v_ip.copy(), v_ix.copy())
            specgraph.csr_indices_device_(bufs, bucket, r2t, out=out, inputs=inputs)
            assert (v_ip == before[1]).all() and (v_ix == before[2]).all(), spent
            changed = np.flatnonzero(arena != before[0])
            g, sc = plan.layout["guards"], plan.find("csr.scratch")
            assert ((changed >= g) & (changed < g + plan.layout["guard_count"] * 40) |
                    (changed >= sc.offset) & (changed < sc.offset + sc.bytes)).all()
            w = specgraph.read_guards(bufs)[plan.layout["guard_csr_base"]]
            assert (w.buffer, w.step, w.kind, w.row, w.column, w.capacity) == (
                "csr.kv_indices", 0, "bad input", 0, -1, n), (spent, w)
