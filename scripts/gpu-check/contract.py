#!/usr/bin/env python3
"""Checks the results folder of scripts/gpu-check.sh against its contract.

Usage: contract.py [--dry-run] RESULTS_DIR

The contract (what the device tool can bring back and what readers rely on):
  * at most 8 files in RESULTS_DIR, none deeper than 2 folders, names of letters, digits, '.', '_'
    and '-' only, each at most 16 MiB;
  * summary.txt present, UTF-8, naming every step;
  * summary.json present and parseable: every step of the issue's list, in order, each with a
    status in ok|failed|timeout|skipped|refused, numeric seconds and budget, a note and counts;
    the GPU budgets add up to at most the limit (480 s) with the packaging reserve;
  * logs.tar.gz readable, holding every step's log (and, where the step ran, ctest's JUnit XML,
    the run-compare JSON and the benchmark JSON).
With --dry-run also: the summary says dry_run, every step that needs a GPU is 'skipped' with a
note saying 'dry run', and no step failed or timed out.
Exit status 0 when the contract holds; 1 with one line per violation otherwise.
"""
import json
import os
import re
import sys
import tarfile

STEPS = ["machine", "deps", "build", "tests", "run-compare", "memcheck", "initcheck", "python",
         "torch-example", "benchmarks", "peer-torch"]
GPU_STEPS = {"tests", "run-compare", "memcheck", "initcheck", "python", "torch-example",
             "benchmarks", "peer-torch"}
STATUSES = {"ok", "failed", "timeout", "skipped", "refused"}
MAX_FILES, MAX_DEPTH, MAX_BYTES, LIMIT_SECONDS = 8, 2, 16 << 20, 480
NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")


def check(results, dry_run):
    problems = []
    files = []
    for root, dirs, names in os.walk(results):
        rel = os.path.relpath(root, results)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        for d in dirs:
            if not NAME_RE.match(d):
                problems.append(f"folder name not allowed by the device tool: {d!r}")
        for n in names:
            path = os.path.join(root, n)
            files.append(os.path.relpath(path, results))
            if not NAME_RE.match(n):
                problems.append(f"file name not allowed by the device tool: {n!r}")
            if depth > MAX_DEPTH:
                problems.append(f"{files[-1]} is more than {MAX_DEPTH} folders deep")
            if os.path.islink(path) or not os.path.isfile(path):
                problems.append(f"{files[-1]} is not a plain file")
            elif os.path.getsize(path) > MAX_BYTES:
                problems.append(f"{files[-1]} is over 16 MiB")
    if len(files) > MAX_FILES:
        problems.append(f"{len(files)} files in {results} (at most {MAX_FILES}): {sorted(files)}")

    # summary.json
    summary = None
    try:
        with open(os.path.join(results, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError) as e:
        problems.append(f"summary.json missing or not JSON: {e}")
    steps = []
    if summary is not None:
        steps = summary.get("steps", [])
        names = [s.get("name") for s in steps]
        if names != STEPS:
            problems.append(f"summary.json steps {names} != {STEPS}")
        for s in steps:
            n = s.get("name")
            if s.get("status") not in STATUSES:
                problems.append(f"step {n}: status {s.get('status')!r} not in {sorted(STATUSES)}")
            for key in ("seconds", "budget_seconds"):
                if not isinstance(s.get(key), (int, float)):
                    problems.append(f"step {n}: {key} is not a number")
            if not isinstance(s.get("note"), str):
                problems.append(f"step {n}: no note")
            if not isinstance(s.get("counts"), dict):
                problems.append(f"step {n}: counts is not an object")
        budgets = summary.get("gpu_budgets", {})
        if sorted(budgets) != sorted(STEPS):
            problems.append(f"gpu_budgets names {sorted(budgets)}")
        total = sum(v for v in budgets.values() if isinstance(v, (int, float)))
        reserve = summary.get("packaging_reserve_seconds", 0)
        if total + reserve > LIMIT_SECONDS:
            problems.append(f"GPU budgets {total} s + packaging {reserve} s > {LIMIT_SECONDS} s")
        if summary.get("budget_seconds") != total:
            problems.append(f"budget_seconds {summary.get('budget_seconds')} != sum {total}")
        for key in ("commit", "describe", "started"):
            if not isinstance(summary.get(key), str):
                problems.append(f"summary.json: no {key}")
        if summary.get("complete") is not True:
            problems.append("summary.json is not marked complete (the run was cut short)")
        if dry_run:
            if summary.get("dry_run") is not True:
                problems.append("summary.json does not say dry_run")
            for s in steps:
                if s.get("name") in GPU_STEPS and s.get("status") != "skipped":
                    problems.append(f"dry run: GPU step {s.get('name')} is {s.get('status')!r}")
                if s.get("name") in GPU_STEPS and s.get("status") == "skipped" and \
                        not re.search(r"dry run|skipped: no |not selected|not run|not reached", s.get("note", "")):
                    problems.append(f"dry run: {s.get('name')} skipped without saying why")
                if s.get("status") in ("failed", "timeout"):
                    problems.append(f"dry run: step {s.get('name')} {s.get('status')}: {s.get('note')}")

    # summary.txt
    try:
        with open(os.path.join(results, "summary.txt"), encoding="utf-8") as f:
            text = f.read()
        for n in STEPS:
            if not re.search(rf"^{re.escape(n)}\s", text, re.M):
                problems.append(f"summary.txt does not list step {n}")
    except (OSError, UnicodeDecodeError) as e:
        problems.append(f"summary.txt missing or unreadable: {e}")

    # logs.tar.gz
    members = set()
    try:
        with tarfile.open(os.path.join(results, "logs.tar.gz"), "r:gz") as t:
            for m in t.getmembers():
                members.add(m.name)
                if m.isfile():
                    t.extractfile(m).read()  # every member must decompress
    except (OSError, tarfile.TarError, EOFError) as e:
        problems.append(f"logs.tar.gz missing or unreadable: {e}")
    else:
        by_status = {s.get("name"): s.get("status") for s in steps}
        ran = {s.get("name") for s in steps
               if not re.match(r"not run|not reached", s.get("note", ""))}
        for n in STEPS:
            if n in ran and f"logs/{n}.log" not in members:
                problems.append(f"logs.tar.gz has no logs/{n}.log")
        if by_status.get("tests") == "ok" and "logs/ctest-junit.xml" not in members:
            problems.append("logs.tar.gz has no logs/ctest-junit.xml though the tests passed")
        if by_status.get("run-compare") == "ok" and \
                not {"logs/run-cuda.json", "logs/run-host.json"} <= members:
            problems.append("logs.tar.gz lacks logs/run-cuda.json or logs/run-host.json")
        if by_status.get("benchmarks") == "ok" and \
                not any(re.match(r"logs/bench_\w+\.json$", m) for m in members):
            problems.append("logs.tar.gz has no benchmark JSON though the benchmarks ran")
    return problems, len(files), len(members)


def main(argv):
    dry_run = "--dry-run" in argv
    args = [a for a in argv if a != "--dry-run"]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2])
        return 2
    problems, nfiles, nmembers = check(args[0], dry_run)
    for p in problems:
        print("contract:", p)
    if problems:
        return 1
    print(f"{nfiles} files, summary.txt and summary.json parse, all {len(STEPS)} steps have a "
          f"status, logs.tar.gz holds {nmembers} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
