"""The records a user reads: :class:`Snapshot` (one checkpoint), its :class:`Task` frontier, :class:`Interrupt`,
:class:`TaskError`, :class:`ThreadInfo`, and the vocabulary of checkpoint metadata."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypedDict

from graphckpt.savers.base import Status

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


@dataclass(frozen=True, slots=True)
class TaskError:
    """A node failure recorded in a failed thread's head."""

    node: str
    task_id: str
    type: str
    message: str

    def __str__(self) -> str:
        return f"node {self.node!r} raised {self.type}: {self.message}"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A checkpoint as a user sees it: the state after a super-step and what runs next."""

    thread_id: str
    checkpoint_id: str
    parent: CheckpointRef | None
    """The previous checkpoint of this lineage (in another thread for a fork's first checkpoint)."""
    step: int
    values: Any
    """An instance of the state schema (a dict for TypedDict schemas)."""
    tasks: tuple[Task, ...]
    """The frontier: the tasks the next super-step runs."""
    status: Status
    """The thread's status if this is the head; for older checkpoints, the status it had when it was the head."""
    interrupts: tuple[Interrupt, ...] = ()
    errors: tuple[TaskError, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    created_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    schema_version: int = 1

    @property
    def next(self) -> tuple[str, ...]:
        """Node names of the frontier, in task order."""
        return tuple(t.node for t in self.tasks)

    @property
    def ref(self) -> CheckpointRef:
        return CheckpointRef(self.thread_id, self.checkpoint_id)


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
