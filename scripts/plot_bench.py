#!/usr/bin/env python3
"""Turns the benchmark JSON of scripts/run-benchmarks.sh into PNG plots and summary.md.

usage: plot_bench.py RESULTS_DIR OUT_DIR
       plot_bench.py --peer-torch FILE OUT_DIR    (bench/peer_torch.py --json FILE alone)
  throughput.png          draft tokens/s per spec step and bucket, graph vs eager
  metadata_fused_vs_multipass.png   fused expand kernel vs the multi-pass baseline
  host_overhead.png       host cost of stage() + replay() per draft step
  peer_torch.png          specgraph's fused op vs today's chain of torch ops (when RESULTS_DIR
                          holds peer-torch.json, or with --peer-torch)
  summary.md              the numbers the README quotes
"""
import json
import os
import re
import sys

plt = None  # matplotlib.pyplot, imported by main() (the titles and tables need no matplotlib)

# The executor part of a benchmark name (expand/fused/host/..., replay/.../host-null-kernels/...)
# and how a plot's title names it: every number of a CPU run is the host executor's, never a GPU's.
EXECUTORS = {"host": "CPU host executor", "host-null-kernels": "CPU host executor, null kernels",
             "cuda": "CUDA executor"}


def executor_title(rows):
    """The executors the rows ran on, as a title names them ("CPU host executor")."""
    found = sorted({part for b in rows for part in b["base"].split("/") if part in EXECUTORS})
    return ", ".join(EXECUTORS[name] for name in found) or "executor not named in the results"


def titled(ax, title, rows):
    ax.set_title(f"{title}\n({executor_title(rows)})", fontsize=10)
    return f"{title} ({executor_title(rows)})"


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rows = []
    for b in doc["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        name = b["name"].replace("/manual_time", "")
        args = dict(re.findall(r"(\w+):(\d+)", name))
        b["args"] = {k: int(v) for k, v in args.items()}
        b["base"] = re.sub(r"/\w+:\d+", "", name)
        rows.append(b)
    return doc.get("context", {}), rows


def seconds(b):
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    return b["real_time"] * scale


def plot_throughput(rows, out):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    buckets = sorted({b["args"]["bucket"] for b in rows})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lines = []
    for i, bucket in enumerate(buckets):
        for mode, style in (("graph", "-"), ("eager", "--")):
            pts = sorted(
                (b["args"]["step"], b["items_per_second"])
                for b in rows
                if b["args"]["bucket"] == bucket and f"/{mode}/" in b["base"]
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o",
                        color=colors[i % len(colors)], label=f"bucket {bucket}, {mode}")
                lines.append((bucket, mode, pts))
    ax.set_xticks(sorted({b["args"]["step"] for b in rows}))
    ax.set_xlabel("draft step s (decode length s + 1)")
    ax.set_ylabel("draft tokens / s")
    ax.set_yscale("log")
    title = titled(ax, "specgraph run workload: throughput per spec step", rows)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=110)
    return lines, title


def plot_metadata(rows, out):
    sel = [b for b in rows if b["base"].startswith("expand/")
           and b["args"].get("topk") == 8 and b["args"].get("page_size") == 16]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ratios = {}
    for step, marker in ((0, "o"), (4, "s")):
        for variant, style in (("fused", "-"), ("multipass", "--"), ("multipass_loops", ":")):
            pts = sorted((b["args"]["bucket"], seconds(b) * 1e6) for b in sel
                         if b["args"]["step"] == step and f"/{variant}/" in b["base"])
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker=marker,
                        label=f"{variant}, step {step}")
        fused = {b["args"]["bucket"]: seconds(b) for b in sel
                 if b["args"]["step"] == step and "/fused/" in b["base"]}
        multi = {b["args"]["bucket"]: seconds(b) for b in sel
                 if b["args"]["step"] == step and "/multipass/" in b["base"]}
        loops = {b["args"]["bucket"]: seconds(b) for b in sel
                 if b["args"]["step"] == step and "/multipass_loops/" in b["base"]}
        for bucket in fused:
            if bucket in multi:
                ratios[(bucket, step)] = (multi[bucket] / fused[bucket],
                                          loops[bucket] / fused[bucket] if bucket in loops
                                          else float("nan"))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bucket (requests), topk 8, page size 16")
    ax.set_ylabel("time per launch set (us)")
    title = titled(ax, "expand metadata: fused kernel vs multi-pass baseline", sel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "metadata_fused_vs_multipass.png"), dpi=110)
    return ratios, title


def plot_host_overhead(rows, out):
    # replay/stage_and_round/<mode>/<executor>: per_step (one launch per step), round_graphs
    # (one whole-round launch), device_steps (one graph replayed per step), device_depth (one
    # launch, the device decides the depth).
    sel = [b for b in rows if b["base"].startswith("replay/stage_and_")]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    table = []
    for variant in sorted({"/".join(b["base"].split("/")[1:]) for b in sel}):
        label = variant.replace("stage_and_round/", "")
        pts = sorted((b["args"]["bucket"], b["us_per_step"], b["us_stage"], b["us_replay"],
                      b.get("us_round_replay", 0.0))
                     for b in sel if b["base"].endswith("/" + variant))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{label}: per step")
        ax.plot([p[0] for p in pts], [p[3] for p in pts], "--", marker=".",
                label=f"{label}: replay share")
        table += [(label,) + p for p in pts]
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bucket (requests), topk 8, 5 steps")
    ax.set_ylabel("host microseconds")
    title = titled(ax, "host cost of stage() + replay() per draft step", sel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "host_overhead.png"), dpi=110)
    return table, title


