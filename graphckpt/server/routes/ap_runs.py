"""Runs addressed without their thread: ``POST /runs``, ``/runs/stream`` and ``/runs/wait`` (shared by langgraph-sdk
and the Agent Protocol), and the Agent Protocol's background-run operations ``POST /runs/search``,
``GET|DELETE /runs/{run_id}``, ``GET /runs/{run_id}/wait``, ``GET /runs/{run_id}/stream`` and
``POST /runs/{run_id}/cancel``.

One handler serves both shapes of the shared routes. A body with ``assistant_id`` is langgraph-sdk's (which always
sends one): a run on a new temporary thread (:func:`graphckpt.server.routes.stateless.stateless`), answered in
LangGraph's shapes. Any other body is the Agent Protocol's ``RunCreate``/``RunStream`` (:class:`AgentRunBody`):
``agent_id`` is the assistant, ``thread_id`` (optional) the thread to run on (``if_not_exists``, default ``reject``),
``messages`` go into the input's ``messages`` field, and the answers are the protocol's ``Run`` and
``RunWaitResponse``. A run's status is shown in the protocol's vocabulary: a running run is ``pending`` (not ended),
a cancelled one ``interrupted``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from graphckpt.errors import ThreadNotFoundError
from graphckpt.server import models, queries
from graphckpt.server.auth import api_id
from graphckpt.server.branching import roll_back
from graphckpt.server.errors import ApiError
from graphckpt.server.events.streams import END, HEADERS, StreamResponse
from graphckpt.server.http import json_response, scope_of
from graphckpt.server.records import PendingThread, RunInfo
from graphckpt.server.routes import runs, stateless
from graphckpt.server.routes.streams import sse_response

__all__ = ["AgentRunBody", "RunSearchBody", "agent_run_view", "routes"]

AP_STATUS = {"running": "pending", "cancelled": "interrupted"}
"""A run's status in the Agent Protocol's words (its ``RunStatus`` has no ``running`` and no ``cancelled``)."""


class AgentRunBody(BaseModel):
    """The Agent Protocol's ``RunCreate`` (and ``RunStream``: with ``stream_mode``)."""

    model_config = ConfigDict(extra="forbid")
    thread_id: str | None = Field(default=None, min_length=1, max_length=512, pattern=r"^[^/\s]+$")
    """The thread to run on; none: a new thread (deleted after the run unless ``on_completion`` is ``keep``)."""
    agent_id: str | None = None
    """The agent (an assistant id, or a served graph's name); none: the default graph."""
    input: Any = None
    messages: list[dict[str, Any]] | None = Field(default=None, max_length=10_000)
    """Appended to the input as its ``messages`` field (through the state's reducer)."""
    metadata: dict[str, Any] | None = None
    config: models.RunConfig | None = None
    webhook: str | None = None
    on_completion: Literal["delete", "keep"] | None = None
    on_disconnect: Literal["cancel", "continue"] | None = None
    if_not_exists: Literal["create", "reject"] = "reject"
    stream_mode: str | list[str] | None = None

    def run_body(self) -> models.RunBody:
        """The same run as langgraph-sdk's body (so one code path runs both); a field that body refuses is
        refused here too, named as the protocol names it."""
        if self.input is not None and not isinstance(self.input, dict):
            raise ApiError(
                422, "ValidationError", "body.input: a graphckpt agent takes an object (the fields of its state)"
            )
        data = dict(self.input) if isinstance(self.input, dict) else None
        if self.messages is not None:
            if data is not None and "messages" in data:
                raise ApiError(422, "ValidationError", "body.messages: give the messages here or in body.input")
            data = {**(data or {}), "messages": self.messages}
        fields = self.model_dump(exclude_unset=True, exclude={"thread_id", "agent_id", "input", "messages", "config"})
        fields["if_not_exists"] = self.if_not_exists if self.thread_id is not None else "create"
        fields.pop("on_completion", None)  # this module deletes an AP thread itself (see _start)
        found = models.validated(models.RunBody, {**fields, "assistant_id": self.agent_id, "input": data}, "body")
        return found.model_copy(update={"config": self.config})


class RunSearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metadata: dict[str, Any] | None = None
    status: Literal["pending", "error", "success", "timeout", "interrupted"] | None = None
    thread_id: str | None = None
    agent_id: str | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


class RunCancelQuery(BaseModel):
    wait: bool = False
    """Answered once the run has stopped either way (a cancel always waits for that)."""
    action: Literal["interrupt", "rollback"] = "interrupt"


def agent_run_view(ns: str, run: RunInfo) -> dict[str, Any]:
    """A run as the Agent Protocol's ``Run``: LangGraph's view with ``agent_id`` and the protocol's status."""
    found = queries.run_view(ns, run)
    found["status"] = AP_STATUS.get(found["status"], found["status"])
    found["agent_id"] = run.metadata.get("assistant_id", run.request.graph_id)
    return found


def _langgraph(data: Any) -> bool:
    return isinstance(data, dict) and "assistant_id" in data


async def _start(request: Request, b: AgentRunBody, start: runs.Starter) -> Response:
    """``start`` for an Agent Protocol body: on its thread, or on a new one (deleted after the run unless kept)."""
    service, ns, _ = scope_of(request)
    body = b.run_body()
    if b.thread_id is None:
        return await stateless.stateless(request, body.model_copy(update={"on_completion": b.on_completion}), start)
    request.scope["path_params"] = {**request.path_params, "thread_id": b.thread_id}
    response = await start(request, body)
    if b.on_completion == "delete":  # the protocol's default on a given thread is to keep it
        response.background = stateless.cleanup(service, ns, b.thread_id)
    return response


async def create(request: Request) -> Response:
    """A background run: LangGraph's ``runs.create(None, ...)`` or the protocol's ``create_run``."""
    _, ns, config = scope_of(request)
    data = await models.parsed_body(request, config.max_body)
    if _langgraph(data):
        return await stateless.stateless(request, models.validated(models.RunBody, data, "body"), runs.start_run)
    response = await _start(request, models.validated(AgentRunBody, data, "body"), runs.start_run)
    run = await _run_of(request, json.loads(bytes(response.body))["run_id"])
    answer = json_response(agent_run_view(ns, run))
    answer.background = response.background
    return answer


async def stream(request: Request) -> Response:
    """A streamed run (SSE, LangGraph's events): ``runs.stream(None, ...)`` or ``create_and_stream_run``."""
    _, _, config = scope_of(request)
    data = await models.parsed_body(request, config.max_body)
    if _langgraph(data):
        return await stateless.stateless(request, models.validated(models.RunBody, data, "body"), runs.stream_new_run)
    return await _start(request, models.validated(AgentRunBody, data, "body"), runs.stream_new_run)


async def wait(request: Request) -> Response:
    """A run waited for: LangGraph's answer is the final values, the protocol's a ``RunWaitResponse``."""
    service, _, config = scope_of(request)
    data = await models.parsed_body(request, config.max_body)
    if _langgraph(data):
        return await stateless.stateless(request, models.validated(models.RunBody, data, "body"), runs.wait_new_run)
    started = await _start(request, models.validated(AgentRunBody, data, "body"), runs.start_run)
    run = await service.runs.join(json.loads(bytes(started.body))["run_id"])
    answer = json_response(await _outcome(request, run))
    answer.background = started.background
    return answer


async def _outcome(request: Request, run: RunInfo) -> dict[str, Any]:
    """The protocol's ``RunWaitResponse`` of an ended run: the run, its thread's values, and their messages when
    they are the protocol's (``role`` and ``content``)."""
    service, ns, _ = scope_of(request)
    thread_id = api_id(ns, run.request.thread_id) or run.request.thread_id
    try:
        values = queries.state_view(ns, await service.state(ns, thread_id))["values"] or {}
    except ThreadNotFoundError:  # failed before its first checkpoint, or deleted since
        values = {}
    found: dict[str, Any] = {"run": agent_run_view(ns, run), "values": values}
    messages = values.get("messages") if isinstance(values, dict) else None
    if isinstance(messages, list) and all(isinstance(m, dict) and {"role", "content"} <= m.keys() for m in messages):
        found["messages"] = messages
    return found


