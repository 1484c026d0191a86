"""Draft-extend metadata from Python (docs/extend.md): `specgraph.metadata.extend` (the CLI's
twin) and `specgraph.extend_metadata_` (into numpy arrays and torch tensors) against the
independent reference extend_reference.py, on the spec's examples and random rounds, every cell
compared; the CLI itself on the same rounds."""

from __future__ import annotations

import json
import random

import pytest

import extend_reference
from conftest import need_torch, run_cli

np = pytest.importorskip("numpy")
import specgraph  # noqa: E402
from specgraph import metadata  # noqa: E402
from specgraph.errors import InvalidArgument  # noqa: E402

X1 = dict(page_size=1, num_draft_tokens=3, seq_len=[4, 2], accept_len=[2, 3],
          req_pool_index=[1, 2], bucket=3,
          req_to_token=[[0] * 8, [100 + p for p in range(8)], [200 + p for p in range(8)]])


def paged(pages, ps):
    return [pg * ps + i for pg in pages for i in range(ps)]


X4 = dict(page_size=4, num_draft_tokens=4, seq_len=[14, 3], accept_len=[0, 4],
          req_pool_index=[1, 2], page_table_capacity=4,
          req_to_token=[[0] * 20, paged([3, 8, 1, 6, 4], 4), paged([9, 2, 7, 5, 10], 4)])


def random_round(rng: random.Random):
    ps = rng.choice([1, 2, 3, 4, 16, 64])
    w = rng.randint(1, 8)
    bs = rng.randint(0, 4)
    bucket = bs + rng.randint(0, 2)
    longest = rng.randint(0, 40)
    width = longest + w + rng.randint(0, 3)
    rows = rng.randint(1, 5)
    case = dict(page_size=ps, num_draft_tokens=w,
                seq_len=[rng.randint(0, longest) for _ in range(bs)],
                accept_len=[rng.randint(0, w) for _ in range(bs)],
                req_pool_index=[rng.randint(0, rows - 1) for _ in range(bs)],
                req_to_token=[[rng.randint(0, 1 << 20) for _ in range(width)]
                              for _ in range(rows)],
                bucket=bucket)
    if rng.random() < 0.3:
        case["page_table_capacity"] = rng.randint(1, 4)
    if rng.random() < 0.3:
        case["triton_kv_capacity"] = rng.randint(0, 30)
    if rng.random() < 0.3:
        case["flashinfer_kv_capacity"] = rng.randint(0, 40)
    return case


@pytest.mark.parametrize("case", [X1, X4], ids=["X1", "X4"])
def test_examples_match_the_reference_and_the_cli(case):
    want = extend_reference.run(**case)
    assert metadata.extend(**case) == want
    got = run_cli("metadata", "extend", stdin=json.dumps(case))
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == want


def test_x4_names_the_refused_page_and_the_zero_accept_length():
    out = metadata.extend(**X4)
    assert out["tokens"]["select_index"] == [0, 7]
    assert out["fa3"]["page_table"] == [[3, 8, 1, 6], [9, 2, 0, 0]]
    assert {"kind": "capacity", "kernel": "extend_page_table", "row": 0, "column": 4,
            "capacity": 4, "value": 4, "count": 1} in out["violations"]


def test_random_rounds_against_the_reference():
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for i in range(400):
        case = random_round(rng)
        assert metadata.extend(**case) == extend_reference.run(**case), (seed, i, case)


def test_random_rounds_through_the_cli():
    rng = random.Random(random.randrange(1 << 30))
    for _ in range(20):
        case = random_round(rng)
        got = run_cli("metadata", "extend", stdin=json.dumps(case))
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout) == extend_reference.run(**case)


def test_bad_input_names_the_field():
    bad = dict(X1, accept_len=[2, 4])
    with pytest.raises(InvalidArgument, match=r"accept_len\[1\]: 4 is outside \[0, "):
        metadata.extend(**bad)
    got = run_cli("metadata", "extend", stdin=json.dumps(bad))
    assert got.returncode == 2 and got.stdout == ""
    assert "accept_len[1]: 4 is outside" in got.stderr


