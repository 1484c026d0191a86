"""Buffers: typed, zero-copy views of a plan's arena in the caller's framework."""

from __future__ import annotations

import sys
from typing import Any, Dict, NamedTuple, Tuple

from . import _check, _ffi
from ._deps import require
from ._guard_names import WORD_INT32S
from .config import stage_kind
from .errors import InvalidArgument
from .plan import Plan

GUARD_WORD_INT32S = WORD_INT32S  # one guard word as int32s (docs/metadata.md section 7)


class StepView(NamedTuple):
    """What a forward reads for graph(bucket, step): views of the arena, sliced to the bucket."""

    bucket: int
    step: int
    decode_length: int  # d = step + 1
    topk: int
    page_size: int
    rows: int  # bucket * topk query rows, padded ones included
    req_pool_index: Any  # int32 [bucket]
    seq_len: Any  # int32 [bucket]
    out_cache_loc: Any  # int64 [bucket, topk, slot_stride]
    real_batch: Any  # int32 [1]: the staged real batch
    last_page_len: Any  # int32 [bucket]
    prefix_seqlen: Any  # int32 [bucket]
    prefix_page_table: Any  # int32 [bucket, ceil(max_context_len / page_size)]
    cu_seqlens_q: Any  # int32 [bucket + 1]
    expand_page_table: Any  # int32 [rows, d + 1]; device_steps: [rows, num_steps + 1]
    expand_cache_seqlen: Any  # int32 [rows]
    confidence: Any  # float32 [rows]
    # device_steps mode: int32 [1], the step the graph is at (read it on the device: d =
    # device_step + 1, the step's table is expand_page_table[:, :d + 1]); None per-step.
    device_step: Any = None
    # Plans with CSR (formats csr or both; docs/csr.md): this step's kv_indptr, int32
    # [rows + 1], and kv_indices, int32 or int64 [rows * (max_context_len + step + 1)] (the
    # bucket's exact capacity; kv_indptr[rows] are used). device_steps: every step's, int32
    # [num_steps, rows + 1] and [num_steps, rows * (max_context_len + num_steps)], strided
    # rows; the step the device counter holds owns row device_step. None without CSR. A
    # csr-only plan's FA3 fields (prefix_page_table, expand_*) are None.
    kv_indptr: Any = None
    kv_indices: Any = None


class SparseStageViews(NamedTuple):
    vertical: Any  # int32 [heads, vertical_capacity], INT32_MAX past the count
    vertical_count: Any  # int32 [heads]
    slash: Any  # int32 [heads, slash_capacity], INT32_MIN past the count
    slash_count: Any  # int32 [heads]


