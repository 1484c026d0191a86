"""Loads SGLang's own draft-decode index kernel and its sizing helpers from a wheel, at run time.

Nothing of SGLang is kept in this repository: the functions are read from the wheel's sources
(a zip), written to a temporary module file (Triton's JIT reads a kernel's source from its file)
and imported from there. Only the definitions named below are taken, so the rest of SGLang (and
its dependencies) is never imported.

    mod = load(wheel_path)   # TRITON_INTERPRET=1 must be set before this when there is no GPU
    mod.generate_draft_decode_kv_indices[grid](...)
"""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
import tempfile
import zipfile

# module in the wheel -> the top-level definitions (functions, constants) taken from it, in order.
SOURCES = [
    ("sglang/srt/utils/common.py", ["next_power_of_2"]),
    ("sglang/kernels/ops/attention/kv_indices.py",
     ["_MIN_TOKENS_PER_BLOCK", "_TARGET_PROGRAMS", "kv_indices_num_token_blocks",
      "SPEC_KV_INDEX_BLOCKS_MIN_CONTEXT", "spec_kv_index_token_blocks"]),
    ("sglang/srt/speculative/spec_utils.py",
     ["draft_kv_indices_buffer_width", "draft_kv_indices_used_len"]),
    ("sglang/kernels/ops/speculative/cache_locs.py",
     ["_translate_token_ids", "_load_token_ids", "generate_draft_decode_kv_indices"]),
]
HEADER = ("# Extracted at run time from {wheel} by scripts/outside-check/sglang_kernel.py.\n"
          "from typing import Optional, Tuple\n"
          "import torch\nimport triton\nimport triton.language as tl\n\n")


def _defined_names(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def extract(wheel: str) -> str:
    """The source of the needed definitions, as one module."""
    parts = [HEADER.format(wheel=os.path.basename(wheel))]
    with zipfile.ZipFile(wheel) as z:
        for path, names in SOURCES:
            text = z.read(path).decode("utf-8")
            lines = text.splitlines(keepends=True)
            found = {}
            for node in ast.parse(text).body:
                for n in _defined_names(node):
                    if n in names:
                        first = min([node.lineno] + [d.lineno for d in
                                                     getattr(node, "decorator_list", [])])
                        found[n] = "".join(lines[first - 1:node.end_lineno])
            missing = [n for n in names if n not in found]
            if missing:
                raise RuntimeError(f"{wheel}: {path} defines no {missing} (another SGLang "
                                   "version?)")
            parts += [f"# from {path}\n"] + [found[n] + "\n\n" for n in names]
    return "".join(parts)


def load(wheel: str):
    """Imports the extracted definitions as module `sglang_draft_kv_indices`."""
    source = extract(wheel)
    folder = tempfile.mkdtemp(prefix="sglang-kernel-")
    path = os.path.join(folder, "sglang_draft_kv_indices.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("sglang_draft_kv_indices", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
