"""The round after verify over the plan's own arena (docs/round-graphs.md, the C++ round_ops.hpp).

DraftConfig(verify_tokens=D, round_on_device=True) gives the plan a round section: the engine's
per-round inputs (the verify tree's parent, draft_token, target_predict [bucket, D]), the per-row
state (allocated_len, max_new_tokens_left), the stop token ids, acceptance's, the commit's and
the next round's outputs, the ring head, the stall word, scratch and seven guard words, of the
largest bucket, exactly sized. after_verify_ runs acceptance, the commit and the next round's
inputs of a bucket, in place: the committed length comes from the staged seq_len, the pool rows
from the staged req_pool_index, and the next round writes seq_len' and its draft slots back into
the staged seq_len and out_cache_loc, so the round after needs no host staging:

    specgraph.stage_(bufs, bs, pool, seq, slots, bucket=bucket)   # the first round only
    v = round_view(bufs, bucket)    # v.allocated_len[:] = ..., v.max_new_tokens_left[:] = ...
    ...verify forward: v.parent, v.draft_token, v.target_predict...
    after_verify_(bufs, bucket, req_to_token, ring, ring_tail)   # part="all"
    ...v.finished, v.free_begin / v.free_end, v.stall; bufs.seq_len, bufs.out_cache_loc...

Every shape and offset is C++'s (plan_info's "round": round_field_shape_of for the bucket);
Python derives none.

| function       | stream       | synchronises | capture-safe |
|----------------|--------------|--------------|--------------|
| after_verify_  | current      | no           | yes          |
| round_view     | none (views) | no           | yes          |
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from . import _check
from ._op_args import ready as _ready
from ._op_args import run as _run
from ._op_args import tensor as _tensor
from .buffers import Buffers
from .errors import InvalidArgument


class RoundView(NamedTuple):
    """The round section for a bucket: views of the arena at the bucket's exact shapes (C++'s
    round_field_shape_of), plus the draft section's staged state the op reads and writes."""

    bucket: int
    draft_tokens: int  # D
    reserve: int  # R, resolved (the plan's)
    stop_capacity: int  # the plan's max_stop_tokens
    # Written by the engine before the op: int32 [bucket, D] each.
    parent: Any
    draft_token: Any
    target_predict: Any
    # Per-row state: int32 [bucket], read and written by the op (allocated_len by the next
    # round; max_new_tokens_left run down by emit_len by the commit when budget=True).
    allocated_len: Any
    max_new_tokens_left: Any
    stop_token_ids: Optional[Any]  # int32 [stop_capacity]; None when the capacity is 0
    # Acceptance's outputs.
    accept_index: Any  # int32 [bucket, num_steps + 1]
    accept_length: Any  # int32 [bucket]
    predict: Any  # int32 [bucket, D]
    accept_tokens: Any  # int32 [bucket, D]
    bonus: Any  # int32 [bucket]
    new_seq_len: Any  # int32 [bucket]
    select_index: Any  # int32 [bucket]
    # The commit's.
    kv_move: Any  # int32 [bucket, num_steps, 2]
    finished: Any  # int32 [bucket]
    emit_len: Any  # int32 [bucket]
    free_begin: Any  # int32 [bucket]
    free_end: Any  # int32 [bucket]
    # The next round's (its seq_len and draft slots: seq_len, out_cache_loc below).
    active: Any  # int32 [bucket]
    root_token: Any  # int32 [bucket]
    draft_position: Any  # int32 [bucket, topk]
    tail_copy: Optional[Any]  # int32 [bucket, topk - 1, page_size - 1, 2]; None when empty
    verify_out_cache_loc: Any  # int64 [bucket, D]
    ring_head: Any  # int64 [1], the device's consumer counter
    stall: Any  # int32 [1], set when the ring was short; the engine clears it
    guard: Any  # int32 [7, 10]: the section's guard words (reset by every after_verify_)
    # The draft section's staged state, the bucket's rows: read and written in place.
    seq_len: Any  # int32 [bucket]
    req_pool_index: Any  # int32 [bucket]
    out_cache_loc: Any  # int64 [bucket, topk, slot_stride]


# RoundView's fields by the plan's field names (round_field_names; plan_info gives the names).
_NAMES = {"tokens_left": "max_new_tokens_left", "verify_slots": "verify_out_cache_loc"}
_OPTIONAL = ("stop_token_ids", "tail_copy")


