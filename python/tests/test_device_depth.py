"""The device-decided depth from Python (docs/device-rounds.md) on the host path: the round's
condition kernel against an independent reference, the round controls' checks, and DraftGraphs
running a device_depth round eagerly: the depth the device decides, and every step's tables."""

from __future__ import annotations

import math
import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import reference as ref  # noqa: E402

FIELDS = dict(max_batch=6, topk=2, num_steps=4, page_size=4, max_context_len=64, pool_rows=9,
              kv_slots=1 << 12, device_steps=True, device_depth=True)
# Multiples of 1/4 are exact in float32, so ties (confidence == min_confidence) are tested too.
LEVELS = [0.0, 0.25, 0.5, 0.75, 1.0]


def _stage(bufs, r, max_depth, min_confidence):
    return specgraph.stage_(bufs, r.bs, np.array(r.pool, np.int64), np.array(r.seq, np.int64),
                            np.array(r.slots, np.int64), max_depth, min_confidence)


def test_the_continue_condition_matches_the_reference():
    cfg = specgraph.DraftConfig(**FIELDS)
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    rng = random.Random(20261130)
    flag = np.zeros(1, np.int32)
    outcomes = set()
    for _ in range(300):
        r = ref.random_round(cfg, rng)
        max_depth = rng.randint(0, cfg.num_steps)
        min_confidence = rng.choice(LEVELS)
        bucket = _stage(bufs, r, max_depth, min_confidence)
        real_rows = r.bs * cfg.topk
        conf = [rng.choice(LEVELS) for _ in range(real_rows)]
        # Padded rows always confident: a condition that read them would keep going.
        bufs.confidence[: bucket * cfg.topk] = conf + [1.0] * ((bucket - r.bs) * cfg.topk)
        step = rng.randint(0, cfg.num_steps)
        bufs.device_step[0] = step
        flag[0] = 7  # poison: the condition writes exactly 0 or 1
        specgraph.continue_condition_host(bufs, bucket, flag)
        want = step < (max_depth or cfg.num_steps) and any(c >= min_confidence for c in conf)
        assert int(flag[0]) == int(want), (step, max_depth, min_confidence, conf)
        outcomes.add(want)
    assert outcomes == {True, False}


def test_round_controls_are_checked_before_anything_is_written():
    cfg = specgraph.DraftConfig(**FIELDS)
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    rng = random.Random(7)
    first = ref.random_round(cfg, rng, bs=3)
    _stage(bufs, first, 2, 0.5)
    staged = (bufs.seq_len.copy(), bufs.req_pool_index.copy(), bufs.out_cache_loc.copy(),
              int(bufs.real_batch[0]))
    second = ref.random_round(cfg, rng, bs=5)
    for max_depth, min_confidence, field in ((cfg.num_steps + 1, 0.5, "max_depth"),
                                             (-1, 0.5, "max_depth"),
                                             (1, math.nan, "min_confidence")):
        with pytest.raises(specgraph.InvalidArgument) as e:
            _stage(bufs, second, max_depth, min_confidence)
        assert e.value.field == field
        assert str(max_depth if field == "max_depth" else "nan") in str(e.value).lower()
        assert (bufs.seq_len == staged[0]).all() and (bufs.req_pool_index == staged[1]).all()
        assert (bufs.out_cache_loc == staged[2]).all() and int(bufs.real_batch[0]) == staged[3]


def test_the_round_graph_needs_cuda_and_the_condition_needs_a_depth_plan():
    cfg = specgraph.DraftConfig(**FIELDS)
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.round_graph(bufs, plan.buckets[-1], 0x1000)
    assert e.value.field == "arena"
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.continue_condition_host(bufs, plan.buckets[-1], np.zeros(1, np.int64))
    assert e.value.field == "flag"
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.continue_condition_host(bufs, plan.max_bucket + 1, np.zeros(1, np.int32))
    assert e.value.field == "bucket"
    steps_only = specgraph.make_plan(specgraph.DraftConfig(**dict(FIELDS, device_depth=False)))
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.continue_condition_host(
            specgraph.buffers(steps_only, specgraph.host_arena(steps_only)),
            steps_only.buckets[-1], np.zeros(1, np.int32))
    assert e.value.field == "device_depth"


def test_draft_graphs_let_the_device_decide_the_depth_in_eager_mode():
    from conftest import need_torch

    torch = need_torch()
    import specgraph.torch as sgt

    cfg = specgraph.DraftConfig(**dict(FIELDS, buckets=(3, 6)))
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework="torch"))
    rng = random.Random(31)
    r2t_list = ref.random_req_to_token(cfg, rng)
    r2t = torch.tensor(r2t_list, dtype=torch.int32)
    source = torch.zeros(cfg.num_steps, plan.max_rows)  # what the forward writes at each step
    calls = []

    def forward(v: specgraph.StepView) -> None:
        s = int(v.device_step[0])
        if not 0 <= s < cfg.num_steps:
            return  # a spent counter: write nothing (docs/device-rounds.md)
        v.confidence.copy_(source[s, : v.rows])
        calls.append((s, v.expand_page_table.clone(), v.expand_cache_seqlen.clone()))

    g = sgt.DraftGraphs(bufs, forward, req_to_token=r2t, checked="sync")
    assert g.capture().graphs == 0  # eager: nothing captured
    depths = set()
    for _ in range(40):
        r = ref.random_round(cfg, rng)
        max_depth = rng.randint(0, cfg.num_steps)
        min_confidence = rng.choice(LEVELS)
        source.copy_(torch.tensor([[rng.choice(LEVELS) for _ in range(plan.max_rows)]
                                   for _ in range(cfg.num_steps)]))
        calls.clear()
        bucket = g.stage_(r.bs, *(torch.tensor(x, dtype=torch.int64)
                                  for x in (r.pool, r.seq, r.slots)), max_depth, min_confidence)
        real_rows = r.bs * cfg.topk
        source[:, real_rows:] = 1.0  # padded rows: confident, and ignored
        g.run_round()
        want = ref.decided_depth(cfg, real_rows, max_depth, min_confidence, source.tolist())
        assert int(g.depth[0]) == want
        assert [c[0] for c in calls] == list(range(want))
        pool, seq, slots = ref.staged(cfg, bucket, r)
        lpl, *_ = ref.prefix(cfg, bucket, pool, seq, r2t_list)
        for s, table, seqlen in calls:
            want_table, want_seqlen = ref.expand(cfg, bucket, s, lpl, slots)
            assert table[:, : s + 2].tolist() == want_table and seqlen.tolist() == want_seqlen
        depths.add(want)
    assert depths == set(range(1, cfg.num_steps + 1)), "every depth was decided at least once"
    with pytest.raises(specgraph.InvalidArgument) as e:
        g.run_round(2)
    assert e.value.field == "depth"
    with pytest.raises(specgraph.InvalidArgument) as e:
        g.replay(0)
    assert e.value.field == "step"
