"""SSE streams from the durable event log, with the ephemeral events of this server's own runs in between.

Each durable event is sent as ``id: {thread_id}:{step}:{seq}``, ``event:`` its kind, ``data:`` its JSON payload. A
stream is an async generator that owns nothing but a cursor ``(step, seq)`` over the thread's lineage (a fork's
stream holds its source's events up to the fork point, with the source's ids): it reads the log after the cursor,
sends, and when it has caught up waits for the :class:`~graphckpt.server.events.hub.Hub` to say the log grew. So
reconnecting with ``Last-Event-ID`` (or ``?after=``; the header wins, as a browser's ``EventSource`` resends it with
the URL it first opened) is just starting at another cursor, after a disconnect, a server restart, or a run by
another process.

- A malformed id is 400 before the stream starts. An id this stream cannot continue from (another thread, a
  position past a fork point, an event that is not stored: pruned, or never written) is never a silent full replay:
  the stream opens with ``event: stream.reset`` (no id; ``data`` says why, with ``first_available``: the id of the
  first event that follows) and then replays from the start. An id before the first event still stored in its
  thread (a retention prune removed it) says ``"lost": "pruned"``.
- **Stream modes** (``stream_mode``: the body of ``POST /threads/{id}/runs/stream``, a string or a list as
  langgraph-sdk sends it; the query of the GET streams, repeated or comma-separated, so a reconnect to the same URL
  applies them again), each event named by its mode:

  ================  ==========  ==========================================================================
  mode              kind        ``event:`` and ``data``
  ================  ==========  ==========================================================================
  ``events``        durable     the log's own kinds and payloads (the default without ``stream_mode``)
  ``values``        durable     ``values``: the state at each checkpoint
  ``updates``       durable     ``updates``: ``{node: update}`` per finished task (from ``task.finished``)
  ``checkpoints``   durable     ``checkpoints``: each checkpoint as LangGraph's (config, values, next, ...)
  ``tasks``         both        ``tasks``: a task started (``{id, name, input}``, ephemeral), a task's result
                                (``{id, name, result}``, from ``task.finished``)
  ``debug``         both        ``debug``: LangGraph's ``{type, step, timestamp, payload}``: ``task``
                                (ephemeral), ``task_result`` and ``checkpoint`` (durable)
  ``messages``      ephemeral   ``messages``: ``[chunk, metadata]`` per piece of a model's answer
                                (``messages-tuple`` is the same, LangGraph's name for it)
  ``custom``        ephemeral   ``custom``: what a node wrote with ``ctx.write``
  ================  ==========  ==========================================================================

  ``stream_subgraphs`` (body, or query ``stream_subgraphs=true``) adds a subgraph's events in the stream's modes as
  ``event: MODE|node:task_id`` (one ``|node:task_id`` per level, LangGraph's names); they are ephemeral (a
  subgraph's steps are in its child thread's log, not its parent's). An update too big for its ``task.finished``
  event (over 64 KiB: ``update_omitted``) is rendered as ``null``; the thread's state has it.
  ``kinds=task.finished,checkpoint`` filters the ``events`` mode (and turns it on). Filtered-out events only move
  the cursor. Two renderings of one durable event (``updates`` and ``tasks``) carry the same id.
- **Ephemeral events** exist only in the memory of the server whose in-process workers run the thread (a run by a
  ``graphckpt worker`` process or another server has none here), and only from the moment a stream asked for
  their mode (see :mod:`graphckpt.server.events.ephemeral`). Their id is the durable id they follow plus a suffix,
  ``{thread_id}:{step}:{seq}~{epoch}.{n}``: they sort after that durable event (and before the next), never
  collide with a durable id, and name this server's run of the thread (``epoch``) and their number ``n``. A
  reconnect with one continues right after it while the ring still holds the events that followed; otherwise
  (this server restarted, another server served it, they aged out) the stream opens with ``event: stream.reset``
  whose data says the ephemeral events after that durable event were lost, and continues after the durable event
  (no full replay).
- The end: a run's stream ends after that run's terminal event (``run.done``, ``run.failed``,
  ``run.interrupted``); a thread's stream ends when it has caught up with a thread whose last event is terminal and
  that has no run going here. Either way the last thing sent is ``event: end`` (no id), which the langgraph-sdk
  client understands. Server shutdown ends every stream cleanly.
- Keep-alive comments every 15 s; ``Cache-Control: no-store``, ``X-Accel-Buffering: no``; never compressed.
- Memory per client is bounded: a stream holds its cursor and at most one chunk of :data:`CHUNK` bytes it is
  sending (the events it reads are the read shared by the thread's streams). A client that stops reading is
  dropped once a write has waited ``stall_timeout`` seconds (:class:`StreamResponse`); it reconnects with its
  ``Last-Event-ID`` and misses nothing durable.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

from pydantic import BaseModel
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError

from graphckpt.savers.base import TERMINAL_EVENTS
from graphckpt.server.auth import api_id, store_id
from graphckpt.server.errors import ApiError
from graphckpt.server.events.ephemeral import EPHEMERAL_MODES, At, Channel, Entry
from graphckpt.server.events.log import Feed
from graphckpt.server.events.messages import PARTIAL, TUPLE, MessageAssembly
from graphckpt.server.events.render import dump, render_event

__all__ = [
    "END",
    "HEADERS",
    "MODES",
    "SHUTDOWN_GRACE",
    "CHUNK",
    "START",
    "EventId",
    "Start",
    "StreamQuery",
    "StreamResponse",
    "event_source",
    "parse_event_id",
    "parse_modes",
    "thread_modes",
    "start_at",
]

START = (-1, -1)
"""The cursor before a thread's first event."""