def plot_peer_torch(doc, out):
    """bench/peer_torch.py's JSON: time per call against query rows, fused vs torch chain."""
    rows = doc["results"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode in sorted({r["mode"] for r in rows}):
        for step in sorted({r["step"] for r in rows}):
            sel = sorted((r["rows"], r["fused_us"], r["torch_chain_us"]) for r in rows
                         if r["mode"] == mode and r["step"] == step)
            if not sel:
                continue
            x = [p[0] for p in sel]
            ax.plot(x, [p[1] for p in sel], "-", marker="o",
                    label=f"specgraph, {mode}, step {step}")
            ax.plot(x, [p[2] for p in sel], "--", marker="s",
                    label=f"torch chain, {mode}, step {step}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(f"query rows (bucket x topk {doc['config']['topk']})")
    ax.set_ylabel(f"us per call ({doc['timing']})")
    ax.set_title(f"expand metadata on {doc['device']}: fused op vs torch ops")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "peer_torch.png"), dpi=110)
    md = [f"\nbench/peer_torch.py on {doc['device']} ({doc['timing']}, torch {doc['torch']})", "",
          "| bucket | step | mode | specgraph us | torch chain us | chain / specgraph |",
          "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["mode"], r["step"], r["bucket"])):
        md.append(f"| {r['bucket']} | {r['step']} | {r['mode']} | {r['fused_us']:.2f} | "
                  f"{r['torch_chain_us']:.2f} | {r['ratio']:.2f}x |")
    if doc.get("host_overhead_us"):
        md.append("\nHost overhead per call (us): " + ", ".join(
            f"{k} {v}" for k, v in doc["host_overhead_us"].items()))
    return md


def main():
    global plt
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    plt = matplotlib.pyplot
    if len(sys.argv) == 4 and sys.argv[1] == "--peer-torch":
        os.makedirs(sys.argv[3], exist_ok=True)
        with open(sys.argv[2]) as f:
            md = plot_peer_torch(json.load(f), sys.argv[3])
        with open(os.path.join(sys.argv[3], "summary.md"), "w") as f:
            f.write("\n".join(md).lstrip() + "\n")
        print("\n".join(md))
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    results, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    ctx, meta = load(os.path.join(results, "bench_metadata.json"))
    _, graphs = load(os.path.join(results, "bench_graphs.json"))
    _, thr = load(os.path.join(results, "bench_throughput.json"))
    lines, throughput_title = plot_throughput(thr, out)
    ratios, metadata_title = plot_metadata(meta, out)
    host, host_title = plot_host_overhead(graphs, out)
    md = [f"Machine: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz, "
          f"{ctx.get('date', '')}; specgraph built Release (Google Benchmark's own library: "
          f"{ctx.get('library_build_type', '?')} build); executor: "
          f"{executor_title(meta + graphs + thr)}", "",
          f"Plots: throughput.png, {throughput_title}; metadata_fused_vs_multipass.png, "
          f"{metadata_title}; host_overhead.png, {host_title}", ""]
    md += ["| expand metadata, topk 8, page size 16 | multi-pass / fused time "
           "| nested-loop passes / fused time (the conservative ratio) |", "|---|---|---|"]
    for (bucket, step), (r, loops) in sorted(ratios.items()):
        md.append(f"| bucket {bucket}, step {step} | {r:.2f}x | {loops:.2f}x |")
    md += ["", "| mode / executor | bucket | us per step | stage() us | replay us per step "
           "| replay us per round |", "|---|---|---|---|---|---|"]
    for kind, bucket, per_step, stage, replay, per_round in host:
        md.append(f"| {kind} | {bucket} | {per_step:.3f} | {stage:.3f} | {replay:.3f} "
                  f"| {per_round:.3f} |")
    md += ["", "| bucket | mode | draft tokens/s at step 0 .. 4 |", "|---|---|---|"]
    for bucket, mode, pts in lines:
        md.append(f"| {bucket} | {mode} | " + ", ".join(f"{p[1]:,.0f}" for p in pts) + " |")
    table = [b for b in graphs if b["base"].startswith("lifecycle/capture_table/")]
    if table:
        md += ["", "Capture + instantiate of the whole default table (buckets up to 256, 5 steps, "
               "metadata kernels only):", "",
               "| mode / executor | graphs | nodes | ms | graph device bytes |",
               "|---|---|---|---|---|"]
        for b in table:
            md.append(f"| {'/'.join(b['base'].split('/')[2:])} | {int(b.get('graphs', 0))} | "
                      f"{int(b.get('graph_nodes', 0))} | {seconds(b) * 1e3:.2f} | "
                      f"{int(b.get('graph_device_bytes', 0)):,} |")
    for name in ("peer-torch.json", "peer_torch.json"):
        if os.path.exists(os.path.join(results, name)):
            with open(os.path.join(results, name)) as f:
                md += plot_peer_torch(json.load(f), out)
            break
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
