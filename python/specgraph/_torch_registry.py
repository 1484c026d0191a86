"""Where the ops find torch.ops.specgraph.*: an empty namespace here, at the bottom of the
package, that specgraph._torch_ops fills once it has registered the custom ops (a registration,
as a plugin registers with its host; nothing above patches a module below).

Only Buffers made over a torch arena (a non-zero handle) call through it, and those exist only
after _torch_ops was imported, so an op never finds it empty.
"""

from __future__ import annotations

from types import SimpleNamespace

#: torch.ops.specgraph.<name>.default for each schema, and is_compiling (torch.compiler's).
OPS = SimpleNamespace()


def fill(**ops: object) -> None:
    """Called once by _torch_ops with the registered overloads."""
    OPS.__dict__.update(ops)
