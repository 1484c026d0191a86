"""DraftConfig: the C++ draft_config, with the same fields and the same validation."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Tuple

from . import _check, _ffi
from .errors import InvalidArgument

FORMATS = ("fa3", "csr", "both")  # draft_config::formats, in the C++ enum's order
STAGE_KINDS = ("intra", "succ", "inter")  # sparse stage kinds, in the C++ stage_kind's order


def stage_kind(kind: Any) -> int:
    """0, 1, 2 for "intra", "succ", "inter" (ints in [0, 2] pass through)."""
    if isinstance(kind, str):
        try:
            return STAGE_KINDS.index(kind)
        except ValueError:
            raise InvalidArgument(f"kind: {kind!r} is not intra, succ or inter",
                                  field="kind") from None
    k = _check.index("kind", kind)
    if not 0 <= k < len(STAGE_KINDS):
        raise InvalidArgument(f"kind: {k} is not intra (0), succ (1) or inter (2)", field="kind")
    return k


def _int(field: str, value: Any) -> int:
    return _check.index(field, value)  # numpy integers too; TypeError / InvalidArgument


def _ints(field: str, values: Sequence[Any]) -> Tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{field}: expected a sequence of ints, got {_check.type_name(values)}")
    return tuple(_int(f"{field}[{i}]", v) for i, v in enumerate(values))


@dataclasses.dataclass(frozen=True)
class SparseConfig:
    """Dual-chunk sparse attention settings (docs/metadata.md section 6)."""

    heads: int
    vertical_size: Tuple[int, ...]  # per head
    slash_size: Tuple[int, ...]  # per head
    max_keys: int  # the longest key range a stage sees

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", _int("sparse.heads", self.heads))
        object.__setattr__(self, "vertical_size", _ints("sparse.vertical_size", self.vertical_size))
        object.__setattr__(self, "slash_size", _ints("sparse.slash_size", self.slash_size))
        object.__setattr__(self, "max_keys", _int("sparse.max_keys", self.max_keys))


@dataclasses.dataclass(frozen=True)
class DraftConfig:
    """What make_plan() sizes: the fields of the C++ specgraph::draft_config.

    Validated on construction by the C++ validate() (ranges in docs/metadata.md section 8):
    raises InvalidArgument naming the field ("topk", "buckets[3]", "sparse.vertical_size[1]"),
    its value and the limit; a non-int raises TypeError. Host only; no device is touched.
    """

    max_batch: int  # largest real batch (requests) per round
    topk: int  # draft branches per request
    num_steps: int  # draft forwards per round (expand tables, graphs)
    page_size: int  # KV page size (tokens)
    max_context_len: int  # columns of req_to_token
    pool_rows: int  # rows of req_to_token (the request pool)
    kv_slots: int  # KV pool size in slots; every slot id must be below it
    # Strictly increasing, each <= max_batch, the last == max_batch; empty: default_buckets().
    buckets: Tuple[int, ...] = ()
    sparse: Optional[SparseConfig] = None
    # Kernels also check the branch layout of real rows (docs/metadata.md section 3).
    checked: bool = False
    # Capture one whole-round graph per bucket too (DraftGraphs: a full round is one replay).
    round_graphs: bool = False
    # Device step counter / device-decided depth (docs/device-rounds.md).
    device_steps: bool = False
    device_depth: bool = False
    # Which draft-decode metadata the plan holds (docs/csr.md): "fa3" (the prefix and expand
    # page tables), "csr" (the CSR kv_indptr / kv_indices FlashInfer and Triton read) or "both".
    formats: str = "fa3"
    # CSR kv_indices as int64 (Triton's) instead of int32 (FlashInfer's).
    csr_int64: bool = False
    # Slots per out_cache_loc branch row ([bs][topk][slot_stride]), >= num_steps; 0 (default):
    # num_steps, filled in on construction. SGLang: num_steps = S - 1, slot_stride = S.
    slot_stride: int = 0
    # D, the draft-tree tokens the target verifies per request (docs/verify.md section 12):
    # 0 (default) = no verify section; else the plan's arena also holds the verify metadata of
    # the largest bucket (specgraph.verify_arena.verify_arena_ writes it).
    verify_tokens: int = 0
    # With verify_tokens = W: also the draft-extend section (docs/extend.md), the metadata of the
    # draft model's extend forward over each request's window of W tokens for the largest
    # bucket, exactly sized (specgraph.extend_arena.extend_arena_ writes it). Refused without
    # verify_tokens (InvalidArgument "draft_extend").
    draft_extend: bool = False
    # With verify_tokens = D: also the round section (docs/round-graphs.md), the buffers of the
    # round after verify (acceptance, the commit, the next round's inputs) for the largest
    # bucket, exactly sized (specgraph.round_arena.after_verify_ writes them). Refused without
    # verify_tokens (InvalidArgument "round_on_device").
    round_on_device: bool = False
    # R, positions kept allocated past the committed length: -1 (default) = the C++
    # next_round_reserve(topk, num_steps, verify_tokens, page_size), else [0, 2^28].
    round_reserve: int = -1
    # Stop token ids the round section holds, [0, 1024] (the C++ max_stop_tokens).
    max_stop_tokens: int = 0
    # M, the largest committed seq_len a request may reach (the engine's context limit): every
    # req_to_token row must hold ceil_page(M + R). -1 (default) = the largest M with
    # ceil_page(M + R) <= max_context_len (refused, naming round_reserve, when below 1), else
    # [1, 2^28], refused (InvalidArgument "round_max_seq_len") when ceil_page(M + R) >
    # max_context_len. The resolved M: plan.layout["round"]["max_seq_len"] (the C++ plan's).
    round_max_seq_len: int = -1

    def __post_init__(self) -> None:
        for f in ("max_batch", "topk", "num_steps", "page_size", "max_context_len", "pool_rows",
                  "kv_slots", "slot_stride", "verify_tokens", "round_reserve",
                  "max_stop_tokens", "round_max_seq_len"):
            object.__setattr__(self, f, _int(f, getattr(self, f)))
        object.__setattr__(self, "buckets", _ints("buckets", self.buckets))
        for f in ("checked", "round_graphs", "device_steps", "device_depth", "csr_int64",
                  "draft_extend", "round_on_device"):
            object.__setattr__(self, f, _check.boolean(f, getattr(self, f)))
        if not isinstance(self.formats, str):
            raise TypeError(f"formats: expected one of {', '.join(FORMATS)} (a str), got "
                            f"{_check.type_name(self.formats)}")
        if self.formats not in FORMATS:
            raise InvalidArgument(f"formats: {self.formats!r} is not one of "
                                  f"{', '.join(FORMATS)}", field="formats")
        if self.sparse is not None and not isinstance(self.sparse, SparseConfig):
            raise TypeError("sparse: expected SparseConfig or None, got "
                            f"{_check.type_name(self.sparse)}")
        if self.sparse is not None and self.sparse.heads == 0:  # the extension's "no sparse"
            raise InvalidArgument("sparse.heads: 0 is outside [1, limits::max_heads]; pass "
                                  "sparse=None for no sparse attention", field="sparse.heads")
        object.__setattr__(self, "_plan", self._make())  # validates (the C++ make_plan)
        if self.slot_stride == 0:
            object.__setattr__(self, "slot_stride", self.num_steps)

    def _make(self) -> Any:
        s = self.sparse
        return _ffi.make_plan(
            self.max_batch, self.topk, self.num_steps, self.page_size, self.max_context_len,
            self.pool_rows, self.kv_slots, list(self.buckets), self.checked, self.round_graphs,
            self.device_steps, self.device_depth, s.heads if s else 0,
            list(s.vertical_size) if s else [], list(s.slash_size) if s else [],
            s.max_keys if s else 0, FORMATS.index(self.formats), self.csr_int64,
            self.slot_stride, self.verify_tokens, self.draft_extend, self.round_on_device,
            self.round_reserve, self.round_max_seq_len, self.max_stop_tokens)

    @property
    def has_csr(self) -> bool:
        """Whether the plan holds the CSR kv_indptr / kv_indices (formats csr or both)."""
        return self.formats != "fa3"


def default_buckets(max_batch: int) -> Tuple[int, ...]:
    """The common bucket list up to max_batch (docs/metadata.md section 4)."""
    return tuple(int(b) for b in _ffi.default_buckets(_int("max_batch", max_batch)))
