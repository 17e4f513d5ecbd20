"""Runs without a thread (langgraph-sdk's ``thread_id=None``): ``POST /runs/batch``, each on a new temporary thread,
:func:`stateless` for ``POST /runs``, ``/runs/stream`` and ``/runs/wait`` (whose routes are in
:mod:`graphckpt.server.routes.ap_runs`: the Agent Protocol shares them), and ``POST /runs/cancel`` (``cancel_many``).

A stateless run is the thread route's run on a thread made for it; ``on_completion`` (default ``delete``, as
LangGraph's) deletes that thread once the run has ended and its answer (the stream, the values) has been sent; ``keep``
leaves it, a thread like any other. The deletion is done by this server process after the response: a restart in
between leaves the thread (it is then an ordinary thread, found by search).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from graphckpt import ids
from graphckpt.errors import ThreadNotFoundError
from graphckpt.server import models
from graphckpt.server.auth import store_id
from graphckpt.server.branching import roll_back
from graphckpt.server.errors import ApiError
from graphckpt.server.http import json_response, scope_of
from graphckpt.server.routes import runs
from graphckpt.server.service import Service

__all__ = ["MAX_BATCH", "cleanup", "on_new_thread", "routes", "stateless"]

MAX_BATCH = 100
"""The most runs one ``/runs/batch`` request starts."""


class CancelManyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    thread_id: str | None = None
    run_ids: list[str] | None = Field(default=None, max_length=1000)
    status: Literal["pending", "running", "all"] | None = None


class CancelManyQuery(BaseModel):
    action: Literal["interrupt", "rollback"] = "interrupt"


def on_new_thread(request: Request, b: models.RunBody) -> tuple[str, bool]:
    """Point the request at a new thread for ``b``; whether to delete it after the run."""
    if b.if_not_exists == "reject":
        raise ApiError(422, "ValidationError", "body.if_not_exists: a run without a thread always creates one")
    thread_id = ids.new_uuid()
    request.scope["path_params"] = {**request.path_params, "thread_id": thread_id}
    return thread_id, b.on_completion != "keep"


def cleanup(service: Service, ns: str, thread_id: str) -> BackgroundTask:
    """The deletion of a temporary thread once its runs have ended (a response's background task)."""

    async def delete() -> None:
        for run in await service.runs.list(store_id(ns, thread_id)):
            await service.runs.join(run.run_id)
        with contextlib.suppress(ThreadNotFoundError):
            await service.delete_thread(ns, thread_id)

    return BackgroundTask(delete)


async def stateless(request: Request, b: models.RunBody, start: runs.Starter) -> Response:
    """``start`` on a new thread, deleted after its run unless ``b.on_completion`` is ``keep``."""
    service, ns, _ = scope_of(request)
    thread_id, delete = on_new_thread(request, b)
    response = await start(request, b)
    if delete:
        response.background = cleanup(service, ns, thread_id)
    return response


async def batch(request: Request) -> Response:
    """``runs.create_batch``: a background stateless run per payload (all are checked before any starts)."""
    service, _, config = scope_of(request)
    items = await models.parsed_body(request, config.max_body)
    if not isinstance(items, list) or len(items) > MAX_BATCH:
        raise ApiError(422, "ValidationError", f"the request body must be a JSON array of at most {MAX_BATCH} runs")
    bodies = []
    for i, item in enumerate(items):
        try:
            bodies.append(models.validated(models.RunBody, item, "body"))
        except ApiError as exc:
            raise ApiError(422, "ValidationError", f"run {i}: {exc}") from None
    made = []
    for b in bodies:
        response = await stateless(request, b, runs.start_run)
        made.append(json.loads(bytes(response.body)))
        if response.background is not None:  # its temporary thread is deleted once its run ends
            task = asyncio.ensure_future(response.background())
            service.tasks.add(task)
            task.add_done_callback(service.tasks.discard)
    return json_response(made)


async def cancel_many(request: Request) -> Response:
    """``runs.cancel_many``: the runs named, or every run of a thread, or every pending/running run of the
    caller's namespace (``status``)."""
    service, ns, config = scope_of(request)
    b = await models.body(request, CancelManyBody, config.max_body)
    q = models.query(request, CancelManyQuery)
    statuses = {"pending": {"pending"}, "running": {"running"}, "all": {"pending", "running"}}
    wanted = statuses[b.status] if b.status else {"pending", "running"}
    if b.thread_id is not None:
        await service.find(ns, b.thread_id)
        candidates = await service.runs.list(store_id(ns, b.thread_id))
    elif b.run_ids is not None:
        candidates = [r for r in [await service.runs.get(i) for i in b.run_ids] if r is not None]
    elif b.status is not None:
        candidates = []
        for record in await service.threads(ns):
            candidates += await service.runs.list(record.thread_id)
    else:
        raise ApiError(422, "ValidationError", "body: give thread_id, run_ids or status")
    prefix = ns + "/" if ns else ""
    for run in candidates:
        if b.run_ids is not None and run.run_id not in b.run_ids:
            continue
        if run.status not in wanted or not run.request.thread_id.startswith(prefix):
            continue
        cancelled = await service.runs.cancel(run.run_id)
        if q.action == "rollback":
            await roll_back(service, ns, run.request.thread_id.removeprefix(prefix), cancelled)
    return Response(status_code=204)


routes = [
    Route("/runs/batch", batch, methods=["POST"]),
    Route("/runs/cancel", cancel_many, methods=["POST"]),
]
