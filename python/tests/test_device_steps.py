"""The device step counter from Python (docs/device-rounds.md), on the host path: the same
op sequence replayed step after step, the step read from the arena's counter, equals the
independent reference at every step; only staging resets the counter."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import reference as ref  # noqa: E402

FIELDS = dict(max_batch=6, topk=2, num_steps=4, page_size=4, max_context_len=64, pool_rows=9,
              kv_slots=1 << 12, device_steps=True)


def test_one_step_body_replayed_matches_the_reference_at_every_step():
    cfg = specgraph.DraftConfig(**FIELDS)
    plan = specgraph.make_plan(cfg)
    arena = specgraph.host_arena(plan)
    bufs = specgraph.buffers(plan, arena)
    rng = random.Random(20261130)
    r2t_list = ref.random_req_to_token(cfg, rng)
    r2t = np.array(r2t_list, dtype=np.int32)
    stride = cfg.num_steps + 1
    for _ in range(12):
        r = ref.random_round(cfg, rng)
        depth = rng.randint(1, cfg.num_steps)
        bucket = specgraph.stage_(bufs, r.bs, np.array(r.pool, np.int64),
                                  np.array(r.seq, np.int64), np.array(r.slots, np.int64))
        assert int(bufs.device_step[0]) == 0, "staging resets the counter"
        pool, seq, slots = ref.staged(cfg, bucket, r)
        lpl, _, table, _ = ref.prefix(cfg, bucket, pool, seq, r2t_list)
        for s in range(depth):
            # The body of the one step graph: the same calls at every step.
            specgraph.round_setup_(bufs, bucket, r2t)  # runs at step 0 only (on the device)
            specgraph.step_metadata_device_(bufs, bucket)
            view = bufs.view(bucket, 0)
            assert view.device_step is not None and int(view.device_step[0]) == s
            assert view.expand_page_table.shape == (bucket * cfg.topk, stride)
            want, want_seqlen = ref.expand(cfg, bucket, s, lpl, slots)
            assert view.expand_page_table[:, : s + 2].tolist() == want, f"step {s}"
            assert view.expand_cache_seqlen.tolist() == want_seqlen, f"step {s}"
            specgraph.advance_step_(bufs)
        assert int(bufs.device_step[0]) == depth, "the counter ends at the depth run"
        assert bufs.prefix_page_table[:bucket].tolist() == table
        assert all(w.violations == 0 for w in specgraph.read_guards(bufs))


def test_the_seed_bug_cannot_be_expressed_and_per_step_views_stay_per_step():
    cfg = specgraph.DraftConfig(**dict(FIELDS, device_steps=False))
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    view = bufs.view(plan.buckets[-1], 2)
    assert view.device_step is None
    assert view.expand_page_table.shape[1] == 4  # d + 1 for step 2
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.step_metadata_device_(bufs, plan.buckets[-1])
    assert e.value.field == "device_steps"


def test_draft_graphs_with_a_device_counter_replay_one_body_in_eager_mode():
    from conftest import need_torch

    torch = need_torch()
    import specgraph.torch as sgt

    cfg = specgraph.DraftConfig(**dict(FIELDS, buckets=(3, 6)))
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework="torch"))
    rng = random.Random(11)
    r2t_list = ref.random_req_to_token(cfg, rng)
    r2t = torch.tensor(r2t_list, dtype=torch.int32)
    calls = []

    def forward(v: specgraph.StepView) -> None:
        calls.append((v.bucket, v.step, int(v.device_step[0]), v.expand_page_table.clone(),
                      v.expand_cache_seqlen.clone()))

    g = sgt.DraftGraphs(bufs, forward, req_to_token=r2t, checked="sync")
    g.capture()
    for _ in range(6):
        r = ref.random_round(cfg, rng)
        depth = rng.randint(1, cfg.num_steps)
        calls.clear()
        bucket = g.stage_(r.bs, *(torch.tensor(x, dtype=torch.int64)
                                  for x in (r.pool, r.seq, r.slots)))
        g.run_round(depth)
        # One body: every call sees view(B, 0); the step is the counter's.
        assert [(c[0], c[1], c[2]) for c in calls] == [(bucket, 0, s) for s in range(depth)]
        pool, seq, slots = ref.staged(cfg, bucket, r)
        lpl, *_ = ref.prefix(cfg, bucket, pool, seq, r2t_list)
        for _, _, s, table, seqlen in calls:
            want, want_seqlen = ref.expand(cfg, bucket, s, lpl, slots)
            assert table[:, : s + 2].tolist() == want and seqlen.tolist() == want_seqlen
        assert int(bufs.device_step[0]) == depth
    with pytest.raises(specgraph.InvalidArgument) as e:
        g.replay(0)  # only staging resets the counter: no restart mid-round
    assert e.value.field == "step"
    with pytest.raises(specgraph.InvalidArgument) as e:
        sgt.DraftGraphs(bufs, forward, req_to_token=r2t, round_graphs=True)
    assert e.value.field == "round_graphs"


def test_device_step_ops_pass_opcheck():
    from conftest import need_torch

    torch = need_torch()
    plan = specgraph.make_plan(specgraph.DraftConfig(**FIELDS))
    arena = specgraph.host_arena(plan, framework="torch")
    bufs = specgraph.buffers(plan, arena)
    # In the round's order (docs/metadata.md section 11): an idle round staged and set up.
    z = torch.zeros(1, dtype=torch.int64)
    cfg = plan.config
    specgraph.stage_(bufs, 0, z, z, z, bucket=plan.buckets[-1])
    specgraph.round_setup_(bufs, plan.buckets[-1],
                           torch.zeros(cfg.pool_rows, cfg.max_context_len, dtype=torch.int32))
    # step_metadata_device_ is step_metadata_ with step None (the device counter's step)
    torch.library.opcheck(torch.ops.specgraph.step_metadata_.default,
                          (arena, bufs.handle, plan.buckets[-1], None))
    torch.library.opcheck(torch.ops.specgraph.advance_step_.default, (arena, bufs.handle))
    assert "Tensor(a!) arena" in str(torch.ops.specgraph.advance_step_.default._schema)


@pytest.mark.parametrize("device_depth", [False, True])
def test_capture_starts_every_warm_up_at_step_zero(device_depth):
    from conftest import need_torch

    torch = need_torch()
    import specgraph.torch as sgt

    # The GPU tests' table: buckets (8, 4, 2), 3 steps, 2 warm-ups per bucket. Without a reset
    # before each warm-up the counter would reach 5, past num_steps, where a forward indexing
    # its per-step outputs by the counter goes out of range.
    cfg = specgraph.DraftConfig(**dict(FIELDS, max_batch=8, num_steps=3, buckets=(2, 4, 8),
                                       device_depth=device_depth))
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework="torch"))
    r2t = torch.zeros(cfg.pool_rows, cfg.max_context_len, dtype=torch.int32)
    seen = []

    def forward(v: specgraph.StepView) -> None:
        seen.append((v.bucket, int(v.device_step[0])))

    bufs.device_step[0] = 2  # left by an earlier round: the warm-ups must not start from it
    g = sgt.DraftGraphs(bufs, forward, req_to_token=r2t, warmups=2)
    assert g.capture().graphs == 0  # a CPU arena: the warm-ups run, nothing is captured
    assert seen == [(8, 0), (8, 0), (4, 0), (4, 0), (2, 0), (2, 0)]
    assert int(bufs.device_step[0]) == 0, "capture leaves the counter as staging would"


def test_the_gpu_tests_counter_forward_writes_nothing_for_a_spent_counter():
    from conftest import need_torch

    torch = need_torch()
    from forwards import counter_forward

    cfg = specgraph.DraftConfig(**dict(FIELDS, device_depth=True))
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework="torch"))
    rng = random.Random(3)
    r2t = torch.tensor(ref.random_req_to_token(cfg, rng), dtype=torch.int32)
    r = ref.random_round(cfg, rng, bs=4)
    bucket = specgraph.stage_(bufs, r.bs, *(torch.tensor(x, dtype=torch.int64)
                                            for x in (r.pool, r.seq, r.slots)))
    specgraph.round_setup_(bufs, bucket, r2t)
    specgraph.step_metadata_device_(bufs, bucket)
    n, rows = cfg.num_steps, bucket * cfg.topk
    page_value = torch.arange(cfg.kv_slots // cfg.page_size, dtype=torch.float32)
    out = torch.full((n, plan.max_rows), -1.0)
    source = torch.rand(n, plan.max_rows)
    bufs.confidence.fill_(-2.0)
    forward = counter_forward(cfg, out, page_value, source)
    for spent in (n, n + 3):
        bufs.device_step[0] = spent
        forward(bufs.view(bucket, 0))
        assert (out == -1).all(), f"counter {spent} wrote an output"
        assert (bufs.confidence == -2).all(), f"counter {spent} wrote a confidence"
    bufs.device_step[0] = n - 1  # a live step writes its own slice, and only that
    forward(bufs.view(bucket, 0))
    assert (out[: n - 1] == -1).all() and (out[n - 1, rows:] == -1).all()
    assert (out[n - 1, :rows] >= 1).all()  # page values >= 0, cache_seqlen >= 1
    assert torch.equal(bufs.confidence[:rows], source[n - 1, :rows])
