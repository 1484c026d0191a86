"""The published vectors (docs/metadata.md sections 3 and 6), the seed crash, and the sparse
staging op against an independent model of section 6."""

from __future__ import annotations

import json
import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph import metadata  # noqa: E402
from conftest import run_cli  # noqa: E402

# Section 3 "Test vectors": topk 2, page size 4; the kernel reads whole rows (slots_read = width).
EXPAND_VECTORS = {
    "A": ([3], 1, 2, [[23, 24], [31, 32]], [[5, 6], [7, 8]], [4, 4]),
    "B": ([3], 5, 6, [list(range(27, 33)), list(range(35, 41))],
          [[6, 7, 8, 0, 0, 0], [8, 9, 10, 0, 0, 0]], [8, 8]),
    "page crossing": ([3], 2, 3, [[23, 28], [31, 36]], [[5, 7, 0], [7, 9, 0]], [5, 5]),
    "multi batch": ([1, 3, 0], 3, 4,
                    [[1, 2, 3, 4], [6, 7, 8, 9], [3, 8, 9, 10], [14, 15, 16, 17], [0, 1, 2, 3],
                     [4, 5, 6, 7]],
                    [[0, 1, 0, 0], [1, 2, 0, 0], [0, 2, 0, 0], [3, 4, 0, 0], [0, 0, 0, 0],
                     [1, 0, 0, 0]], [4, 4, 6, 6, 3, 3]),
}


@pytest.mark.parametrize("case", sorted(EXPAND_VECTORS))
def test_expand_vectors(case):
    lpl, d, width, rows, table, seqlen = EXPAND_VECTORS[case]
    r = metadata.expand_page_table(rows, lpl, topk=2, page_size=4, decode_length=d,
                                   slots_read=len(rows[0]), capacity=width)
    assert r.page_table.tolist() == table
    assert r.cache_seqlen.tolist() == seqlen
    assert r.violations == []


def test_case_b_as_the_runtime_runs_it():
    lpl, d, width, rows, _, _ = EXPAND_VECTORS["B"]
    r = metadata.expand_page_table(rows, lpl, topk=2, page_size=4, decode_length=d,
                                   capacity=width)
    assert r.page_table.tolist() == [[6, 7, 0, 0, 0, 0], [8, 9, 0, 0, 0, 0]]


def test_the_seed_crash_is_refused_and_reported_never_written():
    # A 5-slot row read into the 2-wide step-0 table (ps 2, last_page_len 1): the third page
    # would land in column 2. The table sits in a wider backing array full of a sentinel: the
    # refused store must not touch it.
    backing = np.full((1, 5), -7, dtype=np.int32)
    r = metadata.expand_page_table([[1, 2, 3, 4, 5]], [1], topk=1, page_size=2, decode_length=1,
                                   slots_read=5, capacity=2, page_table=backing)
    assert backing.tolist() == [[0, 1, -7, -7, -7]]
    assert r.cache_seqlen.tolist() == [2]
    assert r.violations == [metadata.Violation("capacity", "expand_page_table", 0, 2, 2, 2, 1)]
    assert r.violations[0].describe() == (
        "capacity violation in expand_page_table: row 0, column 2, capacity 2, value 2 "
        "(1 in total)")
    # Sliced to d = 1 (what the runtime reads): one run, no violation.
    r = metadata.expand_page_table([[1, 2, 3, 4, 5]], [1], topk=1, page_size=2, decode_length=1)
    assert r.page_table.tolist() == [[0, 0]] and r.violations == []


def test_the_seed_crash_matches_the_cli():
    doc = {"page_size": 2, "topk": 1, "decode_length": 1, "slots_read": 5, "last_page_len": [1],
           "cache_loc": [[1, 2, 3, 4, 5]], "capacity": 2}
    cli = run_cli("metadata", "expand", stdin=json.dumps(doc))
    assert cli.returncode == 0, cli.stderr
    want = json.loads(cli.stdout)
    r = metadata.expand_page_table(doc["cache_loc"], doc["last_page_len"], topk=1, page_size=2,
                                   decode_length=1, slots_read=5, capacity=2)
    assert r.page_table.tolist() == want["page_table"]
    assert r.cache_seqlen.tolist() == want["cache_seqlen"]
    got = [dict(kind=v.kind, kernel=v.kernel, row=v.row, column=v.column, capacity=v.capacity,
                value=v.value, count=v.violations) for v in r.violations]
    assert got == want["violations"]


def test_expand_bad_input_names_the_field():
    with pytest.raises(specgraph.InvalidArgument) as e:
        metadata.expand_page_table([[1, 2]], [4], topk=1, page_size=4, decode_length=1)
    assert e.value.field == "last_page_len[0]"
    with pytest.raises(specgraph.InvalidArgument) as e:
        metadata.expand_page_table([[1, 2]], [1], topk=1, page_size=0, decode_length=1)
    assert e.value.field == "page_size"


