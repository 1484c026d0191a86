"""The ops are NVTX ranges named after them in the "specgraph" domain (what Nsight Systems shows),
recorded through the C++ tests' injection library (tests/nvtx_recorder.cpp); SPECGRAPH_NVTX=0
turns them off. Skipped visibly where that library is not built."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("numpy")

CODE = """
import ctypes, sys
import numpy as np
import specgraph
p = specgraph.make_plan(specgraph.DraftConfig(2, 1, 2, 4, 16, 3, 1024))
b = specgraph.buffers(p, specgraph.host_arena(p))
bucket = specgraph.stage_(b, 1, np.array([1]), np.array([5]), np.array([1, 2]))
specgraph.round_setup_(b, bucket, np.zeros((3, 16), np.int32))
specgraph.step_metadata_(b, bucket, 1)
specgraph.check_guards(b)
dump = ctypes.CDLL(sys.argv[1]).specgraph_nvtx_recorder_dump
dump.restype = ctypes.c_char_p
print(dump().decode())
"""


def recorder():
    env = os.environ.get("SPECGRAPH_NVTX_RECORDER")
    if env:
        return env
    # A build's recorder that loads here (a sanitizer build's needs its runtime).
    for path in sorted(ROOT.glob("build*/tests/libnvtx_recorder.so"),
                       key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            ctypes.CDLL(str(path))
            return str(path)
        except OSError:
            continue
    pytest.skip("no NVTX recorder built (tests/nvtx_recorder.cpp; set SPECGRAPH_NVTX_RECORDER)")


@pytest.mark.parametrize("enabled", ["1", "0"])
def test_ops_are_nvtx_ranges(enabled):
    from specgraph import _ffi

    if not _ffi.build_info()[2]:
        pytest.skip("specgraph was built without NVTX headers")
    path = recorder()
    env = dict(os.environ, NVTX_INJECTION64_PATH=path, SPECGRAPH_NVTX=enabled)
    out = subprocess.run([sys.executable, "-c", CODE, path], capture_output=True, text=True,
                         env=env, timeout=120, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr
    events = [line.split("|")[:3] for line in out.stdout.splitlines() if line.count("|") >= 4]
    ours = [e for e in events if e[1] == "specgraph"]
    if enabled == "1":
        names = [e[2] for e in ours]
        assert names == ["initialize_", "stage_", "round_setup_", "step_metadata_",
                         "check_guards"], out.stdout
        assert all(e[0] == "0" for e in ours)  # not nested
    else:
        assert ours == []
