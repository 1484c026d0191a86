#!/usr/bin/env python3
"""answers.py WORK_DIR: the answers of a scripts/gpu-check.sh run to the questions it must answer
(docs/gpu-check.md), from the steps' statuses, notes, counts and the JSON they left
in WORK_DIR (status/, notes/, counts/, logs/). Writes WORK_DIR/answers.json (a list of {id,
question, answered, text}) and WORK_DIR/answers.txt ("answer ID: TEXT" lines). An answer that
cannot be given says why: the step's status and note, or what is missing."""
import glob
import json
import os
import re
import sys

QUESTIONS = [
    ("capture", "capture time and graph memory of the default table, per replay mode"),
    ("step_time", "per-step device time and host launch time, buckets 1/64/256"),
    ("expand", "fused expand kernel vs the multi-kernel baseline and the torch op chain"),
    ("main_job", "specgraph run --executor cuda against its float64 reference"),
    ("sanitizers", "memcheck and initcheck"),
    ("while_round", "the WHILE (device-depth) round against per-step replay, same tables"),
    ("csr", "CSR kv_indptr/kv_indices: one step and a whole round against the torch op chain"),
    ("verify", "verify metadata (FA3 cascade, FlashInfer with packed mask): build time per bucket"),
    ("extend", "draft-extend metadata: the extend step's CUDA tests, device time per bucket, and "
               "the main job's extend step"),
    ("round", "the round after verify (acceptance, commit, next round): the round step's CUDA "
              "tests, device time and rounds per second of the three launches chained, launches "
              "and host syncs per round; the whole round as one graph (launch_device_rounds) "
              "against the host-driven round: rounds per second and GPU idle time between rounds "
              "at batch 1, 4, 16, 64"),
]
BUCKETS = (1, 64, 256)


class Missing(Exception):
    """Why an answer cannot be given."""


def read(work, kind, step):
    try:
        with open(os.path.join(work, kind, step), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def counts(work, step):
    out = {}
    for line in read(work, "counts", step).splitlines():
        m = re.match(r"([^=~]+)[=~](.*)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def why_not(work, step):
    status = read(work, "status", step) or "not run"
    note = read(work, "notes", step).splitlines()
    return f"{step} {status}" + (f": {note[0]}" if note else "")


SCALE = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3, "u": 1e-6, "n": 1e-9,
         "Ki": 1024.0, "Mi": 1024.0 ** 2, "Gi": 1024.0 ** 3, "Ti": 1024.0 ** 4}
CONSOLE_RE = re.compile(r"^(\S+)\s+([0-9.]+) (ns|us|ms|s)\s+[0-9.]+ (?:ns|us|ms|s)\s+\d+(.*)$")
ERROR_RE = re.compile(r"^(\S+)\s+ERROR OCCURRED: '?(.*?)'?\s*$")
COUNTER_RE = re.compile(r"(\w+)=([0-9.]+(?:e[-+]?\d+)?)(Ki|Mi|Gi|Ti|[kMGTmun])?(?:/s)?")


def console_runs(path):
    """The benchmarks of a console log (bench_NAME.console, written line-buffered): the fallback
    for a JSON file the deadline cut short. Counters are read back from their human-readable
    form (3-4 significant digits), times from the real-time column."""
    runs = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = ERROR_RE.match(line.rstrip())
            if m:
                runs.append(dict(name=m.group(1), error_occurred=True, error_message=m.group(2)))
                continue
            m = CONSOLE_RE.match(line.rstrip())
            if not m or "/" not in m.group(1):
                continue
            b = dict(name=m.group(1), real_time=float(m.group(2)), time_unit=m.group(3),
                     from_console=True)
            for k, v, unit in COUNTER_RE.findall(m.group(4)):
                b[k] = float(v) * SCALE[unit or ""]
            runs.append(b)
    return runs


def bench(work, name, step="benchmarks"):
    """[entry] of logs/bench_NAME.json; else, when the JSON is missing or cut short, the console
    log's (logs/bench_NAME.console); Missing when neither holds a benchmark."""
    path = os.path.join(work, "logs", f"bench_{name}.json")
    console = os.path.join(work, "logs", f"bench_{name}.console")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        runs = [b for b in doc.get("benchmarks", []) if b.get("run_type", "iteration") == "iteration"]
    except (OSError, ValueError) as e:
        why = "no" if isinstance(e, OSError) else "incomplete (the run was cut short):"
        try:
            runs = console_runs(console)
        except OSError:
            raise Missing(f"{why} bench_{name}.json and no console log ({why_not(work, step)})")
        if not runs:
            raise Missing(f"{why} bench_{name}.json, and its console log holds no benchmark "
                          f"({why_not(work, step)})")
        return runs
    if not runs:
        raise Missing(f"bench_{name}.json holds no benchmark ({why_not(work, step)})")
    return runs


def field(b, key):
    m = re.search(rf"(?:^|/){key}:(\d+)", b["name"])
    return int(m.group(1)) if m else None


def us(b):
    """The benchmark's (manual) time in microseconds."""
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b.get("time_unit", "ns")]
    return b["real_time"] * scale


