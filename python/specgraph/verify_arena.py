"""The verify metadata into the plan's own arena (docs/verify.md section 12).

DraftConfig(verify_tokens=D) gives the plan a verify section: the FA3 cascade tables (formats
"fa3"/"both") and FlashInfer's indptrs, kv_indices and packed mask ("csr"/"both") of the largest
bucket, exactly sized (Plan.find("verify.kv_indices") etc.). verify_arena_ writes a bucket's
metadata there from the round's staged requests (specgraph.stage_: req_pool_indices, seq_lens
without the D verify tokens, padded to the bucket) and the real batch staged with them, which the
kernels read on the device: padded requests have no mask cells and attend everything.
(specgraph.verify_metadata_ writes into tensors the caller owns instead.)
"""

from __future__ import annotations

from typing import Any, Optional

from . import _check, _ffi
from .buffers import Buffers
from .errors import InvalidArgument
from ._op_args import ready as _ready
from ._op_args import tensor as _tensor


def verify_arena_(bufs: Buffers, bucket: int, req_to_token: Any, custom_mask: Any, *,
                  mask_cells: Optional[int] = None, mask_exact: bool = False) -> None:
    """Writes the verify metadata of `bucket` (a planned bucket) into the arena's verify section.

    req_to_token: int32 [>= pool_rows, >= max_context_len], contiguous, on the arena's device;
    verify token j of request r sits at column seq_len[r] + j, so rows must be seq_len + D wide
    (a narrower row is refused per request: bad input in the section's first guard word).
    custom_mask: uint8, one byte per cell, the real requests' blocks (docs/verify.md section 1);
    mask_cells: its length in cells (None: the whole tensor); mask_exact: the formula's length
    must equal it, else it is a bound (a static buffer). Refusals (InvalidArgument naming the
    field, nothing written): no verify section ("verify_tokens"), an unplanned "bucket", a mask
    of the wrong dtype, device or size. Current stream (the arena's framework); no sync; no
    allocation; capture-safe. Eager only: not a torch custom op.
    """
    _ready(bufs)
    if bufs.plan.config.verify_tokens == 0:
        raise InvalidArgument("verify_tokens: 0: this plan has no verify section; pass "
                              "DraftConfig(verify_tokens=D)", field="verify_tokens")
    bucket = bufs._bucket(bucket)
    req_to_token = _tensor(bufs, "req_to_token", req_to_token)
    custom_mask = _tensor(bufs, "custom_mask", custom_mask)
    cells = -1 if mask_cells is None else _check.index("mask_cells", mask_cells)
    _ffi.verify_arena(bufs._obj, bufs.arena, bucket, req_to_token, custom_mask, cells,
                      _check.boolean("mask_exact", mask_exact))