class Buffers:
    """Non-owning views of a plan's buffers over the caller's arena; made by buffers().

    Every view is a tensor (or array) of the arena's framework that aliases the arena: no copy is
    ever made, and the views stay valid as long as the arena is alive and does not move (CUDA
    graphs bake the addresses in). Views are created once and cached; reading them is free.
    """

    def __init__(self, plan: Plan, arena: Any, initialize: bool, torch_ops: bool = True) -> None:
        self.plan = plan
        self.arena = arena
        self.framework = _framework(arena)
        self.device = _device(arena, self.framework)
        self._base = _arena_base(arena, self.framework, plan.total_bytes)
        if self._base is not None:  # what _intact() compares with: the storage and its extent
            self._storage = arena.untyped_storage()
            self._storage_start = self._storage.data_ptr()
            self._storage_need = self._base + plan.total_bytes - self._storage_start
        # The C++ side checks the arena (1-D uint8, contiguous, big enough, 256-byte aligned).
        try:
            self._obj = _ffi.make_buffers(plan._handle, arena, initialize)
        except InvalidArgument as e:
            if e.field == "arena" and "aligned" in str(e):  # name the fix: an aligned arena
                raise InvalidArgument(f"{e}: {ALIGNED_ARENA_HINT}", field="arena") from None
            raise
        self._views: Dict[Any, Any] = {}
        self.handle = 0  # the torch.library ops' name for these buffers (0: direct calls)
        if self.framework == "torch" and torch_ops:
            from . import _torch_ops

            self.handle = _torch_ops.register(self)

    # ---- raw views -------------------------------------------------------------------------
    def _view(self, key: Any, offset: int, dtype: str, shape: Tuple[int, ...]) -> Any:
        v = self._views.get(key)
        if v is None:
            v = self._views[key] = _make_view(self.arena, self.framework, offset, dtype, shape)
        return v

    def _fixed(self, name: str, dtype: str, shape: Tuple[int, ...]) -> Any:
        return self._view(name, self.plan.layout[name], dtype, shape)

    @property
    def real_batch(self) -> Any:
        """int32 [1]: the real batch of the last stage."""
        return self._fixed("real_batch", "int32", (1,))

    @property
    def req_pool_index(self) -> Any:
        """int32 [max_bucket]: staged pool rows, padded requests 0."""
        return self._fixed("req_pool_index", "int32", (self.plan.max_bucket,))

    @property
    def seq_len(self) -> Any:
        """int32 [max_bucket]: staged lengths, padded requests 1."""
        return self._fixed("seq_len", "int32", (self.plan.max_bucket,))

    @property
    def out_cache_loc(self) -> Any:
        """int64 [max_bucket, topk, slot_stride]: staged slots, padded requests 0."""
        c = self.plan.config
        return self._fixed("out_cache_loc", "int64", (self.plan.max_bucket, c.topk, c.slot_stride))

    @property
    def last_page_len(self) -> Any:
        return self._fixed("last_page_len", "int32", (self.plan.max_bucket,))

    @property
    def prefix_seqlen(self) -> Any:
        return self._fixed("prefix_seqlen", "int32", (self.plan.max_bucket,))

    @property
    def prefix_page_table(self) -> Any:
        """int32 [max_bucket, ceil(max_context_len / page_size)], once for every step."""
        cap = self._holds("fa3")["prefix_capacity"]
        return self._fixed("prefix_page_table", "int32", (self.plan.max_bucket, cap))

    @property
    def cu_seqlens_q(self) -> Any:
        return self._fixed("cu_seqlens_q", "int32", (self.plan.max_bucket + 1,))

    @property
    def device_step(self) -> Any:
        """int32 [1]: the device step counter (device_steps mode); after a round, its depth."""
        return self._fixed("device_step", "int32", (1,))

    @property
    def confidence(self) -> Any:
        """float32 [max_rows]: one confidence per query row, written by the forward."""
        return self._fixed("confidence", "float32", (self.plan.max_rows,))

    @property
    def guards(self) -> Any:
        """int32 [guard_count, 10]: the raw guard words (read them with read_guards())."""
        n = self.plan.layout["guard_count"]
        return self._fixed("guards", "int32", (n, GUARD_WORD_INT32S))

    def expand_page_table(self, step: int) -> Any:
        """int32 [max_rows, stride]: step's expand table; d + 1 = step + 2 columns are written."""
        s, _ = self._step(step), self._holds("fa3")
        stride = self.plan.layout["expand_stride"][s]
        return self._view(("expand_page_table", s), self.plan.layout["expand_page_table"][s],
                          "int32", (self.plan.max_rows, stride))

    def expand_cache_seqlen(self, step: int) -> Any:
        """int32 [max_rows]: step's cache_seqlen (last_page_len + d)."""
        s, _ = self._step(step), self._holds("fa3")
        return self._view(("expand_cache_seqlen", s), self.plan.layout["expand_cache_seqlen"][s],
                          "int32", (self.plan.max_rows,))

    def csr_kv_indptr(self, step: int) -> Any:
        """int32 [max_rows + 1]: step's CSR kv_indptr row (formats csr or both)."""
        s, lay = self._step(step), self._holds("csr")
        rows = self.plan.max_rows
        return self._view(("csr_kv_indptr", s), lay["csr_kv_indptr"] + 4 * s * (rows + 1),
                          "int32", (rows + 1,))

    def csr_kv_indices(self, step: int) -> Any:
        """int32 or int64 (DraftConfig.csr_int64) [C_s]: step's CSR kv_indices, exactly
        C_s = max_rows * (max_context_len + step + 1) entries (formats csr or both)."""
        s, lay = self._step(step), self._holds("csr")
        return self._view(("csr_kv_indices", s), lay["csr_kv_indices"][s],
                          "int64" if self.plan.config.csr_int64 else "int32",
                          (lay["csr_capacity"][s],))

    def _csr_steps(self, rows: int) -> Tuple[Any, Any]:
        """device_steps: every step's kv_indptr and kv_indices (one row per step), cut to
        `rows` query rows."""
        lay, c = self._holds("csr"), self.plan.config
        n, t = c.num_steps, "int64" if c.csr_int64 else "int32"
        indptr = self._view("csr_kv_indptr", lay["csr_kv_indptr"], "int32",
                            (n, self.plan.max_rows + 1))
        indices = self._view("csr_kv_indices", lay["csr_kv_indices"][0], t,
                             (n, lay["csr_kv_indices_stride"]))
        return indptr[:, : rows + 1], indices[:, : rows * (c.max_context_len + n)]

    def sparse_inputs(self) -> Dict[str, Any]:
        """The sparse selection the engine writes before sparse_stage_(): vertical / slash
        [heads, stride], their counts and the configured sizes [heads]."""
        sp = self._sparse()
        lay, h = self.plan.layout, sp.heads
        out = {}
        for kind in ("vertical", "slash"):
            out[kind] = self._view(f"sp_{kind}", lay[f"sparse_{kind}"], "int32",
                                   (h, lay[f"sparse_{kind}_stride"]))
            out[f"{kind}_count"] = self._view(f"sp_{kind}_count", lay[f"sparse_{kind}_count"],
                                              "int32", (h,))
            out[f"{kind}_size"] = self._view(f"sp_{kind}_size", lay[f"sparse_{kind}_size"],
                                             "int32", (h,))
        return out

    def sparse_stage_views(self, kind: int | str) -> SparseStageViews:
        """The buffers of one stage kind ("intra", "succ", "inter", or 0, 1, 2)."""
        sp, k = self._sparse(), stage_kind(kind)
        st = self.plan.layout["sparse_stages"][k]
        h = sp.heads
        return SparseStageViews(
            self._view(("spv", k), st["vertical"], "int32", (h, st["vertical_capacity"])),
            self._view(("spvc", k), st["vertical_count"], "int32", (h,)),
            self._view(("sps", k), st["slash"], "int32", (h, st["slash_capacity"])),
            self._view(("spsc", k), st["slash_count"], "int32", (h,)))

    def view(self, bucket: int, step: int) -> StepView:
        """Everything a forward reads for graph(bucket, step), sliced to the bucket's rows."""
        c = self.plan.config
        bucket = self._bucket(bucket)
        s = self._step(step)
        rows = bucket * c.topk
        fa3 = self.plan.layout["has_fa3"]
        # device_steps: one graph serves every step: the whole table, the step on the device.
        cols = slice(None) if c.device_steps else slice(0, s + 2)
        kv_indptr = kv_indices = None
        if c.has_csr and c.device_steps:
            kv_indptr, kv_indices = self._csr_steps(rows)
        elif c.has_csr:
            kv_indptr = self.csr_kv_indptr(s)[: rows + 1]
            kv_indices = self.csr_kv_indices(s)[: rows * (c.max_context_len + s + 1)]
        return StepView(
            bucket, s, s + 1, c.topk, c.page_size, rows,
            self.req_pool_index[:bucket], self.seq_len[:bucket], self.out_cache_loc[:bucket],
            self.real_batch, self.last_page_len[:bucket], self.prefix_seqlen[:bucket],
            self.prefix_page_table[:bucket] if fa3 else None, self.cu_seqlens_q[: bucket + 1],
            self.expand_page_table(s)[:rows, cols] if fa3 else None,
            self.expand_cache_seqlen(s)[:rows] if fa3 else None,
            self.confidence[:rows], self.device_step if c.device_steps else None,
            kv_indptr, kv_indices)

    def _step(self, step: int) -> int:
        n = self.plan.config.num_steps
        if type(step) is not int or not 0 <= step < n:
            step = _check.index("step", step)
            if not 0 <= step < n:
                raise InvalidArgument(f"step: {step} is outside [0, num_steps {n})", field="step")
        return step

    def _bucket(self, bucket: int) -> int:
        if type(bucket) is not int or bucket not in self.plan.buckets:
            bucket = _check.index("bucket", bucket)
            if bucket not in self.plan.buckets:
                raise InvalidArgument(f"bucket: {bucket} is not one of the planned buckets "
                                      f"{list(self.plan.buckets)}", field="bucket")
        return bucket

    def _intact(self) -> bool:
        """A torch arena is where it was, and its storage still holds the plan (cheap)."""
        st = self._storage
        return (self.arena.data_ptr() == self._base and st.data_ptr() == self._storage_start
                and st.nbytes() >= self._storage_need)

    def _check_arena(self) -> None:
        """Before every op: a torch arena still holds the plan's memory where it did; else
        InvalidArgument("arena") saying what changed."""
        if self._base is not None and not self._intact():
            _check.torch_arena_intact("arena", self.arena, self._base, self.plan.total_bytes)
            raise InvalidArgument("arena: its storage changed under the buffers; make new "
                                  "buffers over the arena", field="arena")

    def _holds(self, fmt: str) -> Dict[str, Any]:
        """The layout; InvalidArgument("formats") unless the plan holds `fmt` (fa3 or csr)."""
        if self.plan.config.formats not in (fmt, "both"):
            what = "CSR indices" if fmt == "csr" else "FA3 page tables"
            raise InvalidArgument(f"formats: {self.plan.config.formats!r}: this plan holds no "
                                  f"{what} (DraftConfig(formats=\"{fmt}\") or \"both\")",
                                  field="formats")
        return self.plan.layout

    def _sparse(self) -> Any:
        sp = self.plan.config.sparse
        if sp is None:
            raise InvalidArgument("sparse: the configuration has no sparse settings",
                                  field="sparse")
        return sp

    @property
    def staged_bucket(self) -> int:
        """The bucket of the last stage_() (0 before the first)."""
        return int(_ffi.staged_bucket(self._obj))

    def __repr__(self) -> str:
        return (f"Buffers({self.plan.total_bytes} bytes on {self.device}, "
                f"{self.framework}, {len(self.plan.buffers)} buffers)")


