"""specgraph.extend_graphs.ExtendGraphs on CPU tensors (eagerly, as DraftGraphs and VerifyGraphs
run in CI without a GPU; test_extend_graphs_cuda.py captures them): random rounds staged through
DraftGraphs (idle ranks, padded buckets, accept 0..W, formats fa3 / csr / both, the section's or
the engine's accepted lengths), the extend section poisoned before each round and every written
cell compared with the independent extend_reference.py; the forward sees this round's tables;
calls out of order refused naming the field and what comes first; the graph count."""

from __future__ import annotations

import random

import pytest

from conftest import need_torch

torch = need_torch()
np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import specgraph.torch as sgt  # noqa: E402
from specgraph.extend_graphs import ExtendGraphs  # noqa: E402
import extend_reference as eref  # noqa: E402

POISON = -0x5A5A5A5B  # int32 0xA5A5A5A5
BUCKETS = (2, 4, 6)
POOL_ROWS = 9


def make_plan(formats: str, w: int, ps: int, m: int):
    return specgraph.make_plan(specgraph.DraftConfig(
        max_batch=6, topk=2, num_steps=2, page_size=ps, max_context_len=m,
        pool_rows=POOL_ROWS, kv_slots=1 << 20, buckets=BUCKETS, formats=formats,
        verify_tokens=w, draft_extend=True))


def draft_graphs(plan, rtt, device="cpu"):
    arena = specgraph.host_arena(plan, framework="torch") if device == "cpu" else torch.empty(
        plan.total_bytes, dtype=torch.uint8, device=device)
    bufs = specgraph.buffers(plan, arena)
    dg = sgt.DraftGraphs(bufs, lambda v: None, req_to_token=rtt, warmups=1)
    dg.capture()
    return dg


def section_tensors(v):
    return [t for g in (v.tokens, v.fa3, v.prefix, v.full) if g is not None for t in g]


def expected_cells(plan, bucket, seq, pool, accept, rtt):
    """The reference's cells by the views' field names, at the bucket's exact page columns."""
    c = plan.config
    cap = specgraph.extend_capacities(bucket, c.max_context_len, c.verify_tokens, c.page_size)
    want = eref.run(c.page_size, c.verify_tokens, seq, accept, pool, rtt.tolist(), bucket=bucket,
                    page_table_capacity=cap.page_columns)
    fa3, tri, fi = want["fa3"], want["triton"], want["flashinfer"]
    cells = dict(want["tokens"])
    cells.update(page_table=fa3["page_table"], cache_seqlen=fa3["cache_seqlen"],
                 cu_seqlens_q=fa3["cu_seqlens_q"], cu_seqlens_k=fa3["cu_seqlens_k"],
                 max_seqlen_k=[fa3["max_seqlen_k"]], prefix_qo_indptr=tri["qo_indptr"],
                 prefix_kv_indptr=tri["kv_indptr"], prefix_kv_indices=tri["kv_indices"],
                 full_qo_indptr=fi["qo_indptr"], full_kv_indptr=fi["kv_indptr"],
                 full_kv_indices=fi["kv_indices"], full_kv_last_page_len=fi["kv_last_page_len"])
    return cells, want["violations"]


def check_cells(v, cells, copies=None):
    """Every layout the view holds against the reference, cell by cell; the cells past what the
    op writes (the kv_indices' spare capacity) keep the poison. copies: the forward's copies."""
    held = [g for g in (v.tokens, v.fa3, v.prefix, v.full) if g is not None]
    k = 0
    for group in held:
        for name, t in zip(group._fields, group):
            want = np.array(cells[name], np.int64).reshape(-1)
            got = t.detach().cpu().reshape(-1).to(torch.int64).numpy()
            assert got[: want.size].tolist() == want.tolist(), name
            assert (got[want.size:] == POISON).all(), name
            if copies is not None:
                assert copies[k].cpu().reshape(-1).tolist() == got.tolist(), name
            k += 1


