#!/usr/bin/env python3
"""The shell examples of the documents, run as pasted and compared with the output they show.

A ```sh block marked `<!-- tested: ... -->` on the line before it runs under bash from the
repository root, with `scripts/specgraph` meaning the program under test (--program; the wrapper
would build it first); the ```text block right after it is what it must print, exactly. Every
document given must hold at least one such block (a document whose examples lost their marks
would otherwise pass by testing nothing).

    doc_commands_test.py --program build/tools/specgraph docs/csr.md ...
Exit status 0 when every block prints its text; 1 with the differences otherwise.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FENCE = re.compile(r"^```(\w*)\s*$")


def blocks(path):
    """(line, code, expected output) of every tested sh block."""
    lines = open(path, encoding="utf-8").read().splitlines()
    fences, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        fences.append((m.group(1), i, "\n".join(lines[i + 1:j]) + "\n", j))
        i = j + 1
    found = []
    for k, (lang, start, body, end) in enumerate(fences):
        if lang != "sh" or start == 0 or not lines[start - 1].startswith("<!-- tested:"):
            continue
        if k + 1 >= len(fences) or fences[k + 1][0] != "text" or any(
                line.strip() for line in lines[end + 1:fences[k + 1][1]]):
            raise SystemExit(f"{path}:{start + 1}: a tested sh block needs a ```text block "
                             "right after it (its output)")
        found.append((start + 1, body, fences[k + 1][2]))
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--program", required=True, help="the specgraph program")
    p.add_argument("docs", nargs="+")
    a = p.parse_args()
    failures, ran = 0, 0
    for doc in a.docs:
        found = blocks(os.path.join(ROOT, doc))
        if not found:
            print(f"{doc}: no tested sh block")
            failures += 1
        for line, code, want in found:
            script = code.replace("scripts/specgraph", shlex.quote(a.program))
            r = subprocess.run(["bash", "-o", "pipefail", "-c", script], cwd=ROOT, text=True,
                               capture_output=True, timeout=120, check=False)
            ran += 1
            if r.returncode != 0 or r.stdout != want:
                failures += 1
                print(f"{doc}:{line}: exit {r.returncode}\n--- expected\n{want}--- printed\n"
                      f"{r.stdout}{r.stderr}")
    print(f"doc_commands_test: {ran} blocks, {failures} failed" if failures else
          f"doc_commands_test: all {ran} blocks print what the documents show")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
