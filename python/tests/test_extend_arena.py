"""specgraph.extend_arena: the draft-extend metadata written into the plan's draft-extend section
(DraftConfig(verify_tokens=W, draft_extend=True)) from a round staged with specgraph.stage_ and
the section's (staged) or the engine's accepted lengths, on a numpy arena poisoned around the
written cells: every buffer equals the independent model of extend_reference.py over random
rounds (idle ranks, padded buckets, accept 0..W, page sizes 1 to 64, formats fa3 / csr / both),
cell by cell, and every other arena byte is untouched; the engine's outputs likewise; refusals
name their field with nothing written. The torch path: opcheck of torch.ops.specgraph.
extend_arena_ and torch.compile(aot_eager, fullgraph) byte-equal to eager."""

from __future__ import annotations

import random
import re

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph.extend_arena import extend_arena_, extend_view, stage_accept_len  # noqa: E402
import extend_reference as eref  # noqa: E402
from conftest import need_torch  # noqa: E402

POISON = 0xA5
BUCKETS = (2, 4, 6)


def plan_for(rng: random.Random, formats: str, w: int, ps: int = 0, m: int = 0):
    cfg = specgraph.DraftConfig(max_batch=6, topk=2, num_steps=2,
                                page_size=ps or rng.choice([1, 2, 4, 16, 64]),
                                max_context_len=m or rng.randint(1, 70), pool_rows=9,
                                kv_slots=1 << 20, buckets=BUCKETS, formats=formats,
                                verify_tokens=w, draft_extend=True)
    return specgraph.make_plan(cfg)


def staged_round(rng: random.Random, nrng, plan, arena, bufs, bucket: int):
    """A poisoned arena with a round staged: (real, seq, pool, accept, req_to_token)."""
    c = plan.config
    w, m = c.verify_tokens, c.max_context_len
    real = rng.randint(0, bucket)  # 0: an idle rank
    seq = [rng.randint(1, m) for _ in range(real)]
    pool = [rng.randint(0, 8) for _ in range(real)]
    accept = [rng.randint(0, w) for _ in range(real)]
    rtt = nrng.integers(0, 1 << 20, (9, m + w + rng.randint(0, 3))).astype(np.int32)
    arena[:] = POISON
    slots = np.zeros(max(real, 1) * c.topk * c.slot_stride, np.int64)
    assert specgraph.stage_(bufs, real, np.array(pool + [0], np.int32),
                            np.array(seq + [1], np.int32), slots, bucket=bucket) == bucket
    return real, seq, pool, accept, rtt


def expected(plan, bucket, seq, pool, accept, rtt):
    """The reference's cells by field name (every cell the op writes), at the bucket's exact
    page-table width."""
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


def layouts_of(formats: str):
    return ["tokens"] + (["fa3"] if formats != "csr" else []) + \
        (["prefix", "full"] if formats != "fa3" else [])


def check_tables(sets, cells, arena=None, changed=None):
    """Each layout's tensors against the reference, cell by cell; marks the written bytes."""
    for group in sets:
        for name, t in zip(group._fields, group):
            flat = np.array(cells[name], np.int64).reshape(-1)
            got = np.asarray(t).reshape(-1)
            assert got[: flat.size].tolist() == flat.tolist(), name
            if changed is not None:
                start = got.ctypes.data - arena.ctypes.data
                changed[start: start + 4 * flat.size] = True


def mark_section_words(plan, v, arena, changed):
    s = plan.find("extend.scratch")
    changed[s.offset: s.offset + s.bytes] = True
    g = np.asarray(v.guard)
    start = g.ctypes.data - arena.ctypes.data
    changed[start: start + g.nbytes] = True


