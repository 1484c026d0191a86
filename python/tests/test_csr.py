"""The CSR draft-decode indices (docs/csr.md) through the Python ops on the host path (numpy
arrays, host executor): fresh random rounds (topk 1..8, page sizes 1/2/4/16, padded buckets,
int32 and int64, refused requests) against the independent model in csr_reference.py, into the
plan's arena and into engine-owned outputs (contiguous and strided), with poisoned buffers and
an exact check of every cell written; the spec's worked examples; bad outputs and arguments
named with nothing written; the views; guard words named by buffer and step."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import csr_reference as cref  # noqa: E402

POISON = -7


def random_fields(rng: random.Random) -> dict:
    topk, ps, steps = rng.randint(1, 8), rng.choice([1, 2, 4, 16]), rng.randint(1, 5)
    # Room for the branch regions of most lengths (the rest: rows too narrow, refused).
    margin = (topk - 1) * ps * (-(-(ps - 1 + steps) // ps)) + steps
    max_batch = rng.randint(1, 6)
    buckets = () if rng.random() < 0.5 else tuple(sorted(
        set(rng.sample(range(1, max_batch + 1), rng.randint(1, max_batch)) + [max_batch])))
    return dict(max_batch=max_batch, topk=topk, num_steps=steps, page_size=ps,
                max_context_len=margin + rng.randint(1, 20), pool_rows=rng.randint(2, 6),
                kv_slots=rng.choice([1 << 12, 1 << 20]), buckets=buckets,
                formats=rng.choice(["csr", "both"]), csr_int64=rng.random() < 0.5)


def make(**fields):
    plan = specgraph.make_plan(specgraph.DraftConfig(**fields))
    arena = specgraph.host_arena(plan)
    return plan, arena, specgraph.buffers(plan, arena)


def stage(bufs, rng: random.Random, r2t, bs: int = 0):
    """A random round staged and set up; returns (bucket, the reference case of the bucket)."""
    cfg = bufs.plan.config
    bs = bs or rng.randint(1, cfg.max_batch)
    pool = [rng.randrange(1, cfg.pool_rows) for _ in range(bs)]
    seq = [rng.randint(1, cfg.max_context_len) for _ in range(bs)]
    slots = np.array([rng.randrange(cfg.kv_slots) for _ in range(bs * cfg.topk * cfg.num_steps)])
    bucket = specgraph.stage_(bufs, bs, np.array(pool), np.array(seq), slots)
    specgraph.round_setup_(bufs, bucket, r2t)
    # Padded requests: seq_len 1 on pool row 0 (docs/csr.md section 2).
    case = cref.Case(seq + [1] * (bucket - bs), pool + [0] * (bucket - bs),
                     r2t.astype(np.int64), cfg.topk, cfg.num_steps, cfg.page_size,
                     slot_limit=cfg.kv_slots, max_seq_len=cfg.max_context_len)
    return bucket, case


def random_r2t(cfg, rng: random.Random, bad: bool):
    r2t = np.array([[rng.randrange(cfg.kv_slots) for _ in range(cfg.max_context_len)]
                    for _ in range(cfg.pool_rows)], dtype=np.int32)
    if bad:  # a slot out of range: the requests reading it are refused
        r2t[rng.randrange(cfg.pool_rows), rng.randrange(cfg.max_context_len)] = rng.choice(
            [-1, cfg.kv_slots])
    return r2t


def allowed_bytes(plan, outputs: bool):
    """The arena bytes a CSR op may write: the guard words, the CSR scratch and (into the arena)
    its CSR buffers."""
    mask = np.zeros(plan.total_bytes, dtype=bool)
    names = ["csr.scratch"] + ([] if outputs else ["csr.kv_indptr", "csr.kv_indices"])
    for b in plan.buffers:
        if b.name in names:
            mask[b.offset: b.offset + b.bytes] = True
    g = plan.layout["guards"]
    mask[g: g + plan.layout["guard_count"] * 40] = True
    return mask


def engine_outputs(plan, rng: random.Random, int64: bool):
    """Poisoned kv_indptr / kv_indices, exactly sized or wider, contiguous or strided rows (a
    slice of a wider buffer); returns (the whole buffers, the views passed)."""
    n, rows = plan.config.num_steps, plan.max_rows
    widest = plan.layout["csr_capacity"][-1]
    extra = rng.choice([0, 0, 3])
    big_p = np.full((n + extra, rows + 1 + extra + rng.choice([0, 5])), POISON, np.int32)
    big_i = np.full((n + extra, widest + extra + rng.choice([0, 9])), POISON,
                    np.int64 if int64 else np.int32)
    ip = big_p[:, : rows + 1 + extra] if rng.random() < 0.5 else big_p
    ix = big_i[:, : widest + extra] if rng.random() < 0.5 else big_i
    return big_p, big_i, ip, ix


def check_step(got_indptr, got_indices, want, rows: int):
    indptr, indices = want
    assert got_indptr[: rows + 1].tolist() == indptr
    assert (got_indptr[rows + 1:] == POISON).all()
    assert got_indices[: len(indices)].tolist() == indices
    assert (got_indices[len(indices):] == POISON).all()


def check_guards(bufs, bad, launches):
    """CSR guard words: bad input recorded by exactly the launches that saw a refused request."""
    base = bufs.plan.layout["guard_csr_base"]
    words = specgraph.read_guards(bufs)
    for s in range(bufs.plan.config.num_steps):
        w = words[base + s]
        assert (w.buffer, w.step) == ("csr.kv_indices", s)
        if bad and s in launches:
            assert (w.kind, w.kernel) == ("bad input", "draft_kv_indices") and w.violations > 0
            assert w.row // bufs.plan.config.topk in bad  # the refused request's rows
        else:
            assert w.violations == 0, w


def test_random_rounds_match_the_independent_reference():
    rng = random.Random(19)
    rounds = refused_rounds = 0
    for _ in range(90):
        plan, arena, bufs = make(**random_fields(rng))
        cfg, n = plan.config, plan.config.num_steps
        for _ in range(3):
            r2t = random_r2t(cfg, rng, bad=rng.random() < 0.25)
            bucket, case = stage(bufs, rng, r2t)
            rows = bucket * cfg.topk
            path = rng.choice(["step", "round", "step-out", "round-out"])
            for s in range(n):
                bufs.csr_kv_indptr(s)[:] = POISON
                bufs.csr_kv_indices(s)[:] = POISON
            out = None
            if path.endswith("out"):
                big_p, big_i, ip, ix = engine_outputs(plan, rng, rng.random() < 0.5)
                out = specgraph.bind_csr_outputs(bufs, ip, ix)
            before = arena.copy()
            if path.startswith("step"):
                order = rng.sample(range(n), rng.randint(1, n))  # any steps, any order
                for s in order:
                    specgraph.csr_step_indices_(bufs, bucket, s, r2t, out=out)
                want = {s: cref.steps(case, [s], s + 1)[s] for s in order}
                bad = {s: cref.refused(case, s + 1, not cfg.csr_int64) for s in order}
            else:
                specgraph.csr_round_indices_(bufs, bucket, r2t, out=out)
                order = list(range(n))
                # Into the arena: one launch per step (its own d_max); out: one launch.
                d = {s: (n if out is not None else s + 1) for s in order}
                want = {s: cref.steps(case, [s], d[s])[s] for s in order}
                bad = {s: cref.refused(case, d[s], out is None and not cfg.csr_int64)
                       for s in order}
            if out is None:
                for s in range(n):
                    if s in want:
                        check_step(bufs.csr_kv_indptr(s), bufs.csr_kv_indices(s), want[s], rows)
                    else:  # a step not run: untouched
                        assert (bufs.csr_kv_indptr(s) == POISON).all()
                        assert (bufs.csr_kv_indices(s) == POISON).all()
            else:
                for s in range(big_p.shape[0]):
                    if s in want:
                        check_step(big_p[s], big_i[s], want[s], rows)
                    else:
                        assert (big_p[s] == POISON).all() and (big_i[s] == POISON).all()
            changed = arena != before
            assert not (changed & ~allowed_bytes(plan, out is not None)).any()
            launches = set(order) if (out is None or path.startswith("step")) else {0}
            all_bad = set().union(*bad.values())
            check_guards(bufs, all_bad, {s for s in launches if bad.get(s)})
            rounds += 1
            refused_rounds += bool(all_bad)
    assert rounds == 270 and 20 < refused_rounds < 200, refused_rounds  # both kinds exercised


def a1_case():
    """Spec section 5, A1: ps 1, topk 2, 3 steps, seq_len [3, 2], rows 100 + p and 200 + p."""
    plan, arena, bufs = make(max_batch=2, topk=2, num_steps=3, page_size=1, max_context_len=16,
                             pool_rows=3, kv_slots=1024, formats="both")
    r2t = np.zeros((3, 16), np.int32)
    r2t[1] = 100 + np.arange(16)
    r2t[2] = 200 + np.arange(16)
    b = specgraph.stage_(bufs, 2, np.array([1, 2]), np.array([3, 2]), np.arange(12))
    specgraph.round_setup_(bufs, b, r2t)
    return plan, bufs, r2t, b


def test_worked_example_a1_into_the_arena():
    plan, bufs, r2t, b = a1_case()
    specgraph.csr_round_indices_(bufs, b, r2t)
    assert [bufs.csr_kv_indptr(s).tolist() for s in range(3)] == [
        [0, 4, 8, 11, 14], [0, 5, 10, 14, 18], [0, 6, 12, 17, 22]]
    assert bufs.csr_kv_indices(0)[:14].tolist() == [100, 101, 102, 103, 100, 101, 102, 106,
                                                   200, 201, 202, 200, 201, 205]
    assert bufs.csr_kv_indices(2)[17:22].tolist() == [200, 201, 205, 206, 207]


@pytest.mark.parametrize("int64", [False, True])
def test_worked_example_a2_into_engine_outputs(int64):
    """A2: ps 4, topk 2, 2 steps, seq_len [6] on pages 5, 9, 2, 7, 3, 11 (branch 1 drafts in
    its own page-aligned region, slots 10, 11)."""
    plan, arena, bufs = make(max_batch=1, topk=2, num_steps=2, page_size=4, max_context_len=24,
                             pool_rows=2, kv_slots=1024, formats="csr")
    pages = np.array([5, 9, 2, 7, 3, 11])
    r2t = np.zeros((2, 24), np.int32)
    r2t[1] = pages[np.arange(24) // 4] * 4 + np.arange(24) % 4
    b = specgraph.stage_(bufs, 1, np.array([1]), np.array([6]), np.arange(4))
    specgraph.round_setup_(bufs, b, r2t)
    ip = np.full((2, 3), POISON, np.int32)
    ix = np.full((2, 2 * 26), POISON, np.int64 if int64 else np.int32)
    out = specgraph.bind_csr_outputs(bufs, ip, ix)
    assert out.int64 == int64 and (out.kv_indptr_stride, out.kv_indices_stride) == (3, 52)
    specgraph.csr_round_indices_(bufs, b, r2t, out=out)
    assert ip.tolist() == [[0, 7, 14], [0, 8, 16]]
    assert ix[0, :14].tolist() == [20, 21, 22, 23, 36, 37, 38, 20, 21, 22, 23, 36, 37, 10]
    assert ix[1, :16].tolist() == [20, 21, 22, 23, 36, 37, 38, 39, 20, 21, 22, 23, 36, 37, 10,
                                   11]
    assert (ix[0, 14:] == POISON).all() and (ix[1, 16:] == POISON).all()


def test_bad_outputs_are_named_with_their_sizes_and_nothing_is_written():
    plan, bufs, r2t, b = a1_case()
    n, rows, widest = 3, plan.max_rows, plan.layout["csr_capacity"][-1]
    assert widest == rows * (16 + n)
    good_p, good_i = np.zeros((n, rows + 1), np.int32), np.zeros((n, widest), np.int32)
    wide_i = np.zeros((n, 2 * widest), np.int32)
    shared = np.zeros(n * (rows + 1) + n * widest, np.int32)
    a = bufs.arena
    cases = [
        # Today's engine sizing, max_bs * topk * max_context_len: no room for the draft entries.
        ((good_p, np.zeros((n, rows * 16), np.int32)), "kv_indices",
         [f"shape [3, {rows * 16}] ({n * rows * 16} entries)", f"{n * widest} entries",
          "max_bs * topk * max_context_len"]),
        ((good_p, np.zeros((n - 1, widest), np.int32)), "kv_indices", ["[num_steps 3"]),
        ((np.zeros((n, rows), np.int32), good_i), "kv_indptr",
         [f"shape [3, {rows}] ({n * rows} entries)", f"max_rows + 1 = {rows + 1}"]),
        ((good_p.astype(np.int64), good_i), "kv_indptr", ["dtype int64, expected int32"]),
        ((good_p, good_i.astype(np.int16)), "kv_indices", ["dtype int16"]),
        ((good_p, good_i.astype(np.float32)), "kv_indices", ["dtype float32"]),
        ((good_p, good_i.reshape(-1)), "kv_indices", ["expected 2-D"]),
        ((good_p, wide_i[:, ::2]), "kv_indices", ["column stride 2"]),
        ((shared[: n * (rows + 1)].reshape(n, rows + 1),
          shared[n * (rows + 1) - 1: n * (rows + 1) - 1 + n * widest].reshape(n, widest)),
         "kv_indices", ["shares memory with kv_indptr"]),
        ((a[:4 * n * (rows + 1)].view(np.int32).reshape(n, rows + 1), good_i), "kv_indptr",
         ["shares memory with the arena"]),
    ]
    for (ip, ix), field, words in cases:
        before = (bufs.arena.copy(), ip.copy(), ix.copy())
        with pytest.raises(specgraph.InvalidArgument) as e:
            specgraph.bind_csr_outputs(bufs, ip, ix)
        assert e.value.field == field and str(e.value).startswith(field + ":"), str(e.value)
        for w in words:
            assert w in str(e.value), (w, str(e.value))
        if field != "kv_indptr" or "arena" not in words[0]:
            assert (bufs.arena == before[0]).all()
        assert (ip == before[1]).all() and (ix == before[2]).all()


def test_bad_arguments_are_named_and_nothing_is_written():
    plan, bufs, r2t, b = a1_case()
    out = specgraph.bind_csr_outputs(bufs, np.zeros((3, 5), np.int32), np.zeros((3, 76),
                                                                              np.int32))
    fa3_plan, _, fa3 = make(max_batch=2, topk=2, num_steps=3, page_size=1, max_context_len=16,
                            pool_rows=3, kv_slots=1024)
    calls = [
        (lambda: specgraph.csr_step_indices_(bufs, 3, 0, r2t), "bucket"),
        (lambda: specgraph.csr_step_indices_(bufs, b, 3, r2t), "step"),
        (lambda: specgraph.csr_step_indices_(bufs, b, -1, r2t, out=out), "step"),
        (lambda: specgraph.csr_round_indices_(bufs, b, r2t[:, :15]), "req_to_token"),
        (lambda: specgraph.csr_round_indices_(bufs, b, r2t.astype(np.int64), out=out),
         "req_to_token"),
        (lambda: specgraph.csr_step_indices_(bufs, b, 0, r2t[:2]), "req_to_token"),
        (lambda: specgraph.csr_step_indices_(fa3, b, 0, r2t), "formats"),
        (lambda: specgraph.bind_csr_outputs(fa3, out.kv_indptr, out.kv_indices), "formats"),
        (lambda: fa3.csr_kv_indices(0), "formats"),
    ]
    for call, field in calls:
        before = (bufs.arena.copy(), out.kv_indptr.copy(), out.kv_indices.copy())
        with pytest.raises(specgraph.InvalidArgument) as e:
            call()
        assert e.value.field == field, (field, str(e.value))
        assert (bufs.arena == before[0]).all() and (out.kv_indptr == before[1]).all()
        assert (out.kv_indices == before[2]).all()
    with pytest.raises(TypeError, match="^out: expected specgraph.CsrOutputs"):
        specgraph.csr_round_indices_(bufs, b, r2t, out=(out.kv_indptr, out.kv_indices))
    with pytest.raises(TypeError, match="^formats: expected"):
        specgraph.DraftConfig(2, 2, 3, 1, 16, 3, 1024, formats=2)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.DraftConfig(2, 2, 3, 1, 16, 3, 1024, formats="flashinfer")
    assert e.value.field == "formats"


def test_a_refused_slot_is_named_by_buffer_and_step():
    plan, bufs, r2t, b = a1_case()
    # Request 1's branch 1 drafts at position 2 + 3 (FA3's prefix table does not read it).
    r2t[2, 5] = plan.config.kv_slots
    specgraph.round_setup_(bufs, b, r2t)
    specgraph.check_guards(bufs, b)
    specgraph.csr_step_indices_(bufs, b, 1, r2t)
    # Request 1's rows: a padded request's (pool row 0, seq_len 1: slot 0, then draft tokens
    # 0, 1 of each branch at positions 1 + t * 3 + j, all slot 0 in row 0), 1 + d = 3 each.
    assert bufs.csr_kv_indptr(1).tolist() == [0, 5, 10, 13, 16]
    assert bufs.csr_kv_indices(1)[10:16].tolist() == [0] * 6
    with pytest.raises(specgraph.GuardViolation) as e:
        specgraph.check_guards(bufs, b)
    g = e.value
    assert (g.buffer, g.step, g.bucket, g.row, g.kind, g.kernel, g.value) == (
        "csr.kv_indices", 1, 2, 3, "bad input", "draft_kv_indices", plan.config.kv_slots)
    assert str(g).startswith("csr.kv_indices (step 1, bucket 2, row 3): "), str(g)
    specgraph.round_setup_(bufs, b, r2t)  # resets the CSR guard words
    specgraph.check_guards(bufs, b)


def test_views_alias_the_plan_buffers_exactly():
    for int64, formats in ((False, "csr"), (True, "both")):
        plan, arena, bufs = make(max_batch=5, topk=3, num_steps=4, page_size=4,
                                 max_context_len=40, pool_rows=6, kv_slots=4096,
                                 buckets=(2, 5), formats=formats, csr_int64=int64)
        base = arena.ctypes.data
        rows = plan.max_rows
        indptr = plan.find("csr.kv_indptr")
        assert indptr.shape == (4, rows + 1)
        for s in range(4):
            spec = plan.find("csr.kv_indices", s)
            ix, ip = bufs.csr_kv_indices(s), bufs.csr_kv_indptr(s)
            assert ix.shape == spec.shape == (rows * (40 + s + 1),) == (
                plan.layout["csr_capacity"][s],)
            assert ix.dtype == (np.int64 if int64 else np.int32) and spec.dtype == str(ix.dtype)
            assert ix.ctypes.data == base + spec.offset
            assert ip.ctypes.data == base + indptr.offset + 4 * s * (rows + 1)
            assert ip.shape == (rows + 1,) and ip.base is not None  # views, not copies
            v = bufs.view(2, s)
            assert v.kv_indptr.ctypes.data == ip.ctypes.data and v.kv_indptr.shape == (7,)
            assert v.kv_indices.ctypes.data == ix.ctypes.data
            assert v.kv_indices.shape == (6 * (40 + s + 1),)
            assert (v.expand_page_table is None) == (formats == "csr")
            assert (v.prefix_page_table is None) == (formats == "csr")
        words = specgraph.read_guards(bufs)
        # The CSR words, then the last word of every plan: round.order (docs/metadata.md 11).
        assert [(w.buffer, w.step) for w in words[-5:]] == [("csr.kv_indices", s)
                                                           for s in range(4)] + [
                                                               ("round.order", None)]
    fa3_plan, _, fa3 = make(max_batch=2, topk=1, num_steps=2, page_size=1, max_context_len=8,
                            pool_rows=3, kv_slots=64)
    assert fa3.view(2, 1).kv_indptr is None and fa3.view(2, 1).kv_indices is None
    assert fa3_plan.config.formats == "fa3" and not fa3_plan.config.csr_int64
