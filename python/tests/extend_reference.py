"""An independent reference for the draft-extend metadata, written from the spec
(../shared/spec/draft-extend.md sections 2 to 5 and 7), never calling the
library: the CLI's JSON object for one round, violations included, in plain Python over lists.
The tests compare `specgraph metadata extend`, `specgraph.metadata.extend` and
`specgraph.extend_metadata_` with it."""

from __future__ import annotations

from typing import Any, Dict, List, Optional


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def run(page_size: int, num_draft_tokens: int, seq_len: List[int], accept_len: List[int],
        req_pool_index: List[int], req_to_token: List[List[int]], bucket: Optional[int] = None,
        page_table_capacity: Optional[int] = None, triton_kv_capacity: Optional[int] = None,
        flashinfer_kv_capacity: Optional[int] = None,
        padded: Optional[List[bool]] = None) -> Dict[str, Any]:
    """padded: rows of the real batch written as padding all the same (acceptance accepted
    nothing for them), their inputs unread."""
    ps, w, bs = page_size, num_draft_tokens, len(seq_len)
    b = bs if bucket is None else bucket
    real = [r < bs and not (padded is not None and padded[r]) for r in range(b)]
    seq = [seq_len[r] if real[r] else 0 for r in range(b)]
    pool = [req_pool_index[r] if real[r] else 0 for r in range(b)]
    # L: the post-write length (padded rows: 1, the backends' fill value).
    length = [seq[r] + w if real[r] else 1 for r in range(b)]
    pages = [_ceil(n, ps) for n in length]
    c = max([1] + pages) if page_table_capacity is None else page_table_capacity

    position, slot = [], []
    for r in range(b):
        for j in range(w):
            position.append(seq[r] + j if real[r] else 0)
            slot.append(req_to_token[pool[r]][seq[r] + j] if real[r] else 0)
    select = []
    for r in range(b):
        if not real[r]:
            select.append(r * w + w - 1)
        elif accept_len[r] == 0:
            select.append(r * w)
        else:
            select.append(r * w + accept_len[r] - 1)

    table, violations = [], []
    for r in range(b):
        row = [req_to_token[pool[r]][k * ps] // ps if k < pages[r] else 0 for k in range(c)]
        table.append(row)
        if pages[r] > c:
            violations.append({"kind": "capacity", "kernel": "extend_page_table", "row": r,
                               "column": c, "capacity": c,
                               "value": req_to_token[pool[r]][c * ps] // ps,
                               "count": pages[r] - c})

    def prefix_sums(xs: List[int]) -> List[int]:
        out = [0]
        for x in xs:
            out.append(out[-1] + x)
        return out

    def stream(lens: List[int], entry) -> List[Any]:
        """(row, id) of every kv entry in order."""
        return [(r, entry(r, k)) for r in range(b) for k in range(lens[r])]

    pre_len = [seq[r] if real[r] else 0 for r in range(b)]
    pre = stream(pre_len, lambda r, k: req_to_token[pool[r]][k])
    full = stream(length, lambda r, k: req_to_token[pool[r]][k] if real[r]
                  else req_to_token[0][0])
    kv = {}
    for name, entries, cap in (("extend_triton_kv_indices", pre, triton_kv_capacity),
                               ("extend_flashinfer_kv_indices", full, flashinfer_kv_capacity)):
        cap = len(entries) if cap is None else cap
        kv[name] = [e[1] for e in entries[:cap]]
        if len(entries) > cap:
            violations.append({"kind": "capacity", "kernel": name, "row": entries[cap][0],
                               "column": cap, "capacity": cap, "value": entries[cap][1],
                               "count": len(entries) - cap})
    for r in range(bs):
        if accept_len[r] == 0:
            violations.append({"kind": "accept_len", "kernel": "extend_select_index", "row": r,
                               "value": 0})
    qo = [r * w for r in range(b + 1)]
    return {
        "tokens": {"position": position, "out_cache_loc": slot, "select_index": select},
        "fa3": {"cache_seqlen": length, "cu_seqlens_q": qo, "cu_seqlens_k": prefix_sums(length),
                "page_table": table, "max_seqlen_q": w, "max_seqlen_k": max(length, default=0)},
        "triton": {"qo_indptr": qo, "kv_indptr": prefix_sums(pre_len),
                   "kv_indices": kv["extend_triton_kv_indices"], "max_extend_len": w},
        "flashinfer": {"qo_indptr": qo, "kv_indptr": prefix_sums(length),
                       "kv_indices": kv["extend_flashinfer_kv_indices"],
                       "kv_last_page_len": [1] * b},
        "violations": violations,
    }