def _framework(arena: Any) -> str:
    top = type(arena).__module__.split(".")[0]
    return top if top in ("torch", "numpy") else "dlpack"


def _device(arena: Any, framework: str) -> str:
    if framework == "torch":
        return str(arena.device)
    if framework == "numpy":
        return "cpu"
    try:
        kind, index = arena.__dlpack_device__()
    except AttributeError:
        raise InvalidArgument("arena: not a tensor (no __dlpack__)", field="arena") from None
    return {1: "cpu", 2: f"cuda:{index}", 3: "cuda_host"}.get(int(kind), f"device {int(kind)}")


def _arena_base(arena: Any, framework: str, nbytes: int) -> Any:
    """Refuses an arena whose memory cannot be written from here; for a torch arena returns its
    address (the ops check it is still there), else None."""
    if framework == "numpy" and not arena.flags.writeable:
        raise InvalidArgument("arena: a read-only array", field="arena")
    if framework != "torch":
        return None
    if arena.device.type not in ("cpu", "cuda"):
        raise InvalidArgument(f"arena: on {arena.device}: specgraph runs on cpu or cuda memory",
                              field="arena")
    if arena.dim() == 1 and arena.numel() >= nbytes:  # else the extension says what is wrong
        _check.torch_arena_intact("arena", arena, arena.data_ptr(), nbytes)
    return arena.data_ptr()


