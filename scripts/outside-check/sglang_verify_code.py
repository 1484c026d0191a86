"""Loads SGLang's own target-verify argument code from a wheel, at run time (nothing of SGLang is
kept in this repository), for scripts/outside-check/verify_vs_sglang.py:

  * `EagleVerifyInput.generate_attn_arg_prefill` (sglang/srt/speculative/eagle_info.py): the
    FlashInfer verify arguments (qo_indptr, kv_indptr, kv_indices, the custom mask padded for
    graph buckets), as a method of `VerifyInput(draft_token_num, custom_mask)`;
  * the translator methods it calls on a plain KV pool (`pack_read_stream`, `read_source`,
    `_passthrough_table`, `_reads_translated` of KVIndexTranslator), as methods of
    `PlainPoolTranslator(req_to_token, page_size)`, whose state is what SGLang's constructor
    leaves for a pool without virtual-to-physical translation (no read table: `_spaces` empty);
  * the Triton kernels: `create_flashinfer_kv_indices_triton` (the gather into kv_indices) and
    `pack_verify_mask_into` with its kernel (the mask packing of the FlashInfer backend's
    sync-free graph plan), with the definitions they use.

The definitions are read from the wheel's sources by name (ast), written to two temporary module
files (Triton's JIT reads a kernel's source from its file) and imported; the rest of SGLang and
its dependencies are never imported. The one stand-in: `msgspec.Struct` (the base of the
record KVIndexTable; msgspec is not needed otherwise) is a keyword-argument record here.

    mod = load(wheel_path)   # TRITON_INTERPRET=1 must be set before this when there is no GPU
"""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
import tempfile
import zipfile

KERNELS = [
    ("sglang/kernels/ops/attention/kv_indices.py",
     ["_MIN_TOKENS_PER_BLOCK", "_TARGET_PROGRAMS", "kv_indices_num_token_blocks",
      "SPEC_KV_INDEX_BLOCKS_MIN_CONTEXT", "spec_kv_index_token_blocks",
      "create_flashinfer_kv_indices_triton"]),
    ("sglang/kernels/ops/speculative/pack_verify_mask.py",
     ["_pack_verify_mask_kernel", "pack_verify_mask_into"]),
]
HOST = [
    ("sglang/srt/mem_cache/kv_loc_plan.py", ["IdSpaceKind"]),
    ("sglang/srt/mem_cache/kv_index_translator.py", ["KVIndexTable"]),
]
# (file, class, methods, the class they are put in here, that class's own first lines)
METHODS = [
    ("sglang/srt/mem_cache/kv_index_translator.py", "KVIndexTranslator",
     ["_reads_translated", "read_source", "_passthrough_table", "pack_read_stream"],
     "PlainPoolTranslator",
     "    def __init__(self, req_to_token, page_size):\n"
     "        self.req_to_token, self.page_size, self._spaces = req_to_token, page_size, {}\n\n"),
    ("sglang/srt/speculative/eagle_info.py", "EagleVerifyInput", ["generate_attn_arg_prefill"],
     "VerifyInput",
     "    def __init__(self, draft_token_num, custom_mask):\n"
     "        self.draft_token_num, self.custom_mask = draft_token_num, custom_mask\n\n"),
]
KERNEL_HEADER = ("# Extracted at run time from {wheel} by scripts/outside-check/"
                 "sglang_verify_code.py.\nfrom typing import Optional\nimport triton\n"
                 "import triton.language as tl\n\n")
HOST_HEADER = (
    "# Extracted at run time from {wheel} by scripts/outside-check/sglang_verify_code.py.\n"
    "from __future__ import annotations\nimport enum\nfrom typing import Dict, Optional\n"
    "import torch\nfrom sglang_verify_kernels import *  # noqa: F403\n"
    "from sglang_verify_kernels import _MIN_TOKENS_PER_BLOCK, _TARGET_PROGRAMS  # noqa: F401\n\n"
    "class msgspec:  # stand-in: a keyword-argument record with the annotated fields' defaults\n"
    "    class Struct:\n"
    "        def __init_subclass__(cls, **kw):\n"
    "            pass\n\n"
    "        def __init__(self, **kw):\n"
    "            for k in self.__annotations__:\n"
    "                setattr(self, k, kw[k] if k in kw else getattr(type(self), k))\n\n")


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _source(lines, node) -> str:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "".join(lines[first - 1:node.end_lineno])


def _take(z, wheel, path, names, body=None) -> list[str]:
    """The sources of `names`, top level (body None) or in the class `body`, in that order."""
    text = z.read(path).decode("utf-8")
    lines = text.splitlines(keepends=True)
    nodes = ast.parse(text).body
    if body is not None:
        cls = [n for n in nodes if isinstance(n, ast.ClassDef) and n.name == body]
        if not cls:
            raise RuntimeError(f"{wheel}: {path} defines no class {body} (another version?)")
        nodes = cls[0].body
    found = {n: _source(lines, node) for node in nodes for n in _names(node) if n in names}
    missing = [n for n in names if n not in found]
    if missing:
        raise RuntimeError(f"{wheel}: {path} defines no {missing} (another SGLang version?)")
    return [found[n] + "\n" for n in names]


def extract(wheel: str) -> tuple[str, str]:
    """The kernels' module and the host code's module, as source text."""
    base = os.path.basename(wheel)
    kernels, host = [KERNEL_HEADER.format(wheel=base)], [HOST_HEADER.format(wheel=base)]
    with zipfile.ZipFile(wheel) as z:
        for path, names in KERNELS:
            kernels += [f"# from {path}\n"] + _take(z, wheel, path, names)
        for path, names in HOST:
            host += [f"# from {path}\n"] + _take(z, wheel, path, names)
        for path, cls, names, here, init in METHODS:
            host += [f"# methods of {cls}, from {path}\nclass {here}:\n", init]
            host += _take(z, wheel, path, names, body=cls)
    return "".join(kernels), "".join(host)


def _import(folder, name, source):
    path = os.path.join(folder, name + ".py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load(wheel: str):
    """The host module (VerifyInput, PlainPoolTranslator, ...), its kernels module as .kernels."""
    kernels, host = extract(wheel)
    folder = tempfile.mkdtemp(prefix="sglang-verify-")
    k = _import(folder, "sglang_verify_kernels", kernels)
    h = _import(folder, "sglang_verify_host", host)
    h.kernels = k
    return h