CHUNK = 64 << 10
"""A stream sends what it has once this many bytes are ready (so a stalled client pins at most about this much)."""

HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no", "Content-Encoding": "identity"}

SHUTDOWN_GRACE = 1.0
"""At shutdown every stream ends by itself at once (the hub wakes it and it returns, so its response ends with its
last chunk); sse-starlette, which also sees the shutdown, waits this long for that before it cancels a stream (it
would otherwise cancel at once, racing the stream's own end: a client could see the connection cut mid-response).
Below ``graphckpt serve``'s ``--graceful-timeout``."""

ModeName = Literal[
    "events", "values", "updates", "checkpoints", "tasks", "debug", "messages", "messages-tuple", "custom"
]
MODES: tuple[str, ...] = get_args(ModeName)
"""The ``stream_mode`` names a stream accepts (``messages-tuple`` is ``messages``)."""


ThreadModeName = Literal["run_modes", "lifecycle", "state_update"]
"""langgraph-sdk's thread-stream modes (``threads.join_stream``): ``run_modes`` (its default) is ``values`` and
``updates``, the run modes with a durable rendering; ``lifecycle`` the ``run.*`` events; ``state_update``
``values``."""

LIFECYCLE = frozenset({"run.started", "run.done", "run.failed", "run.interrupted"})


class StreamQuery(BaseModel):
    after: str | None = None
    kinds: list[str] | None = None
    stream_mode: list[ModeName | ThreadModeName] | None = None
    stream_subgraphs: bool | None = None


class EventId(NamedTuple):
    """A parsed event id: the durable position, and for an ephemeral id the server epoch and number after it."""

    thread_id: str
    step: int
    seq: int
    epoch: str | None = None
    n: int | None = None


def parse_event_id(text: str) -> EventId:
    """``thread_id:step:seq`` (the thread id may itself hold colons), or an ephemeral ``thread_id:step:seq~epoch.n``;
    400 when it is neither."""
    thread_id, sep1, rest = text.rpartition(":")
    thread_id, sep2, step = thread_id.rpartition(":")
    seq, tilde, suffix = rest.partition("~")
    epoch, dot, n = suffix.partition(".")
    parsed: EventId | None
    try:
        parsed = EventId(thread_id, int(step), int(seq), epoch or None, int(n) if tilde else None)
    except ValueError:
        parsed = None
    broken = tilde and not (epoch.isalnum() and dot and n.isdigit())
    if not (sep1 and sep2 and thread_id) or parsed is None or parsed.step < 0 or parsed.seq < 0 or broken:
        raise ApiError(
            400,
            "BadRequest",
            f"event id {text[:200]!r} is not THREAD_ID:STEP:SEQ (or an ephemeral THREAD_ID:STEP:SEQ~EPOCH.N)",
        )
    if max(parsed.step, parsed.seq, parsed.n or 0) > 2**63 - 1:
        raise ApiError(422, "ValidationError", f"Last-Event-ID: event id {text[:200]!r} has a number past 2**63-1")
    return parsed


