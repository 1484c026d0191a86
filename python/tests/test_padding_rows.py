"""Padding rows decided on the device (docs/metadata.md section 4, docs/engines.md): with a real
batch bound to the inputs read in place, the rows at or past it are padding rows whatever the
engine left in them (issue 28 A1), and an idle rank (real_batch 0) runs verify with an empty mask
(A2). Expected values are derived here from the padding rule (pool row 0, seq_len 1, every slot
0), not from the library."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402

# A padded request (docs/metadata.md section 4).
PAD_POOL, PAD_SEQ, PAD_SLOT = 0, 1, 0


def minimal(device_steps: bool):
    """The issue's case: max_batch 2, topk 1, one step, page size 1, context 8, bucket 2."""
    cfg = specgraph.DraftConfig(max_batch=2, topk=1, num_steps=1, page_size=1, max_context_len=8,
                                pool_rows=3, kv_slots=64, buckets=(2,), formats="both",
                                device_steps=device_steps)
    plan = specgraph.make_plan(cfg)
    arena = specgraph.host_arena(plan)
    arena[:] = 0xA5  # poisoned: every cell read below was written by this round
    bufs = specgraph.buffers(plan, arena)
    r2t = np.zeros((3, 8), np.int32)
    r2t[0] = np.arange(8)            # pool row 0: the padding row's (slot 0 = the dummy page)
    r2t[1] = np.arange(8) + 10       # request 0
    r2t[2] = np.arange(8) + 30       # row 1's stale request
    return cfg, plan, bufs, r2t


def expected(r2t, pool, seq, slots):
    """(prefix seqlen, expand step-0 table, kv_indptr, kv_indices) at ps 1, topk 1, step 0."""
    prefix = list(seq)
    expand = [[s, 0] for s in slots]
    indptr, indices = [0], []
    for p, n in zip(pool, seq):
        row = list(r2t[p, :n]) + [r2t[p, n]]  # the prefix, then draft token 0 at position n
        indices += [int(v) for v in row]
        indptr.append(len(indices))
    return prefix, expand, indptr, indices


def run_round(bufs, bucket, r2t, inputs, device_steps):
    """One draft round (one step) reading the bound inputs: eager ops or the device counter."""
    if device_steps:
        specgraph.begin_round_(bufs)
        specgraph.round_setup_(bufs, bucket, r2t, inputs=inputs)
        specgraph.step_metadata_device_(bufs, bucket, inputs=inputs)
        specgraph.csr_indices_device_(bufs, bucket, r2t, inputs=inputs)
    else:
        specgraph.round_setup_(bufs, bucket, r2t, inputs=inputs)
        specgraph.step_metadata_(bufs, bucket, 0, inputs=inputs)
        specgraph.csr_round_indices_(bufs, bucket, r2t, inputs=inputs)


def tables(bufs, bucket):
    v = bufs.view(bucket, 0)
    indptr = bufs.csr_kv_indptr(0)[: bucket + 1].tolist()
    return (v.prefix_seqlen.tolist(), v.expand_page_table.tolist(), indptr,
            bufs.csr_kv_indices(0)[: indptr[-1]].tolist())


@pytest.mark.parametrize("device_steps", [False, True])
def test_rows_past_the_bound_real_batch_are_padding(device_steps):
    cfg, plan, bufs, r2t = minimal(device_steps)
    pool = np.array([1, 2], np.int64)
    seq = np.array([3, 5], np.int64)
    slots = np.array([13, 35], np.int64).reshape(2, 1, 1)  # row 1: a stale request's slot
    real_batch = np.array([1], np.int32)
    inputs = specgraph.bind_inputs(bufs, req_pool_indices=pool, seq_lens=seq,
                                   out_cache_loc=slots, real_batch=real_batch)
    bucket = 2
    run_round(bufs, bucket, r2t, inputs, device_steps)
    specgraph.check_guards(bufs, bucket)
    want = expected(r2t, [1, PAD_POOL], [3, PAD_SEQ], [13, PAD_SLOT])
    assert want[:3] == ([3, 1], [[13, 0], [0, 0]], [0, 4, 6])  # the numbers
    assert tables(bufs, bucket) == want
    # last_page_len 0 + d = 1 for both rows
    assert bufs.view(bucket, 0).expand_cache_seqlen.tolist() == [1, 1]
    # The engine's own tensors are untouched.
    assert pool.tolist() == [1, 2] and seq.tolist() == [3, 5]
    assert slots.ravel().tolist() == [13, 35]

    # The same tensors with the real batch 2: row 1 is read as the request it holds.
    real_batch[0] = 2
    run_round(bufs, bucket, r2t, inputs, device_steps)
    specgraph.check_guards(bufs, bucket)
    want = expected(r2t, [1, 2], [3, 5], [13, 35])
    assert want[:3] == ([3, 5], [[13, 0], [35, 0]], [0, 4, 10])
    assert tables(bufs, bucket) == want

    # An idle rank (real_batch 0) and a word past the bucket (clamped to it: every row real).
    for word, rows in ((0, 0), (7, 2)):
        real_batch[0] = word
        run_round(bufs, bucket, r2t, inputs, device_steps)
        specgraph.check_guards(bufs, bucket)
        real = [(1, 3, 13), (2, 5, 35)][:rows] + [(PAD_POOL, PAD_SEQ, PAD_SLOT)] * (2 - rows)
        assert tables(bufs, bucket) == expected(r2t, *map(list, zip(*real))), word


