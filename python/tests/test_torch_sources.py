"""Every op through torch.ops, bound inputs and engine outputs included (issue 29 item 1), on CPU
tensors: the ops reading an engine's inputs in place (specgraph.bind_inputs) and writing its CSR
outputs (bind_csr_outputs) pass opcheck, equal the staged round and the independent references
(reference.py, csr_reference.py), read the source bind_inputs checked (never checking it again
per call), and compile with torch.compile(backend="aot_eager", fullgraph=True) with every op in
the graph. The numbers of torch schemas and extension functions are docs/python.md's. Skipped
visibly without torch."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from conftest import need_torch

torch = need_torch()
np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import csr_reference as cref  # noqa: E402
import reference as ref  # noqa: E402

FIELDS = dict(max_batch=5, topk=2, num_steps=3, page_size=4, max_context_len=40, pool_rows=6,
              kv_slots=1 << 12, buckets=(2, 5), formats="both")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def make(**extra):
    plan = specgraph.make_plan(specgraph.DraftConfig(**{**FIELDS, **extra}))
    arena = specgraph.host_arena(plan, framework="torch")
    return plan, arena, specgraph.buffers(plan, arena)


class Engine:
    """An engine's static inputs (strided int64 pool, int32 seq_lens, out_cache_loc one slot
    wider than num_steps, a real_batch word) and its CSR outputs, holding one round."""

    def __init__(self, plan, rng: random.Random, bs: int):
        cfg = plan.config
        n, rows = plan.max_bucket, plan.max_rows
        self.pool = torch.zeros(2 * n, dtype=torch.int64)[::2]
        self.seq = torch.ones(n, dtype=torch.int32)
        self.slots = torch.zeros(n, cfg.topk, cfg.num_steps + 1, dtype=torch.int64)
        self.real_batch = torch.tensor([bs], dtype=torch.int32)
        self.r = ref.random_round(cfg, rng, bs=bs)
        self.r.seq = [1 + s % (cfg.max_context_len // 2) for s in self.r.seq]  # CSR room
        self.pool[:bs] = torch.tensor(self.r.pool)
        self.seq[:bs] = torch.tensor(self.r.seq, dtype=torch.int32)
        self.slots[:bs, :, : cfg.num_steps] = torch.tensor(self.r.slots).view(
            bs, cfg.topk, cfg.num_steps)
        self.r2t_list = ref.random_req_to_token(cfg, rng)
        self.r2t = torch.tensor(self.r2t_list, dtype=torch.int32)
        self.ip = torch.full((cfg.num_steps, rows + 1), -7, dtype=torch.int32)
        self.ix = torch.full((cfg.num_steps, plan.layout["csr_capacity"][-1]), -7,
                             dtype=torch.int64)

    def bind(self, bufs):
        inputs = specgraph.bind_inputs(bufs, req_pool_indices=self.pool, seq_lens=self.seq,
                                       out_cache_loc=self.slots, real_batch=self.real_batch)
        return inputs, specgraph.bind_csr_outputs(bufs, self.ip, self.ix)


def engine_round(bufs, bucket, inputs, out, r2t):
    """A round with bound inputs into the engine's CSR outputs (the DraftGraphs body's ops)."""
    specgraph.begin_round_(bufs)
    specgraph.round_setup_(bufs, bucket, r2t, inputs=inputs)
    for s in range(bufs.plan.config.num_steps):
        specgraph.step_metadata_(bufs, bucket, s, inputs=inputs)
        specgraph.csr_step_indices_(bufs, bucket, s, r2t, out=out, inputs=inputs)


def check_against_references(bufs, eng, bucket):
    """The bound round's FA3 tables (reference.py) and CSR outputs (csr_reference.py)."""
    cfg = bufs.plan.config
    pool, seq, slots = ref.staged(cfg, bucket, eng.r)
    lpl, pseq, table, cu = ref.prefix(cfg, bucket, pool, seq, eng.r2t_list)
    assert bufs.prefix_page_table[:bucket].tolist() == table
    assert bufs.cu_seqlens_q[: bucket + 1].tolist() == cu
    rows = bucket * cfg.topk
    for s in range(cfg.num_steps):
        t, sl = ref.expand(cfg, bucket, s, lpl, slots)
        assert bufs.expand_page_table(s)[:rows, : s + 2].tolist() == t, s
        assert bufs.expand_cache_seqlen(s)[:rows].tolist() == sl
    bs = eng.r.bs
    case = cref.Case(eng.r.seq + [1] * (bucket - bs), eng.r.pool + [0] * (bucket - bs),
                     np.array(eng.r2t_list, np.int64), cfg.topk, cfg.num_steps, cfg.page_size,
                     slot_limit=cfg.kv_slots, max_seq_len=cfg.max_context_len)
    for s in range(cfg.num_steps):
        ip, ix = cref.steps(case, [s], s + 1)[s]
        assert eng.ip[s, : rows + 1].tolist() == ip and eng.ix[s, : len(ix)].tolist() == ix, s
    assert [g for g in specgraph.read_guards(bufs) if g.violations] == []