async def _run_of(request: Request, run_id: str) -> RunInfo:
    """The run ``run_id`` of the caller's namespace (404 for another namespace's: it does not exist for it)."""
    service, ns, _ = scope_of(request)
    run = await service.runs.get(run_id)
    if run is None or api_id(ns, run.request.thread_id) is None:
        raise ApiError(404, "NotFound", f"no run {run_id!r}")
    return run


async def search_runs(request: Request) -> Response:
    """Runs of one thread, or of every thread of the namespace; oldest first, filtered by agent, status, metadata."""
    service, ns, config = scope_of(request)
    b = await models.body(request, RunSearchBody, config.max_body)
    if b.thread_id is not None:
        threads = [(await service.record(ns, b.thread_id)).thread_id]
    else:
        threads = [r.thread_id for r in await service.threads(ns)]
    found = []
    for thread_id in threads:
        for run in await service.runs.list(thread_id):
            view = agent_run_view(ns, run)
            if b.agent_id is not None and view["agent_id"] != b.agent_id:
                continue
            if b.status is not None and view["status"] != b.status:
                continue
            if any(view["metadata"].get(k) != v for k, v in (b.metadata or {}).items()):
                continue
            found.append(view)
    found.sort(key=lambda v: v["created_at"])
    return json_response(found[b.offset : b.offset + b.limit])


async def get_run(request: Request) -> Response:
    _, ns, _ = scope_of(request)
    return json_response(agent_run_view(ns, await _run_of(request, request.path_params["run_id"])))


async def delete_run(request: Request) -> Response:
    """Forget an ended run (its thread and checkpoints stay); a run not ended yet is 409: cancel it first."""
    service, _, _ = scope_of(request)
    await service.runs.delete((await _run_of(request, request.path_params["run_id"])).run_id)
    return Response(status_code=204)


async def wait_run(request: Request) -> Response:
    service, _, _ = scope_of(request)
    run = await service.runs.join((await _run_of(request, request.path_params["run_id"])).run_id)
    return json_response(await _outcome(request, run))


async def join_stream(request: Request) -> Response:
    """The run's stream (LangGraph's events): from the run's start while this server knows it (its events so far
    are replayed), else from now; an ended run whose start is not known here is just ``end``."""
    service, ns, _ = scope_of(request)
    run = await _run_of(request, request.path_params["run_id"])
    thread_id = api_id(ns, run.request.thread_id) or run.request.thread_id
    if run.start is not None:
        return await sse_response(request, thread_id, default=run.start, run_stream=True, run_id=run.run_id)
    if run.finished:
        return StreamResponse(_ended(), headers=HEADERS)
    found = await service.find(ns, thread_id)
    segments = await service.segments_of(ns, found)
    now = (-1, -1) if isinstance(found, PendingThread) else await service.log.cursor_now(segments, found.head_step)
    return await sse_response(request, thread_id, default=now, run_stream=True, run_id=run.run_id, segments=segments)


async def _ended() -> Any:
    yield END


async def cancel_run(request: Request) -> Response:
    """Cancel the run (it stops at its next safe point); ``action=rollback`` also takes its thread back to where
    it was before the run (see :func:`~graphckpt.server.branching.roll_back`)."""
    service, ns, _ = scope_of(request)
    q = models.query(request, RunCancelQuery)
    run = await service.runs.cancel((await _run_of(request, request.path_params["run_id"])).run_id)
    if q.action == "rollback":
        await roll_back(service, ns, api_id(ns, run.request.thread_id) or run.request.thread_id, run)
    return Response(status_code=204)


routes = [
    Route("/runs", create, methods=["POST"]),
    Route("/runs/stream", stream, methods=["POST"]),
    Route("/runs/wait", wait, methods=["POST"]),
    Route("/runs/search", search_runs, methods=["POST"]),
    Route("/runs/{run_id}", get_run, methods=["GET"]),
    Route("/runs/{run_id}", delete_run, methods=["DELETE"]),
    Route("/runs/{run_id}/wait", wait_run, methods=["GET"]),
    Route("/runs/{run_id}/stream", join_stream, methods=["GET"]),
    Route("/runs/{run_id}/cancel", cancel_run, methods=["POST"]),
]