def test_verify_on_an_idle_rank_takes_real_batch_0_and_an_empty_mask():
    """A2: under data-parallel attention an idle rank replays verify too. real_batch 0 and the
    exactly sized empty mask are accepted; every request is written as a padded one, as the
    independent reference (verify_reference.py) writes it."""
    import random

    import verify_reference as vref
    from test_verify import check_outputs, engine_outputs, run

    rng, nrng = random.Random(28), np.random.default_rng(28)
    for bs in (1, 3):
        for d, ps in ((2, 1), (4, 4)):
            m = 12
            r2t = nrng.integers(0, 1 << 12, (3, m + d)).astype(np.int64)
            empty = np.zeros(0, np.uint8)
            c = vref.Case([1] * bs, [0] * bs, r2t, d, ps, empty, 0, m)
            for formats in ("fa3", "flashinfer", "both"):
                out, whole = engine_outputs(c, rng, formats)
                run(c, out)  # mask_exact: its length must equal the formula's 0 cells
                check_outputs(out, whole, vref.run(c), c)
            # A mask with cells on an idle rank is refused, naming it and the formula's 0.
            out, _ = engine_outputs(c, rng, "both")
            with pytest.raises(specgraph.InvalidArgument) as e:
                run(c, out, mask=np.ones(d, np.uint8))
            assert e.value.field == "custom_mask" and "gives 0" in str(e.value)
    # real_batch stays bounded by the batch and refused below 0, by name.
    out, _ = engine_outputs(c, rng, "both")
    for bad in (-1, 4):
        with pytest.raises(specgraph.InvalidArgument) as e:
            specgraph.verify_metadata_(out, r2t.astype(np.int32), np.zeros(3, np.int32),
                                       np.ones(3, np.int32), np.zeros(0, np.uint8),
                                       draft_tokens=d, page_size=ps, max_seq_len=m,
                                       real_batch=bad)
        assert e.value.field == "real_batch", str(e.value)


@pytest.mark.parametrize("device_steps", [False, True])
def test_a_request_refused_at_the_prefix_is_padding_in_every_table(device_steps):
    """A3: request 1's pool row is out of range and its slots too: the prefix refuses it (one
    violation), and its expand rows at every step and its CSR rows are a padded request's, its
    slots unread (no expand violation, no layout violation in checked mode)."""
    ps, topk, n, m = 4, 2, 3, 32
    cfg = specgraph.DraftConfig(max_batch=2, topk=topk, num_steps=n, page_size=ps,
                                max_context_len=m, pool_rows=3, kv_slots=256, buckets=(2,),
                                formats="both", checked=True, device_steps=device_steps)
    plan = specgraph.make_plan(cfg)
    arena = specgraph.host_arena(plan)
    arena[:] = 0xA5
    bufs = specgraph.buffers(plan, arena)
    r2t = np.zeros((3, m), np.int32)
    r2t[0] = np.arange(m)  # the padded request's row: slot 0 on page 0
    r2t[1] = 100 + np.arange(m)
    # Request 0: 6 tokens on pool row 1 (pages 25, 26), its branches on pages 40.. and 50..,
    # the partial page (2 tokens) copied first: slots 162.., 202.. (offsets 2, 3, 0 ...).
    pool = np.array([1, 7], np.int64)
    seq = np.array([6, 5], np.int64)
    slots = np.array([[[162, 163, 164], [202, 203, 204]],
                      [[999, 999, 999], [999, 999, 999]]], np.int64)  # request 1: out of range
    inputs = specgraph.bind_inputs(bufs, req_pool_indices=pool, seq_lens=seq, out_cache_loc=slots,
                                   real_batch=np.array([2], np.int32))
    bucket = 2
    if device_steps:
        specgraph.begin_round_(bufs)
    specgraph.round_setup_(bufs, bucket, r2t, inputs=inputs)
    for s in range(n):
        if device_steps:
            specgraph.step_metadata_device_(bufs, bucket, inputs=inputs)
            specgraph.csr_indices_device_(bufs, bucket, r2t, inputs=inputs)
        else:
            specgraph.step_metadata_(bufs, bucket, s, inputs=inputs)
            specgraph.csr_step_indices_(bufs, bucket, s, r2t, inputs=inputs)
        d = s + 1
        table = bufs.view(bucket, s).expand_page_table[:, : s + 2]  # one shared table: step s's
        cache = bufs.view(bucket, s).expand_cache_seqlen
        # Request 1 (rows 2, 3): the padded row, every cell the dummy page, 1 % ps + d tokens.
        assert table[2:4].tolist() == [[0] * (s + 2)] * 2, s
        assert cache[2:4].tolist() == [1 % ps + d] * 2, s
        assert cache[:2].tolist() == [6 % ps + d] * 2, s
        # CSR: request 0 lists its 6 prefix slots then its d draft positions, per branch (its
        # regions ps * ceil((6 % 4 + 3) / 4) = 8 apart); request 1 a padded request's: slot 0
        # then positions 1 + t * 4 + j of pool row 0.
        rows = [list(range(100, 106)) + [100 + 6 + t * 8 + j for j in range(d)]
                for t in range(topk)]
        rows += [[0] + [1 + t * 4 + j for j in range(d)] for t in range(topk)]
        indptr = np.cumsum([0] + [len(r) for r in rows]).tolist()
        assert bufs.csr_kv_indptr(s)[: bucket * topk + 1].tolist() == indptr, s
        assert bufs.csr_kv_indices(s)[: indptr[-1]].tolist() == sum(rows, []), s
        if device_steps:
            specgraph.advance_step_(bufs)
    assert bufs.prefix_seqlen[:2].tolist() == [4, 1 - 1 % ps]
    words = {(w.buffer, w.step): w for w in specgraph.read_guards(bufs)}
    assert words[("prefix.page_table", None)].violations == 1
    for s in range(n):
        assert words[("expand.page_table", s)].violations == 0, words[("expand.page_table", s)]
        # The CSR launch finds the bad pool row itself and records it too.
        assert words[("csr.kv_indices", s)].violations == 1
