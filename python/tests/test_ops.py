"""Every op on the host path (numpy arrays, host executor) against the independent reference in
reference.py, on random rounds; int32/int64 inputs; padding; aliasing; bad input."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import reference as ref  # noqa: E402

CONFIGS = [
    dict(max_batch=6, topk=1, num_steps=3, page_size=1, max_context_len=40, pool_rows=9,
         kv_slots=1 << 12),
    dict(max_batch=5, topk=2, num_steps=5, page_size=4, max_context_len=64, pool_rows=7,
         kv_slots=1 << 16),
    dict(max_batch=12, topk=4, num_steps=4, page_size=16, max_context_len=200, pool_rows=13,
         kv_slots=1 << 20, buckets=(2, 5, 12)),
]


def make(fields):
    cfg = specgraph.DraftConfig(**fields)
    plan = specgraph.make_plan(cfg)
    arena = specgraph.host_arena(plan)
    return cfg, plan, arena, specgraph.buffers(plan, arena)


def run_round(bufs, r: ref.Round, r2t, index_dtype=np.int64):
    bucket = specgraph.stage_(bufs, r.bs, np.array(r.pool, dtype=index_dtype),
                              np.array(r.seq, dtype=index_dtype), np.array(r.slots, np.int64))
    specgraph.round_setup_(bufs, bucket, r2t)
    for s in range(bufs.plan.config.num_steps):
        specgraph.step_metadata_(bufs, bucket, s)
    return bucket


@pytest.mark.parametrize("fields", CONFIGS)
def test_random_rounds_match_the_reference(fields):
    cfg, plan, arena, bufs = make(fields)
    rng = random.Random(20261130)
    r2t_list = ref.random_req_to_token(cfg, rng)
    r2t = np.array(r2t_list, dtype=np.int32)
    for _ in range(25):
        r = ref.random_round(cfg, rng)
        before = arena.copy()
        bucket = run_round(bufs, r, r2t)
        assert bucket == plan.bucket_for(r.bs)
        pool, seq, slots = ref.staged(cfg, bucket, r)
        assert bufs.req_pool_index[:bucket].tolist() == pool
        assert bufs.seq_len[:bucket].tolist() == seq
        assert bufs.out_cache_loc[:bucket].reshape(-1).tolist() == slots
        assert int(bufs.real_batch[0]) == r.bs
        lpl, pseq, table, cu = ref.prefix(cfg, bucket, pool, seq, r2t_list)
        assert bufs.last_page_len[:bucket].tolist() == lpl
        assert bufs.prefix_seqlen[:bucket].tolist() == pseq
        assert bufs.prefix_page_table[:bucket].tolist() == table
        assert bufs.cu_seqlens_q[: bucket + 1].tolist() == cu
        rows = bucket * cfg.topk
        for s in range(cfg.num_steps):
            t, sl = ref.expand(cfg, bucket, s, lpl, slots)
            assert bufs.expand_page_table(s)[:rows, : s + 2].tolist() == t, (r, s)
            assert bufs.expand_cache_seqlen(s)[:rows].tolist() == sl
            # rows past the bucket are not this round's: untouched
            old = before[plan.layout["expand_page_table"][s]:][: bufs.expand_page_table(s).nbytes]
            assert (bufs.expand_page_table(s)[rows:].reshape(-1)
                    == old.view(np.int32)[rows * (s + 2):]).all()
        assert all(g.violations == 0 for g in specgraph.read_guards(bufs))
        specgraph.check_guards(bufs)


def test_int32_and_int64_inputs_agree():
    cfg, plan, a64, b64 = make(CONFIGS[1])
    a32 = specgraph.host_arena(plan)
    b32 = specgraph.buffers(plan, a32)
    rng = random.Random(7)
    r2t = np.array(ref.random_req_to_token(cfg, rng), dtype=np.int32)
    for _ in range(10):
        r = ref.random_round(cfg, rng)
        run_round(b64, r, r2t, np.int64)
        run_round(b32, r, r2t, np.int32)
        assert (a32 == a64).all()


def test_padded_requests_are_reset_every_round():
    cfg, plan, arena, bufs = make(CONFIGS[2])  # buckets 2, 5, 12; ps 16, topk 4
    rng = random.Random(3)
    r2t = np.array(ref.random_req_to_token(cfg, rng), dtype=np.int32)
    full = ref.random_round(cfg, rng, bs=5)
    full.seq = [100, 120, 140, 160, 180]  # several prefix pages each
    assert run_round(bufs, full, r2t) == 5
    assert (bufs.prefix_page_table[3:5, :5] != 0).any()
    r = ref.random_round(cfg, rng, bs=3)
    assert run_round(bufs, r, r2t) == 5  # requests 3 and 4 are padding now
    assert bufs.req_pool_index[3:5].tolist() == [0, 0] and bufs.seq_len[3:5].tolist() == [1, 1]
    assert (bufs.out_cache_loc[3:5] == 0).all()
    assert (bufs.prefix_page_table[3:5] == 0).all()  # no page id of the earlier round survives
    assert bufs.last_page_len[3:5].tolist() == [1, 1]
    for s in range(cfg.num_steps):
        rows = slice(3 * cfg.topk, 5 * cfg.topk)
        assert (bufs.expand_page_table(s)[rows, : s + 2] == 0).all()
        assert bufs.expand_cache_seqlen(s)[rows].tolist() == [1 + s + 1] * (2 * cfg.topk)
    specgraph.check_guards(bufs)


def test_slice_before_scatter_at_op_level():
    # docs/metadata.md section 3's worked crash as the ops run it: step 0 reads only d = 1 slot.
    cfg, plan, arena, bufs = make(dict(max_batch=1, topk=1, num_steps=5, page_size=2,
                                       max_context_len=8, pool_rows=2, kv_slots=64))
    r2t = np.zeros((2, 8), dtype=np.int32)
    specgraph.stage_(bufs, 1, np.array([1]), np.array([3]), np.array([1, 2, 3, 4, 5]))
    specgraph.round_setup_(bufs, 1, r2t)
    specgraph.step_metadata_(bufs, 1, 0)
    assert bufs.expand_page_table(0)[0].tolist() == [0, 0]  # one run, zero-filled
    assert int(bufs.expand_cache_seqlen(0)[0]) == 2  # last_page_len 1 + d 1
    # garbage in the unread columns changes nothing
    specgraph.stage_(bufs, 1, np.array([1]), np.array([3]), np.array([1, 60, 61, 62, 63]))
    specgraph.round_setup_(bufs, 1, r2t)  # a new round: set up before its steps (section 11)
    specgraph.step_metadata_(bufs, 1, 0)
    assert bufs.expand_page_table(0)[0].tolist() == [0, 0]
    specgraph.check_guards(bufs)


def test_views_alias_the_arena():
    cfg, plan, arena, bufs = make(CONFIGS[2])
    views = [bufs.real_batch, bufs.req_pool_index, bufs.seq_len, bufs.out_cache_loc,
             bufs.last_page_len, bufs.prefix_seqlen, bufs.prefix_page_table, bufs.cu_seqlens_q,
             bufs.confidence, bufs.guards]
    views += [bufs.expand_page_table(s) for s in range(cfg.num_steps)]
    views += [bufs.expand_cache_seqlen(s) for s in range(cfg.num_steps)]
    for v in views:
        assert np.shares_memory(v, arena) and v.base is not None
    assert bufs.expand_page_table(2) is bufs.expand_page_table(2)  # cached, no new view
    spec = plan.find("expand.page_table", 2)
    assert bufs.expand_page_table(2).ctypes.data == arena.ctypes.data + spec.offset
    assert bufs.expand_page_table(2).shape == spec.shape
    bufs.expand_page_table(2)[1, 3] = 77
    assert arena[spec.offset + (1 * 4 + 3) * 4] == 77
    v = bufs.view(5, 1)
    assert v.expand_page_table.shape == (5 * 4, 3) and v.prefix_page_table.shape[0] == 5
    assert np.shares_memory(v.expand_page_table, arena)


def test_generic_dlpack_arena_gives_aliasing_views():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    cfg, plan, arena, _ = make(CONFIGS[0])
    t = tvm_ffi.from_dlpack(arena)
    bufs = specgraph.buffers(plan, t)
    assert bufs.framework == "dlpack" and bufs.device == "cpu"
    v = np.from_dlpack(bufs.seq_len)
    v[:] = 9
    assert (np.from_dlpack(bufs.seq_len) == 9).all()
    assert np.shares_memory(v, arena)


def snapshot_raises(arena, field, fn):
    before = arena.copy()
    with pytest.raises(specgraph.InvalidArgument) as e:
        fn()
    assert e.value.field == field, str(e.value)
    assert str(e.value).startswith(field), str(e.value)
    assert (arena == before).all(), "nothing may be written"
    return e.value


def test_bad_inputs_raise_naming_the_field_with_nothing_written():
    cfg, plan, arena, bufs = make(CONFIGS[1])  # max_batch 5, topk 2, 5 steps, pool_rows 7
    rng = random.Random(1)
    r2t = np.array(ref.random_req_to_token(cfg, rng), dtype=np.int32)
    run_round(bufs, ref.random_round(cfg, rng, bs=3), r2t)
    pool, seq = np.array([1, 2, 3]), np.array([5, 6, 7])
    slots = np.arange(3 * 10, dtype=np.int64)
    st = lambda bs=3, p=pool, s=seq, o=slots: specgraph.stage_(bufs, bs, p, s, o)  # noqa: E731
    snapshot_raises(arena, "bs", lambda: st(bs=-1))  # 0: an idle rank
    snapshot_raises(arena, "bs", lambda: st(bs=6))
    snapshot_raises(arena, "req_pool_indices", lambda: st(p=pool.astype(np.float32)))
    snapshot_raises(arena, "req_pool_indices", lambda: st(p=pool[:2]))
    snapshot_raises(arena, "req_pool_indices[1]", lambda: st(p=np.array([1, 7, 2])))
    snapshot_raises(arena, "req_pool_indices[0]", lambda: st(p=np.array([-1, 2, 3])))
    snapshot_raises(arena, "seq_lens[2]", lambda: st(s=np.array([5, 6, 0])))
    snapshot_raises(arena, "seq_lens[0]", lambda: st(s=np.array([65, 6, 7])))
    snapshot_raises(arena, "seq_lens[1]", lambda: st(s=np.array([5, 1 << 40, 7])))  # no narrowing
    # An int32 out_cache_loc is accepted since issue 28 B5 (test_round_order.py); a float is not.
    snapshot_raises(arena, "out_cache_loc", lambda: st(o=slots.astype(np.float32)))
    snapshot_raises(arena, "out_cache_loc", lambda: st(o=slots[:29]))
    short = slots.reshape(3, 10)[:, ::2].copy()[:, :4]  # 12 slots, 30 needed
    snapshot_raises(arena, "out_cache_loc", lambda: st(o=short))
    bad = slots.copy()
    bad[17] = 1 << 16
    snapshot_raises(arena, "out_cache_loc[1][1][2]", lambda: st(o=bad))
    bad[17] = -4
    snapshot_raises(arena, "out_cache_loc[1][1][2]", lambda: st(o=bad))
    snapshot_raises(arena, "seq_lens", lambda: st(s=np.arange(6)[::2]))  # not contiguous
    snapshot_raises(arena, "bucket", lambda: specgraph.round_setup_(bufs, 6, r2t))
    snapshot_raises(arena, "req_to_token", lambda: specgraph.round_setup_(bufs, 3, r2t[:, :10]))
    snapshot_raises(arena, "req_to_token",
                    lambda: specgraph.round_setup_(bufs, 3, r2t.astype(np.int64)))
    e = snapshot_raises(arena, "req_to_token", lambda: specgraph.round_setup_(bufs, 3, r2t[:5]))
    assert f"columns >= max_context_len {cfg.max_context_len}" in str(e)
    specgraph.round_setup_(bufs, 3, np.concatenate([r2t, r2t]))  # taller: accepted
    snapshot_raises(arena, "step", lambda: specgraph.step_metadata_(bufs, 3, 5))
    snapshot_raises(arena, "bucket", lambda: specgraph.step_metadata_(bufs, 0, 1))
    snapshot_raises(arena, "out", lambda: specgraph.count_violations_(bufs, np.zeros(1, np.int64)))
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.buffers(plan, np.zeros(plan.total_bytes + 256, np.uint8)[1:])
    assert e.value.field == "arena" and "aligned" in str(e.value)
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.buffers(plan, specgraph.host_arena(plan)[:-1])
    assert e.value.field == "arena"
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.buffers(plan, np.zeros(plan.total_bytes // 4, np.int32))
    assert e.value.field == "arena"


@pytest.mark.parametrize("fields", CONFIGS)
def test_a_wider_req_to_token_is_read_at_its_own_stride(fields):
    # Engines allocate req_to_token wider than max_context_len: the rows are read at the table's
    # real stride. The extra columns hold a slot on the pool's last page, which no real token
    # uses here: if a row were read at stride max_context_len, that page (or a neighbouring
    # row's tokens) would show.
    cfg, plan, arena, bufs = make(fields)
    rng = random.Random(11)
    ps = cfg.page_size
    r2t = np.array(ref.random_req_to_token(cfg, rng), dtype=np.int32) % (cfg.kv_slots - ps)
    poison = cfg.kv_slots - 1
    for extra in (1, 7, 64):
        wider = np.full((cfg.pool_rows, cfg.max_context_len + extra), poison, np.int32)
        wider[:, : cfg.max_context_len] = r2t
        for _ in range(4):
            r = ref.random_round(cfg, rng)
            bucket = run_round(bufs, r, wider)
            pool, seq, _ = ref.staged(cfg, bucket, r)
            lpl, pseq, table, cu = ref.prefix(cfg, bucket, pool, seq, r2t.tolist())
            assert bufs.prefix_page_table[:bucket].tolist() == table, extra
            assert bufs.last_page_len[:bucket].tolist() == lpl
            assert bufs.prefix_seqlen[:bucket].tolist() == pseq
            assert poison // ps not in bufs.prefix_page_table[:bucket]
            specgraph.check_guards(bufs)


def test_guard_violation_names_buffer_step_bucket_and_row():
    cfg, plan, arena, bufs = make(CONFIGS[1])
    rng = random.Random(5)
    r2t = np.array(ref.random_req_to_token(cfg, rng), dtype=np.int32)
    r = ref.random_round(cfg, rng, bs=3)
    r.seq, r.pool = [20, 30, 40], [1, 2, 3]
    run_round(bufs, r, r2t)
    table_before = bufs.prefix_page_table[1].copy()
    r2t[r.pool[1], 8] = cfg.kv_slots + 5  # page 2 of request 1: a slot out of range
    bucket = run_round(bufs, r, r2t)
    flag = np.full(1, -1, np.int32)
    assert specgraph.count_violations_(bufs, flag)[0] == 1  # the non-syncing check
    words = specgraph.read_guards(bufs)
    bad = [w for w in words if w.violations]
    assert len(bad) == 1 and bad[0].buffer == "prefix.page_table" and bad[0].kind == "bad input"
    assert bad[0].row == 1 and bad[0].column == 8 and bad[0].value == cfg.kv_slots + 5
    # the request is written as a padded one (pool row 0, one token): nothing of the earlier
    # round survives in its row
    assert (table_before[:2] != 0).any() and (bufs.prefix_page_table[1] == 0).all()
    assert bufs.last_page_len[1] == 1 % cfg.page_size and bufs.prefix_seqlen[1] == 0
    with pytest.raises(specgraph.GuardViolation) as e:
        specgraph.check_guards(bufs)
    g = e.value
    assert (g.buffer, g.step, g.bucket, g.row, g.column) == (
        "prefix.page_table", None, bucket, 1, 8)
    assert g.kind == "bad input" and g.kernel == "prefix_metadata" and g.violations == 1
    assert str(e.value).startswith(f"prefix.page_table (all steps, bucket {bucket}, row 1): ")
    assert bad[0].describe() in str(e.value)


def test_checked_mode_reports_a_layout_violation_per_step():
    fields = dict(CONFIGS[1], checked=True)
    cfg, plan, arena, bufs = make(fields)
    ps, topk, n = cfg.page_size, cfg.topk, cfg.num_steps
    # request 0: seq_len 6 -> last_page_len 2; each branch on a fresh page, then the next page.
    slots = []
    for t in range(topk):
        first, second = 10 + 2 * t, 11 + 2 * t
        slots += [(first if 2 + j < ps else second) * ps + (2 + j) % ps for j in range(n)]
    r2t = np.zeros((cfg.pool_rows, cfg.max_context_len), np.int32)
    specgraph.stage_(bufs, 1, np.array([1]), np.array([6]), np.array(slots))
    specgraph.round_setup_(bufs, 1, r2t)
    for s in range(n):
        specgraph.step_metadata_(bufs, 1, s)
    specgraph.check_guards(bufs)  # the engine layout: clean
    slots[3] += 1  # branch 0, step 3's slot at the wrong in-page offset
    specgraph.stage_(bufs, 1, np.array([1]), np.array([6]), np.array(slots))
    specgraph.round_setup_(bufs, 1, r2t)
    for s in range(n):
        specgraph.step_metadata_(bufs, 1, s)
    with pytest.raises(specgraph.GuardViolation) as e:
        specgraph.check_guards(bufs)
    assert (e.value.buffer, e.value.step, e.value.row, e.value.kind) == (
        "expand.page_table", 3, 0, "layout")
