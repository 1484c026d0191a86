"""Inputs read in place (specgraph.bind_inputs): the engine's own static tensors (int32 or int64,
strided, out_cache_loc at any strides and wider than num_steps, the engine's own padding rows,
real_batch bound or not) read by the ops where they are, compared with the same rounds staged
into a second arena and with the independent reference (reference.py), from a poisoned arena;
bad values refused by name in the guard words; refusals of bind_inputs naming the tensor, its
dtype, shape and strides."""

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
         kv_slots=1 << 16, formats="both"),
    dict(max_batch=12, topk=4, num_steps=4, page_size=16, max_context_len=200, pool_rows=13,
         kv_slots=1 << 20, buckets=(2, 5, 12)),
]
POISON = 0xA5


def make(fields):
    cfg = specgraph.DraftConfig(**fields)
    plan = specgraph.make_plan(cfg)
    arena = specgraph.host_arena(plan)
    return cfg, plan, arena, specgraph.buffers(plan, arena)


class EngineInputs:
    """An engine's static inputs in a random layout: [max_bs] index arrays of either dtype at an
    element stride of 1..3, out_cache_loc [max_bs][topk][S] (S >= num_steps), branch- or
    slot-major in memory, and its real_batch word. Cells between strided elements: poison."""

    def __init__(self, cfg, max_bs: int, rng: random.Random, real_batch: bool):
        self.cfg, self.max_bs = cfg, max_bs
        dt = lambda: rng.choice([np.int32, np.int64])  # noqa: E731
        k1, k2 = rng.randint(1, 3), rng.randint(1, 3)
        self.pool = np.full(max_bs * k1, -777, dtype=dt())[::k1]
        self.seq = np.full(max_bs * k2, -777, dtype=dt())[::k2]
        self.s = cfg.num_steps + rng.randint(0, 2)
        slots_dt = rng.choice([np.int64, np.int64, np.int32])
        if rng.random() < 0.4:  # slot-major memory, a [max_bs][topk][S] view of it
            self.slots = np.full((max_bs, self.s, cfg.topk), -777, slots_dt).transpose(0, 2, 1)
        else:
            self.slots = np.full((max_bs, cfg.topk, self.s), -777, slots_dt)
        self.real_batch = np.zeros(1, np.int32) if real_batch else None

    def bind(self, bufs):
        return specgraph.bind_inputs(bufs, req_pool_indices=self.pool, seq_lens=self.seq,
                                     out_cache_loc=self.slots, real_batch=self.real_batch)

    def write(self, r: ref.Round):
        """The round in place (the engine's own padding rows past r.bs), as an engine would."""
        n = self.cfg.num_steps
        self.pool[:] = 0
        self.seq[:] = 1
        self.slots[...] = 0
        self.pool[: r.bs] = r.pool
        self.seq[: r.bs] = r.seq
        self.slots[: r.bs, :, :n] = np.array(r.slots).reshape(r.bs, self.cfg.topk, n)
        self.slots[:, :, n:] = -5  # never read
        if self.real_batch is not None:
            self.real_batch[0] = r.bs


def staged_round(bufs, r, r2t, bucket):
    specgraph.stage_(bufs, r.bs, np.array(r.pool, np.int64), np.array(r.seq, np.int64),
                     np.array(r.slots, np.int64), bucket=bucket)
    specgraph.round_setup_(bufs, bucket, r2t)
    for s in range(bufs.plan.config.num_steps):
        specgraph.step_metadata_(bufs, bucket, s)
        if bufs.plan.config.has_csr:
            specgraph.csr_step_indices_(bufs, bucket, s, r2t)


def in_place_round(bufs, inputs, r2t, bucket):
    specgraph.round_setup_(bufs, bucket, r2t, inputs=inputs)
    for s in range(bufs.plan.config.num_steps):
        specgraph.step_metadata_(bufs, bucket, s, inputs=inputs)
        if bufs.plan.config.has_csr:
            specgraph.csr_step_indices_(bufs, bucket, s, r2t, inputs=inputs)


