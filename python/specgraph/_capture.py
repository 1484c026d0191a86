"""DraftGraphs' capture: which graphs each mode captures, the report (one timing per graph, the
totals, the log line) and the errors naming (bucket, step)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch

from .errors import CaptureFailed

ROUND = -1  # the step of a whole-round graph in reports


def step_graph_count(num_steps: int, round_graphs: bool, step_graphs: bool) -> int:
    """Step graphs per bucket: every step's in per-step mode; with round graphs only those of
    the steps shorter rounds replay (the last step runs only inside the round graph)."""
    if not step_graphs:
        return 0
    return num_steps - (1 if round_graphs else 0)


def graph_keys(buckets: Sequence[int], num_steps: int, round_graphs: bool, step_graphs: bool,
               device_steps: bool) -> List[Tuple[int, int]]:
    """(bucket, step) of every graph a mode captures, in capture order: exactly what it replays.
    Device steps (and device depth, whose round graph loops over it): one body, step 0."""
    if device_steps:
        return [(b, 0) for b in buckets]
    steps = list(range(step_graph_count(num_steps, round_graphs, step_graphs)))
    return [(b, s) for b in buckets for s in steps + ([ROUND] if round_graphs else [])]


class GraphTiming(NamedTuple):
    bucket: int
    step: int  # ROUND (-1) for a whole-round graph
    seconds: float  # warmups excluded: the capture itself


class CaptureReport(NamedTuple):
    graphs: int
    seconds: float  # the whole capture(), warmups and barriers included
    per_graph: List[GraphTiming]  # in capture order (largest bucket first)
    pool_bytes: int  # the graph pool's segments in torch's allocator after capture
    arena_bytes: int
    mode: str  # "cuda_graph", or "eager" on a CPU arena

    def line(self) -> str:
        """The one log line per capture: parseable, fixed format. On a CPU arena nothing is
        captured (CUDA graphs need a CUDA arena) and the line says so instead of "0 graphs"."""
        if self.mode == "eager":
            return (f"specgraph capture: none, eager mode on a CPU arena (run_round runs the ops "
                    f"and the forward directly; CUDA graphs need a CUDA arena), arena "
                    f"{self.arena_bytes} bytes")
        return (f"specgraph capture: {self.graphs} graphs in {self.seconds:.3f} s, "
                f"pool {self.pool_bytes / (1 << 20):.1f} MiB, arena {self.arena_bytes} bytes")


def _pool_bytes(pool: Any, device: torch.device) -> Optional[int]:
    """Bytes of the segments torch's allocator holds for graph pool `pool` on `device`."""
    try:
        segments = torch.cuda.memory_snapshot(mempool_id=pool, include_traces=False)
    except Exception:  # older torch: no per-pool snapshot
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return sum(int(s.get("total_size", 0)) for s in segments if s.get("device", index) == index)


@contextlib.contextmanager
def failing(bucket: int, step: int, what: str) -> Iterator[None]:
    """Turns any exception into CaptureFailed naming (bucket, step)."""
    try:
        yield
    except CaptureFailed:
        raise
    except Exception as e:
        where = "the round graph" if step == ROUND else f"step {step}"
        raise CaptureFailed(f"{what} of bucket {bucket}, {where} failed: "
                            f"{type(e).__name__}: {e}", bucket=bucket, step=step) from e
