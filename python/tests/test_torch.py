"""The torch path on CPU tensors: custom-op registration (opcheck), torch.compile, the profiler,
errors through the dispatcher, DraftGraphs in eager mode, logging and the environment knobs.
Skipped visibly where torch is absent (a failure with REQUIRE_GPU=1)."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys

import pytest

from conftest import ROOT, need_torch

torch = need_torch()
np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import specgraph.torch as sgt  # noqa: E402
import reference as ref  # noqa: E402

FIELDS = dict(max_batch=5, topk=2, num_steps=4, page_size=4, max_context_len=64, pool_rows=7,
              kv_slots=1 << 16, buckets=(2, 5))


def make(**extra):
    plan = specgraph.make_plan(specgraph.DraftConfig(**{**FIELDS, **extra}))
    arena = specgraph.host_arena(plan, framework="torch")
    return plan, arena, specgraph.buffers(plan, arena)


def tensors(r: ref.Round, dtype=torch.int64):
    return (torch.tensor(r.pool, dtype=dtype), torch.tensor(r.seq, dtype=dtype),
            torch.tensor(r.slots, dtype=torch.int64))


def test_torch_path_equals_the_numpy_path():
    plan, arena, bufs = make()
    nbufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    rng = random.Random(1)
    cfg = plan.config
    r2t = ref.random_req_to_token(cfg, rng)
    t_r2t, n_r2t = torch.tensor(r2t, dtype=torch.int32), np.array(r2t, dtype=np.int32)
    for i in range(8):
        r = ref.random_round(cfg, rng)
        dt = torch.int32 if i % 2 else torch.int64
        b = specgraph.stage_(bufs, r.bs, *tensors(r, dt))
        assert b == specgraph.stage_(nbufs, r.bs, np.array(r.pool), np.array(r.seq),
                                     np.array(r.slots))
        specgraph.round_setup_(bufs, b, t_r2t)
        specgraph.round_setup_(nbufs, b, n_r2t)
        for s in range(cfg.num_steps):
            specgraph.step_metadata_(bufs, b, s)
            specgraph.step_metadata_(nbufs, b, s)
        assert arena.numpy().tobytes() == nbufs.arena.tobytes()


def test_views_are_torch_tensors_over_the_arena():
    plan, arena, bufs = make()
    for s in range(plan.config.num_steps):
        v = bufs.expand_page_table(s)
        spec = plan.find("expand.page_table", s)
        assert isinstance(v, torch.Tensor) and v.dtype == torch.int32
        assert v.data_ptr() == arena.data_ptr() + spec.offset and tuple(v.shape) == spec.shape
        assert v.untyped_storage().data_ptr() == arena.untyped_storage().data_ptr()
    assert bufs.out_cache_loc.dtype == torch.int64
    bufs.seq_len[2] = 41
    assert arena[plan.layout["seq_len"] + 8: plan.layout["seq_len"] + 12].view(torch.int32) == 41


def op_args(plan, arena, bufs):
    cfg = plan.config
    rng = random.Random(2)
    r = ref.random_round(cfg, rng, bs=3)
    r2t = torch.tensor(ref.random_req_to_token(cfg, rng), dtype=torch.int32)
    h = bufs.handle
    return r, r2t, [
        (torch.ops.specgraph.stage_.default, (arena, h, 3, *tensors(r), 0, float("-inf"))),
        (torch.ops.specgraph.stage_.default, (arena, h, 3, *tensors(r, torch.int32), 2, 0.5)),
        (torch.ops.specgraph.round_setup_.default, (arena, h, 5, r2t)),
        (torch.ops.specgraph.step_metadata_.default, (arena, h, 5, 2)),
        (torch.ops.specgraph.count_violations_.default,
         (arena, h, torch.zeros(1, dtype=torch.int32))),
        (torch.ops.specgraph.check_guards.default, (arena, h, 5)),
        (torch.ops.specgraph.initialize_.default, (arena, h)),
    ]


def test_custom_ops_pass_opcheck():
    plan, arena, bufs = make()
    r, r2t, calls = op_args(plan, arena, bufs)
    # opcheck runs each op on copies of the arena: stage and set it up first, so every op runs in
    # the round's order (docs/metadata.md section 11).
    specgraph.stage_(bufs, 3, *tensors(r), bucket=5)
    specgraph.round_setup_(bufs, 5, r2t)
    for op, args in calls:
        torch.library.opcheck(op, args)
    assert "Tensor(a!) arena" in str(torch.ops.specgraph.stage_.default._schema)
    assert "Tensor(a!) out" in str(torch.ops.specgraph.count_violations_.default._schema)


def test_sparse_op_passes_opcheck():
    sp = specgraph.SparseConfig(heads=2, vertical_size=(4, 2), slash_size=(3, 4), max_keys=128)
    plan, arena, bufs = make(sparse=sp)
    st = specgraph.sparse_stages(128, 48)[4]
    torch.library.opcheck(torch.ops.specgraph.sparse_stage_.default,
                          (arena, bufs.handle, specgraph.ops.stage_kind(st.kind), st.prev, st.end,
                           st.chunk_len, st.chunk_q_len))


def test_errors_keep_their_class_through_the_dispatcher():
    plan, arena, bufs = make()
    r = ref.random_round(plan.config, random.Random(3), bs=2)
    pool, seq, slots = tensors(r)
    seq[1] = 0
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.stage_(bufs, 2, pool, seq, slots)
    assert e.value.field == "seq_lens[1]"
    with pytest.raises(specgraph.InvalidArgument) as e:
        torch.ops.specgraph.step_metadata_(arena, bufs.handle, 3, 0)
    assert e.value.field == "bucket"
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.stage_(bufs, 2, pool.float(), seq, slots)
    assert e.value.field == "req_pool_indices"


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_sees_the_ops(backend):
    if backend == "inductor" and os.environ.get("SPECGRAPH_SKIP_INDUCTOR") == "1":
        pytest.skip("SPECGRAPH_SKIP_INDUCTOR=1")
    plan, arena, bufs = make()
    cfg = plan.config
    rng = random.Random(4)
    r2t = torch.tensor(ref.random_req_to_token(cfg, rng), dtype=torch.int32)
    r = ref.random_round(cfg, rng, bs=5)
    pool, seq, slots = tensors(r)

    def round_fn(arena, pool, seq, slots, r2t):
        bucket = specgraph.stage_(bufs, 5, pool, seq, slots)  # the package's own functions
        specgraph.round_setup_(bufs, bucket, r2t)
        torch.ops.specgraph.step_metadata_(arena, bufs.handle, bucket, 1)  # or the op itself
        off = plan.layout["expand_cache_seqlen"][1]
        return arena[off: off + 40].view(torch.int32) + 1

    eager = round_fn(arena, pool, seq, slots, r2t).clone()
    want = arena.clone()
    specgraph.initialize_(bufs)
    compiled = torch.compile(round_fn, backend=backend, fullgraph=True)
    got = compiled(arena, pool, seq, slots, r2t)
    assert torch.equal(got, eager)
    assert torch.equal(arena, want)  # the mutation reached the caller's arena


def test_check_guards_under_torch_compile_runs_eagerly():
    # It synchronises and returns nothing: a compiled graph would drop it, so it breaks the graph
    # and runs after the compiled work before it.
    plan, arena, bufs = make()
    r2t = torch.zeros(plan.config.pool_rows, plan.config.max_context_len, dtype=torch.int32)
    r2t[1, 4] = plan.config.kv_slots  # request 0's second page: out of range

    def round_fn(arena, pool, seq, slots, r2t):
        b = specgraph.stage_(bufs, 2, pool, seq, slots)
        specgraph.round_setup_(bufs, b, r2t)
        specgraph.check_guards(bufs, b)
        return arena[:8] + 0

    compiled = torch.compile(round_fn, backend="aot_eager")
    with pytest.raises(specgraph.GuardViolation) as e:
        compiled(arena, torch.tensor([1, 2]), torch.tensor([30, 30]), torch.arange(16), r2t)
    assert (e.value.buffer, e.value.row) == ("prefix.page_table", 0)


def test_ops_show_up_in_the_profiler_by_name():
    plan, arena, bufs = make()
    r = ref.random_round(plan.config, random.Random(5), bs=2)
    r2t = torch.zeros(plan.config.pool_rows, plan.config.max_context_len, dtype=torch.int32)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        b = specgraph.stage_(bufs, 2, *tensors(r))
        specgraph.round_setup_(bufs, b, r2t)
        specgraph.step_metadata_(bufs, b, 0)
    names = {e.name for e in prof.events()}
    assert {"specgraph::stage_", "specgraph::round_setup_", "specgraph::step_metadata_"} <= names


def forward_recorder(calls):
    def forward(v: specgraph.StepView) -> None:
        calls.append((v.bucket, v.step, v.expand_page_table.clone(), v.expand_cache_seqlen.clone()))
    return forward


def test_draft_graphs_eager_mode_on_cpu(caplog):
    plan, arena, bufs = make()
    cfg = plan.config
    rng = random.Random(6)
    r2t_list = ref.random_req_to_token(cfg, rng)
    r2t = torch.tensor(r2t_list, dtype=torch.int32)
    calls = []
    g = sgt.DraftGraphs(bufs, forward_recorder(calls), req_to_token=r2t, checked="off")
    assert not g.can_run(1)
    with caplog.at_level(logging.INFO, logger="specgraph"):
        report = g.capture()
    assert report.mode == "eager" and report.graphs == 0
    # Only the warm-ups ran (2 per graph, as on a GPU): every bucket, largest first, every step.
    steps = range(cfg.num_steps)
    assert [(c[0], c[1]) for c in calls] == [(b, s) for b in (5, 2) for s in steps for _ in "ab"]
    calls.clear()
    line = [rec.getMessage() for rec in caplog.records if rec.name == "specgraph"][-1]
    # Issue 18: "0 graphs in 0.000 s, pool 0.0 MiB" read as a failure; it says what happened.
    assert line == ("specgraph capture: none, eager mode on a CPU arena (run_round runs the ops "
                    "and the forward directly; CUDA graphs need a CUDA arena), arena "
                    f"{plan.total_bytes} bytes"), line
    assert g.can_run(1) and g.can_run(5) and not g.can_run(6) and g.can_run(0)  # 0: idle rank
    r = ref.random_round(cfg, rng, bs=3)
    assert g.stage_(3, *tensors(r)) == 5
    g.run_round(3)
    assert [(c[0], c[1]) for c in calls] == [(5, 0), (5, 1), (5, 2)]
    pool, seq, slots = ref.staged(cfg, 5, r)
    lpl, *_ = ref.prefix(cfg, 5, pool, seq, r2t_list)
    for bucket, step, table, seqlen in calls:
        want_t, want_s = ref.expand(cfg, 5, step, lpl, slots)
        assert table.tolist() == want_t and seqlen.tolist() == want_s
    with pytest.raises(specgraph.InvalidArgument) as e:
        g.replay(2)  # out of order: step 3 is next
    assert e.value.field == "step"
    with pytest.raises(specgraph.InvalidArgument):
        g.run_round(cfg.num_steps + 1)


def test_draft_graphs_checked_modes_raise_guard_violations():
    plan, arena, bufs = make()
    cfg = plan.config
    rng = random.Random(7)
    r2t = torch.tensor(ref.random_req_to_token(cfg, rng), dtype=torch.int32)
    r = ref.random_round(cfg, rng, bs=2)
    r.pool, r.seq = [1, 2], [30, 30]
    r2t[2, 4] = cfg.kv_slots  # request 1's second page: out of range
    for mode in ("sync", "async"):
        g = sgt.DraftGraphs(bufs, lambda v: None, req_to_token=r2t, checked=mode)
        g.capture()
        g.stage_(2, *tensors(r))
        if mode == "sync":
            with pytest.raises(specgraph.GuardViolation) as e:
                g.run_round()
            assert (e.value.buffer, e.value.bucket, e.value.row) == ("prefix.page_table", 2, 1)
        else:
            g.run_round()  # no synchronisation: the count lands later
            assert int(g.violations[0]) == 1
            g.stage_(2, *tensors(r))
            with pytest.raises(specgraph.GuardViolation) as e:
                g.run_round()
            assert e.value.violations == 1


def test_draft_graphs_round_graph_flag_and_bad_arguments():
    plan, arena, bufs = make(round_graphs=True)
    r2t = torch.zeros(plan.config.pool_rows, plan.config.max_context_len, dtype=torch.int32)
    g = sgt.DraftGraphs(bufs, lambda v: None, req_to_token=r2t, buckets=[2])
    assert g.round_graphs and g.buckets == (2,)
    g.capture()
    assert g.can_run(2) and not g.can_run(3)
    with pytest.raises(specgraph.InvalidArgument):
        sgt.DraftGraphs(bufs, lambda v: None, req_to_token=r2t, buckets=[3])
    with pytest.raises(specgraph.InvalidArgument):
        sgt.DraftGraphs(bufs, lambda v: None, req_to_token=r2t, checked="maybe")
    nbufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    with pytest.raises(specgraph.InvalidArgument):
        sgt.DraftGraphs(nbufs, lambda v: None, req_to_token=r2t)


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=e, timeout=120, cwd=str(ROOT))


def test_environment_knobs_are_read_at_import():
    bad = run_python("import specgraph", SPECGRAPH_CHECKED="sometimes")
    assert bad.returncode != 0 and "SPECGRAPH_CHECKED='sometimes'" in bad.stderr
    bad = run_python("import specgraph", SPECGRAPH_NVTX="yes")
    assert bad.returncode != 0 and "SPECGRAPH_NVTX" in bad.stderr
    code = ("import torch, specgraph, specgraph.torch as sgt\n"
            "from specgraph import _env\n"
            "p = specgraph.make_plan(specgraph.DraftConfig(4, 1, 2, 4, 16, 5, 1024))\n"
            "b = specgraph.buffers(p, specgraph.host_arena(p, framework='torch'))\n"
            "g = sgt.DraftGraphs(b, lambda v: None, req_to_token=torch.zeros(5, 16, "
            "dtype=torch.int32))\n"
            "print(_env.CHECKED, _env.NVTX, g.checked)\n"
            "g.capture()\n")
    ok = run_python(code, SPECGRAPH_CHECKED="ASYNC", SPECGRAPH_NVTX="0",
                    SPECGRAPH_LOG_LEVEL="info")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["async", "False", "async"]
    assert "specgraph INFO specgraph capture: none, eager mode on a CPU arena" in ok.stderr


def test_ops_are_dispatcher_kernels_not_the_custom_op_decorator_path():
    """The eager cost of one op call lives in bench/peer_torch.py (its host_overhead_us, JSON).
    What keeps it low is structural, and checked here: every torch.ops.specgraph op is a plain
    dispatcher registration (torch.library.Library define/impl, a CompositeExplicitAutograd
    kernel), not a torch.library.custom_op object with its per-call Python wrapper."""
    import specgraph._torch_ops as tops
    from torch._library.custom_ops import CustomOpDef

    names = [n for n in dir(torch.ops.specgraph) if not n.startswith("_") and isinstance(
        getattr(torch.ops.specgraph, n), torch._ops.OpOverloadPacket)]
    assert "step_metadata_" in names and "stage_" in names, names
    for name in names:
        packet = getattr(torch.ops.specgraph, name)
        overload = packet.default
        assert not isinstance(packet, CustomOpDef) and not isinstance(overload, CustomOpDef)
        assert torch._C._dispatch_has_kernel_for_dispatch_key(
            overload.name(), "CompositeExplicitAutograd"), name
    assert not any(isinstance(v, CustomOpDef) for v in vars(tops).values())
