"""Draft-extend metadata (docs/extend.md) written into the caller's tensors: the extend tokens'
positions, slots and select index, FA3's tables (C1), the CSR prefix layout Triton reads (C2p)
and the CSR full layout of FlashInfer's graph replay (C2f), whichever layouts are passed.

    out = specgraph.extend_outputs(max_batch, max_seq_len, W, page_size, device="cuda")
    specgraph.extend_metadata_(out, req_to_token, req_pool_indices, seq_lens, accept_lens,
                               extend_tokens=W, page_size=page_size, max_seq_len=max_seq_len)
    out.fa3.page_table, out.full.full_kv_indices, ...   # the tensors written

or over the engine's own buffers: ExtendOutputs(tokens=ExtendTokens(*three tensors),
fa3=ExtendFa3(*five), prefix=ExtendPrefix(*three), full=ExtendFull(*four), guard=int32 [5, 10]);
any layout may be None (at least one is given). Arena views and the engine's tensors are the same
kind of argument: the tables are passed down as they are, never copied or branched on.

`seq_lens` are the committed lengths BEFORE the window (what verify took), `accept_lens` the
tokens verify accepted, the bonus token included, in [0, W] (0 selects row r * W and is recorded
in guard word 4). The real batch: `real_batch` an int (default all), or an int32 [1] tensor on
the device the kernels read at run time (one graph per bucket serves every round). Every argument
and buffer is checked on the host first (InvalidArgument naming the buffer, its size and the size
needed; nothing written). On CUDA tensors the kernels are enqueued on torch's current stream (no
synchronisation, no allocation but the scratch tensor, which under torch.cuda.graph lands in the
graph's pool: capture-safe); on host memory (numpy, CPU tensors) the host twin runs after every
content is checked. With torch tensors the call goes through torch.ops.specgraph.extend_metadata_
(a custom op with a fake implementation).

| function               | stream  | synchronises | capture-safe |
|------------------------|---------|--------------|--------------|
| extend_metadata_       | current | no           | yes (CUDA)   |
| extend_outputs         | none (allocates) | no  | no           |
| extend_capacities, extend_tables | none (host) | no | yes     |
| extend_violations      | reads the guard back | yes (CUDA) | no |
"""

from __future__ import annotations

import sys
from typing import Any, List, NamedTuple, Optional, Tuple

from . import _check, _ffi
from ._check import int_array as _int_array
from ._deps import require
from ._guard_names import WORD_INT32S, Violation
from ._guard_names import word_violation
from .errors import InvalidArgument

# The capacities extend_metadata_ passes: -1, each the exact one for the call (C++ computes it).
EXACT = (-1, -1, -1)
LAYOUTS = ("tokens", "fa3", "prefix", "full")


def extend_tables(batch: int, max_seq_len: int, extend_tokens: int, page_size: int) -> Any:
    """C++'s draft-extend tables of a bucket (extend_metadata.hpp extend_exact_tables,
    extend_shape_of): {"capacity": [page columns, prefix kv, full kv, scratch words, guard
    words], "fields": [(name, layout, rows, cols, formula), ...]} in the tables' field order;
    cols -1 for a vector. Refused by name outside the ranges of extend_params. Host only."""
    args = [_check.index(f, v) for f, v in (("max_batch", batch), ("max_seq_len", max_seq_len),
                                            ("extend_tokens", extend_tokens),
                                            ("page_size", page_size))]
    got = _ffi.extend_tables(*args)
    fields = [(str(f[0]), str(f[1]), int(f[2]), int(f[3]), str(f[4])) for f in got["fields"]]
    return {"capacity": [int(x) for x in got["capacity"]], "fields": fields}


# The field names of each layout, in the C++ tables' order (served, not restated).
_SERVED = extend_tables(1, 1, 1, 1)
FIELDS = {layout: tuple(f[0] for f in _SERVED["fields"] if f[1] == layout) for layout in LAYOUTS}
GUARD_SHAPE = (_SERVED["capacity"][4], WORD_INT32S)  # extend_guard_count words

