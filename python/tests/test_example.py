"""examples/torch_draft_loop.py on CPU tensors (eager DraftGraphs): the README's example runs and
its draft loop matches its dense float64 reference. On a GPU the GPU check runs it captured."""

from __future__ import annotations

import importlib.util
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
    # Issue 18: "capture: 0 graphs in 0.000 s, pool 0.0 MiB" read as a failure on the CPU.
    assert ("specgraph capture: none, eager mode on a CPU arena" in done.stdout
            and "0 graphs in" not in done.stdout), done.stdout


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


def test_the_example_forward_writes_nothing_for_a_spent_counter(monkeypatch):
    import torch

    import specgraph

    spec = importlib.util.spec_from_file_location(
        "torch_draft_loop", ROOT / "examples" / "torch_draft_loop.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.setattr(sys, "argv", ["torch_draft_loop.py", "--device", "cpu", "--device-depth"])
    a = example.parse()
    eng = example.Engine(a, torch.device("cpu"))
    plan = specgraph.make_plan(eng.config())
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework="torch"))
    tokens = torch.randint(0, a.vocab, (a.steps + 1, plan.max_rows))
    attn_out = torch.zeros(a.steps, plan.max_rows, a.heads, a.head_dim)
    forward = eng.forward(tokens, attn_out)
    rows, seqs, slots, _ = eng.new_round(3)
    bucket = specgraph.stage_(bufs, 3, *(torch.tensor(x) for x in (rows, seqs, slots)))
    specgraph.round_setup_(bufs, bucket, eng.req_to_token)
    specgraph.step_metadata_device_(bufs, bucket)

    def state():
        return [x.clone() for x in (tokens, attn_out, eng.k_cache, eng.v_cache, bufs.confidence)]

    for spent in (a.steps, a.steps + 2):
        before = state()
        bufs.device_step[0] = spent
        forward(bufs.view(bucket, 0))
        assert all(torch.equal(x, y) for x, y in zip(before, state())), f"counter {spent} wrote"
    before = state()
    bufs.device_step[0] = 0  # step 0 is live: the same call writes its output, K/V, confidence
    forward(bufs.view(bucket, 0))
    after = state()
    names = ("tokens", "attn_out", "k_cache", "v_cache", "confidence")
    unchanged = [n for n, x, y in zip(names, before, after) if torch.equal(x, y)]
    assert set(unchanged) <= {"tokens"}, unchanged  # tokens[1] may repeat by chance


EXAMPLE = str(ROOT / "examples" / "torch_draft_loop.py")


def test_the_torch_example_help_shows_defaults_and_descriptions():
    done = subprocess.run([sys.executable, EXAMPLE, "--help"], capture_output=True, text=True,
                          timeout=120, cwd=str(ROOT))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # argparse wraps lines
    assert "Without a GPU it runs eagerly on the CPU (no graphs)." in text, text
    for flag, default in [("--max-batch", 8), ("--topk", 4), ("--steps", 4), ("--rounds", 20),
                          ("--device", "auto"), ("--min-confidence", 0.013)]:
        assert f"{flag} " in text and f"(default: {default})" in text, (flag, text)
    assert "draft branches per request (default: 4)" in text, text
    assert "auto: cuda when torch and specgraph see a GPU, else cpu (default: auto)" in text, text
    # Without a GPU the default runs on the CPU, as examples/engine_runner.py does:
    # test_example_devices.py.
