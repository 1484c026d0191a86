"""specgraph.round_arena: the round after verify (acceptance, the commit, the next round's inputs)
over the plan's round section (DraftConfig(verify_tokens=D, round_on_device=True)), rounds back
to back on a numpy arena and on torch CPU tensors, poisoned around every written cell: each
round's every output, the staged seq_len and out_cache_loc the next round reads, allocated_len,
req_to_token, the ring head and the stall word equal the independent reference
scripts/outside-check/accept_spec_reference.py (round_arena_run.py loads it by path), and every
other arena byte is untouched; finished rows, padded buckets, idle ranks, a short ring (the
stall), a row too narrow; refusals name their field with nothing written; the torch op through
opcheck and torch.compile."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
from specgraph.round_arena import after_verify_, round_view  # noqa: E402
from conftest import need_torch  # noqa: E402
from round_arena_run import Engine, cdiv, plan_for, ref  # noqa: E402

# (topk, num_steps, page size, D): chains and trees, page sizes 1, 2, 4 and 16
SHAPES = [(1, 3, 1, 4), (2, 2, 1, 4), (2, 2, 4, 5), (3, 2, 2, 7), (1, 2, 16, 3), (2, 3, 16, 6)]


def rounds(framework: str, shape, seed: int, n: int = 8) -> dict:
    rng = random.Random(seed)
    plan = plan_for(*shape)
    eng = Engine(plan, rng, framework, extra_columns=rng.choice([0, 3]))
    eng.admit(6, eng.new_rows(rng.randint(1, 6), []))
    seen = dict(finished=0, padded=0, kept=0, accepted=0)
    for _ in range(n):
        before = eng.real
        want = eng.round()
        seen["finished"] += sum(want["finished"])
        seen["padded"] += eng.bucket - eng.real
        seen["accepted"] += sum(want["accept_length"])
        eng.refill(rng.randint(0, 24))
        eng.carry_on(arrivals=rng.randint(0, 2) if rng.random() < 0.3 else 0)
        seen["kept"] += eng.real == before and not any(want["finished"])
    return seen


@pytest.mark.parametrize("shape", SHAPES, ids=["-".join(map(str, s)) for s in SHAPES])
def test_rounds_back_to_back_over_numpy_match_the_reference(shape):
    seen = dict(finished=0, padded=0, kept=0, accepted=0)
    for seed in range(4):
        for k, x in rounds("numpy", shape, 31000 + seed * 7 + shape[2]).items():
            seen[k] += x
    # the runs saw what they are meant to: finished rows, padding, rounds with no host step
    assert seen["finished"] and seen["padded"] and seen["kept"] and seen["accepted"], seen


@pytest.mark.parametrize("shape", SHAPES[1:3], ids=["-".join(map(str, s)) for s in SHAPES[1:3]])
def test_rounds_back_to_back_over_torch_cpu_match_the_reference(shape):
    need_torch()
    for seed in range(2):
        rounds("torch", shape, 41000 + seed)


def test_reference_worked_examples():
    ref.self_test()  # E1 to E3 of the spec, verbatim, in the reference the tests trust


def test_a_short_ring_stalls_every_row_until_the_engine_refills():
    rng = random.Random(5)
    plan = plan_for(2, 2, 4, 5)
    c = plan.config
    eng = Engine(plan, rng, ring_capacity=32)
    eng.admit(4, eng.new_rows(4, []))
    v = round_view(eng.bufs, 4)
    # every row holds seq + D + S positions: it still fits a round after the stall, but each
    # row that goes on needs pages (R = 16 > D + S)
    al = [int(s) + c.verify_tokens + c.num_steps + 1 for s in eng.host(v.seq_len)[:4]]
    v.allocated_len[...] = eng.arr(np.array(al, np.int32))
    eng.tail = eng.head + 1  # one page published: short
    want = eng.round(budget=False, stop_count=0)
    assert any(x["kind"] == "ring" for x in want["violations"]), want["violations"]
    assert int(eng.host(v.stall)[0]) == 1 and not any(want["next_round"]["active"])
    assert want["pages_taken"] == 0 and not any(want["finished"])
    # the host steps in: the rows at their committed lengths, and pages published
    eng.refill(32)
    eng.carry_on()
    assert eng.real == 4
    v = round_view(eng.bufs, eng.bucket)
    rows = [dict(pool=p, seq=s, al=a) for p, s, a in zip(
        eng.host(v.req_pool_index).tolist(), eng.host(v.seq_len).tolist(),
        eng.host(v.allocated_len).tolist())]
    # while the stall word stands every row is padding and nothing is taken
    v.stall[...] = eng.arr(np.ones(1, np.int32))
    eng.tree(v)
    after_verify_(eng.bufs, eng.bucket, eng.arr(eng.rtt), eng.arr(eng.ring),
                  eng.arr(np.array([eng.tail], np.int64)), budget=False)
    assert not eng.host(v.active).any() and int(eng.host(v.ring_head)[0]) == eng.head
    assert int(eng.host(v.stall)[0]) == 1
    # cleared by the engine (admit writes 0): the rows run again, against the reference
    eng.admit(eng.bucket, rows)
    want = eng.round(budget=False)
    assert want["pages_taken"] > 0 and any(want["next_round"]["active"])


def test_a_row_too_narrow_is_recorded_and_takes_nothing():
    rng = random.Random(9)
    plan = plan_for(1, 2, 1, 3, m=40)
    eng = Engine(plan, rng)
    rows = eng.new_rows(2, [])
    rows[0].update(seq=40 - 3, al=40)  # seq' + R >= 41 runs past the 40 columns
    eng.admit(2, rows)
    want = eng.round(budget=False, stop_count=0)  # nothing finishes
    kinds = [x["kind"] for x in want["violations"]]
    assert kinds[0] == "row_width" and want["violations"][0]["row"] == 0, want["violations"]
    assert want["allocated_len"][0] == 40 and want["next_round"]["active"][1]
    words = specgraph.read_guards(eng.bufs)
    base = plan.layout["round"]["guard_base"]
    assert words[base + 4].row == 0 and words[base + 4].buffer.endswith("(allocation)")


def test_idle_rank_and_a_scalar_real_batch():
    rng = random.Random(3)
    plan = plan_for(2, 2, 2, 4)
    eng = Engine(plan, rng)
    eng.admit(2, [])  # an idle rank: every row padding
    want = eng.round()
    assert want["pages_taken"] == 0 and not any(want["next_round"]["active"])
    eng.admit(4, eng.new_rows(3, []))
    eng.real = 3
    want = eng.round(real_batch=2)  # the launch scalar wins over the staged word
    assert want["next_round"]["active"][2] is False


def misuse(eng):
    v = round_view(eng.bufs, eng.bucket)
    r2t, ring = eng.arr(eng.rtt), eng.arr(eng.ring)
    tail = eng.arr(np.array([eng.tail], np.int64))
    c = eng.plan.config
    bad = [
        ("bucket", dict(bucket=3)),
        ("req_to_token", dict(req_to_token=eng.arr(eng.rtt[:, : c.max_context_len - 1].copy()))),
        ("req_to_token", dict(req_to_token=eng.arr(eng.rtt.astype(np.int64)))),
        ("ring", dict(ring=eng.arr(eng.ring.astype(np.int64)))),
        ("ring", dict(ring=eng.arr(eng.ring.reshape(2, -1).copy()))),
        ("ring_tail", dict(ring_tail=eng.arr(np.array([1], np.int32)))),
        ("ring_tail", dict(ring_tail=eng.arr(np.array([1, 2], np.int64)))),
        ("real_batch", dict(real_batch=eng.bucket + 1)),
        ("real_batch", dict(real_batch=-1)),
        ("stop_token_count", dict(stop_token_count=c.max_stop_tokens + 1)),
        ("stop_token_count", dict(stop_token_count=-1)),
    ]
    return v, r2t, ring, tail, bad


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_misuse_is_refused_by_name_with_nothing_written(framework):
    if framework == "torch":
        need_torch()
    eng = Engine(plan_for(2, 2, 4, 5), random.Random(1), framework)
    eng.admit(4, eng.new_rows(3, []))
    v, r2t, ring, tail, bad = misuse(eng)
    arena = eng.host(eng.arena) if framework == "numpy" else eng.arena.numpy()
    before = np.array(arena, copy=True)
    for field, change in bad:
        args = dict(bucket=eng.bucket, req_to_token=r2t, ring=ring, ring_tail=tail)
        kw = {k: change.pop(k) for k in list(change) if k in ("real_batch", "stop_token_count")}
        args.update(change)
        with pytest.raises(specgraph.InvalidArgument) as e:
            after_verify_(eng.bufs, args["bucket"], args["req_to_token"], args["ring"],
                          args["ring_tail"], **kw)
        assert e.value.field == field, (field, str(e.value))
        assert field in str(e.value)
        assert (arena == before).all(), field
    with pytest.raises(TypeError):
        after_verify_(eng.bufs, eng.bucket, r2t, ring, tail, budget=1)
    # a plan without the section
    plain = specgraph.make_plan(specgraph.DraftConfig(
        max_batch=2, topk=1, num_steps=2, page_size=1, max_context_len=16, pool_rows=2,
        kv_slots=64, verify_tokens=3))
    other = specgraph.buffers(plain, specgraph.host_arena(plain))
    for call in (lambda: round_view(other, 2),
                 lambda: after_verify_(other, 2, np.zeros((2, 16), np.int32),
                                       np.zeros(4, np.int32), np.zeros(1, np.int64))):
        with pytest.raises(specgraph.InvalidArgument) as e:
            call()
        assert e.value.field == "round_on_device"


@pytest.mark.parametrize("field,value", [("round_reserve", -2), ("round_reserve", (1 << 28) + 1),
                                         ("round_reserve", 16),  # 16-wide rows: M would be 0
                                         ("round_max_seq_len", 0), ("round_max_seq_len", -2),
                                         ("round_max_seq_len", 14),  # ceil_page(14 + 3) > 16
                                         ("max_stop_tokens", 1025), ("max_stop_tokens", -1),
                                         ("round_on_device", None)])
def test_config_fields_are_validated_by_cxx_by_name(field, value):
    kw = dict(max_batch=2, topk=1, num_steps=2, page_size=1, max_context_len=16, pool_rows=2,
              kv_slots=64, verify_tokens=3, round_on_device=True)
    if value is None:
        kw["verify_tokens"] = 0  # the round's tree is the verify tree
    else:
        kw[field] = value
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.DraftConfig(**kw)
    assert e.value.field == field, str(e.value)


def test_the_plan_serves_the_section():
    plan = plan_for(2, 3, 4, 6, stops=2, reserve=-1)
    sec = plan.layout["round"]
    assert sec["draft_tokens"] == 6 and sec["stop_capacity"] == 2 and sec["guard_count"] == 7
    assert sec["reserve"] == ref.r1(4, 2, 3, 6)  # the spec's R1 (the reference's formula)
    assert plan_for(2, 3, 4, 6, reserve=40).layout["round"]["reserve"] == 40
    # M, served by C++: the largest committed length whose allocation ceil_page(M + R) the
    # 160-wide rows hold (a search here), or the one given.
    r = sec["reserve"]
    assert sec["max_seq_len"] == max(m for m in range(1, 161) if cdiv(m + r, 4) * 4 <= 160)
    given = specgraph.DraftConfig(max_batch=2, topk=2, num_steps=3, page_size=4,
                                  max_context_len=160, pool_rows=3, kv_slots=1 << 20,
                                  verify_tokens=6, round_on_device=True, round_max_seq_len=77)
    assert given.round_max_seq_len == 77
    assert specgraph.make_plan(given).layout["round"]["max_seq_len"] == 77
    for bucket, got in zip(plan.buckets, sec["buckets"]):
        v = round_view(specgraph.buffers(plan, specgraph.host_arena(plan)), bucket)
        assert v.parent.shape == (bucket, 6) and v.accept_index.shape == (bucket, 4)
        assert v.kv_move.shape == (bucket, 3, 2) and v.tail_copy.shape == (bucket, 1, 3, 2)
        assert v.verify_out_cache_loc.dtype.name == "int64" and v.guard.shape[0] == 7
        assert v.stop_token_ids.shape == (2,) and v.ring_head.shape == (1,)
        assert v.out_cache_loc.shape == (bucket, 2, 3) and v.seq_len.shape == (bucket,)
        for name, offset, _, _ in got["fields"]:
            b = plan.find(f"after_verify.{name}")
            assert b.offset == offset, name
    # no stop ids, topk 1: those fields have no elements, and the view holds None
    small = plan_for(1, 2, 1, 3, stops=0)
    names = [f[0] for f in small.layout["round"]["buckets"][0]["fields"]]
    assert "stop_token_ids" not in names and "tail_copy" not in names
    v = round_view(specgraph.buffers(small, specgraph.host_arena(small)), 2)
    assert v.stop_token_ids is None and v.tail_copy is None


def test_torch_op_opcheck_and_compile():
    torch = need_torch()
    rng = random.Random(2)
    eng = Engine(plan_for(2, 2, 4, 5), rng, "torch")
    eng.admit(4, eng.new_rows(3, []))
    v = round_view(eng.bufs, 4)
    eng.tree(v)
    r2t, ring = eng.arr(eng.rtt), eng.arr(eng.ring)
    tail = eng.arr(np.array([eng.tail], np.int64))
    op = torch.ops.specgraph.after_verify_.default
    saved = eng.arena.clone()
    torch.library.opcheck(op, (eng.arena, eng.bufs.handle, 4, r2t.clone(), ring, tail, -1, 0,
                               True))
    # compiled (aot_eager, fullgraph) and eager give the same bytes
    eng.arena.copy_(saved)
    r_eager = r2t.clone()
    after_verify_(eng.bufs, 4, r_eager, ring, tail)
    eager = eng.arena.clone()
    eng.arena.copy_(saved)
    r_comp = r2t.clone()
    f = torch.compile(lambda r: after_verify_(eng.bufs, 4, r, ring, tail), backend="aot_eager",
                      fullgraph=True)
    f(r_comp)
    assert torch.equal(eng.arena, eager) and torch.equal(r_comp, r_eager)
