"""The records a user reads: :class:`Snapshot` (one checkpoint), its :class:`Task` frontier, :class:`Interrupt`,
:class:`TaskError`, :class:`ThreadInfo`, and the vocabulary of checkpoint metadata."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypedDict

from graphckpt.errors import CorruptCheckpointError
from graphckpt.savers.base import Lease, Status, StoredCheckpoint

__all__ = [
    "CheckpointMetadata",
    "CheckpointRef",
    "Interrupt",
    "NodeUsage",
    "Snapshot",
    "Source",
    "Status",
    "Task",
    "TaskError",
    "ThreadInfo",
]

_UNLOADED: Any = object()

Source = Literal["input", "loop", "update", "fork"]
"""Why a checkpoint exists. ``input``: a run started with new input. ``loop``: a super-step finished. ``update``: the
state was edited by hand. ``fork``: the first checkpoint of a branch made by ``fork``."""


class NodeUsage(TypedDict, total=False):
    """Model usage a node reported with ``ctx.report_usage`` (summed over its tasks in the step)."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    calls: int


class CheckpointMetadata(TypedDict, total=False):
    """The audit record of a checkpoint. Stored as JSON; ``list_checkpoints``/``history`` filter on its keys."""

    source: Source
    """Why this checkpoint exists."""
    step: int
    """The super-step number (same as ``Snapshot.step``)."""
    writes: dict[str, list[str]]
    """Which node wrote which state keys in this step."""
    durations_ms: dict[str, float]
    """Wall time per node in this step, in milliseconds (summed over its tasks)."""
    usage: dict[str, NodeUsage]
    """Model name and token usage per node, as reported by the nodes."""
    tags: dict[str, Any]
    """User tags given to ``invoke``/``resume``/``fork`` (``tags={...}``); inherited by later checkpoints of the run."""
    audit: dict[str, Any]
    """The step's audit record: ``calls`` (every external call: started, finished, failed or lost, with its key),
    failed ``attempts`` (with tracebacks) and interrupt ``answers`` (see :mod:`graphckpt.audit`)."""
    replayed_ms: dict[str, float]
    """Per node: the part of ``durations_ms`` that is the original time of journaled calls replayed after a resume."""
    trace: dict[str, str]
    """With telemetry on: the trace and span id of the run that wrote the checkpoint (a resumed run links to it)."""


class CheckpointRef(NamedTuple):
    """Where a checkpoint is: thread and checkpoint id."""

    thread_id: str
    checkpoint_id: str


@dataclass(frozen=True, slots=True)
class Task:
    """One unit of work in a frontier: a node to run, with a ``Send`` payload or the state as input."""

    id: str
    """Stable across re-runs of the task; the base of ``ctx.idempotency_key``."""
    node: str
    payload: Any = None
    """The ``Send`` payload (the node's input instead of the state) when ``has_payload``."""
    has_payload: bool = False


@dataclass(frozen=True, slots=True)
class Interrupt:
    """Why a thread is waiting for ``resume``."""

    node: str
    when: Literal["before", "after", "inside"]
    """``before``/``after``: ``interrupt_before``/``interrupt_after`` at compile time; ``inside``: ``ctx.interrupt``."""
    payload: Any = None
    """What ``ctx.interrupt`` was called with (``None`` for before/after)."""
    task_id: str | None = None
    index: int = 0
    """Which ``ctx.interrupt`` call of the task this is (0 for the first)."""

    @property
    def id(self) -> str:
        """Names this interrupt in an answer: ``resume(thread_id, {interrupt.id: answer, ...})``."""
        return f"{self.task_id}:{self.index}" if self.when == "inside" else f"{self.task_id}:{self.when}"


@dataclass(frozen=True, slots=True)
class TaskError:
    """A node failure recorded in a failed thread's head."""

    node: str
    task_id: str
    type: str
    message: str
    traceback: str | None = field(default=None, compare=False, repr=False)
    """The formatted traceback of the exception (``None`` for errors recorded by older versions)."""

    def __str__(self) -> str:
        return f"node {self.node!r} raised {self.type}: {self.message}"


