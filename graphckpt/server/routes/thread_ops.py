"""The thread operations of langgraph-sdk beyond graphckpt's own: ``update_state`` (on the head, or on a past
checkpoint: a branch, see :mod:`graphckpt.server.branching`), ``copy``, ``count`` and ``prune`` (LangGraph's request and
response shapes). Counting goes through :func:`graphckpt.server.routes.threads.matching`, the one filter
``search`` uses too."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from graphckpt.checkpoint import Snapshot
from graphckpt.errors import ThreadNotFoundError
from graphckpt.server import models
from graphckpt.server.auth import api_id
from graphckpt.server.branching import branch
from graphckpt.server.errors import ApiError
from graphckpt.server.http import json_response, scope_of
from graphckpt.server.records import PendingThread
from graphckpt.server.routes.threads import matching, thread_with_values
from graphckpt.server.service import Service

__all__ = ["apply_update", "routes"]


class UpdateStateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    values: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    checkpoint: models.CheckpointRefBody | None = None
    as_node: str | None = None


class CountBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metadata: dict[str, Any] = Field(default_factory=dict)
    status: models.ThreadStatusName | None = None
    graph_id: str | None = None


class PruneBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    thread_ids: list[str] = Field(max_length=1000)
    strategy: Literal["delete", "keep_latest"] = "delete"


async def apply_update(
    service: Service, ns: str, thread_id: str, values: dict[str, Any] | None, source: str | None, as_node: str | None
) -> Snapshot:
    """A new checkpoint of the thread with ``values`` applied through the reducers (as ``as_node``'s writes when
    given); on a past checkpoint ``source``, the thread branches there. A running thread is 409."""
    record = await service.record(ns, thread_id)
    if source is not None and source != record.head_checkpoint_id:
        return await branch(service, ns, thread_id, source, values, as_node)
    if record.status == "running" and service.runs.active(record.thread_id):
        raise ApiError(409, "ThreadStateError", f"thread {thread_id!r} is running; update it when it stops")
    return await service.graphs.app_of(record).aupdate_state(record.thread_id, values, as_node=as_node)


async def update_state(request: Request) -> Response:
    """``threads.update_state``: see :func:`apply_update`."""
    service, ns, config = scope_of(request)
    b = await models.body(request, UpdateStateBody, config.max_body)
    thread_id = request.path_params["thread_id"]
    source = b.checkpoint_id or (b.checkpoint.checkpoint_id if b.checkpoint is not None else None)
    snap = await apply_update(service, ns, thread_id, b.values, source, b.as_node)
    ref = {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": snap.checkpoint_id}
    return json_response({"checkpoint": ref})


async def patch_thread(request: Request) -> Response:
    """LangGraph's ``threads.update`` (merge ``metadata``) and the Agent Protocol's ``patch_thread`` (also
    ``values``/``messages``, applied through the reducers on the head or on ``checkpoint``: a branch)."""
    service, ns, config = scope_of(request)
    b = await models.body(request, models.ThreadPatchBody, config.max_body)
    thread_id = request.path_params["thread_id"]
    update = b.update()
    if update is not None:
        if isinstance(await service.find(ns, thread_id), PendingThread):
            raise ApiError(409, "ThreadStateError", f"thread {thread_id!r} has no state yet: run it, then patch values")
        source = b.checkpoint.checkpoint_id if b.checkpoint is not None else None
        await apply_update(service, ns, thread_id, update, source, None)
    if b.metadata is not None or update is None:
        await service.patch_metadata(ns, thread_id, b.metadata or {})
    return json_response(await thread_with_values(service, ns, await service.find(ns, thread_id)))


async def copy_thread(request: Request) -> Response:
    """``threads.copy``: a new thread with the thread's state and history, as a graphckpt fork of its head (its
    history is the source's up to the head, shared, not duplicated; one checkpoint of source ``fork`` on top)."""
    service, ns, _ = scope_of(request)
    snap = await service.fork(
        ns,
        request.path_params["thread_id"],
        checkpoint_id=None,
        step=None,
        update=None,
        new_thread_id=None,
        goto=None,
        as_node=None,
        metadata=None,
    )
    record = await service.record(ns, api_id(ns, snap.thread_id) or snap.thread_id)
    return json_response(await thread_with_values(service, ns, record))


async def count_threads(request: Request) -> Response:
    service, ns, config = scope_of(request)
    b = await models.body(request, CountBody, config.max_body)
    found = await matching(service, ns, metadata=b.metadata, status=b.status, graph_id=b.graph_id)
    return json_response(len(found))


async def prune_threads(request: Request) -> Response:
    """Delete the threads named (LangGraph's ``strategy="delete"``), or keep only their latest checkpoint
    (``"keep_latest"``); an id that is not a thread is skipped. ``pruned_count``: the threads deleted or trimmed."""
    service, ns, config = scope_of(request)
    b = await models.body(request, PruneBody, config.max_body)
    pruned = 0
    for thread_id in dict.fromkeys(b.thread_ids):
        try:
            if b.strategy == "keep_latest":
                pruned += await service.keep_latest(ns, thread_id)
                continue
            await service.delete_thread(ns, thread_id)
        except ThreadNotFoundError:
            continue
        pruned += 1
    return json_response({"pruned_count": pruned})


routes = [
    Route("/threads/count", count_threads, methods=["POST"]),
    Route("/threads/prune", prune_threads, methods=["POST"]),
    Route("/threads/{thread_id}/state", update_state, methods=["POST"]),
    Route("/threads/{thread_id}/copy", copy_thread, methods=["POST"]),
    Route("/threads/{thread_id}", patch_thread, methods=["PATCH"]),
]
