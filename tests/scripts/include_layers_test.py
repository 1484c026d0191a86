#!/usr/bin/env python3
"""The C++ include layers: data flows down (docs/cpp.md "Layers").

Every #include "dir/..." of a file under one of the folders below may name only its own folder
or a folder below it:

  include/specgraph (0)  the public API: includes nothing of the tree but itself
  device (1)             executors, CUDA handles, NVTX
  kernels (2)            per-row host+device code, trampolines, guards
  graphs (3)             plan, buffers, capture-safe ops
  runtime (4)            the C++ driver: draft_runtime, its graph table, the verify graphs
  tools, bench, python/src, testing, tests (5)  programs, benchmarks, bindings and tests

Exits 1 naming each file, line and include that reaches up, or a folder a file includes that
is not in the table; prints the counts otherwise.
"""
import pathlib
import re
import sys

LAYER = {"specgraph": 0, "device": 1, "kernels": 2, "graphs": 3, "runtime": 4,
         "tools": 5, "bench": 5, "python": 5, "testing": 5, "tests": 5}
ROOTS = {"include/specgraph": 0, "device": 1, "kernels": 2, "graphs": 3, "runtime": 4}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def main() -> int:
    root = pathlib.Path(__file__).resolve().parents[2]
    bad, files = [], 0
    for folder, level in ROOTS.items():
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".hpp", ".cpp", ".cu", ".cuh", ".h"):
                continue
            files += 1
            for number, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = LAYER.get(m.group(1))
                where = f"{path.relative_to(root)}:{number}: {line.strip()}"
                if target is None:
                    bad.append(f"{where}: folder {m.group(1)}/ is not in the layer table")
                elif target > level:
                    bad.append(f"{where}: {folder}/ (layer {level}) includes {m.group(1)}/ "
                               f"(layer {target}), a layer above it")
    for b in bad:
        print(b)
    if bad:
        print(f"include_layers_test: {len(bad)} includes reach up a layer; move the code down "
              "or pass it in through a hook (device/kernel_preload.hpp is one)")
        return 1
    print(f"include_layers_test: {files} files, every include stays in its layer or below")
    return 0


if __name__ == "__main__":
    sys.exit(main())
