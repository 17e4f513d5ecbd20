"""The Agent Protocol's thread event stream (``POST /threads/{thread_id}/stream``), from the durable event log.

Each durable event of the thread's lineage becomes zero or more protocol events, always the same ones in the same
order (so their numbers do not depend on who asks or which channels it wants):

====================  ====================================================================================
durable event         protocol events (``method``: ``params.data``)
====================  ====================================================================================
``run.started``       ``lifecycle``: ``{"event": "running"}``
``task.finished``     ``updates``: ``{"node", "values"}`` (the task's update); ``tasks``: ``{"id", "name",
                      "result"}``
``checkpoint``        ``values``: the state; ``checkpoints``: ``{"id", "parentId", "step", "source"}``
``run.done``          ``lifecycle``: ``{"event": "completed", "checkpoint"}``
``run.failed``        ``lifecycle``: ``{"event": "failed", "error"}``
``run.interrupted``   ``lifecycle``: ``{"event": "interrupted"}``; then one ``input.requested`` (channel
                      ``input``) per open interrupt: ``{"interruptId", "payload"}``
====================  ====================================================================================

Their ``seq`` counts them from 1 along the lineage and is their SSE ``id``; ``since`` (the request's) replays those
after it, so a client that reconnects with the last ``seq`` it saw misses nothing, across server restarts. The
stream is a subscription: it stays open across runs until the client closes it (or the server stops). Only the
durable channels are served (``messages``, ``tools`` and ``custom`` are ephemeral in graphckpt: their events reach
the run streams, ``POST /runs/stream``, not this one); a subscription to them is accepted and receives nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sse_starlette import ServerSentEvent

from graphckpt.errors import CheckpointNotFoundError
from graphckpt.savers.base import StoredEvent
from graphckpt.server import queries
from graphckpt.server.events.log import Feed
from graphckpt.server.events.render import dump
from graphckpt.server.events.streams import START

__all__ = ["CHANNELS", "METHODS", "ap_events"]

CHANNELS = ("values", "updates", "messages", "tools", "lifecycle", "input", "checkpoints", "tasks", "custom")
"""The protocol's channels (``custom:NAME`` too)."""

METHODS: dict[str, tuple[str, ...]] = {
    "run.started": ("lifecycle",),
    "task.finished": ("updates", "tasks"),
    "checkpoint": ("values", "checkpoints"),
    "run.done": ("lifecycle",),
    "run.failed": ("lifecycle",),
    "run.interrupted": ("lifecycle", "input.requested"),
}
"""The protocol events of each durable kind (``input.requested``: one per open interrupt)."""

_CHANNEL_OF = {"input.requested": "input"}


async def ap_events(
    feed: Feed, ns: str, thread_id: str, segments: Sequence[tuple[str, int, int]], *, since: int, channels: set[str]
) -> AsyncIterator[bytes]:
    """The stream: reads the lineage's events from its start (only the positions of those up to ``since``), sends
    the protocol events of ``channels`` after ``since``, then waits for the hub to say the log grew."""
    hub = feed.hub
    wake = asyncio.Event()
    hub.wakes.add(wake)
    cursor, seq = START, 0
    try:
        while not hub.closing:
            wake.clear()  # before the read: a change after it sets it again
            batch = await feed.log.events(segments, cursor)
            chunk = bytearray()
            for event in batch:
                cursor = (event.step, event.seq)
                for method in METHODS.get(event.kind, ()):
                    datas = await _data(feed, ns, thread_id, event, method, seq + 1 > since)
                    for data in datas:
                        seq += 1
                        channel = _CHANNEL_OF.get(method, method)
                        if seq > since and channel in channels:
                            chunk += _encode(seq, method, event, data)
            if chunk:
                yield bytes(chunk)
            if batch:
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5.0):
                    await wake.wait()
    finally:
        hub.wakes.discard(wake)


def _encode(seq: int, method: str, event: StoredEvent, data: Any) -> bytes:
    params = {"namespace": [], "timestamp": int(event.created_at * 1000), "data": data}
    body = {"type": "event", "eventId": str(seq), "seq": seq, "method": method, "params": params}
    return ServerSentEvent(id=str(seq), event=method, data=dump(body)).encode()


async def _data(feed: Feed, ns: str, thread_id: str, e: StoredEvent, method: str, wanted: bool) -> list[Any]:
    """The ``params.data`` of each protocol event ``method`` makes of ``e`` (their number only, as ``None`` s,
    when they are not ``wanted``: before ``since``; ``input.requested`` is always read, its count is the
    interrupts')."""
    if not wanted and method != "input.requested":
        return [None]
    payload = e.payload
    if e.kind == "task.finished":
        node, update = payload.get("node"), queries.jsonable(payload.get("update"))
        if method == "updates":
            return [{"node": node, "values": update if isinstance(update, dict) else {}}]
        return [{"id": payload.get("task_id"), "name": node, "result": update}]
    if e.kind == "checkpoint":
        if method == "checkpoints":
            found = {"id": payload.get("checkpoint_id"), "step": e.step, "source": payload.get("source")}
            if payload.get("parent_checkpoint_id"):
                found["parentId"] = payload["parent_checkpoint_id"]
            return [found]
        snap = await feed.state(ns, thread_id, str(payload["checkpoint_id"]), None)
        return [queries.state_view(ns, snap)["values"]]
    if e.kind == "run.started":
        return [{"event": "running"}]
    if e.kind == "run.done":
        return [{"event": "completed"}]
    if e.kind == "run.failed":
        return [{"event": "failed", "error": str(payload.get("error") or "the run failed")}]
    if method == "lifecycle":
        return [{"event": "interrupted"}]
    try:  # ended by a commit (interrupt_before/after): that step; by ctx.interrupt: the head before the step
        snap = await feed.state(ns, thread_id, None, e.step)
    except CheckpointNotFoundError:
        snap = await feed.state(ns, thread_id, None, e.step - 1)
    return [{"interruptId": i.id, "payload": queries.jsonable(i.payload)} for i in snap.interrupts]
