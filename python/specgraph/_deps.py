"""The optional dependencies (numpy, torch): imported where a call needs one, and when absent a
ModuleNotFoundError that says what to install instead of a bare "No module named ..."."""

from __future__ import annotations

from typing import Any

#: What to install for each optional module.
INSTALL = {
    "numpy": "pip install numpy",
    "torch": "pip install torch (the build matching your CUDA version)",
}


def require(module: str, needed_by: str) -> Any:
    """The module, or ModuleNotFoundError naming `needed_by`, the module and how to install it."""
    try:
        return __import__(module)
    except ImportError as e:
        raise ModuleNotFoundError(
            f"{needed_by} needs {module}, which is not installed: "
            f"{INSTALL.get(module, 'pip install ' + module)} (import specgraph and the calls "
            f"on other frameworks' arrays work without it)",
            name=module) from e
