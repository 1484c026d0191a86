"""An independent model of the CSR draft-decode indices, written from the spec's rules (docs/csr.md
sections 1-4) row by row with numpy and plain loops: no specgraph code. Row q = (r, t) lists the
kept prefix positions, then the positions of its branch's draft tokens 0 .. s; each position's
slot is req_to_token[row][p / E] * E + p % E. A request the kernels refuse (pool row or seq_len out
of range, a row too narrow for its branch regions, a slot out of range) has a padded request's rows
(pool row 0, seq_len 1; a slot of them out of range is the dummy slot 0), or rows of length 0 when
even those do not fit pool row 0."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Set

import numpy as np

INT32_MAX = (1 << 31) - 1


class Case(NamedTuple):
    seq_len: List[int]
    pool: List[int]  # req_pool_index
    req_to_token: np.ndarray  # [pool_rows, width] int64 values (int32 in the ops)
    topk: int
    num_steps: int
    page_size: int
    window: int = 0
    sink: int = 0
    entry_page_size: int = 1
    slot_limit: int = 1 << 62
    max_seq_len: int = INT32_MAX
    slot_stride: int = 0  # draft slots per branch region (the engine's S); 0: num_steps


def kept_positions(seq_len: int, window: int, sink: int) -> List[int]:
    if window == 0 or seq_len <= window + sink:
        return list(range(seq_len))
    return list(range(sink)) + list(range(seq_len - window, seq_len))


def branch_region(seq_len: int, page_size: int, slots: int) -> int:
    """One branch's region for `slots` draft slots per branch: the slots themselves at page size
    1, else whole pages, ps * ceil((seq_len % ps + slots) / ps) (the prefix's partial page
    first)."""
    if page_size == 1:
        return slots
    return page_size * (-(-(seq_len % page_size + slots) // page_size))


def draft_position(seq_len: int, t: int, j: int, c: Case) -> int:
    slots = c.slot_stride or c.num_steps
    return seq_len + t * branch_region(seq_len, c.page_size, slots) + j


def slot(c: Case, row: int, position: int) -> int:
    e = c.entry_page_size
    return int(c.req_to_token[row, position // e]) * e + position % e


def refused(c: Case, d_max: int, int32_out: bool) -> Set[int]:
    """The requests a launch over steps with at most d_max draft tokens refuses."""
    out = set()
    width = c.req_to_token.shape[1] * c.entry_page_size
    for r, (n, row) in enumerate(zip(c.seq_len, c.pool)):
        if not 0 <= row < c.req_to_token.shape[0] or not 0 <= n <= c.max_seq_len:
            out.add(r)
            continue
        if draft_position(n, c.topk - 1, d_max - 1, c) >= width:
            out.add(r)
            continue
        read = kept_positions(n, c.window, c.sink) + [
            draft_position(n, t, j, c) for t in range(c.topk) for j in range(d_max)]
        for p in read:
            s = slot(c, row, p)
            if s < 0 or s >= c.slot_limit or (int32_out and s > INT32_MAX):
                out.add(r)
                break
    return out


def step(c: Case, s: int, bad: Set[int], d_max: int, int32_out: bool = True):
    """(kv_indptr, kv_indices) of step s as lists; `bad` requests have a padded request's rows
    (pool row 0, seq_len 1), empty when those do not fit pool row 0."""
    width = c.req_to_token.shape[1] * c.entry_page_size
    pad_fits = c.max_seq_len >= 1 and draft_position(1, c.topk - 1, d_max - 1, c) < width

    def padded_slot(p):
        v = slot(c, 0, p)
        return 0 if v < 0 or v >= c.slot_limit or (int32_out and v > INT32_MAX) else v

    indptr, indices = [0], []
    for r, (n, row) in enumerate(zip(c.seq_len, c.pool)):
        for t in range(c.topk):
            if r not in bad:
                positions = kept_positions(n, c.window, c.sink) + [
                    draft_position(n, t, j, c) for j in range(s + 1)]
                indices += [slot(c, row, p) for p in positions]
            elif pad_fits:
                positions = [0] + [draft_position(1, t, j, c) for j in range(s + 1)]
                indices += [padded_slot(p) for p in positions]
            indptr.append(len(indices))
    return indptr, indices


def steps(c: Case, which: List[int], d_max: int, int32_out: bool = True) -> Dict[int, tuple]:
    bad = refused(c, d_max, int32_out)
    return {s: step(c, s, bad, d_max, int32_out) for s in which}
