"""Run routes: create (background, streamed, or waited for), list, get, cancel, join, join stream; the thread
stream; the answer endpoint of the inbox. Runs go through the service's
:class:`~graphckpt.server.execution.base.RunExecutor`; streams come from the durable event log
(:mod:`graphckpt.server.routes.streams`). A request that starts a run reads its thread once: the record it found
goes to the executor, and its lineage to the stream."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote, urlencode

from pydantic import BaseModel, Field
from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from graphckpt.errors import GraphckptError, ThreadNotFoundError
from graphckpt.records import NO_ANSWER
from graphckpt.savers.base import ThreadRecord
from graphckpt.server import models, queries
from graphckpt.server.assistant_records import for_run
from graphckpt.server.auth import store_id
from graphckpt.server.branching import apply_command, branch, make_way, roll_back
from graphckpt.server.errors import ApiError
from graphckpt.server.events.streams import parse_modes
from graphckpt.server.http import json_response, scope_of
from graphckpt.server.records import PendingThread, RunInfo, RunRequest, user_metadata
from graphckpt.server.routes.streams import sse_response, thread_stream
from graphckpt.server.webhooks import checked_url, deliver

if TYPE_CHECKING:
    from graphckpt.server.service import Service

__all__ = ["Starter", "routes", "start_run", "stream_new_run", "submit_run", "wait_new_run"]

Starter = Callable[[Request, models.RunBody], Awaitable[Response]]
"""How a run starts and what it answers (background, streamed, waited for)."""


class RunsQuery(BaseModel):
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


async def _submit(
    request: Request, b: models.RunBody, *, resume: bool = False, answer: object = NO_ANSWER
) -> tuple[RunInfo, list[tuple[str, int, int]]]:
    """Submit the run ``b`` asks for; returns it with the thread's lineage (its stream's segments)."""
    service, ns, config = scope_of(request)
    thread_id = request.path_params["thread_id"]
    unfinished = await service.unfinished_runs(ns)
    if unfinished is not None and unfinished >= config.queue_limit:
        raise ApiError(
            429,
            "TooManyRuns",
            f"this namespace has {unfinished} runs queued or running: at most {config.queue_limit} (--queue-limit)",
        )
    refused = b.unsupported()
    if refused is not None:
        raise ApiError(422, "ValidationError", refused)
    if b.webhook is not None:
        checked_url(b.webhook, config.webhook_hosts)
    parse_modes([b.stream_mode] if isinstance(b.stream_mode, str) else b.stream_mode, "body.stream_mode")
    assistant_graph = None
    if b.assistant_id is not None:  # the assistant's graph, config and metadata (the run's own win)
        assistant_graph, b = await for_run(service, ns, b)
    try:
        found = await service.find(ns, thread_id)
    except ThreadNotFoundError:
        if b.if_not_exists == "reject":
            raise
        found = await service.create_missing(ns, thread_id, assistant_graph)
    if b.multitask_strategy in ("interrupt", "rollback") and await make_way(
        service, ns, thread_id, b.multitask_strategy
    ):
        found = await service.find_or_create(ns, thread_id, assistant_graph)
        new_input = b.command is None and b.input is not None and b.branch_from() is None
        if isinstance(found, ThreadRecord) and found.status != "done" and new_input:
            b = b.model_copy(update={"checkpoint_id": found.head_checkpoint_id})  # new input on the stopped head
    source = b.branch_from()
    if source is not None:  # time travel: the thread continues from that checkpoint, as a new head
        if isinstance(found, PendingThread):
            raise ApiError(404, "NotFound", f"thread {thread_id!r} has no checkpoint {source!r}")
        frontier = (await service.state(ns, thread_id, source)).tasks
        with_input = b.input is not None and b.command is None
        snap = await branch(service, ns, thread_id, source, b.input if with_input and frontier else None)
        if snap.tasks or b.command is not None or not with_input:
            resume = True
            b = b.model_copy(update={"input": None})
        found = await service.record(ns, thread_id)
    segments = await service.segments_of(ns, found)
    if isinstance(found, PendingThread):
        graph, metadata, start = found.graph_id, found.metadata, (-1, -1)
    else:
        graph, metadata = service.graphs.graph_of(found), user_metadata(found)
        start = await service.log.cursor_now(segments, found.head_step)
    if assistant_graph is not None:
        graph = assistant_graph
    if b.command is not None:
        resume, answer = True, NO_ANSWER if b.command.resume is None else b.command.resume
        if b.command.update is not None or b.command.goto is not None:
            if b.command.resume is not None:
                raise ApiError(422, "ValidationError", "body.command: give resume, or update/goto, not both")
            if isinstance(found, PendingThread):
                raise ApiError(409, "ThreadStateError", f"thread {thread_id!r} has no state to update yet")
            await apply_command(service, ns, thread_id, b.command.update, b.command.goto)
    elif b.input is None and isinstance(found, ThreadRecord) and found.status != "done":
        resume = True  # LangGraph's run without input: the thread continues from its head
    run = RunRequest(
        store_id(ns, thread_id),
        graph,
        input=b.input,
        resume=resume,
        answer=answer,
        metadata=metadata,
        recursion_limit=b.limit(),
        stream_mode=tuple([b.stream_mode] if isinstance(b.stream_mode, str) else b.stream_mode or ()),
        options=b.run_options(service.graphs.app(graph).graph.nodes),
        ttl=b.ttl.model_dump() if b.ttl is not None else None,
    )
    run_metadata = {**(b.config.metadata if b.config is not None else {}), **(b.metadata or {})}
    info = await service.runs.submit(
        run, thread=found, multitask=b.multitask_strategy, start=start, metadata=run_metadata
    )
    if b.webhook is not None:
        task = asyncio.ensure_future(_notify(service, ns, thread_id, info.run_id, b.webhook))
        service.tasks.add(task)
        task.add_done_callback(service.tasks.discard)
    return info, segments


async def _notify(service: Service, ns: str, thread_id: str, run_id: str, url: str) -> None:
    """Once run ``run_id`` ends, POST its record and the thread's values to ``url`` (see :mod:`..webhooks`)."""
    run = await service.runs.join(run_id)
    payload = queries.run_view(ns, run)
    try:
        payload["values"] = queries.state_view(ns, await service.state(ns, thread_id))["values"]
    except GraphckptError:  # the thread is gone (a stateless run's, a rollback of its first run)
        payload["values"] = None
    await deliver(url, payload)


