"""``SqliteSaver``: the embedded default saver, one SQLite file in WAL mode, safe for several processes at once.

Storage layout (schema version 1; see ``_sqlite_schema.MIGRATIONS``; new files have pages of ``PAGE_SIZE`` = 4 KiB)::

    threads      one row per thread (WITHOUT ROWID, keyed by thread_id): head (checkpoint id, step), status, owning
                 run_id, created/updated times, fork origin (parent thread and checkpoint), error, the head's
                 metadata (JSON text), and ``deleted``: a deleted thread whose rows a fork still needs keeps its row
                 (so its id is not reused) with deleted = 1; it is invisible to get_thread/list_threads.
    checkpoints  one row per checkpoint (WITHOUT ROWID, primary key (thread_id, step), so a history page is one
                 range scan of the table), unique (thread_id, checkpoint_id), parent thread and checkpoint,
                 created_at, status, metadata (JSON text, filtered in SQL with json_each and bound parameters) and
                 ``body``, the engine's opaque bytes. Never updated.
    blobs        channel data, a rowid table (rows are ~1 KiB or more: kept out of a WITHOUT ROWID b-tree, whose
                 interior pages would hold whole rows), unique (thread_id, channel, step): kind and bytes.
    writes       pending writes (WITHOUT ROWID), primary key (thread_id, checkpoint_id, task_id, kind, idx): the
                 bytes of one task result, journaled effect, interrupt, resume answer or error. Deleted by the next
                 commit.

The schema version is SQLite's ``PRAGMA user_version``; ``MIGRATIONS`` is append-only, and opening a file applies
the missing migrations in one ``BEGIN IMMEDIATE`` transaction, so processes opening one file together do not race;
the switch to WAL mode is retried for up to ``busy_timeout`` (SQLite refuses it at once, without waiting, while
another process holds the write lock of a file it is still creating).
Before it writes anything (a pragma, a table), opening reads the file's table names: a file with tables of its own
and not graphckpt's belongs to another application (whose ``user_version`` and journal mode are its own) and is
refused with :class:`~graphckpt.errors.StoreNotSetUpError`, untouched. ``setup(create=False)`` also refuses a missing
or empty file, without creating it.
The page size applies to files created by this version (SQLite fixes it when the first table is created).

Transactions. Every write method (commit, claim, put_writes, delete_thread) is one ``BEGIN IMMEDIATE`` transaction
run as one function on a plain :mod:`sqlite3` connection. The compare-and-set is an
``UPDATE ... WHERE head_checkpoint_id = ? AND run_id = ?`` whose rowcount is checked inside that transaction.
``BEGIN IMMEDIATE`` takes the write lock first, so writers in other processes wait for each other up to
``busy_timeout`` seconds, then :class:`~graphckpt.errors.SaverError` names the file.

Where it runs (``commit_inline``, default ``True``). SQLite serializes the writers of one file anyway, and a durable
commit costs about 0.2 ms (mostly the WAL fsync), less than the two thread switches of handing it to another thread
(about 0.1 ms). So a write first tries to run on the calling thread (the event loop's), on an "inline" connection
whose busy timeout is 0, guarded by a :class:`threading.Lock` taken without blocking: when the lock is free and
``BEGIN IMMEDIATE`` gets the file's write lock at once, the whole transaction runs there and the loop is blocked for
its duration (the fsync included). It never waits for a lock on the loop: if another connection or process holds the
write lock (``SQLITE_BUSY``) or another thread is using the inline connection, nothing has run yet and the write goes
to the saver's writer thread, whose connection waits up to ``busy_timeout``. A write handed to the writer thread
still commits or rolls back as a whole there if its caller is cancelled; an inline write cannot be interrupted.
Trade-off: with ``commit_inline`` the loop stalls for each commit's fsync (other coroutines wait ~0.2 ms on a local
SSD, longer on slow disks or network filesystems); pass ``commit_inline=False`` to keep the loop free at the cost of
one thread hop per write.

Reads (``read_inline``, default ``True``) likewise run on the calling thread, on the same inline connection, when it
is free: an indexed read costs a few microseconds there against ~0.1 ms for a hop, and building a long history's
Python objects holds the GIL wherever it runs. Thanks to WAL a read never waits for a writer. A read that finds the
inline connection busy, or gets ``SQLITE_BUSY``, or all reads with ``read_inline=False``, go to the reader thread's
connection (read-only, opened on first use, on its own thread), so reads never queue behind writes.

Metadata is parsed lazily: each row's metadata is a read-only mapping that decodes its JSON text on first access,
so listing a long history does not parse what nobody reads.

Durability (``synchronous``):

``"FULL"`` (the default)
    a commit that returned survives a process crash, SIGKILL, an OS crash and power loss. Costs one fsync of the
    WAL per commit (about 0.2 ms on a local SSD).
``"NORMAL"``
    with WAL, a commit that returned survives a process crash or SIGKILL (the data is in the OS page cache);
    on an OS crash or power loss the last transactions before the crash may be lost (rolled back, never
    half-applied: the file stays consistent). Much faster on slow disks.
``"OFF"``
    no fsync at all; an OS crash or power loss may lose recent transactions or, rarely, corrupt the file.

One exception under ``"FULL"``: the audit record's "about to call" rows (:data:`RELAXED_WRITES`) commit as with
``"NORMAL"``; the call's result, the next commit, makes them durable with it.

WAL preallocation (``preallocate_wal``, default 4 MiB, with ``"FULL"`` only). SQLite appends each commit's pages to
the ``-wal`` file, and while that file grows every fsync must also make its new size durable: on ext4 a commit costs
~0.15 ms against ~0.10 ms when it overwrites blocks the file already has. SQLite reuses the WAL file from its start
after each checkpoint (every ~1000 pages), but deletes it when its last connection closes, so every process that
opens the file pays the growth again. So the first write of each open saver, holding the write lock, extends the
WAL file with zeros (written, not just reserved: reserved blocks cost the same as growth) up to ``preallocate_wal``
bytes, and fsyncs it once (~5 ms for 4 MiB). It only appends past the file's end, which no other connection writes
while we hold the write lock, and SQLite reads a WAL only up to the first frame whose salt and checksum do not
match its header, which zeros never do. Pass ``preallocate_wal=0`` to turn it off (say, for many small files).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from itertools import starmap
from typing import Any, Literal, TypeVar

from graphckpt import ids
from graphckpt.encryption import Keyring
from graphckpt.savers import _sqlite_writes as tx
from graphckpt.savers._checks import brief, check_filter, check_storable, utf8_safe
from graphckpt.savers._events_sql import SQLITE_EVENT_KIND, SQLITE_VERSION, sqlite_read_events
from graphckpt.savers._sealing import Sealer
from graphckpt.savers._sqlite_crons import SqliteCrons
from graphckpt.savers._sqlite_io import SqliteConnections
from graphckpt.savers._sqlite_items import SqliteItems
from graphckpt.savers._sqlite_runs import SqliteRuns
from graphckpt.savers._sqlite_schema import PREALLOCATE_WAL
from graphckpt.savers._sqlite_sql import (
    BLOB_SELECT,
    CP_SELECT,
    MAX_RANGES_PER_QUERY,
    STATUS_CLAUSE,
    THREAD_SELECT,
    Row,
    blobs_in_ranges,
    checkpoint_from_row,
    dump_json,
    filter_clause,
    thread_from_row,
    thread_page_query,
)
from graphckpt.savers._sqlite_waits import SqliteWaits
from graphckpt.savers._thread_pages import ThreadPage, check_limit, decode_cursor, page_from_rows, sealed_page
from graphckpt.savers.base import (
    FAMILY_SEP,
    Blob,
    BlobRange,
    Owner,
    Saver,
    Status,
    StoredCheckpoint,
    StoredEvent,
    StoredWrite,
    ThreadRecord,
    kept_key,
)
from graphckpt.savers.usage import SQLITE_THREAD_BYTES, StorageUsage, ThreadUsage

__all__ = ["SqliteSaver"]

_T = TypeVar("_T")
Synchronous = Literal["FULL", "NORMAL", "OFF"]


class SqliteSaver(SqliteRuns, SqliteItems, SqliteWaits, SqliteCrons, Saver):
    """Checkpoints in one SQLite file (WAL mode), shared safely by several processes.

    ``path``: the database file (created if missing; its directory must exist), or ``":memory:"`` for a private
    in-memory database. ``synchronous``: ``"FULL"`` (default), ``"NORMAL"`` or ``"OFF"``; see the module docstring
    for exactly what each survives. ``busy_timeout``: seconds to wait for another connection's write lock before
    raising :class:`~graphckpt.errors.SaverError`. ``commit_inline`` / ``read_inline``: run writes / reads on the
    calling thread when that needs no waiting (see the module docstring); ``False`` hands each to a thread.
    ``preallocate_wal``: bytes of WAL file written ahead on the first write, with ``synchronous="FULL"`` (see the
    module docstring); 0 turns it off. ``events``: whether commits write their steps' events to the durable event
    log (see :mod:`graphckpt.savers.events`). ``encryption``: a :class:`~graphckpt.encryption.Keyring` that seals
    values, writes, event updates and metadata before they reach the file (default: ``GRAPHCKPT_ENCRYPTION_KEYS``);
    ``require_encryption``: refuse plaintext rows (see :mod:`graphckpt.savers._sealing`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 5.0,
        commit_inline: bool = True,
        read_inline: bool = True,
        preallocate_wal: int = PREALLOCATE_WAL,
        events: bool = True,
        encryption: Keyring | None = None,
        require_encryption: bool | None = None,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL", "OFF"):
            raise ValueError(f"synchronous must be 'FULL', 'NORMAL' or 'OFF', not {synchronous!r}")
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout must be >= 0, not {busy_timeout!r}")
        if isinstance(preallocate_wal, bool) or not isinstance(preallocate_wal, int) or preallocate_wal < 0:
            raise ValueError(f"preallocate_wal must be an int of bytes >= 0, not {preallocate_wal!r}")
        self.path = os.fspath(path)
        self.synchronous: Synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.commit_inline = commit_inline
        self.read_inline = read_inline
        self.preallocate_wal = preallocate_wal
        self.events = events
        self.sealer = Sealer.configured(encryption, require_encryption)
        """Encryption at rest (see :mod:`graphckpt.savers._sealing`)."""
        self._io = SqliteConnections(
            self.path, synchronous=synchronous, busy_timeout=busy_timeout, preallocate_wal=preallocate_wal
        )
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"SqliteSaver({self.path!r}, synchronous={self.synchronous!r})"

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def setup(self, *, create: bool = True) -> None:
        if not self._open:
            async with self._lock:
                if not self._open:  # nobody else opened it while we waited for the lock
                    await self._io.open(create)
                    self._open = True

    async def aclose(self) -> None:
        async with self._lock:
            self._open = False
            await self._io.close()

    def __del__(self) -> None:
        super().__del__()  # warns with ResourceWarning when still open
        io = getattr(self, "_io", None)
        if io is not None:
            io.abandon()

    # -- the seam: every method below runs its SQL through these two -------------------------------------------------

    async def _write(self, body: Callable[[sqlite3.Connection], _T], *, relaxed: bool = False) -> _T:
        """Run ``body`` as one transaction, inline or on the writer thread (see ``commit_inline``). ``relaxed``:
        commit it without the fsync of ``synchronous=FULL`` (see :data:`RELAXED_WRITES`)."""
        if not self._open:
            await self.setup()
        return await self._io.run(body, write=True, inline=self.commit_inline, relaxed=relaxed)

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """One query, inline or on the reader thread (see ``read_inline``). A parameter that no row can hold (text
        with a lone surrogate, which writes refuse) matches no row."""
        if not self._open:
            await self.setup()
        try:
            return await self._io.run(
                lambda conn: conn.execute(sql, params).fetchall(), write=False, inline=self.read_inline
            )
        except UnicodeEncodeError:
            return []

    # -- writes ------------------------------------------------------------------------------------------------------

    async def commit(
        self,
        checkpoint: StoredCheckpoint,
        *,
        expected_head: str | None,
        run_id: str,
        owner: Owner | None = None,
        lease_until: float | None = None,
        kept_writes: Mapping[str, Sequence[StoredWrite]] | None = None,
    ) -> None:
        check_storable(checkpoint, expected_head=expected_head, run_id=run_id)
        cp = self.sealer.seal_checkpoint(checkpoint)
        kept = self._kept_rows(checkpoint.thread_id, kept_writes)
        where = f"metadata of checkpoint {brief(cp.checkpoint_id)!r} in thread {brief(cp.thread_id)!r}"
        meta = dump_json(dict(cp.metadata), where)
        now = ids.now()
        lease = (owner, lease_until) if owner is not None and lease_until is not None else None

        def body(conn: sqlite3.Connection) -> None:
            tx.commit(
                conn,
                cp,
                expected_head=expected_head,
                run_id=run_id,
                meta=meta,
                now=now,
                lease=lease,
                events=self.events,
            )
            for key, rows in kept:
                tx.put_writes(
                    conn, cp.thread_id, key, rows, run_id=run_id, status=None, error=None, now=now, anywhere=True
                )

        await self._write(body)

    def _kept_rows(
        self, thread_id: str, kept_writes: Mapping[str, Sequence[StoredWrite]] | None
    ) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """``commit``'s ``kept_writes`` as sealed rows, by the key they are stored under."""
        out = []
        for checkpoint_id, writes in (kept_writes or {}).items():
            key = kept_key(checkpoint_id)
            check_storable(checkpoint_id=key)
            for w in writes:
                check_storable(task_id=w.task_id)
            sealed = self.sealer.seal_writes(thread_id, key, writes)
            out.append((key, [(thread_id, key, w.task_id, w.kind, w.index, w.data) for w in sealed]))
        return out

    async def claim(
        self,
        thread_id: str,
        *,
        expected_head: str,
        expected_run_id: str,
        run_id: str,
        owner: Owner | None = None,
        lease_until: float | None = None,
        take_epoch: int | None = None,
    ) -> int:
        check_storable(thread_id=thread_id, expected_head=expected_head, expected_run_id=expected_run_id, run_id=run_id)
        now = ids.now()
        lease = (owner, lease_until) if owner is not None and lease_until is not None else None
        return await self._write(
            lambda conn: tx.claim(
                conn,
                thread_id,
                expected_head=expected_head,
                expected_run_id=expected_run_id,
                run_id=run_id,
                now=now,
                lease=lease,
                take_epoch=take_epoch,
            )
        )

    async def expire_lease(self, thread_id: str, *, epoch: int) -> bool:
        check_storable(thread_id=thread_id)
        now = ids.now() - 0.001  # strictly past for every later read
        expired: bool = await self._write(lambda conn: tx.expire(conn, thread_id, epoch=epoch, now=now))
        return expired

    async def heartbeat(self, thread_id: str, *, run_id: str, lease_until: float) -> None:
        check_storable(thread_id=thread_id, run_id=run_id)
        now = ids.now()
        await self._write(lambda conn: tx.heartbeat(conn, thread_id, run_id=run_id, lease_until=lease_until, now=now))

    async def release(self, thread_id: str, *, run_id: str) -> None:
        check_storable(thread_id=thread_id, run_id=run_id)
        await self._write(lambda conn: tx.release(conn, thread_id, run_id=run_id))

    async def put_writes(
        self,
        thread_id: str,
        checkpoint_id: str,
        writes: Sequence[StoredWrite],
        *,
        run_id: str,
        status: Status | None = None,
        error: str | None = None,
        anywhere: bool = False,
    ) -> None:
        check_storable(thread_id=thread_id, checkpoint_id=checkpoint_id, run_id=run_id)
        error = utf8_safe(error)
        for w in writes:
            check_storable(task_id=w.task_id)
        now = ids.now()
        sealed = self.sealer.seal_writes(thread_id, checkpoint_id, writes)
        rows = [(thread_id, checkpoint_id, w.task_id, w.kind, w.index, w.data) for w in sealed]

        put = functools.partial(tx.put_writes, run_id=run_id, status=status, error=error, now=now, anywhere=anywhere)
        await self._write(
            lambda conn: put(conn, thread_id, checkpoint_id, rows),
            relaxed=status is None and bool(writes) and all(w.kind == "started" for w in writes),
        )

    async def delete_thread(self, thread_id: str) -> None:
        check_storable(thread_id=thread_id)
        now = ids.now()

        await self._write(lambda conn: tx.delete_thread(conn, thread_id, now))
        await self._io.truncate_wal()  # erasure: see SqliteConnections.truncate_wal

    async def drop_steps(self, thread_id: str, below: int, blobs_from: Mapping[str, int]) -> int:
        dropped = await self._write(lambda conn: tx.drop_steps(conn, thread_id, below, dict(blobs_from)))
        if dropped:
            await self._io.truncate_wal()  # erasure, as for delete_thread
        return dropped

    async def storage_usage(self, *, top: int = 10) -> StorageUsage:
        def read(conn: sqlite3.Connection) -> StorageUsage:
            tables: dict[str, int] = {}
            owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE tbl_name IS NOT NULL"))
            for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
                table = owner.get(name, name)  # an index counts for its table
                tables[table] = tables.get(table, 0) + int(size)
            rows = conn.execute(SQLITE_THREAD_BYTES, (top,)).fetchall()
            files = [self.path, f"{self.path}-wal"] if self.path != ":memory:" else []
            total = sum(os.path.getsize(f) for f in files if os.path.exists(f)) or sum(tables.values())
            threads = [ThreadUsage(r[0], int(r[1]), int(r[2])) for r in rows]
            return StorageUsage(tables, threads, total, int(rows[0][3]) if rows else 0)

        if not self._open:
            await self.setup()
        return await self._io.run(read, write=False, inline=self.read_inline)

    async def thread_forks(self, thread_id: str) -> list[str]:
        return [row[0] for row in await self._fetch(tx.FORKS, (thread_id,))]

    # -- reads -------------------------------------------------------------------------------------------------------

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        rows = await self._fetch(f"{THREAD_SELECT} AND thread_id = ?", (thread_id,))
        return self.sealer.open_thread(thread_from_row(rows[0], ids.now())) if rows else None

    async def list_threads(self, *, status: Status | None = None) -> list[ThreadRecord]:
        now = ids.now()
        sql, params = THREAD_SELECT, list[Any]()
        if status in STATUS_CLAUSE:
            sql += STATUS_CLAUSE[status]
        elif status is not None:
            sql, params = f"{sql} AND status = ?", [status]
        rows = await self._fetch(f"{sql} ORDER BY updated_at DESC, thread_id DESC", params)
        records = self.sealer.open_threads([thread_from_row(row, now) for row in rows])
        return [r for r in records if r.status == status] if status in STATUS_CLAUSE else records

    async def list_family(self, family: str) -> list[ThreadRecord]:
        now, sql = ids.now(), f"{THREAD_SELECT} AND (thread_id = ? OR (thread_id >= ? AND thread_id < ?))"
        rows = await self._fetch(f"{sql} ORDER BY thread_id", (family, family + FAMILY_SEP, family + "\x7f"))
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
        if after is not None:
            decode_cursor(after)
        if metadata:
            check_filter(metadata)
        plain = self.sealer.split_filter(metadata)

        async def read(n: int, cursor: str | None) -> ThreadPage:
            bound = decode_cursor(cursor) if cursor is not None else None
            now, query = ids.now(), thread_page_query(n, bound, status, plain, parent_thread_id)
            rows = await self._fetch(*query)
            return page_from_rows(
                self.sealer.open_threads([thread_from_row(r, now) for r in rows]), limit=n, status=status
            )

        if metadata and plain is not metadata:
            return await sealed_page(read, limit=limit, after=after, metadata=metadata)
        return await read(limit, after)

    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None
    ) -> StoredCheckpoint | None:
        params: list[Any]
        if checkpoint_id is not None:
            sql, params = f"{CP_SELECT} WHERE thread_id = ? AND checkpoint_id = ?", [thread_id, checkpoint_id]
            if step is not None:
                sql, params = f"{sql} AND step = ?", [*params, step]
        elif step is not None:
            sql, params = f"{CP_SELECT} WHERE thread_id = ? AND step = ?", [thread_id, step]
        else:
            sql = f"{CP_SELECT} WHERE thread_id = ? AND step = (SELECT head_step FROM threads"  # the head's step
            sql, params = f"{sql} WHERE thread_id = ? AND deleted = 0)", [thread_id, thread_id]
        rows = await self._fetch(sql, params)
        return self.sealer.open_checkpoint(checkpoint_from_row(rows[0])) if rows else None

    async def list_checkpoints(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before_step: int | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredCheckpoint]:
        if filter:
            check_filter(filter)
        self.sealer.check_filter(filter)
        clauses, params = ["c.thread_id = ?"], list[Any]([thread_id])
        if before_step is not None:
            clauses.append("c.step < ?")
            params.append(before_step)
        for key, value in (filter or {}).items():
            clause, clause_params = filter_clause(key, value)
            clauses.append(clause)
            params.extend(clause_params)
        sql = f"{CP_SELECT} AS c WHERE {' AND '.join(clauses)} ORDER BY c.step DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return self.sealer.open_checkpoints(list(map(checkpoint_from_row, await self._fetch(sql, params))))

    async def get_blobs(self, ranges: Sequence[BlobRange]) -> list[Blob]:
        if len(ranges) == 1:  # the common case: one range scan of the unique index, already in order
            r = ranges[0]
            rows = await self._fetch(
                f"{BLOB_SELECT} WHERE thread_id = ? AND channel = ? AND step BETWEEN ? AND ? ORDER BY step",
                (r.thread_id, r.channel, r.min_step, r.max_step),
            )
            return self.sealer.open_blobs(list(starmap(Blob, rows)))  # rows in Blob's field order
        chunks = [ranges[start : start + MAX_RANGES_PER_QUERY] for start in range(0, len(ranges), MAX_RANGES_PER_QUERY)]
        out: list[Blob] = []
        for chunk in chunks:  # one query unless there are very many ranges
            out += starmap(Blob, await self._fetch(*blobs_in_ranges(chunk)))
        if len(chunks) > 1:  # a blob inside ranges of two chunks came twice
            unique = {(b.thread_id, b.channel, b.step): b for b in out}
            out = sorted(unique.values(), key=lambda b: (b.channel, b.step, b.thread_id))
        return self.sealer.open_blobs(out)

    async def get_writes(self, thread_id: str, checkpoint_id: str) -> list[StoredWrite]:
        rows = await self._fetch(
            "SELECT task_id, kind, idx, data FROM writes WHERE thread_id = ? AND checkpoint_id = ?"
            " ORDER BY task_id, kind, idx",
            (thread_id, checkpoint_id),
        )
        return self.sealer.open_writes(
            thread_id, checkpoint_id, [StoredWrite(row[0], row[1], row[2], row[3]) for row in rows]
        )

    # -- events ------------------------------------------------------------------------------------------------------

    async def read_events(
        self, segments: Sequence[tuple[str, int, int]], *, after: tuple[int, int], limit: int
    ) -> list[StoredEvent]:
        if not segments:
            return []
        params: list[Any] = [after[0], after[0], after[1]]
        for segment in segments:
            params += segment
        rows = await self._fetch(sqlite_read_events(len(segments)), [*params, limit])
        return self.sealer.open_events([StoredEvent(t, st, sq, k, json.loads(p), at) for t, st, sq, k, p, at in rows])

    async def event_kind(self, thread_id: str, step: int, seq: int) -> str | None:
        rows = await self._fetch(SQLITE_EVENT_KIND, (thread_id, step, seq))
        return str(rows[0][0]) if rows else None

    async def events_version(self) -> int:
        return int((await self._fetch(SQLITE_VERSION, ()))[0][0])


RELAXED_WRITES = "started"
"""The pending writes committed with ``synchronous=NORMAL`` even by a ``"FULL"`` saver: the audit record's
"about to call" rows (write kind ``started``), written before every journaled call. Such a commit survives a
process crash or SIGKILL (the WAL frames are in the OS page cache, and the next ``FULL`` commit, the call's own
``effect`` row, fsyncs them with it); only an OS crash or power loss in between can lose one, which loses that
line of the audit record, never a result. It saves one fsync per external call (several ms on slow disks)."""
