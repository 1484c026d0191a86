"""Loads SGLang's own code for the round after verify from a wheel, at run time (nothing of SGLang
is kept in this repository), for scripts/outside-check/accept_vs_sglang.py
(../shared/spec/round-on-device.md section 12 names the functions):

  * tree: `select_top_k_tokens` (the draft loop's beam bookkeeping), `organize_draft_results`,
    `build_tree_kernel_efficient` with the Triton builder (`sgl_build_tree_kernel_triton`, the
    path SGLang takes on XPU), and the tree-from-mask builder
    `reconstruct_indices_from_tree_mask_triton` (random parent arrays, orphans included);
  * acceptance: `verify_tree_greedy_triton` (the Triton twin of the CUDA `verify_tree_greedy`),
    `fill_bonus_tokens` (Triton), `prepare_verify_commit_outputs` (Triton);
  * commit: `move_accept_tokens_to_target_kvcache` with `fill_front_out_cache_loc_func`
    (`assign_extend_cache_locs`) and `fill_accept_out_cache_loc_func` (Triton), its KV pool a
    stand-in that records the (dst, src) pairs; `_compact_accept_to_front`;
  * allocation: `eagle_prepare_for_decode` -> `page_aligned_decode_alloc_lens`,
    `get_alloc_reserve_per_decode` / `get_alloc_len_per_decode`, `alloc_for_spec_decode`,
    `alloc_token_slots` with the token allocator's `alloc`, the paged allocator's `alloc_extend`
    with `alloc_extend_naive` and `get_num_new_pages`, `get_last_loc_torch`,
    `assign_req_to_token_pool` (Triton); `get_req_to_token_extra_context_len`;
  * next round: `assign_draft_cache_locs_contiguous` (Triton), the paged branch of
    `prepare_for_draft` (its lines, cut out by their first and last statement and run as a
    function) with `duplicate_prefix_tail_to_draft_branches`, `assign_extend_cache_locs_uniform`;
  * finish: `Req.update_finish_state` with `_check_token_based_finish`,
    `_check_vocab_boundary_finish`, `_check_str_based_finish`,
    `_cap_finished_len_at_max_new_tokens`, `output_ids_through_stop`, `owned_kv_len`, and
    `_release_overallocated_kv_indices`.

Stand-ins (host objects the functions only read): the runtime-context getters (`get_spec`,
`get_schedule`, `get_parallel`, `get_serving`, `max_speculative_num_draft_tokens`, set per
engine with `configure`), `SpeculativeAlgorithm` (EAGLE: has draft KV, not UNO),
`maybe_detect_oob` and `evict_from_tree_cache` (no-ops), the paged allocators' extend dispatch
(`ALLOC_EXTEND_FUNCS` straight to `alloc_extend`: `alloc_paged_token_slots_extend` only adds
eviction, DCP sharding and DSV4 there), `_is_cpu = False` (the GPU branches), and
`_is_xpu = True` for the one `torch.compile` decorator (eager). Not run: the CUDA kernels
(`verify_tree_greedy`, the CUDA tree builder), the scheduler loop, `move_kv_cache` itself.

    mod = load(wheel_path)   # TRITON_INTERPRET=1 must be set before this when there is no GPU
"""
from __future__ import annotations

import ast
import os
import sys
import tempfile
import textwrap
import types
import zipfile

import sglang_verify_code as svc