class Recorder:
    """An extend forward that copies the tables it is handed into tensors of its own (inside the
    graph on a GPU): what the forward saw, after this replay's metadata."""

    def __init__(self):
        self.copies = None
        self.calls = 0

    def __call__(self, v):
        if self.copies is None or len(self.copies) != len(section_tensors(v)) or any(
                c.shape != t.shape for c, t in zip(self.copies, section_tensors(v))):
            self.copies = [torch.empty_like(t) for t in section_tensors(v)]
        for c, t in zip(self.copies, section_tensors(v)):
            c.copy_(t)
        self.calls += 1


def random_rounds(formats, device="cpu", rounds=12, seed=0):
    """Stages random rounds through DraftGraphs and runs ExtendGraphs; checks every round."""
    rng = random.Random(seed + len(formats))
    for case in range(3):
        w, ps, m = rng.randint(1, 8), rng.choice([1, 2, 4, 16, 64]), rng.randint(1, 60)
        plan = make_plan(formats, w, ps, m)
        rtt = torch.randint(0, 1 << 20, (POOL_ROWS, m + w + rng.randint(0, 3)),
                            dtype=torch.int32).to(device)
        dg = draft_graphs(plan, rtt, device)
        engine = rng.random() < 0.5
        acc_t = torch.full((6,), 7, dtype=torch.int32, device=device) if engine else None
        fwd = {b: Recorder() for b in BUCKETS}
        eg = ExtendGraphs(dg, lambda v: fwd[v.bucket](v), accept_len=acc_t, checked="off")
        report = eg.capture()
        assert eg.graph_keys == [6, 4, 2]
        assert report.graphs == (3 if device != "cpu" else 0)
        assert report.mode == ("cuda_graph" if device != "cpu" else "eager")
        if device != "cpu":
            assert eg.pool is dg.pool  # the draft graphs' pool
        for n in range(rounds):
            bucket = rng.choice(BUCKETS)
            real = rng.randint(0, bucket)  # 0: an idle rank
            seq = [rng.randint(1, m) for _ in range(real)]
            pool = [rng.randint(0, POOL_ROWS - 1) for _ in range(real)]
            accept = [rng.randint(0, w) for _ in range(real)]
            v = eg.view(bucket)
            for t in section_tensors(v):
                t.fill_(POISON)
            slots = torch.zeros((max(real, 1), 2, plan.config.slot_stride), dtype=torch.int64,
                                device=device)
            assert dg.stage_(real, torch.tensor(pool + [0], dtype=torch.int32, device=device),
                             torch.tensor(seq + [1], dtype=torch.int32, device=device), slots,
                             bucket=bucket) == bucket
            if engine:  # the engine's acceptance writes its tensor (padding: anything)
                acc_t.copy_(torch.tensor(accept + [rng.randint(0, w) for _ in range(6 - real)],
                                         dtype=torch.int32))
                assert eg.stage_() == bucket
            else:
                assert eg.stage_(accept) == bucket
            eg.run()
            cells, _ = expected_cells(plan, bucket, seq, pool, accept, rtt.cpu())
            check_cells(v, cells, fwd[bucket].copies)
            kinds = [x.kind for x in specgraph.extend_violations(v.guard)]
            assert kinds == (["accept_len"] if 0 in accept else []), (case, n, kinds)
        assert sum(eg.replays.values()) == rounds


@pytest.mark.parametrize("formats", ["fa3", "csr", "both"])
def test_random_rounds_match_the_reference_and_the_forward_sees_them(formats):
    random_rounds(formats)


def small(formats="both", accept_len=None, checked="off"):
    plan = make_plan(formats, 3, 2, 11)
    rtt = torch.randint(0, 1 << 20, (POOL_ROWS, 14), dtype=torch.int32)
    dg = draft_graphs(plan, rtt)
    return plan, dg, ExtendGraphs(dg, lambda v: None, accept_len=accept_len, checked=checked)


def stage(dg, bs, bucket=None):
    return dg.stage_(bs, torch.ones(max(bs, 1), dtype=torch.int32),
                     torch.full((max(bs, 1),), 4, dtype=torch.int32),
                     torch.zeros((max(bs, 1), 2, 2), dtype=torch.int64), bucket=bucket)


