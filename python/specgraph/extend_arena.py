"""The draft-extend metadata into the plan's own arena (docs/extend.md, the C++ extend_ops.hpp).

DraftConfig(verify_tokens=W, draft_extend=True) gives the plan a draft-extend section: the extend
tokens always, FA3's tables (C1) with formats "fa3"/"both", the CSR prefix (C2p, Triton) and full
(C2f, FlashInfer) layouts with "csr"/"both", of the largest bucket, exactly sized, with the round's
accepted lengths, scratch and five guard words. extend_arena_ writes a bucket's metadata there
from the round the verify phase staged (specgraph.stage_: req_pool_indices, seq_lens without the
window, the real batch, read on the device: one graph per bucket serves every round):

    specgraph.stage_(bufs, bs, pool, seq, slots, bucket=bucket)
    ...verify, acceptance writes extend_view(bufs, bucket).accept_len (or stage_accept_len)...
    extend_arena_(bufs, bucket, req_to_token)
    v = extend_view(bufs, bucket)       # v.fa3.page_table, v.full.full_kv_indices, ...

accept_len= reads the engine's own int32 [bucket] tensor in place instead of the section's;
outputs= (an ExtendOutputs of the engine's tensors, any subset of layouts, each at least the
bucket's exact size; its guard is not read) writes there instead of the section's tables (the
section's scratch and guard words are used either way). Every size is C++'s (draft_buffers::
extend, extend_shape_of): Python derives none.

| function          | stream  | synchronises | capture-safe |
|-------------------|---------|--------------|--------------|
| extend_arena_     | current | no           | yes          |
| stage_accept_len  | current (copy from host) | may block the host (CUDA) | no |
| extend_view       | none (views) | no      | yes          |
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence

from . import _check, _ffi
from ._op_args import ready as _ready
from ._op_args import run as _run
from ._op_args import tensor as _tensor
from .buffers import Buffers
from .errors import InvalidArgument
from .extend import LAYOUTS, ExtendFa3, ExtendFull, ExtendOutputs, ExtendPrefix, ExtendTokens
from .extend import _sets

_TYPES = dict(tokens=ExtendTokens, fa3=ExtendFa3, prefix=ExtendPrefix, full=ExtendFull)


class ExtendView(NamedTuple):
    """The draft-extend section for a bucket: views of the arena (docs/extend.md). A layout the
    plan does not hold is None; tables and vectors have the bucket's exact shapes."""

    bucket: int
    extend_tokens: int  # W
    page_size: int
    max_seq_len: int  # M = max_context_len
    tokens: Optional[ExtendTokens]
    fa3: Optional[ExtendFa3]
    prefix: Optional[ExtendPrefix]
    full: Optional[ExtendFull]
    accept_len: Any  # int32 [bucket]: the accepted lengths read when accept_len= is None
    guard: Any  # int32 [5, 10]: the section's guard words (reset by every extend_arena_)
    # The bucket's exact capacities (C++'s): page columns (also the page table's row stride),
    # prefix kv_indices (bucket * M) and full kv_indices (bucket * (M + W)); 0 if not held.
    page_capacity: int
    prefix_kv_capacity: int
    full_kv_capacity: int


def _require(bufs: Buffers) -> None:
    if not bufs.plan.config.draft_extend:
        raise InvalidArgument("draft_extend: false: this plan has no draft-extend section; pass "
                              "DraftConfig(verify_tokens=W, draft_extend=True)",
                              field="draft_extend")


def extend_view(bufs: Buffers, bucket: int) -> ExtendView:
    """The section's views for `bucket` (a planned bucket), made once and cached (host work
    only: it traces under torch.compile). Offsets, shapes and capacities are C++'s (plan_info:
    the plan's layout and extend_shape_of). Refusals: "draft_extend" (no section), "bucket"."""
    if not isinstance(bufs, Buffers):
        raise TypeError(f"bufs: expected specgraph.Buffers, got {_check.type_name(bufs)}")
    _require(bufs)
    bucket = bufs._bucket(bucket)
    key = ("extend_view", bucket)
    v = bufs._views.get(key)
    if v is not None:
        return v
    sec = bufs.plan.layout["extend"]  # C++'s offsets, shapes and capacities (plan_info)
    got = sec["buckets"][bufs.plan.buckets.index(bucket)]
    groups: dict = {x: [] for x in LAYOUTS}
    for name, layout, offset, rows, cols in got["fields"]:
        shape = (int(rows), int(cols)) if int(cols) >= 0 else (int(rows),)
        groups[str(layout)].append(bufs._view(("extend", bucket, str(name)), int(offset),
                                              "int32", shape))
    sets = {x: (_TYPES[x](*groups[x]) if groups[x] else None) for x in LAYOUTS}
    first, count = sec["guard_base"], sec["guard_count"]
    guard = bufs.guards[first: first + count]  # [count, GUARD_WORD_INT32S]
    c = bufs.plan.config
    acc = bufs._view(("extend", bucket, "accept_len"), sec["accept_len"], "int32", (bucket,))
    cap = [int(x) for x in got["capacity"]]
    v = bufs._views[key] = ExtendView(bucket, sec["extend_tokens"], c.page_size,
                                      c.max_context_len, **sets, accept_len=acc, guard=guard,
                                      page_capacity=cap[0], prefix_kv_capacity=cap[1],
                                      full_kv_capacity=cap[2])
    return v


