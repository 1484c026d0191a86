"""The two torch examples (examples/torch_draft_loop.py, examples/engine_runner.py) behave alike
(issue 28, item 13): --help works without torch, a missing torch is named with the pip line,
and on a machine without a GPU the default --device auto runs on the CPU, saying so, where an
explicit --device cuda, or REQUIRE_GPU=1, is an error. The torch-less checks run everywhere (a
torch that is installed is hidden); the fallback checks need torch and skip visibly without it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, need_torch

EXAMPLES = {"torch_draft_loop": ROOT / "examples" / "torch_draft_loop.py",
            "engine_runner": ROOT / "examples" / "engine_runner.py"}
# What each example needs installed, as it says it.
NEEDS = {"torch_draft_loop": "needs torch and numpy (", "engine_runner": "needs torch ("}
PIP = {"torch_draft_loop": "pip install torch numpy", "engine_runner": "pip install torch"}
# A short run of each, verified against its own float64 reference.
SHORT = {"torch_draft_loop": ["--rounds", "2", "--verify-every", "1"],
         "engine_runner": ["--rounds", "2"]}


def run_without_torch(script, *args, require_gpu=""):
    """The example as `python script args`, with torch made unimportable."""
    env = {**os.environ, "REQUIRE_GPU": require_gpu}
    code = ("import sys, runpy; sys.modules['torch'] = None; "
            f"sys.argv = [{str(script)!r}, *{list(args)!r}]; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=str(ROOT), env=env)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_help_works_without_torch(name):
    done = run_without_torch(EXAMPLES[name], "--help")
    assert done.returncode == 0, done.stdout + done.stderr
    text = " ".join(done.stdout.split())  # argparse wraps lines
    assert text.startswith("usage: "), text
    assert "--device {auto,cuda,cpu}" in text and "(default: auto)" in text, text
    assert "auto: cuda when torch and specgraph see a GPU, else cpu" in text, text
    assert "needs torch" not in text, text


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("require_gpu", ["", "1"])
def test_without_torch_each_names_the_pip_install(name, require_gpu):
    done = run_without_torch(EXAMPLES[name], require_gpu=require_gpu)
    out = done.stdout
    assert out.startswith(f"{name}: {NEEDS[name]}"), out + done.stderr
    assert f"): {PIP[name]} (a CPU build" in out, out
    assert out.rstrip().endswith("nothing to run"), out
    assert done.returncode == (1 if require_gpu else 0), out + done.stderr


def no_gpu_env(require_gpu=""):
    """No GPU visible (hidden where there is one)."""
    env = {k: v for k, v in os.environ.items() if k != "REQUIRE_GPU"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    if require_gpu:
        env["REQUIRE_GPU"] = require_gpu
    return env


def run_example(name, *args, env):
    return subprocess.run([sys.executable, str(EXAMPLES[name]), *args], capture_output=True,
                          text=True, timeout=300, cwd=str(ROOT), env=env)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_without_a_gpu_the_default_runs_on_the_cpu(name):
    need_torch()
    done = run_example(name, *SHORT[name], env=no_gpu_env())
    assert done.returncode == 0, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"{name}: no GPU here (") and "eagerly on the CPU" in first, first
    assert done.stdout.rstrip().endswith("PASSED"), done.stdout


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("how", ["--device cuda", "REQUIRE_GPU=1"])
def test_without_a_gpu_cuda_asked_for_is_an_error(name, how):
    need_torch()
    args = [*SHORT[name], "--device", "cuda"] if how == "--device cuda" else SHORT[name]
    done = run_example(name, *args, env=no_gpu_env("1" if how == "REQUIRE_GPU=1" else ""))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith(f"{name}: no GPU here ("), done.stdout
    assert "run it with --device cpu" in done.stdout, done.stdout
    assert "PASSED" not in done.stdout and "eagerly on the CPU" not in done.stdout, done.stdout
