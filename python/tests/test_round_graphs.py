"""specgraph.round_graphs.RoundGraphs on CPU tensors (eagerly, as the three drivers run in CI
without a GPU; test_round_graphs_cuda.py captures the graphs): K = 6 rounds of run(6) against
the same rounds driven op by op from Python and against the independent reference chained over
the rounds (round_graphs_run.py): every round's accepted path, length, bonus, finished rows,
draft extend's accept_len and staged seq_len, and the final seq_len, allocated_len, draft slots,
req_to_token, ring head and stall word; draft extend's accept_len bound or the section's; a plan
without draft extend. after_verify_'s part: accept_commit then next equals all cell by cell,
each part writes only its own cells, bad parts refused by name with nothing written. The guard
tally across rounds, and misuse refused by name. A short ring: the rounds behind a stall change
nothing, and the engine's rerun of the next round continues every live row."""

from __future__ import annotations

import random

import pytest

from conftest import need_torch

torch = need_torch()
np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph.errors import GuardViolation, InvalidArgument  # noqa: E402
from specgraph.round_arena import after_verify_, round_view  # noqa: E402
from specgraph.round_graphs import RoundGraphs  # noqa: E402
import round_graphs_run as run  # noqa: E402
from round_arena_run import Engine, plan_for  # noqa: E402


@pytest.mark.parametrize("shape", run.SHAPES, ids=["-".join(map(str, s)) for s in run.SHAPES])
def test_six_rounds_in_one_run_match_op_by_op_and_the_reference(shape):
    seen = dict(rounds=0, accepted=0, finished=0, padded=0, pages=0, six=0)
    for seed in range(6):
        for k, x in run.three_ways(shape, 7100 + 13 * seed + shape[2]).items():
            seen[k] += x
            seen["six"] += k == "rounds" and x == 6
    # the runs saw what they are meant to: acceptance, finished rows, padding, allocation,
    # and whole runs of six rounds (a budget running out ends a run early)
    assert all(seen.values()), seen


def test_a_bound_accept_len_is_the_one_the_handoff_writes():
    for seed in range(3):
        run.three_ways(run.SHAPES[1], 7300 + seed, bound=True)


def test_without_draft_extend_the_rounds_still_match():
    for shape in run.SHAPES[:2]:
        for seed in range(3):
            run.three_ways(shape, 7400 + seed, extend=False)


def test_run_k_equals_k_runs_of_one():
    case = run.Case(run.make_plan(*run.SHAPES[2]), 7500)
    once, split = run.Side(case, "cpu", True), run.Side(case, "cpu", True)
    once.rg.run(4)
    for _ in range(4):
        split.rg.run()
    assert once.final() == split.final()
    assert once.rg.replays == split.rg.replays == {case.bucket: 4}


# ---- after_verify_(part=) --------------------------------------------------------------------
NEXT_FIELDS = ("active", "root_token", "draft_position", "verify_out_cache_loc", "seq_len",
               "out_cache_loc", "ring_head")


def _twins(framework: str, seed: int):
    """Two engines over the same first round and tree (same seed)."""
    out = []
    for _ in range(2):
        rng = random.Random(seed)
        eng = Engine(plan_for(2, 2, 4, 5), rng, framework)
        eng.admit(4, eng.new_rows(rng.randint(1, 4), []))
        eng.tree(round_view(eng.bufs, 4))
        out.append(eng)
    return out


def _bytes(eng) -> np.ndarray:
    return np.array(eng.arena if eng.framework == "numpy" else eng.arena.numpy(), copy=True)


