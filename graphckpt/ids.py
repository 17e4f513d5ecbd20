"""Ids and clocks, routed through two module-level functions so tests can patch them.

Checkpoint ids sort by creation time: 12 hex digits of milliseconds since the epoch, 4 hex digits of a per-process
counter, then 8 random hex digits. Two ids made in one process always sort in the order they were made.
"""

from __future__ import annotations

import os
import time

__all__ = ["new_id", "new_uuid", "now"]

_last_ms = 0
_seq = 0


def now() -> float:
    """Seconds since the epoch (wall clock). Patch this in tests for literal timestamps."""
    return time.time()


def new_id() -> str:
    """A new time-ordered, sortable id (24 hex characters)."""
    global _last_ms, _seq
    ms = int(now() * 1000)
    if ms <= _last_ms:  # same millisecond, or the clock stepped back: keep counting from the last id
        ms, _seq = _last_ms, _seq + 1
        if _seq > 0xFFFF:
            ms, _seq = ms + 1, 0
    else:
        _seq = 0
    _last_ms = ms
    return f"{ms:012x}{_seq:04x}{os.urandom(4).hex()}"


def new_uuid() -> str:
    """A new id in the form of a UUID (``8-4-4-4-12`` hex digits), what LangGraph's and the Agent Protocol's clients
    expect of a thread or run id: :func:`new_id`'s 24 digits (so it sorts by creation time the same way) and 8 more
    random ones."""
    h = new_id() + os.urandom(4).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