def parse_modes(modes: Iterable[str] | None, where: str = "query.stream_mode") -> frozenset[str]:
    """The stream modes asked for; 422 naming an unknown one. ``messages-tuple`` and ``messages`` are both the
    ephemeral ``messages`` events, sent as they are (a marker, ``messages/tuple``) or assembled into LangGraph's
    ``messages/partial`` events (``messages/partial``, see :mod:`~graphckpt.server.events.messages`)."""
    found = set()
    for mode in modes or ():
        if mode not in MODES:
            raise ApiError(422, "ValidationError", f"{where}: unknown stream mode {mode!r} (one of {', '.join(MODES)})")
        if mode in ("messages", "messages-tuple"):
            found |= {"messages", PARTIAL if mode == "messages" else TUPLE}
        else:
            found.add(mode)
    return frozenset(found)


def thread_modes(modes: Iterable[str]) -> tuple[list[str], set[str] | None]:
    """langgraph-sdk's thread-stream modes in ``modes`` as run modes, with the event kinds they add (``None``:
    none; see :data:`ThreadModeName`)."""
    out: list[str] = []
    kinds: set[str] | None = None
    for mode in modes:
        if mode == "run_modes":
            out += ["values", "updates"]
        elif mode == "state_update":
            out.append("values")
        elif mode == "lifecycle":
            kinds = set(LIFECYCLE)
        else:
            out.append(mode)
    return out, kinds


@dataclass
class Start:
    """Where a stream starts (see :func:`start_at`)."""

    segments: list[tuple[str, int, int]]
    cursor: tuple[int, int]
    kind: str | None
    """The kind of the durable event at the cursor."""
    reset: dict[str, Any] | None
    """The data of the ``stream.reset`` to open with, or ``None``."""
    after_n: int | None = None
    """A reconnect with an ephemeral id of this server: the number of the last ephemeral event the client has."""


async def start_at(
    feed: Feed,
    ns: str,
    thread_id: str,
    segments: list[tuple[str, int, int]],
    last_id: str | None,
    *,
    default: tuple[int, int] = START,
    ephemeral: bool = False,
) -> Start:
    """Where a stream of ``thread_id`` (whose lineage is ``segments``) starts for ``last_id`` (without one: at
    ``default``); with ``ephemeral`` modes, whether the ephemeral events after it are still here (if not, a
    ``stream.reset`` says so)."""
    if last_id is None:
        return Start(segments, default, None, None)
    parsed = parse_event_id(last_id)
    sid = store_id(ns, parsed.thread_id)
    inside = any(t == sid and first <= parsed.step < upper for t, first, upper in segments)
    kind = await feed.log.saver.event_kind(sid, parsed.step, parsed.seq) if inside else None
    if kind is None:
        return Start(segments, START, None, await _lost(feed, ns, segments, last_id, parsed, sid, inside))
    start = Start(segments, (parsed.step, parsed.seq), kind, None)
    if not ephemeral:
        return start
    durable = f"{parsed.thread_id}:{parsed.step}:{parsed.seq}"
    ephemera = feed.hub.ephemera
    channel = ephemera.channels.get(store_id(ns, thread_id))
    if parsed.n is None:
        if channel is None or channel.evicted_key < (parsed.step, parsed.seq, -1):
            return start
        start.after_n = channel.evicted  # ephemeral events after it aged out: say so, send what is left
    else:
        ours = parsed.epoch == ephemera.epoch and parsed.n < ephemera.count
        if ours and channel is not None and channel.keeps_after(parsed.n):
            start.after_n = parsed.n
            return start
        if ours and channel is not None:  # what is left after the gap still comes
            start.after_n = max(parsed.n, channel.evicted)
    start.reset = {
        "last_event_id": last_id,
        "continue_after": durable,
        "lost": "ephemeral",
        "reason": f"the ephemeral events after {durable!r} were lost (this server restarted, another "
        "served them, or they aged out); continuing after that durable event",
    }
    return start


async def _lost(
    feed: Feed, ns: str, segments: list[tuple[str, int, int]], last_id: str, at: EventId, sid: str, inside: bool
) -> dict[str, Any]:
    """The ``stream.reset`` data for an id the stream cannot continue from. An id inside the lineage but before the
    first event still stored there was pruned (a retention policy removed the events of old checkpoints): ``lost``
    is ``"pruned"`` and ``first_available`` the id of the first event the stream sends next."""
    first = await feed.log.saver.read_events(segments, after=START, limit=1)
    available = f"{api_id(ns, first[0].thread_id)}:{first[0].step}:{first[0].seq}" if first else None
    if inside:
        own = [seg for seg in segments if seg[0] == sid and seg[1] <= at.step < seg[2]]
        kept = await feed.log.saver.read_events(own, after=START, limit=1)
        if not kept or (at.step, at.seq) < (kept[0].step, kept[0].seq):
            return {
                "last_event_id": last_id,
                "lost": "pruned",
                "first_available": available,
                "reason": f"the events up to {last_id!r} were pruned; replaying from the first event still stored",
            }
    why = "not in this thread's lineage" if not inside else "not stored (never written)"
    return {"last_event_id": last_id, "first_available": available, "reason": f"event {last_id!r} is {why}"}


