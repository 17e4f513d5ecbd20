"""SSE streams from the durable event log.

Each event is sent as ``id: {thread_id}:{step}:{seq}``, ``event:`` its kind, ``data:`` its JSON payload. A stream
is an async generator that owns nothing but a cursor ``(step, seq)`` over the thread's lineage (a fork's stream
holds its source's events up to the fork point, with the source's ids): it reads the log after the cursor, sends,
and when it has caught up waits for the :class:`~graphckpt.server.hub.Hub` to say the log grew. So reconnecting
with ``Last-Event-ID`` (or ``?after=``; the header wins, as a browser's ``EventSource`` resends it with the URL it
first opened) is just starting at another cursor, after a disconnect, a server restart, or a run by another process.

- A malformed id is 400 before the stream starts. An id this stream cannot continue from (another thread, a
  position past a fork point, an event that is not stored: pruned, or never written) is never a silent full replay:
  the stream opens with ``event: stream.reset`` (no id; ``data`` says why) and then replays from the start.
- Filters are query parameters (``kinds=task.finished,checkpoint``; ``stream_mode=values`` sends each checkpoint as
  an ``event: values`` with the state, for LangGraph clients), so a reconnect to the same URL applies them again.
  Ids stay those of the durable events; filtered-out events only move the cursor.
- The end: a run's stream ends after that run's terminal event (``run.done``, ``run.failed``,
  ``run.interrupted``); a thread's stream ends when it has caught up with a thread whose last event is terminal and
  that has no run going here. Either way the last thing sent is ``event: end`` (no id), which the langgraph-sdk
  client understands. Server shutdown ends every stream cleanly.
- Keep-alive comments every 15 s; ``Cache-Control: no-store``, ``X-Accel-Buffering: no``; never compressed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pydantic import BaseModel
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request

from graphckpt.savers.base import TERMINAL_EVENTS, StoredEvent
from graphckpt.server import models, queries
from graphckpt.server.auth import api_id, store_id
from graphckpt.server.errors import ApiError
from graphckpt.server.http import scope_of
from graphckpt.server.service import Service

__all__ = ["StreamQuery", "open_stream", "parse_event_id", "sse_response"]

START = (-1, -1)
"""The cursor before a thread's first event."""

HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no", "Content-Encoding": "identity"}


class StreamQuery(BaseModel):
    after: str | None = None
    kinds: list[str] | None = None
    stream_mode: list[str] | None = None


def parse_event_id(text: str) -> tuple[str, int, int]:
    """``thread_id:step:seq`` (the thread id may itself hold colons); 400 when it is not one."""
    thread_id, sep1, rest = text.rpartition(":")
    thread_id, sep2, step = thread_id.rpartition(":")
    try:
        parsed = (thread_id, int(step), int(rest))
    except ValueError:
        parsed = None
    if not (sep1 and sep2 and thread_id) or parsed is None or parsed[1] < 0 or parsed[2] < 0:
        raise ApiError(400, "BadRequest", f"event id {text[:200]!r} is not THREAD_ID:STEP:SEQ")
    return parsed


async def open_stream(
    service: Service, ns: str, thread_id: str, last_id: str | None, *, default: tuple[int, int] = START
) -> tuple[list[tuple[str, int, int]], tuple[int, int], str | None, dict[str, Any] | None]:
    """Where a stream of ``thread_id`` starts: its lineage segments, the cursor, the kind of the event at the cursor,
    and the reason for a ``stream.reset`` (or ``None``). Without ``last_id`` it starts at ``default``."""
    segments = await service.segments(ns, thread_id)
    if last_id is None:
        return segments, default, None, None
    tid, step, seq = parse_event_id(last_id)
    sid = store_id(ns, tid)
    inside = any(t == sid and first <= step < upper for t, first, upper in segments)
    kind = await service.saver.event_kind(sid, step, seq) if inside else None
    if kind is None:
        why = "not in this thread's lineage" if not inside else "not stored (pruned, or never written)"
        return segments, START, None, {"last_event_id": last_id, "reason": f"event {last_id!r} is {why}"}
    return segments, (step, seq), kind, None


