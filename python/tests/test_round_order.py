"""Issue 28 B4 and B5 on the host path (numpy arrays): the round's order (docs/metadata.md
section 11) refused eagerly, naming the op, with nothing written; out_cache_loc staged from
int32 like int64, and a 3-D out_cache_loc of the wrong shape refused naming both shapes."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import reference as ref  # noqa: E402

FIELDS = dict(max_batch=5, topk=2, num_steps=3, page_size=4, max_context_len=32, pool_rows=7,
              kv_slots=1 << 12)


def make(**extra):
    cfg = specgraph.DraftConfig(**{**FIELDS, **extra})
    plan = specgraph.make_plan(cfg)
    arena = specgraph.host_arena(plan)
    return cfg, plan, arena, specgraph.buffers(plan, arena)


def stage(bufs, r, slots_dtype=np.int64, shape=None):
    slots = np.array(r.slots, slots_dtype)
    return specgraph.stage_(bufs, r.bs, np.array(r.pool, np.int32), np.array(r.seq, np.int32),
                            slots if shape is None else slots.reshape(shape))


def refused(arena, op, expected, fn):
    before = arena.copy()
    with pytest.raises(specgraph.InvalidArgument) as e:
        fn()
    assert e.value.field == op, str(e.value)
    assert f"expected {expected}" in str(e.value), str(e.value)
    assert (arena == before).all(), "a refused op wrote into the arena"


def test_ops_out_of_order_are_refused_naming_the_op_with_nothing_written():
    cfg, plan, arena, bufs = make(formats="both")
    rng = random.Random(2812)
    r2t = np.array(ref.random_req_to_token(cfg, rng), np.int32)
    refused(arena, "step_metadata", "the round set up",
            lambda: specgraph.step_metadata_(bufs, 2, 0))
    refused(arena, "setup_round", "a staged round", lambda: specgraph.round_setup_(bufs, 2, r2t))
    r = ref.random_round(cfg, rng)
    bucket = stage(bufs, r)
    # The case: staged, then a step before round_setup_ (wrong expand_cache_seqlen).
    refused(arena, "step_metadata", "the round set up",
            lambda: specgraph.step_metadata_(bufs, bucket, 1))
    refused(arena, "csr_step_indices", "the round set up",
            lambda: specgraph.csr_step_indices_(bufs, bucket, 0, r2t))
    specgraph.round_setup_(bufs, bucket, r2t)
    for s in (2, 0, 1):  # any order once set up: no step reads another's output
        specgraph.step_metadata_(bufs, bucket, s)
    specgraph.csr_step_indices_(bufs, bucket, 0, r2t)
    specgraph.check_guards(bufs)
    # The next round: staging starts it again, so its steps wait for its own setup.
    bucket = stage(bufs, ref.random_round(cfg, rng))
    refused(arena, "step_metadata", "the round set up",
            lambda: specgraph.step_metadata_(bufs, bucket, 2))
    order = [w for w in specgraph.read_guards(bufs) if w.buffer == "round.order"]
    assert len(order) == 1 and order[0].violations == 0, order


def test_int32_out_cache_loc_stages_as_int64_does():
    cfg, plan, arena, bufs = make(slot_stride=4)
    rng = random.Random(2805)
    for _ in range(10):
        r = ref.random_round(cfg, rng)
        r.slots = [rng.randrange(0, cfg.kv_slots) for _ in range(r.bs * cfg.topk * 4)]
        bufs.out_cache_loc[...] = -7  # poisoned: every cell of the bucket must be written
        bucket = stage(bufs, r, np.int32)
        _, _, slots = ref.staged(cfg, bucket, r)
        assert bufs.out_cache_loc[:bucket].reshape(-1).tolist() == slots


def test_a_3d_out_cache_loc_must_be_bs_topk_slot_stride():
    cfg, plan, arena, bufs = make(slot_stride=4)
    rng = random.Random(2855)
    r = ref.random_round(cfg, rng, bs=3)
    r.slots = [rng.randrange(0, cfg.kv_slots) for _ in range(3 * cfg.topk * 4)]
    for bad in ((3, 4, 2), (2, 2, 4), (3, 1, 8), (6, 1, 4), (3, 2, 2)):  # [bs, S, topk] first
        n = bad[0] * bad[1] * bad[2]
        slots = np.array(r.slots[:n], np.int64).reshape(bad)
        before = arena.copy()
        with pytest.raises(specgraph.InvalidArgument) as e:
            specgraph.stage_(bufs, 3, np.array(r.pool, np.int32), np.array(r.seq, np.int32),
                             slots)
        assert e.value.field == "out_cache_loc", str(e.value)
        assert "expected [>= bs 3, topk 2, slot_stride 4]" in str(e.value), str(e.value)
        assert "[" + ", ".join(map(str, bad)) + "]" in str(e.value), str(e.value)
        assert (arena == before).all()
    for good in ((3, 2, 4), (5, 2, 4), None):  # [>= bs, topk, S] and the flat form
        slots = np.array(r.slots + [0] * (2 * 2 * 4 if good == (5, 2, 4) else 0), np.int64)
        bucket = specgraph.stage_(bufs, 3, np.array(r.pool, np.int32), np.array(r.seq, np.int32),
                                  slots if good is None else slots.reshape(good))
        _, _, staged = ref.staged(cfg, bucket, r)
        assert bufs.out_cache_loc[:bucket].reshape(-1).tolist() == staged