# The extend tokens (int32, B * W rows t = r * W + j): position, out_cache_loc [>= B * W],
# select_index [>= B].
ExtendTokens = NamedTuple("ExtendTokens", [(n, Any) for n in FIELDS["tokens"]])  # type: ignore
ExtendTokens.__doc__ = "The extend tokens (docs/extend.md): " + ", ".join(FIELDS["tokens"])
# FA3 (C1): page_table [>= B, >= ceil((M + W) / ps)] (rows at any stride), cache_seqlen [>= B],
# cu_seqlens_q/k [>= B + 1], max_seqlen_k [>= 1].
ExtendFa3 = NamedTuple("ExtendFa3", [(n, Any) for n in FIELDS["fa3"]])  # type: ignore[misc]
ExtendFa3.__doc__ = "FA3's draft-extend tables (C1): " + ", ".join(FIELDS["fa3"])
# The CSR prefix layout (C2p, Triton): qo/kv indptr [>= B + 1], kv_indices [>= B * M].
ExtendPrefix = NamedTuple("ExtendPrefix", [(n, Any) for n in FIELDS["prefix"]])  # type: ignore
ExtendPrefix.__doc__ = "The CSR prefix layout (C2p, Triton): " + ", ".join(FIELDS["prefix"])
# The CSR full layout (C2f, FlashInfer's replay): qo/kv indptr [>= B + 1], kv_indices
# [>= B * (M + W)], kv_last_page_len [>= B].
ExtendFull = NamedTuple("ExtendFull", [(n, Any) for n in FIELDS["full"]])  # type: ignore[misc]
ExtendFull.__doc__ = "The CSR full layout (C2f, FlashInfer): " + ", ".join(FIELDS["full"])
_TYPES = dict(tokens=ExtendTokens, fa3=ExtendFa3, prefix=ExtendPrefix, full=ExtendFull)


class ExtendOutputs(NamedTuple):
    tokens: Optional[ExtendTokens]
    fa3: Optional[ExtendFa3]
    prefix: Optional[ExtendPrefix]
    full: Optional[ExtendFull]
    guard: Any  # int32 [5, 10] (>= 50 entries, 8-byte aligned); reset by every call


class ExtendCapacity(NamedTuple):
    """Exact sizes for a bucket (docs/extend.md): each reached by a full bucket at seq_len M."""

    page_columns: int  # ceil((M + W) / page_size)
    prefix_kv_indices: int  # B * M
    full_kv_indices: int  # B * (M + W)
    scratch_words: int  # int64, CUDA runs
    guard_words: int  # extend_guard_count


def extend_capacities(max_batch: int, max_seq_len: int, extend_tokens: int,
                      page_size: int) -> ExtendCapacity:
    """The exact buffer sizes of a bucket of max_batch requests whose seq_len (before the window)
    is at most max_seq_len. Refused by name outside the ranges of extend_params. Host only."""
    return ExtendCapacity(*extend_tables(max_batch, max_seq_len, extend_tokens,
                                         page_size)["capacity"])


def extend_outputs(max_batch: int, max_seq_len: int, extend_tokens: int, page_size: int, *,
                   layouts: Tuple[str, ...] = LAYOUTS, device: Any = None) -> ExtendOutputs:
    """Zeroed outputs of exactly C++'s sizes (extend_tables) for the layouts named ("tokens",
    "fa3", "prefix", "full"); device None: numpy arrays, else torch tensors on that device
    (torch.zeros: allocates; call it before any capture)."""
    if isinstance(layouts, str) or any(x not in LAYOUTS for x in layouts) or not layouts:
        raise InvalidArgument(f"layouts: {layouts!r}, expected a non-empty tuple of {LAYOUTS}",
                              field="layouts")
    fields = extend_tables(max_batch, max_seq_len, extend_tokens, page_size)["fields"]
    if device is None:
        np = require("numpy", "specgraph.extend_outputs")

        def zeros(shape: Tuple[int, ...]) -> Any:
            return np.zeros(shape, dtype=np.int32)
    else:
        torch = require("torch", "specgraph.extend_outputs(device=...)")

        def zeros(shape: Tuple[int, ...]) -> Any:
            return torch.zeros(shape, dtype=torch.int32, device=device)
    made = {name: zeros((rows, cols) if cols >= 0 else (rows,))
            for name, _, rows, cols, _ in fields}
    sets = {x: (_TYPES[x](*(made[n] for n in FIELDS[x])) if x in layouts else None)
            for x in LAYOUTS}
    return ExtendOutputs(**sets, guard=zeros(GUARD_SHAPE))


