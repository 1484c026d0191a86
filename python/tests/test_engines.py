"""What an engine's own graph runner needs (docs/engines.md): the caller's bucket and idle ranks
(data-parallel attention), out_cache_loc rows wider than the draft forwards (slot_stride), and
DraftGraphs capturing exactly the graphs each mode replays. Against the independent reference
(reference.py) on the host path; the DraftGraphs tests run on CPU torch tensors."""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest

from conftest import need_torch

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import reference as ref  # noqa: E402

FIELDS = dict(max_batch=12, topk=2, num_steps=3, page_size=4, max_context_len=48, pool_rows=16,
              kv_slots=1 << 16, buckets=(1, 2, 4, 8, 12))
POISON = (-1, 1 << 16, 2**63 - 1, -2**63)  # out of range: a read of one is refused, recorded


def make(**extra):
    cfg = specgraph.DraftConfig(**{**FIELDS, **extra})
    plan = specgraph.make_plan(cfg)
    arena = specgraph.host_arena(plan)
    return cfg, plan, arena, specgraph.buffers(plan, arena)


def widen(cfg, r: ref.Round) -> ref.Round:
    """r's rows (num_steps slots each) widened to cfg.slot_stride, poison in the extra slots."""
    n, s = cfg.num_steps, cfg.slot_stride
    slots = []
    for row in range(r.bs * cfg.topk):
        slots += r.slots[row * n:(row + 1) * n] + [POISON[(row + j) % 4] for j in range(s - n)]
    return ref.Round(r.bs, r.pool, r.seq, slots)


def arrays(r: ref.Round):
    return (np.array(r.pool, np.int64), np.array(r.seq, np.int32),
            np.array(r.slots, np.int64))


def expect_round(cfg, bufs, bucket, r, r2t, depth):
    """Stages nothing: runs the round's ops on `bucket` and compares every table with the
    reference, the unread slots included in the staged rows."""
    specgraph.round_setup_(bufs, bucket, np.array(r2t, np.int32))
    pool, seq, slots = ref.staged(cfg, bucket, r)
    assert bufs.req_pool_index[:bucket].tolist() == pool
    assert bufs.seq_len[:bucket].tolist() == seq
    assert bufs.out_cache_loc[:bucket].reshape(-1).tolist() == slots
    assert int(bufs.real_batch[0]) == r.bs
    lpl, pseq, table, _ = ref.prefix(cfg, bucket, pool, seq, r2t)
    for step in range(depth):
        specgraph.step_metadata_(bufs, bucket, step)
        v = bufs.view(bucket, step)
        want_t, want_s = ref.expand(cfg, bucket, step, lpl, slots)
        assert v.prefix_page_table.tolist() == table
        assert v.expand_page_table.tolist() == want_t, step
        assert v.expand_cache_seqlen.tolist() == want_s, step
    specgraph.check_guards(bufs)  # raises on any refused store or bad input read


def test_explicit_bucket_and_idle_rank_match_the_reference():
    cfg, plan, arena, bufs = make()
    rng = random.Random(20)
    r2t = ref.random_req_to_token(cfg, rng)
    for i in range(24):
        bs = 0 if i % 3 == 0 else rng.randint(1, 12)
        world = max(bs, rng.randint(0, 12))  # the all-reduced batch: this rank's or larger
        bucket = next(b for b in FIELDS["buckets"] if b >= world)
        r = ref.random_round(cfg, rng, bs) if bs else ref.Round(0, [], [], [])
        arena.fill(0xA5)  # poison: a cell not written this round cannot pass
        got = specgraph.stage_(bufs, bs, *arrays(r), bucket=bucket)
        assert got == bucket and plan.round_bucket(bs, bucket) == bucket
        expect_round(cfg, bufs, bucket, r, r2t, 1 + i % 3)
    assert plan.round_bucket(0) == 1 and plan.round_bucket(5) == 8


