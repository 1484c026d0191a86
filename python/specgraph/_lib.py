"""Locates and loads the extension (libspecgraph_ext.so), for installed and editable packages."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ._tvm import tvm_ffi  # libtvm_ffi.so (RTLD_GLOBAL), which the extension links by soname

LIBNAME = "libspecgraph_ext.so"


def _find() -> Path:
    # SPECGRAPH_LIB: a build tree's extension (ctest's python.pytest sets it).
    env = os.environ.get("SPECGRAPH_LIB")
    if env:
        return Path(env)
    # ".so" is an extension-module suffix, so find_spec resolves the file without loading it: in
    # an installed wheel next to this file, in an editable install through scikit-build-core's
    # redirecting finder (which also rebuilds first when installed with editable.rebuild).
    spec = importlib.util.find_spec(f"{__package__}.{LIBNAME[:-3]}")
    if spec is not None and spec.origin and os.path.exists(spec.origin):
        return Path(spec.origin)
    here = Path(__file__).with_name(LIBNAME)
    if here.exists():
        return here
    raise ImportError(
        f"{LIBNAME} not found beside {__file__}: build the package (pip install .) or set "
        "SPECGRAPH_LIB to a build tree's python/specgraph/libspecgraph_ext.so"
    )


PATH = _find()
# Never unloaded: tensors and objects whose deleters live in the library stay valid.
MODULE = tvm_ffi.load_module(str(PATH))
