"""``Ephemera``: the ephemeral events of the runs this server's own workers execute, for the SSE streams.

What a run emits as it goes (``tasks``: a task started, with its input; ``messages``: a model's answer piece by
piece; ``custom``: ``ctx.write``; ``debug``) is not in the durable log. The in-process workers hand each run's engine
to :meth:`Ephemera.attach` (``Worker.on_begin``); the engine's listener is set only while a stream of that thread
wants an ephemeral mode (the modes asked for during a run stay on until it ends, so a client that drops and comes
back finds what it missed). Each event goes into a small ring per thread and wakes the streams of that thread.
For a stream that asks for subgraphs, the engine's ``subgraph`` events (a child run's steps and events) are
rendered in that stream's modes by the library's own :func:`graphckpt.streams.chunks` and kept as ``MODE|node:task``.

**Where an ephemeral event sits in the stream.** Each event gets an *anchor*, the last durable event known to be
committed when it happened, and a number ``n``, increasing and unique in this server. A stream sends everything in
the order of ``(step, seq, n)`` (a durable event counting as ``n = -1``): an ephemeral event comes after the durable
event it is anchored to and before the next one. The anchor is the later of (a) the durable positions the thread's
streams had read when it was emitted and (b) the end of the step before the running one (its checkpoint, or the
``run.started`` of the running step's claim), read once per step. So a step's events come after the previous step's
checkpoint and before its own ``task.finished``; a durable event written in the middle of a step
(``effect.recorded``) may be placed after ephemeral events that followed it by less than a poll. Anchors never
decrease with ``n``.

**Ids.** ``{thread_id}:{step}:{seq}~{epoch}.{n}``: the anchor's durable id, the server's epoch (random, one per
:class:`Ephemera`, so ids of a server that restarted, or of another server, are recognised as not this one's), and
``n``. A reconnect with such an id continues right after it while the ring still holds what came next; otherwise
(restart, another server, aged out) the stream says ``stream.reset`` and continues from the durable event the id
names. Memory: at most :data:`RING` events and :data:`RING_BYTES` bytes per thread; rings of threads with no run
and no stream are dropped after :data:`LINGER` seconds, and beyond :data:`MAX_THREADS` of them.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic_core import to_jsonable_python

from graphckpt.savers.base import Saver

if TYPE_CHECKING:
    from graphckpt.engine import Run
    from graphckpt.savers.queue import RunRecord

__all__ = ["EPHEMERAL_MODES", "LINGER", "MAX_THREADS", "RING", "At", "Channel", "Entry", "Ephemera"]

logger = logging.getLogger("graphckpt.server")

EPHEMERAL_MODES = frozenset({"custom", "tasks", "messages", "debug"})
"""The engine's ephemeral modes (what its listener receives)."""

RING = 2048
"""Ephemeral events kept per thread (a long answer's pieces fit; older ones are dropped first)."""

RING_BYTES = 1 << 20
"""And at most this many bytes of their JSON per thread (a ``tasks`` event carries the task's whole input)."""

LINGER = 60.0
"""Seconds a thread's ring is kept after its run ended and its last stream closed."""

MAX_THREADS = 256
"""Idle rings kept at most (beyond, those touched longest ago go first; a ring with a stream or a run stays)."""


class At(NamedTuple):
    """A durable event's position (what an ephemeral event is anchored to), and its thread (a fork's own or its
    source's)."""

    step: int
    seq: int
    thread_id: str


START = At(-1, -1, "")


@dataclass(slots=True)
class Entry:
    """One ephemeral event in a ring."""

    n: int
    anchor: At
    mode: str
    """``custom``, ``tasks``, ``messages`` or ``debug``."""
    data: Any
    """JSON-ready payload (converted once, when it was published)."""
    size: int
    """The length of its JSON (what counts against :data:`RING_BYTES`)."""
    encoded: dict[str, bytes] = field(default_factory=dict)
    """SSE encodings by namespace (the streams of one thread share them)."""

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.anchor.step, self.anchor.seq, self.n)