def fmt(x):
    return f"{x:.3g}"


def pick(runs, prefix, **args):
    for b in runs:
        if b["name"].startswith(prefix) and all(field(b, k) == v for k, v in args.items()):
            if b.get("error_occurred"):
                raise Missing(f"{b['name']}: {b.get('error_message', 'error')}")
            return b
    raise Missing(f"no {prefix} {args} in the JSON")


def capture(work):
    runs = bench(work, "capture_table")
    parts = []
    for mode in ("per_step", "round_graphs", "device_steps", "device_depth"):
        b = pick(runs, f"lifecycle/capture_table/{mode}/cuda")
        parts.append(f"{mode} {int(b.get('graphs', 0))} graphs in {fmt(us(b) / 1e3)} ms, "
                     f"{fmt(b.get('graph_device_bytes', 0) / (1 << 20))} MiB")
    return "; ".join(parts)


def step_time(work):
    runs = bench(work, "step_time")
    parts = []
    for bucket in BUCKETS:
        steps = []
        for step in (0, 4):
            g = pick(runs, "replay/step_device_time/graph/cuda", bucket=bucket, step=step)
            e = pick(runs, "replay/step_device_time/eager/cuda", bucket=bucket, step=step)
            steps.append(f"step {step} graph {fmt(us(g))} us device, "
                         f"{fmt(g.get('host_submit_us', 0))} us host launch (eager "
                         f"{fmt(us(e))} / {fmt(e.get('host_submit_us', 0))})")
        parts.append(f"bucket {bucket}: " + ", ".join(steps))
    return "; ".join(parts)


def expand(work):
    runs = bench(work, "expand")
    parts = []
    for bucket in BUCKETS:
        for step in (0, 4):
            f = pick(runs, "expand/fused/cuda", bucket=bucket, topk=8, page_size=16, step=step)
            m = pick(runs, "expand/multipass/cuda", bucket=bucket, topk=8, page_size=16, step=step)
            parts.append(f"bucket {bucket} step {step}: fused {fmt(us(f))} us, 7-kernel "
                         f"{fmt(us(m))} us ({fmt(us(m) / us(f))}x)")
    text = "; ".join(parts)
    try:
        with open(os.path.join(work, "logs", "peer-torch.json"), encoding="utf-8") as fh:
            peer = json.load(fh)
        rows = [r for r in peer["results"] if r.get("mode") == "graph"]
        if not rows:
            raise KeyError(f"no CUDA-graph timings in peer-torch.json (device {peer.get('device')})")
        text += "; torch op chain (CUDA graphs): " + ", ".join(
            f"bucket {r['bucket']} step {r['step']} {fmt(r['torch_chain_us'])} us vs specgraph "
            f"{fmt(r['fused_us'])} us ({fmt(r['ratio'])}x)" for r in rows)
        if peer.get("failures"):
            text += f"; {peer['failures']} peer outputs DIFFER"
    except (OSError, ValueError, KeyError) as e:
        text += f"; torch op chain: not answered ({why_not(work, 'peer-torch')}; {e})"
    return text


