"""Reading the durable event log for the streams: one shared read per position and wake-up, a task's update filled
in from its checkpoint, the SSE encodings of recent events, and :class:`Feed`, the parts a stream is handed."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_jsonable_python

from graphckpt.checkpoint import Snapshot
from graphckpt.errors import CorruptCheckpointError
from graphckpt.savers.base import StoredEvent
from graphckpt.server.events.hub import Hub
from graphckpt.server.graphs import Graphs

__all__ = ["READ_CACHE", "RENDER_CACHE", "UPDATE_CACHE", "EventLog", "Feed"]

logger = logging.getLogger("graphckpt.server")

READ_CACHE = 512
"""How many recent event reads :meth:`EventLog.events` remembers (each at most 256 events)."""

UPDATE_CACHE = 4096
"""How many ``task.finished`` events with their update read back from the checkpoint :meth:`EventLog.events`
remembers (the subscribers of one thread read each once)."""

RENDER_CACHE = 1024
"""How many SSE encodings of recently sent events :attr:`EventLog.rendered` keeps."""


class EventLog:
    """The event log of ``graphs.saver``, read at the versions of ``hub``."""

    def __init__(self, graphs: Graphs, hub: Hub) -> None:
        self.graphs, self.hub, self.saver = graphs, hub, graphs.saver
        self.compat: dict[str, bool] = {}
        """Per stored thread id: a LangGraph graph wrote it (GraphckptSaver): its steps' updates come from its
        kept writes (see :func:`graphckpt.compat._lgread.compat_updates`)."""
        self._reads: dict[Any, list[StoredEvent]] = {}
        self._updates: dict[tuple[str, int, int], StoredEvent] = {}
        self.rendered: dict[tuple[str, str, int, int, str], bytes] = {}
        """SSE encodings of recently sent events, by (namespace, thread, step, seq, mode) (see ``render``)."""

    def remember(self, key: tuple[str, str, int, int, str], encoded: bytes) -> bytes:
        """Keep ``encoded`` as the encoding of ``key`` (at most :data:`RENDER_CACHE` of them)."""
        self.rendered[key] = encoded
        while len(self.rendered) > RENDER_CACHE:
            del self.rendered[next(iter(self.rendered))]
        return encoded

    async def events(
        self, segments: Sequence[tuple[str, int, int]], after: tuple[int, int], limit: int = 256
    ) -> list[StoredEvent]:
        """The events after ``after`` in ``segments``. Streams at one position share one read per wake-up: a read
        is remembered with the hub's version, and a read after the version moved is a new one (an event committed
        after the hub saw the counter moves it again), so a remembered answer is never staler than a fresh one.
        An empty answer is not remembered: the counter is ``max(id)``, which a delete can take back down and new rows
        up to the same value between two polls (SQLite reuses the ids of deleted rows), so the hub sees no change;
        a remembered "nothing new" would then hold a stream at that position for good, where a fresh read finds
        the new rows at its next wake-up (at most 5 s later)."""
        key = (tuple(segments), after, limit, self.hub.version)
        found = self._reads.get(key)
        if found is None:
            found = await self.saver.read_events(segments, after=after, limit=limit)
            if any("update_in" in e.payload for e in found):
                found = [await self._with_update(e, segments) for e in found]
            if found:
                self._reads[key] = found
            while len(self._reads) > READ_CACHE:
                del self._reads[next(iter(self._reads))]
        return found

    async def _with_update(self, e: StoredEvent, segments: Sequence[tuple[str, int, int]]) -> StoredEvent:
        """``e`` with its task's update filled in when it points to its checkpoint (``update_in``, see
        :func:`graphckpt.savers.events.checkpoint_events`): what streams send is always the update itself. Read
        with the graph of the event's thread (of the streamed thread when that one was deleted: a fork keeps its
        source's rows); an update that cannot be read back stays ``null``, with ``update_in`` saying why not."""
        checkpoint_id = e.payload.get("update_in")
        if not isinstance(checkpoint_id, str):
            return e
        done = self._updates.get((e.thread_id, e.step, e.seq))
        if done is None:
            record = await self.saver.get_thread(e.thread_id) or await self.saver.get_thread(segments[0][0])
            app = self.graphs.app_of(record) if record is not None else self.graphs.app(None)
            keys = [k for k in e.payload.get("writes") or () if isinstance(k, str)]
            try:
                update = await app.store.task_update(e.thread_id, checkpoint_id, keys)
            except CorruptCheckpointError as exc:
                logger.warning("event %s: its update cannot be read back: %s", e.id, exc)
                update = None
            payload = {k: v for k, v in e.payload.items() if k != "update_in"}
            if update is None:
                payload["update_in"] = "unreadable"
            else:
                payload["update"] = to_jsonable_python(update, fallback=repr, inf_nan_mode="null")
            done = dataclasses.replace(e, payload=payload)
            self._updates[(e.thread_id, e.step, e.seq)] = done
            while len(self._updates) > UPDATE_CACHE:
                del self._updates[next(iter(self._updates))]
        return done

    async def cursor_now(self, segments: Sequence[tuple[str, int, int]], head_step: int) -> tuple[int, int]:
        """The cursor after the last event of the lineage (those of a thread's head step or later are read, as
        stored: only their positions matter)."""
        cursor = (head_step - 1, 2**31)
        while batch := await self.saver.read_events(segments, after=cursor, limit=256):
            cursor = (batch[-1].step, batch[-1].seq)
        return cursor


@dataclass(frozen=True)
class Feed:
    """What a stream is handed: the log, the hub's wake-ups, and three questions for the layers above."""

    log: EventLog
    hub: Hub
    active: Callable[[str], bool]
    """Whether a stored thread has a run going in this server."""
    cancelled: Callable[[str], Awaitable[bool]]
    """Whether a run (by id) was cancelled."""
    state: Callable[[str, str, str | None, int | None], Awaitable[Snapshot]]
    """The state of a checkpoint: ``(namespace, API thread id, checkpoint id, or None and the step)``."""