@pytest.mark.parametrize("formats", ["fa3", "csr", "both"])
def test_staged_rounds_in_the_arena_match_the_reference(formats):
    rng = random.Random(20261202 + len(formats))
    nrng = np.random.default_rng(11)
    for n in range(40):
        w = rng.randint(1, 8)
        plan = plan_for(rng, formats, w, ps=[1, 2, 4, 16, 64][n % 5])
        arena = specgraph.host_arena(plan)
        bufs = specgraph.buffers(plan, arena)
        bucket = rng.choice(BUCKETS)
        real, seq, pool, accept, rtt = staged_round(rng, nrng, plan, arena, bufs, bucket)
        v = extend_view(bufs, bucket)
        engine_accept = rng.random() < 0.4
        if engine_accept:  # the engine's own tensor, read in place
            acc = np.array(accept + [rng.randint(0, w) for _ in range(bucket - real)], np.int32)
        else:
            stage_accept_len(bufs, bucket, accept)
            assert v.accept_len.tolist() == accept + [1] * (bucket - real)
        before = arena.copy()
        extend_arena_(bufs, bucket, rtt, accept_len=acc if engine_accept else None)
        cells, violations = expected(plan, bucket, seq, pool, accept, rtt)
        held = layouts_of(formats)
        assert [x for x in ("tokens", "fa3", "prefix", "full") if getattr(v, x)] == held
        changed = np.zeros(arena.size, bool)
        check_tables([getattr(v, x) for x in held], cells, arena, changed)
        mark_section_words(plan, v, arena, changed)
        assert (arena[~changed] == before[~changed]).all(), n
        kinds = [x.kind for x in specgraph.extend_violations(v.guard)]
        assert kinds == (["accept_len"] if 0 in accept else []), (n, kinds, violations)


def test_engine_outputs_any_subset_leave_the_section_alone():
    rng = random.Random(7)
    nrng = np.random.default_rng(3)
    for n in range(24):
        formats = rng.choice(["fa3", "csr", "both"])
        plan = plan_for(rng, formats, rng.randint(1, 8))
        c = plan.config
        arena = specgraph.host_arena(plan)
        bufs = specgraph.buffers(plan, arena)
        bucket = rng.choice(BUCKETS)
        real, seq, pool, accept, rtt = staged_round(rng, nrng, plan, arena, bufs, bucket)
        stage_accept_len(bufs, bucket, accept)
        layouts = tuple(x for x in ("tokens", "fa3", "prefix", "full") if rng.random() < 0.5) \
            or ("full",)  # any subset, whatever the plan's formats
        out = specgraph.extend_outputs(bucket, c.max_context_len, c.verify_tokens, c.page_size,
                                       layouts=layouts)
        before = arena.copy()
        extend_arena_(bufs, bucket, rtt, outputs=out)
        cells, _ = expected(plan, bucket, seq, pool, accept, rtt)
        check_tables([getattr(out, x) for x in layouts], cells)
        changed = np.zeros(arena.size, bool)
        mark_section_words(plan, extend_view(bufs, bucket), arena, changed)
        assert (arena[~changed] == before[~changed]).all(), n
        assert (np.asarray(out.guard) == 0).all()  # not the op's: the section's words are used


def test_views_are_the_sections_with_cpp_capacities():
    rng = random.Random(1)
    plan = plan_for(rng, "both", 3, ps=4, m=21)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    for bucket in BUCKETS:
        v = extend_view(bufs, bucket)
        assert v is extend_view(bufs, bucket)  # cached
        cap = specgraph.extend_capacities(bucket, 21, 3, 4)
        assert (v.page_capacity, v.prefix_kv_capacity, v.full_kv_capacity) == \
            (cap.page_columns, cap.prefix_kv_indices, cap.full_kv_indices)
        assert v.fa3.page_table.shape == (bucket, cap.page_columns)
        assert v.prefix.prefix_kv_indices.shape == (cap.prefix_kv_indices,)
        assert v.full.full_kv_indices.shape == (cap.full_kv_indices,)
        assert v.tokens.position.shape == (bucket * 3,) and v.accept_len.shape == (bucket,)
        assert v.guard.shape == (cap.guard_words, 10)
        assert v.fa3.page_table.ctypes.data - bufs.arena.ctypes.data == \
            plan.find("extend.page_table").offset