async def event_source(
    feed: Feed,
    ns: str,
    thread_id: str,
    segments: Sequence[tuple[str, int, int]],
    cursor: tuple[int, int],
    *,
    last_kind: str | None = None,
    kinds: set[str] | None = None,
    values: bool = False,
    modes: frozenset[str] = frozenset(),
    after_n: int | None = None,
    subgraphs: bool = False,
    run_stream: bool = False,
    preamble: Sequence[ServerSentEvent] = (),
    run_id: str | None = None,
) -> AsyncIterator[ServerSentEvent | bytes]:
    """The stream itself: owns only ``cursor`` (and the kind of the event there), and with ephemeral ``modes`` the
    number of the last ephemeral event it passed. Each read's events go out as one write (their encodings are shared
    by the thread's subscribers). A run's stream (``run_id``) also ends when the run was cancelled (a cancel writes
    no event: it is seen at the next wake-up, within 5 s). ``values=True`` is ``modes={"values"}``."""
    for item in preamble:
        yield item
    modes = modes | {"values"} if values else modes
    raw = not modes or "events" in modes or kinds is not None
    sid = store_id(ns, thread_id)
    hub = feed.hub
    wake = asyncio.Event()
    hub.wakes.add(wake)
    live = modes & EPHEMERAL_MODES
    ephemera = hub.ephemera
    channel = ephemera.subscribe(sid, modes, wake, subgraphs=subgraphs) if live or subgraphs else None
    stream = None
    if channel is not None:
        stream = _Ephemeral(channel, ephemera.epoch, ns, modes if subgraphs else live, cursor, after_n, subgraphs)
        if PARTIAL in modes:  # LangGraph's ``messages``: assembled, and as they are only if ``messages-tuple`` too
            stream.assembly, stream.tuples = MessageAssembly(), TUPLE in modes
    stopped = False
    try:
        while not hub.closing:
            wake.clear()  # before the read: a change after it sets it again
            batch = await feed.log.events(segments, cursor)
            if channel is not None and stream is not None:
                if batch:
                    last = batch[-1]
                    ephemera.saw(channel, At(last.step, last.seq, last.thread_id))
                await ephemera.settle(channel)  # what was emitted before the read is in the ring now
            chunk = bytearray()
            for event in batch:
                if stream is not None:
                    chunk += stream.before((event.step, event.seq))
                    if stream.assembly is not None:
                        chunk += stream.assembly.close(event.kind, event.payload)
                cursor, last_kind = (event.step, event.seq), event.kind
                chunk += await render_event(feed, ns, thread_id, event, modes, kinds if raw else set())
                if len(chunk) >= CHUNK and not (run_stream and event.kind in TERMINAL_EVENTS):
                    yield bytes(chunk)
                    chunk.clear()
                if run_stream and event.kind in TERMINAL_EVENTS:
                    yield bytes(chunk) + END
                    return
            if stream is not None:
                chunk += stream.up_to(cursor)
            if chunk:
                yield bytes(chunk)
            if batch:
                continue
            if not run_stream and last_kind in TERMINAL_EVENTS and not feed.active(sid):
                yield END
                return
            if run_id is not None and await feed.cancelled(run_id):
                if stopped:  # read once more after seeing it stopped: what it committed before is streamed
                    yield END
                    return
                stopped = True
                continue
            if not wake.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5.0):
                        await wake.wait()
    finally:
        hub.wakes.discard(wake)
        if channel is not None:
            ephemera.unsubscribe(channel, wake)


