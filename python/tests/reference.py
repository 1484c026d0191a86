"""An independent pure-Python model of the ops, written from docs/metadata.md sections 2-4 with
plain lists (no specgraph code, no numpy): what each op must leave in the buffers of a bucket."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import List


@dataclass
class Round:
    bs: int
    pool: List[int]  # [bs]
    seq: List[int]  # [bs]
    slots: List[int]  # [bs * topk * stride], row-major [bs][topk][stride] (stride(cfg))


def stride(cfg) -> int:
    """Slots per out_cache_loc row: cfg.slot_stride (0 or absent: num_steps)."""
    return getattr(cfg, "slot_stride", 0) or cfg.num_steps


def staged(cfg, bucket: int, r: Round):
    """Section 4: the static inputs after staging, padded requests reset."""
    per = cfg.topk * stride(cfg)
    pool = [r.pool[i] if i < r.bs else 0 for i in range(bucket)]
    seq = [r.seq[i] if i < r.bs else 1 for i in range(bucket)]
    slots = [r.slots[i] if i < r.bs * per else 0 for i in range(bucket * per)]
    return pool, seq, slots


def prefix(cfg, bucket: int, pool: List[int], seq: List[int], req_to_token: List[List[int]]):
    """Section 2: last_page_len, prefix_seqlen, the prefix table rows and cu_seqlens_q."""
    ps = cfg.page_size
    cap = -(-cfg.max_context_len // ps)
    lpl = [s % ps for s in seq]
    pseq = [s - l for s, l in zip(seq, lpl)]
    table = []
    for r in range(bucket):
        pages = pseq[r] // ps
        table.append([req_to_token[pool[r]][j * ps] // ps if j < pages else 0 for j in range(cap)])
    cu = [i * cfg.topk for i in range(bucket + 1)]
    return lpl, pseq, table, cu


def expand(cfg, bucket: int, step: int, lpl: List[int], slots: List[int]):
    """Section 3 as the runtime runs it: the first d slots of each row, unique-consecutive pages,
    zero-filled to d + 1 columns; cache_seqlen = last_page_len + d."""
    d = step + 1
    rows = bucket * cfg.topk
    table, seqlen = [], []
    for row in range(rows):
        read = slots[row * stride(cfg): row * stride(cfg) + d]
        runs: List[int] = []
        for s in read:
            page = s // cfg.page_size
            if not runs or runs[-1] != page:
                runs.append(page)
        table.append(runs + [0] * (d + 1 - len(runs)))
        seqlen.append(lpl[row // cfg.topk] + d)
    return table, seqlen


def random_round(cfg, rng: random.Random, bs: int = 0) -> Round:
    bs = bs or rng.randint(1, cfg.max_batch)
    pool = [rng.randrange(1, cfg.pool_rows) for _ in range(bs)]
    seq = [rng.randint(1, cfg.max_context_len) for _ in range(bs)]
    slots = [rng.randrange(0, cfg.kv_slots) for _ in range(bs * cfg.topk * cfg.num_steps)]
    return Round(bs, pool, seq, slots)


def random_req_to_token(cfg, rng: random.Random) -> List[List[int]]:
    return [[rng.randrange(0, cfg.kv_slots) for _ in range(cfg.max_context_len)]
            for _ in range(cfg.pool_rows)]


def decided_depth(cfg, real_rows: int, max_depth: int, min_confidence: float,
                  confidence_at_step: List[List[float]]) -> int:
    """Section 10: the body runs once, then again while the step counter is below the round's
    max_depth (0: num_steps) and some real row's confidence, written by the step just run,
    reaches min_confidence. confidence_at_step[s][row] is what the forward writes at step s."""
    limit = max_depth or cfg.num_steps
    depth = 1
    while depth < limit and any(c >= min_confidence
                                for c in confidence_at_step[depth - 1][:real_rows]):
        depth += 1
    return depth