KERNELS = [
    ("sglang/srt/utils/common.py", ["next_power_of_2"]),
    ("sglang/kernels/ops/speculative/spec_tree.py",
     ["TreeMaskMode", "sgl_build_tree_kernel_efficient_triton", "verify_tree_greedy_kernel_triton",
      "sgl_build_tree_kernel_triton", "verify_tree_greedy_triton"]),
    ("sglang/kernels/ops/speculative/reconstruct_tree.py",
     ["_reconstruct_tree_mask_kernel", "_num_warps_for",
      "reconstruct_indices_from_tree_mask_triton"]),
    ("sglang/kernels/ops/speculative/eagle.py",
     ["fill_bonus_tokens", "fill_accept_out_cache_loc", "_verify_commit_outputs_kernel",
      "prepare_verify_commit_outputs"]),
    ("sglang/kernels/ops/speculative/cache_locs.py",
     ["assign_draft_cache_locs_contiguous", "assign_extend_cache_locs",
      "assign_extend_cache_locs_uniform"]),
    ("sglang/srt/mem_cache/allocation.py", ["assign_req_to_token_pool"]),
]
HOST = [
    ("sglang/srt/utils/common.py", ["fast_topk", "ceil_div", "ceil_align", "get_num_new_pages"]),
    ("sglang/srt/speculative/spec_utils.py",
     ["_select_top_k_tokens_first", "_select_top_k_tokens_later", "select_top_k_tokens",
      "move_accept_tokens_to_target_kvcache"]),
    ("sglang/srt/speculative/eagle_utils.py",
     ["organize_draft_results", "build_tree_kernel_efficient", "eagle_prepare_for_decode"]),
    ("sglang/srt/speculative/eagle_worker_common.py",
     ["duplicate_prefix_tail_to_draft_branches", "_compact_accept_to_front"]),
    ("sglang/kernels/ops/speculative/cache_locs.py", ["fill_front_out_cache_loc_func"]),
    ("sglang/kernels/ops/speculative/eagle.py",
     ["fill_bonus_tokens_func", "fill_accept_out_cache_loc_func"]),
    ("sglang/srt/mem_cache/allocation_sizing.py",
     ["get_alloc_page_size", "get_alloc_len_per_decode", "get_alloc_reserve_per_decode",
      "page_aligned_decode_alloc_lens", "get_req_to_token_extra_context_len"]),
    ("sglang/srt/mem_cache/allocation.py",
     ["get_last_loc_torch", "alloc_token_slots", "alloc_for_spec_decode",
      "assign_req_to_token_pool_func"]),
    ("sglang/srt/mem_cache/allocator/paged.py", ["alloc_extend_naive"]),
    ("sglang/srt/managers/schedule_batch.py",
     ["BaseFinishReason", "FINISH_MATCHED_TOKEN", "FINISH_MATCHED_STR", "FINISH_LENGTH"]),
    ("sglang/srt/mem_cache/common.py", ["_release_overallocated_kv_indices"]),
]
# (file, class, methods, the class they are put in here, that class's own first lines)
METHODS = [
    ("sglang/srt/mem_cache/allocator/token.py", "TokenToKVPoolAllocator", ["alloc"],
     "TokenAllocator",
     "    def __init__(self, free_pages):\n"
     "        self.page_size, self.need_sort, self.free_pages = 1, False, free_pages\n\n"),
    ("sglang/srt/mem_cache/allocator/paged.py", "PagedTokenToKVPoolAllocator", ["alloc_extend"],
     "PagedAllocator",
     "    def __init__(self, free_pages, page_size):\n"
     "        self.page_size, self.free_pages, self.device = page_size, free_pages, 'cpu'\n"
     "        self.debug_mode, self.use_triton_kernels = True, False\n\n"
     "    def merge_and_sort_free(self):  # nothing is freed during a round\n"
     "        pass\n\n"),
    ("sglang/srt/managers/schedule_batch.py", "Req",
     ["output_ids_through_stop", "owned_kv_len", "finished", "_check_token_based_finish",
      "_check_str_based_finish", "_check_vocab_boundary_finish",
      "_cap_finished_len_at_max_new_tokens", "update_finish_state"],
     "Req",
     "    def __init__(self, input_len, output_ids, max_new_tokens, stop_token_ids):\n"
     "        self.origin_input_ids = [0] * input_len\n"
     "        self.output_ids = list(output_ids)\n"
     "        self.sampling_params = types.SimpleNamespace(\n"
     "            max_new_tokens=max_new_tokens, stop_token_ids=set(stop_token_ids),\n"
     "            ignore_eos=False, stop_strs=[], stop_regex_strs=[])\n"
     "        self.eos_token_ids, self.tokenizer, self.vocab_size = None, None, None\n"
     "        self.finished_reason = self.finished_len = self.to_finish = None\n"
     "        self.grammar, self.reasoning_tokens, self.decode_batch_idx = None, 0, 0\n"
     "        self.kv = types.SimpleNamespace(kv_committed_len=0, kv_allocated_len=0,\n"
     "                                        cache_protected_len=0)\n\n"),
]
# The paged branch of prepare_for_draft, from its first statement to the end of the prefix-tail
# call, run as a function of the names it reads.
PAGED_LAYOUT = ("sglang/srt/speculative/eagle_worker_common.py", "prepare_for_draft",
                "rows = req_to_token_pool.req_to_token[",
                "duplicate_prefix_tail_to_draft_branches(")

KERNEL_HEADER = ("# Extracted at run time from {wheel} by scripts/outside-check/"
                 "sglang_accept_code.py.\nfrom enum import IntEnum\nfrom typing import Optional\n"
                 "import torch\nimport triton\nimport triton.language as tl\n\n")
