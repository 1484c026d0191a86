"""The draft-extend metadata on a GPU (docs/extend.md): extend_metadata_ into CUDA tensors and
extend_arena_ over a CUDA arena, every written cell against the independent reference
extend_reference.py over random rounds (idle ranks, padded buckets, accepted lengths 0..W, page
sizes 1 to 64, int32 and int64 inputs, the real batch read on the device), every other output
cell and arena byte still poisoned; the arena op recorded in torch.cuda.graph replaying later
rounds. Skipped visibly without a GPU; a failure with REQUIRE_GPU=1 (the GPU check)."""

from __future__ import annotations

import random

import pytest

from conftest import need_cuda

torch = need_cuda()
np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph.extend_arena import extend_arena_, extend_view, stage_accept_len  # noqa: E402
import extend_reference as eref  # noqa: E402

DEV = "cuda"
POISON_CELL = -7  # int32 outputs
POISON_BYTE = 0xA5  # the arena
BUCKETS = (2, 4, 6)


def cells_of(ps, w, seq, accept, pool, rtt, bucket, m):
    """The reference's cells by output field name, at the bucket's exact page-table width."""
    cap = specgraph.extend_capacities(bucket, m, w, ps)
    want = eref.run(ps, w, seq, accept, pool, rtt, bucket=bucket,
                    page_table_capacity=cap.page_columns)
    fa3, tri, fi = want["fa3"], want["triton"], want["flashinfer"]
    cells = dict(want["tokens"])
    cells.update(page_table=fa3["page_table"], cache_seqlen=fa3["cache_seqlen"],
                 cu_seqlens_q=fa3["cu_seqlens_q"], cu_seqlens_k=fa3["cu_seqlens_k"],
                 max_seqlen_k=[fa3["max_seqlen_k"]], prefix_qo_indptr=tri["qo_indptr"],
                 prefix_kv_indptr=tri["kv_indptr"], prefix_kv_indices=tri["kv_indices"],
                 full_qo_indptr=fi["qo_indptr"], full_kv_indptr=fi["kv_indptr"],
                 full_kv_indices=fi["kv_indices"], full_kv_last_page_len=fi["kv_last_page_len"])
    return cells


def check_groups(groups, cells, poison=None, tag=""):
    """Each tensor's leading cells equal the reference's; with poison, the rest still hold it."""
    for group in groups:
        for name, t in zip(group._fields, group):
            assert t.device.type == DEV, name
            want = np.array(cells[name], np.int64).reshape(-1).tolist()
            got = t.cpu().reshape(-1).tolist()
            assert got[: len(want)] == want, (tag, name)
            if poison is not None:
                assert all(x == poison for x in got[len(want):]), (tag, name, "tail written")


def test_extend_metadata_into_cuda_tensors_matches_the_reference():
    rng = random.Random(20261202)
    for n in range(60):
        ps, w = [1, 2, 3, 4, 16, 64][n % 6], rng.randint(1, 8)
        bs = rng.randint(0, 4)
        bucket = max(1, bs + rng.randint(0, 2))
        m = rng.randint(1, 40)
        rows = rng.randint(1, 5)
        seq = [rng.randint(0, m) for _ in range(bs)]
        accept = [rng.randint(0, w) for _ in range(bs)]
        pool = [rng.randint(0, rows - 1) for _ in range(bs)]
        width = m + w + rng.randint(0, 3)
        rtt = [[rng.randint(0, 1 << 20) for _ in range(width)] for _ in range(rows)]
        pad = bucket - bs
        dt = torch.int64 if n % 2 else torch.int32
        out = specgraph.extend_outputs(bucket, m, w, ps, device=DEV)
        for group in (out.tokens, out.fa3, out.prefix, out.full):
            for t in group:
                t.fill_(POISON_CELL)
        real = bs if n % 3 else torch.tensor([bs], dtype=torch.int32, device=DEV)
        specgraph.extend_metadata_(
            out, torch.tensor(rtt, dtype=torch.int32, device=DEV),
            torch.tensor(pool + [0] * pad, dtype=dt, device=DEV),
            torch.tensor(seq + [0] * pad, dtype=dt, device=DEV),
            torch.tensor(accept + [w] * pad, dtype=dt, device=DEV), extend_tokens=w,
            page_size=ps, max_seq_len=m, real_batch=real)
        torch.cuda.synchronize()
        cells = cells_of(ps, w, seq, accept, pool, rtt, bucket, m)
        check_groups((out.tokens, out.fa3, out.prefix, out.full), cells, POISON_CELL, n)
        kinds = [v.kind for v in specgraph.extend_violations(out.guard.cpu())]
        assert kinds == (["accept_len"] if 0 in accept else []), (n, kinds)