def test_refusals_name_the_field_and_write_nothing():
    rng = random.Random(5)
    plan = plan_for(rng, "both", 4, ps=2, m=12)
    c = plan.config
    arena = specgraph.host_arena(plan)
    bufs = specgraph.buffers(plan, arena)
    rtt = np.zeros((9, 16), np.int32)
    out = specgraph.extend_outputs(2, 12, 4, 2)
    small = specgraph.extend_outputs(2, 11, 4, 2, layouts=("prefix",))
    arena[:] = POISON
    before = arena.copy()
    acc = np.ones(2, np.int32)
    cases = [
        ("bucket", lambda: extend_arena_(bufs, 3, rtt)),
        ("req_to_token", lambda: extend_arena_(bufs, 2, rtt[:, :11].copy())),
        ("req_to_token", lambda: extend_arena_(bufs, 2, rtt[:8])),
        ("accept_len", lambda: extend_arena_(bufs, 2, rtt, accept_len=acc.astype(np.int64))),
        ("accept_len", lambda: extend_arena_(bufs, 2, rtt, accept_len=np.ones(3, np.int32))),
        ("outputs.page_table", lambda: extend_arena_(
            bufs, 2, rtt, outputs=out._replace(fa3=out.fa3._replace(page_table=None)))),
        ("prefix_kv_indices", lambda: extend_arena_(bufs, 2, rtt, outputs=small)),
        ("full_kv_indices", lambda: extend_arena_(bufs, 2, rtt, outputs=out._replace(
            full=out.full._replace(full_kv_indices=out.full.full_kv_indices[:10])))),
        ("cu_seqlens_k", lambda: extend_arena_(bufs, 2, rtt, outputs=out._replace(
            fa3=out.fa3._replace(cu_seqlens_k=out.fa3.cu_seqlens_q)))),
        ("outputs", lambda: extend_arena_(bufs, 2, rtt, outputs=specgraph.ExtendOutputs(
            None, None, None, None, out.guard))),
        ("bucket", lambda: stage_accept_len(bufs, 5, [1])),
        ("accept_len", lambda: stage_accept_len(bufs, 2, [1, 1, 1])),
        ("accept_len[1]", lambda: stage_accept_len(bufs, 2, [1, 5])),
        ("accept_len[0]", lambda: stage_accept_len(bufs, 2, [-1])),
        ("bucket", lambda: extend_view(bufs, 5)),
    ]
    for field, call in cases:
        with pytest.raises(specgraph.InvalidArgument, match="^" + re.escape(field)) as e:
            call()
        assert e.value.field == field, (field, str(e.value))
        assert (arena == before).all(), field
        assert all((np.asarray(t) == 0).all() for g in (out.tokens, out.fa3, out.prefix,
                                                         out.full, small.prefix) for t in g)
    with pytest.raises(TypeError):
        extend_arena_(bufs, 2, rtt, outputs=(1, 2))
    none = specgraph.make_plan(specgraph.DraftConfig(
        max_batch=6, topk=2, num_steps=2, page_size=4, max_context_len=8, pool_rows=9,
        kv_slots=1 << 20, buckets=BUCKETS, verify_tokens=c.verify_tokens))
    nb = specgraph.buffers(none, specgraph.host_arena(none))
    for call in (lambda: extend_arena_(nb, 2, rtt), lambda: stage_accept_len(nb, 2, [1]),
                 lambda: extend_view(nb, 2)):
        with pytest.raises(specgraph.InvalidArgument) as e:
            call()
        assert e.value.field == "draft_extend"


