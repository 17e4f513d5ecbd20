"""``Hub``: wakes the streams when the event log grows, whoever wrote it (this process, a worker, another server).

One poller per server reads the store's change counter (:meth:`Saver.events_version`: ``max(id)`` of the events,
one index look-up) every ``poll_interval`` seconds; on PostgreSQL a ``LISTEN graphckpt_events`` connection wakes it
at once on each commit's ``NOTIFY`` (sent by the event triggers), and the poll, slowed to ``pg_poll_interval``, is
the fallback if that connection breaks. The writes of this server's own runs wake the streams sooner still: right
after each one returns (:func:`graphckpt.savers.events.watch`), without waiting for the poll or the ``NOTIFY``
(the poll's own sighting of that change wakes them once more: a read that finds nothing new). Streams never hold
events: each registers a wake-up event of its own
(:attr:`Hub.wakes`), which the poller sets when the log changed, then reads the log from its own cursor (reads at
one :attr:`Hub.version` are shared, see :meth:`EventLog.events`).

The hub also holds :class:`~graphckpt.server.events.ephemeral.Ephemera`, the rings of the ephemeral events of this
server's own runs; a thread's ring sets the wake-up events of that thread's streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, cast

from graphckpt.savers import events
from graphckpt.savers.base import Saver
from graphckpt.server.events.ephemeral import Ephemera

__all__ = ["Hub"]

logger = logging.getLogger("graphckpt.server")


class Hub:
    def __init__(self, saver: Saver, *, poll_interval: float = 0.01, pg_poll_interval: float = 0.5) -> None:
        self.saver = saver
        self.poll_interval = poll_interval
        self.pg_poll_interval = pg_poll_interval
        self.version = 0
        """Grows by one each time the poller sees the log change (what a shared read is remembered with)."""
        self._observed = 0
        self.closing = False
        self._nudge = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self.wakes: set[asyncio.Event] = set()
        """The open streams' wake-up events: set on each change of the log (and at shutdown)."""
        self.ephemera = Ephemera(saver)
        self._unwatch: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._observed = await self.saver.events_version()
        self._loop = asyncio.get_running_loop()
        try:
            self._unwatch = events.watch(self.saver, self._wrote)
        except TypeError as exc:  # a saver class that cannot be watched: the poll alone finds the changes
            logger.info("event hub: %s; streams wake at the poll", exc)
        self._tasks.append(asyncio.create_task(self._poll(), name="graphckpt-hub-poll"))
        if hasattr(self.saver, "dsn"):
            self._tasks.append(asyncio.create_task(self._listen(), name="graphckpt-hub-listen"))

    async def stop(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        self.close()
        self.ephemera.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    def close(self) -> None:
        """Wake every stream for good: the server is shutting down."""
        self.closing = True
        for wake in self.wakes:
            wake.set()

    def _publish(self, observed: int) -> None:
        """A change of the store's counter (up, or down after a delete) moves :attr:`version` up by one."""
        if observed != self._observed:
            self._observed = observed
            self._moved()

    def _moved(self) -> None:
        """The log may have grown: a new :attr:`version` (shared reads are made afresh), every stream woken."""
        self.version += 1
        for wake in self.wakes:
            wake.set()

    def _wrote(self) -> None:
        """A write of this process through the saver returned: the log may have grown; wake the streams now."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self._loop:  # a run on another loop (a sync facade's thread): its poll is near anyway
            if self._loop is not None:
                with contextlib.suppress(RuntimeError):  # the server's loop has closed
                    self._loop.call_soon_threadsafe(self._nudge.set)
            return
        self._moved()

    async def _poll(self) -> None:
        listening = hasattr(self.saver, "dsn")
        while not self.closing:
            interval = self.pg_poll_interval if listening else self.poll_interval
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._nudge.wait()
            self._nudge.clear()
            try:
                self._publish(await self.saver.events_version())
            except Exception as exc:  # the store is unreachable for a moment: streams keep their cursors
                logger.warning("event poll failed: %s", exc)
                await asyncio.sleep(min(1.0, interval * 10))

    async def _listen(self) -> None:
        import psycopg

        dsn: str = cast(Any, self.saver).dsn
        schema = getattr(self.saver, "schema", None)
        while not self.closing:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute("LISTEN graphckpt_events")
                    self._nudge.set()  # catch up on what was written before LISTEN
                    async for note in conn.notifies():
                        if schema is None or note.payload == schema:
                            self._nudge.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("LISTEN graphckpt_events failed (polling meanwhile): %s", exc)
                await asyncio.sleep(1.0)
