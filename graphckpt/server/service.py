"""``Service``: what the server serves, as plain async methods the HTTP handlers (and the web UI) call.

It holds the graphs by id (each an :class:`~graphckpt.App` bound to one shared saver), the run executor, the event
hub, and the namespace rules: every method takes the caller's namespace and an API thread id, and a thread outside
that namespace is :class:`~graphckpt.errors.ThreadNotFoundError`, as if it did not exist. Views of the results as
JSON are in :mod:`graphckpt.server.queries`.

A graph's id is the ``MODULE:ATTR`` it was loaded from (what ``graphckpt run`` records in a thread's ``tags.graph``,
so threads the CLI made are served with their graph), or the ``NAME`` of ``NAME=MODULE:ATTR``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_jsonable_python

from graphckpt import ids, transfer
from graphckpt.app import App
from graphckpt.checkpoint import Snapshot
from graphckpt.diff import Diff
from graphckpt.errors import CorruptCheckpointError, ThreadNotFoundError
from graphckpt.savers.base import Saver, StoredEvent, ThreadRecord
from graphckpt.savers.queue import RunQueue
from graphckpt.server.auth import api_id, store_id
from graphckpt.server.errors import ApiError
from graphckpt.server.hub import Hub
from graphckpt.store import lineage_segments

__all__ = ["PendingThread", "Service", "user_metadata"]

logger = logging.getLogger("graphckpt.server")

READ_CACHE = 512
"""How many recent event reads :meth:`Service.events` remembers (each at most 256 events)."""

UPDATE_CACHE = 4096
"""How many ``task.finished`` events with their update read back from the checkpoint :meth:`Service.events`
remembers (the subscribers of one thread read each once)."""

NO_END = 2**62
"""An upper step bound past any real one (a lineage walk's open end)."""


@dataclass
class PendingThread:
    """A thread created by ``POST /threads`` that has no checkpoint yet (a thread is stored from its first checkpoint
    on): a row of the run queue's ``created_threads`` (its tags are its first run's), so it survives a restart and a
    separate worker's run keeps its metadata; in this process's memory on a saver without a run queue."""

    thread_id: str
    metadata: dict[str, Any]
    graph_id: str
    created_at: float = field(default_factory=ids.now)


def user_metadata(record: ThreadRecord) -> dict[str, Any]:
    """The metadata a client gave the thread (kept in its checkpoints' ``tags.metadata``)."""
    tags = record.metadata.get("tags") or {}
    found = tags.get("metadata") if isinstance(tags, Mapping) else None
    return dict(found) if isinstance(found, Mapping) else {}


class Service:
    """The graphs ``apps`` (id -> app, all on ``saver``); the first is the default for threads that name none."""

    def __init__(
        self,
        apps: Mapping[str, App],
        saver: Saver,
        *,
        poll_interval: float = 0.01,
        recover: bool = True,
        workers: int = 1,
    ) -> None:
        if not apps:
            raise ValueError("serve at least one graph")
        self.saver = saver
        self.apps = {name: app if app.saver is saver else app.with_saver(saver) for name, app in apps.items()}
        self.default_graph = next(iter(self.apps))
        self.pending: dict[str, PendingThread] = {}
        self._reads: dict[Any, list[StoredEvent]] = {}
        self._updates: dict[tuple[str, int, int], StoredEvent] = {}
        self.rendered: dict[tuple[str, str, int, int, str], bytes] = {}
        """SSE encodings of recently sent events, by (namespace, thread, step, seq, mode) (see ``streams``)."""
        self.hub = Hub(saver, poll_interval=poll_interval)
        from graphckpt.server.executor import InProcessRuns, RunExecutor
        from graphckpt.server.queue_runs import QueueRuns

        self.runs: RunExecutor
        if isinstance(saver, RunQueue):  # runs are rows of the durable queue, executed by workers
            self.runs = QueueRuns(self, workers=workers)
        else:
            self.runs = InProcessRuns(self, recover=recover)

    async def start(self) -> None:
        await self.saver.setup()
        await self.hub.start()
        await self.runs.start()

    async def stop(self) -> None:
        await self.runs.stop()
        await self.hub.stop()
        await self.saver.aclose()

    # -- graphs -------------------------------------------------------------------------------------------------------

    def app(self, graph_id: str | None) -> App:
        """The graph ``graph_id`` (the default one for ``None``); 404 for an unknown id."""
        if graph_id is None:
            return self.apps[self.default_graph]
        try:
            return self.apps[graph_id]
        except KeyError:
            raise ApiError(404, "NotFound", f"no assistant (graph) {graph_id!r}") from None

    def graph_of(self, record: ThreadRecord) -> str:
        """The id of the graph that runs ``record``'s thread: its ``tags.graph`` when served, else the default."""
        tags = record.metadata.get("tags") or {}
        name = tags.get("graph") if isinstance(tags, Mapping) else None
        return name if isinstance(name, str) and name in self.apps else self.default_graph

    def app_of(self, record: ThreadRecord) -> App:
        return self.apps[self.graph_of(record)]

    # -- threads ------------------------------------------------------------------------------------------------------

    async def record(self, ns: str, thread_id: str) -> ThreadRecord:
        """The stored thread ``thread_id`` of namespace ``ns``; 404 when there is none (or it is pending)."""
        record = await self.saver.get_thread(store_id(ns, thread_id))
        if record is None:
            raise ThreadNotFoundError(f"no thread {thread_id!r}")
        return record

    async def find(self, ns: str, thread_id: str) -> ThreadRecord | PendingThread:
        """The stored thread, or the pending one of that id; 404 when neither exists."""
        sid = store_id(ns, thread_id)
        record = await self.saver.get_thread(sid)
        if record is not None:
            self.pending.pop(sid, None)  # its first run stored it
            return record
        if sid in self.pending:
            return self.pending[sid]
        created = await self._created(sid, thread_id)
        if created is not None:
            return created
        raise ThreadNotFoundError(f"no thread {thread_id!r}")

    async def _created(self, sid: str, thread_id: str) -> PendingThread | None:
        """A thread ``POST /threads`` stored before its first checkpoint (in the run queue's ``created_threads``)."""
        if not isinstance(self.saver, RunQueue):
            return None
        found = await self.saver.get_created_thread(sid)
        if found is None:
            return None
        tags = json.loads(found[0])
        graph = tags.get("graph")
        metadata = tags.get("metadata")
        return PendingThread(thread_id, dict(metadata) if isinstance(metadata, dict) else {},
                             graph if isinstance(graph, str) and graph in self.apps else self.default_graph,
                             found[1])  # fmt: skip

    async def _store_created(self, sid: str, thread: PendingThread, *, replace: bool = False) -> bool:
        if not isinstance(self.saver, RunQueue):
            self.pending[sid] = thread
            return True
        if replace:
            await self.saver.delete_created_thread(sid)
        tags = json.dumps({"graph": thread.graph_id, "metadata": thread.metadata})
        return await self.saver.put_created_thread(sid, tags, thread.created_at)

    async def create_thread(
        self, ns: str, thread_id: str | None, metadata: Mapping[str, Any], graph_id: str | None, *, exist_ok: bool
    ) -> ThreadRecord | PendingThread:
        """A new (pending) thread; an existing id is 409 unless ``exist_ok`` (then the existing one)."""
        tid = thread_id or ids.new_id()
        sid = store_id(ns, tid)
        existing = self.pending.get(sid) or await self.saver.get_thread(sid) or await self._created(sid, tid)
        if existing is not None:
            if exist_ok:
                return existing
            raise ApiError(409, "ThreadConflictError", f"thread {tid!r} already exists")
        graph = graph_id if graph_id is not None else self.default_graph
        self.app(graph)
        thread = PendingThread(tid, dict(metadata), graph)
        if not await self._store_created(sid, thread):  # another request created it meanwhile
            return await self.create_thread(ns, thread_id, metadata, graph_id, exist_ok=exist_ok)
        return thread

    async def threads(self, ns: str) -> list[ThreadRecord]:
        """Every stored thread of ``ns``, most recently updated first."""
        return [r for r in await self.saver.list_threads() if api_id(ns, r.thread_id) is not None]

    async def patch_metadata(
        self, ns: str, thread_id: str, metadata: Mapping[str, Any]
    ) -> ThreadRecord | PendingThread:
        """Merge ``metadata`` into the thread's: a new checkpoint of source ``update`` (values unchanged) whose
        ``tags.metadata`` is the merge; a running thread is 409 (the edit would take it over)."""
        found = await self.find(ns, thread_id)
        if isinstance(found, PendingThread):
            found.metadata.update(metadata)
            await self._store_created(store_id(ns, thread_id), found, replace=True)
            return found
        record, sid = found, found.thread_id
        if record.status == "running" or self.runs.active(sid):
            raise ApiError(409, "ThreadStateError", f"thread {thread_id!r} is running; patch it when it stops")
        tags = dict(record.metadata.get("tags") or {})
        tags["metadata"] = {**user_metadata(record), **metadata}
        await self.app_of(record).aupdate_state(sid, None, tags=tags)
        return await self.record(ns, thread_id)

    async def delete_thread(self, ns: str, thread_id: str) -> None:
        sid = store_id(ns, thread_id)
        if self.pending.pop(sid, None) is not None:
            return
        if isinstance(self.saver, RunQueue):
            created = await self.saver.get_created_thread(sid)
            await self.saver.delete_created_thread(sid)
            if created is not None and await self.saver.get_thread(sid) is None:
                await self.runs.cancel_thread(sid)
                return
        record = await self.record(ns, thread_id)
        await self.runs.cancel_thread(sid)
        await self.app_of(record).adelete_thread(sid)

    async def state(
        self, ns: str, thread_id: str, checkpoint_id: str | None = None, step: int | None = None
    ) -> Snapshot:
        record = await self.record(ns, thread_id)
        return await self.app_of(record).aget_state(record.thread_id, checkpoint_id, step=step)

    async def history(
        self, ns: str, thread_id: str, *, limit: int, before: str | None, filter: Mapping[str, Any] | None
    ) -> list[Snapshot]:
        record = await self.record(ns, thread_id)
        return await self.app_of(record).ahistory(record.thread_id, limit=limit, before=before, filter=filter)

    async def fork(
        self,
        ns: str,
        thread_id: str,
        *,
        checkpoint_id: str | None,
        step: int | None,
        update: Mapping[str, Any] | None,
        new_thread_id: str | None,
        goto: str | list[str] | None,
        as_node: str | None,
        metadata: Mapping[str, Any] | None,
    ) -> Snapshot:
        """A new thread branching off ``thread_id`` at a checkpoint (its head by default) with ``update`` applied."""
        record = await self.record(ns, thread_id)
        app = self.app_of(record)
        if checkpoint_id is None and step is None:
            checkpoint_id = record.head_checkpoint_id
        tags = dict(record.metadata.get("tags") or {})
        tags["graph"] = self.graph_of(record)
        tags["metadata"] = {**user_metadata(record), **(metadata or {})}
        new_sid = store_id(ns, new_thread_id or ids.new_id())
        return await app.afork(record.thread_id, checkpoint_id, step=step, update=update, new_thread_id=new_sid,
                               goto=goto, as_node=as_node, tags=tags)  # fmt: skip

    async def diff(self, ns: str, a: tuple[str, str | None], b: tuple[str, str | None]) -> Diff:
        ra, rb = await self.record(ns, a[0]), await self.record(ns, b[0])
        return await self.app_of(ra).adiff((ra.thread_id, a[1]), (rb.thread_id, b[1]))

    async def children(self, ns: str, thread_id: str) -> list[ThreadRecord]:
        """The forks of ``thread_id`` (in ``ns``)."""
        sid = store_id(ns, thread_id)
        return [r for r in await self.threads(ns) if r.parent_thread_id == sid]

    async def inbox(self, ns: str) -> list[tuple[ThreadRecord, Snapshot]]:
        """The interrupted threads of ``ns`` with their heads (whose ``interrupts`` say what they wait for)."""
        found = []
        for record in await self.threads(ns):
            if record.status == "interrupted":
                found.append((record, await self.app_of(record).aget_state(record.thread_id)))
        return found

    def export(self, ns: str, record: ThreadRecord) -> AsyncIterator[str]:
        """The export of ``record``'s thread with the ids ``ns`` sees (an API id, not the stored ``ns/ID``), so the
        file imports into any namespace, or anywhere with ``graphckpt import``."""

        def visible(stored: str) -> str:
            found = api_id(ns, stored)
            if found is None:  # a lineage that leaves the namespace: never written into its file
                raise ValueError(f"it names thread {stored!r}, which is not in this namespace")
            return found

        return transfer.export_thread(self.saver, record.thread_id, rename=visible)

    async def import_(self, ns: str, lines: Sequence[str]) -> str:
        """Import an export into ``ns``: each thread id of the file is an API id, stored as ``ns``'s (so a file
        exported from another namespace, or by ``graphckpt export``, imports as this namespace's threads and names
        nobody else's); returns the API id of the thread."""

        def stored(file_id: str) -> str:
            if ns and "/" in file_id:
                raise ValueError(f"thread_id {file_id[:80]!r} is not a thread id of this API (it contains '/')")
            return store_id(ns, file_id)

        try:
            imported = await transfer.import_thread(self.saver, lines, rename=stored)
        except CorruptCheckpointError as exc:  # the file is the request: refused, nothing written
            raise ApiError(422, "CorruptCheckpointError", str(exc)) from None
        return api_id(ns, imported) or imported

    # -- events -------------------------------------------------------------------------------------------------------

    async def segments(self, ns: str, thread_id: str) -> list[tuple[str, int, int]]:
        """The lineage of ``thread_id`` as event segments (a fork sees its source's events up to the fork point);
        a pending thread is its own only segment."""
        found = await self.find(ns, thread_id)
        if isinstance(found, PendingThread):
            return [(store_id(ns, thread_id), 0, NO_END)]
        lineage = await self.app_of(found).store.lineage(found)
        return list(lineage_segments(lineage, NO_END))

    async def events(
        self, segments: Sequence[tuple[str, int, int]], after: tuple[int, int], limit: int = 256
    ) -> list[StoredEvent]:
        """The events after ``after`` in ``segments``. Streams at one position share one read per wake-up: a read
        is remembered with the hub's version, and a read after the version moved is a new one (an event committed
        after the hub saw the counter moves it again), so a remembered answer is never staler than a fresh one."""
        key = (tuple(segments), after, limit, self.hub.version)
        found = self._reads.get(key)
        if found is None:
            found = await self.saver.read_events(segments, after=after, limit=limit)
            if any("update_in" in e.payload for e in found):
                found = [await self._with_update(e, segments) for e in found]
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
            app = self.app_of(record) if record is not None else self.apps[self.default_graph]
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
        """The cursor after the last event of the lineage (those of a thread's head step or later are read)."""
        cursor = (head_step - 1, 2**31)
        while batch := await self.events(segments, cursor):
            cursor = (batch[-1].step, batch[-1].seq)
        return cursor
