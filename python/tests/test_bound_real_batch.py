"""The engine's real_batch word bound with bind_inputs (docs/engines.md, "Inputs read in place"):
what reads it sees the word the engine writes each round. Checked mode's branch-layout check
runs on the real rows (requests r < real_batch) and on no others (docs/metadata.md section 3),
and device_depth's continue condition counts only the real rows' confidence, the word clamped
to [0, bucket] (docs/device-rounds.md: padded rows never keep a round alive). Fresh random
rounds, the rows past the real batch left holding stale requests, each compared with an
independent model of the rule written here."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402

LEVELS = [0.0, 0.25, 0.5, 0.75, 1.0]  # exact in float32: ties are tested too


def layout_slots(cfg, rng, seq_len):
    """One request's [topk][num_steps] slots laid out as docs/metadata.md section 1 says: each
    branch continues the prefix's partial page (in-page offset last_page_len + j) on pages of
    its own."""
    ps, n = cfg.page_size, cfg.num_steps
    pages = cfg.kv_slots // ps  # kv_slots >> num_steps pages
    out = []
    for _ in range(cfg.topk):
        first = rng.randrange(1, pages - n - 8)  # room for corrupt() to move a slot on
        out.append([first * ps + seq_len % ps + j for j in range(n)])
    return out


def layout_violation(ps, last_page_len, d, slots):
    """The model of the check (docs/metadata.md section 3) on one row's first d slots: None,
    or (column, expected, found)."""
    for j in range(d):
        if slots[j] % ps != (last_page_len + j) % ps:
            return j, (last_page_len + j) % ps, slots[j] % ps
    runs = sum(1 for j in range(d) if j == 0 or slots[j] // ps != slots[j - 1] // ps)
    expected = -(-(last_page_len + d) // ps)
    return None if runs == expected else (runs, expected, runs)


def corrupt(cfg, rng, row_slots):
    """A plausible engine bug in one branch row: a slot at the wrong in-page offset, or a slot
    on another page (one run too many)."""
    j = rng.randrange(cfg.num_steps)
    if rng.random() < 0.5:
        row_slots[j] += 1 if row_slots[j] % cfg.page_size != cfg.page_size - 1 else -1
    else:
        row_slots[j] += cfg.page_size * rng.randint(2, 5)


def test_the_layout_check_reads_the_bound_real_batch():
    cfg = specgraph.DraftConfig(max_batch=6, topk=2, num_steps=3, page_size=4,
                                max_context_len=48, pool_rows=7, kv_slots=1 << 12,
                                buckets=(3, 6), checked=True)
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    rng = random.Random(20261204)
    max_bs, topk, n, ps = plan.max_bucket, cfg.topk, cfg.num_steps, cfg.page_size
    pool = np.zeros(max_bs, np.int64)
    seq = np.ones(max_bs, np.int64)
    slots = np.zeros((max_bs, topk, n), np.int64)
    real = np.zeros(1, np.int32)
    inputs = specgraph.bind_inputs(bufs, req_pool_indices=pool, seq_lens=seq,
                                   out_cache_loc=slots, real_batch=real)
    assert inputs.real_batch is real
    r2t = np.array([[rng.randrange(cfg.kv_slots) for _ in range(cfg.max_context_len)]
                    for _ in range(cfg.pool_rows)], np.int32)
    outcomes = set()
    for trial in range(60):
        bucket = rng.choice(plan.buckets)
        real[0] = rb = rng.randint(1, bucket)
        for r in range(bucket):  # every row a request in range; rows >= rb: an earlier round's
            pool[r] = rng.randrange(1, cfg.pool_rows)
            seq[r] = rng.randint(1, cfg.max_context_len)
            if r < rb:
                slots[r] = layout_slots(cfg, rng, int(seq[r]))
            else:  # stale: slots anywhere, never laid out (exempt from the check)
                slots[r] = [[rng.randrange(cfg.kv_slots) for _ in range(n)]
                            for _ in range(topk)]
        bad = None
        if rng.random() < 0.6:  # one real branch row with a layout bug
            r, t = rng.randrange(rb), rng.randrange(topk)
            row = slots[r, t].tolist()
            corrupt(cfg, rng, row)
            slots[r, t] = row
            bad = r * topk + t
        specgraph.round_setup_(bufs, bucket, r2t, inputs=inputs)
        for s in range(n):
            specgraph.step_metadata_(bufs, bucket, s, inputs=inputs)
        words = specgraph.read_guards(bufs)
        assert [w.buffer for w in words[:2] if w.violations] == []  # staging, prefix: clean
        for s in range(n):
            w = words[2 + s]
            assert w.buffer == "expand.page_table" and w.step == s
            want = None if bad is None else layout_violation(
                ps, int(seq[bad // topk]) % ps, s + 1, slots[bad // topk, bad % topk].tolist())
            outcomes.add(want is None)
            if want is None:
                assert w.violations == 0, (trial, s, w)
            else:
                assert (w.violations, w.kind, w.kernel, w.row) == (
                    1, "layout", "expand_page_table", bad), (trial, s, rb, w)
                assert (w.column, w.capacity, w.value) == want, (trial, s, w)
    assert outcomes == {True, False}


def test_the_continue_condition_reads_the_bound_real_batch():
    cfg = specgraph.DraftConfig(max_batch=6, topk=2, num_steps=4, page_size=4,
                                max_context_len=64, pool_rows=9, kv_slots=1 << 12,
                                buckets=(2, 4, 6), device_steps=True, device_depth=True)
    plan = specgraph.make_plan(cfg)
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    rng = random.Random(20261205)
    max_bs, topk = plan.max_bucket, cfg.topk
    real = np.zeros(1, np.int32)
    inputs = specgraph.bind_inputs(bufs, req_pool_indices=np.zeros(max_bs, np.int32),
                                   seq_lens=np.ones(max_bs, np.int32),
                                   out_cache_loc=np.zeros((max_bs, topk, cfg.num_steps),
                                                          np.int64), real_batch=real)
    flag = np.zeros(1, np.int32)
    outcomes = set()
    for _ in range(300):
        bucket = rng.choice(plan.buckets)
        # The engine's word may hold anything: below 0 or past the bucket it is clamped.
        real[0] = rb = rng.randint(-1, bucket + 2)
        max_depth, min_confidence = rng.randint(0, cfg.num_steps), rng.choice(LEVELS)
        specgraph.begin_round_(bufs, max_depth, min_confidence)
        conf = [rng.choice(LEVELS) for _ in range(max_bs * topk)]
        rows = max(0, min(rb, bucket)) * topk
        if rng.random() < 0.7:  # the rows past the real ones confident: they must not count
            conf[rows:] = [1.0] * (len(conf) - rows)
        bufs.confidence[: len(conf)] = conf
        step = rng.randint(0, cfg.num_steps)
        bufs.device_step[0] = step
        flag[0] = 7  # poison: the condition writes exactly 0 or 1
        specgraph.continue_condition_host(bufs, bucket, flag, inputs=inputs)
        want = (step < (max_depth or cfg.num_steps) and
                any(c >= min_confidence for c in conf[:rows]))
        assert int(flag[0]) == int(want), (bucket, rb, step, max_depth, min_confidence, conf)
        outcomes.add((want, rows < bucket * topk))
    assert outcomes == {(True, True), (True, False), (False, True), (False, False)}
