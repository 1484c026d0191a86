"""examples/torch_draft_loop.py on CPU tensors (eager DraftGraphs): the README's example runs and
its draft loop matches its dense float64 reference. On a GPU the GPU check runs it captured."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, need_torch

need_torch()


def test_the_torch_example_verifies_on_cpu():
    # The environment as given: the example imports the same specgraph as these tests.
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "torch_draft_loop.py"),
                           "--device", "cpu", "--rounds", "8", "--verify-every", "2"],
                          capture_output=True, text=True, timeout=300, cwd=str(ROOT))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verification: 4 rounds against a float64 dense reference" in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith("PASSED"), done.stdout


def test_the_torch_example_lets_the_device_decide_the_depth_on_cpu():
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "torch_draft_loop.py"),
                           "--device", "cpu", "--device-depth", "--rounds", "8",
                           "--verify-every", "2"],
                          capture_output=True, text=True, timeout=300, cwd=str(ROOT))
    assert done.returncode == 0, done.stdout + done.stderr
    decided = [line for line in done.stdout.splitlines() if line.startswith("depths decided")]
    assert len(decided) == 1, done.stdout
    histogram, early = decided[0].split("): ")[1].split("; ")
    assert sum(int(pair.split(": ")[1]) for pair in histogram.split(", ")) == 8, decided
    # Seed 1's confidences stop some rounds early: the device, not the cap, decided them.
    assert 1 <= int(early.split(" of ")[0]) < 8, decided
    assert done.stdout.rstrip().endswith("PASSED"), done.stdout
