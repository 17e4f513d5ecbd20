"""The run queue's part of the saver interface (DESIGN.md §6): ``runs`` rows in graphckpt's own schema.

A run is one request to advance a thread: its input (``kind="input"``: a new thread, or a new turn of a ``done``
one) or a resume (``kind="resume"``, with an optional answer; also what recovery queues for a crashed thread). Its
``status`` goes ``queued`` -> ``running`` -> ``done`` / ``failed`` / ``interrupted``, or back to ``queued`` (a
graceful stop, or a worker that died: its lease expired), or ``cancelled`` while queued.

Invariants the backends keep, each in the statement that moves the row:

- **One running run per thread**, enforced by the database: a partial unique index on ``thread_id`` where
  ``status = 'running'`` (a second claim fails, whatever the workers believe).
- **Exactly one worker per run**: a claim moves one ``queued`` row to ``running`` with a fresh ``fence`` (the
  thread's ``run_id`` for this attempt) in one transaction (PostgreSQL: ``FOR UPDATE SKIP LOCKED``, so workers
  never wait on each other's candidates).
- **A run's completion commits with its last checkpoint**: the checkpoint commit (and a stop's ``put_writes``) that
  leaves the thread ``done``, ``interrupted`` or ``failed`` moves the run with ``fence`` equal to its ``run_id`` to
  that status in the same transaction. A zombie (its fence moved) can never finish a run.
- **Nothing stranded**: a ``running`` run whose lease expired is re-queued by :meth:`RunQueue.requeue_expired` (the
  sweeper), never executed by it; a claim runs it.
- **Fair between namespaces**: a claim looks at the :data:`FAIR_WINDOW` oldest queued runs and takes the oldest
  claimable one of the namespace (:func:`namespace_of`) with the fewest running runs; only when none of them is
  claimable does it take the oldest claimable run of the whole queue. One flooding namespace thus delays another's
  run by at most one claim per worker, and a claim reads a bounded number of queued rows (an indexed read).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from graphckpt.savers.base import Owner

__all__ = ["FAIR_WINDOW", "GRAPHLESS", "RunKind", "RunQueue", "RunRecord", "RunStatus", "TERMINAL", "namespace_of"]

FAIR_WINDOW = 1000
"""How many of the oldest queued runs a claim compares for fairness between namespaces (a bound on its reads)."""


def namespace_of(thread_id: str) -> str:
    """The namespace a thread's runs are counted in for fair claiming: the text before the first ``/`` of its id
    (the server stores a token's threads as ``NAMESPACE/ID``), ``""`` for an id without ``/`` (threads made outside
    the server, or by a server without tokens, share that one)."""
    head, sep, _ = thread_id.partition("/")
    return head if sep else ""


RunStatus = Literal["queued", "running", "done", "failed", "interrupted", "cancelled"]
RunKind = Literal["input", "resume"]
TERMINAL: frozenset[str] = frozenset({"done", "failed", "interrupted", "cancelled"})

GRAPHLESS = "no graph to run it with: no worker can claim it (resume its thread with graphckpt recover or resume)"
"""The error of a queued run without a graph that the sweeper cancels (see :meth:`RunQueue.requeue_expired`)."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A ``runs`` row."""

    run_id: str
    thread_id: str
    kind: RunKind
    status: RunStatus
    graph: str | None = None
    """The graph reference (``module:attr``) a worker runs it with; workers claim only runs of their graphs."""
    payload: bytes | None = None
    """Engine-encoded: the input (``input``), or the answer (``resume``; ``None`` for none)."""
    attempt: int = 0
    """How many times a worker claimed it."""
    worker: str | None = None
    """The worker id of the claim (kept after the run ends)."""
    fence: str | None = None
    """The thread's ``run_id`` for the current attempt (see the commit invariant)."""
    lease_until: float | None = None
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    error: str | None = None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> RunRecord:
        """A run from a database row whose columns are this record's fields, in order (both SQL savers read them
        so)."""
        return cls(
            run_id=row[0],
            thread_id=row[1],
            kind=row[2],
            status=row[3],
            graph=row[4],
            payload=bytes(row[5]) if row[5] is not None else None,
            attempt=row[6],
            worker=row[7],
            fence=row[8],
            lease_until=row[9],
            created_at=row[10],
            started_at=row[11],
            ended_at=row[12],
            error=row[13],
        )


