"""The verify metadata on the torch path (CPU tensors): torch.ops.specgraph.verify_metadata_ equal
to the numpy path byte for byte and to the independent reference, opcheck (schema, fake
implementation), torch.compile (aot_eager and inductor, fullgraph), and VerifyGraphs in eager mode
(padded buckets by the all-1 rule, the double-counted D named, capture failures naming the
bucket). Skipped visibly without torch."""

from __future__ import annotations

import os
import random

import pytest

from conftest import need_torch

torch = need_torch()
np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph.verify_graphs import VerifyGraphs, VerifyView  # noqa: E402
import verify_reference as vref  # noqa: E402

POISON = -7


def random_case(rng: random.Random, nrng, bs=None, real=None, m=None, d=None) -> vref.Case:
    d = d or (rng.choice([2, 3, 5, 8]) if rng.random() < 0.8 else rng.randint(2, 64))
    ps = rng.choice([1, 4, 16, 64])
    bs = bs or rng.randint(1, 5)
    real = real or rng.randint(1, bs)
    m = m or rng.randint(1, 60)
    seq = [rng.randint(1, m) for _ in range(real)] + [1] * (bs - real)
    rows = 4
    r2t = nrng.integers(0, 1 << 16, (rows, m + d)).astype(np.int64)
    pool = [rng.randrange(1, rows) for _ in range(real)] + [0] * (bs - real)
    return vref.Case(seq, pool, r2t, d, ps, vref.engine_mask(nrng, seq, real, d), real, m)


def as_lists(out: specgraph.VerifyOutputs):
    return [x.tolist() for x in list(out.fa3) + list(out.flashinfer) + [out.guard]]


def poison(out: specgraph.VerifyOutputs):
    for x in list(out.fa3) + list(out.flashinfer):
        v = 0xAB if x.dtype in (np.uint8, torch.uint8) else POISON
        x.fill_(v) if isinstance(x, torch.Tensor) else x.fill(v)
    return out


def test_torch_path_equals_the_numpy_path_and_the_reference():
    rng, nrng = random.Random(7), np.random.default_rng(7)
    for i in range(200):
        c = random_case(rng, nrng)
        bs = len(c.seq_len)
        dt = torch.int64 if i % 2 else torch.int32
        kw = dict(draft_tokens=c.d, page_size=c.page_size, max_seq_len=c.max_seq_len,
                  real_batch=c.real_batch)
        t_out = poison(specgraph.verify_outputs(bs, c.max_seq_len, c.d, c.page_size,
                                                device="cpu"))
        n_out = poison(specgraph.verify_outputs(bs, c.max_seq_len, c.d, c.page_size))
        mask = torch.from_numpy(c.mask)
        specgraph.verify_metadata_(t_out, torch.from_numpy(c.req_to_token.astype(np.int32)),
                                   torch.tensor(c.pool, dtype=dt),
                                   torch.tensor(c.seq_len, dtype=dt),
                                   mask.bool() if i % 3 == 0 else mask, **kw)
        specgraph.verify_metadata_(n_out, c.req_to_token.astype(np.int32), np.array(c.pool),
                                   np.array(c.seq_len), c.mask, **kw)
        assert as_lists(t_out) == as_lists(n_out)
        want = vref.run(c)
        assert t_out.fa3.expand_page_table.tolist() == want["fa3"]["expand"]["page_table"]
        n = want["flashinfer"]["packed_mask_indptr"][-1]
        assert t_out.flashinfer.packed_mask[:n].tolist() == want["flashinfer"]["packed_mask"]


def test_int64_indices_that_do_not_fit_are_refused_by_element():
    out = specgraph.verify_outputs(1, 8, 4, 1, device="cpu")
    r2t = (40 + torch.arange(9, dtype=torch.int32)).reshape(1, 9)
    for pool, seq, field in ((torch.tensor([1 << 32]), torch.tensor([5]), "req_pool_indices[0]"),
                             (torch.tensor([0]), torch.tensor([-(1 << 40)]), "seq_lens[0]"),
                             (torch.tensor([0]), torch.tensor([5.0]), "seq_lens")):
        with pytest.raises(specgraph.InvalidArgument) as e:
            specgraph.verify_metadata_(out, r2t, pool, seq, torch.ones(36, dtype=torch.uint8),
                                       draft_tokens=4, page_size=1, max_seq_len=8)
        assert e.value.field == field, str(e.value)


def b1_tensors():
    r2t = (40 + torch.arange(9, dtype=torch.int32)).reshape(1, 9)
    mask = torch.tensor([1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1,
                         0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1], dtype=torch.uint8)
    return r2t, torch.tensor([0]), torch.tensor([5]), mask