HOST_HEADER = """# Extracted at run time from {wheel} by scripts/outside-check/
# sglang_accept_code.py.
from __future__ import annotations
import logging, math, types
from array import array
from typing import Any, List, Optional, Union
import torch
from sglang_accept_kernels import *  # noqa: F403
from sglang_accept_kernels import _verify_commit_outputs_kernel  # noqa: F401

# Stand-ins (see sglang_accept_code.py).
logger = logging.getLogger("sglang-stand-in")
logger.disabled = True  # its out-of-memory message; the check counts those rounds
_is_cpu, _is_npu, _is_xpu, _is_hip = False, False, True, False
CONFIG = types.SimpleNamespace(topk=1, num_steps=1, num_draft_tokens=2, page_size=1)
def get_spec():
    return types.SimpleNamespace(speculative_algorithm="EAGLE",
                                 speculative_num_steps=CONFIG.num_steps,
                                 speculative_eagle_topk=CONFIG.topk)
def get_schedule():
    return types.SimpleNamespace(page_size=CONFIG.page_size)
def get_parallel():
    return types.SimpleNamespace(attn_dcp_size=1)
def get_serving():
    return types.SimpleNamespace(strip_thinking_cache=False)
def max_speculative_num_draft_tokens():
    return CONFIG.num_draft_tokens
def maybe_detect_oob(*args, **kwargs):
    pass
def evict_from_tree_cache(*args, **kwargs):
    pass
def available_and_evictable_str(tree_cache):
    return "stand-in pool"
def build_tree_kernel_efficient_func(*args):  # the XPU branch: SGLang's Triton builder
    sgl_build_tree_kernel_triton(*args)
def _alloc_extend(tree_cache, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                  extend_num_tokens, req_pool_indices=None, batch=None):
    out = tree_cache.token_to_kv_pool_allocator.alloc_extend(
        prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc, extend_num_tokens)
    if out is None:
        raise RuntimeError("Out of memory (paged alloc_extend returned None)")
    return out
ALLOC_EXTEND_FUNCS = {{"cpu": _alloc_extend, "cuda": _alloc_extend}}
def _device_type(batch):
    return torch.device(batch.device).type
def get_last_loc(req_to_token, req_pool_indices_tensor, prefix_lens_tensor):
    return get_last_loc_torch(req_to_token, req_pool_indices_tensor, prefix_lens_tensor)

"""


def _spec_info_stub():
    """`from sglang.srt.speculative.spec_info import SpeculativeAlgorithm` inside the sizing
    functions: EAGLE, which has draft KV and is not UNO."""
    if "sglang.srt.speculative.spec_info" in sys.modules:
        return

    class SpeculativeAlgorithm:
        @staticmethod
        def from_string(name):
            assert name == "EAGLE"
            return types.SimpleNamespace(is_uno=lambda: False, has_draft_kv=lambda: True)

    for name in ("sglang", "sglang.srt", "sglang.srt.speculative",
                 "sglang.srt.speculative.spec_info"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["sglang.srt.speculative.spec_info"].SpeculativeAlgorithm = SpeculativeAlgorithm


def _paged_layout(z, wheel) -> str:
    path, func, first, last = PAGED_LAYOUT
    text = z.read(path).decode("utf-8")
    lines = text.splitlines(keepends=True)
    node = next(n for n in ast.parse(text).body
                if isinstance(n, ast.FunctionDef) and n.name == func)
    body = lines[node.lineno - 1:node.end_lineno]
    start = next(i for i, ln in enumerate(body) if ln.strip().startswith(first))
    call = next(i for i in range(start, len(body)) if body[i].strip().startswith(last))
    end = next(i for i in range(call, len(body)) if body[i].strip() == ")")
    if end - start > 60:
        raise RuntimeError(f"{wheel}: {path} {func}'s paged branch is not where expected")
    block = textwrap.indent(textwrap.dedent("".join(body[start:end + 1])), "    ")
    return (f"# the paged branch of {func}, from {path}\n"
            "def paged_draft_layout(req_to_token_pool, batch, draft_model_runner, topk,\n"
            "                       num_steps, page_size):\n"
            f"    bs = len(batch.seq_lens)\n{block}    return batch.out_cache_loc\n\n")


def extract(wheel: str) -> tuple[str, str]:
    """The kernels' module and the host code's module, as source text."""
    base = os.path.basename(wheel)
    kernels, host = [KERNEL_HEADER.format(wheel=base)], [HOST_HEADER.format(wheel=base)]
    with zipfile.ZipFile(wheel) as z:
        for path, names in KERNELS:
            kernels += [f"# from {path}\n"] + svc._take(z, wheel, path, names)
        for path, names in HOST:
            host += [f"# from {path}\n"] + svc._take(z, wheel, path, names)
        for path, cls, names, here, init in METHODS:
            host += [f"# methods of {cls}, from {path}\nclass {here}:\n", init]
            host += svc._take(z, wheel, path, names, body=cls)
        host.append(_paged_layout(z, wheel))
    return "".join(kernels), "".join(host)


def load(wheel: str):
    """The host module (select_top_k_tokens, Req, eagle_prepare_for_decode, ...), with the
    kernels' module as .kernels; `configure(mod, topk, num_steps, D, ps)` sets the engine."""
    _spec_info_stub()
    kernels, host = extract(wheel)
    folder = tempfile.mkdtemp(prefix="sglang-accept-")
    k = svc._import(folder, "sglang_accept_kernels", kernels)
    h = svc._import(folder, "sglang_accept_host", host)
    h.kernels = k
    return h


def configure(mod, topk, num_steps, num_draft_tokens, page_size):
    mod.CONFIG.topk, mod.CONFIG.num_steps = topk, num_steps
    mod.CONFIG.num_draft_tokens, mod.CONFIG.page_size = num_draft_tokens, page_size
