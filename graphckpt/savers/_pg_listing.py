"""PostgresSaver's listings and reads across threads: pages and lists of threads, a thread family, the forks of a
thread, the event log's reads, the storage usage, and the sweepers' advisory lock. Mixed into
:class:`~graphckpt.savers.postgres.PostgresSaver`; every statement is one of :mod:`graphckpt.savers._pg_sql`'s."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from graphckpt import ids
from graphckpt.savers._checks import brief, check_filter
from graphckpt.savers._pg_sql import page_query, thread_from_row
from graphckpt.savers._thread_pages import ThreadPage, check_limit, page_from_rows, sealed_page
from graphckpt.savers.base import FAMILY_SEP, Status, StoredEvent, ThreadRecord
from graphckpt.savers.usage import StorageUsage, ThreadUsage

if TYPE_CHECKING:
    import psycopg

    from graphckpt.savers._pg_io import PostgresConnections
    from graphckpt.savers._sealing import Sealer


class PostgresListings:
    """Mixed into :class:`~graphckpt.savers.postgres.PostgresSaver`."""

    if TYPE_CHECKING:
        sealer: Sealer
        _io: PostgresConnections

        async def _fetch(self, action: str, query: str, params: Any) -> list[tuple[Any, ...]]: ...
        def _connection(self) -> contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]: ...

    async def storage_usage(self, *, top: int = 10) -> StorageUsage:
        tables = dict(await self._fetch("storage usage", "usage_tables", {"schema": self._io.schema}))
        rows = await self._fetch("storage usage", "usage_threads", {"top": top})
        threads = [ThreadUsage(r[0], int(r[1]), int(r[2])) for r in rows]
        return StorageUsage(tables, threads, sum(tables.values()), int(rows[0][3]) if rows else 0)

    @contextlib.asynccontextmanager
    async def sweep_lock(self, name: str) -> AsyncIterator[bool]:
        key = f"graphckpt:{self._io.schema or ''}:{name}"
        with self._io.errors(f"sweep lock {name!r}"):
            async with self._connection() as conn:
                cur = await conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (key,))
                [(mine,)] = await cur.fetchall()
                try:
                    yield bool(mine)
                finally:
                    if mine:
                        await conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))

    async def thread_forks(self, thread_id: str) -> list[str]:
        rows = await self._fetch(f"forks of thread {brief(thread_id)!r}", "thread_forks", {"tid": thread_id})
        return [row[0] for row in rows]

    async def list_threads(self, *, status: Status | None = None) -> list[ThreadRecord]:
        now = ids.now()
        query = {None: "list_threads", "running": "list_threads_running", "crashed": "list_threads_leased"}
        rows = await self._fetch("list_threads", query.get(status, "list_threads_status"), {"status": status})
        records = self.sealer.open_threads([thread_from_row(row, now) for row in rows])
        return [r for r in records if r.status == status] if status in ("crashed", "running") else records

    async def list_family(self, family: str) -> list[ThreadRecord]:
        params = {"tid": family, "lo": family + FAMILY_SEP, "hi": family + "\x7f"}
        now, rows = ids.now(), await self._fetch("list_family", "list_family", params)
        return self.sealer.open_threads([thread_from_row(row, now) for row in rows])

    async def page_threads(
        self,
        *,
        limit: int = 50,
        after: str | None = None,
        status: Status | None = None,
        metadata: Mapping[str, Any] | None = None,
        parent_thread_id: str | None = None,
    ) -> ThreadPage:
        check_limit(limit)
        page_query(limit, after, status, metadata, parent_thread_id)  # checks the cursor
        if metadata:
            check_filter(metadata)
        plain = self.sealer.split_filter(metadata)

        async def read(n: int, cursor: str | None) -> ThreadPage:
            query, params = page_query(n, cursor, status, plain, parent_thread_id)
            now, rows = ids.now(), await self._fetch("page_threads", query, params)
            return page_from_rows(
                self.sealer.open_threads([thread_from_row(r, now) for r in rows]), limit=n, status=status
            )

        if metadata and plain is not metadata:
            return await sealed_page(read, limit=limit, after=after, metadata=metadata)
        return await read(limit, after)

    # -- events ------------------------------------------------------------------------------------------------------

    async def read_events(
        self, segments: Sequence[tuple[str, int, int]], *, after: tuple[int, int], limit: int
    ) -> list[StoredEvent]:
        params = {
            "tids": [t for t, _, _ in segments],
            "firsts": [f for _, f, _ in segments],
            "uppers": [u for _, _, u in segments],
            "step": after[0],
            "seq": after[1],
            "limit": limit,
        }
        rows = await self._fetch("read of events", "read_events", params)
        return self.sealer.open_events(
            [StoredEvent(t, int(st), int(sq), k, p, float(at)) for t, st, sq, k, p, at in rows]
        )

    async def event_kind(self, thread_id: str, step: int, seq: int) -> str | None:
        params = {"tid": thread_id, "step": step, "seq": seq}
        rows = await self._fetch("read of an event", "event_kind", params)
        return str(rows[0][0]) if rows else None

    async def events_version(self) -> int:
        [(version,)] = await self._fetch("read of the event counter", "events_version", {})
        return int(version)
