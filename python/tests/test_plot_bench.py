"""scripts/plot_bench.py titles every plot with the executor its numbers came from (issue 28,
item 11): the published CPU results (docs/bench/cpu) are the CPU host executor's, never a GPU's.
The titles need no matplotlib; where matplotlib is installed the plots are drawn too and
summary.md lists them with their titles."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import ROOT

RESULTS = ROOT / "docs" / "bench" / "cpu"


def plot_bench():
    spec = importlib.util.spec_from_file_location("plot_bench", ROOT / "scripts" / "plot_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no matplotlib
    return module


def test_the_titles_name_the_executor_of_the_rows():
    pb = plot_bench()
    _, throughput = pb.load(str(RESULTS / "bench_throughput.json"))
    _, metadata = pb.load(str(RESULTS / "bench_metadata.json"))
    _, graphs = pb.load(str(RESULTS / "bench_graphs.json"))
    assert throughput and metadata and graphs
    assert pb.executor_title(throughput) == "CPU host executor"
    assert pb.executor_title(metadata) == "CPU host executor"
    host_cost = [b for b in graphs if b["base"].startswith("replay/stage_and_")]
    assert pb.executor_title(host_cost) == "CPU host executor, null kernels"
    cuda = [{"base": "expand/fused/cuda"}, {"base": "expand/multipass/cuda"}]
    assert pb.executor_title(cuda) == "CUDA executor"
    assert pb.executor_title([{"base": "expand/fused"}]) == "executor not named in the results"


def test_the_summary_lists_each_plot_with_its_title(tmp_path):
    pytest.importorskip("matplotlib")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "plot_bench.py"), str(RESULTS),
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (tmp_path / "summary.md").read_text()
    assert ("Plots: throughput.png, specgraph run workload: throughput per spec step (CPU host "
            "executor); metadata_fused_vs_multipass.png, expand metadata: fused kernel vs "
            "multi-pass baseline (CPU host executor); host_overhead.png, host cost of stage() + "
            "replay() per draft step (CPU host executor, null kernels)") in summary, summary
    assert all((tmp_path / f).stat().st_size > 0 for f in
               ("throughput.png", "metadata_fused_vs_multipass.png", "host_overhead.png"))
