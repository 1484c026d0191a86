"""Issue 28 B6 (torch, CPU): a stride-0 (expanded) arena is refused as not contiguous, and
DraftGraphs(buckets=[9]) is refused under the argument the user passed. Skipped visibly where
torch is absent (a failure with REQUIRE_GPU=1)."""

from __future__ import annotations

import pytest

from conftest import need_torch

torch = need_torch()

import specgraph  # noqa: E402
import specgraph.torch as sgt  # noqa: E402

FIELDS = dict(max_batch=5, topk=2, num_steps=3, page_size=4, max_context_len=32, pool_rows=7,
              kv_slots=1 << 12, buckets=(2, 5))


def test_an_expanded_arena_is_refused_as_not_contiguous():
    plan = specgraph.make_plan(specgraph.DraftConfig(**FIELDS))
    for arena in (torch.zeros(1, dtype=torch.uint8).expand(plan.total_bytes),
                  torch.zeros(2 * plan.total_bytes, dtype=torch.uint8)[::2]):
        with pytest.raises(specgraph.InvalidArgument) as e:
            specgraph.buffers(plan, arena)
        assert e.value.field == "arena", str(e.value)
        assert "not contiguous" in str(e.value) and f"stride {arena.stride(0)}" in str(e.value)
        assert "freed or resized" not in str(e.value), str(e.value)


def test_draft_graphs_names_the_buckets_argument():
    plan = specgraph.make_plan(specgraph.DraftConfig(**FIELDS))
    bufs = specgraph.buffers(plan, specgraph.host_arena(plan, framework="torch"))
    r2t = torch.zeros((plan.config.pool_rows, plan.config.max_context_len), dtype=torch.int32)
    for buckets, field in (([9], "buckets[0]"), ([2, 3], "buckets[1]")):
        with pytest.raises(specgraph.InvalidArgument) as e:
            sgt.DraftGraphs(bufs, lambda v: None, req_to_token=r2t, buckets=buckets)
        assert e.value.field == field, str(e.value)
        assert str(e.value).startswith(f"{field}: {buckets[-1]} is not one of the planned "
                                       "buckets [2, 5]"), str(e.value)