def _make_view(arena: Any, framework: str, offset: int, dtype: str, shape: Tuple[int, ...]) -> Any:
    """A view of `shape` at byte `offset`: a slice of the arena in its own framework (so the
    framework knows they alias; torch.compile tracks the mutation of the arena through it), or,
    for other frameworks, a DLPack view that keeps the arena alive."""
    n = 1
    for d in shape:
        n *= d
    nbytes = n * (8 if dtype == "int64" else 4)
    if framework == "torch":
        torch = sys.modules["torch"]
        t = {"int32": torch.int32, "int64": torch.int64, "float32": torch.float32}[dtype]
        return arena.narrow(0, offset, nbytes).view(t).view(shape)
    if framework == "numpy":
        return arena[offset: offset + nbytes].view(dtype).reshape(shape)
    v = _ffi.arena_view(arena, offset, dtype, list(shape))
    mod = sys.modules.get(type(arena).__module__.split(".")[0])
    if mod is None or mod.__name__ == "tvm_ffi" or not hasattr(mod, "from_dlpack"):
        return v
    return mod.from_dlpack(v)


ARENA_ALIGNMENT = 256
ALIGNED_ARENA_HINT = ("use specgraph.host_arena(plan) for host memory (numpy's and torch's CPU "
                      "allocators align less), or a torch CUDA tensor from the caching "
                      "allocator: torch.empty(plan.total_bytes, dtype=torch.uint8, "
                      "device=\"cuda\")")