def test_bound_ops_go_through_torch_ops_and_equal_the_references():
    plan, arena, bufs = make()
    eng = Engine(plan, random.Random(29), bs=3)
    inputs, out = eng.bind(bufs)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        engine_round(bufs, 5, inputs, out, eng.r2t)
    names = {e.name for e in prof.events()}
    # begin_round_ is stage_ without inputs
    assert {"specgraph::stage_", "specgraph::round_setup_", "specgraph::step_metadata_",
            "specgraph::csr_indices_"} <= names, names
    check_against_references(bufs, eng, 5)
    # The staged inputs of the arena were never read or written: still zero.
    assert not bufs.req_pool_index.any() and not bufs.out_cache_loc.any()


def test_bound_inputs_are_checked_once_not_per_op_call(monkeypatch):
    plan, arena, bufs = make()
    eng = Engine(plan, random.Random(30), bs=2)
    inputs, out = eng.bind(bufs)
    calls = []
    real = specgraph._ffi.bind_inputs
    monkeypatch.setattr(specgraph._ffi, "bind_inputs", lambda *a: calls.append(a) or real(*a))
    engine_round(bufs, 2, inputs, out, eng.r2t)
    assert calls == []  # every op read the source bind_inputs checked
    # The same tensors without the source's handle (as a hand-written call might pass them):
    # the op checks them itself, each call.
    torch.ops.specgraph.round_setup_(arena, bufs.handle, 2, eng.r2t, *inputs._args(), 0)
    assert len(calls) == 1
    with pytest.raises(specgraph.InvalidArgument) as e:  # bound inputs are all three or none
        torch.ops.specgraph.step_metadata_(arena, bufs.handle, 2, 0, eng.pool, None, eng.slots)
    assert e.value.field == "seq_lens"
    with pytest.raises(specgraph.InvalidArgument) as e:  # the engine's outputs: both or neither
        torch.ops.specgraph.csr_indices_(arena, bufs.handle, 2, None, True, eng.r2t, eng.ip, None)
    assert e.value.field == "kv_indices"
    before = arena.clone()
    with pytest.raises(specgraph.InvalidArgument) as e:  # a step with the whole round
        torch.ops.specgraph.csr_indices_(arena, bufs.handle, 2, 1, True, eng.r2t)
    assert e.value.field == "step" and "whole_round" in str(e.value)
    with pytest.raises(specgraph.InvalidArgument) as e:  # stage_: the three inputs or none
        torch.ops.specgraph.stage_(arena, bufs.handle, 1, eng.pool, None, eng.slots, 0, 0.0)
    assert e.value.field == "seq_lens" and "none of them" in str(e.value)
    assert torch.equal(arena, before)  # nothing written


