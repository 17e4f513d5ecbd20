"""The records the layers pass each other: a loaded :class:`Head`, a finished task's :class:`TaskResult`, the
:class:`Recorded` pending writes of a head, the :class:`StepRecord` a commit turns into a checkpoint, a fork's
:data:`Goto` and :data:`LoadLater`, and recovery's :class:`CrashedThread` and :class:`RecoveryResult`.

They live below every layer that uses them (the engine, the thread store, the app and its sync facade), so none of
those imports another for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphckpt.checkpoint import Interrupt, NodeUsage, Snapshot, Task, TaskError
from graphckpt.codec import Body, Loose
from graphckpt.control import Send
from graphckpt.savers.base import BlobRange, Lease, Status, StoredCheckpoint

__all__ = [
    "NO_ANSWER",
    "CrashedThread",
    "Goto",
    "Head",
    "LoadLater",
    "Recorded",
    "RecoveryResult",
    "StepRecord",
    "TaskResult",
]

NO_ANSWER: Any = object()
"""``resume``'s answer when none is given."""

Goto = str | Send | Sequence[str | Send]
"""Where a fork (or ``update_state``) re-routes the frontier: a node, a ``Send``, or several."""

LoadLater = Callable[[StoredCheckpoint, Body, list[BlobRange], str], Callable[[], list[dict[str, Any]]]]
"""Given the source checkpoint, its body, the blob ranges holding its values and the new thread's id: a loader that
fetches and folds the source's values when first called (the sync facade's way: no fetch at fork time)."""


@dataclass(slots=True)
class Head:
    """A loaded checkpoint: stored row, decoded body and state values."""

    cp: StoredCheckpoint
    body: Body
    values: dict[str, Any]
    loose: Loose = field(default_factory=dict)
    """The thread's delta rows not yet packed into a chunk, which the next commits pack."""


@dataclass(slots=True)
class TaskResult:
    """A finished task: its validated update, extra targets, time and usage."""

    task: Task
    update: dict[str, Any]
    goto: list[str | Send] = field(default_factory=list)
    duration_ms: float = 0.0
    usage: NodeUsage = field(default_factory=lambda: NodeUsage())
    replayed_ms: float = 0.0
    """Of ``duration_ms``: the original time of the journaled calls this run replayed instead of making."""
    started_at: float = 0.0
    """When the task's attempt started (seconds since the epoch; 0: unknown, a result recorded by an earlier run)."""


@dataclass(slots=True)
class Recorded:
    """The pending writes recorded against a head, decoded."""

    results: dict[str, TaskResult] = field(default_factory=dict)
    effects: dict[tuple[str, int], Any] = field(default_factory=dict)
    interrupts: dict[tuple[str, int], Any] = field(default_factory=dict)
    answers: dict[tuple[str, int], Any] = field(default_factory=dict)
    errors: dict[str, TaskError] = field(default_factory=dict)
    starts: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    """``started`` writes by ``(task_id, seq)``: calls about to be made (see :mod:`graphckpt.audit`)."""
    finishes: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    """``finished`` writes by ``(task_id, seq)``: how the started call ended (status, ms, usage)."""
    attempts: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    """``attempt`` writes by ``(task_id, seq)``: failed attempts of the step's tasks."""
    requests: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    """``request`` writes by ``(task_id, seq)``: the HTTP attempts of the step's calls (outcome, usage)."""
    answered: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    """``answered`` writes by ``(task_id, index)``: who answered an interrupt, and when."""
    replays: dict[tuple[str, int], int] = field(default_factory=dict)
    """In memory only: how often each ``(task_id, effect index)`` was answered from the journal by this run."""

    def last_attempt(self, task_id: str) -> dict[str, Any] | None:
        """The newest failed attempt of ``task_id`` recorded so far."""
        found = [seq for t, seq in self.attempts if t == task_id]
        return self.attempts[(task_id, max(found))] if found else None

    def next_seq(self, table: Mapping[tuple[str, int], Any], task_id: str) -> int:
        """The next free sequence number of ``task_id`` in ``table`` (``starts`` or ``attempts``)."""
        return 1 + max((seq for t, seq in table if t == task_id), default=-1)

    def open_interrupts(self, tasks: Sequence[Task]) -> list[tuple[Task, int, Any]]:
        """``ctx.interrupt`` calls still waiting for an answer, in frontier order then call order: the order
        ``resume(answer)`` answers them in (stored writes come back in task-id string order, where task 10 sorts
        before task 2)."""
        position = {t.id: i for i, t in enumerate(tasks)}
        waiting = sorted(
            (
                (position[t], i, p)
                for (t, i), p in self.interrupts.items()
                if t in position and (t, i) not in self.answers
            ),
            key=lambda w: (w[0], w[1]),
        )
        return [(tasks[at], i, p) for at, i, p in waiting]


@dataclass(slots=True)
class StepRecord:
    """Everything a checkpoint commit needs besides the head it follows: the one recipe's input.

    ``values`` are the state after the step and ``writes`` the reducer writes per channel that produced them (what a
    delta stores). ``source``, ``results``, ``tags`` and ``wrote`` make the metadata (``wrote`` replaces the
    ``writes`` the results would give, for an input or a fork); ``extra`` is merged into it.
    """

    source: str
    values: dict[str, Any]
    writes: Mapping[str, Sequence[Any]]
    tasks: list[Task]
    barriers: dict[str, list[str]]
    status: Status
    interrupts: list[Interrupt]
    results: Sequence[TaskResult] = ()
    tags: Mapping[str, Any] | None = None
    wrote: Mapping[str, list[str]] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CrashedThread:
    """A crashed thread as a person deciding whether to continue it sees it."""

    thread_id: str
    graph: str | None
    """The graph recorded by ``graphckpt run`` (tag ``graph``), if any."""
    step: int
    """The last committed step."""
    running: tuple[str, ...]
    """The nodes of the frontier: what it was running when it died."""
    tokens: int
    """Model tokens its lineage spent so far (prompt + completion, from the checkpoints' usage)."""
    lease: Lease
    """The dead owner's lease (host, pid, worker id, last heartbeat)."""
    seconds_ago: float
    """How long ago its last heartbeat was."""


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What recovering one crashed thread gave."""

    thread_id: str
    snapshot: Snapshot | None
    """The head after the recovered run, or ``None`` when it was not run."""
    error: str | None = None
    """Why it was not run (another process took it first), or how the run failed."""
    skipped: bool = False
    """Not run because another process holds it now (``error`` says "taken by <owner>"): nothing failed."""