def _cells(eng, v, names):
    return {n: eng.host(getattr(v, n)).copy() for n in names}


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_accept_commit_then_next_equals_all_cell_by_cell(framework):
    for seed in range(6):
        whole, parts = _twins(framework, 7600 + seed)
        r2t_w, r2t_p = whole.arr(whole.rtt), parts.arr(parts.rtt)
        tail = lambda e: e.arr(np.array([e.tail], np.int64))  # noqa: E731
        kw = dict(stop_token_count=1, budget=seed % 2 == 0)
        after_verify_(whole.bufs, 4, r2t_w, whole.arr(whole.ring), tail(whole), **kw,
                      **({} if seed % 3 == 0 else dict(part="all")))  # the default is "all"
        v = round_view(parts.bufs, 4)
        v.guard[:, 0] = 5  # accept_commit resets the section's words
        before = _cells(parts, v, NEXT_FIELDS)
        ring = parts.arr(parts.ring)
        after_verify_(parts.bufs, 4, r2t_p, ring, tail(parts), **kw, part="accept_commit")
        # the next round's cells are untouched, acceptance and the commit are all's
        assert all((_cells(parts, v, NEXT_FIELDS)[n] == before[n]).all() for n in NEXT_FIELDS)
        w = round_view(whole.bufs, 4)
        for n in ("accept_index", "accept_length", "bonus", "finished", "allocated_len"):
            if n != "allocated_len":  # the next round writes allocated_len
                assert (parts.host(getattr(v, n)) == whole.host(getattr(w, n))).all(), n
        assert (parts.host(v.guard)[[0, 1, 2, 3], 0] == whole.host(w.guard)[[0, 1, 2, 3], 0]).all()
        words = parts.host(v.guard)[4:, 0].copy()
        assert (words == 0).all()  # the next round's words: reset, not yet written
        v.guard[4:, 0] = parts.arr(np.full(3, 0, np.int32))
        after_verify_(parts.bufs, 4, r2t_p, ring, tail(parts), **kw, part="next")
        assert (_bytes(parts) == _bytes(whole)).all(), np.flatnonzero(_bytes(parts) !=
                                                                      _bytes(whole))[:8]
        assert (parts.host(r2t_p) == whole.host(r2t_w)).all()


def test_next_alone_leaves_the_guard_words_and_acceptance_alone():
    whole, parts = _twins("numpy", 7700)
    v = round_view(parts.bufs, 4)
    v.guard[:, 0] = 5
    keep = _cells(parts, v, ("accept_index", "accept_length", "bonus", "finished", "free_begin"))
    after_verify_(parts.bufs, 4, parts.rtt, parts.ring, np.array([parts.tail], np.int64),
                  part="next")
    assert (v.guard[:4, 0] == 5).all()  # acceptance's and the commit's words: not reset
    for n, x in keep.items():
        assert (getattr(v, n) == x).all(), n


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_bad_part_is_refused_by_name_with_nothing_written(framework):
    eng, _ = _twins(framework, 7800)
    before = _bytes(eng)
    args = (eng.bufs, 4, eng.arr(eng.rtt), eng.arr(eng.ring),
            eng.arr(np.array([eng.tail], np.int64)))
    for bad in ("commit", "ALL", "", "accept"):
        with pytest.raises(InvalidArgument) as e:
            after_verify_(*args, part=bad)
        assert e.value.field == "part" and f'"{bad}"' in str(e.value)
        assert "accept_commit" in str(e.value) and "next" in str(e.value)
    with pytest.raises(TypeError, match="part"):
        after_verify_(*args, part=1)
    assert (_bytes(eng) == before).all()


def test_the_torch_op_takes_part_and_defaults_to_all():
    eng, twin = _twins("torch", 7900)
    op = torch.ops.specgraph.after_verify_.default
    tail = lambda e: e.arr(np.array([e.tail], np.int64))  # noqa: E731
    op(eng.arena, eng.bufs.handle, 4, eng.arr(eng.rtt), eng.arr(eng.ring), tail(eng), -1, 0,
       True)
    op(twin.arena, twin.bufs.handle, 4, twin.arr(twin.rtt), twin.arr(twin.ring), tail(twin), -1,
       0, True, "all")
    assert (_bytes(eng) == _bytes(twin)).all()
    with pytest.raises(InvalidArgument, match="part"):
        op(eng.arena, eng.bufs.handle, 4, eng.arr(eng.rtt), eng.arr(eng.ring), tail(eng), -1, 0,
           True, "nope")


# ---- guards and misuse ------------------------------------------------------------------------
def test_the_tally_counts_a_violation_across_rounds_and_sync_raises():
    case = run.Case(run.make_plan(*run.SHAPES[0]), 8000)
    a = run.Side(case, "cpu", True)
    a.plan_round_base = case.plan.layout["round"]["guard_base"]
    a.tail.zero_()  # no page published: the first round's next round stalls (recorded)
    a.rg.run(3)
    found = a.rg.rounds_with_violations()
    assert found == {"after_verify.next_round (allocation)": 1}, found
    # the later rounds reset the live words: only the tally still knows
    assert not specgraph.read_guards(a.bufs)[a.plan_round_base + 4].violations
    assert int(round_view(a.bufs, case.bucket).stall[0]) == 1
    # The first round's details are kept: those of a twin's live word after that one round.
    twin = run.Side(case, "cpu", True)
    twin.tail.zero_()
    twin.rg.run(1)
    live = specgraph.read_guards(twin.bufs)[a.plan_round_base + 4]
    assert live.violations == 1
    at, first = a.rg.first_violation("after_verify.next_round (allocation)")
    assert at == 1
    assert (first.kind, first.kernel, first.row, first.column, first.capacity, first.value) == \
        (live.kind, live.kernel, live.row, live.column, live.capacity, live.value)
    assert a.rg.first_violation("after_verify.commit (input)") is None
    a.rg.checked = "sync"
    with pytest.raises(GuardViolation) as e:
        a.rg.run(1)
    assert e.value.violations >= 1 and e.value.bucket == case.bucket
    assert (e.value.row, e.value.column, e.value.capacity, e.value.value, e.value.kind) == \
        (live.row, live.column, live.capacity, live.value, live.kind)
    assert "first in round 1" in str(e.value), str(e.value)
    a.rg.reset_guards()
    assert a.rg.first_violation("after_verify.next_round (allocation)") is None
    a.rg.run(2)  # clean rounds: nothing raised
    assert a.rg.rounds_with_violations() == {}