def refused(field, call, words=()):
    with pytest.raises(specgraph.InvalidArgument) as e:
        call()
    assert e.value.field == field, str(e.value)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_calls_out_of_order_are_refused_naming_what_comes_first():
    plan, dg, eg = small()
    refused("capture", eg.run, ["before capture()"])
    refused("stage_", lambda: eg.stage_([1]), ["DraftGraphs.stage_ first"])
    eg.capture()
    refused("stage_", eg.run, ["nothing staged"])
    stage(dg, 2, bucket=4)
    refused("accept_len", lambda: eg.stage_([1]), ["1 lengths", "2 requests"])
    refused("accept_len", lambda: eg.stage_(None), ["2 ints"])
    refused("accept_len[1]", lambda: eg.stage_([1, 4]))
    refused("accept_len[0]", lambda: eg.stage_([-1, 1]))
    assert eg.stage_([3, 1]) == 4
    eg.run()
    eg.run()  # the same round again
    assert eg.replays == {4: 2}
    stage(dg, 1)  # a new round drops the staged extend round
    refused("stage_", eg.run, ["a new round was staged since"])
    assert eg.stage_([2]) == 2
    eg.run()
    eg.capture()  # drops it too
    refused("stage_", eg.run, ["nothing staged"])


def test_the_bucket_subset_the_bound_accept_len_and_refused_constructions():
    plan, dg, _ = small()
    acc = torch.ones(6, dtype=torch.int32)
    eg = ExtendGraphs(dg, lambda v: None, buckets=[2], accept_len=acc)
    assert eg.graph_keys == [2] and eg.capture().graphs == 0
    stage(dg, 3)
    refused("stage_", eg.stage_, ["bucket 4 has no extend graph"])
    stage(dg, 2)
    refused("accept_len", lambda: eg.stage_([1, 1]), ["stage_() without lengths"])
    assert eg.stage_() == 2
    refused("buckets[0]", lambda: ExtendGraphs(dg, lambda v: None, buckets=[3]))
    for bad in (torch.ones(5, dtype=torch.int32), torch.ones(6, dtype=torch.int64), [1] * 6):
        refused("accept_len", lambda: ExtendGraphs(dg, lambda v: None, accept_len=bad))
    refused("checked", lambda: ExtendGraphs(dg, lambda v: None, checked="never"))
    with pytest.raises(TypeError):
        ExtendGraphs(dg.bufs, lambda v: None)
    with pytest.raises(TypeError):
        ExtendGraphs(dg, None)
    no_ext = specgraph.make_plan(specgraph.DraftConfig(
        max_batch=6, topk=2, num_steps=2, page_size=2, max_context_len=11, pool_rows=POOL_ROWS,
        kv_slots=1 << 20, buckets=BUCKETS, verify_tokens=3))
    plain = draft_graphs(no_ext, torch.zeros((POOL_ROWS, 14), dtype=torch.int32))
    refused("draft_extend", lambda: ExtendGraphs(plain, lambda v: None))


def test_checked_modes_raise_on_an_accepted_length_of_zero():
    plan, dg, eg = small(checked="sync")
    eg.capture()
    stage(dg, 2)
    eg.stage_([1, 3])
    eg.run()
    eg.stage_([2, 0])
    with pytest.raises(specgraph.GuardViolation) as e:
        eg.run()
    assert e.value.row == 1 and e.value.bucket == 2 and "extend" in str(e.value)
    _, dg, eg = small(checked="async")
    eg.capture()
    stage(dg, 2)
    eg.stage_([0, 1])
    eg.run()  # the count lands after this run
    with pytest.raises(specgraph.GuardViolation) as e:
        eg.poll()
    assert e.value.violations == 1


def test_a_forward_that_raises_names_the_bucket():
    plan, dg, _ = small()

    def forward(v):
        if v.bucket == 4:
            raise RuntimeError("boom")

    with pytest.raises(specgraph.CaptureFailed) as e:
        ExtendGraphs(dg, forward).capture()
    assert e.value.bucket == 4 and "extend graph of bucket 4" in str(e.value)