def main_job(work):
    c = counts(work, "run-compare")
    status = read(work, "status", "run-compare")
    if status != "ok" or "cuda_max_relative_error" not in c:
        raise Missing(why_not(work, "run-compare"))
    return (f"verified: max relative error {c['cuda_max_relative_error']} (tolerance "
            f"{c.get('tolerance', '?')}) over {c.get('rounds', '?')} rounds, every round checked; "
            f"the host executor's report agrees ({c.get('host_max_relative_error', '?')}); "
            f"extend step {c.get('cuda_extend_max_relative_error', '?')} over "
            f"{c.get('extend_rounds', '?')} rounds, fa3 vs csr "
            f"{c.get('cuda_extend_fa3_vs_csr', '?')}, PASSED and AGREE")


def sanitizers(work):
    parts = []
    for tool in ("memcheck", "initcheck"):
        status = read(work, "status", tool)
        if status not in ("ok", "failed", "timeout"):
            raise Missing(why_not(work, tool))
        parts.append(f"{tool} {status}: {read(work, 'notes', tool).splitlines()[0]}")
    return "; ".join(parts)


def while_round(work):
    runs = bench(work, "round")
    parts = []
    for bucket in BUCKETS:
        dev = {m: us(pick(runs, f"replay/round_device_time/{m}/cuda", bucket=bucket))
               for m in ("per_step", "round_graphs", "device_steps", "device_depth")}
        host = {m: pick(runs, f"replay/stage_and_round/{m}/cuda", bucket=bucket)
                .get("us_round_replay", 0) for m in ("per_step", "device_depth")}
        parts.append(f"bucket {bucket}: device {fmt(dev['device_depth'])} us (WHILE) vs "
                     f"{fmt(dev['per_step'])} us per-step ({fmt(dev['device_depth'] / dev['per_step'])}x;"
                     f" round graph {fmt(dev['round_graphs'])}, counter {fmt(dev['device_steps'])});"
                     f" host launch {fmt(host['device_depth'])} vs {fmt(host['per_step'])} us")
    return "; ".join(parts)


def csr(work):
    runs = bench(work, "csr")
    parts = []
    for bucket in (8, 64, 256):
        one = pick(runs, "csr/cuda", bucket=bucket, topk=8, ctx=4096, round=0)
        whole = pick(runs, "csr/cuda", bucket=bucket, topk=8, ctx=4096, round=1)
        parts.append(f"bucket {bucket}: step 4 {fmt(us(one))} us "
                     f"({fmt(one['bytes_written'] / 2**20)} MiB written), round {fmt(us(whole))} us "
                     f"({fmt(whole['bytes_written'] / 2**20)} MiB)")
    text = "topk 8, ctx 4096: " + "; ".join(parts)
    try:
        with open(os.path.join(work, "logs", "peer-csr.json"), encoding="utf-8") as fh:
            peer = json.load(fh)
        rows = [r for r in peer["results"] if r.get("mode") == "graph" and "ratio" in r]
        if not rows:
            raise KeyError(f"no CUDA-graph timings beside bench_csr's in peer-csr.json "
                           f"(device {peer.get('device')})")
        text += "; torch op chain (CUDA graphs): " + ", ".join(
            f"bucket {r['bucket']} {r['what']} {fmt(r['torch_chain_us'])} us "
            f"(torch/specgraph {fmt(r['ratio'])}x)" for r in rows)
        if peer.get("failures"):
            text += f"; the chain's output DIFFERS from specgraph's ({peer['failures']})"
    except (OSError, ValueError, KeyError) as e:
        text += f"; torch op chain: not answered ({why_not(work, 'peer-csr')}; {e})"
    return text


def verify(work):
    runs = bench(work, "verify")
    parts = []
    for bucket in BUCKETS:
        cells = []
        for d in (8, 64):
            fa3 = pick(runs, "verify/cuda", bucket=bucket, D=d, page_size=16, ctx=4096, layout=0)
            fa3_1 = pick(runs, "verify/cuda", bucket=bucket, D=d, page_size=1, ctx=4096, layout=0)
            fi = pick(runs, "verify/cuda", bucket=bucket, D=d, page_size=1, ctx=4096, layout=1)
            cells.append(f"D {d} fa3 {fmt(us(fa3))} us (ps 16) / {fmt(us(fa3_1))} us (ps 1), "
                         f"flashinfer {fmt(us(fi))} us ({fmt(fi['bytes_written'] / 2**20)} MiB "
                         f"written; buffers {fmt(fi['buffer_bytes'] / 2**20)} MiB vs SGLang's "
                         f"{fmt((fi['engine_kv_indices_bytes'] + fi['engine_mask_bytes']) / 2**20)}"
                         " MiB)")
        parts.append(f"bucket {bucket}: " + ", ".join(cells))
    return "ctx 4096, device time: " + "; ".join(parts)


