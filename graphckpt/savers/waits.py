"""Durable waits' part of the saver interface (DESIGN.md §7 "wait"): ``waits`` rows in graphckpt's own schema.

A thread that waits (a node's ``ctx.sleep`` / ``ctx.wait_until``, or an interrupt with a deadline) is an
``interrupted`` thread with a ``pending`` wait row: its wake-up time, the head checkpoint it waits at, and the answer
to resume it with (engine-encoded). Nothing holds a process or a lease meanwhile. Reads call it ``waiting``.

:meth:`WaitTable.wake_due` is the waker (workers and ``graphckpt serve`` call it on their sweep): in one transaction
it moves each due ``pending`` wait whose thread is still ``interrupted`` at that checkpoint to ``fired`` with a
compare-and-set on its status, and queues a ``resume`` run with its answer (the thread's ``graph`` tag names the graph
that runs it). So a wait fires exactly once, whichever and however many workers sweep (PostgreSQL: ``FOR UPDATE SKIP
LOCKED``; SQLite: the file's write lock), and a worker killed mid-sweep leaves it ``pending`` (its transaction rolled
back) for the next sweep. A due wait whose thread moved on (a person answered first, the thread was deleted, failed
or finished) becomes ``stale`` instead; one whose thread is still ``running`` (the node wrote the wait and is about
to stop) is left ``pending`` until the stop commits.

A wait of a subgraph's child thread (its metadata has a ``subgraph`` link) is never fired: it records the child's
wake-up time and answer, and the parent task raises the same wait for the parent thread (see
:mod:`graphckpt.subgraph`), whose firing resumes the whole chain. When due it becomes ``stale``.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from graphckpt.savers.base import ThreadRecord

__all__ = ["WaitRecord", "WaitStatus", "WaitTable", "wake_times"]

WaitStatus = Literal["pending", "fired", "stale"]


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """A ``waits`` row."""

    thread_id: str
    checkpoint_id: str
    """The head the thread waits at: the wait fires only while the thread is ``interrupted`` there."""
    wake_at: float
    status: WaitStatus
    answer: bytes | None = None
    """Engine-encoded: what the resume run answers the open interrupt with."""
    created_at: float = 0.0
    fired_at: float | None = None
    run_id: str | None = None
    """The resume run the firing queued."""


class WaitTable(abc.ABC):
    """Mixed into every saver (with its run queue)."""

    @abc.abstractmethod
    async def put_wait(self, thread_id: str, checkpoint_id: str, wake_at: float, answer: bytes | None) -> None:
        """Record that the thread waits at ``checkpoint_id`` until ``wake_at``. One wait per thread: a ``pending``
        wait at the same checkpoint keeps the earlier of the two times (parallel tasks waiting: the first wake
        resumes them all, and those not due wait again); any other is replaced."""

    @abc.abstractmethod
    async def wake_due(self, now: float) -> list[str]:
        """Fire the due waits (see the module docstring); the threads a resume run was queued for."""

    @abc.abstractmethod
    async def list_waits(self, *, status: WaitStatus | None = None, thread_id: str | None = None) -> list[WaitRecord]:
        """The waits (with ``status``; of ``thread_id``: its one wait or none), soonest first."""


BY_THREAD = 16
"""Up to this many threads, :func:`wake_times` reads each one's wait by its key; beyond, the pending waits at once."""


async def wake_times(saver: object, records: Sequence[ThreadRecord]) -> dict[str, float]:
    """When each of ``records`` that waits for a time wakes (seconds since the epoch), by thread id: a thread is
    *waiting* when it has a ``pending`` wait at its head and is ``interrupted`` there (or still ``running`` there:
    its node wrote the wait and is stopping). Threads that do not wait are left out; so is every thread of a saver
    without waits."""
    if not isinstance(saver, WaitTable):
        return {}
    heads = {r.thread_id: r.head_checkpoint_id for r in records if r.status in ("interrupted", "running")}
    if not heads:
        return {}
    if len(heads) <= BY_THREAD:
        waits = [w for t in heads for w in await saver.list_waits(thread_id=t, status="pending")]
    else:
        waits = await saver.list_waits(status="pending")
    return {w.thread_id: w.wake_at for w in waits if heads.get(w.thread_id, "") == w.checkpoint_id}
