"""The metadata kernels at function level, on host arrays: for crash dumps, tests and the
published vectors (docs/metadata.md sections 3 and 6, docs/csr.md), like `specgraph metadata
expand|fallback|kv-indices`.

These run the kernels' own per-row code on the calling thread over numpy arrays (or anything
host-resident with __dlpack__); they need numpy. Parameters and contents are validated first
(InvalidArgument naming the field, nothing written); a store that would leave its buffer is
refused and returned as a Violation, never made.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence

from . import _check, _ffi
from ._deps import require
from ._check import int_array as _int_array
from ._guard_names import Violation
from ._guard_names import violation as _violation
from .errors import InvalidArgument


class ExpandResult(NamedTuple):
    page_table: Any  # int32 [batch * topk, capacity] (or the caller's table)
    cache_seqlen: Any  # int32 [batch * topk]
    violations: List[Violation]  # one per violating row, in row order


class FallbackResult(NamedTuple):
    indices: Any  # int32 [n]
    violations: List[Violation]


class KvIndicesResult(NamedTuple):
    kv_indptr: Any  # int32 [num_steps, batch * topk + 1], always complete
    kv_indices: List[Any]  # per step: int32 or int64 [min(used[s], capacity[s])]
    used: List[int]  # the entries each step needs: topk * sum(Lw) + batch * topk * (s + 1)
    violations: Dict[int, Violation]  # step -> its refused stores (capacity short)


def _limits() -> Any:
    return _ffi.limits()


def _output(field: str, value: Any) -> Any:
    if not hasattr(value, "__dlpack__"):
        raise TypeError(f"{field}: expected an int32 array (numpy.ndarray or a tensor with "
                        f"__dlpack__), got {_check.type_name(value)}")
    flags = getattr(value, "flags", None)
    if flags is not None and not getattr(flags, "writeable", True):
        raise InvalidArgument(f"{field}: a read-only array, but it is written", field=field)
    return value


def expand_page_table(cache_loc: Any, last_page_len: Any, *, topk: int, page_size: int,
                      decode_length: int, slots_read: Optional[int] = None,
                      capacity: Optional[int] = None, kv_slots: int = 1 << 62,
                      page_table: Any = None, cache_seqlen: Any = None) -> ExpandResult:
    """Expand metadata (docs/metadata.md section 3) for every row of `cache_loc`.

    cache_loc: int64 [batch * topk, width] slot rows (or flat); last_page_len: int32 [batch]
    (any integer arrays or lists whose values fit; nothing is narrowed); slots_read: leading
    slots read per row (default decode_length: the runtime's slice); capacity: writable columns
    (default decode_length + 1; at most limits::max_num_steps + 1 without a page_table).
    page_table / cache_seqlen: optional int32 host arrays to write into ([rows, stride >=
    capacity] and [rows]); by default zeroed new ones, allocated once everything else is
    checked. Host only; runs inline.
    """
    np = require("numpy", "specgraph.metadata.expand_page_table")

    lim = _limits()
    topk = _check.int_in("topk", topk, 1, lim["max_topk"], "limits::max_topk")
    page_size = _check.index("page_size", page_size)
    d = _check.int_in("decode_length", decode_length, 1, lim["max_num_steps"],
                      "limits::max_num_steps")
    slots = d if slots_read is None else _check.index("slots_read", slots_read)
    cap = d + 1 if capacity is None else _check.index("capacity", capacity)
    kv_slots = _check.int_in("kv_slots", kv_slots, 1, _check.INT64_MAX)
    lpl = _int_array("last_page_len", last_page_len, "int32", np).reshape(-1)
    if lpl.size == 0:
        raise InvalidArgument("last_page_len: empty, expected [batch >= 1]", field="last_page_len")
    rows = lpl.size * topk
    loc = _int_array("cache_loc", cache_loc, "int64", np)
    if loc.ndim == 1 and loc.size % rows == 0 and loc.size:
        loc = loc.reshape(rows, -1)
    if loc.ndim != 2 or loc.shape[0] != rows:
        raise InvalidArgument(f"cache_loc: shape {list(loc.shape)}, expected [batch * topk = "
                              f"{rows}, width]", field="cache_loc")
    if page_table is None:
        most = lim["max_num_steps"] + 1
        if not 1 <= cap <= most:
            raise InvalidArgument(f"capacity: {cap} is outside [1, limits::max_num_steps + 1 "
                                  f"{most}] for a default page_table (pass page_table for a "
                                  "wider one)", field="capacity")
        page_table = np.zeros((rows, cap), dtype=np.int32)
    else:
        page_table = _output("page_table", page_table)
    if cache_seqlen is None:
        cache_seqlen = np.zeros(rows, dtype=np.int32)
    else:
        cache_seqlen = _output("cache_seqlen", cache_seqlen)
    found = _ffi.expand_page_table_host(loc, lpl, page_table, cache_seqlen, topk, page_size, d,
                                        slots, cap, kv_slots)
    return ExpandResult(page_table, cache_seqlen, [_violation(w) for w in found])


def sparse_fallback(seq_len: int, max_count: int, capacity: int) -> FallbackResult:
    """Evenly spaced indices for an empty selection (docs/metadata.md section 6): count =
    min(max_count, seq_len), step = max(1, ceil(seq_len / count)); at most `capacity` stored,
    an excess index refused and reported. seq_len in [0, limits::max_keys], max_count in
    [0, limits::max_sparse_size], capacity in [1, limits::max_sparse_size], checked before the
    output is allocated. Host only."""
    np = require("numpy", "specgraph.metadata.sparse_fallback")

    lim = _limits()
    seq_len = _check.int_in("seq_len", seq_len, 0, lim["max_keys"], "limits::max_keys")
    max_count = _check.int_in("max_count", max_count, 0, lim["max_sparse_size"],
                              "limits::max_sparse_size")
    capacity = _check.int_in("capacity", capacity, 1, lim["max_sparse_size"],
                             "limits::max_sparse_size")
    out = np.zeros(max(1, min(capacity, max_count, seq_len)), dtype=np.int32)
    r = [int(x) for x in _ffi.sparse_fallback(seq_len, max_count, out, capacity)]
    violations = [_violation(r[1:])] if r[1] else []
    return FallbackResult(out[: r[0]].copy(), violations)


def draft_kv_indices(seq_len: Any, req_pool_index: Any, req_to_token: Any, *, topk: int,
                     num_steps: int, page_size: int, entry_page_size: int = 1, window: int = 0,
                     sink: int = 0, slot_stride: int = 0,
                     capacity: Optional[Sequence[int]] = None,
                     kv_slots: int = 1 << 62, int64: bool = False) -> KvIndicesResult:
    """The CSR draft-decode indices of every step (docs/csr.md), as `specgraph metadata
    kv-indices` computes them: the kernels' host twin, one launch per step.

    seq_len, req_pool_index: [batch] (any integer arrays or lists whose values fit int32);
    req_to_token: int32-valued [pool_rows, width], one slot per position (entry_page_size 1) or
    one page id per entry_page_size positions; window / sink: the draft attention window (0:
    off); slot_stride: draft slots per branch, the branch regions' layout (0, the default:
    num_steps; else [num_steps, 65536]; SGLang's S for S - 1 draft steps); capacity: each step's kv_indices capacity (default: what it uses), a shorter one
    refuses the excess and reports it in `violations`; kv_slots: slots must be below it;
    int64: int64 kv_indices (Triton's) instead of int32. Every value is checked first
    (InvalidArgument naming the field or element; a request whose branch regions pass its row,
    `seq_len[r]`), then the outputs are allocated. Host only; runs inline.
    """
    np = require("numpy", "specgraph.metadata.draft_kv_indices")

    seq = _int_array("seq_len", seq_len, "int32", np).reshape(-1)
    pool = _int_array("req_pool_index", req_pool_index, "int32", np).reshape(-1)
    table = _int_array("req_to_token", req_to_token, "int32", np)
    if seq.size == 0:
        raise InvalidArgument("seq_len: empty, expected [batch >= 1]", field="seq_len")
    scalars = [_check.index(f, v) for f, v in (
        ("topk", topk), ("num_steps", num_steps), ("page_size", page_size),
        ("entry_page_size", entry_page_size), ("window", window), ("sink", sink),
        ("slot_stride", slot_stride), ("kv_slots", kv_slots))]
    int64 = _check.boolean("int64", int64)
    if scalars[7] < 1:
        raise InvalidArgument(f"kv_slots: {scalars[7]} is below the minimum 1", field="kv_slots")
    used = [int(u) for u in _ffi.kv_indices_used_host(seq, pool, table, *scalars, int64)]
    if capacity is None:
        caps = used
    else:
        if isinstance(capacity, (str, bytes)) or not hasattr(capacity, "__iter__"):
            raise TypeError(f"capacity: expected a sequence of ints, got "
                            f"{_check.type_name(capacity)}")
        caps = [_check.index(f"capacity[{i}]", c) for i, c in enumerate(capacity)]
        if len(caps) != len(used):
            raise InvalidArgument(f"capacity: {len(caps)} entries, expected one per step, "
                                  f"{len(used)}", field="capacity")
        for i, c in enumerate(caps):
            if not 0 <= c < 1 << 31:
                raise InvalidArgument(f"capacity[{i}]: {c} is outside [0, 2147483647]",
                                      field=f"capacity[{i}]")
    kept = [min(u, c) for u, c in zip(used, caps)]
    indptr = np.zeros((len(used), seq.size * scalars[0] + 1), dtype=np.int32)
    indices = np.zeros((len(used), max(max(kept), 1)), dtype=np.int64 if int64 else np.int32)
    words = _ffi.kv_indices_run_host(seq, pool, table, *scalars, indptr, indices,
                                     [min(c, indices.shape[1]) for c in caps])
    violations = {s: _violation(w) for s, w in enumerate(words) if int(w[0])}
    return KvIndicesResult(indptr, [indices[s, :k].copy() for s, k in enumerate(kept)], used,
                           violations)


def verify(page_size: int, num_draft_tokens: int, seq_len: Any, req_pool_index: Any,
           req_to_token: Any, custom_mask: Any, *, real_batch: Optional[int] = None,
           prefix_capacity: Optional[int] = None, kv_indices_capacity: Optional[int] = None,
           packed_mask_capacity: Optional[int] = None) -> Dict[str, Any]:
    """`specgraph metadata verify` in Python (docs/verify.md section 8): both verify layouts of
    one case as the CLI's JSON object (nested dicts and lists; json.dumps(..., separators=(",",
    ":")) prints what the CLI prints). custom_mask: 0/1 cells of the real requests' blocks;
    capacities as the CLI's keys (default: what the batch uses; a short one refuses stores,
    listed in "violations"). Bad input raises InvalidArgument naming the field (the CLI exits 2).
    Host only; runs the kernels' host twin."""
    np = require("numpy", "specgraph.metadata.verify")
    from .verify import VerifyFa3, VerifyFlashInfer, VerifyOutputs, verify_violations

    ps = _check.index("page_size", page_size)
    d = _check.int_in("num_draft_tokens", num_draft_tokens, 1, 1 << 10)
    seq = _int_array("seq_len", seq_len, "int32", np).reshape(-1)
    pool = _int_array("req_pool_index", req_pool_index, "int32", np).reshape(-1)
    if seq.size == 0:
        raise InvalidArgument("seq_len: empty (batch must be >= 1)", field="seq_len")
    if pool.size != seq.size:
        raise InvalidArgument(f"req_pool_index: {pool.size} entries, expected one per request, "
                              f"{seq.size}", field="req_pool_index")
    for r, n in enumerate(seq.tolist()):  # before any size is derived from them
        if n < 1:
            raise InvalidArgument(f"seq_len[{r}]: {n} is below the minimum 1",
                                  field=f"seq_len[{r}]")
    table = _int_array("req_to_token", req_to_token, "int32", np)
    if table.ndim != 2 or table.size == 0:
        raise InvalidArgument(f"req_to_token: shape {list(table.shape)}, expected [rows >= 1, "
                              "width >= 1]", field="req_to_token")
    mask = _int_array("custom_mask", custom_mask, "int64", np).reshape(-1)
    off = np.flatnonzero((mask != 0) & (mask != 1))
    if off.size:
        i = int(off[0])
        raise InvalidArgument(f"custom_mask[{i}]: {int(mask[i])} is not 0 or 1",
                              field=f"custom_mask[{i}]")
    mask = mask.astype(np.uint8)
    bs, m = int(seq.size), max(1, int(seq.max()))
    rb = bs if real_batch is None else _check.int_in("real_batch", real_batch, 0, bs)
    kv_used = int((seq.astype(np.int64) + d).sum())
    bytes_used = int(((d * (seq.astype(np.int64) + d) + 7) // 8).sum())
    caps = []
    for field, v, default in (("prefix_capacity", prefix_capacity, -(-m // max(ps, 1))),
                              ("kv_indices_capacity", kv_indices_capacity, kv_used),
                              ("packed_mask_capacity", packed_mask_capacity, bytes_used)):
        caps.append(default if v is None else _check.int_in(field, v, 0, (1 << 31) - 1))
    cap, kv_kept, bytes_kept = caps[0], min(kv_used, caps[1]), min(bytes_used, caps[2])
    rows = bs * d

    def z(*shape: int, u8: bool = False) -> Any:
        return np.zeros(shape, dtype=np.uint8 if u8 else np.int32)

    fa3 = VerifyFa3(z(bs, max(cap, 1)), z(bs), z(bs + 1), z(bs + 1), z(rows, d), z(rows),
                    z(rows + 1), z(rows + 1))
    fi = VerifyFlashInfer(z(bs + 1), z(bs + 1), z(max(kv_kept, 1)), z(bs), z(bs + 1),
                          z(max(bytes_kept, 1), u8=True), z(bs + 1))
    out = VerifyOutputs(fa3, fi, z(3, 10))
    if not mask.size:  # every real request has D * (1 + D) cells at least
        need = int((d * (seq[:rb].astype(np.int64) + d)).sum())
        raise InvalidArgument(f"custom_mask: 0 cells, the formula sum(D * (seq_len + D)) over "
                              f"the real requests gives {need}", field="custom_mask")
    # A capacity past what the batch uses binds nothing: the buffers hold what is kept.
    _ffi.verify_metadata(table, pool, seq, mask, d, ps, m, rb, True, _check.INT64_MAX, cap,
                         kv_kept, bytes_kept, list(fa3), list(fi), out.guard, None)
    violations = [{"kind": v.kind, "kernel": v.kernel, "row": v.row, "column": v.column,
                   "capacity": v.capacity, "value": v.value, "count": v.violations}
                  for v in verify_violations(out.guard)]
    return {
        "fa3": {
            "prefix": {"page_table": fa3.prefix_page_table[:, :cap].tolist(),
                       "cache_seqlen": fa3.prefix_cache_seqlen.tolist(),
                       "cu_seqlens_q": fa3.prefix_cu_seqlens_q.tolist(),
                       "cu_seqlens_k": fa3.prefix_cu_seqlens_k.tolist(), "max_seqlen_q": d},
            "expand": {"page_table": fa3.expand_page_table.tolist(),
                       "cache_seqlen": fa3.expand_cache_seqlen.tolist(),
                       "cu_seqlens_q": fa3.expand_cu_seqlens_q.tolist(),
                       "cu_seqlens_k": fa3.expand_cu_seqlens_k.tolist(), "max_seqlen_q": 1}},
        "flashinfer": {"qo_indptr": fi.qo_indptr.tolist(), "kv_indptr": fi.kv_indptr.tolist(),
                       "kv_indices": fi.kv_indices[:kv_kept].tolist(),
                       "kv_last_page_len": fi.kv_last_page_len.tolist(),
                       "mask_indptr": fi.mask_indptr.tolist(),
                       "packed_mask_indptr": fi.packed_mask_indptr.tolist(),
                       "packed_mask": fi.packed_mask[:bytes_kept].tolist()},
        "violations": violations,
    }


def _extend_int(field: str, v: Any, lo: int, hi: int, hi_name: str) -> int:
    """The CLI's range messages ("is below the minimum", "is above the maximum <name>")."""
    v = _check.index(field, v)
    if v < lo:
        raise InvalidArgument(f"{field}: {v} is below the minimum {lo}", field=field)
    if v > hi:
        raise InvalidArgument(f"{field}: {v} is above the maximum {hi_name} {hi}", field=field)
    return v


def extend(page_size: int, num_draft_tokens: int, seq_len: Any, accept_len: Any,
           req_pool_index: Any, req_to_token: Any, *, bucket: Optional[int] = None,
           page_table_capacity: Optional[int] = None, triton_kv_capacity: Optional[int] = None,
           flashinfer_kv_capacity: Optional[int] = None) -> Dict[str, Any]:
    """`specgraph metadata extend` in Python (docs/extend.md): the draft-extend metadata of
    one round as the CLI's JSON object (nested dicts and lists; json.dumps(..., separators=(",",
    ":")) prints what the CLI prints). seq_len, accept_len, req_pool_index: [bs] (bs 0 allowed);
    bucket B >= bs (default bs; padded rows appended); capacities as the CLI's keys (default:
    what the round uses; a short one refuses stores, listed in "violations"). Bad input raises
    InvalidArgument naming the field with the CLI's message (the CLI exits 2). Host only; runs
    the kernels' host twin."""
    np = require("numpy", "specgraph.metadata.extend")
    from .extend import LAYOUTS, ExtendOutputs, _TYPES, FIELDS, GUARD_SHAPE, extend_violations

    lim = _limits()
    ps = _extend_int("page_size", page_size, 1, lim["max_page_size"], "limits::max_page_size")
    w = _extend_int("num_draft_tokens", num_draft_tokens, 1, 1 << 10, "max_extend_tokens")
    seq = _int_array("seq_len", seq_len, "int32", np).reshape(-1)
    acc = _int_array("accept_len", accept_len, "int32", np).reshape(-1)
    pool = _int_array("req_pool_index", req_pool_index, "int32", np).reshape(-1)
    bs = int(seq.size)
    for field, a in (("accept_len", acc), ("req_pool_index", pool)):
        if a.size != bs:
            raise InvalidArgument(f"{field}: {a.size} entries, expected one per request (seq_len "
                                  f"has {bs})", field=field)
    for r in range(bs):  # before any size is derived from them
        if seq[r] < 0:
            raise InvalidArgument(f"seq_len[{r}]: {int(seq[r])} is below the minimum 0",
                                  field=f"seq_len[{r}]")
        if not 0 <= acc[r] <= w:
            raise InvalidArgument(f"accept_len[{r}]: {int(acc[r])} is outside [0, "
                                  f"num_draft_tokens {w}]", field=f"accept_len[{r}]")
    b = bs if bucket is None else _check.index("bucket", bucket)
    if b < 0:
        raise InvalidArgument(f"bucket: {b} is below the minimum 0", field="bucket")
    if b < bs:
        raise InvalidArgument(f"bucket: {b} is below the {bs} requests (padded rows are "
                              "appended, never dropped)", field="bucket")
    _extend_int("bucket", b, 0, lim["max_batch"], "limits::max_batch")
    if b * w > 1 << 24:
        raise InvalidArgument(f"bucket: {b} x num_draft_tokens {w} token rows exceeds the limit "
                              f"of {1 << 24}", field="bucket")
    table = _int_array("req_to_token", req_to_token, "int64", np)
    if table.ndim != 2 or table.shape[0] == 0 or table.shape[1] == 0:
        raise InvalidArgument(f"req_to_token: shape {list(table.shape)}, expected [rows >= 1 "
                              "(pool row 0 backs the padded rows), width >= 1]",
                              field="req_to_token")
    bad = np.argwhere((table < 0) | (table > (1 << 31) - 1))
    if bad.size:
        i, j = (int(x) for x in bad[0])
        raise InvalidArgument(f"req_to_token[{i}][{j}]: {int(table[i, j])} is outside [0, 2^31)",
                              field=f"req_to_token[{i}][{j}]")
    rows, width = table.shape
    for r in range(bs):
        if not 0 <= pool[r] < rows:
            raise InvalidArgument(f"req_pool_index[{r}]: {int(pool[r])} is outside [0, pool_rows "
                                  f"{rows})", field=f"req_pool_index[{r}]")
        if int(seq[r]) + w > width:
            raise InvalidArgument(f"seq_len[{r}]: {int(seq[r])} + {w} window tokens needs "
                                  f"{int(seq[r]) + w} positions, past the row width {width}",
                                  field=f"seq_len[{r}]")
    lens = seq.astype(np.int64) + w  # L of the real rows
    need = -(-lens // ps)  # pages per real row
    cols, prefix_used = max([1] + need.tolist()), int(seq.sum())
    full_used = int(lens.sum()) + (b - bs)
    caps = []
    for field, v, default, lo in (("page_table_capacity", page_table_capacity, cols, 1),
                                  ("triton_kv_capacity", triton_kv_capacity, prefix_used, 0),
                                  ("flashinfer_kv_capacity", flashinfer_kv_capacity, full_used, 0)):
        caps.append(default if v is None else _extend_int(field, v, lo, (1 << 31) - 1, "int32"))
    cap, pre_kept, full_kept = caps[0], min(prefix_used, caps[1]), min(full_used, caps[2])
    if b * cap > 1 << 24:
        raise InvalidArgument(f"page_table_capacity: {cap} columns x bucket {b} exceeds the "
                              f"limit of {1 << 24} table cells", field="page_table_capacity")

    def pad(a: Any, fill: int) -> Any:
        return np.concatenate([a.astype(np.int32), np.full(b - bs, fill, np.int32)])

    sizes = {"page_table": (b, cap), "prefix_kv_indices": (max(pre_kept, 1),),
             "full_kv_indices": (max(full_kept, 1),), "max_seqlen_k": (1,)}
    made = {n: np.zeros(sizes.get(n, (b * w,) if n in ("position", "out_cache_loc") else
                                  (b + 1,) if n.startswith("cu_") or n.endswith("indptr") else (b,)),
                        dtype=np.int32)
            for x in LAYOUTS for n in FIELDS[x]}
    sets = [[made[n] for n in FIELDS[x]] for x in LAYOUTS]
    guard = np.zeros(GUARD_SHAPE, dtype=np.int32)
    # A capacity past what the round uses binds nothing: the buffers hold what is kept.
    _ffi.extend_metadata(table.astype(np.int32), pad(pool, 0), pad(seq, 0), pad(acc, w), None, w,
                         ps, int(seq.max()) if bs else 0, bs, _check.INT64_MAX, cap, pre_kept,
                         full_kept, *sets, guard, None)
    # A guard word holds the first violation and a total; the page table's (one per short row)
    # and the accept lengths' (one per row) are derived from the checked inputs, as the CLI does.
    words = {v.kernel: v for v in extend_violations(guard)}
    found: List[Dict[str, Any]] = []
    if "extend_metadata" in words:
        found.append(_as_dict(words["extend_metadata"]))
    for r in range(bs):
        if need[r] > cap:
            page = int(table[pool[r], cap * ps]) // ps
            found.append({"kind": "capacity", "kernel": "extend_page_table", "row": r,
                          "column": cap, "capacity": cap, "value": page,
                          "count": int(need[r]) - cap})
    for k in ("extend_triton_kv_indices", "extend_flashinfer_kv_indices"):
        if k in words:
            found.append(_as_dict(words[k]))
    found += [{"kind": "accept_len", "kernel": "extend_select_index", "row": r, "value": 0}
              for r in range(bs) if acc[r] == 0]
    out = ExtendOutputs(*(_TYPES[x](*s) for x, s in zip(LAYOUTS, sets)), guard=guard)
    t, f, p, u = out.tokens, out.fa3, out.prefix, out.full
    return {
        "tokens": {"position": t.position.tolist(), "out_cache_loc": t.out_cache_loc.tolist(),
                   "select_index": t.select_index.tolist()},
        "fa3": {"cache_seqlen": f.cache_seqlen.tolist(), "cu_seqlens_q": f.cu_seqlens_q.tolist(),
                "cu_seqlens_k": f.cu_seqlens_k.tolist(), "page_table": f.page_table.tolist(),
                "max_seqlen_q": w, "max_seqlen_k": int(f.max_seqlen_k[0])},
        "triton": {"qo_indptr": p.prefix_qo_indptr.tolist(),
                   "kv_indptr": p.prefix_kv_indptr.tolist(),
                   "kv_indices": p.prefix_kv_indices[:pre_kept].tolist(), "max_extend_len": w},
        "flashinfer": {"qo_indptr": u.full_qo_indptr.tolist(),
                       "kv_indptr": u.full_kv_indptr.tolist(),
                       "kv_indices": u.full_kv_indices[:full_kept].tolist(),
                       "kv_last_page_len": u.full_kv_last_page_len.tolist()},
        "violations": found,
    }


def _as_dict(v: Violation) -> Dict[str, Any]:
    return {"kind": v.kind, "kernel": v.kernel, "row": v.row, "column": v.column,
            "capacity": v.capacity, "value": v.value, "count": v.violations}
