"""The plain records the UI's pages show (what :class:`~graphckpt.server.ui.data.UIBackend` returns): a threads
list's rows and page, a thread's timeline and view, a checkpoint's page, an open interrupt of the inbox."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from graphckpt.checkpoint import Interrupt, Snapshot, ThreadInfo
from graphckpt.compiled import CompiledGraph
from graphckpt.diff import Change
from graphckpt.server.ui.liveness import NOBODY, Liveness

__all__ = ["CheckpointPage", "InterruptItem", "StepRow", "ThreadPage", "ThreadRow", "ThreadView"]


@dataclass(frozen=True, slots=True)
class ThreadRow:
    """One line of the threads list."""

    thread_id: str
    graph: str | None
    status: str
    owner: str | None
    step: int
    tokens: int | None
    cost: float | None
    updated_at: dt.datetime
    forked_from: str | None
    error: str | None
    metadata: Mapping[str, Any]
    spend: Mapping[str, Any] = field(default_factory=dict)
    """``own``, ``inherited`` and ``total`` spend (tokens, calls, lost_calls, cost with a price table)."""
    stopped: bool = False
    """``running`` but known to have no run going (its run was cancelled)."""
    lease: Liveness = NOBODY
    """Who holds the thread, the seconds left on its lease, when it crashed."""
    wake_at: dt.datetime | None = None
    """When a durable wait wakes the thread (it is *waiting*: ``interrupted`` with a wake-up time)."""


@dataclass(frozen=True, slots=True)
class ThreadPage:
    """One page of the filtered threads list, and what the filters can offer."""

    rows: list[ThreadRow]
    total: int
    page: int
    pages: int
    statuses: list[str]
    graphs: list[str]


@dataclass(frozen=True, slots=True)
class StepRow:
    """One checkpoint of a thread's timeline."""

    thread_id: str
    checkpoint_id: str
    step: int
    source: str
    nodes: list[str]
    duration_ms: float
    models: list[str]
    tokens: int
    next: list[str]
    created_at: dt.datetime
    own: bool
    """False for an ancestor's checkpoint (before the fork point)."""
    replayed: Mapping[str, float] = field(default_factory=dict)
    """Nodes whose model/tool calls were answered from the journal, with the original calls' duration in ms."""
    attempts: Mapping[str, int] = field(default_factory=dict)
    """Failed attempts per node before the one that counted (the audit record's ``attempts``)."""
    lost: Mapping[str, int] = field(default_factory=dict)
    """Calls per node started and never finished (the process died: tokens billed, answer never read)."""
    failures: list[str] = field(default_factory=list)
    """The failed attempts as ``node (attempt N): Type: message`` lines."""
    via_ui: str | None = None


@dataclass(frozen=True, slots=True)
class ThreadView:
    """A thread: its record, timeline (oldest first), graph, fork tree and what can be done with it."""

    info: ThreadInfo
    row: ThreadRow
    steps: list[StepRow]
    head: Snapshot
    errors: list[str]
    graph: CompiledGraph | None
    done_nodes: set[str]
    tree: dict[str, Any]
    runnable: bool
    pending: list[dict[str, Any]] = field(default_factory=list)
    """The head's uncommitted record (a failed or crashed step): failed attempts and lost calls not in a
    checkpoint yet."""
    cancellable: bool = False
    """A run of this thread is going in this server (the Cancel button stops it)."""
    stopped: bool = False
    """Status ``running`` but known to have no run going (a cancelled run; Resume continues it)."""

    @property
    def lost_calls(self) -> int:
        """Lost calls of the lineage, less the head's calls still in flight (counted lost by the spend)."""
        total = self.row.spend.get("total", {}) if self.row.spend else {}
        flying = sum(1 for p in self.pending if p["kind"] == "call in flight")
        return max(0, int(total.get("lost_calls", 0) or 0) - flying)


@dataclass(frozen=True, slots=True)
class CheckpointPage:
    """One checkpoint: its state, what its step changed, frontier, pending writes, audit record."""

    snap: Snapshot
    values: dict[str, Any]
    changes: list[Change]
    parent: str | None
    tasks: list[dict[str, Any]]
    interrupts: list[dict[str, Any]]
    pending: list[dict[str, Any]]
    metadata: dict[str, Any]
    is_head: bool
    status: str
    runnable: bool
    graph_ref: str | None
    nodes: list[str]
    audit: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """The checkpoint's audit record (``calls``, ``attempts``, ``answers``; see :mod:`graphckpt.audit`)."""
    replayed: Mapping[str, float] = field(default_factory=dict)
    """Nodes of this step answered from the journal, with the original calls' duration in ms."""
    cancellable: bool = False


@dataclass(frozen=True, slots=True)
class InterruptItem:
    """An open interrupt of an interrupted thread, with what its answer form needs."""

    thread_id: str
    checkpoint_id: str
    interrupt: Interrupt
    payload: Any
    question: str | None
    error: str | None
    expects: str | None
    approval: bool
    runnable: bool
    waiting_since: dt.datetime | None = None
    """When the thread stopped at this interrupt (its head checkpoint's time)."""
    deadline: dt.datetime | None = None
    """When its durable wait fires (an interrupt with a timeout), else ``None``."""

    def waiting_s(self, now: dt.datetime | None = None) -> float:
        """Seconds it has been waiting."""
        if self.waiting_since is None:
            return 0.0
        return max(0.0, ((now or dt.datetime.now(dt.UTC)) - self.waiting_since).total_seconds())
