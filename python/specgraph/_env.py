"""Environment knobs, read once when specgraph is imported.

SPECGRAPH_CHECKED   off | async | sync (default off): the guard check DraftGraphs runs after each
                    round when its `checked` argument is not given. sync reads the guard words
                    back (a synchronisation) and raises GuardViolation naming buffer, step, bucket
                    and row; async counts violations into a device flag and copies it to pinned
                    memory without waiting, and the next run_round raises once that copy has
                    landed with a non-zero count (no synchronisation); off checks nothing.
SPECGRAPH_LOG_LEVEL a logging level name (DEBUG, INFO, ...): sets the "specgraph" logger's level
                    and gives it a stderr handler; unset, specgraph configures no logging.
SPECGRAPH_NVTX      1 (default) or 0: NVTX ranges named after the ops in the "specgraph" domain
                    (no-ops unless a tool such as Nsight Systems is attached).
"""

from __future__ import annotations

import os

CHECKED_MODES = ("off", "async", "sync")


def _checked() -> str:
    value = os.environ.get("SPECGRAPH_CHECKED", "off").strip().lower() or "off"
    if value not in CHECKED_MODES:
        raise ValueError(f"SPECGRAPH_CHECKED={value!r}: expected one of {', '.join(CHECKED_MODES)}")
    return value


def _nvtx() -> bool:
    value = os.environ.get("SPECGRAPH_NVTX", "1").strip()
    if value not in ("0", "1", ""):
        raise ValueError(f"SPECGRAPH_NVTX={value!r}: expected 0 or 1")
    return value != "0"


CHECKED: str = _checked()
LOG_LEVEL: str | None = os.environ.get("SPECGRAPH_LOG_LEVEL") or None
NVTX: bool = _nvtx()
