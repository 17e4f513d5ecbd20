"""Thread routes: create, get, search, delete (patch: :mod:`.thread_ops`); state, history, fork, diff, branch tree;
export, import; the inbox of open interrupts. Each handler parses, calls one
:class:`~graphckpt.server.service.Service` method and renders it with :mod:`graphckpt.server.queries`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from graphckpt.savers.base import Status, ThreadRecord, metadata_matches
from graphckpt.savers.waits import WaitTable, wake_times
from graphckpt.server import models, queries
from graphckpt.server.auth import api_id
from graphckpt.server.http import json_response, scope_of
from graphckpt.server.records import PendingThread, user_metadata
from graphckpt.server.service import Service
from graphckpt.subgraph import link_of

__all__ = ["matching", "routes", "thread_with_values"]


class StateQuery(BaseModel):
    step: int | None = Field(default=None, ge=0, le=models.MAX_INT)


class DeleteQuery(BaseModel):
    cascade: bool = False


class HistoryQuery(BaseModel):
    limit: int = Field(default=10, ge=1, le=1000)
    before: str | None = None


class DiffQuery(BaseModel):
    other: str = Field(min_length=1)
    """The other thread (``b``)."""
    a: str | None = None
    """A checkpoint of this thread (its head by default)."""
    b: str | None = None
    """A checkpoint of ``other`` (its head by default)."""


async def thread_with_values(
    service: Service, ns: str, thread: ThreadRecord | PendingThread, wake_at: float | None = None
) -> dict[str, Any]:
    """The thread's view with its current ``values`` (``{}`` before its first checkpoint) and, for a waiting thread,
    when it wakes (``wake_at``, see :func:`wake_times`)."""
    if isinstance(thread, PendingThread):
        return queries.thread_view(ns, thread, thread.graph_id)
    api = api_id(ns, thread.thread_id) or thread.thread_id
    values = queries.state_view(ns, await service.state(ns, api))["values"]
    return queries.thread_view(ns, thread, service.graphs.graph_of(thread), values, wake_at)


async def create_thread(request: Request) -> Response:
    service, ns, config = scope_of(request)
    b = await models.body(request, models.ThreadBody, config.max_body)
    ttl = b.ttl.model_dump() if b.ttl is not None else None
    exist_ok = b.if_exists == "do_nothing"
    thread = await service.create_thread(ns, b.thread_id, b.metadata, b.graph_id, exist_ok=exist_ok, ttl=ttl)
    return json_response(await thread_with_values(service, ns, thread))


async def get_thread(request: Request) -> Response:
    service, ns, _ = scope_of(request)
    thread = await service.find(ns, request.path_params["thread_id"])
    wake = (
        (await wake_times(service.saver, [thread])).get(thread.thread_id) if isinstance(thread, ThreadRecord) else None
    )
    return json_response(await thread_with_values(service, ns, thread, wake))


def keeper(
    service: Service, metadata: Mapping[str, Any] | None, graph_id: str | None
) -> Callable[[ThreadRecord], bool]:
    """The check of a search's filters that the saver's pages do not make: the graph and the user's metadata."""

    def keep(record: ThreadRecord) -> bool:
        if graph_id is not None and service.graphs.graph_of(record) != graph_id:
            return False
        return not metadata or metadata_matches(user_metadata(record), metadata)

    return keep


async def status_filter(
    service: Service, status: str | None, keep: Callable[[ThreadRecord], bool]
) -> tuple[Status | None, Callable[[ThreadRecord], bool]]:
    """A search's ``status`` as the saver's page filter and the check of the rows read: ``waiting`` is the
    ``interrupted`` threads with a pending durable wait at their head (one read of the pending waits)."""
    if status != "waiting":
        return (queries.to_store_status(status) if status else None), keep
    saver = service.saver
    pending: dict[str, str] = {}
    if isinstance(saver, WaitTable):
        pending = {w.thread_id: w.checkpoint_id for w in await saver.list_waits(status="pending")}

    def waiting(record: ThreadRecord) -> bool:  # a subgraph's child thread is not listed: its root waits for it
        at_head = pending.get(record.thread_id) == record.head_checkpoint_id
        return at_head and link_of(record.metadata) is None and keep(record)

    return "interrupted", waiting