def extend(work):
    """The extend step's tests (must have run), bench_extend's cuda times (bucket 1, 64, 256 at
    page sizes 1 and 64; W 8, M 4096), and the main job's extend step when run-compare passed."""
    status = read(work, "status", "extend")
    if status not in ("ok", "failed", "timeout"):
        raise Missing(why_not(work, "extend"))
    text = f"tests {status}: {read(work, 'notes', 'extend').splitlines()[0]}"
    try:
        runs = bench(work, "extend")
        cells = []
        for bucket in BUCKETS:
            parts = []
            for ps in (1, 64):
                b = pick(runs, "extend/cuda", bucket=bucket, W=8, page_size=ps, M=4096, path=0)
                parts.append(f"ps {ps} {fmt(us(b))} us ({fmt(b['bytes_written'] / 2**20)} MiB "
                             f"written of {fmt(b['buffer_bytes'] / 2**20)} MiB)")
            cells.append(f"bucket {bucket}: " + ", ".join(parts))
        text += "; device time, W 8, M 4096: " + "; ".join(cells)
    except Missing as e:
        text += f"; bench_extend: not answered ({e})"
    c = counts(work, "run-compare")
    if read(work, "status", "run-compare") == "ok" and "cuda_extend_max_relative_error" in c:
        text += (f"; main job extend step: max relative error "
                 f"{c['cuda_extend_max_relative_error']} over {c.get('extend_rounds', '?')} "
                 f"rounds, fa3 vs csr {c.get('cuda_extend_fa3_vs_csr', '?')}")
    else:
        text += f"; main job extend step: not answered ({why_not(work, 'run-compare')})"
    return text


def round_after_verify(work):
    """The round step's tests (must have run) and bench_round's cuda rounds (the round_chain
    selection): device time per round of run_accept + run_commit + run_next_round at buckets 1, 4,
    16, 64, 256 for topk 1 (page size 1) and topk 4 (page size 16), rounds per second, launches
    and host synchronisations per round."""
    status = read(work, "status", "round")
    if status not in ("ok", "failed", "timeout"):
        raise Missing(why_not(work, "round"))
    text = f"tests {status}: {read(work, 'notes', 'round').splitlines()[0]}"
    try:
        runs = bench(work, "round_chain")
        cells = []
        for bucket in (1, 4, 16, 64, 256):
            parts = []
            for topk, ps in ((1, 1), (4, 16)):
                b = pick(runs, "round/cuda", bucket=bucket, topk=topk, page_size=ps)
                parts.append(f"topk {topk} ps {ps} {fmt(us(b))} us ({fmt(1e6 / us(b))} rounds/s)")
            cells.append(f"bucket {bucket}: " + ", ".join(parts))
        b = pick(runs, "round/cuda", bucket=64, topk=4, page_size=16)
        text += (f"; device time per round, num_steps 5: " + "; ".join(cells) +
                 f"; {fmt(b.get('launches_per_round', -1))} launches and "
                 f"{fmt(b.get('host_syncs_per_round', -1))} host syncs per round, host submission "
                 f"{fmt(b.get('host_submit_us', -1))} us at bucket 64")
    except Missing as e:
        text += f"; bench_round: not answered ({e})"
    try:
        text += "; " + device_rounds(bench(work, "device_round"))
    except Missing as e:
        text += f"; bench_device_round: not answered ({e})"
    text += "; " + round_loops(work)
    return text


