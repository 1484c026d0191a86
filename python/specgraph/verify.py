"""Target-verify metadata of a draft tree (docs/verify.md) written into the caller's tensors: the
FA3 cascade tables (prefix + expand) and/or FlashInfer's indices and bit-packed mask.

    out = specgraph.verify_outputs(max_batch, max_seq_len, D, page_size, device="cuda")
    specgraph.verify_metadata_(out, req_to_token, req_pool_indices, seq_lens, custom_mask,
                               draft_tokens=D, page_size=page_size, max_seq_len=max_seq_len)
    out.fa3.expand_page_table, out.flashinfer.packed_mask, ...   # the tensors written

or over the engine's own buffers: VerifyOutputs(fa3=VerifyFa3(*eight tensors),
flashinfer=VerifyFlashInfer(*seven tensors), guard=int32 [3, 10]); either set may be None.

`seq_lens` count the committed prefix WITHOUT the D verify tokens; `custom_mask` is the engine's
full layout (one byte a cell, the real requests' blocks back to back). Every argument and buffer
is checked on the host first (InvalidArgument naming the buffer, its size and the size needed;
nothing written). On CUDA tensors the kernels are enqueued on torch's current stream (no
synchronisation, no allocation but the scratch tensor, which under torch.cuda.graph lands in the
graph's pool: capture-safe); on host memory (numpy, CPU tensors) the host twin runs after every
content is checked, the mask's length included (a seq_len that already counts the D verify
tokens is refused by name). With torch tensors the call goes through
torch.ops.specgraph.verify_metadata_ (a custom op with a fake implementation).

| function               | stream  | synchronises | capture-safe |
|------------------------|---------|--------------|--------------|
| verify_metadata_       | current | no           | yes (CUDA)   |
| verify_outputs         | none (allocates) | no  | no           |
| verify_violations      | reads the guard back | yes (CUDA) | no |
"""

from __future__ import annotations

import sys
from typing import Any, List, NamedTuple, Optional, Tuple

from . import _check, _ffi
from ._check import int_array as _int_array
from ._deps import require
from ._guard_names import VERIFY_WORDS, WORD_INT32S, Violation
from ._guard_names import word_violation
from .errors import InvalidArgument

INT32_MAX = (1 << 31) - 1
# The guard words of one call (bad input / prefix table, kv, mask), each as int32s: the
# extension's numbers (verify_guard_count, sizeof(guard_word)).
GUARD_SHAPE = (VERIFY_WORDS, WORD_INT32S)
# The capacities verify_metadata_ passes: -1, each the exact one for the call (C++ computes it).
EXACT = (-1, -1, -1)


def verify_tables(batch: int, max_seq_len: int, draft_tokens: int, page_size: int) -> Any:
    """C++'s verify tables of a bucket (verify_metadata.hpp verify_tables, verify_shape_of):
    {"capacity": [5 ints], "fields": [(name, layout, rows, cols, bytes, formula), ...]} in the
    tables' field order; cols -1 for a vector. Refused by name outside the ranges of
    verify_params. Host only."""
    args = [_check.index(f, v) for f, v in (("max_batch", batch), ("max_seq_len", max_seq_len),
                                            ("draft_tokens", draft_tokens),
                                            ("page_size", page_size))]
    got = _ffi.verify_tables(*args)
    fields = [(str(f[0]), str(f[1]), int(f[2]), int(f[3]), bool(f[4]), str(f[5]))
              for f in got["fields"]]
    return {"capacity": [int(x) for x in got["capacity"]], "fields": fields}


# The field names of each layout, in the C++ tables' order (served, not restated).
_FIELDS = verify_tables(1, 1, 1, 1)["fields"]
FA3_FIELDS = tuple(f[0] for f in _FIELDS if f[1] == "fa3")
FLASHINFER_FIELDS = tuple(f[0] for f in _FIELDS if f[1] == "flashinfer")

# The FA3 cascade (docs/verify.md section 2): int32, for a bucket B, M and D: prefix_page_table
# [>= B, >= ceil(M / page_size)] (rows at any stride), prefix_cache_seqlen [>= B],
# prefix_cu_seqlens_q/k [>= B + 1], expand_page_table [>= B * D, >= D] (rows at any stride),
# expand_cache_seqlen [>= B * D], expand_cu_seqlens_q/k [>= B * D + 1].
VerifyFa3 = NamedTuple("VerifyFa3", [(n, Any) for n in FA3_FIELDS])  # type: ignore[misc]
VerifyFa3.__doc__ = "The FA3 cascade (docs/verify.md section 2): " + ", ".join(FA3_FIELDS)
# FlashInfer's prefill with a custom mask (docs/verify.md section 3): qo_indptr, kv_indptr
# int32 [>= B + 1], kv_indices int32 [>= B * (M + D)], kv_last_page_len int32 [>= B],
# mask_indptr int32 [>= B + 1], packed_mask uint8 [>= B * ceil(D * (M + D) / 8)],
# packed_mask_indptr int32 [>= B + 1].
VerifyFlashInfer = NamedTuple(  # type: ignore[misc]
    "VerifyFlashInfer", [(n, Any) for n in FLASHINFER_FIELDS])
