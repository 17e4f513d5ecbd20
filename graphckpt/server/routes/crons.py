"""Cron routes: the langgraph-sdk's ``client.crons`` (create, create_for_thread, search, count, update, delete) over
:mod:`graphckpt.crons`. A token's crons are stored under its namespace (``ns/ID``, as its threads), so their ticks'
threads are its threads and other tokens see neither: another token's cron is 404."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from graphckpt import ids
from graphckpt.crons import CronError, add_cron, update_cron
from graphckpt.savers.crons import CronRow, CronTable
from graphckpt.server import models
from graphckpt.server.auth import api_id, store_id
from graphckpt.server.errors import ApiError
from graphckpt.server.http import json_response, scope_of

__all__ = ["routes"]


class CronBody(BaseModel):
    model_config = ConfigDict(extra="ignore")  # the sdk's run options (config, webhook, ...) are not kept

    assistant_id: str
    schedule: str
    input: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    timezone: str = "UTC"
    end_time: dt.datetime | None = None
    enabled: bool = True


class CronPatchBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    schedule: str | None = None
    timezone: str | None = None
    end_time: dt.datetime | None = None
    input: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    enabled: bool | None = None


class CronSearchBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    assistant_id: str | None = None
    thread_id: str | None = None
    enabled: bool | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


def _iso(t: float | None) -> str | None:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat() if t is not None else None


def _view(ns: str, row: CronRow) -> dict[str, Any]:
    return {
        "cron_id": api_id(ns, row.cron_id),
        "assistant_id": row.graph,
        "thread_id": api_id(ns, row.thread_id) if row.thread_id else None,
        "schedule": row.schedule,
        "timezone": row.timezone,
        "end_time": _iso(row.end_at),
        "created_at": _iso(row.created_at),
        "updated_at": _iso(row.created_at),
        "next_run_date": _iso(row.next_run_at),
        "last_run_date": _iso(row.last_run_at),
        "metadata": {k: v for k, v in json.loads(row.metadata).items() if k != "cron_id"},
        "enabled": row.next_run_at is not None,
        "payload": {"assistant_id": row.graph, "schedule": row.schedule},
        "user_id": None,
        "on_run_completed": None,
        "runs": row.runs,
        "skipped": row.skipped,
        "missed": row.missed,
    }


async def _create(request: Request, thread_id: str | None) -> Response:
    service, ns, config = scope_of(request)
    b = await models.body(request, CronBody, config.max_body)
    app = service.graphs.app(b.assistant_id)
    tid = store_id(ns, thread_id) if thread_id is not None else None
    try:
        row = await add_cron(
            app,
            b.schedule,
            graph=b.assistant_id,
            input=b.input,
            thread_id=tid,
            timezone=b.timezone,
            metadata=b.metadata,
            end_at=b.end_time,
            cron_id=store_id(ns, ids.new_id()),
        )
        if not b.enabled:
            row = await update_cron(app, row.cron_id, enabled=False)
    except CronError as exc:
        raise ApiError(422, "ValidationError", str(exc)) from None
    return json_response(_view(ns, row))


async def create(request: Request) -> Response:
    return await _create(request, None)


async def create_for_thread(request: Request) -> Response:
    service, ns, _ = scope_of(request)
    await service.find(ns, request.path_params["thread_id"])  # 404 for a thread this token cannot see
    return await _create(request, request.path_params["thread_id"])


def _table(service: Any) -> CronTable:
    if not isinstance(service.saver, CronTable):
        raise ApiError(404, "NotFound", "this server's database has no schedules")
    return service.saver


async def _mine(request: Request) -> tuple[Any, str, list[CronRow]]:
    service, ns, _ = scope_of(request)
    rows = await _table(service).list_crons()
    return service, ns, [r for r in rows if api_id(ns, r.cron_id) is not None]


def _matches(ns: str, row: CronRow, b: CronSearchBody) -> bool:
    meta = json.loads(row.metadata)
    return (
        b.assistant_id in (None, row.graph)
        and (b.thread_id is None or (row.thread_id is not None and api_id(ns, row.thread_id) == b.thread_id))
        and b.enabled in (None, row.next_run_at is not None)
        and all(meta.get(k) == v for k, v in (b.metadata or {}).items())
    )


async def search(request: Request) -> Response:
    _, ns, rows = await _mine(request)
    b = await models.body(request, CronSearchBody, scope_of(request)[2].max_body)
    found = [r for r in rows if _matches(ns, r, b)]
    return json_response([_view(ns, r) for r in found[b.offset : b.offset + b.limit]])


async def count(request: Request) -> Response:
    _, ns, rows = await _mine(request)
    b = await models.body(request, CronSearchBody, scope_of(request)[2].max_body)
    return json_response(sum(1 for r in rows if _matches(ns, r, b)))


async def _one(request: Request) -> tuple[Any, str, CronRow]:
    service, ns, _ = scope_of(request)
    row = await _table(service).get_cron(store_id(ns, request.path_params["cron_id"]))
    if row is None:
        raise ApiError(404, "NotFound", f"no cron {request.path_params['cron_id']!r}")
    return service, ns, row


async def update(request: Request) -> Response:
    service, ns, row = await _one(request)
    b = await models.body(request, CronPatchBody, scope_of(request)[2].max_body)
    app = service.graphs.app(row.graph)
    changes: dict[str, Any] = {"schedule": b.schedule, "timezone": b.timezone, "enabled": b.enabled}
    changes["metadata"] = b.metadata
    if "end_time" in b.model_fields_set:
        changes["end_at"] = b.end_time
    if "input" in b.model_fields_set:
        changes["input"] = b.input
    try:
        new = await update_cron(app, row.cron_id, **changes)
    except CronError as exc:
        raise ApiError(422, "ValidationError", str(exc)) from None
    return json_response(_view(ns, new))


async def delete(request: Request) -> Response:
    service, _, row = await _one(request)
    await _table(service).delete_cron(row.cron_id)
    return Response(status_code=204)


routes = [
    Route("/runs/crons", create, methods=["POST"]),
    Route("/threads/{thread_id}/runs/crons", create_for_thread, methods=["POST"]),
    Route("/runs/crons/search", search, methods=["POST"]),
    Route("/runs/crons/count", count, methods=["POST"]),
    Route("/runs/crons/{cron_id}", update, methods=["PATCH"]),
    Route("/runs/crons/{cron_id}", delete, methods=["DELETE"]),
]

_CRON = {"type": "object", "required": ["cron_id", "assistant_id", "schedule"]}
SPEC: dict[tuple[str, str], tuple[str, type[BaseModel] | None, type[BaseModel] | None, int, Any]] = {
    ("POST", "/runs/crons"): ("create a cron (a new thread per tick)", CronBody, None, 200, _CRON),
    ("POST", "/threads/{thread_id}/runs/crons"): ("create a cron of a thread", CronBody, None, 200, _CRON),
    ("POST", "/runs/crons/search"): ("search crons", CronSearchBody, None, 200, {"type": "array", "items": _CRON}),
    ("POST", "/runs/crons/count"): ("count crons", CronSearchBody, None, 200, {"type": "integer"}),
    ("PATCH", "/runs/crons/{cron_id}"): ("update a cron", CronPatchBody, None, 200, _CRON),
    ("DELETE", "/runs/crons/{cron_id}"): ("delete a cron", None, None, 204, None),
}
"""The routes' entries of :data:`graphckpt.server.openapi.SPEC`."""
