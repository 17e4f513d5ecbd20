"""LangGraph's v3 thread stream (langgraph-sdk's ``client.threads.stream(...)``, its ``AsyncThreadStream``): commands
as ``POST /threads/{thread_id}/commands`` (``{"id", "method", "params"}`` in, ``{"type": "success", "id",
"result"}`` or ``{"type": "error", "id", "error", "message"}`` out) and events as ``POST
/threads/{thread_id}/stream/events`` (a body naming the ``channels`` wanted and ``since``, the last ``seq`` seen),
an SSE stream whose every ``data`` is one protocol event ``{"type": "event", "seq", "event_id", "method", "params":
{"namespace", "timestamp", "data"}}``, over the SSE transport (not the WebSocket one).

Commands: ``run.start`` (a run of ``params.assistant_id`` with ``input``, ``config``, ``metadata`` on the thread,
created when missing; it queues after a run going) and ``input.respond`` (the answer to an open interrupt: a run
resuming the thread with ``response``); any other is ``unknown_command`` (400).

Events come from the thread's durable event log, so a stream can be reopened from any ``seq``: ``run.started`` is a
``lifecycle`` event ``running``; a ``checkpoint`` is ``values``; a finished task is ``updates``; ``run.interrupted`` is
one ``input.requested`` per open interrupt (``interrupt_id``, ``value``); ``run.done`` and ``run.failed`` are
``lifecycle`` ``completed`` and ``failed`` (with ``error``). A stream without ``since`` starts at the thread's latest
run (so an earlier run's end is not taken for this one's). Each event's ``seq`` encodes its place in the log (step,
sequence number, and which of the events it made), so it grows along the stream and stays the same on every stream.
Subgraph namespaces, ``messages``, ``tools`` and the other commands (``subscription.*``, ``state.*``, ``agent.*``)
are not served.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from graphckpt.savers.base import StoredEvent
from graphckpt.server import models
from graphckpt.server.auth import store_id
from graphckpt.server.errors import ApiError
from graphckpt.server.events.render import dump, mode_data
from graphckpt.server.events.streams import HEADERS, SHUTDOWN_GRACE, START, StreamResponse
from graphckpt.server.http import scope_of
from graphckpt.server.routes import ap_threads
from graphckpt.server.routes.runs import submit_run
from graphckpt.server.service import Service

__all__ = ["routes"]

CHANNELS = ("values", "updates", "lifecycle", "input")
"""The channels this server emits (others are accepted and stay silent)."""
WAKE_EVERY = 5.0
"""Seconds a quiet stream waits before it reads the log again (a change wakes it sooner)."""


class EventsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    channels: list[str] = Field(min_length=1, max_length=64)
    namespaces: list[list[str]] | None = None
    depth: int | None = Field(default=None, ge=0)
    since: int | None = Field(default=None, ge=0)


class CommandBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int = Field(ge=0)
    method: str
    params: dict[str, Any] = Field(default_factory=dict)


def _error(command_id: int | None, code: str, message: str, status: int) -> JSONResponse:
    return JSONResponse({"type": "error", "id": command_id, "error": code, "message": message}, status_code=status)


def _sdk_shaped(c: CommandBody) -> bool:
    """Whether ``c`` is the langgraph-sdk's v3 command (``assistant_id``, ``response``: snake case) rather than the
    Agent Protocol's (``assistantId``, ``interruptId``/``responses``): one route serves both."""
    if c.method == "run.start":
        return "assistant_id" in c.params
    if c.method == "input.respond":
        return "interruptId" not in c.params and "responses" not in c.params
    return False