@pytest.mark.parametrize("device_steps", [False, True])
def test_bound_ops_pass_opcheck(device_steps):
    plan, arena, bufs = make(device_steps=device_steps)
    eng = Engine(plan, random.Random(31), bs=4)
    inputs, out = eng.bind(bufs)
    h, ops, src = bufs.handle, torch.ops.specgraph, inputs._tensors
    # In the round's order (docs/metadata.md section 11): begun and set up first.
    specgraph.begin_round_(bufs)
    specgraph.round_setup_(bufs, 5, eng.r2t, inputs=inputs)
    step = None if device_steps else 1  # None: the device counter's step
    calls = [(ops.stage_.default, (arena, h, 0, None, None, None, 2, 0.5)),  # begin_round_
             (ops.round_setup_.default, (arena, h, 5, eng.r2t, *src)),
             (ops.round_setup_.default, (arena, h, 5, eng.r2t, *src[:4], 0)),  # no handle
             (ops.step_metadata_.default, (arena, h, 5, step, *src)),
             (ops.csr_indices_.default,
              (arena, h, 5, step, False, eng.r2t, eng.ip, eng.ix, *src)),
             (ops.csr_indices_.default, (arena, h, 5, step, False, eng.r2t, None, None, *src))]
    if not device_steps:  # the whole round
        calls.append((ops.csr_indices_.default,
                      (arena, h, 5, None, True, eng.r2t, eng.ip, eng.ix, *src)))
    for op, args in calls:
        torch.library.opcheck(op, args)
    schema = str(ops.round_setup_.default._schema)
    assert "Tensor? req_pool_indices=None" in schema and "Tensor? real_batch=None" in schema
    schema = str(ops.csr_indices_.default._schema)
    assert "Tensor(b!)? kv_indptr=None" in schema and "Tensor(c!)? kv_indices=None" in schema


def test_torch_compile_fullgraph_round_with_bound_inputs():
    plan, arena, bufs = make()
    _, twin_arena, twin = make()
    eng = Engine(plan, random.Random(32), bs=4)
    inputs, out = eng.bind(bufs)
    seen = []

    def backend(gm, example_inputs):  # aot_eager, recording what dynamo handed it
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

    def round_fn(r2t):
        engine_round(bufs, 5, inputs, out, r2t)
        return eng.ix[2, :8] + 1

    got = torch.compile(round_fn, backend=backend, fullgraph=True)(eng.r2t)
    assert {"specgraph.stage_.default", "specgraph.round_setup_.default",
            "specgraph.step_metadata_.default", "specgraph.csr_indices_.default"} <= {
        s.replace("specgraph::", "specgraph.") for s in seen}, seen
    check_against_references(bufs, eng, 5)
    assert torch.equal(got, eng.ix[2, :8] + 1)
    compiled = (arena.clone(), eng.ip.clone(), eng.ix.clone())
    # The same round eagerly over a twin arena (the engine's tensors bound to it): equal bytes.
    eng.ip.fill_(-7)
    eng.ix.fill_(-7)
    twin_inputs, twin_out = eng.bind(twin)
    engine_round(twin, 5, twin_inputs, twin_out, eng.r2t)
    assert torch.equal(twin_arena, compiled[0])
    assert torch.equal(eng.ip, compiled[1]) and torch.equal(eng.ix, compiled[2])


def test_schema_and_function_counts_are_the_documented_ones():
    """docs/python.md states how many torch schemas and extension functions there are, and its
    op table names each op's torch op: the code has exactly those."""
    import tvm_ffi

    text = DOCS.read_text()
    schemas = int(re.search(r"\*\*(\d+)\*\*\s+torch\s+schemas", text).group(1))
    functions = int(re.search(r"\*\*(\d+)\*\*\s+extension\s+functions", text).group(1))
    packets = {n for n in dir(torch.ops.specgraph) if not n.startswith("_") and isinstance(
        getattr(torch.ops.specgraph, n), torch._ops.OpOverloadPacket)}
    registered = [n for n in tvm_ffi.registry.list_global_func_names()
                  if n.startswith("specgraph.")]
    assert len(packets) == schemas, sorted(packets)
    assert len(registered) == functions, sorted(registered)
    table = text[text.index("| Python op | torch op |"):]
    table = table[: table.index("\n\n")]
    named = set(re.findall(r"`torch\.ops\.specgraph\.(\w+)`", table))
    assert named == packets, (named ^ packets)
