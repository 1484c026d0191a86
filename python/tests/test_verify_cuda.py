"""The verify metadata on a GPU (docs/verify.md): CUDA outputs equal to the host path byte for
byte, the op recorded in torch.cuda.graph replaying later rounds, int64 indices that do not fit
and the double-counted D recorded in the guard (never read shifted), and VerifyGraphs captured in
the pool DraftGraphs captured into. Skipped visibly without a GPU; a failure with REQUIRE_GPU=1
(the GPU check)."""

from __future__ import annotations

import random

import pytest

from conftest import need_cuda

torch = need_cuda()
np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import specgraph.torch as sgt  # noqa: E402
from specgraph.verify_graphs import VerifyGraphs  # noqa: E402
import verify_reference as vref  # noqa: E402


def random_case(rng, nrng, bs, m=40, d=None):
    d = d or rng.choice([2, 4, 8, 33])
    real = rng.randint(1, bs)
    seq = [rng.randint(1, m) for _ in range(real)] + [1] * (bs - real)
    r2t = nrng.integers(0, 1 << 16, (6, m + d)).astype(np.int64)
    pool = [rng.randrange(1, 6) for _ in range(real)] + [0] * (bs - real)
    return vref.Case(seq, pool, r2t, d, rng.choice([1, 4, 16, 64]),
                     vref.engine_mask(nrng, seq, real, d), real, m)


def run(c, device, dtype=torch.int32, out=None):
    out = out or specgraph.verify_outputs(len(c.seq_len), c.max_seq_len, c.d, c.page_size,
                                          device=device)
    specgraph.verify_metadata_(out, torch.tensor(c.req_to_token, dtype=torch.int32,
                                                 device=device),
                               torch.tensor(c.pool, dtype=dtype, device=device),
                               torch.tensor(c.seq_len, dtype=dtype, device=device),
                               torch.tensor(c.mask, device=device), draft_tokens=c.d,
                               page_size=c.page_size, max_seq_len=c.max_seq_len,
                               real_batch=c.real_batch)
    return out


def flat(out):
    return [x.cpu() for x in list(out.fa3) + list(out.flashinfer) + [out.guard]]


def test_cuda_outputs_equal_the_host_path():
    rng, nrng = random.Random(1), np.random.default_rng(1)
    for i in range(100):
        c = random_case(rng, nrng, rng.randint(1, 6))
        dt = torch.int64 if i % 2 else torch.int32
        got, want = flat(run(c, "cuda", dt)), flat(run(c, "cpu", dt))
        assert all(torch.equal(a, b) for a, b in zip(got, want)), i
        assert not specgraph.verify_violations(got[-1])


def test_the_op_recorded_in_a_cuda_graph_replays_later_rounds():
    rng, nrng = random.Random(2), np.random.default_rng(2)
    bs, m, d, ps = 4, 40, 4, 16
    c0 = random_case(rng, nrng, bs, m, d)
    r2t = torch.tensor(c0.req_to_token, dtype=torch.int32, device="cuda")
    pool = torch.zeros(bs, dtype=torch.int64, device="cuda")
    seq = torch.ones(bs, dtype=torch.int64, device="cuda")
    mask = torch.ones(bs * d * (m + d), dtype=torch.uint8, device="cuda")
    out = specgraph.verify_outputs(bs, m, d, ps, device="cuda")

    def body():
        specgraph.verify_metadata_(out, r2t, pool, seq, mask, draft_tokens=d, page_size=ps,
                                   max_seq_len=m, mask_exact=False)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()  # warm-up
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        body()
    for _ in range(5):
        c = random_case(rng, nrng, bs, m, d)._replace(req_to_token=c0.req_to_token)
        c = c._replace(real_batch=bs, seq_len=c.seq_len, mask=vref.engine_mask(
            nrng, c.seq_len, bs, d))
        pool.copy_(torch.tensor(c.pool))
        seq.copy_(torch.tensor(c.seq_len))
        mask[: len(c.mask)].copy_(torch.from_numpy(c.mask))
        g.replay()
        torch.cuda.synchronize()
        want = vref.run(c._replace(mask_exact=False, mask=mask.cpu().numpy()))
        assert out.fa3.expand_page_table.tolist() == want["fa3"]["expand"]["page_table"]
        f = want["flashinfer"]
        assert out.flashinfer.kv_indptr.tolist() == f["kv_indptr"]
        assert out.flashinfer.packed_mask[: len(f["packed_mask"])].tolist() == f["packed_mask"]
        assert not specgraph.verify_violations(out.guard)


