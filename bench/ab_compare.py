#!/usr/bin/env python3
"""Side-by-side host timing of two builds (A B A B ...): the runtime's host bookkeeping per draft
step (bench_graphs replay/stage_and_round/<mode>/host-null-kernels, counter us_per_step) and the
fused expand kernel against the multi-pass baseline on the host executor (bench_metadata
expand/{fused,multipass}/host). Alternating the two builds in one session cancels the drift of
a shared machine; the load average is printed with every run.

    python3 bench/ab_compare.py OLD_BUILD_DIR NEW_BUILD_DIR [MORE_DIRS] [--rounds 4] [--bucket 256]

Each BUILD_DIR (A, B, ...; ratios are against A) is a host build tree holding bench/bench_graphs and bench/bench_metadata.
Prints, per benchmark, every run's value and the median of each build: the means
(us_per_step, the manual time) and the minima (us_per_step_min: the fastest 32-round window;
device_us_min: the fastest launch), which preemption disturbs least. Not a test: no target.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODES = ("per_step", "round_graphs", "device_steps", "device_depth")


def run(binary, bench_filter, repetitions, min_time):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        subprocess.run(
            [binary, f"--benchmark_filter={bench_filter}",
             f"--benchmark_repetitions={repetitions}", f"--benchmark_min_time={min_time}s",
             "--benchmark_report_aggregates_only=true", f"--benchmark_out={out}",
             "--benchmark_out_format=json"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)["benchmarks"]
    finally:
        os.unlink(out)


def medians(benchmarks, key):
    """{run_name: the median aggregate's `key` (a counter, or real_time)}."""
    return {b["run_name"]: b[key] for b in benchmarks if b.get("aggregate_name") == "median"}


def one_round(build, bucket):
    graphs = run(os.path.join(build, "bench", "bench_graphs"),
                 f"replay/stage_and_round/.*/host-null-kernels/bucket:{bucket}/", 5, 0.2)
    expand = run(os.path.join(build, "bench", "bench_metadata"),
                 f"expand/(fused|multipass)/host/bucket:{bucket}/topk:8/page_size:16/step:4/",
                 5, 0.2)
    values = {}
    # The mean per step (us_per_step), and the fastest 32-round window (us_per_step_min), which
    # preemption on a shared machine disturbs least.
    for key in ("us_per_step", "us_per_step_min"):
        for name, v in medians(graphs, key).items():
            values[key.replace("us_per_step", "step") + " " + name.split("/")[2]] = v
    for key, label in (("real_time", "us"), ("device_us_min", "min us")):
        for name, v in medians(expand, key).items():
            values[label + " " + name.split("/")[1]] = v
    for label in ("us", "min us"):
        if f"{label} fused" in values and f"{label} multipass" in values:
            values[f"{label} fused lead x"] = (values[f"{label} multipass"] /
                                               values[f"{label} fused"])
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="+", help="two or more host build trees, run in turn")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--bucket", type=int, default=256)
    a = ap.parse_args()
    labels = [chr(ord("A") + i) for i in range(len(a.builds))]
    runs = {label: [] for label in labels}
    for r in range(a.rounds):
        for label, build in zip(labels, a.builds):
            load = os.getloadavg()[0]
            v = one_round(build, a.bucket)
            runs[label].append((load, v))
            print(f"round {r} {label} load {load:.2f} " +
                  " ".join(f"{k}={x:.3f}" for k, x in v.items()), flush=True)
    print(f"\nmedian of {a.rounds} rounds; " +
          ", ".join(f"{label} = {b}" for label, b in zip(labels, a.builds)))
    print(f"  {'':28s} " + " ".join(f"{label:>9s}" for label in labels) +
          "".join(f"  {label}/A" for label in labels[1:]))
    for k in runs["A"][0][1]:
        m = [statistics.median(v[k] for _, v in runs[label]) for label in labels]
        print(f"  {k:28s} " + " ".join(f"{x:9.3f}" for x in m) +
              "".join(f" {x / m[0]:5.2f}" for x in m[1:]))
    loads = [load for lst in runs.values() for load, _ in lst]
    print(f"  load average (1 min) over the runs: {min(loads):.2f} - {max(loads):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
