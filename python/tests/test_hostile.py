"""The Python surface under hostile input (docs/python.md, "Bad input"): no crash, no hang,
nothing written on a refusal, every refusal names its field; and the unusual-but-legal inputs
(int32 and int64 alike, numpy scalars, batch = max_batch, seq_len = max_context_len) work.

The hostile cases (hostile_cases.py, hostile_arena.py, hostile_metadata.py) and the seeded
random fuzzing (hostile_fuzz.py) run in worker processes capped to 4 GiB of address space, so a
crash or a runaway allocation fails a case instead of the session. The rest runs here: each refusal's
message checked for the value and the limit."""

from __future__ import annotations

import math
import tracemalloc

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import specgraph.metadata as md  # noqa: E402
import hostile_runner  # noqa: E402
import reference as ref  # noqa: E402
from conftest import skip_or_fail  # noqa: E402
from hostile_cases import CASES  # noqa: E402

FUZZ = {"numpy": ("FUZZ numpy 20261201 600",), "torch": ("FUZZ torch 20261202 300",)}


@pytest.fixture(scope="module")
def outcomes():
    """Every case runnable here plus the fuzz runs, one capped worker per framework at once."""
    have = hostile_runner.available(("numpy", "torch", "cuda"))
    groups = [[n for n in have if n.endswith("@" + fw)] + list(FUZZ.get(fw, ()))
              for fw in ("numpy", "torch", "cuda")]
    groups = [g for g in groups if g and not all(n.startswith("FUZZ") for n in g)]
    return hostile_runner.run_groups(groups)


@pytest.mark.parametrize("fw", ["numpy", "torch", "cuda"])
def test_every_hostile_case_is_refused_by_name_or_works(outcomes, fw):
    names = [c.name for c in CASES if c.fw == fw]
    if fw != "numpy" and not any(n in outcomes for n in names):
        skip_or_fail(f"no {fw} arena here (torch{' with a GPU' if fw == 'cuda' else ''} absent)")
    assert len(names) > 100
    bad = {n: outcomes[n] for n in names if outcomes[n]["outcome"] != "pass"}
    assert not bad, "\n".join(f"{r['outcome']}: {n}: {r['text']}" for n, r in bad.items())


@pytest.mark.parametrize("fw", ["numpy", "torch"])
def test_random_op_sequences_refuse_by_name_and_stage_exactly(outcomes, fw):
    key = FUZZ[fw][0]
    if key not in outcomes:
        skip_or_fail("torch is not installed")
    r = outcomes[key]
    assert r["outcome"] == "pass", r
    # Both sides were exercised: refusals, and stagings checked against reference.py.
    assert r["tally"]["refused"] > 100 and r["tally"]["verified"] > 20, r["tally"]


BASE = dict(max_batch=4, topk=2, num_steps=3, page_size=4, max_context_len=64, pool_rows=8,
            kv_slots=1024, buckets=(2, 4))


@pytest.fixture
def setup():
    cfg = specgraph.DraftConfig(**BASE)
    plan = specgraph.make_plan(cfg)
    arena = specgraph.host_arena(plan)
    return cfg, plan, arena, specgraph.buffers(plan, arena)


def _inputs(bs):
    return (np.zeros(bs, np.int32), np.full(bs, 5, np.int32), np.zeros(bs * 6, np.int64))


@pytest.mark.parametrize("value", [2**63, 2**64 + 3, -2**63 - 1])
def test_ints_beyond_int64_name_the_field_value_and_limit(setup, value):
    cfg, plan, arena, bufs = setup
    for call, field in [(lambda: specgraph.stage_(bufs, value, *_inputs(2)), "bs"),
                        (lambda: plan.bucket_for(value), "batch"),
                        (lambda: specgraph.step_metadata_(bufs, 2, value), "step"),
                        (lambda: specgraph.DraftConfig(**{**BASE, "topk": value}), "topk"),
                        (lambda: specgraph.sparse_stages(value, 8), "seq_len")]:
        with pytest.raises(specgraph.InvalidArgument) as e:
            call()
        assert e.value.field == field
        assert str(e.value).startswith(f"{field}: {value} ") and "int64" in str(e.value)


