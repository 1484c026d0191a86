"""Test forwards shared by the GPU tests (test_torch_cuda.py) and their CPU checks: small torch
forwards over a StepView, capturable (torch ops on the current stream, static shapes)."""

from __future__ import annotations

import torch

import specgraph


def counter_forward(cfg, out, page_value, confidence_source=None):
    """For one graph serving every step (a device step counter): per query row, the sum of the
    values of the pages that are step s's own (the first s + 2 columns of the shared table) plus
    cache_seqlen, plus its prefix pages' values and prefix_seqlen, written to out[s]. With
    confidence_source, each row's confidence at step s is confidence_source[s][row].

    A spent counter (outside [0, num_steps): a graph replayed past the round) writes nothing, as
    docs/device-rounds.md asks of an engine's forward: the step is clamped for the reads and
    every write keeps the old value where the step is not live."""
    n = cfg.num_steps
    cols = torch.arange(n + 1, device=out.device)

    def forward(v: specgraph.StepView) -> None:
        s = v.device_step.long()
        live = (s >= 0) & (s < n)
        s = s.clamp(0, n - 1)
        mine = cols[None, :] <= s + 1
        pages = torch.where(mine, v.expand_page_table.long(), torch.zeros_like(cols))
        branch = (page_value[pages] * mine).sum(-1) + v.expand_cache_seqlen
        prefix = page_value[v.prefix_page_table.long()].sum(-1) + v.prefix_seqlen
        rows = out[:, : v.rows]
        value = (branch + prefix.repeat_interleave(v.topk))[None].to(out.dtype)
        rows.index_copy_(0, s, torch.where(live, value, rows.index_select(0, s)))
        if confidence_source is not None:
            mine_conf = confidence_source.index_select(0, s)[0, : v.rows]
            v.confidence.copy_(torch.where(live, mine_conf, v.confidence))

    return forward
