"""What a stored row's decoded columns must be before anything uses them, for both SQL savers.

A row edited outside graphckpt (or written by a broken tool) may hold any type in any column: SQLite stores text in
an ``INTEGER`` column, PostgreSQL a step past what Python code expects. :func:`checked_checkpoint`,
:func:`checked_thread` and :func:`checked_lease_columns` check each column's type and range and raise
:class:`~graphckpt.errors.CorruptCheckpointError` naming the thread and the column, so a corrupt row is never a
``TypeError``, ``ValueError`` or ``OverflowError`` far from where it was read.
"""

from __future__ import annotations

import math
from typing import Any, get_args

from graphckpt.errors import CorruptCheckpointError
from graphckpt.savers._rows import Status, StoredCheckpoint, ThreadRecord

__all__ = ["STATUSES", "checked_checkpoint", "checked_lease_columns", "checked_thread"]

STATUSES = frozenset(get_args(Status))
STEP_MAX = 2**63 - 1


def _corrupt(thread_id: Any, column: str, value: Any, want: str, checkpoint_id: Any = None) -> CorruptCheckpointError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:60] + "…"
    where = f"thread {str(thread_id)[:80]!r}" + (f" checkpoint {str(checkpoint_id)[:80]!r}" if checkpoint_id else "")
    return CorruptCheckpointError(
        f"{where}: stored column {column} is corrupt: {shown} ({type(value).__name__}) is not {want}",
        thread_id=thread_id if isinstance(thread_id, str) else None,
        checkpoint_id=checkpoint_id if isinstance(checkpoint_id, str) else None,
    )


def _is_step(value: Any) -> bool:
    return type(value) is int and 0 <= value <= STEP_MAX


def checked_checkpoint(cp: StoredCheckpoint) -> StoredCheckpoint:
    """``cp`` when its ids are text, its step an integer in ``0 .. 2**63 - 1`` and its status text."""
    t, c = cp.thread_id, cp.checkpoint_id
    if type(t) is not str:
        raise _corrupt(t, "thread_id", t, "text")
    if type(c) is not str:
        raise _corrupt(t, "checkpoint_id", c, "text")
    if not _is_step(cp.step):
        raise _corrupt(t, "step", cp.step, "an integer step from 0 to 2**63 - 1", c)
    for column, value in (("parent_thread_id", cp.parent_thread_id), ("parent_checkpoint_id", cp.parent_checkpoint_id)):
        if value is not None and type(value) is not str:
            raise _corrupt(t, column, value, "text or null", c)
    status: Any = cp.status
    if type(status) is not str:
        raise _corrupt(t, "status", status, "text", c)
    return cp


def checked_thread(record: ThreadRecord) -> ThreadRecord:
    """``record`` when its ids are text, its head step an integer in range (``-1`` for a thread with no checkpoint
    yet), its status a known one and its error text or null."""
    t = record.thread_id
    if type(t) is not str:
        raise _corrupt(t, "thread_id", t, "text")
    for column, value in (("head_checkpoint_id", record.head_checkpoint_id), ("run_id", record.run_id)):
        if type(value) is not str:
            raise _corrupt(t, column, value, "text")
    if not (_is_step(record.head_step) or (record.head_step == -1 and type(record.head_step) is int)):
        raise _corrupt(t, "head_step", record.head_step, "an integer step from 0 to 2**63 - 1")
    if record.status not in STATUSES:
        raise _corrupt(t, "status", record.status, f"one of {', '.join(sorted(STATUSES))}")
    optional: tuple[tuple[str, Any], ...] = (
        ("parent_thread_id", record.parent_thread_id),
        ("parent_checkpoint_id", record.parent_checkpoint_id),
        ("error", record.error),
    )
    for column, text in optional:
        if text is not None and type(text) is not str:
            raise _corrupt(t, column, text, "text or null")
    return record


def checked_lease_columns(thread_id: Any, columns: tuple[Any, ...]) -> tuple[Any, ...]:
    """A thread row's lease columns ``(worker, host, pid, epoch, heartbeat_at, until)`` when each has its type:
    worker and host text or null, pid and epoch integers (or null), the times finite numbers (or null)."""
    worker, host, pid, epoch, heartbeat_at, until = columns
    for column, value in (("lease_worker", worker), ("lease_host", host)):
        if value is not None and type(value) is not str:
            raise _corrupt(thread_id, column, value, "text or null")
    for column, value in (("lease_pid", pid), ("lease_epoch", epoch)):
        if value is not None and not (type(value) is int and -(2**63) <= value <= STEP_MAX):
            raise _corrupt(thread_id, column, value, "a 64-bit integer")
    for column, value in (("heartbeat_at", heartbeat_at), ("lease_until", until)):
        if value is not None and not (type(value) in (int, float) and math.isfinite(value)):
            raise _corrupt(thread_id, column, value, "a finite number of seconds")
    return columns
