"""tvm_ffi, imported without importing torch (issue 28 item 12).

tvm-ffi 0.1 imports torch whenever it is installed, at its own import (tvm_ffi/__init__.py,
_convert.py, stream.py and its core's function.pxi and dtype.pxi each try `import torch`), and has
no switch to skip it (TVM_FFI_BUILD_DOCS=1 skips its core's imports, numpy's included, but not
the others; TVM_FFI_DISABLE_TORCH_C_DLPACK only skips the DLPack addon). Importing torch takes
seconds, so `import specgraph` for numpy work would pay for it. When neither torch nor tvm_ffi
is imported yet, tvm_ffi is imported here with `import torch` refused (as where torch is
absent); `restore_torch()` gives it torch once the process imports torch (specgraph/__init__.py
calls it from an import hook), doing what tvm_ffi's own import does with torch present: its
modules' `torch`, its stream helpers (use_torch_stream) and its fast DLPack exchange with torch
tensors. What cannot be given back: tvm_ffi functions taking a torch.dtype argument refuse it
("Unsupported torch dtype"; its table of them is C-level). Import torch before specgraph to keep
that too (engines do); then nothing here changes anything.
"""

from __future__ import annotations

import importlib
import importlib.abc
import os
import sys
from typing import Any, Optional

#: Whether tvm_ffi was imported here with torch refused (and restore_torch has work to do).
TORCH_HELD_BACK = "torch" not in sys.modules and "tvm_ffi" not in sys.modules


class _RefuseTorch(importlib.abc.MetaPathFinder):
    """A finder that makes `import torch` (and its submodules) fail as if torch were absent."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Optional[Any]:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (held back while specgraph "
                                      "imports tvm_ffi)", name=name)
        return None


if TORCH_HELD_BACK:
    _refuse = _RefuseTorch()
    sys.meta_path.insert(0, _refuse)
    try:
        import tvm_ffi  # noqa: F401  (loads libtvm_ffi.so RTLD_GLOBAL)
    finally:
        sys.meta_path.remove(_refuse)
else:
    import tvm_ffi  # noqa: F401

_restored = False


def restore_torch() -> None:
    """After torch is imported: what tvm_ffi's import would have done with torch present. Once;
    nothing when tvm_ffi was imported with torch (TORCH_HELD_BACK false)."""
    global _restored
    if not TORCH_HELD_BACK or _restored:
        return
    _restored = True
    torch = sys.modules["torch"]
    core = tvm_ffi.core
    if getattr(core, "torch", None) is None:  # torch.Tensor arguments: device, current stream
        core.torch = torch
    convert = sys.modules.get("tvm_ffi._convert")
    if convert is not None and getattr(convert, "torch", None) is None:
        convert.torch = torch
    stream = sys.modules.get("tvm_ffi.stream")
    if stream is not None and not hasattr(stream, "TorchStreamContext"):
        stream = importlib.reload(stream)  # defines TorchStreamContext and use_torch_stream
        tvm_ffi.use_torch_stream = stream.use_torch_stream
    dlpack = sys.modules.get("tvm_ffi._optional_torch_c_dlpack")
    if dlpack is not None and os.environ.get("TVM_FFI_DISABLE_TORCH_C_DLPACK", "0") == "0":
        if getattr(dlpack, "_LIB", None) is None:
            dlpack._LIB = dlpack.load_torch_c_dlpack_extension()
        dlpack.patch_torch_cuda_stream_protocol()