async def matching(
    service: Service,
    ns: str,
    *,
    metadata: Mapping[str, Any] | None = None,
    status: str | None = None,
    graph_id: str | None = None,
    parent_thread_id: str | None = None,
) -> list[ThreadRecord]:
    """The stored threads of ``ns`` that match every filter given, newest created first (``count`` and the
    operations on many threads): the saver's indexed pages, read page by page."""
    store_status, keep = await status_filter(service, status, keeper(service, metadata, graph_id))
    return await service.search(ns, status=store_status, parent_thread_id=parent_thread_id, keep=keep)


async def search_threads(request: Request) -> Response:
    service, ns, config = scope_of(request)
    b = await models.body(request, models.ThreadSearchBody, config.max_body)
    status, keep = await status_filter(service, b.status, keeper(service, b.metadata, b.graph_id))
    if not b.values:
        page = await service.search(
            ns, status=status, parent_thread_id=b.parent_thread_id, keep=keep, limit=b.limit, offset=b.offset
        )
        wakes = await wake_times(service.saver, page)
        return json_response([await thread_with_values(service, ns, r, wakes.get(r.thread_id)) for r in page])
    found = []  # a filter on values: each thread's head is read
    records = await service.search(ns, status=status, parent_thread_id=b.parent_thread_id, keep=keep)
    wakes = await wake_times(service.saver, records)
    for record in records:
        view = await thread_with_values(service, ns, record, wakes.get(record.thread_id))
        if isinstance(view["values"], dict) and all(view["values"].get(k) == v for k, v in b.values.items()):
            found.append(view)
    return json_response(found[b.offset : b.offset + b.limit])


async def delete_thread(request: Request) -> Response:
    service, ns, _ = scope_of(request)
    q = models.query(request, DeleteQuery)
    await service.delete_thread(ns, request.path_params["thread_id"], cascade=q.cascade)
    return Response(status_code=204)


async def get_state(request: Request) -> Response:
    service, ns, _ = scope_of(request)
    q = models.query(request, StateQuery)
    checkpoint_id = request.path_params.get("checkpoint_id")
    snap = await service.state(ns, request.path_params["thread_id"], checkpoint_id, q.step)
    return json_response(queries.state_view(ns, snap))


async def post_state_checkpoint(request: Request) -> Response:
    service, ns, config = scope_of(request)
    b = await models.body(request, models.CheckpointBody, config.max_body)
    snap = await service.state(ns, request.path_params["thread_id"], b.checkpoint.checkpoint_id)
    return json_response(queries.state_view(ns, snap))


async def get_history(request: Request) -> Response:
    service, ns, _ = scope_of(request)
    q = models.query(request, HistoryQuery)
    snaps = await service.history(ns, request.path_params["thread_id"], limit=q.limit, before=q.before, filter=None)
    return json_response([queries.state_view(ns, s) for s in snaps])


async def post_history(request: Request) -> Response:
    service, ns, config = scope_of(request)
    b = await models.body(request, models.HistoryBody, config.max_body)
    snaps = await service.history(
        ns, request.path_params["thread_id"], limit=b.limit, before=b.before_id(), filter=b.metadata
    )
    return json_response([queries.state_view(ns, s) for s in snaps])


async def fork_thread(request: Request) -> Response:
    service, ns, config = scope_of(request)
    b = await models.body(request, models.ForkBody, config.max_body)
    snap = await service.fork(
        ns,
        request.path_params["thread_id"],
        checkpoint_id=b.checkpoint_id,
        step=b.step,
        update=b.values,
        new_thread_id=b.new_thread_id,
        goto=b.goto,
        as_node=b.as_node,
        metadata=b.metadata,
    )
    new_id = api_id(ns, snap.thread_id) or snap.thread_id
    record = await service.record(ns, new_id)
    body = queries.thread_view(ns, record, service.graphs.graph_of(record))
    body["state"] = queries.state_view(ns, snap)
    return json_response(body, 201, {"Location": f"/threads/{new_id}"})


