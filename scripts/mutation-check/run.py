#!/usr/bin/env python3
"""Mutation check: does the test suite catch plausible bugs?

Each mutation in mutations.json (file, exact text to find, its replacement, the tests expected
to catch it, and why it is plausible) is applied, one at a time, to a scratch copy of the
tracked sources; the copy is rebuilt host-only (incrementally) and ctest runs (the package and
benchmark smoke tests left out). A mutation is caught when ctest fails; the report also says
whether the expected tests were among the failures.

  scripts/mutation-check/run.py [--scratch DIR] [--only ID,ID] [--json FILE] [--jobs N]

An entry may name a "command" instead of relying on ctest: for what only a script checks (the
configure checks of tests/scripts/configure_test.sh, the installed-package test ctest leaves out
here). It runs after the rebuild, in the scratch source copy, with {src} and {build} replaced by
the scratch folders and {root} by this repository (for what the copy leaves out: the fuzz
corpora); the mutation is caught when it fails.

Takes a while (a rebuild and a test run per mutation, python.pytest included when the Python
package builds): 82 minutes for 47 mutations on the 2-core CI machine under other load (README),
so CI does not run it. Every new
kernel or runtime feature adds its mutations to mutations.json.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, cwd=None, env=None, timeout=None):
    return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def sync_sources(src):
    files = run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT).stdout.split()
    for f in files:
        if f.startswith(("tests/fuzz/corpus/", "docs/bench/")):
            continue
        target = os.path.join(src, f)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        source = os.path.join(ROOT, f)
        if os.path.isfile(source):
            with open(source, "rb") as a:
                data = a.read()
            if not os.path.exists(target) or open(target, "rb").read() != data:
                with open(target, "wb") as b:
                    b.write(data)
            shutil.copymode(source, target)  # scripts the tests run stay executable


def failed_tests(output):
    return re.findall(r"^\s*\d+ - (\S+)", output.split("The following tests FAILED:")[-1],
                      re.M) if "The following tests FAILED:" in output else []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scratch", default="/tmp/specgraph-mutants")
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--jobs", default=str(os.cpu_count() or 2))
    args = ap.parse_args()
    mutations = json.load(open(os.path.join(os.path.dirname(__file__), "mutations.json")))
    if args.only:
        wanted = set(args.only.split(","))
        mutations = [m for m in mutations if m["id"] in wanted]
    src, build = os.path.join(args.scratch, "src"), os.path.join(args.scratch, "build")
    os.makedirs(src, exist_ok=True)
    sync_sources(src)
    env = dict(os.environ, SPECGRAPH_PROPERTY_CASES="2000")
    configure = ["cmake", "-S", src, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 "-DSPECGRAPH_ENABLE_CUDA=OFF", "-DSPECGRAPH_BUILD_BENCH=OFF",
                 "-DSPECGRAPH_TEST_TIMEOUT=300"]
    build_cmd = ["cmake", "--build", build, "-j", args.jobs]
    test_cmd = ["ctest", "--test-dir", build, "-j", args.jobs, "-E", "package|bench",
                "--output-on-failure"]
    print("== baseline: configure, build, test", flush=True)
    for cmd in (configure, build_cmd, test_cmd):
        r = run(cmd, env=env)
        if r.returncode != 0:
            print(r.stdout[-4000:])
            sys.exit("baseline failed: " + " ".join(cmd))
    results = []
    for m in mutations:
        path = os.path.join(src, m["file"])
        original = open(path).read()
        count = original.count(m["find"])
        t0 = time.time()
        if count != 1:
            outcome, failed = "invalid (found %d times)" % count, []
        else:
            open(path, "w").write(original.replace(m["find"], m["replace"]))
            try:
                b = run(build_cmd, env=env)
                if b.returncode != 0:
                    outcome, failed = "invalid (does not compile)", []
                elif "command" in m:
                    command = (m["command"].replace("{src}", src).replace("{build}", build)
                               .replace("{root}", ROOT))
                    t = run(["bash", "-c", command], cwd=src, env=env, timeout=3600)
                    failed = [m["expect"]] if t.returncode != 0 else []
                    outcome = "caught" if t.returncode != 0 else "SURVIVED"
                else:
                    t = run(test_cmd, env=env, timeout=3600)
                    failed = failed_tests(t.stdout)
                    outcome = "caught" if t.returncode != 0 else "SURVIVED"
            finally:
                open(path, "w").write(original)
        expected = [f for f in failed if re.search(m["expect"], f)]
        results.append({"id": m["id"], "outcome": outcome, "seconds": round(time.time() - t0),
                        "expected_failed": bool(expected), "failed": failed[:20]})
        mark = "" if outcome != "caught" or expected else "  (not by the expected test)"
        print("%-32s %-28s %4d s  %d tests failed%s" % (m["id"], outcome, time.time() - t0,
                                                       len(failed), mark), flush=True)
    run(build_cmd, env=env)  # leave the scratch build matching the sources
    caught = sum(r["outcome"] == "caught" for r in results)
    survived = [r["id"] for r in results if r["outcome"] == "SURVIVED"]
    invalid = [r["id"] for r in results if r["outcome"].startswith("invalid")]
    print("\n%d mutations: %d caught, %d survived%s, %d invalid%s" % (
        len(results), caught, len(survived), (" (" + ", ".join(survived) + ")") if survived else "",
        len(invalid), (" (" + ", ".join(invalid) + ")") if invalid else ""))
    if args.json:
        json.dump({"results": results, "caught": caught, "survived": survived,
                   "invalid": invalid}, open(args.json, "w"), indent=1)
    sys.exit(1 if survived or invalid else 0)


if __name__ == "__main__":
    main()
