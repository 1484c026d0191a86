"""Shared fixtures. Torch and CUDA tests skip visibly where torch or a GPU is absent; with
REQUIRE_GPU=1 (the GPU check) such a skip is a failure instead."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRE_GPU = os.environ.get("REQUIRE_GPU") == "1"


def skip_or_fail(why: str) -> None:
    if REQUIRE_GPU:
        pytest.fail(f"REQUIRE_GPU=1 but {why}")
    pytest.skip(why, allow_module_level=True)


def need_torch():
    try:
        import torch
    except ImportError:
        skip_or_fail("torch is not installed (the torch tests run where torch exists)")
    return torch


def need_cuda():
    torch = need_torch()
    import specgraph

    if not torch.cuda.is_available():
        skip_or_fail("no CUDA device visible to torch")
    if not specgraph.CUDA_AVAILABLE:
        skip_or_fail(f"specgraph cannot run CUDA here: {specgraph.cuda_unavailable_reason()}")
    return torch


@pytest.fixture
def torch_mod():
    return need_torch()


@pytest.fixture
def cuda_torch():
    return need_cuda()


def cli_path() -> Optional[Path]:
    """The C++ CLI to compare with: SPECGRAPH_CLI (ctest sets it), else the newest build's."""
    env = os.environ.get("SPECGRAPH_CLI")
    if env:
        return Path(env)
    found = [p for p in ROOT.glob("build*/tools/specgraph")
             if p.is_file() and os.access(p, os.X_OK)]
    if not found and shutil.which("specgraph"):
        return Path(shutil.which("specgraph"))
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def run_cli(*args: str, stdin: Optional[str] = None) -> subprocess.CompletedProcess:
    """Runs the C++ CLI; skips visibly when none is built."""
    cli = cli_path()
    if cli is None:
        pytest.skip("no specgraph CLI built (build/tools/specgraph; set SPECGRAPH_CLI)")
    return subprocess.run([str(cli), *args], input=stdin, capture_output=True, text=True,
                          timeout=60)
