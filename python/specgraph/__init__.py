"""specgraph: exactly sized static buffers and capture-safe metadata ops for EAGLE draft steps
captured as CUDA graphs (docs/metadata.md has the semantics; README.md, the Python section).

    cfg = specgraph.DraftConfig(max_batch=64, topk=8, num_steps=5, page_size=16,
                                max_context_len=4096, pool_rows=512, kv_slots=1 << 22)
    plan = specgraph.make_plan(cfg)                     # host only, exact sizes
    arena = torch.empty(plan.total_bytes, dtype=torch.uint8, device="cuda")
    bufs = specgraph.buffers(plan, arena)               # typed zero-copy views
    specgraph.stage_(bufs, bs, req_pool_indices, seq_lens, out_cache_loc)
    specgraph.round_setup_(bufs, bucket, req_to_token)  # inside torch.cuda.graph: step 0
    specgraph.step_metadata_(bufs, bucket, step)        # every step
    specgraph.csr_step_indices_(bufs, bucket, step, req_to_token)  # formats="csr" / "both"

Environment (read once, here): SPECGRAPH_CHECKED, SPECGRAPH_LOG_LEVEL, SPECGRAPH_NVTX; see
specgraph._env.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import sys
from typing import Any

from . import _env
from . import _ffi
from . import _tvm
from .buffers import Buffers, SparseStageViews, StepView, buffers, host_arena
from .config import DraftConfig, SparseConfig, default_buckets
from .csr import (CsrOutputs, bind_csr_outputs, csr_indices_device_, csr_round_indices_,
                  csr_step_indices_)
from .errors import CaptureFailed, CudaError, GuardViolation, InvalidArgument, SpecgraphError
from .inputs import BoundInputs, begin_round_, bind_inputs
from .ops import (GuardWord, RoundGraph, SparseStage, advance_step_, check_guards,
                  continue_condition_host, count_violations_, initialize_, read_guards,
                  round_graph, round_setup_, sparse_stage_, sparse_stages, stage_,
                  step_metadata_, step_metadata_device_)
from .plan import BufferSpec, EngineSizing, Plan, make_plan
from .extend import (ExtendCapacity, ExtendFa3, ExtendFull, ExtendOutputs, ExtendPrefix,
                     ExtendTokens, extend_capacities, extend_metadata_, extend_outputs,
                     extend_violations)
from .verify import (VerifyCapacity, VerifyFa3, VerifyFlashInfer, VerifyOutputs,
                     verify_capacities, verify_metadata_, verify_outputs, verify_violations)

_version, _no_cuda_reason, _has_nvtx, _built_with_cuda = _ffi.build_info()
__version__: str = str(_version)
#: Whether the extension was compiled with CUDA (nvcc found at build time).
BUILT_WITH_CUDA: bool = bool(_built_with_cuda)
#: Whether CUDA ops can run here; cuda_unavailable_reason() says why not.
CUDA_AVAILABLE: bool = not str(_no_cuda_reason)


def cuda_unavailable_reason() -> str:
    """Why CUDA ops cannot run here ("" when they can)."""
    return str(_no_cuda_reason)


logger = logging.getLogger("specgraph")
if _env.LOG_LEVEL:
    logger.setLevel(_env.LOG_LEVEL.upper())
    if not logger.handlers:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        logger.addHandler(_handler)
        logger.propagate = False
_ffi.set_nvtx(_env.NVTX and bool(_has_nvtx))


def _torch_imported() -> None:
    """Once torch is imported: tvm_ffi gets torch back (specgraph._tvm) and the custom ops
    torch.ops.specgraph.* are registered. A failure here must not fail `import torch`: it is
    logged, and the first torch arena imports _torch_ops again (raising then)."""
    try:
        _tvm.restore_torch()
        from . import _torch_ops  # noqa: F401
    except Exception as e:  # noqa: BLE001
        logger.warning("specgraph: registering the torch ops when torch was imported failed: "
                       "%s: %s", type(e).__name__, e)


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Runs _torch_imported right after the process's `import torch` has executed torch (so
    `import specgraph` never imports torch itself, issue 28 item 12). One-shot: it leaves
    sys.meta_path at the first look-up of torch and lets the other finders find it."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            try:
                run(module)
            finally:
                del loader.exec_module  # the loader as it was
            _torch_imported()

        loader.exec_module = exec_module
        return spec


if sys.modules.get("torch") is not None:  # imported by the engine: register the custom ops now
    from . import _torch_ops  # noqa: F401
else:
    sys.meta_path.insert(0, _TorchImportHook())

__all__ = [
    "BUILT_WITH_CUDA", "CUDA_AVAILABLE", "BufferSpec", "Buffers", "CaptureFailed", "CudaError",
    "DraftConfig", "EngineSizing", "GuardViolation", "GuardWord", "InvalidArgument", "Plan",
    "SparseConfig", "SparseStage", "SparseStageViews", "SpecgraphError", "StepView", "buffers",
    "check_guards", "count_violations_", "cuda_unavailable_reason", "default_buckets", "host_arena",
    "initialize_", "make_plan", "read_guards", "round_setup_", "sparse_stage_", "sparse_stages",
    "stage_", "step_metadata_", "step_metadata_device_", "advance_step_", "RoundGraph",
    "round_graph", "continue_condition_host", "CsrOutputs", "bind_csr_outputs",
    "csr_step_indices_", "csr_round_indices_", "csr_indices_device_",
    "BoundInputs", "bind_inputs", "begin_round_", "VerifyCapacity",
    "ExtendCapacity", "ExtendFa3", "ExtendFull", "ExtendOutputs", "ExtendPrefix", "ExtendTokens",
    "extend_capacities", "extend_metadata_", "extend_outputs", "extend_violations",
    "VerifyFa3", "VerifyFlashInfer", "VerifyOutputs", "verify_capacities", "verify_metadata_",
    "verify_outputs", "verify_violations",
    "BoundInputs", "bind_inputs", "begin_round_",
]