class Channel:
    """One thread's ring, the modes its streams want, and its running engine (if this server runs it)."""

    def __init__(self, thread_id: str, born: int) -> None:
        self.thread_id = thread_id
        self.ring: deque[Entry] = deque()
        self.bytes = 0
        self.born = born
        """The server's event count when this ring was made: numbers before it are not this ring's."""
        self.evicted = born - 1
        """The number of the latest entry dropped to make room (``born - 1``: none)."""
        self.evicted_key = (-1, -1, -1)
        """And its key (see :attr:`Entry.key`)."""
        self.listeners: dict[asyncio.Event, frozenset[str]] = {}
        """Each open stream's wake-up event -> the ephemeral modes it wants."""
        self.sticky: set[str] = set()
        """Modes asked for during the current run: kept on until it ends."""
        self.engine: Run | None = None
        self.tail = START
        """The latest durable position a stream of this thread has read (all of it committed)."""
        self.last_anchor = START
        self.prefix_step = -2
        self.prefix = START
        """The end of step :attr:`prefix_step` (the last event of that step, or the running step's ``run.started``)."""
        self.pending: deque[tuple[str, Any, int, At]] = deque()
        """Events waiting for the end of their step to be read: ``(mode, payload, head step, tail then)``."""
        self.resolver: asyncio.Task[None] | None = None
        self.touched = time.monotonic()

    @property
    def modes(self) -> frozenset[str]:
        return frozenset(self.sticky).union(*self.listeners.values())

    def idle(self) -> bool:
        return not self.listeners and self.engine is None and not self.pending

    def after(self, n: int) -> Iterator[Entry]:
        """The entries numbered above ``n``, in order."""
        ring = self.ring
        start = bisect.bisect_right(ring, n, key=lambda e: e.n)
        return (ring[i] for i in range(start, len(ring)))

    def keeps_after(self, n: int) -> bool:
        """Whether every event of this thread numbered above ``n`` is still here (a reconnect after ``n`` loses
        nothing): this ring was there when ``n`` was numbered, and has dropped nothing numbered after it."""
        return self.born <= n and self.evicted <= n

    def first_after(self, key: tuple[int, int, int]) -> int:
        """The number just before the first entry whose key is above ``key`` (where a stream at ``key`` is)."""
        last = self.evicted
        for entry in self.ring:
            if entry.key > key:
                break
            last = entry.n
        return last

    def append(self, entry: Entry) -> None:
        """Keep ``entry``, dropping the oldest ones beyond :data:`RING` events or :data:`RING_BYTES` bytes."""
        while self.ring and (len(self.ring) >= RING or self.bytes + entry.size > RING_BYTES):
            old = self.ring.popleft()
            self.evicted, self.evicted_key, self.bytes = old.n, old.key, self.bytes - old.size
        self.ring.append(entry)
        self.bytes += entry.size

    def poke(self) -> None:
        for event in self.listeners:
            event.set()


