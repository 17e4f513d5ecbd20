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
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import starmap
from pathlib import Path
from typing import Any, Literal, TypeVar

from graphckpt import ids
from graphckpt.errors import SaverError, StoreNotSetUpError
from graphckpt.savers import _sqlite_writes as tx
from graphckpt.savers._checks import brief, check_storable, filter_can_match, utf8_safe
from graphckpt.savers._events_sql import SQLITE_EVENT_KIND, SQLITE_VERSION, sqlite_read_events
from graphckpt.savers._sqlite_runs import SqliteRuns
from graphckpt.savers._sqlite_schema import (
    MIGRATIONS,
    PAGE_SIZE,
    PREALLOCATE_WAL,
    check_owner,
    extend_with_zeros,
    is_busy,
    migrate,
    open_hint,
    retry_busy,
    saver_error,
)
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
)
from graphckpt.savers.base import (
    Blob,
    BlobRange,
    Owner,
    Saver,
    Status,
    StoredCheckpoint,
    StoredEvent,
    StoredWrite,
    ThreadRecord,
)

__all__ = ["SqliteSaver"]

_T = TypeVar("_T")
Synchronous = Literal["FULL", "NORMAL", "OFF"]


class SqliteSaver(SqliteRuns, Saver):
    """Checkpoints in one SQLite file (WAL mode), shared safely by several processes.

    ``path``: the database file (created if missing; its directory must exist), or ``":memory:"`` for a private
    in-memory database. ``synchronous``: ``"FULL"`` (default), ``"NORMAL"`` or ``"OFF"``; see the module docstring
    for exactly what each survives. ``busy_timeout``: seconds to wait for another connection's write lock before
    raising :class:`~graphckpt.errors.SaverError`. ``commit_inline`` / ``read_inline``: run writes / reads on the
    calling thread when that needs no waiting (see the module docstring); ``False`` hands each to a thread.
    ``preallocate_wal``: bytes of WAL file written ahead on the first write, with ``synchronous="FULL"`` (see the
    module docstring); 0 turns it off. ``events``: whether commits write their steps' events to the durable event
    log (see :mod:`graphckpt.savers.events`).
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
        self._wal_ready = True  # set at each open: whether the WAL file is written ahead yet
        self._wal_path = ""
        self._executor: ThreadPoolExecutor | None = None  # the writer thread
        self._conn: sqlite3.Connection | None = None  # the writer's connection, used under _conn_lock
        self._inline: sqlite3.Connection | None = None  # busy timeout 0; used under _inline_lock, on any thread
        self._conn_lock = threading.Lock()
        self._inline_lock = threading.Lock()  # the same lock as _conn_lock for ":memory:" (one connection)
        self._read_executor: ThreadPoolExecutor | None = None  # the reader thread, started on the first read that
        self._reader: sqlite3.Connection | None = None  # cannot run inline; its connection is used only there
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"SqliteSaver({self.path!r}, synchronous={self.synchronous!r})"

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def setup(self, *, create: bool = True) -> None:
        if not self._open:
            async with self._lock:
                await self._open_locked(create)

    async def _open_locked(self, create: bool) -> None:
        if self._open:  # somebody else opened it while we waited for the lock
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="graphckpt-sqlite")
        try:
            self._conn = await self._submit(lambda: self._connect(create))
            if self.path == ":memory:":  # one private database: one connection, one lock
                self._inline, self._inline_lock = self._conn, self._conn_lock
            else:
                self._inline = await self._submit(lambda: self._connection(timeout=0.0))
                self._inline_lock = threading.Lock()
            self._wal_ready = self.path == ":memory:" or self.synchronous != "FULL" or not self.preallocate_wal
        except BaseException as exc:
            await self._release()
            if isinstance(exc, sqlite3.Error):
                raise self._error(exc) from exc
            if isinstance(exc, OSError):  # a directory on the way that we may not enter, say
                raise SaverError(f"cannot open SQLite database {self.path!r}: {exc}") from exc
            raise
        self._open = True

    async def aclose(self) -> None:
        async with self._lock:
            self._open = False
            await self._release()

    async def _release(self) -> None:
        executor, conn, inline = self._executor, self._conn, self._inline
        read_executor, self._read_executor = self._read_executor, None
        self._executor = self._conn = self._inline = None
        loop = asyncio.get_running_loop()
        try:
            if read_executor is not None:
                try:
                    await loop.run_in_executor(read_executor, self._close_reader)
                finally:
                    read_executor.shutdown(wait=True)
            if inline is not None and inline is not conn:
                with self._inline_lock:  # not while a read or write on another thread still uses it
                    inline.close()
        finally:
            if executor is not None:
                try:
                    if conn is not None:
                        await loop.run_in_executor(executor, conn.close)
                finally:
                    executor.shutdown(wait=True)

    def __del__(self) -> None:
        super().__del__()  # warns with ResourceWarning when still open
        for name in ("_executor", "_read_executor"):
            executor = getattr(self, name, None)
            if executor is not None:
                executor.shutdown(wait=False)  # its thread exits; the sqlite3 connections close when collected

    def _connection(self, *, timeout: float, read_only: bool = False) -> sqlite3.Connection:
        """A connection with this saver's pragmas. ``check_same_thread=False``: each one is used by one thread at a
        time (under its lock, or only on its own thread), not always the thread that opened it."""
        conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")  # validated in __init__; set per connection
            if read_only:
                conn.execute("PRAGMA query_only = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect(self, create: bool = True) -> sqlite3.Connection:
        """Open the writer connection (on the executor thread), set pragmas and apply missing migrations; first,
        before anything is written, refuse a file that is not graphckpt's (see ``_sqlite_schema.check_owner``)."""
        parent = Path(self.path).resolve().parent
        if self.path != ":memory:" and not parent.is_dir():
            raise SaverError(f"cannot open SQLite database {self.path!r}: directory {str(parent)!r} does not exist")
        if not create and (self.path == ":memory:" or not os.path.exists(self.path)):
            raise StoreNotSetUpError(f"no graphckpt database at {self.path!r}: the file does not exist")
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise SaverError(f"cannot open SQLite database {self.path!r}: {exc}{open_hint(self.path)}") from exc
        # where SQLite keeps the WAL (it resolves the path as it opens the file), not wherever a relative path points
        # after a chdir: the preallocation must never touch another database's WAL
        self._wal_path = os.path.realpath(self.path) + "-wal"
        try:
            check_owner(conn, self.path, create)
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE:d}")  # a new file only: before WAL and the first table
            mode = retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0], self.busy_timeout)
            if mode != "wal" and self.path != ":memory:":
                raise SaverError(f"SQLite database {self.path!r} cannot use WAL mode (journal_mode is {mode!r})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")  # validated in __init__
            if conn.execute("PRAGMA user_version").fetchone()[0] != len(MIGRATIONS):
                tx.transaction(conn, lambda conn: migrate(conn, self.path))
        except BaseException:
            conn.close()
            raise
        return conn

    # -- plumbing ----------------------------------------------------------------------------------------------------

    def _error(self, exc: sqlite3.Error) -> SaverError:
        return saver_error(exc, self.path, self.busy_timeout)

    async def _submit(self, fn: Callable[[], _T]) -> _T:
        assert self._executor is not None
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _write(self, body: Callable[[sqlite3.Connection], _T], *, relaxed: bool = False) -> _T:
        """Run ``body`` as one transaction: inline when the write lock is free at once, else on the writer thread
        (one hop, however many statements). ``relaxed``: commit it without the fsync of ``synchronous=FULL``
        (see :data:`RELAXED_WRITES`)."""
        if not self._open:
            await self.setup()
        if not self._wal_ready:
            body = self._preallocating_wal(body)
        relaxed = relaxed and self.synchronous == "FULL"
        if self.commit_inline and self._inline_lock.acquire(blocking=False):
            try:
                conn = self._inline
                assert conn is not None
                try:
                    if relaxed:  # not allowed inside a transaction; set back to FULL right after it
                        conn.execute("PRAGMA synchronous = NORMAL")
                    conn.execute("BEGIN IMMEDIATE")  # busy timeout 0: fails at once if anybody holds the lock
                except sqlite3.Error as exc:
                    if relaxed:
                        conn.execute("PRAGMA synchronous = FULL")
                    if not is_busy(exc):
                        raise self._error(exc) from exc
                else:
                    try:
                        result = body(conn)
                        conn.execute("COMMIT")
                        return result
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                    finally:
                        if relaxed:
                            conn.execute("PRAGMA synchronous = FULL")
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
            finally:
                self._inline_lock.release()
        conn, lock = self._conn, self._conn_lock  # nothing ran: the writer thread waits for the lock instead
        assert conn is not None

        def run() -> _T:
            with lock:
                try:
                    if relaxed:
                        conn.execute("PRAGMA synchronous = NORMAL")
                    return tx.transaction(conn, body)
                except sqlite3.Error as exc:
                    raise self._error(exc) from exc
                finally:
                    if relaxed:
                        conn.execute("PRAGMA synchronous = FULL")

        return await self._submit(run)

    def _preallocating_wal(self, body: Callable[[sqlite3.Connection], _T]) -> Callable[[sqlite3.Connection], _T]:
        """``body``, first extending the WAL file ahead (see the module docstring); runs under the write lock."""

        def run(conn: sqlite3.Connection) -> _T:
            if not self._wal_ready:
                self._wal_ready = True  # once per open saver, even if it fails: it only saves time
                extend_with_zeros(self._wal_path, self.preallocate_wal)
            return body(conn)

        return run

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """One query: inline when the inline connection is free, else one hop to the reader thread. A parameter
        that no row can hold (text with a lone surrogate, which writes refuse) matches no row."""
        try:
            return await self._query(sql, params)
        except UnicodeEncodeError:
            return []

    async def _query(self, sql: str, params: Sequence[Any]) -> list[Row]:
        if not self._open:
            await self.setup()
        if self.read_inline and self._inline_lock.acquire(blocking=False):
            try:
                conn = self._inline
                assert conn is not None
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                if not is_busy(exc):
                    raise self._error(exc) from exc
            finally:
                self._inline_lock.release()
        return await self._fetch_on_thread(sql, params)

    async def _fetch_on_thread(self, sql: str, params: Sequence[Any]) -> list[Row]:
        try:
            if self.path == ":memory:":  # one connection: its lock is taken on the writer thread
                return await asyncio.get_running_loop().run_in_executor(self._executor, self._fetch_here, sql, params)
            if self._read_executor is None:
                self._read_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="graphckpt-sqlite-reader")
            return await asyncio.get_running_loop().run_in_executor(self._read_executor, self._read, sql, params)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def _read(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """Run on the reader thread: one query on its read-only connection, opened here on first use. Its threads
        (like the writer's) are a :class:`~concurrent.futures.ThreadPoolExecutor`'s, which the interpreter stops at
        exit: a saver left open never hangs exit (tested)."""
        if self._reader is None:
            self._reader = self._connection(timeout=self.busy_timeout, read_only=True)
        return self._reader.execute(sql, params).fetchall()

    def _close_reader(self) -> None:
        """Run on the reader thread, after the reads queued before it."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    def _fetch_here(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """Run on the writer thread, for ``":memory:"`` (one connection shared by everything)."""
        assert self._conn is not None
        with self._conn_lock:
            return self._conn.execute(sql, params).fetchall()

    # -- writes ------------------------------------------------------------------------------------------------------

    async def commit(
        self,
        checkpoint: StoredCheckpoint,
        *,
        expected_head: str | None,
        run_id: str,
        owner: Owner | None = None,
        lease_until: float | None = None,
    ) -> None:
        check_storable(checkpoint, expected_head=expected_head, run_id=run_id)
        cp = checkpoint
        where = f"metadata of checkpoint {brief(cp.checkpoint_id)!r} in thread {brief(cp.thread_id)!r}"
        meta = dump_json(dict(cp.metadata), where)
        now = ids.now()
        lease = (owner, lease_until) if owner is not None and lease_until is not None else None
        await self._write(
            lambda conn: tx.commit(conn, cp, expected_head=expected_head, run_id=run_id, meta=meta, now=now,
                                   lease=lease, events=self.events)
        )  # fmt: skip

    async def claim(
        self,
        thread_id: str,
        *,
        expected_head: str,
        expected_run_id: str,
        run_id: str,
        owner: Owner | None = None,
        lease_until: float | None = None,
    ) -> int:
        check_storable(thread_id=thread_id, expected_head=expected_head, expected_run_id=expected_run_id, run_id=run_id)
        now = ids.now()
        lease = (owner, lease_until) if owner is not None and lease_until is not None else None
        return await self._write(
            lambda conn: tx.claim(
                conn, thread_id, expected_head=expected_head, expected_run_id=expected_run_id, run_id=run_id, now=now,
                lease=lease,
            )
        )  # fmt: skip

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
    ) -> None:
        check_storable(thread_id=thread_id, checkpoint_id=checkpoint_id, run_id=run_id)
        error = utf8_safe(error)
        for w in writes:
            check_storable(task_id=w.task_id)
        now = ids.now()
        rows = [(thread_id, checkpoint_id, w.task_id, w.kind, w.index, w.data) for w in writes]

        await self._write(
            lambda conn: tx.put_writes(
                conn, thread_id, checkpoint_id, rows, run_id=run_id, status=status, error=error, now=now
            ),
            relaxed=status is None and bool(writes) and all(w.kind == "started" for w in writes),
        )

    async def delete_thread(self, thread_id: str) -> None:
        check_storable(thread_id=thread_id)
        now = ids.now()

        await self._write(lambda conn: tx.delete_thread(conn, thread_id, now))

    # -- reads -------------------------------------------------------------------------------------------------------

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        rows = await self._fetch(f"{THREAD_SELECT} AND thread_id = ?", (thread_id,))
        return thread_from_row(rows[0], ids.now()) if rows else None

    async def list_threads(self, *, status: Status | None = None) -> list[ThreadRecord]:
        now = ids.now()
        sql, params = THREAD_SELECT, list[Any]()
        if status in STATUS_CLAUSE:
            sql, params = sql + STATUS_CLAUSE[status], [now]
        elif status is not None:
            sql, params = f"{sql} AND status = ?", [status]
        rows = await self._fetch(f"{sql} ORDER BY updated_at DESC, thread_id DESC", params)
        return [thread_from_row(row, now) for row in rows]

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
        return checkpoint_from_row(rows[0]) if rows else None

    async def list_checkpoints(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before_step: int | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredCheckpoint]:
        if filter and not filter_can_match(filter):
            return []
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
        return list(map(checkpoint_from_row, await self._fetch(sql, params)))

    async def get_blobs(self, ranges: Sequence[BlobRange]) -> list[Blob]:
        if len(ranges) == 1:  # the common case: one range scan of the unique index, already in order
            r = ranges[0]
            rows = await self._fetch(
                f"{BLOB_SELECT} WHERE thread_id = ? AND channel = ? AND step BETWEEN ? AND ? ORDER BY step",
                (r.thread_id, r.channel, r.min_step, r.max_step),
            )
            return list(starmap(Blob, rows))  # rows in Blob's field order
        chunks = [ranges[start : start + MAX_RANGES_PER_QUERY] for start in range(0, len(ranges), MAX_RANGES_PER_QUERY)]
        out: list[Blob] = []
        for chunk in chunks:  # one query unless there are very many ranges
            out += starmap(Blob, await self._fetch(*blobs_in_ranges(chunk)))
        if len(chunks) > 1:  # a blob inside ranges of two chunks came twice
            unique = {(b.thread_id, b.channel, b.step): b for b in out}
            out = sorted(unique.values(), key=lambda b: (b.channel, b.step, b.thread_id))
        return out

    async def get_writes(self, thread_id: str, checkpoint_id: str) -> list[StoredWrite]:
        rows = await self._fetch(
            "SELECT task_id, kind, idx, data FROM writes WHERE thread_id = ? AND checkpoint_id = ?"
            " ORDER BY task_id, kind, idx",
            (thread_id, checkpoint_id),
        )
        return [StoredWrite(row[0], row[1], row[2], row[3]) for row in rows]

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
        return [StoredEvent(t, st, sq, k, json.loads(p), at) for t, st, sq, k, p, at in rows]

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
