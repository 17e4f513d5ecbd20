"""``Service``: what the server serves, as plain async methods the HTTP handlers (and the web UI) call.

It is handed the graphs (:class:`~graphckpt.server.graphs.Graphs`, all on one saver), the run executor chosen by
``create_app``, and the event hub; it holds the namespace rules: every method takes the caller's namespace and an API
thread id, and a thread outside that namespace is :class:`~graphckpt.errors.ThreadNotFoundError`, as if it did not
exist. Views of the results as JSON are in :mod:`graphckpt.server.queries`; what the streams read is
:attr:`Service.feed`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from graphckpt import ids, transfer
from graphckpt.checkpoint import Snapshot
from graphckpt.compat._lgread import is_compat
from graphckpt.diff import Diff
from graphckpt.erase import refuse_forked
from graphckpt.errors import CorruptCheckpointError, EncryptionError, ThreadNotFoundError
from graphckpt.prune import prune
from graphckpt.reader import RawCodec
from graphckpt.savers.base import Status, ThreadRecord
from graphckpt.savers.queue import RunQueue
from graphckpt.server.auth import api_id, store_id
from graphckpt.server.errors import ApiError
from graphckpt.server.events.hub import Hub
from graphckpt.server.events.log import EventLog, Feed
from graphckpt.server.execution.base import RunExecutor
from graphckpt.server.graphs import Graphs
from graphckpt.server.records import PendingThread, user_metadata
from graphckpt.store import ThreadStore, lineage_segments

__all__ = ["NO_END", "Service"]

NO_END = 2**62
"""An upper step bound past any real one (a lineage walk's open end)."""


SEARCH_PAGE = 500
"""Threads a search reads per query (its filters beyond status and parent are checked on the rows read)."""


class Service:
    """The thread operations over ``graphs``, running threads with ``runs``; ``hub`` wakes the streams."""

    def __init__(self, graphs: Graphs, hub: Hub, runs: RunExecutor) -> None:
        self.graphs, self.hub, self.runs = graphs, hub, runs
        self.saver = graphs.saver
        self.pending: dict[str, PendingThread] = {}
        self.tasks: set[asyncio.Future[None]] = set()
        """Work a request left to finish after its answer (a stateless run's cleanup), held until it is done."""
        self._raw = ThreadStore(self.saver, RawCodec())
        """Reads threads a LangGraph graph wrote through the compat saver (values as plain data)."""
        self.log = EventLog(graphs, hub)
        self.feed = Feed(self.log, hub, runs.active, self._cancelled, self._checkpoint_state)

    async def start(self) -> None:
        await self.saver.setup()
        await self.hub.start()
        await self.runs.start()

    async def stop(self) -> None:
        await self.runs.stop()
        await self.hub.stop()
        await self.saver.aclose()

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
        ttl = tags.get("ttl")
        return PendingThread(
            thread_id,
            dict(metadata) if isinstance(metadata, dict) else {},
            self.graphs.served(graph),
            found[1],
            ttl if isinstance(ttl, dict) else None,
        )

    async def _store_created(self, sid: str, thread: PendingThread, *, replace: bool = False) -> bool:
        if not isinstance(self.saver, RunQueue):
            self.pending[sid] = thread
            return True
        if replace:
            await self.saver.delete_created_thread(sid)
        tags = json.dumps(thread.tags)
        return await self.saver.put_created_thread(sid, tags, thread.created_at)

    async def create_thread(
        self,
        ns: str,
        thread_id: str | None,
        metadata: Mapping[str, Any],
        graph_id: str | None,
        *,
        exist_ok: bool,
        ttl: dict[str, Any] | None = None,
    ) -> ThreadRecord | PendingThread:
        """A new (pending) thread; an existing id is 409 unless ``exist_ok`` (then the existing one)."""
        tid = thread_id or ids.new_uuid()
        sid = store_id(ns, tid)
        existing = self.pending.get(sid) or await self.saver.get_thread(sid) or await self._created(sid, tid)
        if existing is not None:
            if exist_ok:
                return existing
            raise ApiError(409, "ThreadConflictError", f"thread {tid!r} already exists")
        graph = graph_id if graph_id is not None else self.graphs.default
        self.graphs.app(graph)
        thread = PendingThread(tid, dict(metadata), graph, ttl=ttl)
        if not await self._store_created(sid, thread):  # another request created it meanwhile
            return await self.create_thread(ns, thread_id, metadata, graph_id, exist_ok=exist_ok, ttl=ttl)
        return thread

    async def create_missing(self, ns: str, thread_id: str, graph_id: str | None) -> ThreadRecord | PendingThread:
        """The pending thread a run creates for an id :meth:`find` found nothing of (without reading it again); the
        one that exists when another request created it meanwhile."""
        graph = graph_id if graph_id is not None else self.graphs.default
        self.graphs.app(graph)
        thread = PendingThread(thread_id, {}, graph)
        if await self._store_created(store_id(ns, thread_id), thread):
            return thread
        return await self.create_thread(ns, thread_id, {}, graph_id, exist_ok=True)

    async def find_or_create(self, ns: str, thread_id: str, graph_id: str | None) -> ThreadRecord | PendingThread:
        """:meth:`find`, or :meth:`create_missing` when there is no such thread (a rollback deleted it)."""
        try:
            return await self.find(ns, thread_id)
        except ThreadNotFoundError:
            return await self.create_missing(ns, thread_id, graph_id)

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
        await self.graphs.app_of(record).aupdate_state(sid, None, tags=tags)
        return await self.record(ns, thread_id)

    async def delete_thread(self, ns: str, thread_id: str, *, cascade: bool = False) -> None:
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
        if not cascade:
            refuse_forked(thread_id, [api_id(ns, f) or f for f in await self.saver.thread_forks(sid)])
        await self.runs.cancel_thread(sid)
        await self.graphs.app_of(record).adelete_thread(sid, cascade=cascade)

    async def keep_latest(self, ns: str, thread_id: str) -> bool:
        """LangGraph's ``prune(strategy="keep_latest")``: the thread keeps only its head checkpoint (see
        :mod:`graphckpt.keep_last`); ``False`` when nothing went (a running thread is left alone)."""
        record = await self.record(ns, thread_id)
        report = await prune(self.saver, thread_ids=[record.thread_id], keep_last=1, measure=False)
        return bool(report.threads)

    async def state(
        self, ns: str, thread_id: str, checkpoint_id: str | None = None, step: int | None = None
    ) -> Snapshot:
        record = await self.record(ns, thread_id)
        if is_compat(record):  # a LangGraph graph's thread (GraphckptSaver): read without a graphckpt graph
            return await self._raw.state(record.thread_id, checkpoint_id, step)
        return await self.graphs.app_of(record).aget_state(record.thread_id, checkpoint_id, step=step)

    async def history(
        self, ns: str, thread_id: str, *, limit: int, before: str | None, filter: Mapping[str, Any] | None
    ) -> list[Snapshot]:
        record = await self.record(ns, thread_id)
        if is_compat(record):
            return await self._raw.history(record.thread_id, limit=limit, before=before, filter=filter)
        return await self.graphs.app_of(record).ahistory(record.thread_id, limit=limit, before=before, filter=filter)

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
        app = self.graphs.app_of(record)
        if checkpoint_id is None and step is None:
            checkpoint_id = record.head_checkpoint_id
        tags = dict(record.metadata.get("tags") or {})
        tags["graph"] = self.graphs.graph_of(record)
        tags["metadata"] = {**user_metadata(record), **(metadata or {})}
        new_sid = store_id(ns, new_thread_id or ids.new_uuid())
        return await app.afork(
            record.thread_id,
            checkpoint_id,
            step=step,
            update=update,
            new_thread_id=new_sid,
            goto=goto,
            as_node=as_node,
            tags=tags,
        )

    async def diff(self, ns: str, a: tuple[str, str | None], b: tuple[str, str | None]) -> Diff:
        ra, rb = await self.record(ns, a[0]), await self.record(ns, b[0])
        return await self.graphs.app_of(ra).adiff((ra.thread_id, a[1]), (rb.thread_id, b[1]))

    async def search(
        self,
        ns: str,
        *,
        status: Status | None = None,
        parent_thread_id: str | None = None,
        keep: Callable[[ThreadRecord], bool] = lambda _: True,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[ThreadRecord]:
        """The threads of ``ns`` from ``offset`` on, at most ``limit``, newest created first: ``status`` and the
        parent are filters of the saver's indexed pages; ``keep`` (metadata, graph) and the namespace are checked on
        the rows read, page after page, so memory holds one page whatever the number of threads."""
        parent = store_id(ns, parent_thread_id) if parent_thread_id is not None else None
        found: list[ThreadRecord] = []
        cursor, skip = None, offset
        size = SEARCH_PAGE if limit is None else min(SEARCH_PAGE, max(limit + offset, 10))
        while True:
            page = await self.saver.page_threads(limit=size, after=cursor, status=status, parent_thread_id=parent)
            for record in page.threads:
                if api_id(ns, record.thread_id) is None or not keep(record):
                    continue
                if skip:
                    skip -= 1
                    continue
                found.append(record)
                if limit is not None and len(found) >= limit:
                    return found
            if page.next is None:
                return found
            cursor = page.next

    async def children(self, ns: str, thread_id: str) -> list[ThreadRecord]:
        """The forks of ``thread_id`` (in ``ns``): one indexed read of its forks."""
        return await self.search(ns, parent_thread_id=thread_id)

    async def inbox(self, ns: str) -> list[tuple[ThreadRecord, Snapshot]]:
        """The interrupted threads of ``ns`` with their heads (whose ``interrupts`` say what they wait for)."""
        found = []
        for record in await self.search(ns, status="interrupted"):
            found.append((record, await self.graphs.app_of(record).aget_state(record.thread_id)))
        return found

    def export(self, ns: str, record: ThreadRecord, *, decrypt: bool = False) -> AsyncIterator[str]:
        """The export of ``record``'s thread with the ids ``ns`` sees (an API id, not the stored ``ns/ID``), so the
        file imports into any namespace, or anywhere with ``graphckpt import``. From an encrypted store the values
        stay encrypted (they import into a store holding the key) unless ``decrypt`` (``?decrypt=true``)."""

        def visible(stored: str) -> str:
            found = api_id(ns, stored)
            if found is None:  # a lineage that leaves the namespace: never written into its file
                raise ValueError(f"it names thread {stored!r}, which is not in this namespace")
            return found

        return transfer.export_thread(self.saver, record.thread_id, rename=visible, decrypt=decrypt)

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
        except (CorruptCheckpointError, EncryptionError) as exc:  # the file is the request: refused, nothing written
            raise ApiError(422, type(exc).__name__, str(exc)) from None
        return api_id(ns, imported) or imported

    # -- events -------------------------------------------------------------------------------------------------------

    async def unfinished_runs(self, ns: str) -> int | None:
        """How many runs of namespace ``ns`` are queued or running in the saver's run queue (``None``: the saver
        has none, so runs are not counted)."""
        if not isinstance(self.saver, RunQueue):
            return None
        prefix = ns + "/" if ns else ""
        runs = [*await self.saver.list_runs(status="queued"), *await self.saver.list_runs(status="running")]
        return sum(1 for run in runs if run.thread_id.startswith(prefix))

    async def segments(self, ns: str, thread_id: str) -> list[tuple[str, int, int]]:
        """The lineage of ``thread_id`` as event segments (a fork sees its source's events up to the fork point);
        a pending thread is its own only segment."""
        return await self.segments_of(ns, await self.find(ns, thread_id))

    async def segments_of(self, ns: str, thread: ThreadRecord | PendingThread) -> list[tuple[str, int, int]]:
        """:meth:`segments` of a thread already read."""
        if isinstance(thread, PendingThread):
            return [(store_id(ns, thread.thread_id), 0, NO_END)]
        store = self._raw if is_compat(thread) else self.graphs.app_of(thread).store  # a LangGraph graph's: raw
        lineage = await store.lineage(thread)
        return list(lineage_segments(lineage, NO_END))

    async def _cancelled(self, run_id: str) -> bool:
        """Whether the run ``run_id`` was stopped (cancelled, or deleted by a rollback), which writes no event of its
        own: its stream ends. Not ``interrupted``: a run that stops at an interrupt writes ``run.interrupted``, which
        its stream must still read (a run another run's strategy interrupted ends its stream at that run's end)."""
        run = await self.runs.get(run_id)
        return run is None or run.status == "cancelled"

    async def _checkpoint_state(self, ns: str, thread_id: str, checkpoint_id: str | None, step: int | None) -> Snapshot:
        return await self.state(ns, thread_id, checkpoint_id, step)