def test_check_names_the_first_rounds_details_not_the_last():
    # Round 1 breaks row 1's allocated_len, round 2 row 0's instead: the commit's input word is
    # set in both rounds, live with row 0; the tally keeps round 1's row 1 (independently: the
    # row and the value this test wrote).
    case = run.Case(run.make_plan(*run.SHAPES[0]), 8201)
    assert case.real >= 2
    a = run.Side(case, "cpu", True)
    v = round_view(a.bufs, case.bucket)
    keep = int(v.allocated_len[1])
    v.allocated_len[1] = 0
    a.rg.run(1)
    v.allocated_len[1] = keep
    v.allocated_len[0] = 0
    a.rg.run(1)
    word = "after_verify.commit (input)"
    assert a.rg.rounds_with_violations()[word] == 2
    live = [w for w in specgraph.read_guards(a.bufs) if w.buffer == word][0]
    assert (live.row, live.column, live.value) == (0, -3, 0)
    at, first = a.rg.first_violation(word)
    assert (at, first.row, first.column, first.value, first.kernel) == \
        (1, 1, -3, 0, "commit_metadata")
    a.rg.checked = "sync"
    with pytest.raises(GuardViolation) as e:
        a.rg.run(1)
    assert e.value.buffer == word and (e.value.row, e.value.column) == (1, -3), str(e.value)


def _drivers(extend=True, **plan_kw):
    case = run.Case(run.make_plan(*run.SHAPES[1], extend=extend, **plan_kw), 8100)
    return run.Side(case, "cpu", False)


def test_misuse_is_refused_by_name():
    s = _drivers()
    dg, vg, eg, ring, tail = s.dg, s.vg, s.eg, s.ring, s.tail

    def refused(field, *args, **kw):
        with pytest.raises(InvalidArgument) as e:
            RoundGraphs(*args, **kw)
        assert e.value.field == field, (field, str(e.value))

    refused("extend_graphs", dg, vg, None, ring, tail)
    refused("extend_graphs", dg, vg, _drivers().eg, ring, tail)  # another arena's
    refused("ring", dg, vg, eg, ring.long(), tail)
    refused("ring_tail", dg, vg, eg, ring, torch.zeros(2, dtype=torch.int64))
    refused("stop_token_count", dg, vg, eg, ring, tail, stop_token_count=3)
    refused("buckets[0]", dg, vg, eg, ring, tail, buckets=[3])
    other = specgraph.verify_graphs.VerifyGraphs(lambda v: None, outputs=vg.outputs,
                                                 req_to_token=s.rtt.clone(), plan=s.case.plan)
    refused("req_to_token", dg, other, eg, ring, tail)
    with pytest.raises(TypeError, match="verify_graphs"):
        RoundGraphs(dg, object(), eg, ring, tail)
    rg = RoundGraphs(dg, vg, eg, ring, tail, buckets=[4])
    for field, call in (("capture", lambda: rg.run()), ("bucket", lambda: rg.stage_(
            1, s.t(np.ones(1, np.int32)), s.t(np.ones(1, np.int32)),
            s.t(np.zeros(2 * 8, np.int64))))):
        with pytest.raises(InvalidArgument) as e:
            call()
        assert e.value.field == field
    rg.capture()
    for field, call in (("stage_", lambda: rg.run()), ("k", lambda: rg.run(0)),
                        ("bucket", lambda: rg.stage_(1, s.t(np.ones(1, np.int32)),
                                                     s.t(np.ones(1, np.int32)),
                                                     s.t(np.zeros(16, np.int64))))):
        with pytest.raises(InvalidArgument) as e:
            call()
        assert e.value.field == field, (field, str(e.value))