VerifyFlashInfer.__doc__ = ("FlashInfer's prefill with a custom mask (docs/verify.md section 3): "
                            + ", ".join(FLASHINFER_FIELDS))


class VerifyOutputs(NamedTuple):
    fa3: Optional[VerifyFa3]
    flashinfer: Optional[VerifyFlashInfer]
    guard: Any  # int32 [3, 10] (>= 30 entries, 8-byte aligned); reset by every call


class VerifyCapacity(NamedTuple):
    """Exact sizes for a bucket (docs/verify.md section 6)."""

    prefix_columns: int  # ceil(M / page_size)
    kv_indices: int  # B * (M + D)
    packed_mask_bytes: int  # B * ceil(D * (M + D) / 8)
    mask_cells: int  # B * D * (M + D), the engine's custom_mask at most
    scratch_words: int  # 5 * B + 2 * B * D (int64, CUDA runs)


def verify_capacities(max_batch: int, max_seq_len: int, draft_tokens: int,
                      page_size: int) -> VerifyCapacity:
    """The exact buffer sizes of a bucket of max_batch requests whose seq_len (without the D
    verify tokens) is at most max_seq_len. Refused by name outside the ranges of verify_params
    (B * D * (M + D) must fit int32). Host only."""
    return VerifyCapacity(*verify_tables(max_batch, max_seq_len, draft_tokens,
                                         page_size)["capacity"])


def verify_outputs(max_batch: int, max_seq_len: int, draft_tokens: int, page_size: int, *,
                   formats: str = "both", device: Any = None) -> VerifyOutputs:
    """Zeroed outputs of exactly the sizes of verify_capacities: formats "fa3", "flashinfer" or
    "both"; device None: numpy arrays, else torch tensors on that device (torch.zeros: allocates;
    call it before any capture)."""
    if formats not in ("fa3", "flashinfer", "both"):
        raise InvalidArgument(f"formats: {formats!r} is not 'fa3', 'flashinfer' or 'both'",
                              field="formats")
    fields = verify_tables(max_batch, max_seq_len, draft_tokens, page_size)["fields"]
    if device is None:
        np = require("numpy", "specgraph.verify_outputs")

        def zeros(shape: Tuple[int, ...], u8: bool) -> Any:
            return np.zeros(shape, dtype=np.uint8 if u8 else np.int32)
    else:
        torch = require("torch", "specgraph.verify_outputs(device=...)")

        def zeros(shape: Tuple[int, ...], u8: bool) -> Any:
            return torch.zeros(shape, dtype=torch.uint8 if u8 else torch.int32, device=device)
    made = {name: zeros((rows, cols) if cols >= 0 else (rows,), u8)
            for name, _, rows, cols, u8, _ in fields}
    fa3 = VerifyFa3(*(made[n] for n in FA3_FIELDS)) if formats in ("fa3", "both") else None
    fi = VerifyFlashInfer(*(made[n] for n in FLASHINFER_FIELDS)) if formats in (
        "flashinfer", "both") else None
    return VerifyOutputs(fa3, fi, zeros(GUARD_SHAPE, False))


def bucket_outputs(out: VerifyOutputs, fields: List[Tuple[Any, ...]]) -> VerifyOutputs:
    """`out` sliced to a bucket: each buffer's first rows, as many as C++'s shape of the bucket
    gives (verify_tables(bucket, ...)["fields"]). Views; nothing copied."""
    rows = {f[0]: f[2] for f in fields}
    fa3 = None if out.fa3 is None else VerifyFa3(
        *(t[: rows[n]] for n, t in zip(FA3_FIELDS, out.fa3)))
    fi = None if out.flashinfer is None else VerifyFlashInfer(
        *(t[: rows[n]] for n, t in zip(FLASHINFER_FIELDS, out.flashinfer)))
    return VerifyOutputs(fa3, fi, out.guard)


