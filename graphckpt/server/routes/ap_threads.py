"""The Agent Protocol's streaming companion routes of a thread: ``POST /threads/{thread_id}/stream`` (an event
subscription over SSE, see :mod:`graphckpt.server.events.ap_stream`) and ``POST /threads/{thread_id}/commands`` (a
command, answered with the protocol's success or error envelope).

The protocol's WebSocket (``GET /threads/{thread_id}/stream``) is answered over SSE: that route is graphckpt's
thread stream (:func:`graphckpt.server.routes.streams.thread_stream`), and the subscription with channels is this
``POST``. Commands served: ``run.start`` (a run with ``input``, or the resume of an interrupted thread with it),
``input.respond`` (answer open interrupts, one or several), ``state.get``, ``state.listCheckpoints`` and
``state.fork`` (a run from a past checkpoint: the thread branches there). Any other method (``input.inject``, the
WebSocket's ``subscription.*``, ``agent.getTree``) is an ``unsupported`` error envelope; a thread that does not exist
is 404, except for ``run.start``, which creates it.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from graphckpt.errors import GraphckptError, ThreadNotFoundError
from graphckpt.server import models, queries
from graphckpt.server.errors import ApiError, status_of
from graphckpt.server.events.ap_stream import CHANNELS, ap_events
from graphckpt.server.events.streams import HEADERS, SHUTDOWN_GRACE, StreamResponse
from graphckpt.server.http import json_response, scope_of
from graphckpt.server.records import PendingThread
from graphckpt.server.routes import runs

__all__ = ["COMMANDS", "EventStreamBody", "StreamingCommandBody", "answer_command", "routes", "send_command"]


class EventStreamBody(BaseModel):
    """The protocol's ``EventStreamRequest``."""

    model_config = ConfigDict(extra="allow")
    channels: list[str] = Field(min_length=1, max_length=64)
    namespaces: list[list[str]] | None = Field(default=None, max_length=64)
    """Namespace prefixes; graphckpt's thread events are all of the root namespace ``[]``."""
    depth: int | None = Field(default=None, ge=0)
    since: int = Field(default=0, ge=0, le=models.MAX_INT)
    """Send the events numbered after this ``seq`` (reconnect with the last one seen)."""


class StreamingCommandBody(BaseModel):
    """The protocol's ``StreamingCommand``."""

    model_config = ConfigDict(extra="allow")
    id: int = Field(ge=0, le=models.MAX_INT)
    method: str = Field(min_length=1, max_length=200)
    params: dict[str, Any] = Field(default_factory=dict)


async def open_stream(request: Request) -> Response:
    service, ns, config = scope_of(request)
    b = await models.body(request, EventStreamBody, config.max_body)
    for i, channel in enumerate(b.channels):
        if channel not in CHANNELS and not (channel.startswith("custom:") and len(channel) > 7):
            raise ApiError(422, "ValidationError", f"body.channels.{i}: no channel {channel[:80]!r}")
    thread_id = request.path_params["thread_id"]
    segments = await service.segments(ns, thread_id)
    root = b.namespaces is None or [] in b.namespaces
    channels = set(b.channels) if root else set()
    source = ap_events(service.feed, ns, thread_id, segments, since=b.since, channels=channels)
    return StreamResponse(
        source,
        headers=HEADERS,
        ping=config.keepalive,
        shutdown_grace_period=SHUTDOWN_GRACE,
        send_timeout=config.stall_timeout,
    )