def test_wrong_types_raise_type_error_naming_the_argument(setup):
    cfg, plan, arena, bufs = setup
    cases = [(lambda: specgraph.stage_(bufs, "2", *_inputs(2)), "bs: expected an int, got str"),
             (lambda: specgraph.stage_(bufs, 2, [0, 0], *_inputs(2)[1:]),
              "req_pool_indices: expected an array"),
             (lambda: specgraph.round_setup_(bufs, 2.0, None), "bucket: expected an int, got float"),
             (lambda: specgraph.check_guards("bufs"), "bufs: expected specgraph.Buffers"),
             (lambda: specgraph.sparse_stage_(bufs, 3), "stage: expected SparseStage"),
             (lambda: specgraph.buffers(plan, arena, initialize=1), "initialize: expected a bool"),
             (lambda: specgraph.DraftConfig(**{**BASE, "checked": 1}),
              "checked: expected a bool, got int"),
             (lambda: specgraph.stage_(bufs, 2, *_inputs(2), 0, "x"),
              "min_confidence: expected a float, got str")]
    for call, message in cases:
        with pytest.raises(TypeError) as e:
            call()
        assert not isinstance(e.value, specgraph.InvalidArgument)
        assert str(e.value).startswith(message), str(e.value)


def test_numpy_scalars_are_ints_and_bools(setup):
    cfg, plan, arena, bufs = setup
    v = bufs.view(np.int64(2), np.int32(1))
    assert type(v.bucket) is int and type(v.rows) is int and v.rows == 4
    assert bufs.view(2, 1).expand_page_table.shape == v.expand_page_table.shape == (4, 3)
    bucket = specgraph.stage_(bufs, np.uint8(3), *_inputs(3), np.int16(2), np.float32(0.5))
    assert type(bucket) is int and bucket == 4
    c = specgraph.DraftConfig(**{**BASE, "checked": np.True_, "topk": np.int64(2),
                                 "buckets": np.array([2, 4])})
    assert c.checked is True and c.topk == 2 and type(c.topk) is int and c.buckets == (2, 4)


def test_nothing_is_narrowed_silently(setup):
    loc = np.zeros((2, 3), np.int64)
    with pytest.raises(specgraph.InvalidArgument) as e:
        md.expand_page_table(loc, np.array([2**32 + 3]), topk=2, page_size=4, decode_length=1)
    assert e.value.field == "last_page_len[0]" and "4294967299 does not fit in int32" in str(e.value)
    for bad, field in [(dict(last_page_len=np.array([2.7])), "last_page_len"),
                       (dict(cache_loc=loc.astype(np.float64)), "cache_loc"),
                       (dict(cache_loc=np.full((2, 3), 2**63, np.uint64)), "cache_loc[0][0]")]:
        args = {**dict(cache_loc=loc, last_page_len=np.array([1], np.int32)), **bad}
        with pytest.raises(specgraph.InvalidArgument) as e:
            md.expand_page_table(args.pop("cache_loc"), args.pop("last_page_len"), topk=2,
                                 page_size=4, decode_length=1)
        assert e.value.field == field, str(e.value)
    sp = specgraph.SparseConfig(heads=0, vertical_size=(4,), slash_size=(4,), max_keys=64)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.DraftConfig(**BASE, sparse=sp)
    assert e.value.field == "sparse.heads" and "sparse=None" in str(e.value)


def test_sparse_stage_kinds_are_checked():
    sp = specgraph.SparseConfig(heads=2, vertical_size=(4, 2), slash_size=(3, 5), max_keys=256)
    plan = specgraph.make_plan(specgraph.DraftConfig(
        max_batch=4, topk=2, num_steps=3, page_size=4, max_context_len=64, pool_rows=8,
        kv_slots=1024, sparse=sp))
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    assert bufs.sparse_stage_views(np.int64(2)) == bufs.sparse_stage_views("inter")
    for kind in (-1, 3, 1.0):
        with pytest.raises((specgraph.InvalidArgument, TypeError)) as e:
            bufs.sparse_stage_views(kind)
        assert str(e.value).startswith("kind: ")