def host_arena(plan: Plan, *, framework: str = "numpy") -> Any:
    """A zeroed, 256-byte aligned host arena of plan.total_bytes: a numpy uint8 array, or with
    framework="torch" a CPU uint8 tensor sharing its memory. (Allocators align less: numpy to
    16 bytes, torch's CPU allocator to 64; torch's CUDA allocator to 512, enough.)"""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan: expected Plan, got {_check.type_name(plan)}")
    if framework not in ("numpy", "torch"):  # before allocating
        raise InvalidArgument(f"framework: {framework!r} is not numpy or torch", field="framework")
    np = require("numpy", "specgraph.host_arena")

    raw = np.zeros(plan.total_bytes + ARENA_ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ARENA_ALIGNMENT
    arena = raw[start: start + plan.total_bytes]
    if framework == "numpy":
        return arena
    if framework == "torch":
        return require("torch", 'specgraph.host_arena(..., framework="torch")').from_numpy(arena)
    raise InvalidArgument(f"framework: {framework!r} is not numpy or torch", field="framework")


def buffers(plan: Plan, arena: Any, *, initialize: bool = True, torch_ops: bool = True) -> Buffers:
    """Typed views of `plan`'s buffers over `arena`: a 1-D uint8 tensor of at least
    plan.total_bytes bytes, 256-byte aligned (a torch CUDA tensor from the engine's pool, a CPU
    tensor or a numpy array for the host path, or anything with __dlpack__).

    initialize=True zeroes the arena and writes the init-once buffers (the C++
    initialize_buffers): enqueued on the current stream of the arena's framework, no
    synchronisation, NOT capture-safe. Pass False over an arena that is already initialised, and
    call initialize_() again whenever its memory was released and came back (e.g. after a sleep).
    Raises InvalidArgument ("arena") for a wrong dtype, shape, size or alignment.

    torch_ops (torch arenas): route the ops through torch.ops.specgraph.* so torch.compile and
    torch.profiler see them (the default), or call the extension directly (False: a few
    microseconds less per call, invisible to torch.compile, which then breaks the graph).
    """
    if not isinstance(plan, Plan):
        raise TypeError(f"plan: expected Plan, got {_check.type_name(plan)}")
    return Buffers(plan, arena, _check.boolean("initialize", initialize),
                   _check.boolean("torch_ops", torch_ops))