def _is_torch(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _sets(out: Any) -> List[List[Any]]:
    """The four layouts' tensors as lists for the extension, which applies the one rule (a
    layout is all of its tensors or none; a None among them is a missing one, named by C++)."""
    if not isinstance(out, ExtendOutputs):
        raise TypeError(f"out: expected specgraph.ExtendOutputs (extend_outputs() or your own "
                        f"tensors in one), got {_check.type_name(out)}")
    return [[] if getattr(out, x) is None else list(getattr(out, x)) for x in LAYOUTS]


def extend_metadata_(out: ExtendOutputs, req_to_token: Any, req_pool_indices: Any,
                     seq_lens: Any, accept_lens: Any, *, extend_tokens: int, page_size: int,
                     max_seq_len: int, real_batch: Any = None, kv_slots: Optional[int] = None,
                     scratch: Any = None) -> None:
    """Writes the draft-extend metadata of len(seq_lens) requests (the bucket B; the first
    real_batch are real, the rest padding: pool row 0, L = 1) into `out`.

    req_to_token: int32 [pool_rows, width], width >= seq_len + W for every real request;
    req_pool_indices, seq_lens, accept_lens: [B] int32 or int64 (int64 narrowed, never
    silently: on host memory a value that does not fit int32 is refused naming the element; on
    CUDA it is clamped to a value the kernels refuse and record as bad input in guard word 0).
    extend_tokens W in [1, 1024]; page_size of the FA3 table, any >= 1; max_seq_len M bounds
    every seq_len and sizes the outputs: each buffer must hold the exact capacity of (B, M, W,
    page_size), extend_capacities. real_batch: an int in [0, B] (default B) or an int32 [1]
    tensor read on the device. kv_slots: slots must be below it (default unbounded). scratch:
    int64 [>= extend_scratch_words(B)] on the device for CUDA runs (default: a new tensor per
    call, in the graph pool under capture). The guard words are reset, then record bad input
    (word 0), refused stores (1 to 3) and accept lengths of 0 (4); extend_violations reads
    them."""
    sets = _sets(out)
    w = _check.index("extend_tokens", extend_tokens)
    ps = _check.index("page_size", page_size)
    m = _check.index("max_seq_len", max_seq_len)
    limit = _check.INT64_MAX if kv_slots is None else _check.int_in(
        "kv_slots", kv_slots, 1, _check.INT64_MAX)
    at = None
    if real_batch is not None and hasattr(real_batch, "__dlpack__"):
        at = real_batch  # read on the device; the scalar is then the bucket
    if _is_torch(req_to_token):
        from . import _torch_ops  # noqa: F401  (registers torch.ops.specgraph.*)

        torch = sys.modules["torch"]
        named = [("req_pool_indices", req_pool_indices), ("seq_lens", seq_lens),
                 ("accept_lens", accept_lens), ("guard", out.guard)]
        if at is not None:
            named.append(("real_batch", at))
        for x in LAYOUTS:
            group = getattr(out, x)
            if group is not None:
                named += list(zip(group._fields, group))
        for field, v in named:
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"{field}: expected a torch.Tensor like req_to_token, got "
                                f"{_check.type_name(v)}")
        batch = int(seq_lens.numel())
        rb = batch if real_batch is None or at is not None else _check.index(
            "real_batch", real_batch)
        sc = [] if scratch is None else [scratch]
        # Capacities -1: the exact ones, computed in C++ (extend_exact_tables).
        torch.ops.specgraph.extend_metadata_(req_to_token, req_pool_indices, seq_lens,
                                             accept_lens, at, w, ps, m, rb, limit, *EXACT,
                                             *sets, out.guard, sc)
        return
    np = require("numpy", "specgraph.extend_metadata_")
    pool = _int_array("req_pool_indices", req_pool_indices, "int32", np).reshape(-1)
    seq = _int_array("seq_lens", seq_lens, "int32", np).reshape(-1)
    acc = _int_array("accept_lens", accept_lens, "int32", np).reshape(-1)
    batch = int(seq.size)
    rb = batch if real_batch is None or at is not None else _check.index(
        "real_batch", real_batch)
    table = _int_array("req_to_token", req_to_token, "int32", np)
    _ffi.extend_metadata(table, pool, seq, acc, at, w, ps, m, rb, limit, *EXACT, *sets,
                         out.guard, scratch)


def extend_violations(guard: Any) -> List[Violation]:
    """The violations the last call recorded, one per guard word that has any (its first, by row
    and column, and the total): word 0 bad input (extend_metadata), 1 the page table's refused
    columns, 2 the prefix layout's kv_indices, 3 the full layout's, 4 accept lengths of 0
    (extend_select_index). Reads the guard (a CUDA one: a sync)."""
    if _is_torch(guard):
        guard = guard.detach().cpu().numpy()
    np = require("numpy", "specgraph.extend_violations")
    g = np.ascontiguousarray(guard).reshape(-1)
    words, n = GUARD_SHAPE
    if g.dtype != np.int32 or g.size < words * n:
        raise InvalidArgument(f"guard: dtype {g.dtype}, {g.size} entries, expected int32 "
                              f"[{words}, {n}]", field="guard")
    found = []
    for k in range(words):
        word = g[n * k: n * k + n]
        if int(word[0]):
            found.append(word_violation(word))
    return found
