"""An independent model of the target-verify metadata, written from docs/verify.md (sections 1-6)
with plain loops and numpy: no specgraph code. One case -> every output as lists, in the shape of
`specgraph metadata verify`'s JSON.

A request is refused (empty sequences: cache_seqlen 0, table cells 0, no kv entries, no mask
bytes, expand rows of zeros) when its pool row is out of range, its seq_len outside [1, M], its
row narrower than seq_len + D, or a slot it reads outside [0, slot_limit); every real request is
refused when the mask's length disagrees with the formula (exact) or is shorter (bound). Padded
requests (r >= real_batch) have no mask cells and attend everything."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Set

import numpy as np


class Case(NamedTuple):
    seq_len: List[int]
    pool: List[int]  # req_pool_index
    req_to_token: np.ndarray  # [pool_rows, W]
    d: int  # D, the tree size
    page_size: int
    mask: np.ndarray  # 0/1 cells, the real requests' blocks back to back
    real_batch: int
    max_seq_len: int  # M
    slot_limit: int = 1 << 62
    mask_exact: bool = True


def needed_cells(c: Case) -> int:
    return sum(c.d * (n + c.d) for n in c.seq_len[: c.real_batch] if 1 <= n <= c.max_seq_len)


def refused(c: Case) -> Set[int]:
    rows, width = c.req_to_token.shape
    out = set()
    for r, (n, row) in enumerate(zip(c.seq_len, c.pool)):
        if not (0 <= row < rows and 1 <= n <= c.max_seq_len and n + c.d <= width):
            out.add(r)
            continue
        slots = c.req_to_token[row, : n + c.d]
        if ((slots < 0) | (slots >= c.slot_limit)).any():
            out.add(r)
    need, have = needed_cells(c), len(c.mask)
    if (need != have) if c.mask_exact else (need > have):
        out |= set(range(c.real_batch))
    return out


def tree_bit(c: Case, offsets: List[int], r: int, i: int, j: int) -> int:
    """m[r][i][j]: the mask cell of query i, verify token j (1 for padded requests)."""
    if r >= c.real_batch:
        return 1
    n = c.seq_len[r]
    return int(c.mask[offsets[r] + i * (n + c.d) + n + j] != 0)


def block_cells(c: Case, offsets: List[int], r: int) -> List[int]:
    n = c.seq_len[r]
    cells = c.d * (n + c.d)
    if r >= c.real_batch:
        return [1] * cells
    return [int(x != 0) for x in c.mask[offsets[r]: offsets[r] + cells]]


def run(c: Case, prefix_capacity: Optional[int] = None) -> Dict:
    bs, d, ps = len(c.seq_len), c.d, c.page_size
    cap = -(-c.max_seq_len // ps) if prefix_capacity is None else prefix_capacity
    bad = refused(c)
    offsets, o = [], 0  # mask offsets over the real requests (the engine's layout)
    for r in range(bs):
        offsets.append(o)
        if r < c.real_batch and 1 <= c.seq_len[r] <= c.max_seq_len:
            o += d * (c.seq_len[r] + d)
    pt, pc, pq, pk = [], [], [0], [0]
    et, ec, eq, ek = [], [], [0], [0]
    qo, kvp, kvi, last, mip, pmp, pm = [0], [0], [], [], [0], [0], []
    for r in range(bs):
        ok = r not in bad
        n = c.seq_len[r] if ok else 0
        row = c.req_to_token[c.pool[r]] if ok else None
        pages = -(-n // ps)
        pt.append([int(row[j * ps]) // ps if j < pages else 0 for j in range(cap)])
        pc.append(n)
        pq.append((r + 1) * d)
        pk.append(pk[-1] + n)
        for i in range(d):
            if ok:
                verify = [int(row[n + j]) for j in range(d)]
                bits = [tree_bit(c, offsets, r, i, j) for j in range(d)]
                et.append([s for s, b in zip(verify, bits) if b] +
                          [s for s, b in zip(verify, bits) if not b])
                count = sum(bits)
            else:
                et.append([0] * d)
                count = 0
            ec.append(count)
            eq.append(len(eq))
            ek.append(ek[-1] + count)
        qo.append((r + 1) * d)
        length = n + d if ok else 0
        kvi += [int(row[p]) for p in range(length)] if ok else []
        kvp.append(kvp[-1] + length)
        last.append(1)
        mip.append(d * kvp[-1])
        if ok:
            cells = block_cells(c, offsets, r)
            packed = [sum(cells[8 * b + k] << k for k in range(8) if 8 * b + k < len(cells))
                      for b in range(-(-len(cells) // 8))]
            pm += packed
        pmp.append(len(pm))
    return {
        "fa3": {"prefix": {"page_table": pt, "cache_seqlen": pc, "cu_seqlens_q": pq,
                           "cu_seqlens_k": pk, "max_seqlen_q": d},
                "expand": {"page_table": et, "cache_seqlen": ec, "cu_seqlens_q": eq,
                           "cu_seqlens_k": ek, "max_seqlen_q": 1}},
        "flashinfer": {"qo_indptr": qo, "kv_indptr": kvp, "kv_indices": kvi,
                       "kv_last_page_len": last, "mask_indptr": mip, "packed_mask_indptr": pmp,
                       "packed_mask": pm},
    }


def random_tree_mask(rng, d: int) -> np.ndarray:
    """[D, D] 0/1: a random tree over D tokens (token 0 the root, each later token's parent an
    earlier one); row i attends itself and its ancestors."""
    parent = [-1] + [int(rng.integers(0, i)) for i in range(1, d)]
    m = np.zeros((d, d), np.uint8)
    for i in range(d):
        j = i
        while j >= 0:
            m[i, j] = 1
            j = parent[j]
    return m


def engine_mask(rng, seq_len: List[int], real_batch: int, d: int,
                any_matrix: bool = False) -> np.ndarray:
    """The engine's full layout: per real request, D rows of seq_len prefix cells (1) and the
    tree's D cells (or any 0/1 matrix)."""
    blocks = []
    for n in seq_len[:real_batch]:
        tree = rng.integers(0, 2, (d, d)).astype(np.uint8) if any_matrix else \
            random_tree_mask(rng, d)
        blocks.append(np.concatenate([np.ones((d, n), np.uint8), tree], axis=1).reshape(-1))
    return np.concatenate(blocks) if blocks else np.zeros(0, np.uint8)