@pytest.mark.parametrize("bucket, text", [
    (6, "bucket: 6 is not a planned bucket (planned: 1, 2, 4, 8, 12); pass one of them, or 0"),
    (4, "bucket: 4 is below the batch 5 (its rows cannot hold the round); pass a planned bucket "
        ">= 5 (planned: 1, 2, 4, 8, 12)"),
    (-2, "bucket: -2 is not a planned bucket"),
])
def test_a_bucket_outside_the_table_or_below_the_batch_is_refused_with_nothing_written(bucket,
                                                                                      text):
    cfg, plan, arena, bufs = make()
    r = ref.random_round(cfg, random.Random(3), 5)
    specgraph.stage_(bufs, 5, *arrays(r))
    before = arena.copy()
    for call in (lambda: specgraph.stage_(bufs, 5, *arrays(r), bucket=bucket),
                 lambda: plan.round_bucket(5, bucket)):
        with pytest.raises(specgraph.InvalidArgument) as e:
            call()
        assert e.value.field == "bucket" and str(e.value).startswith(text), str(e.value)
        assert (arena == before).all()
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.stage_(bufs, -1, *arrays(r))
    assert e.value.field == "bs" and (arena == before).all()


def test_slot_rows_wider_than_the_forwards_never_read_the_extra_slots():
    cfg, plan, arena, bufs = make(slot_stride=7)
    assert cfg.slot_stride == 7 and plan.find("input.out_cache_loc").shape == (12, 2, 7)
    assert bufs.view(12, 0).out_cache_loc.shape == (12, 2, 7)
    assert "slot_stride 7 slots (4 per row never read)" in plan.report()
    assert '"num_steps":3,"slot_stride":7' in plan.to_json()
    rng = random.Random(7)
    r2t = ref.random_req_to_token(cfg, rng)
    narrow = specgraph.DraftConfig(**FIELDS)  # the generator's rows: num_steps wide
    for i in range(16):
        r = widen(cfg, ref.random_round(narrow, rng, rng.randint(1, 12)))
        arena.fill(0xA5)
        bucket = specgraph.stage_(bufs, r.bs, *arrays(r))  # poison past num_steps: accepted
        expect_round(cfg, bufs, bucket, r, r2t, 1 + i % 3)
    bad = widen(cfg, ref.random_round(narrow, rng, 2))
    bad.slots[7 + 2] = -5  # row 1, slot 2: read by step 2, so checked by name
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.stage_(bufs, 2, *arrays(bad))
    assert e.value.field == "out_cache_loc[0][1][2]"
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.DraftConfig(**{**FIELDS, "slot_stride": 2})
    assert e.value.field == "slot_stride" and "2 is outside [num_steps 3, 65536]" in str(e.value)


# ---- DraftGraphs (CPU torch) ----------------------------------------------------------------

def torch_setup(**extra):
    torch = need_torch()
    import specgraph.torch as sgt
    cfg = specgraph.DraftConfig(**{**FIELDS, **extra})
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework="torch"))
    return torch, sgt, cfg, plan, bufs


