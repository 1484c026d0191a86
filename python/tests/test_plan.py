"""DraftConfig, make_plan and the reports, against the C++ CLI's `specgraph plan --json`."""

from __future__ import annotations

import dataclasses
import json

import pytest

import specgraph
from conftest import run_cli

CONFIGS = [
    # (CLI flags, DraftConfig fields); the CLI's defaults: pool_rows = max_batch + 1, kv 2^24.
    ([], dict(max_batch=256, topk=8, num_steps=5, page_size=16, max_context_len=4096)),
    (["--max-batch", "4", "--topk", "2", "--steps", "2", "--page-size", "4", "--max-context", "16"],
     dict(max_batch=4, topk=2, num_steps=2, page_size=4, max_context_len=16)),
    (["--max-batch", "48", "--topk", "1", "--steps", "7", "--page-size", "1", "--max-context",
      "300", "--buckets", "1,5,17,48", "--pool-rows", "9", "--kv-slots", "1000"],
     dict(max_batch=48, topk=1, num_steps=7, page_size=1, max_context_len=300,
          buckets=(1, 5, 17, 48), pool_rows=9, kv_slots=1000)),
    # CSR (docs/csr.md): the exact per-step kv_indices beside the FA3 tables, or alone.
    (["--format", "both", "--max-batch", "8", "--topk", "8", "--steps", "5", "--max-context",
      "4096"], dict(max_batch=8, topk=8, num_steps=5, page_size=16, max_context_len=4096,
                    formats="both")),
    # --formats: the alias of --format (issue 28).
    (["--formats", "csr", "--csr-int64", "--max-batch", "5", "--topk", "3", "--steps", "3",
      "--page-size", "4", "--max-context", "40", "--buckets", "2,5"],
     dict(max_batch=5, topk=3, num_steps=3, page_size=4, max_context_len=40, buckets=(2, 5),
          formats="csr", csr_int64=True)),
]


def config(**fields) -> specgraph.DraftConfig:
    fields.setdefault("pool_rows", fields["max_batch"] + 1)
    fields.setdefault("kv_slots", 1 << 24)
    return specgraph.DraftConfig(**fields)


@pytest.mark.parametrize("flags,fields", CONFIGS)
def test_plan_matches_the_cli_json(flags, fields):
    plan = specgraph.make_plan(config(**fields))
    cli = run_cli("plan", *flags, "--json")
    assert cli.returncode == 0, cli.stderr
    want = json.loads(cli.stdout)
    assert json.loads(plan.to_json()) == want
    assert plan.total_bytes == want["total_bytes"]
    assert list(plan.buckets) == want["buckets"]
    assert plan.engine_sizing == specgraph.EngineSizing(
        want["today"]["prefix_table_bytes"], want["today"]["expand_table_bytes"],
        want["today"]["total_bytes"])
    got = [dict(name=b.name, step="all" if b.step is None else b.step, shape=list(b.shape),
                dtype=b.dtype, capacity=b.capacity, offset=b.offset, bytes=b.bytes,
                alignment=b.alignment) for b in plan.buffers]
    assert got == want["buffers"]
    text = run_cli("plan", *flags)
    assert plan.report() == text.stdout


def test_documented_example_sizes():
    # docs/metadata.md section 8: the prefix table 256 x 256 = 262,144 bytes once against
    # 20,971,520; expand tables 163,840 bytes against 204,800.
    plan = specgraph.make_plan(config(max_batch=256, topk=8, num_steps=5, page_size=16,
                                      max_context_len=4096))
    assert plan.prefix_table_bytes == 262144
    assert plan.engine_sizing.prefix_table_bytes == 20971520
    assert plan.expand_table_bytes == 163840
    assert plan.engine_sizing.expand_table_bytes == 204800
    assert plan.engine_sizing.total_bytes > 37 * plan.total_bytes
    assert len(plan.buckets) == 51
    assert plan.find("prefix.page_table").shape == (256, 256)
    assert plan.find("expand.page_table", 2).shape == (256 * 8, 4)
    assert f"total: {plan.total_bytes} bytes vs {plan.engine_sizing.total_bytes}" in plan.report()


def test_buckets():
    plan = specgraph.make_plan(config(max_batch=32, topk=4, num_steps=5, page_size=16,
                                      max_context_len=1024))
    assert plan.buckets == specgraph.default_buckets(32)
    assert len(plan.buckets) == 20
    assert [plan.bucket_for(b) for b in (1, 8, 9, 10, 11, 31, 32)] == [1, 8, 10, 10, 12, 32, 32]
    for bad in (0, 33, -1):
        with pytest.raises(specgraph.InvalidArgument) as e:
            plan.bucket_for(bad)
        assert e.value.field == "batch"
    assert plan.max_bucket == 32 and plan.max_rows == 128


@pytest.mark.parametrize("field,value", [
    ("max_batch", 0), ("topk", 1025), ("num_steps", 0), ("page_size", -3),
    ("max_context_len", 1 << 29), ("pool_rows", 0), ("kv_slots", 0),
    ("max_batch", 1 << 40),  # does not fit int32: refused by name, never wrapped
])
def test_config_validation_names_the_field(field, value):
    fields = dict(max_batch=8, topk=2, num_steps=3, page_size=4, max_context_len=64, pool_rows=9,
                  kv_slots=1 << 20)
    fields[field] = value
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.DraftConfig(**fields)
    assert isinstance(e.value, ValueError)
    assert e.value.field == field
    assert str(e.value).startswith(field + ": ")


def test_config_buckets_and_sparse_validation():
    base = dict(max_batch=8, topk=2, num_steps=3, page_size=4, max_context_len=64, pool_rows=9,
                kv_slots=1 << 20)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.DraftConfig(**base, buckets=(1, 4, 4, 8))
    assert e.value.field.startswith("buckets")
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.DraftConfig(**base, buckets=(1, 4))  # must end at max_batch
    assert e.value.field.startswith("buckets")
    sp = specgraph.SparseConfig(heads=2, vertical_size=(4, -1), slash_size=(4, 4), max_keys=128)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.DraftConfig(**base, sparse=sp)
    assert e.value.field == "sparse.vertical_size[1]"
    with pytest.raises(TypeError):
        specgraph.DraftConfig(**{**base, "topk": 2.0})
    with pytest.raises(TypeError):
        specgraph.DraftConfig(**{**base, "topk": True})
    cfg = specgraph.DraftConfig(**base)
    assert dataclasses.replace(cfg, topk=4).topk == 4
    with pytest.raises(specgraph.InvalidArgument):
        dataclasses.replace(cfg, topk=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.topk = 3  # type: ignore[misc]


def test_sparse_plan_buffers():
    sp = specgraph.SparseConfig(heads=4, vertical_size=(4, 4, 2, 4), slash_size=(4, 4, 4, 3),
                                max_keys=128)
    plan = specgraph.make_plan(specgraph.DraftConfig(
        max_batch=4, topk=2, num_steps=2, page_size=4, max_context_len=64, pool_rows=5,
        kv_slots=1 << 20, sparse=sp))
    names = {b.name for b in plan.buffers}
    assert {"sparse.intra.vertical", "sparse.succ.slash", "sparse.inter.vertical_count"} <= names
    assert plan.find("guards").shape == (2 + 2 + 3 + 1,)  # and round.order, the last
