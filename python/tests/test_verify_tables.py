"""The Python verify type mirrors C++'s verify_tables: for random plans with a verify section, the
fields of VerifyFa3 / VerifyFlashInfer are the C++ plan's verify buffers (their arena names) in
the tables' order, and every size Python allocates (verify_outputs), slices (VerifyGraphs.view)
or reports (verify_capacities) equals the plan's buffer and the formulas of docs/verify.md
section 6 written out here. And the one all-or-none rule, reached from Python: a layout with a
missing tensor is refused naming that field, with nothing written."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph import DraftConfig, VerifyFa3, VerifyFlashInfer, VerifyOutputs  # noqa: E402

# The arena names of the plan's verify buffers, as the format defines them.
ARENA = {"prefix_page_table": "verify.prefix.page_table",
         "prefix_cache_seqlen": "verify.prefix.cache_seqlen",
         "prefix_cu_seqlens_q": "verify.prefix.cu_seqlens_q",
         "prefix_cu_seqlens_k": "verify.prefix.cu_seqlens_k",
         "expand_page_table": "verify.expand.page_table",
         "expand_cache_seqlen": "verify.expand.cache_seqlen",
         "expand_cu_seqlens_q": "verify.expand.cu_seqlens_q",
         "expand_cu_seqlens_k": "verify.expand.cu_seqlens_k",
         "qo_indptr": "verify.qo_indptr", "kv_indptr": "verify.kv_indptr",
         "kv_indices": "verify.kv_indices", "kv_last_page_len": "verify.kv_last_page_len",
         "mask_indptr": "verify.mask_indptr", "packed_mask": "verify.packed_mask",
         "packed_mask_indptr": "verify.packed_mask_indptr"}


def formula_shapes(b: int, m: int, d: int, ps: int) -> dict:
    cols, cells = -(-m // ps), d * (m + d)
    return {"prefix_page_table": (b, cols), "prefix_cache_seqlen": (b,),
            "prefix_cu_seqlens_q": (b + 1,), "prefix_cu_seqlens_k": (b + 1,),
            "expand_page_table": (b * d, d), "expand_cache_seqlen": (b * d,),
            "expand_cu_seqlens_q": (b * d + 1,), "expand_cu_seqlens_k": (b * d + 1,),
            "qo_indptr": (b + 1,), "kv_indptr": (b + 1,), "kv_indices": (b * (m + d),),
            "kv_last_page_len": (b,), "mask_indptr": (b + 1,),
            "packed_mask": (b * -(-cells // 8),), "packed_mask_indptr": (b + 1,)}


def random_config(rng: random.Random) -> DraftConfig:
    max_batch = rng.randint(1, 24)
    buckets = sorted(set(rng.sample(range(1, max_batch + 1), min(3, max_batch))) | {max_batch})
    return DraftConfig(max_batch=max_batch, topk=rng.choice([1, 2, 4]), num_steps=rng.randint(1, 4),
                       page_size=rng.choice([1, 4, 16, 64]),
                       max_context_len=rng.randint(1, 3000), pool_rows=4, kv_slots=1 << 20,
                       buckets=tuple(buckets), formats=rng.choice(["fa3", "csr", "both"]),
                       verify_tokens=rng.randint(1, 40))


def test_python_fields_and_sizes_are_the_plans_verify_buffers():
    rng = random.Random(2929)
    assert VerifyFa3._fields + VerifyFlashInfer._fields == tuple(ARENA)
    for _ in range(40):
        cfg = random_config(rng)
        plan = specgraph.make_plan(cfg)
        b, m, d, ps = plan.max_bucket, cfg.max_context_len, cfg.verify_tokens, cfg.page_size
        want = formula_shapes(b, m, d, ps)
        out = specgraph.verify_outputs(b, m, d, ps)
        got = dict(zip(VerifyFa3._fields, out.fa3))
        got.update(zip(VerifyFlashInfer._fields, out.flashinfer))
        fa3, fi = cfg.formats != "csr", cfg.formats != "fa3"
        for field, arena in ARENA.items():
            assert tuple(got[field].shape) == want[field], (cfg, field)
            in_fa3 = field in VerifyFa3._fields
            if (fa3 and in_fa3) or (fi and not in_fa3):
                spec = plan.find(arena)
                assert spec.shape == want[field], (cfg, field)
                assert (spec.dtype == "uint8") == (field == "packed_mask")
            else:
                with pytest.raises(KeyError):
                    plan.find(arena)
        cap = specgraph.verify_capacities(b, m, d, ps)
        assert cap == (-(-m // ps), b * (m + d), b * -(-(d * (m + d)) // 8), b * d * (m + d),
                       5 * b + 2 * b * d)


def test_verify_graphs_follow_the_plans_verify_section():
    torch = pytest.importorskip("torch")
    from specgraph.verify_graphs import VerifyGraphs

    rng = random.Random(7)
    for _ in range(6):
        cfg = random_config(rng)
        plan = specgraph.make_plan(cfg)
        m, d, ps = cfg.max_context_len, cfg.verify_tokens, cfg.page_size
        out = specgraph.verify_outputs(plan.max_bucket, m, d, ps, device="cpu")
        r2t = torch.zeros(4, m + d, dtype=torch.int32)
        g = VerifyGraphs(lambda v: None, outputs=out, req_to_token=r2t, plan=plan)
        assert g.buckets == tuple(sorted(plan.buckets, reverse=True)) and g.plan is plan
        for b in plan.buckets:
            v = g.view(b)
            want = formula_shapes(b, m, d, ps)
            for field, t in list(zip(VerifyFa3._fields, v.fa3)) + list(
                    zip(VerifyFlashInfer._fields, v.flashinfer)):
                assert tuple(t.shape) == want[field], (cfg, b, field)
            assert v.custom_mask.numel() == b * d * (m + d)
        with pytest.raises(specgraph.InvalidArgument) as e:
            VerifyGraphs(lambda v: None, outputs=out, req_to_token=r2t, plan=plan,
                         draft_tokens=d + 1)
        assert e.value.field == "draft_tokens"


def test_a_missing_tensor_is_refused_by_the_one_rule_naming_it():
    r2t = np.array([40 + np.arange(9)], np.int32)
    pool, seq, mask = np.array([0]), np.array([5]), np.ones(36, np.uint8)
    out = specgraph.verify_outputs(1, 8, 4, 1)
    for x in list(out.fa3) + list(out.flashinfer):
        x[...] = 3
    out.guard[...] = -7
    for layout, fields in (("fa3", VerifyFa3._fields), ("flashinfer", VerifyFlashInfer._fields)):
        for field in fields:
            group = getattr(out, layout)._replace(**{field: None})
            partial = out._replace(**{layout: group})
            with pytest.raises(specgraph.InvalidArgument) as e:
                specgraph.verify_metadata_(partial, r2t, pool, seq, mask, draft_tokens=4,
                                           page_size=1, max_seq_len=8)
            n = len(fields)
            assert e.value.field == field, str(e.value)
            assert f"{n - 1} of its {n} output pointers set" in str(e.value)
    assert all((x == 3).all() for x in list(out.fa3) + list(out.flashinfer))
    assert (out.guard == -7).all()
    # No layout at all: named too.
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.verify_metadata_(VerifyOutputs(None, None, out.guard), r2t, pool, seq, mask,
                                   draft_tokens=4, page_size=1, max_seq_len=8)
    assert e.value.field == "fa3"