async def submit_run(request: Request, b: models.RunBody) -> RunInfo:
    """Submit the run ``b`` asks for on the request's thread (what the v3 thread stream's ``run.start`` does)."""
    return (await _submit(request, b))[0]


async def _run(request: Request) -> RunInfo:
    service, ns, _ = scope_of(request)
    run = await service.runs.get(request.path_params["run_id"])
    if run is None or run.request.thread_id != store_id(ns, request.path_params["thread_id"]):
        raise ApiError(404, "NotFound", f"no run {request.path_params['run_id']!r} in this thread")
    return run


async def create_run(request: Request) -> Response:
    _, _, config = scope_of(request)
    return await start_run(request, await models.body(request, models.RunBody, config.max_body))


async def start_run(request: Request, b: models.RunBody) -> Response:
    """A background run of ``b`` on the request's thread."""
    _, ns, _ = scope_of(request)
    run, _ = await _submit(request, b)
    return json_response(queries.run_view(ns, run), headers=_locations(request, run))


async def stream_run(request: Request) -> Response:
    _, _, config = scope_of(request)
    return await stream_new_run(request, await models.body(request, models.RunBody, config.max_body))


async def stream_new_run(request: Request, b: models.RunBody) -> Response:
    """A new run's stream. Its ``Location`` (where langgraph-sdk reconnects, with ``Last-Event-ID``) carries the
    body's ``stream_mode`` as query parameters, so a reconnect streams the same modes."""
    service, ns, _ = scope_of(request)
    modes = [b.stream_mode] if isinstance(b.stream_mode, str) else list(b.stream_mode or ())
    wanted = parse_modes(modes, "body.stream_mode")
    sid = store_id(ns, request.path_params["thread_id"])
    service.hub.ephemera.expect(sid, wanted, subgraphs=b.stream_subgraphs)  # from the run's first event
    run, segments = await _submit(request, b)
    metadata = ServerSentEvent(event="metadata", data=f'{{"run_id":"{run.run_id}"}}')
    headers = _locations(request, run)
    query = [("stream_mode", m) for m in modes] + ([("stream_subgraphs", "true")] if b.stream_subgraphs else [])
    if query:
        headers["Location"] += "?" + urlencode(query)
    return await sse_response(
        request,
        request.path_params["thread_id"],
        default=run.start or (-1, -1),
        run_stream=True,
        preamble=[metadata],
        headers=headers,
        modes=modes,
        stream_subgraphs=b.stream_subgraphs,
        run_id=run.run_id,
        segments=segments,
        on_disconnect=_canceller(service, run.run_id) if b.on_disconnect == "cancel" else None,
    )