@pytest.mark.parametrize("fields", CONFIGS)
def test_in_place_rounds_match_staged_rounds_and_the_reference(fields):
    cfg, plan, a_staged, staged = make(fields)
    a_place = specgraph.host_arena(plan)
    place = specgraph.buffers(plan, a_place)
    rng = random.Random(20261201)
    r2t_list = ref.random_req_to_token(cfg, rng)
    r2t = np.array(r2t_list, dtype=np.int32)
    for trial in range(12):
        eng = EngineInputs(cfg, plan.max_bucket, rng, real_batch=trial % 2 == 0)
        inputs = eng.bind(place)
        r = ref.random_round(cfg, rng, bs=rng.randint(1, cfg.max_batch))
        if cfg.has_csr:  # room in req_to_token's rows for every branch region (docs/csr.md)
            r.seq = [1 + n % (cfg.max_context_len // 2) for n in r.seq]
        bucket = rng.choice([b for b in plan.buckets if b >= r.bs])  # padded buckets too
        eng.write(r)
        a_staged[:] = POISON
        a_place[:] = POISON
        staged_round(staged, r, r2t, bucket)
        in_place_round(place, inputs, r2t, bucket)
        pool, seq, slots = ref.staged(cfg, bucket, r)
        lpl, pseq, table, cu = ref.prefix(cfg, bucket, pool, seq, r2t_list)
        for bufs in (staged, place):
            assert bufs.last_page_len[:bucket].tolist() == lpl
            assert bufs.prefix_seqlen[:bucket].tolist() == pseq
            assert bufs.prefix_page_table[:bucket].tolist() == table
            assert bufs.cu_seqlens_q[: bucket + 1].tolist() == cu
            assert (bufs.prefix_page_table[bucket:].view(np.uint8) == POISON).all()
            rows = bucket * cfg.topk
            for s in range(cfg.num_steps):
                t, sl = ref.expand(cfg, bucket, s, lpl, slots)
                assert bufs.expand_page_table(s)[:rows, : s + 2].tolist() == t, (trial, s)
                assert bufs.expand_cache_seqlen(s)[:rows].tolist() == sl
                assert (bufs.expand_page_table(s)[rows:].view(np.uint8) == POISON).all()
            assert [g for g in specgraph.read_guards(bufs) if g.violations] == []
        # The staged inputs of the in-place arena were never written: still poison.
        assert (place.req_pool_index.view(np.uint8) == POISON).all()
        assert (place.out_cache_loc.view(np.uint8) == POISON).all()
        if cfg.has_csr:
            for s in range(cfg.num_steps):
                a, b = staged.csr_kv_indptr(s), place.csr_kv_indptr(s)
                n = bucket * cfg.topk + 1
                assert a[:n].tolist() == b[:n].tolist()
                used = int(a[n - 1])
                assert staged.csr_kv_indices(s)[:used].tolist() == \
                    place.csr_kv_indices(s)[:used].tolist()


def test_bad_values_are_refused_by_name_in_the_guard_words():
    cfg, plan, arena, bufs = make(CONFIGS[1])
    rng = random.Random(5)
    r2t = np.array(ref.random_req_to_token(cfg, rng), dtype=np.int32)
    pool = np.zeros(plan.max_bucket, np.int64)
    seq = np.ones(plan.max_bucket, np.int64)
    slots = np.zeros((plan.max_bucket, cfg.topk, cfg.num_steps), np.int64)
    inputs = specgraph.bind_inputs(bufs, req_pool_indices=pool, seq_lens=seq, out_cache_loc=slots)
    r = ref.random_round(cfg, rng, bs=4)
    pool[:4], seq[:4] = r.pool, r.seq
    slots[:4] = np.array(r.slots).reshape(4, cfg.topk, cfg.num_steps)
    pool[1] = (1 << 32) + 3  # row 0 if it were narrowed to int32
    seq[2] = 1 << 40
    slots[3, 1, 0] = cfg.kv_slots
    arena[:] = POISON
    in_place_round(bufs, inputs, r2t, 4)
    words = specgraph.read_guards(bufs)
    prefix = words[1]
    assert (prefix.buffer, prefix.kind, prefix.kernel) == (
        "prefix.page_table", "bad input", "prefix_metadata")
    assert (prefix.violations, prefix.row, prefix.capacity, prefix.value) == (
        2, 1, cfg.pool_rows, (1 << 32) + 3)
    expand0 = words[2]
    assert (expand0.kernel, expand0.row, expand0.column, expand0.value) == (
        "expand_page_table", 3 * cfg.topk + 1, 0, cfg.kv_slots)
    # refused requests are written as padding rows: pool row 0, one token
    assert bufs.last_page_len[1] == 1 % cfg.page_size and bufs.prefix_seqlen[2] == 0
    assert (bufs.prefix_page_table[4:].view(np.uint8) == POISON).all()
    with pytest.raises(specgraph.GuardViolation) as e:
        specgraph.check_guards(bufs, 4)
    assert e.value.buffer == "prefix.page_table" and e.value.value == (1 << 32) + 3


def test_bind_inputs_refusals_name_the_tensor_its_layout_and_the_need():
    cfg, plan, arena, bufs = make(CONFIGS[1])  # max bucket 5, topk 2, num_steps 5
    pool = np.zeros(5, np.int64)
    seq = np.ones(5, np.int32)
    slots = np.zeros((5, 2, 5), np.int64)

    def refused(field, *parts, **kw):
        args = dict(req_pool_indices=pool, seq_lens=seq, out_cache_loc=slots)
        args.update(kw)
        with pytest.raises(specgraph.InvalidArgument) as e:
            specgraph.bind_inputs(bufs, **args)
        assert e.value.field == field, str(e.value)
        for p in parts:
            assert p in str(e.value), str(e.value)

    refused("req_pool_indices", "float32", "[5]", "stride (1,)", "int32 or int64 [>= 5]",
            req_pool_indices=np.zeros(5, np.float32))
    refused("seq_lens", "[4]", ">= 5", seq_lens=np.ones(4, np.int32))
    refused("seq_lens", "[5, 1]", seq_lens=np.ones((5, 1), np.int32))
    refused("out_cache_loc", "[5, 10]", "view", out_cache_loc=np.zeros((5, 10), np.int64))
    refused("out_cache_loc", "[5, 2, 4]", ">= num_steps 5",
            out_cache_loc=np.zeros((5, 2, 4), np.int64))
    refused("out_cache_loc", "[5, 3, 5]", "topk 2", out_cache_loc=np.zeros((5, 3, 5), np.int64))
    refused("real_batch", "int64", "int32 [1]", real_batch=np.zeros(1, np.int64))
    with pytest.raises(TypeError, match="inputs"):
        specgraph.round_setup_(bufs, 1, np.zeros((7, 64), np.int32), inputs=(pool, seq, slots))
    # strided and transposed views are accepted as they are
    specgraph.bind_inputs(bufs, req_pool_indices=np.zeros(15, np.int32)[::3],
                          seq_lens=seq, out_cache_loc=np.zeros((5, 7, 2), np.int32)
                          .transpose(0, 2, 1))


def test_device_steps_in_place_need_only_begin_round():
    fields = dict(CONFIGS[1], device_steps=True, formats="fa3")
    cfg, plan, a_staged, staged = make(fields)
    a_place = specgraph.host_arena(plan)
    place = specgraph.buffers(plan, a_place)
    rng = random.Random(11)
    r2t = np.array(ref.random_req_to_token(cfg, rng), dtype=np.int32)
    eng = EngineInputs(cfg, plan.max_bucket, rng, real_batch=True)
    inputs = eng.bind(place)
    for _ in range(3):
        r = ref.random_round(cfg, rng)
        bucket = plan.bucket_for(r.bs)
        eng.write(r)
        specgraph.stage_(staged, r.bs, np.array(r.pool), np.array(r.seq),
                         np.array(r.slots, np.int64))
        place.device_step[0] = 7  # a spent counter from the last round
        specgraph.begin_round_(place)
        assert int(place.device_step[0]) == 0
        for s in range(cfg.num_steps):
            for bufs, ins in ((staged, None), (place, inputs)):
                specgraph.round_setup_(bufs, bucket, r2t, inputs=ins)
                specgraph.step_metadata_device_(bufs, bucket, inputs=ins)
                specgraph.advance_step_(bufs)
            rows = bucket * cfg.topk
            assert place.expand_page_table(0)[:rows, : s + 2].tolist() == \
                staged.expand_page_table(0)[:rows, : s + 2].tolist()
        assert place.prefix_page_table[:bucket].tolist() == \
            staged.prefix_page_table[:bucket].tolist()
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.begin_round_(place, max_depth=cfg.num_steps + 1)
    assert e.value.field == "max_depth"


def test_draft_graphs_read_bound_inputs_in_eager_mode(torch_mod):
    torch = torch_mod
    fields = dict(CONFIGS[1], formats="fa3")
    cfg, plan, _, _ = make(fields)
    rng = random.Random(3)
    r2t = torch.tensor(ref.random_req_to_token(cfg, rng), dtype=torch.int32)
    seen = {}

    def forward(view):  # what each step's forward reads, copied out
        seen[view.step] = view.expand_page_table.clone()

    bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework="torch"))
    pool = torch.zeros(plan.max_bucket * 2, dtype=torch.int64)[::2]
    seq = torch.ones(plan.max_bucket, dtype=torch.int32)
    slots = torch.zeros(plan.max_bucket, cfg.topk, cfg.num_steps + 1, dtype=torch.int64)
    inputs = specgraph.bind_inputs(bufs, req_pool_indices=pool, seq_lens=seq,
                                   out_cache_loc=slots)
    from specgraph.torch import DraftGraphs

    graphs = DraftGraphs(bufs, forward, req_to_token=r2t, inputs=inputs, warmups=0)
    graphs.capture()
    with pytest.raises(specgraph.InvalidArgument, match="begin_round_"):
        graphs.stage_(1, pool, seq, slots)
    r = ref.random_round(cfg, rng, bs=3)
    pool[:3] = torch.tensor(r.pool)
    seq[:3] = torch.tensor(r.seq, dtype=torch.int32)
    slots[:3, :, : cfg.num_steps] = torch.tensor(r.slots).reshape(3, cfg.topk, cfg.num_steps)
    assert graphs.begin_round_(3) == 3
    graphs.run_round()
    p_, s_, sl = ref.staged(cfg, 3, r)
    lpl, _, _, _ = ref.prefix(cfg, 3, p_, s_, r2t.tolist())
    for s in range(cfg.num_steps):
        t, _ = ref.expand(cfg, 3, s, lpl, sl)
        assert seen[s][: 3 * cfg.topk, : s + 2].tolist() == t


