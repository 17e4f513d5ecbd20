"""Branches within one API thread: LangGraph's time travel (a run from a past ``checkpoint_id``) and
``update_state`` on a past checkpoint. The thread's state becomes the new branch; the old branch stays in its history.

Today a branch is a new head of the same stored thread (:func:`graphckpt.rebranch.rebranch`) recording the checkpoint
it branches from (``metadata.branched_from``). Every caller goes through :func:`branch`, so when thread families land
(the branches of one logical thread as graphckpt forks) only this module changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from graphckpt.checkpoint import Snapshot
from graphckpt.rebranch import rebranch
from graphckpt.server.errors import ApiError

if TYPE_CHECKING:
    from graphckpt.server.service import Service

__all__ = ["branch"]


async def branch(
    service: Service,
    ns: str,
    thread_id: str,
    checkpoint_id: str,
    update: Mapping[str, Any] | None = None,
    as_node: str | None = None,
) -> Snapshot:
    """Branch API thread ``thread_id`` (of namespace ``ns``) at its checkpoint ``checkpoint_id`` with ``update``;
    a thread with a run going is 409."""
    record = await service.record(ns, thread_id)
    if record.status == "running" and service.runs.active(record.thread_id):
        raise ApiError(409, "ThreadStateError", f"thread {thread_id!r} is running; branch it when it stops")
    app = service.graphs.app_of(record)
    return await rebranch(app.graph, app.store, record.thread_id, checkpoint_id, update, as_node, None)