class Ephemera:
    """The rings of ephemeral events of this server's threads (see the module docstring)."""

    def __init__(self, saver: Saver) -> None:
        self.saver = saver
        self.epoch = secrets.token_hex(4)
        self.channels: dict[str, Channel] = {}
        self.count = 0
        """Ephemeral events numbered so far: ``n`` is unique in this server (a thread's ring dropped and made again
        never reuses a number)."""
        self._runs: dict[str, tuple[str, Run]] = {}
        """Run id -> (thread id, engine run) of the runs this server's workers execute now."""

    # -- the workers' side --------------------------------------------------------------------------------------

    def attach(self, run: RunRecord, engine: Run) -> None:
        """``Worker.on_begin``: ``engine`` runs ``run``; listen to it if a stream of its thread wants to."""
        self._runs[run.run_id] = (run.thread_id, engine)
        channel = self.channels.get(run.thread_id)
        if channel is not None:
            channel.engine = engine
            channel.prefix_step = -2
            self._listen(channel)

    def ended(self, run_id: str) -> None:
        """``Worker.on_end``: the run stopped; its ring lingers for reconnects."""
        found = self._runs.pop(run_id, None)
        if found is None:
            return
        channel = self.channels.get(found[0])
        if channel is not None and channel.engine is found[1]:
            found[1].listener = None
            channel.engine, channel.sticky = None, set()
            channel.touched = time.monotonic()
            channel.poke()
        self._sweep()

    def _listen(self, channel: Channel) -> None:
        engine, modes = channel.engine, channel.modes
        if engine is None:
            return
        if not modes:
            engine.listener, engine.wanted = None, frozenset()
            return
        engine.wanted = modes

        def listener(mode: str, payload: Any) -> None:
            self._emit(channel, engine, mode, payload)

        if engine.listener is None:
            engine.listener = listener

    def _emit(self, channel: Channel, engine: Run, mode: str, payload: Any) -> None:
        modes = channel.modes
        if mode == "subgraph" and mode in modes:  # a subgraph's step or event, as ``mode|node:task|...``
            from graphckpt.streams import chunks

            for namespace, sub_mode, chunk in chunks((mode, payload), set(modes), engine.graph, engine.store):
                self._emit(channel, engine, "|".join((sub_mode, *namespace)), chunk)
            return
        if mode.partition("|")[0] not in modes:  # modes nobody asked for
            return
        item = (mode, payload, engine.head.cp.step, channel.tail)
        if channel.pending or channel.prefix_step != item[2]:
            channel.pending.append(item)
            if channel.resolver is None or channel.resolver.done():
                channel.resolver = asyncio.ensure_future(self._resolve(channel))
        else:
            self._publish(channel, item)

    async def _resolve(self, channel: Channel) -> None:
        """Publish the pending events in order, reading the end of each one's step first."""
        while channel.pending:
            step = channel.pending[0][2]
            if channel.prefix_step != step:
                try:
                    channel.prefix = await self._step_end(channel.thread_id, step, channel.prefix)
                except Exception as exc:  # the store is unreachable for a moment: anchor to what is known
                    logger.warning("reading the events of thread %r failed: %s", channel.thread_id, exc)
                channel.prefix_step = step
            while channel.pending and channel.pending[0][2] == step:
                self._publish(channel, channel.pending.popleft())

    async def _step_end(self, thread_id: str, step: int, known: At) -> At:
        """The last durable event of ``thread_id`` at ``step`` or before, or the later ``run.started`` of the run
        now running ``step + 1`` (both committed before that step's first task started)."""
        best, cursor = known, (step - 1, 2**31)
        while batch := await self.saver.read_events([(thread_id, step, step + 2)], after=cursor, limit=256):
            for e in batch:
                if e.step <= step or e.kind == "run.started":
                    best = max(best, At(e.step, e.seq, e.thread_id))
            cursor = (batch[-1].step, batch[-1].seq)
        return best

    def _publish(self, channel: Channel, item: tuple[str, Any, int, At]) -> None:
        mode, payload, _, tail = item
        anchor = max(tail, channel.prefix, channel.last_anchor)
        channel.last_anchor = anchor
        try:
            messages = mode.partition("|")[0] == "messages"
            data = to_jsonable_python(list(payload) if messages else payload, fallback=repr)
            size = len(json.dumps(data, ensure_ascii=False, default=repr))
        except Exception as exc:  # what a node wrote cannot be shown as JSON: say so rather than drop the stream
            data = {"error": f"not JSON: {exc}"}
            size = 64
        channel.append(Entry(self.count, anchor, mode, data, size))
        self.count += 1
        channel.poke()

    def close(self) -> None:
        """Server shutdown: stop reading step ends (what is pending is dropped with the rings)."""
        for channel in self.channels.values():
            if channel.resolver is not None:
                channel.resolver.cancel()

    # -- the streams' side ---------------------------------------------------------------------------------------

    def expect(self, thread_id: str, modes: Iterable[str], *, subgraphs: bool = False) -> None:
        """A run about to be queued will be streamed in ``modes``: listen from its first event on."""
        wanted = _listened(modes, subgraphs)
        if wanted:
            channel = self._channel(thread_id)
            channel.sticky |= wanted
            channel.touched = time.monotonic()

    def subscribe(
        self, thread_id: str, modes: Iterable[str], wake: asyncio.Event, *, subgraphs: bool = False
    ) -> Channel:
        """A stream of ``thread_id`` in ``modes`` (and with ``subgraphs``, its subgraphs' events in every mode)."""
        channel = self._channel(thread_id)
        wanted = _listened(modes, subgraphs)
        channel.listeners[wake] = wanted
        channel.sticky |= wanted
        if channel.engine is None:
            channel.engine = next((e for t, e in self._runs.values() if t == thread_id), None)
            channel.prefix_step = -2
        self._listen(channel)
        return channel

    def unsubscribe(self, channel: Channel, wake: asyncio.Event) -> None:
        channel.listeners.pop(wake, None)
        channel.touched = time.monotonic()

    def saw(self, channel: Channel, at: At) -> None:
        """A stream of the thread read the durable log up to ``at``."""
        if at > channel.tail:
            channel.tail = at

    async def settle(self, channel: Channel) -> None:
        """Wait until the events emitted so far are in the ring (a step's end being read)."""
        resolver = channel.resolver
        if resolver is not None and not resolver.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(resolver)

    def _channel(self, thread_id: str) -> Channel:
        channel = self.channels.get(thread_id)
        if channel is None:
            self._sweep()
            channel = self.channels[thread_id] = Channel(thread_id, self.count)
        return channel

    def _sweep(self) -> None:
        """Drop the rings nobody needs: idle for :data:`LINGER` seconds; the oldest idle ones beyond the cap."""
        now = time.monotonic()
        for tid in [t for t, c in self.channels.items() if c.idle() and now - c.touched > LINGER]:
            del self.channels[tid]
        if len(self.channels) >= MAX_THREADS:
            idle = sorted((c.touched, t) for t, c in self.channels.items() if c.idle())
            for _, tid in idle[: len(self.channels) - MAX_THREADS + 1]:
                del self.channels[tid]


def _listened(modes: Iterable[str], subgraphs: bool) -> frozenset[str]:
    """The modes a stream needs this server's runs to emit: the ephemeral ones, and with ``subgraphs`` every mode
    (a subgraph's steps are not in its parent's log: they come as ``subgraph`` events) plus ``subgraph``."""
    modes = frozenset(modes)
    return modes | {"subgraph"} if subgraphs else modes & EPHEMERAL_MODES
