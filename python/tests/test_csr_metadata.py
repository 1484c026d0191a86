"""specgraph.metadata.draft_kv_indices, the CSR indices on host arrays (docs/csr.md, like
`specgraph metadata kv-indices`): windows with sinks, page-granular tables (entry_page_size),
topk 1..8, page sizes 1/2/4/16 on fresh random cases against the independent reference in
csr_reference.py; the spec's worked examples and overflow cases with their numbers; a short
capacity refused store by store and reported; bad input named before anything is allocated."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph.metadata import draft_kv_indices  # noqa: E402
import csr_reference as cref  # noqa: E402


def random_case(rng: random.Random) -> cref.Case:
    topk, ps, steps = rng.randint(1, 8), rng.choice([1, 2, 4, 16]), rng.randint(1, 5)
    slot_stride = rng.choice([0, steps, steps + 1, steps + rng.randint(1, 4)])
    e = rng.choice([1, ps])
    bs = rng.randint(1, 5)
    seq = [rng.choice([0, 1, rng.randint(1, 40)]) for _ in range(bs)]
    need = max(cref.draft_position(n, topk - 1, steps - 1, cref.Case(
        seq, [], np.zeros((1, 1)), topk, steps, ps, slot_stride=slot_stride)) for n in seq) + 1
    width = -(-(need + rng.randint(0, 9)) // e)  # entries; every position read fits
    rows = rng.randint(1, 4)
    table = np.array([[rng.randrange(1 << 14) for _ in range(width)] for _ in range(rows)])
    window = rng.choice([0, 0, rng.randint(1, 12)])
    return cref.Case(seq, [rng.randrange(rows) for _ in range(bs)], table, topk, steps, ps,
                     window=window, sink=rng.randint(0, 5), entry_page_size=e,
                     slot_stride=slot_stride)


def run(c: cref.Case, **kw):
    return draft_kv_indices(c.seq_len, c.pool, c.req_to_token, topk=c.topk,
                            num_steps=c.num_steps, page_size=c.page_size,
                            entry_page_size=c.entry_page_size, window=c.window, sink=c.sink,
                            slot_stride=c.slot_stride, **kw)


def test_random_cases_with_windows_and_page_granular_tables_match_the_reference():
    rng = random.Random(27338)
    kinds = set()
    for i in range(1500):
        c = random_case(rng)
        int64 = i % 2 == 1
        got = run(c, int64=int64)
        want = cref.steps(c, list(range(c.num_steps)), c.num_steps, not int64)
        assert not cref.refused(c, c.num_steps, not int64)
        for s in range(c.num_steps):
            assert got.kv_indptr[s].tolist() == want[s][0], (i, s)
            assert got.kv_indices[s].tolist() == want[s][1], (i, s)
            assert got.kv_indices[s].dtype == (np.int64 if int64 else np.int32)
            assert got.used[s] == len(want[s][1])
        assert not got.violations
        kinds.add((c.window > 0 and any(n > c.window + c.sink for n in c.seq_len),
                   c.entry_page_size > 1, c.topk > 1 and c.page_size > 1))
    assert len(kinds) == 8, kinds  # windows cut, page-granular tables, branch regions: all mixes


def test_branch_regions_laid_out_from_a_wider_slot_stride():
    """slot_stride > num_steps (SGLang's S - 1 draft forwards over S slots per branch), topk > 1,
    page sizes 1, 4, 16: the host twin matches the reference, and the regions really moved
    (the same case laid out from num_steps reads other positions) in the cases counted."""
    rng = random.Random(5150)
    moved = 0
    for i in range(400):
        c = random_case(rng)
        c = c._replace(topk=max(c.topk, 2), page_size=[1, 4, 16][i % 3],
                       entry_page_size=1, slot_stride=c.num_steps + 1 + i % 3)
        need = max(cref.draft_position(n, c.topk - 1, c.num_steps - 1, c) for n in c.seq_len) + 1
        table = np.array([[rng.randrange(1 << 14) for _ in range(need)]
                          for _ in range(c.req_to_token.shape[0])])
        c = c._replace(req_to_token=table)
        got = run(c)
        want = cref.steps(c, list(range(c.num_steps)), c.num_steps)
        for s in range(c.num_steps):
            assert got.kv_indptr[s].tolist() == want[s][0], (i, s)
            assert got.kv_indices[s].tolist() == want[s][1], (i, s)
        narrow = cref.steps(c._replace(slot_stride=0), [c.num_steps - 1], c.num_steps)
        moved += narrow[c.num_steps - 1][1] != want[c.num_steps - 1][1]
    assert moved > 100, moved


def test_slot_stride_worked_case_and_refusals():
    """docs/csr.md's A4 request with slot_stride 3 for 2 steps: branch 1 two pages on (14, 15:
    page 7, slots 30, 31), not one (10, 11); a slot_stride below num_steps is named."""
    got = draft_kv_indices([6], [0], [[5, 9, 2, 7, 3, 11]], topk=2, num_steps=2, page_size=4,
                           entry_page_size=4, slot_stride=3)
    assert got.kv_indices[1].tolist() == [20, 21, 22, 23, 36, 37, 38, 39,
                                          20, 21, 22, 23, 36, 37, 30, 31]
    with pytest.raises(specgraph.InvalidArgument, match="slot_stride"):
        draft_kv_indices([6], [0], [[5, 9, 2, 7, 3, 11]], topk=2, num_steps=2, page_size=4,
                         entry_page_size=4, slot_stride=1)


def test_a_short_capacity_is_refused_store_by_store_and_reported():
    rng = random.Random(5)
    for _ in range(200):
        c = random_case(rng)
        full = run(c)
        caps = [rng.randint(0, u + 3) for u in full.used]
        got = run(c, capacity=caps)
        for s, (u, cap) in enumerate(zip(full.used, caps)):
            assert got.kv_indptr[s].tolist() == full.kv_indptr[s].tolist()  # always complete
            assert got.kv_indices[s].tolist() == full.kv_indices[s][:cap].tolist()
            v = got.violations.get(s)
            if cap >= u:
                assert v is None
                continue
            first_row = int(np.searchsorted(full.kv_indptr[s], cap, side="right")) - 1
            assert (v.kind, v.kernel, v.column, v.capacity, v.violations) == (
                "capacity", "draft_kv_indices", cap, cap, u - cap)
            assert (v.row, v.value) == (first_row, int(full.kv_indices[s][cap]))


def test_the_specs_worked_examples():
    # A3: a window of 4 with 2 sinks over seq_len 10, row 300 + p.
    a3 = draft_kv_indices([10], [0], [300 + np.arange(12)], topk=1, num_steps=2, page_size=1,
                          window=4, sink=2)
    assert a3.kv_indptr.tolist() == [[0, 7], [0, 8]]
    assert [x.tolist() for x in a3.kv_indices] == [[300, 301, 306, 307, 308, 309, 310],
                                                   [300, 301, 306, 307, 308, 309, 310, 311]]
    # A2 / A4: ps 4, topk 2, seq_len 6 on pages 5, 9, 2, 7, 3, 11: slots, or page-granular.
    pages = np.array([5, 9, 2, 7, 3, 11])
    slots = pages[np.arange(24) // 4] * 4 + np.arange(24) % 4
    for table, e in (([slots], 1), ([pages], 4)):
        a = draft_kv_indices([6], [0], table, topk=2, num_steps=2, page_size=4,
                             entry_page_size=e)
        assert a.kv_indptr.tolist() == [[0, 7, 14], [0, 8, 16]]
        assert a.kv_indices[1].tolist() == [20, 21, 22, 23, 36, 37, 38, 39,
                                            20, 21, 22, 23, 36, 37, 10, 11]


def test_the_specs_overflow_cases_are_refused_and_reported():
    # SGLang #27338: B = 2, topk = 8, max_context_len = 16 without the topk factor: 32 entries
    # per step where 184 / 200 / 216 are needed.
    table = np.arange(3 * 48).reshape(3, 48)
    got = draft_kv_indices([12, 9], [1, 2], table, topk=8, num_steps=3, page_size=1,
                           capacity=[32, 32, 32])
    assert got.used == [184, 200, 216]
    assert {s: v.violations for s, v in got.violations.items()} == {0: 152, 1: 168, 2: 184}
    assert [len(x) for x in got.kv_indices] == [32, 32, 32]
    assert got.kv_indptr[2, -1] == 216
    # The context limit: one request 15 tokens into a 16-token context, 3 steps, 16 entries.
    got = draft_kv_indices([15], [0], [np.arange(18)], topk=1, num_steps=3, page_size=1,
                           capacity=[16, 16, 16])
    assert got.used == [16, 17, 18] and sorted(got.violations) == [1, 2]
    assert got.violations[2].violations == 2 and got.violations[1].value == 16


def test_bad_input_is_named():
    table = np.arange(20).reshape(1, 20)
    cases = [
        (dict(seq_len=[18]), "seq_len[0]"),  # its branch 1 region passes the row
        (dict(req_pool_index=[1]), "req_pool_index[0]"),
        (dict(seq_len=[-1]), "seq_len[0]"),
        (dict(topk=0), "topk"),
        (dict(num_steps=0), "num_steps"),
        (dict(page_size=0), "page_size"),
        (dict(kv_slots=5), "req_to_token[0][5]"),  # draft 1 of branch 0 at position 5
        (dict(kv_slots=0), "kv_slots"),
        (dict(capacity=[1]), "capacity"),
        (dict(capacity=[-1, 0]), "capacity[0]"),
        (dict(seq_len=[1.5]), "seq_len"),
        (dict(seq_len=[]), "seq_len"),
    ]
    for change, field in cases:
        args = dict(seq_len=[4], req_pool_index=[0], req_to_token=table, topk=2, num_steps=2,
                    page_size=4)
        args.update(change)
        with pytest.raises(specgraph.InvalidArgument) as e:
            draft_kv_indices(args.pop("seq_len"), args.pop("req_pool_index"),
                             args.pop("req_to_token"), **args)
        assert e.value.field == field, (change, str(e.value))
    with pytest.raises(TypeError, match="^topk: expected an int"):
        draft_kv_indices([4], [0], table, topk=2.0, num_steps=2, page_size=4)
