"""Conformance of the two guard-word readers: read_guards (every word, labelled) and check_guards
(the first set word, raised as GuardViolation through C++ guard_site_of) must name every word of
every plan variant alike (issue 29 item 4).

The words are enumerated from the plan (layout["guard_count"]), never listed here, so a guard
word added to the plan is covered without editing this file. Each word is set on its own in the
raw guard buffer (all others clean) with details no kernel would pick, and both readers must
report that word, with the same buffer, step and details.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import specgraph

FORMATS = ("fa3", "csr", "both")
MODES = ("steps", "device_steps", "device_depth")


def _config(formats: str, sparse: bool, verify_tokens: int, mode: str,
            num_steps: int, round_on_device: bool = False) -> specgraph.DraftConfig:
    sp = specgraph.SparseConfig(heads=2, vertical_size=(4, 2), slash_size=(3, 4),
                                max_keys=128) if sparse else None
    return specgraph.DraftConfig(
        max_batch=4, topk=2, num_steps=num_steps, page_size=4, max_context_len=64, pool_rows=8,
        kv_slots=1 << 12, buckets=(2, 4), sparse=sp, formats=formats,
        device_steps=mode != "steps", device_depth=mode == "device_depth",
        verify_tokens=verify_tokens, round_on_device=round_on_device, max_stop_tokens=2)


# verify_tokens 0, 5, or 6 with the round section ("round": round_on_device, issue 31)
VARIANTS = list(itertools.product(FORMATS, (False, True), (0, 5, "round"), MODES))


def _label(w: specgraph.GuardWord) -> tuple:
    return (w.buffer, w.step)


@pytest.mark.parametrize("formats,sparse,verify_tokens,mode", VARIANTS,
                         ids=["-".join(map(str, v)) for v in VARIANTS])
def test_read_guards_and_check_guards_name_every_word_alike(formats, sparse, verify_tokens,
                                                              mode):
    rng = random.Random(hash((formats, sparse, verify_tokens, mode)) & 0xFFFF)
    num_steps = rng.randint(2, 5)
    round_on_device = verify_tokens == "round"
    verify_tokens = 6 if round_on_device else verify_tokens  # D >= num_steps + 1 at topk 2
    plan = specgraph.make_plan(_config(formats, sparse, verify_tokens, mode, num_steps,
                                       round_on_device))
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))
    guards = bufs.guards
    count = int(plan.layout["guard_count"])
    assert guards.shape[0] == count
    kernels = [k for k in range(1, 64) if "unknown" not in
               str(specgraph._ffi.describe_guard(1, 1, k, 0, 0, 0, 0))]
    seen = {}
    for index in range(count):
        guards[...] = 0
        row, column, capacity = rng.randint(0, 99), rng.randint(0, 99), rng.randint(1, 99)
        value = rng.randint(-(1 << 40), 1 << 40)
        kind, kernel = rng.randint(1, 3), rng.choice(kernels)
        violations = rng.randint(1, 9)
        guards[index, :6] = (violations, kind, kernel, row, column, capacity)
        guards[index, 6:8] = np.array([value], dtype=np.int64).view(np.int32)

        words = specgraph.read_guards(bufs)
        assert [w.word for w in words] == list(range(count))
        assert [w.violations for w in words] == [violations if i == index else 0
                                                 for i in range(count)]
        w = words[index]
        assert (w.row, w.column, w.capacity, w.value) == (row, column, capacity, value)
        with pytest.raises(specgraph.GuardViolation) as e:
            specgraph.check_guards(bufs)
        got = e.value
        assert got._attr("guard") == index
        assert (got.buffer, got.step) == _label(w), (index, words)
        assert (got.kind, got.kernel, got.row, got.column, got.capacity, got.value,
                got.violations) == (w.kind, w.kernel, row, column, capacity, value, violations)
        assert not w.buffer.startswith("guard "), f"word {index} has no site: {w.buffer}"
        assert _label(w) not in seen, f"words {seen.get(_label(w))} and {index}: {_label(w)}"
        seen[_label(w)] = index
    # the variant's own words are all there: staging, prefix, one per step (expand and CSR),
    # three verify words, three sparse stage kinds
    buffers = [b for b, _ in seen]
    assert buffers.count("expand.page_table") == num_steps
    assert buffers.count("csr.kv_indices") == (0 if formats == "fa3" else num_steps)
    assert sum(b.startswith("verify") for b in buffers) == (3 if verify_tokens else 0)
    assert sum(b.startswith("sparse.") for b in buffers) == (3 if sparse else 0)
    # the round section's seven: acceptance's two, the commit's two, the next round's three
    rounds = [b for b in buffers if b.startswith("after_verify.")]
    assert len(rounds) == (7 if round_on_device else 0)
    assert sum(b.startswith("after_verify.next_round") for b in rounds) == \
        (3 if round_on_device else 0)
    guards[...] = 0
    specgraph.check_guards(bufs)  # clean again: nothing raised