def test_the_verify_op_passes_opcheck():
    out = specgraph.verify_outputs(1, 8, 4, 1, device="cpu")
    r2t, pool, seq, mask = b1_tensors()
    op = torch.ops.specgraph.verify_metadata_.default
    base = (r2t, pool.int(), seq, mask, 4, 1, 8, 1, True, 1 << 62, 8, 12, 6)
    for fa3, fi in ((list(out.fa3), list(out.flashinfer)), (list(out.fa3), []),
                    ([], list(out.flashinfer))):
        torch.library.opcheck(op, base + (fa3, fi, out.guard, []))
    schema = str(op._schema)
    assert "Tensor(a!)[] fa3" in schema and "Tensor(b!)[] flashinfer" in schema
    assert "Tensor(c!) guard" in schema


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_sees_the_verify_op(backend):
    if backend == "inductor" and os.environ.get("SPECGRAPH_SKIP_INDUCTOR") == "1":
        pytest.skip("SPECGRAPH_SKIP_INDUCTOR=1")
    out = specgraph.verify_outputs(1, 8, 4, 1, device="cpu")
    r2t, pool, seq, mask = b1_tensors()

    def fn(r2t, pool, seq, mask):
        specgraph.verify_metadata_(out, r2t, pool, seq, mask, draft_tokens=4, page_size=1,
                                   max_seq_len=8)
        return out.fa3.expand_cache_seqlen * 2 + out.flashinfer.kv_indptr[1]

    got = torch.compile(fn, backend=backend, fullgraph=True)(r2t, pool, seq, mask)
    assert got.tolist() == [2 + 9, 4 + 9, 4 + 9, 6 + 9]  # B1's counts 1, 2, 2, 3; 9 keys
    assert out.flashinfer.packed_mask[:5].tolist() == [63, 254, 252, 250, 11]
    assert out.fa3.expand_page_table[2].tolist() == [45, 47, 46, 48]


def graphs_case(nrng, buckets=(1, 2, 4), m=24, d=4, ps=4, **kw):
    rows = 6
    r2t = torch.from_numpy(nrng.integers(0, 1 << 16, (rows, m + d)).astype(np.int32))
    seen = []

    def forward(v: VerifyView) -> None:  # what the engine's verify forward reads
        seen.append((v.bucket, [x.clone() for x in v.fa3], [x.clone() for x in v.flashinfer],
                     v.seq_lens.clone()))

    out = specgraph.verify_outputs(max(buckets), m, d, ps, device="cpu")
    g = VerifyGraphs(forward, outputs=out, req_to_token=r2t, buckets=buckets, max_seq_len=m,
                     draft_tokens=d, page_size=ps, **kw)
    return g, r2t, seen, out


def test_verify_graphs_eagerly_write_every_bucket_with_padding():
    nrng, rng = np.random.default_rng(3), random.Random(3)
    g, r2t, seen, out = graphs_case(nrng, checked="sync")
    report = g.capture()
    assert report.mode == "eager" and len(seen) == 2 * 3  # two warm-ups per bucket
    assert [s[0] for s in seen] == [4, 4, 2, 2, 1, 1]
    for _ in range(12):
        bs = rng.randint(1, 4)
        seq = [rng.randint(1, 24) for _ in range(bs)]
        pool = [rng.randrange(1, 6) for _ in range(bs)]
        mask = vref.engine_mask(nrng, seq, bs, 4)
        seen.clear()
        bucket = g.stage_(bs, torch.tensor(pool), torch.tensor(seq, dtype=torch.int32),
                          torch.from_numpy(mask))
        assert bucket == min(b for b in (1, 2, 4) if b >= bs)
        g.run()
        # The reference of the bucket by the spec's padding rule (real_batch = bs).
        c = vref.Case(seq + [1] * (bucket - bs), pool + [0] * (bucket - bs), r2t.numpy(), 4, 4,
                      mask, bs, 24)
        want = vref.run(c)
        (b, fa3, fi, seq_seen), = seen
        assert b == bucket and seq_seen.tolist() == c.seq_len
        p, e, f = want["fa3"]["prefix"], want["fa3"]["expand"], want["flashinfer"]
        assert fa3[0].tolist() == p["page_table"] and fa3[3].tolist() == p["cu_seqlens_k"]
        assert fa3[4].tolist() == e["page_table"] and fa3[5].tolist() == e["cache_seqlen"]
        assert fa3[7].tolist() == e["cu_seqlens_k"]
        assert fi[1].tolist() == f["kv_indptr"] and fi[6].tolist() == f["packed_mask_indptr"]
        assert fi[2][: f["kv_indptr"][-1]].tolist() == f["kv_indices"]
        assert fi[5][: len(f["packed_mask"])].tolist() == f["packed_mask"]
    assert sum(g.replays.values()) == 12


