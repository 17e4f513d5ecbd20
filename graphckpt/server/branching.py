"""Branches within one API thread: LangGraph's time travel (a run from a past ``checkpoint_id``) and
``update_state`` on a past checkpoint. The thread's state becomes the new branch; the old branch stays in its history.

Today a branch is a new head of the same stored thread (:func:`graphckpt.rebranch.rebranch`) recording the checkpoint
it branches from (``metadata.branched_from``). Every caller goes through :func:`branch`, so when thread families land
(the branches of one logical thread as graphckpt forks) only this module changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from graphckpt.checkpoint import Snapshot
from graphckpt.errors import CheckpointNotFoundError, InvalidUpdateError, ThreadNotFoundError
from graphckpt.fork import update_state
from graphckpt.rebranch import rebranch
from graphckpt.server.auth import store_id
from graphckpt.server.errors import ApiError
from graphckpt.server.records import RunInfo

if TYPE_CHECKING:
    from graphckpt.server.service import Service

__all__ = ["apply_command", "branch", "make_way", "roll_back"]


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


async def apply_command(
    service: Service, ns: str, thread_id: str, update: Mapping[str, Any] | None, goto: str | list[str] | None
) -> Snapshot:
    """A run's ``command.update``/``command.goto`` (LangGraph's ``Command`` input): a new head of API thread
    ``thread_id`` with ``update`` applied and ``goto`` as its frontier (else the head's); the run then resumes from
    it. A thread with a run going is 409."""
    record = await service.record(ns, thread_id)
    if record.status == "running" and service.runs.active(record.thread_id):
        raise ApiError(409, "ThreadStateError", f"thread {thread_id!r} is running; send the command when it stops")
    app = service.graphs.app_of(record)
    try:
        return await update_state(app.graph, app.store, record.thread_id, update, None, None, goto)
    except InvalidUpdateError as exc:
        raise ApiError(422, "ValidationError", f"body.command: {exc}") from None


async def make_way(service: Service, ns: str, thread_id: str, strategy: str) -> bool:
    """LangGraph's ``multitask_strategy`` ``interrupt`` and ``rollback`` for a new run of API thread ``thread_id``:
    the thread's unfinished runs are cancelled (a running one stops at its next safe point, what it committed stays,
    and ends ``interrupted``; a queued one never starts); with ``rollback`` the thread then goes back to where it was
    before the earliest of them (:func:`roll_back`) and their records are deleted. Returns whether there was a run
    to stop."""
    sid = store_id(ns, thread_id)
    unfinished = [r for r in await service.runs.list(sid) if not r.finished]
    if not unfinished:
        return False
    interrupted = strategy == "interrupt"
    stopped = [
        await service.runs.cancel(r.run_id, interrupted=interrupted and r.status == "running")
        for r in sorted(unfinished, key=lambda r: r.created_at)
    ]
    if strategy == "rollback":  # as LangGraph: the rolled back runs are deleted too
        first = next((r for r in stopped if r.start is not None), stopped[0])
        await roll_back(service, ns, thread_id, first)
        for run in stopped:
            with contextlib.suppress(ApiError):  # one that ended meanwhile by itself stays
                await service.runs.delete(run.run_id)
    return True


async def roll_back(service: Service, ns: str, thread_id: str, run: RunInfo) -> None:
    """Undo a cancelled run (LangGraph's ``action="rollback"``): the thread branches back to its head before the
    run (its first step: the thread is deleted). The run's checkpoints stay in the history, behind the branch."""
    if run.start is None:
        raise ApiError(409, "RunConflict", f"run {run.run_id!r} started before this server: where it began is unknown")
    before = run.start[0]
    try:
        if before < 0:
            await service.delete_thread(ns, thread_id)
            return
        snap = await service.state(ns, thread_id, None, before)
    except (ThreadNotFoundError, CheckpointNotFoundError):
        return  # nothing of the run was stored
    record = await service.record(ns, thread_id)
    if record.head_checkpoint_id != snap.checkpoint_id:
        await branch(service, ns, thread_id, snap.checkpoint_id)