def plan_for(rng, formats, w, ps, m):
    return specgraph.make_plan(specgraph.DraftConfig(
        max_batch=6, topk=2, num_steps=2, page_size=ps, max_context_len=m, pool_rows=9,
        kv_slots=1 << 20, buckets=BUCKETS, formats=formats, verify_tokens=w, draft_extend=True))


def cuda_arena(plan):
    arena = torch.empty(plan.total_bytes, dtype=torch.uint8, device=DEV)
    return arena, specgraph.buffers(plan, arena)


def stage(rng, plan, arena, bufs, bucket, poison=True):
    """A round staged on the device (the arena poisoned first): (seq, pool, accept, rtt list)."""
    c = plan.config
    w, m = c.verify_tokens, c.max_context_len
    real = rng.randint(0, bucket)  # 0: an idle rank
    seq = [rng.randint(1, m) for _ in range(real)]
    pool = [rng.randint(0, 8) for _ in range(real)]
    accept = [rng.randint(0, w) for _ in range(real)]
    rtt = [[rng.randint(0, 1 << 20) for _ in range(m + w + 2)] for _ in range(9)]
    if poison:
        arena.fill_(POISON_BYTE)
    slots = torch.zeros(max(real, 1) * c.topk * c.slot_stride, dtype=torch.int64, device=DEV)
    assert specgraph.stage_(bufs, real, torch.tensor(pool + [0], dtype=torch.int32, device=DEV),
                            torch.tensor(seq + [1], dtype=torch.int32, device=DEV), slots,
                            bucket=bucket) == bucket
    return seq, pool, accept, rtt


def written(arena, plan, v, cells):
    """A mask of the arena bytes the op may write: the section's scratch and guard words and
    every output cell the reference names."""
    changed = torch.zeros(arena.numel(), dtype=torch.bool)
    s = plan.find("extend.scratch")
    changed[s.offset: s.offset + s.bytes] = True
    base = arena.data_ptr()
    g = v.guard
    changed[g.data_ptr() - base: g.data_ptr() - base + g.numel() * 4] = True
    for group in (v.tokens, v.fa3, v.prefix, v.full):
        for name, t in zip(group._fields, group) if group is not None else ():
            start = t.data_ptr() - base
            changed[start: start + 4 * np.array(cells[name]).size] = True
    return changed