@pytest.mark.parametrize("device_steps", [False, True])
def test_csr_into_the_engines_outputs_reads_the_inputs_in_place(device_steps):
    """csr_round_indices_ / csr_indices_device_ into bound outputs, in place against staged: the
    same cells written, the rest left as it was (poison)."""
    fields = dict(CONFIGS[1], formats="csr", device_steps=device_steps)
    cfg, plan, _, staged = make(fields)
    place = specgraph.buffers(plan, specgraph.host_arena(plan))
    rng = random.Random(17)
    r2t = np.array(ref.random_req_to_token(cfg, rng), dtype=np.int32)
    eng = EngineInputs(cfg, plan.max_bucket, rng, real_batch=False)
    inputs = eng.bind(place)
    rows = plan.max_bucket * cfg.topk
    width = plan.layout["csr_capacity"][-1]
    outs = []
    for bufs in (staged, place):
        ip = np.full((cfg.num_steps, rows + 1), -3, np.int32)
        ix = np.full((cfg.num_steps, width), -3, np.int64)
        outs.append((ip, ix, specgraph.bind_csr_outputs(bufs, ip, ix)))
    for _ in range(3):
        r = ref.random_round(cfg, rng)
        r.seq = [1 + n % (cfg.max_context_len // 2) for n in r.seq]
        bucket = plan.bucket_for(r.bs)
        eng.write(r)
        specgraph.stage_(staged, r.bs, np.array(r.pool), np.array(r.seq),
                         np.array(r.slots, np.int64))
        if device_steps:
            specgraph.begin_round_(place)
        for (ip, ix, out), (bufs, ins) in zip(outs, ((staged, None), (place, inputs))):
            ip[...], ix[...] = -3, -3
            specgraph.round_setup_(bufs, bucket, r2t, inputs=ins)
            if device_steps:
                for _ in range(cfg.num_steps):
                    specgraph.csr_indices_device_(bufs, bucket, r2t, out=out, inputs=ins)
                    specgraph.advance_step_(bufs)
            else:
                specgraph.csr_round_indices_(bufs, bucket, r2t, out=out, inputs=ins)
            assert [g for g in specgraph.read_guards(bufs) if g.violations] == []
        assert (outs[0][0] == outs[1][0]).all() and (outs[0][1] == outs[1][1]).all()
        assert int(outs[1][0][0, bucket * cfg.topk]) > 0
