"""The capture-safe ops over a plan's buffers (the C++ ops.hpp), for any framework.

Each op checks its arguments on the host first and raises InvalidArgument naming the field with
nothing written. Then it enqueues its kernels on the current stream of the arena's framework
(torch.cuda.current_stream() for a torch CUDA arena; the legacy default stream for other
frameworks unless wrapped in tvm_ffi.use_raw_stream) and returns without synchronising, so the
same call runs eagerly or records into a capture under way on that stream (torch.cuda.graph).
On CPU memory (numpy arrays, CPU tensors) the host executor runs the same kernels inline.

When the arena is a torch tensor the ops go through torch.ops.specgraph.* (custom ops with fake
implementations and mutates_args), so torch.compile and torch.profiler see them by name, with
inputs= (the engine's static inputs read in place, specgraph.bind_inputs) too: the bound tensors
are the op's optional tensor arguments. Each op passes its source (inputs=, None: the staged
inputs) down as a value, one call either way (_op_args.run / run_from).

| op                  | stream                 | synchronises | capture-safe |
|---------------------|------------------------|--------------|--------------|
| initialize_         | current                | no           | no           |
| stage_              | current                | no           | yes (the batch is baked in) |
| round_setup_        | current                | no           | yes          |
| step_metadata_      | current                | no           | yes          |
| step_metadata_device_, advance_step_ | current | no          | yes          |
| begin_round_ (inputs.py) | current          | no           | yes          |
| sparse_stage_       | current                | no           | yes          |
| count_violations_   | current                | no           | yes          |
| read_guards, check_guards | current          | yes          | no           |
| round_graph         | current (upload)       | no           | no (host work: instantiate) |
| RoundGraph.launch   | current                | no           | no           |
| continue_condition_host | none (CPU, inline) | no          | no           |
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional

from . import _check, _ffi
from ._guard_names import describe, violation
from ._op_args import ready as _ready
from ._op_args import run as _run
from ._op_args import run_from as _run_from
from ._op_args import tensor as _tensor
from .buffers import Buffers
from .config import STAGE_KINDS, stage_kind
from .inputs import _source


class SparseStage(NamedTuple):
    """One chunk stage of dual-chunk sparse attention (docs/metadata.md section 6)."""

    kind: str  # "intra", "succ" or "inter"
    prev: int  # chunk start
    end: int  # keys seen (exclusive end of the chunk)
    chunk_len: int
    chunk_q_len: int


class GuardWord(NamedTuple):
    """One guard word read back (docs/metadata.md section 7); violations 0 means clean."""

    word: int  # its index in the guards buffer
    buffer: str  # the buffer it reports on, e.g. "expand.page_table"
    step: Optional[int]  # None: all steps
    violations: int  # recorded since the reset
    kind: str  # "capacity", "layout", "bad input" ("none" when clean)
    kernel: str
    row: int
    column: int
    capacity: int  # the capacity, the expected value or the limit (by kind)
    value: int

    def describe(self) -> str:
        return describe(self.violations, self.kind, self.kernel, self.row, self.column,
                        self.capacity, self.value)


def initialize_(bufs: Buffers) -> None:
    """Zeroes the arena and writes the init-once buffers. Current stream; no sync; NOT
    capture-safe (copies the sparse sizes from host memory)."""
    _run(_ready(bufs), "initialize_")


def stage_(bufs: Buffers, bs: int, req_pool_indices: Any, seq_lens: Any,
           out_cache_loc: Any, max_depth: int = 0,
           min_confidence: float = float("-inf"), bucket: Optional[int] = None) -> int:
    """Copies one round's inputs into the static inputs of `bucket` (None: the smallest bucket
    >= bs), writes the real batch and resets the padded requests (seq_len 1, pool row 0, every
    slot 0). Returns the bucket.

    bs: 0..max_batch; 0 is an idle rank (data-parallel attention): every row of the bucket is a
    padding row and the three inputs are not read. bucket: the caller's choice, e.g. the bucket
    of the largest batch across ranks after the engine's all-reduce; it must be a planned bucket
    >= bs (Plan.round_bucket; InvalidArgument "bucket" naming the value, the table and the
    batch, nothing written). req_pool_indices, seq_lens: int32 or int64 with >= bs elements;
    out_cache_loc: int64 with >= bs * topk * slot_stride elements in [bs][topk][slot_stride]
    order (only the first num_steps slots of each row are read); all contiguous, on the arena's
    device. One kernel on the current stream; no sync. Capture-safe, but a captured
    stage is only valid for the batch it was captured with: stage eagerly before replaying.
    Host memory: the contents are checked first too (InvalidArgument naming the element, e.g.
    "seq_lens[3]", nothing written); device memory: by the kernels (bad_input guard words).

    max_depth (0: num_steps, else 1..num_steps) and min_confidence are the round's controls in
    device_depth mode (docs/device-rounds.md): the round stops after max_depth steps or
    once no real row's confidence reaches min_confidence.
    """
    _ready(bufs)
    bs = _check.int_in("bs", bs, 0, bufs.plan.config.max_batch, "max_batch")
    req_pool_indices = _tensor(bufs, "req_pool_indices", req_pool_indices)
    seq_lens = _tensor(bufs, "seq_lens", seq_lens)
    out_cache_loc = _tensor(bufs, "out_cache_loc", out_cache_loc)
    max_depth = _check.index("max_depth", max_depth)
    min_confidence = _check.real("min_confidence", min_confidence)
    chosen = bufs.plan.round_bucket(bs, bucket)  # before anything is written
    _run(bufs, "stage_", bs, req_pool_indices, seq_lens, out_cache_loc, max_depth,
         min_confidence, chosen)
    return chosen


def round_setup_(bufs: Buffers, bucket: int, req_to_token: Any, *,
                 inputs: Any = None) -> None:
    """The round's step-0 work for `bucket`: resets the guard words (all but staging's) and
    computes the step-invariant prefix metadata (docs/metadata.md section 2).

    req_to_token: int32 [>= pool_rows, >= max_context_len], contiguous, on the arena's device;
    a table wider than max_context_len (engines allocate it wider) is read at its own row
    stride. A captured graph bakes its address and stride in, so it must not move or change
    shape while the graph exists. inputs: the engine's static inputs read in place
    (bind_inputs) instead of the staged ones. Current stream; no sync; capture-safe.
    """
    bucket = _ready(bufs)._bucket(bucket)
    req_to_token = _tensor(bufs, "req_to_token", req_to_token)
    _run_from(_source(inputs), bufs, "round_setup_", bucket, req_to_token)


def step_metadata_(bufs: Buffers, bucket: int, step: int, *, inputs: Any = None) -> None:
    """Step `step`'s expand metadata for `bucket` (docs/metadata.md section 3): reads only the
    first d = step + 1 slots of each out_cache_loc row into the d + 1 wide table
    (slice-before-scatter); inputs: the engine's bound out_cache_loc (bind_inputs) instead of
    the staged one. Current stream; no sync; capture-safe."""
    bucket, step = _ready(bufs)._bucket(bucket), bufs._step(step)
    _run_from(_source(inputs), bufs, "step_metadata_", bucket, step)


def step_metadata_device_(bufs: Buffers, bucket: int, *, inputs: Any = None) -> None:
    """device_steps mode (docs/device-rounds.md): the expand metadata of whatever step the
    device counter (bufs.device_step) is at: d = step + 1 slots read, d + 1 columns written of
    the one shared table, the step's guard word. inputs: as in step_metadata_. Current stream;
    no sync; capture-safe. (torch.ops.specgraph.step_metadata_ with step None.)"""
    bucket = _ready(bufs)._bucket(bucket)
    _run_from(_source(inputs), bufs, "step_metadata_", bucket, None)


def advance_step_(bufs: Buffers) -> None:
    """device_steps mode: advances the device step counter (the last node of a step graph, so the
    next replay runs the next step). Staging resets it to 0. Current stream; no sync;
    capture-safe."""
    _run(_ready(bufs), "advance_step_")


class RoundGraph:
    """One bucket's device-decided round (device_depth; docs/device-rounds.md): a copy of
    the step body the engine captured with torch.cuda.graph inside a WHILE node whose condition
    kernel continues while the step is below the staged max_depth and a real row's confidence
    reaches min_confidence. The body's memory (its torch graph pool) must stay valid: keep the
    torch graph alive as long as this object."""

    def __init__(self, bufs: Buffers, obj: Any) -> None:
        self.bufs = bufs
        self._obj = obj
        self.bucket = int(_ffi.round_graph_bucket(obj))

    def launch(self) -> None:
        """One launch on the current stream after stage_(): the depth it runs is left in
        bufs.device_step. Never allocates or synchronises; not inside a capture."""
        _ready(self.bufs)
        _ffi.launch_round_graph(self._obj, self.bufs.arena)


def round_graph(bufs: Buffers, bucket: int, step_body: Any, *,
                inputs: Any = None) -> RoundGraph:
    """Wraps the engine's step body for `bucket` (round_setup_, step_metadata_device_, the
    forward writing bufs.confidence, advance_step_, captured with
    torch.cuda.CUDAGraph(keep_graph=True); or a cudaGraph_t address) into the bucket's round
    graph and instantiates it (uploaded on the current stream). CUDA arenas of device_depth
    plans; host work; not inside a capture. The body may not hold event or host nodes (CUDA
    refuses them in a conditional body: CaptureFailed names them). inputs: the engine's bound
    inputs (bind_inputs), whose real_batch the condition reads (None bound: every row); start
    each round with begin_round_ instead of stage_."""
    bucket = _ready(bufs)._bucket(bucket)
    raw = step_body.raw_cuda_graph() if hasattr(step_body, "raw_cuda_graph") else step_body
    raw = _check.index("step_body", raw)
    source = _source(inputs)._obj
    return RoundGraph(bufs, _ffi.round_graph(bufs._obj, bufs.arena, bucket, raw, source))


def continue_condition_host(bufs: Buffers, bucket: int, flag: Any, *,
                            inputs: Any = None) -> None:
    """CPU arenas of device_depth plans: the round graph's condition kernel, writing 1 (run
    another step) or 0 into flag (int32 [1]), for drivers that emulate the round by looping
    over the step body on the host. inputs: as in round_graph. Inline; no stream."""
    bucket = _ready(bufs)._bucket(bucket)
    flag = _tensor(bufs, "flag", flag)
    _ffi.continue_condition_host(bufs._obj, bufs.arena, bucket, flag, _source(inputs)._obj)


def sparse_stage_(bufs: Buffers, stage: SparseStage) -> None:
    """Stages the sparse selection (bufs.sparse_inputs()) for one chunk stage into that stage
    kind's buffers, with the capacity-capped fallback (docs/metadata.md section 6). Current
    stream; no sync; capture-safe."""
    _ready(bufs)
    if not isinstance(stage, tuple) or len(stage) != len(SparseStage._fields):
        raise TypeError(f"stage: expected SparseStage, got {_check.type_name(stage)}")
    stage = SparseStage(*stage)
    k = stage_kind(stage.kind)
    prev, end, chunk_len, chunk_q_len = (_check.index(f"stage.{f}", getattr(stage, f))
                                         for f in SparseStage._fields[1:])
    _run(bufs, "sparse_stage_", k, prev, end, chunk_len, chunk_q_len)


def sparse_stages(seq_len: int, chunk_len: int) -> List[SparseStage]:
    """The stages of a sequence cut at chunk_len (= chunk_size - local_size). Host only."""
    return [SparseStage(STAGE_KINDS[int(s[0])], int(s[1]), int(s[2]), int(s[3]), int(s[4]))
            for s in _ffi.sparse_stages(_check.index("seq_len", seq_len),
                                        _check.index("chunk_len", chunk_len))]


def count_violations_(bufs: Buffers, out: Any) -> Any:
    """Writes the total number of violations in all guard words to out[0] (int32, on the arena's
    device): the check an engine can leave on in production, asserting on it asynchronously
    (e.g. torch._assert_async(out[0] == 0)) or reading it when it synchronises anyway. Current
    stream; no sync; capture-safe. Returns `out`."""
    out = _tensor(_ready(bufs), "out", out)
    _run(bufs, "count_violations_", out)
    return out


def read_guards(bufs: Buffers) -> List[GuardWord]:
    """Every guard word, in index order. Synchronises the current stream; not during capture."""
    words = _ffi.read_guards(_ready(bufs)._obj, bufs.arena)
    return [_guard_word(i, w) for i, w in enumerate(words)]


def check_guards(bufs: Buffers, bucket: Optional[int] = None) -> None:
    """Raises GuardViolation for the first set guard word, naming buffer, step, bucket (default:
    the last staged one) and row; does nothing when all are clean. Synchronises the current
    stream; not during capture. Under torch.compile it runs eagerly (a graph break): a compiled
    graph would drop an op that returns nothing."""
    _ready(bufs)
    bucket = 0 if bucket is None else _check.index("bucket", bucket)
    bucket = bufs._bucket(bucket) if bucket else 0  # 0 (or None): the last staged one
    _run(bufs, "check_guards", bucket)


def _guard_word(index: int, w: Any) -> GuardWord:
    """One word of _ffi.read_guards: its details and the extension's label for it (the buffer
    and step check_guards names, guard_site_of), never re-derived here."""
    v = violation(w)
    step = int(w[8])
    return GuardWord(index, str(w[7]), None if step < 0 else step, v.violations, v.kind,
                     v.kernel, v.row, v.column, v.capacity, v.value)