class _Ephemeral:
    """A stream's position among a thread's ephemeral events: the number of the last one it passed."""

    def __init__(
        self,
        channel: Channel,
        epoch: str,
        ns: str,
        modes: frozenset[str],
        cursor: tuple[int, int],
        n: int | None,
        subgraphs: bool,
    ) -> None:
        self.channel, self.epoch, self.ns, self.modes, self.subgraphs = channel, epoch, ns, modes, subgraphs
        self.n = n if n is not None else channel.first_after((cursor[0], cursor[1], -1))
        self.assembly: MessageAssembly | None = None
        """LangGraph's ``messages`` mode: the messages being assembled (``None``: not asked for)."""
        self.tuples = True
        """Whether ``messages`` events go out as they are (``messages-tuple``)."""

    def before(self, position: tuple[int, int]) -> bytes:
        """The encodings of the ephemeral events anchored before the durable event at ``position``."""
        return self._take(lambda e: (e.anchor.step, e.anchor.seq) < position)

    def up_to(self, cursor: tuple[int, int]) -> bytes:
        """Those anchored at ``cursor`` or before (the stream has read that far)."""
        return self._take(lambda e: (e.anchor.step, e.anchor.seq) <= cursor)

    def _take(self, fits: Any) -> bytes:
        out = bytearray()
        if self.channel.evicted > self.n:  # the ring moved on while this stream lagged: say it missed some
            self.n = self.channel.evicted
            reason = "ephemeral events were dropped: this stream fell behind"
            out += ServerSentEvent(event="stream.reset", data=dump({"lost": "ephemeral", "reason": reason})).encode()
        for entry in self.channel.after(self.n):
            if not fits(entry):
                break
            self.n = entry.n
            mode, sub, _ = entry.mode.partition("|")
            if not (mode in self.modes and (self.subgraphs or not sub)):
                continue
            if mode == "messages" and self.assembly is not None:
                chunk, metadata = _message_of(entry, self.ns)
                eid = _entry_id(entry, self.ns, self.channel.thread_id, self.epoch)
                out += self.assembly.add(chunk, metadata, eid, f"|{sub}" if sub else "")
            if mode != "messages" or self.tuples:
                out += _encode_entry(entry, self.ns, self.channel.thread_id, self.epoch)
        return bytes(out)


def _encode_entry(entry: Entry, ns: str, thread_id: str, epoch: str) -> bytes:
    encoded = entry.encoded.get(ns)
    if encoded is None:
        data = entry.data
        if entry.mode.startswith("messages") and isinstance(data, list) and len(data) == 2:
            data = list(_message_of(entry, ns))
        eid = _entry_id(entry, ns, thread_id, epoch)
        encoded = entry.encoded[ns] = ServerSentEvent(id=eid, event=entry.mode, data=dump(data)).encode()
    return encoded


def _entry_id(entry: Entry, ns: str, thread_id: str, epoch: str) -> str:
    anchor = entry.anchor
    tid = api_id(ns, anchor.thread_id or thread_id) or anchor.thread_id
    return f"{tid}:{anchor.step}:{anchor.seq}~{epoch}.{entry.n}"


def _message_of(entry: Entry, ns: str) -> tuple[Any, Any]:
    """A ``messages`` event's ``(chunk, metadata)`` as the client sees them (its thread id as ``ns`` names it)."""
    data = entry.data
    if not (isinstance(data, list) and len(data) == 2):
        return data, {}
    meta = data[1]
    if isinstance(meta, dict):
        meta = dict(meta)
        if isinstance(meta.get("thread_id"), str):
            meta["thread_id"] = api_id(ns, meta["thread_id"]) or meta["thread_id"]
    return _wire_chunk(data[0]), meta


_CHUNK_TYPES = {"assistant": "AIMessageChunk", "user": "HumanMessageChunk", "system": "SystemMessageChunk"}
_CHUNK_TYPES["tool"] = "ToolMessageChunk"


def _wire_chunk(chunk: Any) -> Any:
    """A ``messages`` piece as LangGraph's servers send one: a serialized LangChain message chunk, whose ``type``
    (``AIMessageChunk`` for an ``assistant`` piece) LangGraph's JavaScript client reads to assemble the message; the
    ``role`` stays, for graphckpt's own readers."""
    if not isinstance(chunk, dict) or "type" in chunk:
        return chunk
    return {**chunk, "type": _CHUNK_TYPES.get(str(chunk.get("role")), "AIMessageChunk")}


END = ServerSentEvent(event="end", data="{}").encode()
"""The last thing a stream sends (no id): its run or thread has finished."""


class StreamResponse(EventSourceResponse):
    """An SSE response whose client is dropped when one write waits longer than ``send_timeout`` (a client that
    stopped reading): the connection closes, the stream's memory is freed, and no error is logged for it."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        except Exception as exc:
            stalled = isinstance(exc, SendTimeoutError) or (
                isinstance(exc, BaseExceptionGroup) and exc.subgroup(SendTimeoutError) is not None
            )
            if not stalled:
                raise
