"""What the server's layers pass about a thread: a thread created before its first checkpoint
(:class:`PendingThread`), and what a client's metadata and tags are in a stored thread's record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from graphckpt import ids
from graphckpt.savers.base import ThreadRecord

__all__ = ["PendingThread", "thread_tags", "user_metadata"]


@dataclass
class PendingThread:
    """A thread created by ``POST /threads`` that has no checkpoint yet (a thread is stored from its first checkpoint
    on): a row of the run queue's ``created_threads`` (its tags are its first run's), so it survives a restart and a
    separate worker's run keeps its metadata; in this process's memory on a saver without a run queue."""

    thread_id: str
    metadata: dict[str, Any]
    graph_id: str
    created_at: float = field(default_factory=ids.now)

    @property
    def tags(self) -> dict[str, Any]:
        """The tags its first run's checkpoints take (before the run's own metadata is applied)."""
        return {"graph": self.graph_id, "metadata": self.metadata}


def thread_tags(record: ThreadRecord) -> Mapping[str, Any]:
    """The tags of the thread's head checkpoint (``{}`` when it has none)."""
    found = record.metadata.get("tags")
    return found if isinstance(found, Mapping) else {}


def user_metadata(record: ThreadRecord) -> dict[str, Any]:
    """The metadata a client gave the thread (kept in its checkpoints' ``tags.metadata``)."""
    found = thread_tags(record).get("metadata")
    return dict(found) if isinstance(found, Mapping) else {}