def test_verify_graphs_name_the_double_counted_tree_and_bad_stages():
    nrng = np.random.default_rng(4)
    g, r2t, seen, out = graphs_case(nrng, checked="sync")
    with pytest.raises(specgraph.InvalidArgument) as e:
        g.stage_(1, torch.tensor([1]), torch.tensor([3]), torch.ones(28, dtype=torch.uint8))
    assert e.value.field == "bucket" and "capture() first" in str(e.value)
    g.capture()
    seq = [5, 7]
    mask = torch.from_numpy(vref.engine_mask(nrng, seq, 2, 4))
    g.stage_(2, torch.tensor([1, 2]), torch.tensor(seq) + 4, mask)  # lengths with D in them
    with pytest.raises(specgraph.InvalidArgument) as e:
        g.run()
    assert e.value.field == "custom_mask"
    assert "seq_len seems to include the D verify tokens already" in str(e.value)
    assert "32 cells shorter" in str(e.value)
    for args, field in (((5, torch.tensor([1] * 5), torch.tensor([3] * 5), mask), "bs"),
                        ((2, torch.tensor([1]), torch.tensor([3, 3]), mask), "req_pool_indices"),
                        ((1, torch.tensor([1]), torch.tensor([3]), torch.ones(200)),
                         "custom_mask"),
                        ((1, torch.tensor([1]), torch.tensor([3]), torch.ones(28)),
                         "custom_mask")):
        with pytest.raises(specgraph.InvalidArgument) as e:
            g.stage_(*args)
        assert e.value.field == field, (field, str(e.value))
    with pytest.raises(specgraph.InvalidArgument) as e:
        g.stage_(1, torch.tensor([1]), torch.tensor([3]), mask[:28], bucket=3)
    assert e.value.field == "bucket"


def test_verify_graphs_name_the_bucket_a_capture_failed_in():
    def forward(v):
        if v.bucket == 2:
            raise RuntimeError("the forward broke")

    out = specgraph.verify_outputs(4, 8, 2, 1, device="cpu")
    g = VerifyGraphs(forward, outputs=out, req_to_token=torch.zeros(2, 10, dtype=torch.int32),
                     buckets=[4, 2, 1], max_seq_len=8, draft_tokens=2, page_size=1)
    with pytest.raises(specgraph.CaptureFailed) as e:
        g.capture()
    assert e.value.bucket == 2 and "the forward broke" in str(e.value)
    with pytest.raises(specgraph.InvalidArgument) as e:
        VerifyGraphs(forward, outputs=out, req_to_token=torch.zeros(2, 10, dtype=torch.int32),
                     buckets=[], max_seq_len=8, draft_tokens=2, page_size=1)
    assert e.value.field == "buckets"
    with pytest.raises(TypeError, match="^outputs: expected"):
        VerifyGraphs(forward, outputs=(1, 2), req_to_token=torch.zeros(2, 10), buckets=[1],
                     max_seq_len=8, draft_tokens=2, page_size=1)


def test_the_verify_op_shows_up_in_the_profiler_by_name():
    out = specgraph.verify_outputs(1, 8, 4, 1, device="cpu")
    r2t, pool, seq, mask = b1_tensors()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        specgraph.verify_metadata_(out, r2t, pool, seq, mask, draft_tokens=4, page_size=1,
                                   max_seq_len=8)
    assert "specgraph::verify_metadata_" in {e.name for e in prof.events()}


def test_verify_graphs_refuse_outputs_off_the_device_and_check_async():
    nrng = np.random.default_rng(8)
    with pytest.raises(specgraph.InvalidArgument) as e:
        VerifyGraphs(lambda v: None, outputs=specgraph.verify_outputs(2, 8, 2, 1),
                     req_to_token=torch.zeros(2, 10, dtype=torch.int32), buckets=[2],
                     max_seq_len=8, draft_tokens=2, page_size=1)
    assert e.value.field == "guard" and "torch.Tensor on cpu" in str(e.value)
    g, r2t, seen, out = graphs_case(nrng, checked="async")
    g.capture()
    for _ in range(3):  # clean rounds: the async count lands zero and nothing is raised
        seq = [3, 9]
        g.stage_(2, torch.tensor([1, 2]), torch.tensor(seq),
                 torch.from_numpy(vref.engine_mask(nrng, seq, 2, 4)))
        g.run()
    g.poll()
    assert int(g._host_flag.sum()) == 0 and sum(g.replays.values()) == 3
