"""The SSE responses of the API (a run's stream, a thread's stream): a request's ``Last-Event-ID`` or ``?after=``,
its stream modes and filters, turned into the event-log stream of :mod:`graphckpt.server.events.streams` (where the
streams themselves, their ids and modes are described)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from sse_starlette import ServerSentEvent
from starlette.requests import Request

from graphckpt.server import models
from graphckpt.server.events.ephemeral import EPHEMERAL_MODES
from graphckpt.server.events.render import dump
from graphckpt.server.events.streams import (
    HEADERS,
    SHUTDOWN_GRACE,
    START,
    Start,
    StreamQuery,
    StreamResponse,
    event_source,
    parse_modes,
    start_at,
    thread_modes,
)
from graphckpt.server.http import scope_of
from graphckpt.server.service import Service

__all__ = ["open_stream", "sse_response", "start_of", "thread_stream"]

Segments = list[tuple[str, int, int]]


async def start_of(
    service: Service,
    ns: str,
    thread_id: str,
    last_id: str | None,
    *,
    default: tuple[int, int] = START,
    ephemeral: bool = False,
    segments: Segments | None = None,
) -> Start:
    """Where a stream of ``thread_id`` of namespace ``ns`` starts (see :func:`~.events.streams.start_at`); its
    lineage ``segments`` are read unless given."""
    if segments is None:
        segments = await service.segments(ns, thread_id)
    return await start_at(service.feed, ns, thread_id, segments, last_id, default=default, ephemeral=ephemeral)


async def open_stream(
    service: Service,
    ns: str,
    thread_id: str,
    last_id: str | None,
    *,
    default: tuple[int, int] = START,
    segments: Segments | None = None,
) -> tuple[Segments, tuple[int, int], str | None, dict[str, Any] | None]:
    """:func:`start_of` as ``(segments, cursor, kind at the cursor, reset)`` (what the web UI's stream uses)."""
    start = await start_of(service, ns, thread_id, last_id, default=default, segments=segments)
    return start.segments, start.cursor, start.kind, start.reset


async def sse_response(
    request: Request,
    thread_id: str,
    *,
    default: tuple[int, int] = START,
    run_stream: bool = False,
    preamble: Sequence[ServerSentEvent] = (),
    headers: dict[str, str] | None = None,
    modes: Sequence[str] | None = None,
    stream_subgraphs: bool = False,
    run_id: str | None = None,
    segments: Segments | None = None,
    on_disconnect: Callable[[], Awaitable[Any]] | None = None,
) -> StreamResponse:
    """Open the stream of ``thread_id`` for ``request`` (its ``Last-Event-ID`` or ``?after=``, and its filters;
    the query's ``stream_mode`` wins over ``modes``, a run body's); ``segments``: its lineage, when the caller has
    read it already. ``on_disconnect`` is called when the client goes before the stream's end (LangGraph's
    ``on_disconnect="cancel"``: it cancels the run)."""
    service, ns, config = scope_of(request)
    q = models.query(request, StreamQuery, lists=("kinds", "stream_mode"))
    kinds = set(q.kinds) if q.kinds else None
    if q.stream_mode:
        asked, lifecycle = thread_modes(q.stream_mode)
        if lifecycle is not None:
            kinds = (kinds or set()) | lifecycle
        wanted = parse_modes(asked)
    else:
        wanted = parse_modes(modes, "body.stream_mode")
    subgraphs = q.stream_subgraphs if q.stream_subgraphs is not None else stream_subgraphs
    last_id = request.headers.get("last-event-id") or q.after or None
    if last_id == "0":  # langgraph-sdk's "everything": the stream from its start
        last_id, default = None, START
    ephemeral = bool(wanted & EPHEMERAL_MODES) or subgraphs
    start = await start_of(service, ns, thread_id, last_id, default=default, ephemeral=ephemeral, segments=segments)
    first = list(preamble)
    if start.reset is not None:
        first.append(ServerSentEvent(event="stream.reset", data=dump(start.reset)))
    source = event_source(
        service.feed,
        ns,
        thread_id,
        start.segments,
        start.cursor,
        last_kind=start.kind,
        kinds=kinds,
        modes=wanted,
        after_n=start.after_n,
        subgraphs=subgraphs,
        run_stream=run_stream,
        preamble=first,
        run_id=run_id,
    )
    if on_disconnect is not None:
        source = _until_disconnect(service, source, on_disconnect)
    return StreamResponse(
        source,
        headers={**HEADERS, **(headers or {})},
        ping=config.keepalive,
        shutdown_grace_period=SHUTDOWN_GRACE,
        send_timeout=config.stall_timeout,
    )


async def _until_disconnect(
    service: Service, source: AsyncIterator[Any], on_disconnect: Callable[[], Awaitable[Any]]
) -> AsyncIterator[Any]:
    """``source``'s events; when it is closed before its end (the client went), ``on_disconnect`` runs (as a task of
    the service: the request's own task is being cancelled)."""
    ended = False
    try:
        async for event in source:
            yield event
        ended = True
    finally:
        if not ended:
            task = asyncio.ensure_future(on_disconnect())
            service.tasks.add(task)
            task.add_done_callback(service.tasks.discard)


async def thread_stream(request: Request) -> StreamResponse:
    return await sse_response(request, request.path_params["thread_id"])
