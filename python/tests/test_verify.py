"""The target-verify metadata through specgraph.verify_metadata_ on the host path (numpy arrays,
the host twin): fresh random trees (D 2..64, page sizes 1/4/16/64, padded buckets, int32 and int64
inputs, exact and bound masks) against the independent model in verify_reference.py, written into
poisoned engine-owned outputs (exact, larger, strided) with an exact check of every cell written;
the spec's worked examples B1-B3; the double-counted D refused by name; short buffers and bad
input named with nothing written. Needs numpy only (no torch)."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph import VerifyFa3, VerifyFlashInfer, VerifyOutputs  # noqa: E402
import verify_reference as vref  # noqa: E402

POISON = -7
POISON_U8 = 0xAB


def random_case(rng: random.Random, nrng) -> vref.Case:
    d = rng.choice([2, 3, 4, 5, 8]) if rng.random() < 0.7 else rng.randint(2, 64)
    ps = rng.choice([1, 4, 16, 64])
    bs = rng.randint(1, 6)
    real = bs if rng.random() < 0.5 else rng.randint(1, bs)
    m = rng.randint(1, 90)
    seq = [rng.randint(1, m) for _ in range(real)] + [1] * (bs - real)
    rows = rng.randint(2, 5)
    width = m + d + rng.choice([0, 0, 3])
    r2t = nrng.integers(0, 1 << 20, (rows, width)).astype(np.int64)
    pool = [rng.randrange(1, rows) for _ in range(real)] + [0] * (bs - real)
    mask = vref.engine_mask(nrng, seq, real, d, any_matrix=rng.random() < 0.3)
    return vref.Case(seq, pool, r2t, d, ps, mask, real, m)


def engine_outputs(c: vref.Case, rng: random.Random, formats: str):
    """Poisoned outputs of at least the exact capacities of (batch, M, D, ps), sometimes larger
    or with strided rows (a slice of a wider buffer); returns (VerifyOutputs, the whole buffers)."""
    bs, d = len(c.seq_len), c.d
    cap = specgraph.verify_capacities(bs, c.max_seq_len, d, c.page_size)
    extra = rng.choice([0, 0, 2])

    def vec(n, u8=False):
        return np.full(n + extra, POISON_U8 if u8 else POISON, np.uint8 if u8 else np.int32)

    def table(rows, width):
        big = np.full((rows + extra, width + extra + rng.choice([0, 5])), POISON, np.int32)
        return big, (big[:, : width + extra] if rng.random() < 0.5 else big)

    fa3 = fi = None
    whole = {}
    if formats in ("fa3", "both"):
        pt_big, pt = table(bs, cap.prefix_columns)
        et_big, et = table(bs * d, d)
        fa3 = VerifyFa3(pt, vec(bs), vec(bs + 1), vec(bs + 1), et, vec(bs * d), vec(bs * d + 1),
                        vec(bs * d + 1))
        whole.update(prefix_page_table=pt_big, expand_page_table=et_big)
    if formats in ("flashinfer", "both"):
        fi = VerifyFlashInfer(vec(bs + 1), vec(bs + 1), vec(cap.kv_indices), vec(bs),
                              vec(bs + 1), vec(cap.packed_mask_bytes, u8=True), vec(bs + 1))
    return VerifyOutputs(fa3, fi, np.full((3, 10), POISON, np.int32)), whole


def check_vector(got, want):
    assert got[: len(want)].tolist() == want
    poison = POISON_U8 if got.dtype == np.uint8 else POISON
    assert (got[len(want):] == poison).all()


def check_table(whole, want, width):
    rows = len(want)
    assert whole[:rows, :width].tolist() == want
    assert (whole[rows:] == POISON).all() and (whole[:, width:] == POISON).all()


def check_outputs(out: VerifyOutputs, whole, want, c: vref.Case):
    if out.fa3 is not None:
        p, e = want["fa3"]["prefix"], want["fa3"]["expand"]
        cols = -(-c.max_seq_len // c.page_size)
        check_table(whole["prefix_page_table"], p["page_table"], cols)
        check_vector(out.fa3.prefix_cache_seqlen, p["cache_seqlen"])
        check_vector(out.fa3.prefix_cu_seqlens_q, p["cu_seqlens_q"])
        check_vector(out.fa3.prefix_cu_seqlens_k, p["cu_seqlens_k"])
        check_table(whole["expand_page_table"], e["page_table"], c.d)
        check_vector(out.fa3.expand_cache_seqlen, e["cache_seqlen"])
        check_vector(out.fa3.expand_cu_seqlens_q, e["cu_seqlens_q"])
        check_vector(out.fa3.expand_cu_seqlens_k, e["cu_seqlens_k"])
    if out.flashinfer is not None:
        f = want["flashinfer"]
        for name in VerifyFlashInfer._fields:
            check_vector(getattr(out.flashinfer, name), f[name])
    assert (out.guard == 0).all()  # reset by the call, nothing recorded


def run(c: vref.Case, out: VerifyOutputs, dtype=np.int32, mask=None, **kw):
    specgraph.verify_metadata_(out, c.req_to_token.astype(np.int32),
                               np.array(c.pool, dtype), np.array(c.seq_len, dtype),
                               c.mask if mask is None else mask, draft_tokens=c.d,
                               page_size=c.page_size, max_seq_len=c.max_seq_len,
                               real_batch=c.real_batch, **kw)


def test_random_trees_match_the_independent_reference():
    rng, nrng = random.Random(21), np.random.default_rng(21)
    seen = set()
    for i in range(2000):
        c = random_case(rng, nrng)
        formats = rng.choice(["fa3", "flashinfer", "both"])
        out, whole = engine_outputs(c, rng, formats)
        bound = rng.random() < 0.3
        mask = c.mask
        if bound:  # a static buffer past the real cells: nothing past them is read
            mask = np.concatenate([c.mask, nrng.integers(0, 2, rng.randint(1, 50)).astype(
                np.uint8)])
        dtype = np.int64 if i % 2 else np.int32
        run(c, out, dtype, mask=mask.astype(bool) if i % 3 == 0 else mask,
            mask_exact=not bound)
        check_outputs(out, whole, vref.run(c), c)
        seen.add((c.page_size, c.real_batch < len(c.seq_len), c.d > 16, bound))
    assert len(seen) == 32, sorted(seen)  # every page size x padding x large D x bound mode


def test_worked_example_b1():
    r2t = np.array([40 + np.arange(9)], np.int32)
    mask = np.array([1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1,
                     0, 1, 1, 1, 1, 1, 1, 1, 0, 1], np.uint8)
    out = specgraph.verify_outputs(1, 8, 4, 1)
    specgraph.verify_metadata_(out, r2t, np.array([0]), np.array([5]), mask, draft_tokens=4,
                               page_size=1, max_seq_len=8)
    f, e = out.fa3, out.flashinfer
    assert f.prefix_page_table.tolist() == [[40, 41, 42, 43, 44, 0, 0, 0]]
    assert f.prefix_cache_seqlen.tolist() == [5] and f.prefix_cu_seqlens_k.tolist() == [0, 5]
    assert f.expand_page_table.tolist() == [[45, 46, 47, 48], [45, 46, 47, 48], [45, 47, 46, 48],
                                            [45, 46, 48, 47]]
    assert f.expand_cache_seqlen.tolist() == [1, 2, 2, 3]
    assert f.expand_cu_seqlens_k.tolist() == [0, 1, 3, 5, 8]
    assert e.kv_indptr.tolist() == [0, 9] and e.kv_indices[:9].tolist() == list(range(40, 49))
    assert e.mask_indptr.tolist() == [0, 36] and e.packed_mask_indptr.tolist() == [0, 5]
    assert e.packed_mask[:5].tolist() == [63, 254, 252, 250, 11]


def b2_case():
    """B2: ps 4, D 3, seq_len [6, 3], request 0 on pages 6, 2, 9, request 1 on 4, 8, 1."""
    r2t = np.zeros((3, 12), np.int32)
    for row, pages in ((1, [6, 2, 9]), (2, [4, 8, 1])):
        r2t[row] = np.array(pages)[np.arange(12) // 4] * 4 + np.arange(12) % 4
    trees = [np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]]), np.array([[1, 0, 0], [1, 1, 0],
                                                                    [1, 1, 1]])]
    mask = np.concatenate([np.concatenate([np.ones((3, n), np.uint8), t], 1).reshape(-1)
                           for n, t in zip([6, 3], trees)]).astype(np.uint8)
    return r2t, mask


def test_worked_example_b2_into_exact_engine_buffers():
    r2t, mask = b2_case()
    out = specgraph.verify_outputs(2, 9, 3, 4)  # M = 9: prefix capacity 3
    specgraph.verify_metadata_(out, r2t, np.array([1, 2]), np.array([6, 3]), mask,
                               draft_tokens=3, page_size=4, max_seq_len=9)
    f, e = out.fa3, out.flashinfer
    assert f.prefix_page_table.tolist() == [[6, 2, 0], [4, 0, 0]]
    assert f.prefix_cu_seqlens_k.tolist() == [0, 6, 9]
    assert f.expand_page_table.tolist() == [[10, 11, 36], [10, 11, 36], [10, 36, 11]] + [
        [19, 32, 33]] * 3
    assert f.expand_cache_seqlen.tolist() == [1, 2, 2, 1, 2, 3]
    assert e.kv_indptr.tolist() == [0, 9, 15] and e.mask_indptr.tolist() == [0, 27, 45]
    assert e.packed_mask_indptr.tolist() == [0, 4, 7]
    assert e.packed_mask[:7].tolist() == [127, 254, 253, 5, 207, 247, 3]
    assert (e.packed_mask[7:] == 0).all()  # never written (zeroed by verify_outputs)


def test_worked_example_b3_padding():
    """B3: seq_len [4, 1], pool [1, 0], real_batch 1: the padded request attends everything."""
    r2t = np.stack([np.arange(8), 60 + np.arange(8)]).astype(np.int32)
    mask = np.concatenate([np.ones((3, 4), np.uint8), np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]],
                                                               np.uint8)], 1).reshape(-1)
    out = specgraph.verify_outputs(2, 4, 3, 1)
    specgraph.verify_metadata_(out, r2t, np.array([1, 0]), np.array([4, 1]), mask,
                               draft_tokens=3, page_size=1, max_seq_len=4, real_batch=1)
    f, e = out.fa3, out.flashinfer
    assert f.expand_page_table.tolist() == [[64, 65, 66], [64, 65, 66], [64, 66, 65]] + [
        [1, 2, 3]] * 3
    assert f.expand_cache_seqlen.tolist() == [1, 2, 2, 3, 3, 3]
    assert f.expand_cu_seqlens_k.tolist() == [0, 1, 3, 5, 8, 11, 14]
    assert e.kv_indices[:11].tolist() == list(range(60, 67)) + [0, 1, 2, 3]
    assert e.packed_mask[:5].tolist() == [159, 223, 23, 255, 15]


def test_lengths_that_already_count_the_tree_are_refused_by_name():
    """The double-count case: the engine's mask built from seq_len, the lengths passed with the D
    verify tokens in them (seq_len + D): refused naming custom_mask, the cause and the fix."""
    rng, nrng = random.Random(5), np.random.default_rng(5)
    for _ in range(20):
        d, bs = rng.randint(2, 8), rng.randint(1, 5)
        seq = [rng.randint(1, 20) for _ in range(bs)]
        mask = vref.engine_mask(nrng, seq, bs, d)
        r2t = nrng.integers(0, 1000, (bs + 1, 20 + 3 * d)).astype(np.int32)
        out, whole = engine_outputs(vref.Case(seq, [], r2t, d, 4, mask, bs, 20 + d), rng, "both")
        before = [np.array(x, copy=True) for x in list(out.fa3) + list(out.flashinfer)]
        with pytest.raises(specgraph.InvalidArgument) as e:
            specgraph.verify_metadata_(out, r2t, np.arange(1, bs + 1),
                                       np.array(seq) + d, mask, draft_tokens=d, page_size=4,
                                       max_seq_len=20 + d)
        assert e.value.field == "custom_mask"
        assert f"{len(mask)} cells" in str(e.value)
        assert "seq_len seems to include the D verify tokens already" in str(e.value)
        assert f"{d * d * bs} cells shorter" in str(e.value)
        after = list(out.fa3) + list(out.flashinfer)
        assert all((a == b).all() for a, b in zip(after, before))  # nothing written
        assert (out.guard == POISON).all()


def b1_args():
    r2t = np.array([40 + np.arange(9)], np.int32)
    mask = np.ones(36, np.uint8)
    return r2t, np.array([0]), np.array([5]), mask


def test_short_or_wrong_buffers_are_named_with_their_sizes_and_nothing_is_written():
    r2t, pool, seq, mask = b1_args()
    ok = specgraph.verify_outputs(1, 8, 4, 1)
    fa3, fi = ok.fa3, ok.flashinfer
    # An engine sizing the packed mask from this batch's lengths (5 + 4 = 9 keys: 5 bytes) where
    # the bucket's capacity at max_seq_len 8 is ceil(4 * 12 / 8) = 6 bytes.
    cases = [
        (fi._replace(packed_mask=np.zeros(5, np.uint8)), "packed_mask",
         ["5 bytes, needs 6", "max_seq_len counts the prefix WITHOUT the D verify tokens"]),
        (fi._replace(kv_indices=np.zeros(11, np.int32)), "kv_indices",
         ["11 entries, needs 12 (kv_indices_capacity = batch * (max_seq_len + D)"]),
        (fi._replace(kv_indptr=np.zeros(1, np.int32)), "kv_indptr", ["1 entries, needs 2"]),
        (fi._replace(qo_indptr=np.zeros(2, np.int64)), "qo_indptr", ["dtype int64"]),
        (fi._replace(packed_mask=np.zeros(6, np.int32)), "packed_mask", ["expected uint8"]),
        (fa3._replace(prefix_page_table=np.zeros((1, 7), np.int32)), "prefix_page_table",
         ["shape [1, 7], needs [1, 8]", "ceil(max_seq_len 8 / page_size 1)"]),
        (fa3._replace(expand_page_table=np.zeros((4, 3), np.int32)), "expand_page_table",
         ["needs [4, 4]"]),
        (fa3._replace(expand_cu_seqlens_k=np.zeros(4, np.int32)), "expand_cu_seqlens_k",
         ["needs 5 (batch * D + 1)"]),
        (fa3._replace(prefix_page_table=np.zeros((2, 16), np.int32)[:, ::2]),
         "prefix_page_table", ["column stride 2"]),
        (fa3._replace(expand_cache_seqlen=fa3.expand_cu_seqlens_q[:4]), "expand_cu_seqlens_q",
         ["shares memory with expand_cache_seqlen"]),
    ]
    for bad, field, words in cases:
        out = VerifyOutputs(bad, fi, ok.guard) if isinstance(bad, VerifyFa3) else \
            VerifyOutputs(fa3, bad, ok.guard)
        ok.guard[:] = POISON
        before = [np.array(x, copy=True) for x in list(out.fa3) + list(out.flashinfer)]
        with pytest.raises(specgraph.InvalidArgument) as e:
            specgraph.verify_metadata_(out, r2t, pool, seq, mask, draft_tokens=4, page_size=1,
                                       max_seq_len=8)
        assert e.value.field == field, (field, str(e.value))
        for w in words:
            assert w in str(e.value), (w, str(e.value))
        assert all((a == b).all() for a, b in zip(list(out.fa3) + list(out.flashinfer), before))
        assert (ok.guard == POISON).all()


def test_bad_input_is_named_and_nothing_is_written():
    r2t, pool, seq, mask = b1_args()
    calls = [
        (dict(seq_lens=np.array([9])), "seq_len[0]"),  # past max_seq_len 8
        (dict(seq_lens=np.array([0])), "seq_len[0]"),
        (dict(seq_lens=np.array([1 << 33])), "seq_lens[0]"),  # int64 that does not fit
        (dict(req_pool_indices=np.array([1])), "req_pool_index[0]"),
        (dict(req_pool_indices=np.array([0, 0])), "req_pool_index"),
        (dict(req_to_token=r2t[:, :8]), "seq_len[0]"),  # the row is narrower than 5 + 4
        (dict(custom_mask=mask[:35]), "custom_mask"),
        (dict(custom_mask=mask.astype(np.int32)), "custom_mask"),
        (dict(draft_tokens=0), "draft_tokens"),
        (dict(draft_tokens=1025), "draft_tokens"),
        (dict(page_size=0), "page_size"),
        (dict(max_seq_len=0), "max_seq_len"),
        (dict(real_batch=2), "real_batch"),
        (dict(kv_slots=45), "req_to_token[0][5]"),  # the first verify slot, 45, is past it
        (dict(seq_lens=np.array([1.5])), "seq_lens"),
    ]
    out = specgraph.verify_outputs(1, 8, 4, 1)
    for change, field in calls:
        args = dict(req_to_token=r2t, req_pool_indices=pool, seq_lens=seq, custom_mask=mask,
                    draft_tokens=4, page_size=1, max_seq_len=8)
        args.update(change)
        for x in list(out.fa3) + list(out.flashinfer):
            x[...] = 3
        out.guard[:] = POISON
        with pytest.raises(specgraph.InvalidArgument) as e:
            specgraph.verify_metadata_(out, **args)
        assert e.value.field == field, (change, str(e.value))
        assert all((x == 3).all() for x in list(out.fa3) + list(out.flashinfer))
        assert (out.guard == POISON).all()
    with pytest.raises(TypeError, match="^out: expected specgraph.VerifyOutputs"):
        specgraph.verify_metadata_((out.fa3, out.flashinfer), r2t, pool, seq, mask,
                                   draft_tokens=4, page_size=1, max_seq_len=8)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.verify_metadata_(VerifyOutputs(None, None, out.guard), r2t, pool, seq, mask,
                                   draft_tokens=4, page_size=1, max_seq_len=8)
    assert e.value.field == "fa3" and "no output set" in str(e.value)


def test_one_layout_alone_writes_only_its_buffers():
    r2t, pool, seq, _ = b1_args()
    mask = np.ones(36, np.uint8)
    both = specgraph.verify_outputs(1, 8, 4, 1)
    for formats in ("fa3", "flashinfer"):
        out = specgraph.verify_outputs(1, 8, 4, 1, formats=formats)
        assert (out.fa3 is None) == (formats == "flashinfer")
        specgraph.verify_metadata_(out, r2t, pool, seq, mask, draft_tokens=4, page_size=1,
                                   max_seq_len=8)
        specgraph.verify_metadata_(both, r2t, pool, seq, mask, draft_tokens=4, page_size=1,
                                   max_seq_len=8)
        got = out.fa3 if formats == "fa3" else out.flashinfer
        want = both.fa3 if formats == "fa3" else both.flashinfer
        assert all((a == b).all() for a, b in zip(got, want))


def test_capacities_and_the_int32_limit():
    cap = specgraph.verify_capacities(8, 4096, 16, 64)
    assert cap == (64, 8 * (4096 + 16), 8 * (16 * (4096 + 16) // 8), 8 * 16 * 4112,
                   5 * 8 + 2 * 8 * 16)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.verify_capacities(1024, 1 << 20, 64, 1)
    assert e.value.field == "max_seq_len" and "int32 mask_indptr limit" in str(e.value)
    out = specgraph.verify_outputs(3, 10, 2, 4)
    assert out.fa3.prefix_page_table.shape == (3, 3) and out.fa3.expand_page_table.shape == (6, 2)
    assert out.flashinfer.kv_indices.shape == (36,) and out.flashinfer.packed_mask.shape == (9,)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.verify_outputs(3, 10, 2, 4, formats="csr")
    assert e.value.field == "formats"


def test_a_caller_scratch_is_checked_and_used():
    r2t, pool, seq, mask = b1_args()
    words = specgraph.verify_capacities(1, 8, 4, 1).scratch_words
    assert words == 5 * 1 + 2 * 1 * 4
    out = specgraph.verify_outputs(1, 8, 4, 1)
    kw = dict(draft_tokens=4, page_size=1, max_seq_len=8)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.verify_metadata_(out, r2t, pool, seq, mask, scratch=np.zeros(words - 1,
                                                                              np.int64), **kw)
    assert e.value.field == "scratch" and f"{words - 1} int64 words, needs {words}" in str(
        e.value)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.verify_metadata_(out, r2t, pool, seq, mask,
                                   scratch=np.zeros(words, np.int32), **kw)
    assert e.value.field == "scratch"
    specgraph.verify_metadata_(out, r2t, pool, seq, mask, scratch=np.zeros(words, np.int64), **kw)
    assert out.flashinfer.kv_indptr.tolist() == [0, 9]