def _inputs(case):
    """The case's bucket as the op takes it: padded rows appended (pool row 0, seq_len 0)."""
    bs, b = len(case["seq_len"]), case.get("bucket", len(case["seq_len"]))
    pad = b - bs
    seq = np.array(case["seq_len"] + [0] * pad, dtype=np.int32)
    acc = np.array(case["accept_len"] + [case["num_draft_tokens"]] * pad, dtype=np.int32)
    pool = np.array(case["req_pool_index"] + [0] * pad, dtype=np.int32)
    table = np.array(case["req_to_token"], dtype=np.int32)
    m = int(max(case["seq_len"], default=0))
    return table, pool, seq, acc, bs, m


def _check_outputs(out, case, bs, m):
    """The op's exact-capacity outputs against the reference at the same capacities."""
    w, ps = case["num_draft_tokens"], case["page_size"]
    b = len(out.tokens.select_index)
    cap = specgraph.extend_capacities(b, m, w, ps)
    want = extend_reference.run(**dict(case, page_table_capacity=cap.page_columns))
    assert np.asarray(out.tokens.position).tolist() == want["tokens"]["position"]
    assert np.asarray(out.tokens.out_cache_loc).tolist() == want["tokens"]["out_cache_loc"]
    assert np.asarray(out.tokens.select_index).tolist() == want["tokens"]["select_index"]
    assert np.asarray(out.fa3.page_table).tolist() == want["fa3"]["page_table"]
    assert np.asarray(out.fa3.cu_seqlens_k).tolist() == want["fa3"]["cu_seqlens_k"]
    assert np.asarray(out.prefix.prefix_kv_indptr).tolist() == want["triton"]["kv_indptr"]
    used = want["triton"]["kv_indptr"][-1]
    assert np.asarray(out.prefix.prefix_kv_indices)[:used].tolist() == \
        want["triton"]["kv_indices"]
    full = want["flashinfer"]["kv_indptr"][-1]
    assert np.asarray(out.full.full_kv_indptr).tolist() == want["flashinfer"]["kv_indptr"]
    assert np.asarray(out.full.full_kv_indices)[:full].tolist() == \
        want["flashinfer"]["kv_indices"]


def test_op_into_numpy_outputs_random_rounds():
    rng = random.Random(random.randrange(1 << 30))
    for _ in range(100):
        case = random_round(rng)
        for k in ("page_table_capacity", "triton_kv_capacity", "flashinfer_kv_capacity"):
            case.pop(k, None)
        table, pool, seq, acc, bs, m = _inputs(case)
        out = specgraph.extend_outputs(len(seq), m, case["num_draft_tokens"], case["page_size"])
        specgraph.extend_metadata_(out, table, pool, seq, acc,
                                   extend_tokens=case["num_draft_tokens"],
                                   page_size=case["page_size"], max_seq_len=m, real_batch=bs)
        _check_outputs(out, case, bs, m)
        zero = [r for r in range(bs) if case["accept_len"][r] == 0]
        kinds = [v.kind for v in specgraph.extend_violations(out.guard)]
        assert kinds == (["accept_len"] if zero else [])


def test_op_into_torch_tensors_matches_numpy():
    torch = need_torch()
    case = dict(X1)
    table, pool, seq, acc, bs, m = _inputs(case)
    out = specgraph.extend_outputs(3, m, 3, 1, device="cpu")
    specgraph.extend_metadata_(out, torch.from_numpy(table), torch.from_numpy(pool),
                               torch.from_numpy(seq), torch.from_numpy(acc), extend_tokens=3,
                               page_size=1, max_seq_len=m, real_batch=bs)
    _check_outputs(out, case, bs, m)


def test_torch_op_passes_opcheck():
    torch = need_torch()
    from specgraph import _torch_ops  # noqa: F401  (registers the schemas)

    table, pool, seq, acc, bs, m = _inputs(dict(X1))
    out = specgraph.extend_outputs(3, m, 3, 1, device="cpu")
    sets = [list(getattr(out, x)) for x in ("tokens", "fa3", "prefix", "full")]
    args = (torch.from_numpy(table), torch.from_numpy(pool), torch.from_numpy(seq),
            torch.from_numpy(acc), None, 3, 1, m, bs, (1 << 62), -1, -1, -1, *sets, out.guard, [])
    torch.library.opcheck(torch.ops.specgraph.extend_metadata_.default, args)