def test_two_ranks_replay_the_bucket_of_the_largest_batch_idle_rank_included():
    """Two DraftGraphs in two threads (an engine's data-parallel ranks): each round a loopback
    all-reduce (max) of the ranks' batches, the bucket of that batch chosen by the test, both
    ranks stage with it (rank 1 idle every other round) and run the same depth; what each
    forward read equals the reference, and both ranks replayed the same graphs."""
    need_torch()  # here, not in the threads: a skip raised there would read as a failure
    ranks, rounds = 2, 12
    barrier = threading.Barrier(ranks)
    batches = [0] * ranks
    replays, errors = [None] * ranks, []

    def rank_main(rank):
        try:
            torch, sgt, cfg, plan, bufs = torch_setup()
            rng, shared = random.Random(100 + rank), random.Random(9)
            r2t = ref.random_req_to_token(cfg, rng)
            calls = []
            g = sgt.DraftGraphs(bufs, lambda v: calls.append(
                (v.bucket, v.step, v.expand_page_table.tolist(), v.expand_cache_seqlen.tolist())),
                req_to_token=torch.tensor(r2t, dtype=torch.int32), warmups=0, checked="sync")
            g.capture()
            for i in range(rounds):
                bs = 0 if rank == 1 and i % 2 == 0 else rng.randint(1, 12)
                depth = shared.randint(1, 3)
                batches[rank] = bs
                barrier.wait()
                world = max(batches)  # the all-reduce
                barrier.wait()
                bucket = next(b for b in FIELDS["buckets"] if b >= world)
                r = ref.random_round(cfg, rng, bs) if bs else ref.Round(0, [], [], [])
                calls.clear()
                assert g.stage_(bs, *(torch.tensor(a) for a in arrays(r)), bucket=bucket) == bucket
                g.run_round(depth)
                pool, seq, slots = ref.staged(cfg, bucket, r)
                lpl = ref.prefix(cfg, bucket, pool, seq, r2t)[0]
                assert [c[:2] for c in calls] == [(bucket, s) for s in range(depth)]
                for _, step, table, seqlen in calls:
                    assert (table, seqlen) == ref.expand(cfg, bucket, step, lpl, slots)
            replays[rank] = g.replays
        except BaseException as e:  # noqa: BLE001 (reported below, the barrier released)
            errors.append(f"rank {rank}: {type(e).__name__}: {e}")
            barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(k,)) for k in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert replays[0] == replays[1] and sum(replays[0].values()) > 0


MODES = {  # DraftGraphs options per mode, and the graphs per bucket each replays
    "per-step": (dict(), lambda n: n),
    "round": (dict(round_graphs=True), lambda n: 1),
    "round+steps": (dict(round_graphs=True, step_graphs=True), lambda n: n),  # n - 1 steps
    "device steps": (dict(device_steps=True), lambda n: 1),
    "device depth": (dict(device_steps=True, device_depth=True), lambda n: 1),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_each_mode_captures_exactly_the_graphs_it_replays(mode):
    """The warm-ups of capture() (on a GPU: the captures) cover exactly graph_keys, and rounds
    over every bucket and every depth the mode runs launch every one of them and nothing else.
    Round mode refuses what it would need step graphs for (naming the fix)."""
    options, per_bucket = MODES[mode]
    config_opts = {k: v for k, v in options.items() if k != "step_graphs"}
    torch, sgt, cfg, plan, bufs = torch_setup(**{k: v for k, v in config_opts.items()})
    graph_opts = {k: v for k, v in options.items() if k == "step_graphs"}
    n = cfg.num_steps
    warm = Counter()
    r2t = torch.zeros(cfg.pool_rows, cfg.max_context_len, dtype=torch.int32)
    g = sgt.DraftGraphs(bufs, lambda v: warm.update([v.bucket]), req_to_token=r2t, warmups=1,
                        **graph_opts)
    keys = g.graph_keys
    assert len(keys) == len(set(keys)) == len(plan.buckets) * per_bucket(n)
    g.capture()
    # Forward runs per bucket during capture: one per step a graph holds (a round graph: n).
    holds = {sgt.ROUND: n}
    assert warm == Counter({b: sum(holds.get(s, 1) for bb, s in keys if bb == b)
                            for b in plan.buckets})
    depths = [n] if mode == "round" else list(range(1, n + 1))
    if mode == "device depth":
        depths = [None]
    rng = random.Random(4)
    for bucket in plan.buckets:
        for depth in depths:
            g.stage_(bucket, *(torch.tensor(a) for a in arrays(ref.random_round(cfg, rng, bucket))))
            if mode == "device depth":
                g.run_round()
            else:
                g.run_round(depth)
    assert set(g.replays) == set(keys), (sorted(g.replays), sorted(keys))
    if mode == "round":
        g.stage_(1, *(torch.tensor(a) for a in arrays(ref.random_round(cfg, rng, 1))))
        for call, field in ((lambda: g.run_round(n - 1), "depth"), (lambda: g.replay(0), "step")):
            with pytest.raises(specgraph.InvalidArgument) as e:
                call()
            assert e.value.field == field and "step_graphs=True" in str(e.value)
