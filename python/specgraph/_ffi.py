"""The extension's functions: every C++ global "specgraph.<name>" becomes _ffi.<name>.

Signatures and docs are in _ffi.pyi; the public API is the package (specgraph.*), which checks
arguments and picks the framework path before calling in here.
"""

from ._lib import MODULE  # noqa: F401  (the library registers the functions when loaded)
from ._tvm import tvm_ffi

tvm_ffi.init_ffi_api("specgraph", __name__)