def test_int64_overflow_and_the_double_count_are_recorded_on_the_device():
    r2t = (40 + torch.arange(20, dtype=torch.int32, device="cuda")).reshape(1, 20)
    out = specgraph.verify_outputs(2, 12, 4, 1, device="cuda")
    mask = torch.ones(2 * 36, dtype=torch.uint8, device="cuda")
    specgraph.verify_metadata_(out, r2t, torch.tensor([0, 1 << 33], device="cuda"),
                               torch.tensor([5, 5], device="cuda"), mask, draft_tokens=4,
                               page_size=1, max_seq_len=12)
    (v,) = specgraph.verify_violations(out.guard)
    assert (v.kind, v.kernel, v.row) == ("bad input", "verify_metadata", 1)
    assert out.fa3.prefix_cache_seqlen.tolist() == [5, 0]  # only the refused request is empty
    # seq_len with the D verify tokens in them: the mask is D * D * 2 = 32 cells short.
    specgraph.verify_metadata_(out, r2t, torch.tensor([0, 0], device="cuda"),
                               torch.tensor([9, 9], device="cuda"), mask, draft_tokens=4,
                               page_size=1, max_seq_len=12)
    (v,) = specgraph.verify_violations(out.guard)
    assert (v.kernel, v.row, v.capacity, v.value) == ("verify_metadata", -1, 72, 104)
    assert out.flashinfer.kv_indptr.tolist() == [0, 0, 0]  # nothing read shifted


def test_verify_graphs_share_the_draft_graphs_pool():
    rng, nrng = random.Random(3), np.random.default_rng(3)
    plan = specgraph.make_plan(specgraph.DraftConfig(max_batch=4, topk=2, num_steps=2,
                                                     page_size=4, max_context_len=48,
                                                     pool_rows=6, kv_slots=1 << 16,
                                                     buckets=(2, 4)))
    arena = torch.empty(plan.total_bytes, dtype=torch.uint8, device="cuda")
    bufs = specgraph.buffers(plan, arena)
    r2t = torch.tensor(nrng.integers(0, 1 << 16, (6, 48)), dtype=torch.int32, device="cuda")
    dg = sgt.DraftGraphs(bufs, lambda v: None, req_to_token=r2t)
    dg.capture()
    seen = torch.zeros(4 * 4, 4, dtype=torch.int32, device="cuda")

    def forward(v):
        seen[: v.bucket * 4].copy_(v.fa3.expand_page_table)

    out = specgraph.verify_outputs(4, 40, 4, 4, device="cuda")
    vg = VerifyGraphs(forward, outputs=out, req_to_token=r2t, buckets=[2, 4], max_seq_len=40,
                      draft_tokens=4, page_size=4, pool=dg.pool, checked="sync")
    report = vg.capture()
    assert report.graphs == 2 and vg.pool is dg.pool
    for _ in range(6):
        bs = rng.randint(1, 4)
        seq = [rng.randint(1, 40) for _ in range(bs)]
        pool = [rng.randrange(1, 6) for _ in range(bs)]
        mask = vref.engine_mask(nrng, seq, bs, 4)
        bucket = vg.stage_(bs, torch.tensor(pool, device="cuda"),
                           torch.tensor(seq, device="cuda"), torch.tensor(mask, device="cuda"))
        vg.run()
        c = vref.Case(seq + [1] * (bucket - bs), pool + [0] * (bucket - bs),
                      r2t.cpu().numpy(), 4, 4, mask, bs, 40)
        want = vref.run(c)
        assert seen[: bucket * 4].tolist() == want["fa3"]["expand"]["page_table"]
        f = want["flashinfer"]
        assert out.flashinfer.packed_mask[: len(f["packed_mask"])].tolist() == f["packed_mask"]
    seq = [5, 7]
    mask = torch.tensor(vref.engine_mask(nrng, seq, 2, 4), device="cuda")
    vg.stage_(2, torch.tensor([1, 2], device="cuda"), torch.tensor([9, 11], device="cuda"), mask)
    with pytest.raises(specgraph.InvalidArgument) as e:
        vg.run()  # lengths with D in them: every real request empty, custom_mask named
    assert e.value.field == "custom_mask" and "32 cells shorter" in str(e.value)
    assert out.fa3.prefix_cache_seqlen[:2].tolist() == [0, 0]