class RunQueue:
    """The queue methods a :class:`~graphckpt.savers.base.Saver` mixes in (the three shipped savers do). A saver
    without them can still run threads directly (``invoke``/``resume``); workers and ``submit`` need them. Each is
    one transaction."""

    async def enqueue_run(self, run: RunRecord, *, reject_busy: bool) -> None:
        """Insert ``run`` (status ``queued``). With ``reject_busy``, refuse with
        :class:`~graphckpt.errors.ThreadBusyError` when the thread has a queued or running run or a live lease (in
        the same transaction as the insert)."""
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    async def claim_run(
        self, owner: Owner, *, graphs: Sequence[str], fence: str, lease_until: float
    ) -> RunRecord | None:
        """Move a ``queued`` run of one of ``graphs`` whose thread has no running run (the oldest such run of the
        least busy namespace among the :data:`FAIR_WINDOW` oldest queued runs, else the oldest such run) to ``running``
        (``attempt + 1``, ``worker``, ``fence``, ``lease_until``, ``started_at``) and return it; ``None`` when there
        is none. Two workers never get the same run."""
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    async def finish_run(self, run_id: str, *, fence: str, status: RunStatus, error: str | None = None) -> None:
        """End a running run whose end no checkpoint commit recorded (it failed before its first commit, lost its
        lease, ...), or put it back in the queue (``status="queued"``: a graceful stop). Only the claim with
        ``fence`` may; otherwise nothing happens."""
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    async def cancel_run(self, run_id: str) -> bool:
        """Cancel a ``queued`` run; ``False`` when it is not queued (running, ended, or unknown)."""
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    async def request_cancel(self, run_id: str) -> bool:
        """Ask the worker running ``run_id`` to stop it after its current step (it ends ``cancelled``; see
        :meth:`cancel_requested`); ``False`` when the run is not running."""
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    async def cancel_requested(self, run_id: str) -> bool:
        """Whether a cancel was asked of the running run ``run_id`` (what its worker checks between steps)."""
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    async def cancels_requested(self, run_ids: Collection[str]) -> set[str]:
        """Which of the running runs ``run_ids`` were asked to cancel: what a worker running many runs at once checks
        for all of them in one read (this default asks :meth:`cancel_requested` of each)."""
        return {run_id for run_id in run_ids if await self.cancel_requested(run_id)}

    async def delete_run(self, run_id: str) -> bool:
        """Delete the run ``run_id`` when it has ended (``done``, ``failed``, ``interrupted``, ``cancelled``): its row
        goes, its thread's checkpoints stay; ``False`` when it is queued, running or unknown (nothing deleted)."""
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    async def get_run(self, run_id: str) -> RunRecord | None:
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    async def list_runs(self, *, thread_id: str | None = None, status: RunStatus | None = None) -> list[RunRecord]:
        """Runs, oldest first, optionally of one thread and/or one status."""
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    async def requeue_expired(self, now: float) -> int:
        """The sweeper: put every ``running`` run whose lease expired before ``now`` back to ``queued`` (its worker
        died); and queue a ``resume`` run for every crashed thread that has no queued or running run (a process
        outside the queue died running it; its graph is the thread's ``graph`` tag). Returns how many.

        A crashed thread without a ``graph`` tag (text) gets no run: it was run outside the queue (``invoke``,
        ``resume``), no worker could claim a run without a graph, and it stays ``crashed`` for ``graphckpt recover``
        or a person. A child thread of a subgraph gets none either (its parent's resume continues it). A ``queued``
        run without a graph (an older version queued those) is ``cancelled`` with :data:`GRAPHLESS` as its error:
        nothing could ever claim it, and it would keep its thread busy."""
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    # -- threads created before their first checkpoint (what a server's ``POST /threads`` makes) ----------------------

    async def put_created_thread(self, thread_id: str, tags: str, created_at: float) -> bool:
        """Record a thread that has no checkpoint yet, with the tags (JSON text) its first run's checkpoints take;
        ``False`` (nothing written) when one of that id is recorded already."""
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    async def get_created_thread(self, thread_id: str) -> tuple[str, float] | None:
        """The recorded thread's tags (JSON text) and creation time; ``None`` when none is recorded."""
        raise NotImplementedError(f"{type(self).__name__} has no run queue")

    async def delete_created_thread(self, thread_id: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no run queue")