def _canceller(service: Service, run_id: str) -> Callable[[], Awaitable[None]]:
    """LangGraph's ``on_disconnect="cancel"`` (``cancel_on_disconnect=true`` of a join): the client left its run's
    stream before the run ended, so the run is cancelled (not when the server itself is stopping: its runs go
    back to the queue)."""

    async def cancel() -> None:
        if not service.hub.closing:
            await service.runs.cancel(run_id)

    return cancel


async def wait_run(request: Request) -> Response:
    _, _, config = scope_of(request)
    return await wait_new_run(request, await models.body(request, models.RunBody, config.max_body))


async def wait_new_run(request: Request, b: models.RunBody) -> Response:
    """Start ``b`` on the request's thread and answer with the thread's values once it ends."""
    service, _, _ = scope_of(request)
    run, _ = await _submit(request, b)
    await service.runs.join(run.run_id)
    return await _final(request, run)


async def _final(request: Request, run: RunInfo) -> Response:
    """What a waited-for run returns: the thread's state values (LangGraph's shape), or the run's error."""
    service, ns, _ = scope_of(request)
    if run.status == "error" and await service.saver.get_thread(run.request.thread_id) is None:
        return json_response({"error": "RunError", "message": run.error or "the run failed"}, 422)
    snap = await service.state(ns, request.path_params["thread_id"])
    return json_response(queries.state_view(ns, snap)["values"], headers=_locations(request, run))


def _locations(request: Request, run: RunInfo) -> dict[str, str]:
    """Where the run is (its ids percent-encoded: a header holds ASCII only)."""
    base = f"/threads/{quote(request.path_params['thread_id'], safe='')}/runs/{quote(run.run_id, safe='')}"
    return {"Content-Location": base, "Location": f"{base}/stream"}


async def list_runs(request: Request) -> Response:
    service, ns, _ = scope_of(request)
    q = models.query(request, RunsQuery)
    thread_id = request.path_params["thread_id"]
    await service.find(ns, thread_id)
    runs = (await service.runs.list(store_id(ns, thread_id)))[q.offset : q.offset + q.limit]
    return json_response([queries.run_view(ns, r) for r in runs])


async def get_run(request: Request) -> Response:
    _, ns, _ = scope_of(request)
    return json_response(queries.run_view(ns, await _run(request)))


class JoinQuery(BaseModel):
    """What a join of a run's stream adds to a stream's query (:class:`~.events.streams.StreamQuery`)."""

    cancel_on_disconnect: bool = False
    """Cancel the run when this client leaves before it ended (langgraph-sdk sends ``0`` or ``1``)."""


