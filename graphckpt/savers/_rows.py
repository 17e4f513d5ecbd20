"""The rows a saver stores and returns: threads, checkpoints, blobs, pending writes, leases and events.

They are part of the saver specification (:mod:`graphckpt.savers.base`, which re-exports them: import them from
there); each field's docstring says what a backend stores in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from graphckpt.savers._owners import local_dead

__all__ = [
    "TERMINAL_EVENTS",
    "Blob",
    "BlobKind",
    "BlobRange",
    "EventKind",
    "FinishedTask",
    "Lease",
    "Owner",
    "Status",
    "StoredCheckpoint",
    "StoredEvent",
    "StoredWrite",
    "ThreadRecord",
    "WriteKind",
]

Status = Literal["running", "interrupted", "failed", "done", "crashed", "partial"]
"""Thread status. ``running``: work remains and nobody stopped it: a live run (its :attr:`ThreadRecord.lease` names
the owner), or a thread nobody holds (a fresh fork, a run stopped gracefully: ``lease`` is ``None``); ``resume``
continues it. ``crashed``: ``running`` with an expired lease: its process died (derived when read, never stored:
checkpoints carry ``running``, ``interrupted``, ``failed`` and ``done``). ``interrupted``: waiting for ``resume`` with
an answer (``interrupt_before``/``after`` or ``ctx.interrupt``). ``failed``: a node raised after its retries; the
error is in the head's pending writes. ``done``: the frontier is empty. ``partial`` (threads only, never a
checkpoint): an ancestor that an import brought only up to the fork point its descendant needs; its own run (later
checkpoints, status, pending writes) stayed in the source, so nothing resumes it (fork it, or import it itself)."""

BlobKind = Literal["snapshot", "delta", "chunk"]
"""What a blob's ``data`` holds: a channel's full value, one step's writes, or several steps' writes (see
:class:`Blob`)."""

WriteKind = Literal[
    "result", "effect", "interrupt", "resume", "error", "started", "finished", "attempt", "answered", "request"
]
"""``result``: a finished task's output. ``effect``: one journaled external call (``index`` = call number in the task).
``interrupt``: the payload of ``ctx.interrupt`` (``index`` = interrupt number). ``resume``: the answer given to
``resume`` for that interrupt. ``error``: the failure of a task, after its retries. The audit record
(:mod:`graphckpt.audit`): ``started``: a call about to be made (``index`` = the task's start number, unique across
processes); ``finished``: how that started call ended; ``attempt``: a failed attempt of the task (``index`` = its
number); ``answered``: who answered interrupt ``index`` and when; ``request``: one HTTP attempt of a started call
(``index`` = the task's request number: its outcome and usage). A reader ignores kinds it does not know."""


@dataclass(frozen=True, slots=True)
class Blob:
    """One channel's data written at one step of one thread."""

    thread_id: str
    """The thread whose checkpoint wrote it (for a fork's inherited channels: an ancestor thread)."""
    channel: str
    """The state field."""
    step: int
    """The step of the checkpoint that wrote it. Unique per ``(thread_id, channel)``."""
    kind: BlobKind
    """``snapshot``: the full value. ``delta``: the writes to fold (through the reducer) into the value below.
    ``chunk``: the deltas of steps ``step .. s`` (for some ``s`` the engine records inside ``data``), in one row."""
    data: bytes
    """Engine-encoded payload."""


@dataclass(frozen=True, slots=True)
class BlobRange:
    """A request for the blobs of one channel of one thread with ``min_step <= step <= max_step``."""

    thread_id: str
    channel: str
    min_step: int
    max_step: int


@dataclass(frozen=True, slots=True)
class FinishedTask:
    """One task of a committed step, as its ``task.finished`` event tells it."""

    task_id: str
    node: str
    update: Mapping[str, Any]
    """What the task wrote (state key -> value, before reducers), as the node returned it."""
    duration_ms: float
    usage: Mapping[str, Any] | None = None
    """The model usage the task reported (``model``, ``prompt_tokens``, ``completion_tokens``, ``calls``)."""
    update_in_checkpoint: bool = False
    """The checkpoint holds ``update`` as it is (the step's only task; see :func:`graphckpt.codec.referable_update`):
    the event points there (``update: null, update_in: <checkpoint id>``) instead of storing it again."""


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """A checkpoint as stored: indexed columns plus the engine's encoded body."""

    thread_id: str
    """The thread (branch) this checkpoint belongs to."""
    checkpoint_id: str
    """Unique, sortable by creation time (see :func:`graphckpt.ids.new_id`)."""
    parent_thread_id: str | None
    """The thread of the parent checkpoint; differs from ``thread_id`` only for a fork's first checkpoint."""
    parent_checkpoint_id: str | None
    """The previous checkpoint in this branch's lineage; ``None`` for a thread's very first checkpoint."""
    step: int
    """Super-step number. Strictly increasing along a lineage; unique within a thread."""
    created_at: float
    """Seconds since the epoch."""
    status: Status
    """The thread status this checkpoint leaves the thread in when it is the head."""
    metadata: Mapping[str, Any]
    """JSON-compatible audit record (source, step, writes per node, durations, usage, tags). Filterable."""
    body: bytes
    """Engine-encoded: frontier, channel table, interrupts, schema version, lineage. Opaque to the saver."""
    blobs: Sequence[Blob] = ()
    """Channel data written by this checkpoint. Only filled on :meth:`Saver.commit`; reads return ``()``."""
    tasks: Sequence[FinishedTask] = ()
    """The tasks of the step this checkpoint commits, one ``task.finished`` event each (see
    :func:`graphckpt.savers.events.checkpoint_events`). Only filled on :meth:`Saver.commit`; reads return ``()``."""


@dataclass(frozen=True, slots=True)
class StoredWrite:
    """One pending write recorded against a checkpoint."""

    task_id: str
    kind: WriteKind
    index: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Owner:
    """Who holds a lease: one process."""

    worker_id: str
    """Random, new at each process start (see :func:`graphckpt.lease.owner`)."""
    host: str
    pid: int
    identity: str = ""
    """What tells this process apart from a later one with the same pid (see :mod:`graphckpt.savers._owners`);
    ``""`` when unknown. Stored with the worker id (:attr:`stored_worker`), so it needs no column of its own."""

    def __str__(self) -> str:
        return f"worker {self.worker_id} (host {self.host}, pid {self.pid})"

    @property
    def stored_worker(self) -> str:
        """The worker id as the lease's worker column stores it: ``worker_id/identity`` (the id alone without one)."""
        return f"{self.worker_id}/{self.identity}" if self.identity else self.worker_id

    @classmethod
    def from_columns(cls, worker: str, host: str, pid: int) -> Owner:
        """The owner a lease's columns describe (a worker column without ``/``, as older versions wrote it, has no
        identity)."""
        worker_id, _, identity = worker.partition("/")
        return cls(worker_id, host, pid, identity)

    def dead(self) -> bool:
        """A process of this host that is gone (see :func:`graphckpt.savers._owners.local_dead`): its lease holds
        nothing, whatever its expiry says. One ``/proc`` read for a local owner, none for another host's."""
        return local_dead(self.host, self.pid, self.identity)


@dataclass(frozen=True, slots=True)
class Lease:
    """A thread's lease as stored."""

    owner: Owner
    epoch: int
    """Grows by one with every claim of the thread."""
    heartbeat_at: float
    """When the owner last renewed it (seconds since the epoch)."""
    lease_until: float
    """When it expires unless renewed; after that the thread is ``crashed``."""

    def live(self, now: float) -> bool:
        """Not expired and not held by a dead process of this host."""
        return now <= self.lease_until and not self.owner.dead()

    def describe(self, now: float) -> str:
        """One line naming the owner and how fresh its heartbeat is."""
        return f"{self.owner}, epoch {self.epoch}, last heartbeat {max(0.0, now - self.heartbeat_at):.1f} s ago"


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    """A thread's row."""

    thread_id: str
    head_checkpoint_id: str
    head_step: int
    status: Status
    run_id: str
    """The run that last claimed the thread; every write checks it (see :meth:`Saver.claim`)."""
    created_at: float
    updated_at: float
    parent_thread_id: str | None = None
    """For a fork: the thread it was forked from."""
    parent_checkpoint_id: str | None = None
    """For a fork: the checkpoint it was forked from."""
    error: str | None = None
    """For a failed thread: a one-line description of the error."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The head checkpoint's metadata."""
    lease: Lease | None = None
    """The process holding the thread (live or expired), or ``None`` when nobody claimed it since its last stop."""
    epoch: int = 0
    """How many claims the thread has had (the lease's epoch; kept when the lease is released)."""


EventKind = Literal[
    "run.started",
    "task.finished",
    "task.failed",
    "effect.recorded",
    "interrupt.raised",
    "checkpoint",
    "run.done",
    "run.failed",
    "run.interrupted",
]
"""What an event records, and the write that makes it (in that write's transaction):

- ``run.started``: a thread created by an input (at its first step), or claimed by a run (at ``head_step + 1``);
  payload ``{run_id}``: the engine's claim of the thread (``ThreadRecord.run_id``), not a server's run id.
- ``task.finished``: one per task of a committed ``loop`` step (before that step's ``checkpoint`` event); payload
  ``{task_id, node, writes (the keys), update (the values, JSON-rendered), duration_ms, usage}``. Where the
  checkpoint holds the update as it is (the step's only task, the usual case) the event does not copy it: ``update``
  is null and ``update_in`` is that checkpoint's id; a reader takes it from there (``ThreadStore.task_update``; the
  server's streams always send it filled in). An update whose event would pass 64 KiB and that the checkpoint does
  not hold is left out (``update: null``, ``update_omitted``: the size). A checkpoint committed without its tasks
  (an import) has one per node that wrote instead, with ``task_id`` and ``update`` null.
- ``task.failed``, ``effect.recorded``, ``interrupt.raised``: a pending write of kind ``error``, ``effect`` or
  ``interrupt`` against the head at step ``s`` (event step ``s + 1``); payload ``{task_id, index, checkpoint_id}``.
- ``checkpoint``: a committed checkpoint; payload ``{checkpoint_id, parent_thread_id, parent_checkpoint_id, step,
  source, status, writes}``.
- ``run.done`` / ``run.interrupted``: a checkpoint of source ``input``, ``loop`` or ``update`` that leaves the thread
  ``done`` / ``interrupted``, right after its ``checkpoint`` event; ``run.failed`` / ``run.interrupted``: a stop
  recorded with pending writes (the head does not move; step ``head_step + 1``), after those writes' events. Payload
  ``{status, error}``. These end a stream."""

TERMINAL_EVENTS: frozenset[str] = frozenset({"run.done", "run.failed", "run.interrupted"})
"""The kinds that end a run's stream."""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One durable event. ``(thread_id, step, seq)`` is unique and, per thread, strictly increasing in the order the
    events were written: ``step`` is the super-step the event belongs to, ``seq`` counts from 0 within it."""

    thread_id: str
    step: int
    seq: int
    kind: EventKind
    payload: Mapping[str, Any]
    """JSON object; its fields depend on ``kind`` (see :data:`EventKind`)."""
    created_at: float
    """Seconds since the epoch."""

    @property
    def id(self) -> str:
        """The SSE id, ``{thread_id}:{step}:{seq}``."""
        return f"{self.thread_id}:{self.step}:{self.seq}"