class Snapshot:
    """A checkpoint as a user sees it: the state after a super-step and what runs next.

    Read-only. ``values`` and the frontier (``tasks``, ``interrupts``, ``schema_version``) are each decoded from the
    stored bytes on first access, so listing a long history costs little until you look inside a checkpoint. The
    snapshot returned by the sync ``App.fork`` reads its values from the saver on their first access (see there).
    """

    __slots__ = ("_cp", "_frontier", "_frontier_loader", "_values", "_values_loader", "errors", "status", "subgraphs")

    status: Status
    """The thread's status if this is the head; for older checkpoints, the status it had when it was the head."""
    errors: tuple[TaskError, ...]
    """Why the thread failed (the head of a ``failed`` thread)."""

    def __init__(
        self,
        stored: StoredCheckpoint,
        status: Status,
        frontier: Callable[[], tuple[Sequence[Task], Sequence[Interrupt], int]],
        values: Callable[[], Any],
        errors: tuple[TaskError, ...] = (),
    ) -> None:
        self._cp = stored
        self.status = status
        self.errors = errors
        self._frontier_loader = frontier
        self._values_loader = values
        self._frontier: tuple[tuple[Task, ...], tuple[Interrupt, ...], int] | None = None
        self._values: Any = _UNLOADED
        self.subgraphs: dict[str, Snapshot] = {}
        """With ``get_state(..., subgraphs=True)``: for each task of the frontier that is running a subgraph (or
        stopped inside one), the head of its child thread, by task id (LangGraph's ``tasks[i].state``)."""

    @property
    def thread_id(self) -> str:
        return self._cp.thread_id

    @property
    def checkpoint_id(self) -> str:
        return self._cp.checkpoint_id

    @property
    def step(self) -> int:
        return self._cp.step

    @property
    def parent(self) -> CheckpointRef | None:
        """The previous checkpoint of this lineage (in another thread for a fork's first checkpoint)."""
        cp = self._cp
        if cp.parent_checkpoint_id is None:
            return None
        return CheckpointRef(cp.parent_thread_id or cp.thread_id, cp.parent_checkpoint_id)

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The audit record (see :class:`CheckpointMetadata`)."""
        return self._cp.metadata

    @property
    def created_at(self) -> dt.datetime:
        """When the checkpoint was committed; a tampered row's time that is no date (``1e300``, NaN, an infinity,
        not a number) is :class:`~graphckpt.errors.CorruptCheckpointError` naming thread and checkpoint."""
        cp = self._cp
        try:
            return dt.datetime.fromtimestamp(cp.created_at, dt.UTC)
        except (OverflowError, OSError, ValueError, TypeError):
            raise CorruptCheckpointError(
                f"checkpoint {cp.checkpoint_id[:80]!r} of thread {cp.thread_id[:80]!r} has a stored created_at that "
                f"is not a date ({str(cp.created_at)[:40]})",
                thread_id=cp.thread_id,
                checkpoint_id=cp.checkpoint_id,
            ) from None

    @property
    def namespace(self) -> tuple[str, ...]:
        """``()`` for a thread's own checkpoint; for a subgraph's, the ``"node:task_id"`` of each subgraph node
        from the root thread down (LangGraph's ``checkpoint_ns``, split)."""
        try:
            link = self._cp.metadata.get("subgraph")
        except CorruptCheckpointError:  # a tampered row: shown as a thread's own checkpoint, with ``?`` metadata
            return ()
        ns = link.get("ns") if isinstance(link, Mapping) else None
        return tuple(str(n) for n in ns) if isinstance(ns, list) else ()

    def _load_frontier(self) -> tuple[tuple[Task, ...], tuple[Interrupt, ...], int]:
        if self._frontier is None:
            tasks, interrupts, version = self._frontier_loader()
            self._frontier = (tuple(tasks), tuple(interrupts), version)
        return self._frontier

    @property
    def values(self) -> Any:
        """An instance of the state schema (a dict for TypedDict schemas)."""
        if self._values is _UNLOADED:
            self._values = self._values_loader()
        return self._values

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The frontier: the tasks the next super-step runs."""
        return self._load_frontier()[0]

    @property
    def interrupts(self) -> tuple[Interrupt, ...]:
        """Why the thread waits (for an ``interrupted`` thread)."""
        return self._load_frontier()[1]

    @property
    def schema_version(self) -> int:
        """The state schema version that wrote this checkpoint."""
        return self._load_frontier()[2]

    @property
    def next(self) -> tuple[str, ...]:
        """Node names of the frontier, in task order."""
        return tuple(t.node for t in self.tasks)

    @property
    def ref(self) -> CheckpointRef:
        return CheckpointRef(self.thread_id, self.checkpoint_id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        mine = (self.ref, self.parent, self.step, self.status, self.errors, dict(self.metadata), self._load_frontier())
        theirs = (other.ref, other.parent, other.step, other.status, other.errors, dict(other.metadata))
        return mine == (*theirs, other._load_frontier()) and self.values == other.values

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Snapshot(thread_id={self.thread_id!r}, checkpoint_id={self.checkpoint_id!r}, step={self.step}, "
            f"status={self.status!r}, next={self.next!r}, values={self.values!r})"
        )


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """A thread (branch) and where it stands."""

    thread_id: str
    status: Status
    head: CheckpointRef
    step: int
    created_at: dt.datetime
    updated_at: dt.datetime
    forked_from: CheckpointRef | None = None
    error: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    lease: Lease | None = None
    """Who runs the thread (worker id, host, pid, heartbeat, expiry, epoch): live for a ``running`` thread, expired
    for a ``crashed`` one; ``None`` when no process holds it (a fresh fork, a run stopped gracefully)."""
    cursor: str | None = field(default=None, compare=False)
    """Where a page of threads ending with this one continues: ``threads(limit=..., after=info.cursor)``."""
    wake_at: dt.datetime | None = None
    """When a worker wakes the thread, if it is *waiting*: ``interrupted`` by a durable wait (``ctx.sleep``,
    ``ctx.wait_until``, an interrupt's deadline; see :mod:`graphckpt.waiting`). ``None`` for any other thread.
    ``threads(status="waiting")`` lists exactly the threads that have one."""

    @property
    def waiting(self) -> bool:
        """Whether a durable wait holds the thread (it has a :attr:`wake_at`); its :attr:`status` stays
        ``interrupted``: a person's answer or ``resume`` still continues it before the time."""
        return self.wake_at is not None
