"""What the server's layers pass: a thread created before its first checkpoint (:class:`PendingThread`), what a
client's metadata and tags are in a stored thread's record, and a run's request and record (:class:`RunRequest`,
:class:`RunInfo`, with LangGraph's run statuses)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from graphckpt import ids
from graphckpt.records import NO_ANSWER
from graphckpt.savers.base import ThreadRecord

__all__ = ["PendingThread", "RunInfo", "RunRequest", "RunStatus", "thread_tags", "user_metadata"]


@dataclass
class PendingThread:
    """A thread created by ``POST /threads`` that has no checkpoint yet (a thread is stored from its first checkpoint
    on): a row of the run queue's ``created_threads`` (its tags are its first run's), so it survives a restart and a
    separate worker's run keeps its metadata; in this process's memory on a saver without a run queue."""

    thread_id: str
    metadata: dict[str, Any]
    graph_id: str
    created_at: float = field(default_factory=ids.now)
    ttl: dict[str, Any] | None = None
    """LangGraph's ``{"strategy": "delete", "ttl": minutes}`` given at creation (see :mod:`graphckpt.prune`)."""

    @property
    def tags(self) -> dict[str, Any]:
        """The tags its first run's checkpoints take (before the run's own metadata is applied)."""
        ttl = {"ttl": self.ttl} if self.ttl is not None else {}
        return {"graph": self.graph_id, "metadata": self.metadata, **ttl}


def thread_tags(record: ThreadRecord) -> Mapping[str, Any]:
    """The tags of the thread's head checkpoint (``{}`` when it has none)."""
    found = record.metadata.get("tags")
    return found if isinstance(found, Mapping) else {}


def user_metadata(record: ThreadRecord) -> dict[str, Any]:
    """The metadata a client gave the thread (kept in its checkpoints' ``tags.metadata``)."""
    found = thread_tags(record).get("metadata")
    return dict(found) if isinstance(found, Mapping) else {}


RunStatus = Literal["pending", "running", "success", "error", "interrupted", "cancelled"]
"""LangGraph's run statuses (``cancelled`` where it says ``interrupted`` for a cancel: ours is the thread's)."""

_FINISHED = frozenset({"success", "error", "interrupted", "cancelled"})


@dataclass(frozen=True)
class RunRequest:
    """What a run does: ``input`` on a new or done thread, or (``resume``) continue it with ``answer``."""

    thread_id: str
    """The stored thread id."""
    graph_id: str
    input: Mapping[str, Any] | None = None
    resume: bool = False
    answer: Any = NO_ANSWER
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The thread's metadata, kept in the run's checkpoints (``tags.metadata``)."""
    recursion_limit: int | None = None
    tags: Mapping[str, Any] | None = None
    """Tags a resume records in its checkpoints (the web UI's ``via``/``ui_action``); ``None``: the thread's own."""
    stream_mode: tuple[str, ...] = ()
    """The stream modes the run was started with: what a join of its stream without ``stream_mode`` streams (as
    LangGraph's server does; LangGraph's JavaScript client rejoins that way)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The run's own options (:data:`graphckpt.runs.RUN_OPTIONS`: interrupt points, ``configurable``, ``context``)."""
    ttl: Mapping[str, Any] | None = None
    """LangGraph's ``{"strategy": "delete", "ttl": minutes}`` this run sets on its thread (``None``: it keeps its)."""


@dataclass
class RunInfo:
    """A run as its executor reports it (a snapshot for the queue's runs: read it again with ``get``)."""

    run_id: str
    request: RunRequest
    multitask_strategy: str
    start: tuple[int, int] | None
    """The event cursor before the run: its stream is the thread's events after it (``None``: not known here, a
    run read back from the queue after a restart)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The run's own metadata."""
    status: RunStatus = "pending"
    error: str | None = None
    created_at: float = field(default_factory=ids.now)
    updated_at: float = field(default_factory=ids.now)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def finished(self) -> bool:
        return self.status in _FINISHED
