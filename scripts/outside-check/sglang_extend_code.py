"""Loads SGLang's own draft-extend metadata code from a wheel, at run time (nothing of SGLang is
kept in this repository), for scripts/outside-check/extend_vs_sglang.py:

  * the worker's Triton kernels: `assign_extend_cache_locs_uniform` (verify's window slots, which
    the draft extend writes again), `prepare_draft_extend_layout` with its kernel (lengths and
    positions) and `prepare_draft_extend_inputs` with `_draft_extend_inputs_kernel` (the select
    index);
  * FA3's in-graph `draft_extend_set_metadata` with `_draft_extend_metadata_kernel` (cache
    seqlens, both cu_seqlens and the page table);
  * the Triton backend's `_update_draft_extend_buffers` and `_fill_kv_indptr_and_indices`, as
    methods of `TritonDraftExtend(...)` (the state its `__init__` / `init_cuda_graph_state`
    leave for a plain pool without a sliding window);
  * `EagleDraftExtendInput.generate_attn_arg_prefill` (FlashInfer's graph-replay arguments), as a
    method of `DraftExtendInput(num_correct_drafts, num_tokens_per_req)`;
  * the runner's helpers `_pad_to_bucket` (as a function) and
    `resolve_draft_extend_seq_len_fill_value`, with the backends'
    `get_cuda_graph_seq_len_fill_value` (Triton's, FA3's and FlashInfer's) as stand-in backends.
The plain-pool translator (`pack_read_stream` and the Triton gather
`create_flashinfer_kv_indices_triton`) comes from sglang_verify_code.py, which reads it from the
same wheel. Definitions are taken by name (ast) and written to temporary module files (Triton's
JIT reads a kernel's source from its file); the rest of SGLang is never imported.

    mod = load(wheel_path)   # TRITON_INTERPRET=1 must be set before this when there is no GPU
"""
from __future__ import annotations

import os
import tempfile
import zipfile

import sglang_verify_code as svc

KERNELS = [
    ("sglang/kernels/ops/speculative/cache_locs.py", ["assign_extend_cache_locs_uniform"]),
    ("sglang/kernels/ops/speculative/eagle.py",
     ["_draft_extend_inputs_kernel", "prepare_draft_extend_inputs",
      "_prepare_draft_extend_lengths_kernel", "prepare_draft_extend_layout"]),
    ("sglang/kernels/ops/attention/metadata.py",
     ["_draft_extend_metadata_kernel", "draft_extend_set_metadata"]),
]
HOST = [
    ("sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py",
     ["resolve_draft_extend_seq_len_fill_value"]),
]
# (file, class, methods, the class they are put in here, that class's own first lines)
METHODS = [
    ("sglang/srt/model_executor/runner/base_cuda_graph_runner.py", "BaseCudaGraphRunner",
     ["_pad_to_bucket"], "Runner", ""),
    ("sglang/srt/layers/attention/triton_backend.py", "TritonAttnBackend",
     ["get_cuda_graph_seq_len_fill_value", "_fill_kv_indptr_and_indices",
      "_update_draft_extend_buffers"],
     "TritonDraftExtend",
     "    def __init__(self, translator, max_bs, max_num_tokens, max_context_len,\n"
     "                 num_draft_tokens, num_steps, device, poison):\n"
     "        # TritonAttnBackend.__init__ / init_cuda_graph_state's buffers (no sliding\n"
     "        # window): kv_indptr int32, qo_indptr int64, cuda_graph_kv_indices int64 of\n"
     "        # max_num_tokens * max_context_len entries (poisoned here, zeroed there).\n"
     "        self.kv_index_translator, self.device = translator, device\n"
     "        self.num_draft_tokens, self.speculative_num_steps = num_draft_tokens, num_steps\n"
     "        self.sliding_window_size = None\n"
     "        self.kv_indptr = torch.zeros((max_bs + 1,), dtype=torch.int32, device=device)\n"
     "        self.qo_indptr = torch.zeros((max_bs + 1,), dtype=torch.int64, device=device)\n"
     "        self.cuda_graph_kv_indices = torch.full(\n"
     "            (max_num_tokens * max_context_len,), poison, dtype=torch.int64, device=device)\n"
     "\n"),
    ("sglang/srt/layers/attention/flashattention_backend.py", "FlashAttentionBackend",
     ["get_cuda_graph_seq_len_fill_value"], "FA3Backend", ""),
    ("sglang/srt/layers/attention/flashinfer_backend.py", "FlashInferAttnBackend",
     ["get_cuda_graph_seq_len_fill_value"], "FlashInferBackend", ""),
    ("sglang/srt/speculative/eagle_info.py", "EagleDraftExtendInput",
     ["generate_attn_arg_prefill"], "DraftExtendInput",
     "    def __init__(self, num_correct_drafts, num_tokens_per_req):\n"
     "        self.num_correct_drafts = num_correct_drafts\n"
     "        self.num_tokens_per_req = num_tokens_per_req\n\n"),
]
KERNEL_HEADER = ("# Extracted at run time from {wheel} by scripts/outside-check/"
                 "sglang_extend_code.py.\nfrom typing import Optional\nimport torch\n"
                 "import triton\nimport triton.language as tl\n\n")
HOST_HEADER = ("# Extracted at run time from {wheel} by scripts/outside-check/"
               "sglang_extend_code.py.\nfrom __future__ import annotations\nimport bisect\n"
               "from typing import Optional, Sequence\nimport torch\n"
               "from sglang_verify_host import IdSpaceKind  # noqa: F401\n\n")


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
    return "".join(kernels), "".join(host)


def load(wheel: str):
    """The host module (Runner, TritonDraftExtend, DraftExtendInput, ...) with the kernels'
    module as .kernels and sglang_verify_code's host module (PlainPoolTranslator) as .verify."""
    verify = svc.load(wheel)
    kernels, host = extract(wheel)
    folder = tempfile.mkdtemp(prefix="sglang-extend-")
    k = svc._import(folder, "sglang_extend_kernels", kernels)
    h = svc._import(folder, "sglang_extend_host", host)
    h.kernels, h.verify = k, verify
    return h