async def diff_threads(request: Request) -> Response:
    service, ns, _ = scope_of(request)
    q = models.query(request, DiffQuery)
    diff = await service.diff(ns, (request.path_params["thread_id"], q.a), (q.other, q.b))
    return json_response(queries.diff_view(ns, diff))


async def thread_tree(request: Request) -> Response:
    service, ns, _ = scope_of(request)
    record = await service.record(ns, request.path_params["thread_id"])
    threads = await service.threads(ns)
    by_id = {r.thread_id: r for r in threads}
    root = record
    while root.parent_thread_id in by_id:
        root = by_id[root.parent_thread_id]
    children: dict[str, list[ThreadRecord]] = {}
    for r in sorted(threads, key=lambda r: r.created_at):
        if r.parent_thread_id is not None:
            children.setdefault(r.parent_thread_id, []).append(r)
    return json_response(queries.tree_view(ns, root, children))


async def export_thread(request: Request) -> Response:
    service, ns, _ = scope_of(request)
    record = await service.record(ns, request.path_params["thread_id"])
    decrypt = request.query_params.get("decrypt", "").lower() in ("1", "true", "yes")
    lines = [
        line async for line in service.export(ns, record, decrypt=decrypt)
    ]  # read whole first: errors become a status code

    async def body() -> object:
        for line in lines:
            yield line if line.endswith("\n") else line + "\n"

    return StreamingResponse(body(), media_type="application/x-ndjson")  # type: ignore[arg-type]


async def import_thread(request: Request) -> Response:
    service, ns, config = scope_of(request)
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > config.max_body:
            return json_response(
                {"error": "PayloadTooLarge", "message": f"the export is larger than {config.max_body} bytes"}, 413
            )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return json_response({"error": "ValidationError", "message": "the export is not UTF-8 text"}, 422)
    thread_id = await service.import_(ns, [line for line in text.splitlines() if line.strip()])
    record = await service.record(ns, thread_id)
    return json_response(queries.thread_view(ns, record, service.graphs.graph_of(record)), 201)


async def inbox(request: Request) -> Response:
    service, ns, _ = scope_of(request)
    items = []
    for record, snap in await service.inbox(ns):
        items.append(
            {
                "thread": queries.thread_view(ns, record, service.graphs.graph_of(record)),
                "checkpoint_id": snap.checkpoint_id,
                "interrupts": [queries.interrupt_view(i) for i in snap.interrupts],
            }
        )
    return json_response(items)


routes = [
    Route("/threads", create_thread, methods=["POST"]),
    Route("/threads/search", search_threads, methods=["POST"]),
    Route("/threads/import", import_thread, methods=["POST"]),
    Route("/threads/{thread_id}", get_thread, methods=["GET"]),
    Route("/threads/{thread_id}", delete_thread, methods=["DELETE"]),
    Route("/threads/{thread_id}/state", get_state, methods=["GET"]),
    Route("/threads/{thread_id}/state/checkpoint", post_state_checkpoint, methods=["POST"]),
    Route("/threads/{thread_id}/state/{checkpoint_id}", get_state, methods=["GET"]),
    Route("/threads/{thread_id}/history", get_history, methods=["GET"]),
    Route("/threads/{thread_id}/history", post_history, methods=["POST"]),
    Route("/threads/{thread_id}/fork", fork_thread, methods=["POST"]),
    Route("/threads/{thread_id}/diff", diff_threads, methods=["GET"]),
    Route("/threads/{thread_id}/tree", thread_tree, methods=["GET"]),
    Route("/threads/{thread_id}/export", export_thread, methods=["GET"]),
    Route("/inbox", inbox, methods=["GET"]),
]