@pytest.mark.parametrize("formats", ["fa3", "csr", "both"])
def test_extend_arena_on_a_cuda_arena_matches_the_reference(formats):
    rng = random.Random(7 + len(formats))
    for n in range(20):
        w, ps = rng.randint(1, 8), [1, 2, 4, 16, 64][n % 5]
        plan = plan_for(rng, formats, w, ps, rng.randint(1, 60))
        arena, bufs = cuda_arena(plan)
        bucket = rng.choice(BUCKETS)
        seq, pool, accept, rtt = stage(rng, plan, arena, bufs, bucket)
        engine_accept = n % 3 == 0
        full_accept = accept + [rng.randint(0, w) for _ in range(bucket - len(accept))]
        if not engine_accept:
            stage_accept_len(bufs, bucket, accept)
        before = arena.cpu()
        extend_arena_(bufs, bucket, torch.tensor(rtt, dtype=torch.int32, device=DEV),
                      accept_len=torch.tensor(full_accept, dtype=torch.int32, device=DEV)
                      if engine_accept else None)
        torch.cuda.synchronize()
        c = plan.config
        cells = cells_of(ps, w, seq, accept, pool, rtt, bucket, c.max_context_len)
        v = extend_view(bufs, bucket)
        held = [x for x in ("tokens", "fa3", "prefix", "full") if getattr(v, x) is not None]
        assert held == ["tokens"] + (["fa3"] if formats != "csr" else []) + \
            (["prefix", "full"] if formats != "fa3" else [])
        check_groups([getattr(v, x) for x in held], cells, tag=n)
        keep = ~written(arena, plan, v, cells)
        assert torch.equal(arena.cpu()[keep], before[keep]), (n, "bytes outside the cells")
        kinds = [x.kind for x in specgraph.extend_violations(v.guard.cpu())]
        assert kinds == (["accept_len"] if 0 in accept else []), (n, kinds)


def test_engine_outputs_on_cuda_leave_the_section_alone():
    rng = random.Random(3)
    for n in range(12):
        w, ps = rng.randint(1, 8), rng.choice([1, 4, 16])
        plan = plan_for(rng, rng.choice(["fa3", "csr", "both"]), w, ps, rng.randint(1, 60))
        c = plan.config
        arena, bufs = cuda_arena(plan)
        bucket = rng.choice(BUCKETS)
        seq, pool, accept, rtt = stage(rng, plan, arena, bufs, bucket)
        stage_accept_len(bufs, bucket, accept)
        layouts = tuple(x for x in ("tokens", "fa3", "prefix", "full") if rng.random() < 0.5) \
            or ("fa3",)
        out = specgraph.extend_outputs(bucket, c.max_context_len, w, ps, layouts=layouts,
                                       device=DEV)
        before = arena.cpu()
        extend_arena_(bufs, bucket, torch.tensor(rtt, dtype=torch.int32, device=DEV),
                      outputs=out)
        torch.cuda.synchronize()
        cells = cells_of(ps, w, seq, accept, pool, rtt, bucket, c.max_context_len)
        check_groups([getattr(out, x) for x in layouts], cells, tag=n)
        keep = torch.ones(arena.numel(), dtype=torch.bool)
        s = plan.find("extend.scratch")
        keep[s.offset: s.offset + s.bytes] = False
        g = extend_view(bufs, bucket).guard
        start = g.data_ptr() - arena.data_ptr()
        keep[start: start + g.numel() * 4] = False
        assert torch.equal(arena.cpu()[keep], before[keep]), n


def test_the_arena_op_recorded_in_a_cuda_graph_replays_later_rounds():
    rng = random.Random(11)
    bucket, w, ps, m = 4, 5, 4, 33
    plan = plan_for(rng, "both", w, ps, m)
    arena, bufs = cuda_arena(plan)
    seq, pool, accept, rtt = stage(rng, plan, arena, bufs, bucket)
    stage_accept_len(bufs, bucket, accept)
    table = torch.tensor(rtt, dtype=torch.int32, device=DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        extend_arena_(bufs, bucket, table)  # warm-up
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        extend_arena_(bufs, bucket, table)
    v = extend_view(bufs, bucket)
    for n in range(8):  # fresh rounds: the staged inputs, accepted lengths and table change
        seq, pool, accept, rtt = stage(rng, plan, arena, bufs, bucket)
        stage_accept_len(bufs, bucket, accept)
        table.copy_(torch.tensor(rtt, dtype=torch.int32))
        g.replay()
        torch.cuda.synchronize()
        cells = cells_of(ps, w, seq, accept, pool, rtt, bucket, m)
        check_groups([v.tokens, v.fa3, v.prefix, v.full], cells, tag=n)
        kinds = [x.kind for x in specgraph.extend_violations(v.guard.cpu())]
        assert kinds == (["accept_len"] if 0 in accept else []), (n, kinds)