def test_a_row_narrower_than_the_window_is_bad_input_written_as_padding():
    rng = random.Random(2)
    nrng = np.random.default_rng(2)
    plan = plan_for(rng, "both", 4, ps=4, m=12)
    arena = specgraph.host_arena(plan)
    bufs = specgraph.buffers(plan, arena)
    specgraph.stage_(bufs, 2, np.array([1, 2], np.int32), np.array([3, 12], np.int32),
                     np.zeros(2 * 2 * 2, np.int64), bucket=2)
    stage_accept_len(bufs, 2, [2, 2])
    rtt = nrng.integers(0, 1 << 20, (9, 12)).astype(np.int32)  # request 1 needs 12 + 4 columns
    extend_arena_(bufs, 2, rtt)
    v = extend_view(bufs, 2)
    found = specgraph.extend_violations(v.guard)
    assert [x.kind for x in found] == ["bad input"] and found[0].row == 1, found
    assert v.fa3.cache_seqlen.tolist() == [7, 1]  # request 1 as a padded one (L = 1)


def test_rows_acceptance_accepted_nothing_for_are_padding():
    """accept_index (acceptance's, as RoundGraphs passes its round section's): a real row whose
    first entry is negative (an idle row, a stalled round) is written as a padded row, its
    inputs unread (junk here, an accepted length of 0 included, which is then not recorded);
    every other row as without it. A wrong shape is refused by name, nothing written."""
    rng = random.Random(5)
    nrng = np.random.default_rng(5)
    padded_rows = 0
    for n in range(30):
        w = rng.randint(1, 6)
        plan = plan_for(rng, "both", w, ps=[1, 2, 4, 16][n % 4])
        arena = specgraph.host_arena(plan)
        bufs = specgraph.buffers(plan, arena)
        bucket = rng.choice(BUCKETS)
        real, seq, pool, accept, rtt = staged_round(rng, nrng, plan, arena, bufs, bucket)
        s = plan.config.num_steps + 1
        index = nrng.integers(-5, 99, (bucket, s)).astype(np.int32)
        skip = [r < real and rng.random() < 0.4 for r in range(bucket)]
        for r in range(bucket):
            index[r, 0] = -1 if skip[r] else rng.randint(0, 99)
            if skip[r]:  # junk: never read
                accept[r] = 0
        padded_rows += sum(skip)
        stage_accept_len(bufs, bucket, accept)
        extend_arena_(bufs, bucket, rtt, accept_index=index)
        v = extend_view(bufs, bucket)
        c = plan.config
        cap = specgraph.extend_capacities(bucket, c.max_context_len, c.verify_tokens, c.page_size)
        want = eref.run(c.page_size, c.verify_tokens, seq, accept, pool, rtt.tolist(),
                        bucket=bucket, page_table_capacity=cap.page_columns, padded=skip)
        assert v.tokens.out_cache_loc.tolist() == want["tokens"]["out_cache_loc"], n
        assert v.tokens.position.tolist() == want["tokens"]["position"], n
        assert v.fa3.cache_seqlen.tolist() == want["fa3"]["cache_seqlen"], n
        assert v.full.full_kv_indptr.tolist() == want["flashinfer"]["kv_indptr"], n
        live = [accept[r] for r in range(real) if not skip[r]]
        kinds = [x.kind for x in specgraph.extend_violations(v.guard)]
        assert kinds == (["accept_len"] if 0 in live else []), (n, kinds)
    assert padded_rows > 0
    before = arena.copy()
    with pytest.raises(specgraph.InvalidArgument) as e:
        extend_arena_(bufs, bucket, rtt, accept_index=np.zeros((bucket, 1), np.int32))
    assert "accept_index" in str(e.value)
    assert (arena == before).all()


def test_config_refuses_draft_extend_without_the_window():
    kw = dict(max_batch=6, topk=2, num_steps=2, page_size=4, max_context_len=8, pool_rows=9,
              kv_slots=1 << 20)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.DraftConfig(**kw, draft_extend=True)
    assert e.value.field == "draft_extend" and "verify_tokens 0" in str(e.value)
    with pytest.raises(TypeError):
        specgraph.DraftConfig(**kw, verify_tokens=2, draft_extend="yes")
    plain = specgraph.make_plan(specgraph.DraftConfig(**kw, verify_tokens=2))
    assert not any(b.name.startswith("extend.") for b in plain.buffers)
    assert specgraph.DraftConfig(**kw, verify_tokens=2, draft_extend=True).draft_extend