def _output_sets(bufs: Buffers, outputs: Any) -> List[List[Any]]:
    sets = _sets(outputs)  # TypeError unless an ExtendOutputs
    for x, group in zip(LAYOUTS, sets):
        names = _TYPES[x]._fields
        for i, t in enumerate(group):
            if t is not None:
                group[i] = _tensor(bufs, f"outputs.{names[i]}", t)
    return sets


def extend_arena_(bufs: Buffers, bucket: int, req_to_token: Any, *, accept_len: Any = None,
                  accept_index: Any = None, outputs: Optional[ExtendOutputs] = None) -> None:
    """Writes the draft-extend metadata of `bucket` (a planned bucket) from the staged round.

    req_to_token: int32 [>= pool_rows, >= max_context_len], contiguous, on the arena's device;
    window token j of request r sits at column seq_len[r] + j, so rows must be seq_len + W wide
    (a narrower row is refused per request on the device: bad input in the section's first guard
    word, the request written as a padded one). accept_len: None (the section's
    extend_view(...).accept_len), else an int32 [bucket] tensor on the arena's device, read in
    place (an accepted length of 0 is recorded in the fifth guard word). accept_index: None, or
    acceptance's int32 [bucket, num_steps + 1] tensor on the arena's device: a row whose first
    entry is negative (acceptance accepted nothing: an idle row, a stalled round) is written as a
    padded row, unread (RoundGraphs passes its round section's). outputs: None (the
    section's tables), else the engine's (ExtendOutputs; outputs.guard is not read). Refusals
    (InvalidArgument naming the field, nothing written): "draft_extend" (no section), "bucket",
    "req_to_token", "accept_len", "accept_index", "outputs.<field>" (a layout partly given, none,
    short, of the wrong dtype or device, or sharing memory). Current stream; no sync; no allocation;
    capture-safe. With a torch arena: torch.ops.specgraph.extend_arena_.
    """
    _ready(bufs)
    _require(bufs)
    bucket = bufs._bucket(bucket)
    req_to_token = _tensor(bufs, "req_to_token", req_to_token)
    acc = None if accept_len is None else _tensor(bufs, "accept_len", accept_len)
    idx = None if accept_index is None else _tensor(bufs, "accept_index", accept_index)
    sets: List[List[Any]] = [[], [], [], []] if outputs is None else _output_sets(bufs, outputs)
    if bufs.handle and any(t is None for group in sets for t in group):
        # A partial layout never reaches the dispatcher (Tensor[] holds no None): the extension
        # refuses it by name, before anything is written.
        _ffi.extend_arena(bufs._obj, bufs.arena, bucket, req_to_token, acc, idx, True, *sets)
        return
    _run(bufs, "extend_arena_", bucket, req_to_token, acc, idx, outputs is not None, *sets)


def stage_accept_len(bufs: Buffers, bucket: int, accept_len: Sequence[int]) -> None:
    """Copies a round's accepted lengths (host ints, one per real request, in [0, W]) into the
    section's accept_len for `bucket`, the padded rows as 1. Refusals: "draft_extend", "bucket",
    "accept_len" (more than the bucket), "accept_len[i]" (outside [0, W]), nothing copied.
    Current stream; on CUDA it may block the host until the stream reaches the copy; NOT
    capture-safe (write accept_len on the device there)."""
    _ready(bufs)
    _require(bufs)
    bucket = bufs._bucket(bucket)
    if isinstance(accept_len, (str, bytes)) or not hasattr(accept_len, "__iter__"):
        raise TypeError("accept_len: expected a sequence of ints, got "
                        f"{_check.type_name(accept_len)}")
    values = [_check.index(f"accept_len[{i}]", v) for i, v in enumerate(accept_len)]
    _ffi.stage_accept_len(bufs._obj, bufs.arena, bucket, values)