FALLBACK = {(48, 4): [0, 12, 24, 36], (32, 4): [0, 8, 16, 24], (10, 4): [0, 3, 6, 9],
            (3, 4): [0, 1, 2], (10, 6): [0, 2, 4, 6, 8], (7, 3): [0, 3, 6], (0, 4): [],
            (5, 0): []}


@pytest.mark.parametrize("args", sorted(FALLBACK))
def test_fallback_vectors(args):
    r = metadata.sparse_fallback(*args, capacity=8)
    assert r.indices.tolist() == FALLBACK[args] and r.violations == []


def test_fallback_never_stores_past_its_capacity():
    # The bug this replaces: about five indices into a four-entry buffer.
    r = metadata.sparse_fallback(10, 6, capacity=4)
    assert r.indices.tolist() == [0, 2, 4, 6]
    assert [(v.kind, v.kernel, v.column, v.capacity, v.value) for v in r.violations] == [
        ("capacity", "sparse_fallback", 4, 4, 8)]


def test_reference_configuration_stages():
    # chunk_size 64, local_size 16 (chunk_len 48), sequence 128.
    got = [(s.kind, s.prev, s.end, s.chunk_q_len) for s in specgraph.sparse_stages(128, 48)]
    assert got == [("intra", 0, 48, 48), ("intra", 48, 96, 48), ("succ", 48, 96, 48),
                   ("intra", 96, 128, 32), ("succ", 96, 128, 32), ("inter", 96, 128, 32)]


def model_stage(kind, prev, end, chunk, q, vert, slash, vsize, ssize, vcap, scap):
    """docs/metadata.md section 6, one head: (vertical entries, slash entries)."""
    keys = {"intra": end - prev, "succ": chunk, "inter": prev - chunk}[kind]

    def vmap(v):
        if kind == "intra":
            return v - prev if v >= prev else None
        if kind == "succ":
            return v - (prev - chunk) if prev - chunk <= v < prev else None
        return v if v < prev - chunk else None

    def smap(x):
        if kind == "intra":
            return (end - 1) - x if x >= prev else None
        if kind == "succ":
            return (prev + q - 1) - x if prev - chunk <= x < prev + q else None
        return (prev - chunk + q - 1) - x if x < prev - chunk + q else None

    def fallback(size, cap):
        count = min(min(size, end), keys)
        if count <= 0:
            return []
        step = max(1, -(-keys // count))
        return [i * step for i in range(count) if i * step < keys][:cap]

    out = []
    for sel, fn, size, cap in ((vert, vmap, vsize, vcap), (slash, smap, ssize, scap)):
        mapped = [m for m in (fn(x) for x in sel) if m is not None][:cap]
        out.append(mapped or fallback(size, cap))
    return out


def test_sparse_stage_op_matches_the_model():
    heads, max_keys = 4, 128
    vsize, ssize = (4, 4, 2, 4), (4, 4, 4, 3)
    sp = specgraph.SparseConfig(heads=heads, vertical_size=vsize, slash_size=ssize,
                                max_keys=max_keys)
    plan = specgraph.make_plan(specgraph.DraftConfig(
        max_batch=2, topk=1, num_steps=1, page_size=4, max_context_len=16, pool_rows=3,
        kv_slots=64, sparse=sp))
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    inputs = bufs.sparse_inputs()
    assert inputs["vertical_size"].tolist() == list(vsize)  # written by initialize
    rng = random.Random(11)
    for stage in specgraph.sparse_stages(128, 48):
        for _ in range(5):
            for h in range(heads):
                for kind, stride in (("vertical", inputs["vertical"].shape[1]),
                                     ("slash", inputs["slash"].shape[1])):
                    n = rng.randint(0, stride)
                    inputs[kind][h, :n] = [rng.randrange(0, stage.end) for _ in range(n)]
                    inputs[f"{kind}_count"][h] = n
            specgraph.sparse_stage_(bufs, stage)
            out = bufs.sparse_stage_views(stage.kind)
            vcap, scap = out.vertical.shape[1], out.slash.shape[1]
            for h in range(heads):
                vn, sn = int(inputs["vertical_count"][h]), int(inputs["slash_count"][h])
                want_v, want_s = model_stage(
                    stage.kind, stage.prev, stage.end, stage.chunk_len, stage.chunk_q_len,
                    inputs["vertical"][h, :vn].tolist(), inputs["slash"][h, :sn].tolist(),
                    vsize[h], ssize[h], vcap, scap)
                assert int(out.vertical_count[h]) == len(want_v)
                assert out.vertical[h].tolist() == want_v + [2**31 - 1] * (vcap - len(want_v))
                assert int(out.slash_count[h]) == len(want_s)
                assert out.slash[h].tolist() == want_s + [-(2**31)] * (scap - len(want_s))
