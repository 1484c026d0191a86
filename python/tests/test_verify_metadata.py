"""specgraph.metadata.verify, the Python counterpart of `specgraph metadata verify`: the same JSON
as the C++ CLI, byte for byte, on random trees (padded buckets, short capacities reported as
violations) and the same refusals; both against the independent model in verify_reference.py.
Needs numpy; the CLI comparison skips visibly where no CLI is built."""

from __future__ import annotations

import json
import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph import metadata  # noqa: E402
from conftest import run_cli  # noqa: E402
import verify_reference as vref  # noqa: E402


def random_doc(rng: random.Random, nrng) -> dict:
    d = rng.choice([2, 3, 4, 6]) if rng.random() < 0.8 else rng.randint(2, 64)
    bs = rng.randint(1, 4)
    real = rng.randint(1, bs)
    seq = [rng.randint(1, 30) for _ in range(bs)]
    width = max(seq) + d + rng.randint(0, 3)
    rows = rng.randint(1, 4)
    doc = {"page_size": rng.choice([1, 4, 16, 64]), "num_draft_tokens": d, "seq_len": seq,
           "req_pool_index": [rng.randrange(rows) for _ in range(bs)],
           "req_to_token": nrng.integers(0, 5000, (rows, width)).tolist(),
           "custom_mask": vref.engine_mask(nrng, seq, real, d).tolist()}
    if real < bs or rng.random() < 0.3:
        doc["real_batch"] = real
    if rng.random() < 0.3:
        doc["prefix_capacity"] = rng.randint(0, 10)
    if rng.random() < 0.3:
        doc["kv_indices_capacity"] = rng.randint(0, sum(seq) + bs * d + 2)
    if rng.random() < 0.3:
        doc["packed_mask_capacity"] = rng.randint(0, 40)
    return doc


def py_verify(doc: dict) -> dict:
    doc = dict(doc)
    return metadata.verify(doc.pop("page_size"), doc.pop("num_draft_tokens"), doc.pop("seq_len"),
                           doc.pop("req_pool_index"), doc.pop("req_to_token"),
                           doc.pop("custom_mask"), **doc)


def reference(doc: dict) -> dict:
    seq, d, ps = doc["seq_len"], doc["num_draft_tokens"], doc["page_size"]
    c = vref.Case(seq, doc["req_pool_index"], np.array(doc["req_to_token"]), d, ps,
                  np.array(doc["custom_mask"], np.uint8), doc.get("real_batch", len(seq)),
                  max(seq))
    return vref.run(c, doc.get("prefix_capacity"))


def test_random_cases_equal_the_cli_and_the_reference():
    rng, nrng = random.Random(2166), np.random.default_rng(2166)
    short = 0
    for i in range(150):
        doc = random_doc(rng, nrng)
        got = py_verify(doc)
        want = reference(doc)
        f = got["flashinfer"]
        kept_kv = len(f["kv_indices"])
        assert got["fa3"] == want["fa3"]
        for k in ("qo_indptr", "kv_indptr", "kv_last_page_len", "mask_indptr",
                  "packed_mask_indptr"):
            assert f[k] == want["flashinfer"][k], (i, k)
        assert f["kv_indices"] == want["flashinfer"]["kv_indices"][:kept_kv]
        assert f["packed_mask"] == want["flashinfer"]["packed_mask"][: len(f["packed_mask"])]
        short += bool(got["violations"])
        for v in got["violations"]:  # a refused store names its buffer and the first index
            assert v["kind"] == "capacity" and v["count"] >= 1
            if v["kernel"] == "verify_kv_indices":
                assert v["column"] == v["capacity"] == kept_kv
                assert v["value"] == want["flashinfer"]["kv_indices"][kept_kv]
        done = run_cli("metadata", "verify", stdin=json.dumps(doc))
        assert done.returncode == 0, done.stderr
        assert done.stdout == json.dumps(got, separators=(",", ":")) + "\n", i
    assert 10 < short < 140, short


def test_refusals_name_the_same_field_as_the_cli():
    base = {"page_size": 1, "num_draft_tokens": 4, "seq_len": [5], "req_pool_index": [0],
            "req_to_token": [list(range(40, 49))], "custom_mask": [1] * 36}
    cases = [
        ({"seq_len": [9]}, "seq_len[0]"),  # 9 + 4 positions on a row of 9
        ({"custom_mask": [1] * 20}, "custom_mask"),
        ({"custom_mask": [1] * 35 + [2]}, "custom_mask[35]"),
        ({"seq_len": [0]}, "seq_len[0]"),
        ({"req_pool_index": [1]}, "req_pool_index[0]"),
        ({"req_pool_index": [0, 0]}, "req_pool_index"),
        ({"req_to_token": [list(range(40, 48))]}, "seq_len[0]"),
        ({"num_draft_tokens": 0}, "num_draft_tokens"),
        ({"page_size": 0}, "page_size"),
        ({"real_batch": 2}, "real_batch"),
        ({"kv_indices_capacity": -1}, "kv_indices_capacity"),
    ]
    for change, field in cases:
        doc = {**base, **change}
        with pytest.raises(specgraph.InvalidArgument) as e:
            py_verify(doc)
        assert e.value.field == field, (change, str(e.value))
        done = run_cli("metadata", "verify", stdin=json.dumps(doc))
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith(f"specgraph: error: {field}:"), (change, done.stderr)


def test_the_double_counted_tree_is_named_with_its_cause():
    """seq_len given as 5 + D = 9 for the mask the engine built from 5: D * D = 16 cells short."""
    doc = {"page_size": 1, "num_draft_tokens": 4, "seq_len": [9], "req_pool_index": [0],
           "req_to_token": [list(range(40, 53))], "custom_mask": [1] * 36}
    with pytest.raises(specgraph.InvalidArgument) as e:
        py_verify(doc)
    assert "seq_len seems to include the D verify tokens already" in str(e.value)
    assert "16 cells shorter" in str(e.value)
    done = run_cli("metadata", "verify", stdin=json.dumps(doc))
    assert "seq_len seems to include the D verify tokens already" in done.stderr