class CancelQuery(BaseModel):
    wait: bool = False
    """Answered once the run has stopped either way (a cancel always waits for that)."""
    action: Literal["interrupt", "rollback"] = "interrupt"
    immediate: bool = False
    """Stop the run's step now, without waiting for its journaled calls in flight (their results are then lost:
    a resume calls again). By default a cancel waits for them to return and be recorded."""


async def cancel_run(request: Request) -> Response:
    """Cancel a run; ``action=rollback`` also takes the thread back to where it was before the run (see
    :func:`~graphckpt.server.branching.roll_back`)."""
    service, ns, _ = scope_of(request)
    q = models.query(request, CancelQuery)
    run = await service.runs.cancel((await _run(request)).run_id, immediate=q.immediate)
    if q.action == "rollback":
        await roll_back(service, ns, request.path_params["thread_id"], run)
    return json_response(queries.run_view(ns, run))


async def delete_run(request: Request) -> Response:
    """Delete an ended run (204): its record goes, the thread's checkpoints and events stay."""
    service, _, _ = scope_of(request)
    await service.runs.delete((await _run(request)).run_id)
    return Response(status_code=204)


async def join_run(request: Request) -> Response:
    service, _, _ = scope_of(request)
    run = await service.runs.join((await _run(request)).run_id)
    return await _final(request, run)


async def join_stream(request: Request) -> Response:
    """A run's stream again: after ``Last-Event-ID``, else from the run's start, in the query's ``stream_mode`` or
    else the modes the run was started with (LangGraph's default, how its JavaScript client rejoins). A run this
    process does not know (it restarted since, or another server made it) is followed as the thread's stream from
    ``Last-Event-ID``."""
    service, ns, _ = scope_of(request)
    run = await service.runs.get(request.path_params["run_id"])
    thread_id = request.path_params["thread_id"]
    if run is not None and run.start is not None and run.request.thread_id == store_id(ns, thread_id):
        modes = list(run.request.stream_mode) or None
        leave = _canceller(service, run.run_id) if models.query(request, JoinQuery).cancel_on_disconnect else None
        return await sse_response(
            request, thread_id, default=run.start, run_stream=True, run_id=run.run_id, modes=modes, on_disconnect=leave
        )
    found = await service.find(ns, thread_id)
    if not (request.headers.get("last-event-id") or request.query_params.get("after")):
        raise ApiError(
            404,
            "NotFound",
            f"no run {request.path_params['run_id']!r} (give Last-Event-ID to follow the thread from an event)",
        )
    return await sse_response(request, thread_id, segments=await service.segments_of(ns, found))


async def answer(request: Request) -> Response:
    """Answer a thread's open interrupt(s): a run resuming it with ``answer`` (202)."""
    _, ns, config = scope_of(request)
    b = await models.body(request, models.AnswerBody, config.max_body)
    run, _ = await _submit(
        request, models.RunBody(assistant_id=b.assistant_id, if_not_exists="reject"), resume=True, answer=b.answer
    )
    return json_response(queries.run_view(ns, run), 202, headers=_locations(request, run))


routes = [
    Route("/threads/{thread_id}/runs", create_run, methods=["POST"]),
    Route("/threads/{thread_id}/runs", list_runs, methods=["GET"]),
    Route("/threads/{thread_id}/runs/stream", stream_run, methods=["POST"]),
    Route("/threads/{thread_id}/runs/wait", wait_run, methods=["POST"]),
    Route("/threads/{thread_id}/runs/{run_id}", get_run, methods=["GET"]),
    Route("/threads/{thread_id}/runs/{run_id}", delete_run, methods=["DELETE"]),
    Route("/threads/{thread_id}/runs/{run_id}/cancel", cancel_run, methods=["POST"]),
    Route("/threads/{thread_id}/runs/{run_id}/join", join_run, methods=["GET"]),
    Route("/threads/{thread_id}/runs/{run_id}/stream", join_stream, methods=["GET"]),
    Route("/threads/{thread_id}/stream", thread_stream, methods=["GET"]),
    Route("/threads/{thread_id}/answer", answer, methods=["POST"]),
]