@pytest.mark.parametrize("call,field", [
    (lambda: md.expand_page_table(np.zeros((4, 3), np.int64), [1, 1], topk=2**30, page_size=4,
                                  decode_length=2), "topk"),
    (lambda: md.expand_page_table(np.zeros((4, 3), np.int64), [1, 1], topk=2, page_size=4,
                                  decode_length=2, capacity=2**30), "capacity"),
    (lambda: md.expand_page_table(np.zeros((4, 3), np.int64), [1, 1], topk=2, page_size=4,
                                  decode_length=2**40), "decode_length"),
    (lambda: md.sparse_fallback(2**40, 2**40, 2**40), "seq_len"),
    (lambda: md.sparse_fallback(100, 2**30, 2**30), "max_count"),
    (lambda: md.sparse_fallback(100, 8, 2**30), "capacity"),
])
def test_metadata_functions_validate_before_they_allocate(call, field):
    tracemalloc.start()
    try:
        with pytest.raises(specgraph.InvalidArgument) as e:
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.field == field
    assert peak < 1 << 20, f"{peak} bytes allocated before the refusal"


def test_messages_give_the_dtype_and_shape_that_was_passed(setup):
    cfg, plan, arena, bufs = setup
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.stage_(bufs, 2, np.zeros(2, bool), *_inputs(2)[1:])
    assert "dtype bool," in str(e.value)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.round_setup_(bufs, 2, np.zeros((8, 63), np.int32))
    assert e.value.field == "req_to_token" and "shape [8, 63]" in str(e.value)
    with pytest.raises(specgraph.InvalidArgument) as e:
        md.expand_page_table(np.zeros((3, 3), np.int64), [1, 1], topk=2, page_size=4,
                             decode_length=1)
    assert e.value.field == "cache_loc" and "shape [3, 3]" in str(e.value)


def _frameworks():
    out = ["numpy"]
    try:
        import torch  # noqa: F401

        out.append("torch")
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("fw", _frameworks())
def test_unusual_but_legal_inputs_match_the_reference(index_dtype, fw):
    cfg = specgraph.DraftConfig(max_batch=5, topk=2, num_steps=3, page_size=4,
                                max_context_len=40, pool_rows=6, kv_slots=1 << 12)
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework=fw))
    conv = (lambda a: a) if fw == "numpy" else __import__("torch").from_numpy
    rng = __import__("random").Random(5)
    r = ref.random_round(cfg, rng, bs=cfg.max_batch)  # batch = max_batch
    r.seq[0] = r.seq[-1] = cfg.max_context_len  # seq_len = max_context_len
    r2t_list = ref.random_req_to_token(cfg, rng)
    bucket = specgraph.stage_(bufs, np.int64(r.bs), conv(np.array(r.pool, index_dtype)),
                              conv(np.array(r.seq, index_dtype)), conv(np.array(r.slots)),
                              np.int32(0), np.float64(-math.inf))
    assert bucket == cfg.max_batch
    specgraph.round_setup_(bufs, np.int32(bucket), conv(np.array(r2t_list, np.int32)))
    pool, seq, slots = ref.staged(cfg, bucket, r)
    lpl, pseq, table, cu = ref.prefix(cfg, bucket, pool, seq, r2t_list)
    assert bufs.prefix_page_table[:bucket].tolist() == table
    assert bufs.last_page_len[:bucket].tolist() == lpl
    for step in range(cfg.num_steps):
        specgraph.step_metadata_(bufs, np.uint16(bucket), np.int8(step))
        want_table, want_seqlen = ref.expand(cfg, bucket, step, lpl, slots)
        v = bufs.view(bucket, step)
        assert v.expand_page_table.tolist() == want_table
        assert v.expand_cache_seqlen.tolist() == want_seqlen
    specgraph.check_guards(bufs, np.int64(bucket))
