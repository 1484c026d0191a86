"""The Python examples of README.md, docs/python.md, docs/engines.md and docs/verify.md, run
from the documents' own text.

Every ```python block there is marked: `<!-- tested: ... -->` on the line before it (run here,
as pasted, in a fresh interpreter; when a ```text block follows it, that is the output it must
print) or `<!-- untested: why -->`. A block that needs torch skips visibly without it; the GPU
form of a device-generic block runs where torch sees a GPU (the GPU check)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import List, NamedTuple, Optional

import pytest

from conftest import ROOT, need_torch

DOCS = ["README.md", "docs/python.md", "docs/engines.md", "docs/verify.md"]
FENCE = re.compile(r"^```(\w*)\s*$")


class Block(NamedTuple):
    doc: str
    line: int  # 1-based line of the opening fence
    marker: Optional[str]  # "tested" / "untested" / None
    code: str
    output: Optional[str]  # the ```text block right after it, if any


def blocks(doc: str) -> List[Block]:
    lines = (ROOT / doc).read_text().splitlines()
    fences = []  # (lang, first line index, body)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        fences.append((m.group(1), i, "\n".join(lines[i + 1:j]) + "\n", j))
        i = j + 1
    found = []
    for k, (lang, start, body, end) in enumerate(fences):
        if lang != "python":
            continue
        before = lines[start - 1].strip() if start > 0 else ""
        marker = re.match(r"<!-- (tested|untested):", before)
        output = None
        if k + 1 < len(fences) and fences[k + 1][0] == "text" and all(
                not line.strip() for line in lines[end + 1:fences[k + 1][1]]):
            output = fences[k + 1][2]
        found.append(Block(doc, start + 1, marker.group(1) if marker else None, body, output))
    return found


ALL = [b for doc in DOCS for b in blocks(doc)]
TESTED = [b for b in ALL if b.marker == "tested"]


def test_every_python_block_is_marked_and_the_first_examples_are_tested():
    unmarked = [f"{b.doc}:{b.line}" for b in ALL if b.marker is None]
    assert not unmarked, f"mark these blocks <!-- tested: ... --> or <!-- untested: why -->: " \
                         f"{unmarked}"
    assert {b.doc for b in TESTED} == set(DOCS), [f"{b.doc}:{b.line}" for b in TESTED]
    assert any("import torch" not in b.code for b in TESTED), "a first example needs no torch"


@pytest.mark.parametrize("block", TESTED, ids=[f"{b.doc}:{b.line}" for b in TESTED])
def test_the_documented_example_runs_as_pasted(block: Block, tmp_path):
    if re.search(r"^import torch|^from torch|^\s*import torch", block.code, re.M):
        need_torch()
    # A fresh interpreter, in an empty directory, with the environment the tests run in.
    done = subprocess.run([sys.executable, "-c", block.code], capture_output=True, text=True,
                          timeout=300, cwd=str(tmp_path), env=dict(os.environ))
    assert done.returncode == 0, f"{block.doc}:{block.line}\n{done.stdout}{done.stderr}"
    if block.output is not None:
        assert done.stdout == block.output, f"{block.doc}:{block.line} printed\n{done.stdout}"