async def event_source(
    service: Service,
    ns: str,
    thread_id: str,
    segments: Sequence[tuple[str, int, int]],
    cursor: tuple[int, int],
    *,
    last_kind: str | None = None,
    kinds: set[str] | None = None,
    values: bool = False,
    run_stream: bool = False,
    preamble: Sequence[ServerSentEvent] = (),
    run_id: str | None = None,
) -> AsyncIterator[ServerSentEvent | bytes]:
    """The stream itself: owns only ``cursor`` (and the kind of the event there). Each read's events go out as one
    write (their encodings are shared by the thread's subscribers). A run's stream (``run_id``) also ends when the
    run was cancelled (a cancel writes no event: it is seen at the next wake-up, within 5 s)."""
    for item in preamble:
        yield item
    sid = store_id(ns, thread_id)
    hub = service.hub
    while not hub.closing:
        seen = hub.version
        batch = await service.events(segments, cursor)
        chunk = bytearray()
        for event in batch:
            cursor, last_kind = (event.step, event.seq), event.kind
            encoded = await _render(service, ns, thread_id, event, kinds, values)
            if encoded is not None:
                chunk += encoded
            if run_stream and event.kind in TERMINAL_EVENTS:
                yield bytes(chunk) + END
                return
        if chunk:
            yield bytes(chunk)
        if batch:
            continue
        if not run_stream and last_kind in TERMINAL_EVENTS and not service.runs.active(sid):
            yield END
            return
        if run_id is not None and (run := await service.runs.get(run_id)) is not None and run.status == "cancelled":
            yield END
            return
        await service.wait_events(seen, within=5.0)


END = ServerSentEvent(event="end", data="{}").encode()
"""The last thing a stream sends (no id): its run or thread has finished."""


async def _render(
    service: Service, ns: str, thread_id: str, e: StoredEvent, kinds: set[str] | None, values: bool
) -> bytes | None:
    """The SSE encoding of ``e`` for this stream's filters, or ``None`` when they leave it out."""
    if (values and e.kind != "checkpoint") or (not values and kinds is not None and e.kind not in kinds):
        return None
    key = (ns, e.thread_id, e.step, e.seq, "values" if values else "")
    encoded = service.rendered.get(key)
    if encoded is not None:
        return encoded
    eid = f"{api_id(ns, e.thread_id)}:{e.step}:{e.seq}"
    if values:
        snap = await service.state(ns, thread_id, str(e.payload["checkpoint_id"]))
        encoded = ServerSentEvent(id=eid, event="values", data=_dump(queries.state_view(ns, snap)["values"])).encode()
    else:
        payload = dict(e.payload)
        if payload.get("parent_thread_id"):
            payload["parent_thread_id"] = api_id(ns, payload["parent_thread_id"])
        encoded = ServerSentEvent(id=eid, event=e.kind, data=_dump(payload)).encode()
    service.rendered[key] = encoded
    while len(service.rendered) > 1024:  # an event never changes: subscribers of one thread encode it once
        del service.rendered[next(iter(service.rendered))]
    return encoded


def _dump(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=repr)


async def sse_response(
    request: Request,
    thread_id: str,
    *,
    default: tuple[int, int] = START,
    run_stream: bool = False,
    preamble: Sequence[ServerSentEvent] = (),
    headers: dict[str, str] | None = None,
    modes: Sequence[str] | None = None,
    run_id: str | None = None,
) -> EventSourceResponse:
    """Open the stream of ``thread_id`` for ``request`` (its ``Last-Event-ID`` or ``?after=``, and its filters)."""
    service, ns, config = scope_of(request)
    q = models.query(request, StreamQuery, lists=("kinds", "stream_mode"))
    last_id = request.headers.get("last-event-id") or q.after or None
    segments, cursor, kind, reset = await open_stream(service, ns, thread_id, last_id, default=default)
    first = list(preamble)
    if reset is not None:
        first.append(ServerSentEvent(event="stream.reset", data=_dump(reset)))
    wanted = set(q.stream_mode or modes or ())
    source = event_source(
        service, ns, thread_id, segments, cursor, last_kind=kind, kinds=set(q.kinds) if q.kinds else None,
        values="values" in wanted and not q.kinds, run_stream=run_stream, preamble=first, run_id=run_id,
    )  # fmt: skip
    return EventSourceResponse(source, headers={**HEADERS, **(headers or {})}, ping=config.keepalive)


async def thread_stream(request: Request) -> EventSourceResponse:
    return await sse_response(request, request.path_params["thread_id"])
