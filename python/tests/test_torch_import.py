"""`import specgraph` never imports torch, and torch imported later still gets the custom ops
and a tvm_ffi that knows torch (issue 28 item 12; docs/python.md, Installing). Each case runs in
a fresh interpreter: whether torch is imported is a property of the whole process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _start(code: str) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"),
                                                      env.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(p: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = p.communicate(timeout=300)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _python(code: str) -> subprocess.CompletedProcess:
    return _finish(_start(code))


def test_import_specgraph_does_not_import_torch():
    """With torch installed or not: importing the package (and using it on numpy arrays) leaves
    torch out of sys.modules; tvm_ffi is loaded all the same."""
    r = _python(
        "import sys, specgraph\n"
        "plan = specgraph.make_plan(specgraph.DraftConfig(max_batch=2, topk=1, num_steps=1,\n"
        "    page_size=1, max_context_len=8, pool_rows=2, kv_slots=64))\n"
        "bufs = specgraph.buffers(plan, specgraph.host_arena(plan))\n"
        "specgraph.check_guards(bufs)\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
        "print('tvm_ffi' in sys.modules)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[]", "True"], r.stdout


def test_torch_imported_later_registers_the_ops_and_gives_tvm_ffi_torch():
    """specgraph first, torch later: once torch is imported, torch.ops.specgraph.* exist (before
    any specgraph call), tvm_ffi knows torch as it does when torch comes first, an op through
    torch.ops writes the arena, and it passes opcheck."""
    pytest.importorskip("torch")
    probe = (
        "import tvm_ffi, tvm_ffi.core, tvm_ffi._convert, torch, specgraph\n"
        "print(sorted(n for n in specgraph._torch_ops.SCHEMAS if hasattr(torch.ops.specgraph, n)"
        ") == sorted(specgraph._torch_ops.SCHEMAS))\n"
        "print(tvm_ffi.core.torch is torch, tvm_ffi._convert.torch is torch,\n"
        "      hasattr(tvm_ffi.stream, 'TorchStreamContext'),\n"
        "      tvm_ffi.use_torch_stream is tvm_ffi.stream.use_torch_stream)\n"
        "plan = specgraph.make_plan(specgraph.DraftConfig(max_batch=2, topk=1, num_steps=1,\n"
        "    page_size=1, max_context_len=8, pool_rows=2, kv_slots=64))\n"
        "bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework='torch'))\n"
        "t = torch.tensor\n"
        "args = (bufs.arena, bufs.handle, 2, t([1, 0]), t([3, 5]), t([4, 7], dtype=torch.int64),"
        " 0, float('-inf'), 2)\n"
        "torch.ops.specgraph.stage_(*args)\n"
        "print(bufs.seq_len[:2].tolist(), bufs.real_batch.tolist())\n")
    first = _start(probe)  # torch first: tvm_ffi imports torch itself (both run at once)
    later = _start("import specgraph, sys\nassert 'torch' not in sys.modules\n"
                   "import torch\nassert hasattr(torch.ops.specgraph, 'stage_')\n" + probe +
                   "torch.library.opcheck(torch.ops.specgraph.stage_.default, args)\n"
                   "print('opcheck passed')\n")
    first, later = _finish(first), _finish(later)
    assert first.returncode == 0, first.stderr
    assert later.returncode == 0, later.stderr
    lines = later.stdout.strip().split("\n")
    assert lines == ["True", "True True True True", "[3, 5] [2]", "opcheck passed"], later.stdout
    assert later.stdout.startswith(first.stdout)
