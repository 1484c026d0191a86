"""What a new user meets first (issue 18): an error with a fix names the fix, and a missing
optional dependency (numpy, torch) says what to install instead of a bare ModuleNotFoundError.
The missing module is simulated in a fresh interpreter (sys.modules[name] = None)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import specgraph

CFG = dict(max_batch=4, topk=2, num_steps=3, page_size=4, max_context_len=32, pool_rows=8,
           kv_slots=1024)


def without(module: str, code: str) -> subprocess.CompletedProcess:
    prelude = f"import sys\nsys.modules[{module!r}] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))


def test_a_misaligned_arena_names_the_aligned_ones():
    plan = specgraph.make_plan(specgraph.DraftConfig(**CFG))
    raw = np.zeros(plan.total_bytes + 512, np.uint8)
    start = (-raw.ctypes.data) % 256 + 64  # 64 bytes past a 256-byte boundary, as torch's CPU
    arena = raw[start:start + plan.total_bytes]
    snapshot = arena.copy()
    with pytest.raises(specgraph.InvalidArgument) as e:
        specgraph.buffers(plan, arena)
    message = str(e.value)
    assert e.value.field == "arena"
    assert "not 256-byte aligned (offset 64)" in message, message
    assert "use specgraph.host_arena(plan)" in message, message
    assert 'torch.empty(plan.total_bytes, dtype=torch.uint8, device="cuda")' in message, message
    assert (arena == snapshot).all(), "nothing is written"
    # The fix works: the named arena is accepted.
    specgraph.buffers(plan, specgraph.host_arena(plan))


def test_without_numpy_the_calls_that_need_it_say_what_to_install():
    code = ("import specgraph, specgraph.metadata\n"
            f"plan = specgraph.make_plan(specgraph.DraftConfig(**{CFG!r}))\n"
            "for call in (lambda: specgraph.host_arena(plan),\n"
            "             lambda: specgraph.metadata.sparse_fallback(48, 4, 4),\n"
            "             lambda: specgraph.metadata.expand_page_table([[1]], [0], topk=1, page_size=4, decode_length=1)):\n"
            "    try:\n"
            "        call()\n"
            "    except ModuleNotFoundError as e:\n"
            "        print(e.name, '|', e)\n")
    done = without("numpy", code)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stdout
    for line, call in zip(lines, ["specgraph.host_arena", "specgraph.metadata.sparse_fallback",
                                  "specgraph.metadata.expand_page_table"]):
        assert line.startswith(f"numpy | {call} needs numpy, which is not installed: "
                               "pip install numpy"), line


def test_without_torch_specgraph_imports_and_specgraph_torch_says_what_to_install():
    code = ("import specgraph\n"
            "print('specgraph', specgraph.__version__)\n"
            "try:\n"
            "    import specgraph.torch\n"
            "except ModuleNotFoundError as e:\n"
            "    print(e.name, '|', e)\n")
    done = without("torch", code)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"specgraph {specgraph.__version__}", done.stdout
    assert lines[1].startswith("torch | specgraph.torch (DraftGraphs over torch.cuda.graph) needs "
                               "torch, which is not installed: pip install torch"), lines[1]


def test_draft_graphs_over_a_numpy_arena_names_the_torch_arenas():
    from conftest import need_torch

    need_torch()
    import specgraph.torch as sgt

    plan = specgraph.make_plan(specgraph.DraftConfig(**CFG))
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan))  # numpy
    with pytest.raises(specgraph.InvalidArgument) as e:
        sgt.DraftGraphs(bufs, lambda v: None, req_to_token=None)
    assert e.value.field == "bufs"
    assert 'specgraph.host_arena(plan, framework="torch")' in str(e.value), str(e.value)
    assert 'device="cuda"' in str(e.value), str(e.value)