def _require(bufs: Buffers) -> None:
    if not bufs.plan.config.round_on_device:
        raise InvalidArgument("round_on_device: false: this plan has no round section; pass "
                              "DraftConfig(verify_tokens=D, round_on_device=True)",
                              field="round_on_device")


def round_view(bufs: Buffers, bucket: int) -> RoundView:
    """The section's views for `bucket` (a planned bucket), made once and cached (host work
    only: it traces under torch.compile). Offsets and shapes are C++'s (plan_info's "round").
    Refusals: "round_on_device" (no section), "bucket"."""
    if not isinstance(bufs, Buffers):
        raise TypeError(f"bufs: expected specgraph.Buffers, got {_check.type_name(bufs)}")
    _require(bufs)
    bucket = bufs._bucket(bucket)
    key = ("round_view", bucket)
    v = bufs._views.get(key)
    if v is not None:
        return v
    sec = bufs.plan.layout["round"]
    got = sec["buckets"][bufs.plan.buckets.index(bucket)]
    views = {f: None for f in _OPTIONAL}
    for name, offset, dims, dtype in got["fields"]:
        field = _NAMES.get(str(name), str(name))
        if field in RoundView._fields:  # scratch is the op's own
            views[field] = bufs._view(("round", bucket, field), int(offset), str(dtype),
                                      tuple(int(d) for d in dims))
    first, count = sec["guard_base"], sec["guard_count"]
    v = bufs._views[key] = RoundView(
        bucket, sec["draft_tokens"], sec["reserve"], sec["stop_capacity"], **views,
        guard=bufs.guards[first: first + count], seq_len=bufs.seq_len[:bucket],
        req_pool_index=bufs.req_pool_index[:bucket], out_cache_loc=bufs.out_cache_loc[:bucket])
    return v


def after_verify_(bufs: Buffers, bucket: int, req_to_token: Any, ring: Any, ring_tail: Any, *,
                  real_batch: Optional[int] = None, stop_token_count: int = 0,
                  budget: bool = True, part: str = "all") -> None:
    """Acceptance, the commit and the next round's inputs of `bucket` (a planned bucket), from
    the section's inputs (round_view) and the staged round, in place (docs/round-graphs.md).

    req_to_token: the engine's int32 [>= pool_rows, >= max_context_len], contiguous, on the
    arena's device: read by the commit, the rows that allocate written by the next round (at the
    tensor's own width). ring: int32 [ring_capacity] page ids the engine fills; ring_tail: int64
    [1], its published tail (the head is the section's ring_head): a ring short of the round's
    pages sets the stall word and builds every row as padding. real_batch: None (the staged
    real-batch word, read on the device), else an int in [0, bucket] the launch bakes in.
    stop_token_count: the first ids of round_view(...).stop_token_ids in use. budget: False
    ignores max_new_tokens_left; True runs it down in place by each real row's emit_len.
    part: "all" (the guard reset, acceptance, the commit and the next round), "accept_commit"
    (the guard reset, acceptance and the commit) or "next" (the next round only);
    accept_commit then next is all, cell by cell, with room for draft extend in between (it
    reads the staged seq_len, which the next round overwrites). The names are C++'s
    (after_verify_part_of), which refuses any other. Refusals (InvalidArgument naming the
    field, nothing written): "round_on_device" (no section), "bucket", "req_to_token", "ring",
    "ring_tail", "ring_capacity", "real_batch", "stop_token_count", "part". Current stream; no
    sync; no allocation; capture-safe. With a torch arena: torch.ops.specgraph.after_verify_.
    """
    _ready(bufs)
    _require(bufs)
    bucket = bufs._bucket(bucket)
    req_to_token = _tensor(bufs, "req_to_token", req_to_token)
    ring = _tensor(bufs, "ring", ring)
    ring_tail = _tensor(bufs, "ring_tail", ring_tail)
    rb = -1 if real_batch is None else _check.index("real_batch", real_batch)
    if rb < 0 and real_batch is not None:  # -1 is the staged word's: refuse it here by name
        raise InvalidArgument(f"real_batch: {rb} is outside [0, the bucket {bucket}] (None: the "
                              "staged real batch)", field="real_batch")
    if not isinstance(part, str):
        raise TypeError(f"part: expected a str (\"all\", \"accept_commit\" or \"next\"), got "
                        f"{_check.type_name(part)}")
    _run(bufs, "after_verify_", bucket, req_to_token, ring, ring_tail, rb,
         _check.index("stop_token_count", stop_token_count), _check.boolean("budget", budget),
         part)