def test_bound_inputs_and_a_device_step_counter_are_refused():
    s = _drivers()
    c = s.case.plan.config
    inputs = specgraph.bind_inputs(
        s.bufs, req_pool_indices=torch.zeros(4, dtype=torch.int32),
        seq_lens=torch.ones(4, dtype=torch.int32),
        out_cache_loc=torch.zeros((4, c.topk, c.num_steps), dtype=torch.int64))
    bound = specgraph.torch.DraftGraphs(s.bufs, lambda v: None, req_to_token=s.rtt,
                                        inputs=inputs)
    with pytest.raises(InvalidArgument) as e:
        RoundGraphs(bound, s.vg, s.eg, s.ring, s.tail)
    assert e.value.field == "inputs" and "stage_" in str(e.value)
    stepped = run.Case(run.make_plan(*run.SHAPES[0], extend=False, device_steps=True), 8200)
    side = run.Side(stepped, "cpu", False)
    with pytest.raises(InvalidArgument) as e:
        RoundGraphs(side.dg, side.vg, None, side.ring, side.tail)
    assert e.value.field == "device_steps"


def test_a_plan_without_the_round_section_is_refused():
    plan = specgraph.make_plan(specgraph.DraftConfig(
        max_batch=4, topk=1, num_steps=2, page_size=1, max_context_len=40, pool_rows=4,
        kv_slots=1 << 20, buckets=(2, 4), verify_tokens=3))
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework="torch"))
    rtt = torch.zeros((4, 40), dtype=torch.int32)
    dg = specgraph.torch.DraftGraphs(bufs, lambda v: None, req_to_token=rtt)
    vg = specgraph.verify_graphs.VerifyGraphs(lambda v: None, outputs=specgraph.verify_outputs(
        4, 40, 3, 1, device="cpu"), req_to_token=rtt, plan=plan)
    with pytest.raises(InvalidArgument) as e:
        RoundGraphs(dg, vg, None, torch.zeros(4, dtype=torch.int32),
                    torch.zeros(1, dtype=torch.int64))
    assert e.value.field == "round_on_device"


def test_rounds_queued_behind_a_stall_change_nothing_and_the_rerun_continues():
    """A ring with nothing published (tail 0): the first round whose rows need pages stalls.
    The rounds RoundGraphs runs behind it accept nothing, move no KV, finish nothing, pad every
    row's extend and leave new_seq_len, bonus, finished, allocated_len and the budget as the
    stalling round left them (docs/round-graphs.md section 4). The engine then publishes the
    ring, clears the stall word and reruns the next round (after_verify_ part "next"): every
    live row continues from the stalling round's new_seq_len, and the next round accepts again."""
    from specgraph.extend_arena import extend_view
    kept = ("new_seq_len", "bonus", "finished", "allocated_len", "max_new_tokens_left")
    stalls = 0
    for seed in range(12):
        case = run.Case(run.make_plan(2, 3, 1, 6), seed)
        side = run.Side(case, "cpu", round_driver=True)
        b, real, s = case.bucket, case.real, case.plan.config.num_steps + 1
        v = round_view(side.bufs, b)
        side.tail.fill_(0)  # the engine has published no page
        for _ in range(6):
            side.rg.run(1)
            if int(v.stall[0]):
                break
        if not int(v.stall[0]):
            continue
        stalls += 1
        snap = {n: getattr(v, n).clone() for n in kept}
        side.rg.run(2)  # queued behind the stall
        assert int(v.stall[0]) == 1
        assert v.accept_length.tolist() == [0] * b, seed
        assert (v.accept_index == -1).all(), seed
        assert (v.kv_move == -1).all(), seed
        for n in kept:
            assert getattr(v, n).tolist() == snap[n].tolist(), (n, seed)
        assert (extend_view(side.bufs, b).tokens.out_cache_loc == 0).all(), seed
        side.tail.fill_(case.ring.size)
        v.stall.zero_()
        after_verify_(side.bufs, b, side.rtt, side.ring, side.tail,
                      stop_token_count=case.stop_count, budget=case.budget, part="next")
        assert int(v.stall[0]) == 0
        live = [r for r in range(real) if not int(snap["finished"][r])]
        for r in live:
            assert int(side.bufs.seq_len[r]) == int(snap["new_seq_len"][r]), (r, seed)
        side.rg.run(1)
        for r in live:
            assert int(v.accept_index[r, 0]) == r * case.d, (r, seed)
    assert stalls > 0, "no case stalled"