async def command(request: Request) -> Response:
    _, _, config = scope_of(request)
    c = await models.body(request, CommandBody, config.max_body)
    if not _sdk_shaped(c) and c.method in ap_threads.COMMANDS:  # the protocol's (state.*, camel-case params)
        command = ap_threads.StreamingCommandBody(id=c.id, method=c.method, params=c.params)
        return await ap_threads.answer_command(request, command)
    fields: dict[str, Any]
    if c.method == "run.start":
        fields = {k: c.params[k] for k in ("assistant_id", "input", "config", "metadata") if k in c.params}
        unknown = set(c.params) - set(fields) - {"langsmith_tracer"}
        if unknown or c.params.get("langsmith_tracer"):
            name = sorted(unknown)[0] if unknown else "langsmith_tracer"
            return _error(c.id, "invalid_argument", f"params.{name}: not supported", 422)
        fields["multitask_strategy"] = "enqueue"
    elif c.method == "input.respond":
        fields = {"command": {"resume": c.params.get("response")}, "if_not_exists": "reject"}
    else:
        return _error(c.id, "unknown_command", f"method {c.method!r} is not served by graphckpt", 400)
    try:
        body = models.RunBody.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return _error(c.id, "invalid_argument", f"params.{where}: {first['msg']}", 422)
    try:
        run = await submit_run(request, body)
    except ApiError as exc:
        return _error(c.id, "invalid_argument", str(exc), exc.status)
    return JSONResponse({"type": "success", "id": c.id, "result": {"run_id": run.run_id}})


def _seq(e: StoredEvent, k: int) -> int:
    """The protocol ``seq`` of the ``k``-th event made from ``e``: its place in the log, growing along the stream."""
    return ((e.step + 2) << 40) | ((e.seq + 1) << 8) | k


async def _converted(service: Service, ns: str, thread_id: str, e: StoredEvent) -> list[tuple[str, Any]]:
    """The protocol events ``(method, data)`` the stored event ``e`` makes."""
    feed = service.feed
    if e.kind == "run.started":
        return [("lifecycle", {"event": "running"})]
    if e.kind == "checkpoint":
        return [("values", await mode_data(feed, ns, thread_id, e, "values"))]
    if e.kind == "task.finished":
        return [("updates", await mode_data(feed, ns, thread_id, e, "updates"))]
    if e.kind == "run.interrupted":
        found = await mode_data(feed, ns, thread_id, e, "values")
        return [("input", {"interrupt_id": i["id"], "value": i["value"]}) for i in found["__interrupt__"]]
    if e.kind == "run.done":
        return [("lifecycle", {"event": "completed"})]
    if e.kind == "run.failed":
        error = e.payload.get("error")
        return [("lifecycle", {"event": "failed", **({"error": str(error)} if error else {})})]
    return []


async def _events(service: Service, ns: str, thread_id: str, b: EventsBody) -> AsyncIterator[ServerSentEvent]:
    channels = set(b.channels)
    since = b.since
    sid = store_id(ns, thread_id)
    if since is None:
        runs = await service.runs.list(sid)
        start = runs[0].start if runs and runs[0].start is not None else START
        cursor = (start[0], start[1])
    else:
        cursor = ((since >> 40) - 2, ((since >> 8) & ((1 << 32) - 1)) - 2)
    hub = service.hub
    wake = asyncio.Event()
    hub.wakes.add(wake)
    try:
        while not hub.closing:
            wake.clear()  # before the read: a change after it sets it again
            segments = await service.segments(ns, thread_id)
            for e in await service.log.events(segments, cursor):
                cursor = (e.step, e.seq)
                for k, (method, data) in enumerate(await _converted(service, ns, thread_id, e)):
                    seq = _seq(e, k)
                    if (since is not None and seq <= since) or method.split(".")[0] not in channels:
                        continue
                    wire = "input.requested" if method == "input" else method
                    event = {
                        "type": "event",
                        "seq": seq,
                        "event_id": str(seq),
                        "method": wire,
                        "params": {"namespace": [], "timestamp": int(e.created_at * 1000), "data": data},
                    }
                    yield ServerSentEvent(id=str(seq), data=dump(event))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), WAKE_EVERY)
    finally:
        hub.wakes.discard(wake)


async def events(request: Request) -> Response:
    service, ns, config = scope_of(request)
    b = await models.body(request, EventsBody, config.max_body)
    if b.namespaces and any(b.namespaces):
        raise ApiError(422, "ValidationError", "body.namespaces: subgraph namespaces are not streamed here")
    thread_id = request.path_params["thread_id"]
    await service.find(ns, thread_id)  # 404 before the stream opens (the sdk opens it again once a run started)
    return StreamResponse(
        _events(service, ns, thread_id, b),
        headers=dict(HEADERS),
        ping=config.keepalive,
        shutdown_grace_period=SHUTDOWN_GRACE,
        send_timeout=config.stall_timeout,
    )


routes = [
    Route("/threads/{thread_id}/commands", command, methods=["POST"]),
    Route("/threads/{thread_id}/stream/events", events, methods=["POST"]),
]