def round_loops(work):
    """The round step's main-job round loops (logs/round-loop-B.json): per batch, both modes'
    wall and host us per round, graph launches and host syncs per round, and whether the two
    modes were identical and verified."""
    cells = []
    for path in sorted(glob.glob(os.path.join(work, "logs", "round-loop-*.json")),
                       key=lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0)):
        try:
            r = json.load(open(path))
        except (OSError, ValueError) as e:
            cells.append(f"{os.path.basename(path)}: unreadable ({e})")
            continue
        d, h = r.get("device_loop", {}), r.get("host_driven", {})
        cells.append(
            f"batch {r.get('config', {}).get('batch', '?')}: device loop "
            f"{fmt(d.get('wall_us_per_round', -1))} us/round wall, "
            f"{fmt(d.get('host_us_per_round', -1))} host, "
            f"{fmt(d.get('graph_launches', 0) / max(1, d.get('rounds', 1)))} launches and "
            f"{fmt(d.get('host_syncs', 0) / max(1, d.get('rounds', 1)))} host syncs/round vs "
            f"host-driven {fmt(h.get('wall_us_per_round', -1))} wall, "
            f"{fmt(h.get('host_us_per_round', -1))} host, "
            f"{fmt(h.get('graph_launches', 0) / max(1, h.get('rounds', 1)))} launches, "
            f"{fmt(h.get('host_syncs', 0) / max(1, h.get('rounds', 1)))} syncs; "
            f"{'identical' if r.get('identical') else 'NOT identical'}, "
            f"{r.get('verified_rounds', 0)} rounds verified (max rel err "
            f"{r.get('max_relative_error', '?')})")
    if not cells:
        return "main job round loop: not run (no logs/round-loop-*.json)"
    return "main job round loop (rounds-per-launch 8, 40 rounds): " + "; ".join(cells)


def device_rounds(runs):
    """bench_device_round's cuda runs (the device_round selection): K = 16 rounds as one
    launch_device_rounds(K) (device loop) against the same rounds driven from the host (host
    loop), rounds per second and GPU idle per round at buckets 1, 4, 16, 64, launches, syncs and
    host us per round at bucket 64."""
    cells = []
    for bucket in (1, 4, 16, 64):
        parts = []
        for topk, ps in ((1, 1), (4, 16)):
            d = pick(runs, "device_round/device_loop/cuda", bucket=bucket, topk=topk, page_size=ps)
            h = pick(runs, "device_round/host_loop/cuda", bucket=bucket, topk=topk, page_size=ps)
            parts.append(f"topk {topk} ps {ps} device loop {fmt(d.get('rounds_per_s', -1))} "
                         f"rounds/s (GPU idle {fmt(d.get('gpu_idle_us_per_round', -1))} us/round)"
                         f" vs host loop {fmt(h.get('rounds_per_s', -1))} rounds/s (idle >= "
                         f"{fmt(h.get('gpu_idle_us_per_round', -1))} us/round)")
        cells.append(f"bucket {bucket}: " + ", ".join(parts))
    d = pick(runs, "device_round/device_loop/cuda", bucket=64, topk=4, page_size=16)
    h = pick(runs, "device_round/host_loop/cuda", bucket=64, topk=4, page_size=16)
    per = "launches_per_round", "syncs_per_round", "host_us_per_round"
    return ("whole rounds, num_steps 5, K = 16 per launch_device_rounds: " + "; ".join(cells) +
            "; per round at bucket 64 (topk 4 ps 16) launches / syncs / host us: device loop " +
            " / ".join(fmt(d.get(k, -1)) for k in per) + ", host loop " +
            " / ".join(fmt(h.get(k, -1)) for k in per))



# Answers whose function is not named by the id (`round` would shadow the builtin).
ANSWER_FUNCTIONS = {"round": round_after_verify}


def main(argv):
    if len(argv) != 1:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    work = argv[0]
    dry = os.environ.get("SG_DRY") == "1"
    out = []
    for qid, question in QUESTIONS:
        if dry:
            out.append(dict(id=qid, question=question, answered=False,
                            text="not answered: dry run (no GPU)"))
            continue
        try:
            text, answered = ANSWER_FUNCTIONS.get(qid, globals().get(qid))(work), True
        except Missing as e:
            text, answered = f"not answered: {e}", False
        except Exception as e:  # a malformed file must not cost the other answers
            text, answered = f"not answered: {type(e).__name__}: {e}", False
        out.append(dict(id=qid, question=question, answered=answered, text=text))
    with open(os.path.join(work, "answers.json"), "w", encoding="utf-8") as f:
        json.dump(out, f)
    with open(os.path.join(work, "answers.txt"), "w", encoding="utf-8") as f:
        for a in out:
            f.write(f"answer {a['id']}: {a['text']}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