class _Refused(Exception):
    """A command the protocol answers with an error envelope: ``error`` (its code) and the message."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


async def send_command(request: Request) -> Response:
    _, _, config = scope_of(request)
    b = await models.body(request, StreamingCommandBody, config.max_body)
    return await answer_command(request, b)


async def answer_command(request: Request, b: StreamingCommandBody) -> Response:
    """Carry out the protocol's command ``b`` on the request's thread: ``{"type": "success", "id", "result"}``, or
    ``{"type": "error", "id", "error", "message"}`` for a command refused as asked."""
    handler = COMMANDS.get(b.method)
    try:
        if handler is None:
            raise _Refused("unsupported", f"method {b.method[:80]!r} is not supported over HTTP by graphckpt")
        result = await handler(request, b.params)
    except _Refused as exc:
        return json_response({"type": "error", "id": b.id, "error": exc.error, "message": str(exc)})
    except ThreadNotFoundError:
        raise
    except ApiError as exc:
        if exc.status >= 500 or exc.status in (401, 404, 413, 429):
            raise
        return json_response({"type": "error", "id": b.id, "error": _code(exc.status), "message": str(exc)})
    except GraphckptError as exc:
        if status_of(exc) >= 500:
            raise
        return json_response({"type": "error", "id": b.id, "error": _code(status_of(exc)), "message": str(exc)})
    return json_response({"type": "success", "id": b.id, "result": result})


def _code(status: int) -> str:
    return {409: "conflict", 422: "invalid_argument"}.get(status, "failed")


def _text(params: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    found = params.get(name)
    if found is None and not required:
        return None
    if not isinstance(found, str) or not found:
        raise _Refused("invalid_argument", f"params.{name}: a non-empty string is required")
    return found


async def _start(request: Request, body: models.RunBody) -> dict[str, Any]:
    response = await runs.start_run(request, body)
    return {"runId": json.loads(bytes(response.body))["run_id"]}


async def run_start(request: Request, params: dict[str, Any]) -> dict[str, Any]:
    """A run of ``assistantId`` with ``input``; on an interrupted thread, its resume with ``input`` as the
    answer."""
    service, ns, _ = scope_of(request)
    fields = {"assistant_id": _text(params, "assistantId"), "metadata": params.get("metadata")}
    if params.get("config") is not None:
        fields["config"] = params["config"]
    try:
        found = await service.find(ns, request.path_params["thread_id"])
    except ThreadNotFoundError:
        found = None
    if found is not None and not isinstance(found, PendingThread) and found.status == "interrupted":
        fields["command"] = {"resume": params.get("input")}
    else:
        if params.get("input") is not None and not isinstance(params.get("input"), dict):
            raise _Refused("invalid_argument", "params.input: a graphckpt agent takes an object (its state's fields)")
        fields["input"] = params.get("input")
    return await _start(request, models.validated(models.RunBody, fields, "params"))


async def input_respond(request: Request, params: dict[str, Any]) -> dict[str, Any]:
    """Answer open interrupts: ``{interruptId, response}`` or ``{responses: [...]}`` (resumed in one run)."""
    service, ns, _ = scope_of(request)
    record = await service.record(ns, request.path_params["thread_id"])
    if record.status != "interrupted":
        raise _Refused("invalid_state", f"thread {request.path_params['thread_id']!r} has no open interrupt")
    entries = params.get("responses") if "responses" in params else [params]
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise _Refused("invalid_argument", "params.responses: a non-empty list of {interruptId, response}")
    answers = {}
    for i, entry in enumerate(entries):
        interrupt_id = entry.get("interruptId")
        if not isinstance(interrupt_id, str) or not interrupt_id:
            where = f"params.responses.{i}" if "responses" in params else "params"
            raise _Refused("invalid_argument", f"{where}.interruptId: a non-empty string is required")
        answers[interrupt_id] = entry.get("response")
    open_ids = {i.id for i in (await service.state(ns, request.path_params["thread_id"])).interrupts}
    unknown = sorted(set(answers) - open_ids)
    if unknown:
        raise _Refused("invalid_argument", f"no open interrupt {unknown[0]!r} on this thread")
    resume: Any = next(iter(answers.values())) if len(open_ids) == 1 else answers
    body = {"command": {"resume": resume}, "if_not_exists": "reject", "metadata": params.get("metadata")}
    return await _start(request, models.validated(models.RunBody, body, "params"))


async def state_get(request: Request, params: dict[str, Any]) -> dict[str, Any]:
    service, ns, _ = scope_of(request)
    view = queries.state_view(ns, await service.state(ns, request.path_params["thread_id"]))
    values = view["values"] or {}
    keys = params.get("keys")
    if keys is not None:
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise _Refused("invalid_argument", "params.keys: a list of state keys")
        values = {k: v for k, v in values.items() if k in keys}
    return {"values": values, "checkpoint": {"id": view["checkpoint_id"]}}


async def list_checkpoints(request: Request, params: dict[str, Any]) -> dict[str, Any]:
    service, ns, _ = scope_of(request)
    limit = params.get("limit", 10)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        raise _Refused("invalid_argument", "params.limit: an integer from 1 to 1000")
    before = _text(params, "before", required=False)
    snaps = await service.history(ns, request.path_params["thread_id"], limit=limit, before=before, filter=None)
    return {
        "checkpoints": [
            {
                "id": s.checkpoint_id,
                "timestamp": s.created_at.isoformat(),
                "step": max(s.step, 0),
                "metadata": queries.jsonable(dict(s.metadata)),
            }
            for s in snaps
        ]
    }


async def state_fork(request: Request, params: dict[str, Any]) -> dict[str, Any]:
    """A run from the past checkpoint ``checkpointId`` (with ``input``): the thread branches there, its state is
    the new branch and the old one stays in its history."""
    service, ns, _ = scope_of(request)
    record = await service.record(ns, request.path_params["thread_id"])
    fields: dict[str, Any] = {"checkpoint_id": _text(params, "checkpointId"), "if_not_exists": "reject"}
    if params.get("input") is not None:
        fields["input"] = params["input"]
    if params.get("config") is not None:
        fields["config"] = params["config"]
    started = await _start(request, models.validated(models.RunBody, fields, "params"))
    return {**started, "threadId": request.path_params["thread_id"], "graphId": service.graphs.graph_of(record)}


COMMANDS = {
    "run.start": run_start,
    "input.respond": input_respond,
    "state.get": state_get,
    "state.listCheckpoints": list_checkpoints,
    "state.fork": state_fork,
}
"""The commands served, by method."""

routes = [
    Route("/threads/{thread_id}/stream", open_stream, methods=["POST"]),
    # POST /threads/{thread_id}/commands: thread_stream's route, which hands the protocol's commands to send_command
]