# ---- the torch path (CPU tensors) ------------------------------------------------------------

def torch_round(torch, seed: int = 9, formats: str = "both"):
    rng = random.Random(seed)
    plan = plan_for(rng, formats, 3, ps=2, m=17)
    arena = specgraph.host_arena(plan, framework="torch")
    bufs = specgraph.buffers(plan, arena)
    rtt = torch.randint(0, 1 << 20, (9, 17 + 3), dtype=torch.int32)
    pool = torch.tensor([3, 5, 0], dtype=torch.int32)
    seq = torch.tensor([17, 4, 1], dtype=torch.int32)
    slots = torch.zeros((2, 2, 2), dtype=torch.int64)
    specgraph.stage_(bufs, 2, pool, seq, slots, bucket=4)
    stage_accept_len(bufs, 4, [3, 0])
    return plan, arena, bufs, rtt


def test_torch_op_passes_opcheck():
    torch = need_torch()
    plan, arena, bufs, rtt = torch_round(torch)
    assert bufs.handle
    op = torch.ops.specgraph.extend_arena_.default
    assert "Tensor(a!) arena" in str(op._schema) and "Tensor? accept_len" in str(op._schema)
    torch.library.opcheck(op, (arena, bufs.handle, 4, rtt, None, None, False, [], [], [], []))
    out = specgraph.extend_outputs(4, 17, 3, 2, layouts=("tokens", "full"), device="cpu")
    acc = torch.tensor([1, 2, 3, 3], dtype=torch.int32)
    index = torch.tensor([[0, 1, -1], [-1, 0, 0], [6, -1, -1], [9, 10, -1]], dtype=torch.int32)
    torch.library.opcheck(op, (arena, bufs.handle, 4, rtt, acc, index, True, list(out.tokens), [],
                               [], list(out.full)))


def test_torch_path_equals_the_numpy_path():
    torch = need_torch()
    plan, arena, bufs, rtt = torch_round(torch)
    twin = specgraph.host_arena(plan)
    tb = specgraph.buffers(plan, twin)
    specgraph.stage_(tb, 2, np.array([3, 5, 0], np.int32), np.array([17, 4, 1], np.int32),
                     np.zeros((2, 2, 2), np.int64), bucket=4)
    stage_accept_len(tb, 4, [3, 0])
    extend_arena_(bufs, 4, rtt)
    extend_arena_(tb, 4, rtt.numpy())
    assert arena.numpy().tobytes() == twin.tobytes()
    with pytest.raises(specgraph.InvalidArgument) as e:  # never reaches the dispatcher
        out = specgraph.extend_outputs(4, 17, 3, 2, layouts=("tokens",), device="cpu")
        extend_arena_(bufs, 4, rtt, outputs=out._replace(
            tokens=out.tokens._replace(position=None)))
    assert e.value.field == "outputs.position"


def test_torch_compile_fullgraph_equals_eager():
    torch = need_torch()
    plan, arena, bufs, rtt = torch_round(torch)
    _, twin, tbufs, _ = torch_round(torch)
    acc = torch.tensor([2, 1, 3, 3], dtype=torch.int32)
    out = specgraph.extend_outputs(4, 17, 3, 2, layouts=("fa3",), device="cpu")
    eager_out = specgraph.extend_outputs(4, 17, 3, 2, layouts=("fa3",), device="cpu")

    def make(b, o):
        def fn(r2t, a):
            extend_arena_(b, 4, r2t)
            extend_arena_(b, 4, r2t, accept_len=a, outputs=o)
            return extend_view(b, 4).tokens.select_index + 0
        return fn

    want = make(tbufs, eager_out)(rtt, acc)
    got = torch.compile(make(bufs, out), backend="aot_eager", fullgraph=True)(rtt, acc)
    assert torch.equal(got, want)
    assert arena.numpy().tobytes() == twin.numpy().tobytes()
    for a, b in zip(out.fa3, eager_out.fa3):
        assert a.numpy().tobytes() == b.numpy().tobytes()
