"""specgraph.verify_arena.verify_arena_: the verify metadata written into the plan's own verify
section (DraftConfig(verify_tokens=D), docs/verify.md section 10) from a round staged with
specgraph.stage_, on a numpy arena poisoned around the section: every verify buffer equals the
independent model of verify_reference.py over random trees in random buckets (padded requests,
idle ranks), every other arena byte outside the scratch and guard words is untouched, and
refusals name their field with nothing written. Needs numpy only (no torch)."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph.verify_arena import verify_arena_  # noqa: E402
import verify_reference as vref  # noqa: E402

POISON = 0xA5


def plan_for(rng: random.Random, formats: str, d: int):
    cfg = specgraph.DraftConfig(max_batch=6, topk=2, num_steps=2, page_size=rng.choice([1, 4, 16]),
                                max_context_len=rng.randint(1, 40), pool_rows=9, kv_slots=1 << 20,
                                buckets=[2, 4, 6], formats=formats, verify_tokens=d)
    return specgraph.make_plan(cfg)


def view(arena, plan, name: str):
    b = plan.find(name)
    dtype = {"int32": np.int32, "int64": np.int64, "uint8": np.uint8}[b.dtype]
    return arena[b.offset: b.offset + b.bytes].view(dtype)


def test_rounds_in_the_arena_match_the_reference():
    rng = random.Random(20261201)
    nrng = np.random.default_rng(7)
    for n in range(60):
        formats = rng.choice(["fa3", "csr", "both"])
        d = rng.randint(1, 10)
        plan = plan_for(rng, formats, d)
        m, ps = plan.config.max_context_len, plan.config.page_size
        arena = specgraph.host_arena(plan)
        bufs = specgraph.buffers(plan, arena)
        bucket = rng.choice([2, 4, 6])
        real = rng.randint(0, bucket)  # 0: an idle rank
        seq = [rng.randint(1, m) for _ in range(real)]
        pool = [rng.randint(1, 8) for _ in range(real)]
        rtt = nrng.integers(0, 1 << 20, (9, m + d)).astype(np.int32)
        mask = vref.engine_mask(nrng, seq, real, d, any_matrix=rng.random() < 0.3)
        arena[:] = POISON
        slots = np.zeros(max(real, 1) * 2 * 2, np.int64)
        assert specgraph.stage_(bufs, real, np.array(pool + [0], np.int32),
                                np.array(seq + [1], np.int32), slots, bucket=bucket) == bucket
        before = arena.copy()
        verify_arena_(bufs, bucket, rtt, mask, mask_exact=True)
        case = vref.Case(seq + [1] * (bucket - real), pool + [0] * (bucket - real), rtt, d, ps,
                         mask, real, m, slot_limit=1 << 20)
        want = vref.run(case)
        changed = np.zeros(arena.size, bool)
        fi, fa = want["flashinfer"], want["fa3"]
        checks = []
        if formats != "csr":
            checks += [("verify.prefix.page_table", fa["prefix"]["page_table"]),
                       ("verify.prefix.cache_seqlen", fa["prefix"]["cache_seqlen"]),
                       ("verify.prefix.cu_seqlens_q", fa["prefix"]["cu_seqlens_q"]),
                       ("verify.prefix.cu_seqlens_k", fa["prefix"]["cu_seqlens_k"]),
                       ("verify.expand.page_table", fa["expand"]["page_table"]),
                       ("verify.expand.cache_seqlen", fa["expand"]["cache_seqlen"]),
                       ("verify.expand.cu_seqlens_q", fa["expand"]["cu_seqlens_q"]),
                       ("verify.expand.cu_seqlens_k", fa["expand"]["cu_seqlens_k"])]
        if formats != "fa3":
            checks += [(f"verify.{k}", fi[k]) for k in
                       ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len",
                        "mask_indptr", "packed_mask", "packed_mask_indptr")]
        for name, cells in checks:
            flat = np.array(cells, np.int64).reshape(-1)
            got = view(arena, plan, name)
            assert got[: flat.size].tolist() == flat.tolist(), (n, name)
            b = plan.find(name)
            changed[b.offset: b.offset + flat.size * got.itemsize] = True
        for name in ("verify.scratch",):
            b = plan.find(name)
            changed[b.offset: b.offset + b.bytes] = True
        g = plan.find("guards")
        words = np.frombuffer(arena[g.offset: g.offset + g.bytes].tobytes(),
                              np.int32).reshape(-1, 10)
        # The section's three guard words, just before the last word (round.order, untouched).
        first = plan.layout["guard_order"] - 3
        assert (words[first:first + 3, 0] == 0).all(), (n, words[first:])  # no violation
        changed[g.offset + first * 40: g.offset + (first + 3) * 40] = True
        assert (arena[~changed] == before[~changed]).all(), n


def test_refusals_name_the_field_and_write_nothing():
    rng = random.Random(5)
    plan = plan_for(rng, "both", 4)
    m = plan.config.max_context_len
    arena = specgraph.host_arena(plan)
    bufs = specgraph.buffers(plan, arena)
    rtt = np.zeros((9, m + 4), np.int32)
    mask = np.ones(4 * (1 + 4), np.uint8)
    arena[:] = POISON
    before = arena.copy()
    cases = [
        ("bucket", lambda: verify_arena_(bufs, 3, rtt, mask)),
        ("custom_mask", lambda: verify_arena_(bufs, 2, rtt, mask.astype(np.int32))),
        ("mask_cells", lambda: verify_arena_(bufs, 2, rtt, mask, mask_cells=mask.size + 1)),
        ("req_to_token", lambda: verify_arena_(bufs, 2, rtt[:, :1], mask)),
    ]
    for field, call in cases:
        with pytest.raises(specgraph.InvalidArgument) as e:
            call()
        assert e.value.field == field, str(e.value)
        assert (arena == before).all(), field
    none = specgraph.make_plan(specgraph.DraftConfig(
        max_batch=6, topk=2, num_steps=2, page_size=4, max_context_len=8, pool_rows=9,
        kv_slots=1 << 20, buckets=[2, 4, 6]))
    with pytest.raises(specgraph.InvalidArgument) as e:
        verify_arena_(specgraph.buffers(none, specgraph.host_arena(none)), 2, rtt, mask)
    assert e.value.field == "verify_tokens"
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.DraftConfig(max_batch=6, topk=2, num_steps=2, page_size=4, max_context_len=8,
                              pool_rows=9, kv_slots=1 << 20, verify_tokens=1025)
    assert e.value.field == "verify_tokens"
    assert "max_draft_tokens 1024" in str(e.value)