def _is_torch(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _sets(out: Any) -> tuple:
    """The two layouts' tensors as lists for the extension, which applies the one rule (a layout
    is all of its tensors or none; a None among them is a missing one, named by C++)."""
    if not isinstance(out, VerifyOutputs):
        raise TypeError(f"out: expected specgraph.VerifyOutputs (verify_outputs() or your own "
                        f"tensors in one), got {_check.type_name(out)}")
    return ([] if out.fa3 is None else list(out.fa3),
            [] if out.flashinfer is None else list(out.flashinfer))


def verify_metadata_(out: VerifyOutputs, req_to_token: Any, req_pool_indices: Any,
                     seq_lens: Any, custom_mask: Any, *, draft_tokens: int, page_size: int,
                     max_seq_len: int, real_batch: Optional[int] = None, mask_exact: bool = True,
                     kv_slots: Optional[int] = None, scratch: Any = None) -> None:
    """Writes the verify metadata of len(seq_lens) requests (the bucket; the first real_batch,
    default all, are real, the rest padding: they attend everything) into `out`.

    req_to_token: int32 [pool_rows, W], W >= seq_len + D for every request; req_pool_indices,
    seq_lens: [batch] int32 or int64 (int64 narrowed, never silently: on host memory a value
    that does not fit int32 is refused naming the element; on CUDA it is clamped to a value the
    kernels refuse and record as bad input in guard word 0); custom_mask: uint8 or bool, the
    engine's full layout, exactly sum(D * (seq_len + D)) over the real requests (mask_exact), or
    a static buffer at least that long (mask_exact=False: only a bound; nothing past it is read).
    draft_tokens D in [1, 1024]; page_size of the FA3 prefix table; max_seq_len M bounds every
    seq_len and sizes the outputs: each buffer must hold the exact capacity of (batch, M, D,
    page_size), verify_capacities. kv_slots: slots must be below it (default unbounded).
    scratch: int64 [>= 5 * batch + 2 * batch * D] on the device for CUDA runs (default: a new
    tensor per call, in the graph pool under capture). The guard words are reset, then record
    bad input (guard 0) and refused stores; verify_violations reads them."""
    fa3, fi = _sets(out)
    d = _check.index("draft_tokens", draft_tokens)
    ps = _check.index("page_size", page_size)
    m = _check.index("max_seq_len", max_seq_len)
    exact = _check.boolean("mask_exact", mask_exact)
    limit = _check.INT64_MAX if kv_slots is None else _check.int_in(
        "kv_slots", kv_slots, 1, _check.INT64_MAX)
    if _is_torch(req_to_token):
        from . import _torch_ops  # noqa: F401  (registers torch.ops.specgraph.*)

        torch = sys.modules["torch"]
        named = [("req_pool_indices", req_pool_indices), ("seq_lens", seq_lens),
                 ("custom_mask", custom_mask), ("guard", out.guard)]
        for group in (out.fa3, out.flashinfer):
            if group is not None:
                named += list(zip(group._fields, group))
        for field, v in named:
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"{field}: expected a torch.Tensor like req_to_token, got "
                                f"{_check.type_name(v)}")
        batch = int(seq_lens.numel())
        rb = batch if real_batch is None else _check.index("real_batch", real_batch)
        sc = [] if scratch is None else [scratch]
        # Capacities -1: the exact ones, computed in C++ (verify_exact_tables).
        torch.ops.specgraph.verify_metadata_(req_to_token, req_pool_indices, seq_lens,
                                             custom_mask, d, ps, m, rb, exact, limit, *EXACT,
                                             fa3, fi, out.guard, sc)
        return
    np = require("numpy", "specgraph.verify_metadata_")
    pool = _int_array("req_pool_indices", req_pool_indices, "int32", np).reshape(-1)
    seq = _int_array("seq_lens", seq_lens, "int32", np).reshape(-1)
    batch = int(seq.size)
    rb = batch if real_batch is None else _check.index("real_batch", real_batch)
    table = _int_array("req_to_token", req_to_token, "int32", np)
    _ffi.verify_metadata(table, pool, seq, custom_mask, d, ps, m, rb, exact, limit, *EXACT, fa3,
                         fi, out.guard, scratch)


def verify_violations(guard: Any) -> List[Violation]:
    """The violations the last call recorded, one per guard word that has any: word 0 bad input
    (kernel verify_metadata, row = request or -1 for the mask's length) and refused prefix
    columns, word 1 kv_indices, word 2 the packed mask. Reads the guard (a CUDA one: a sync)."""
    if _is_torch(guard):
        guard = guard.detach().cpu().numpy()
    np = require("numpy", "specgraph.verify_violations")
    g = np.ascontiguousarray(guard).reshape(-1)
    words, n = GUARD_SHAPE
    if g.dtype != np.int32 or g.size < words * n:
        raise InvalidArgument(f"guard: dtype {g.dtype}, {g.size} entries, expected int32 "
                              f"[{words}, {n}]", field="guard")
    found = []
    for w in range(words):
        word = g[n * w: n * w + n]
        if int(word[0]):
            found.append(word_violation(word))
    return found
