"""How :class:`~graphckpt.savers.sqlite.SqliteSaver` reaches its file: connections, the threads that use them, and
one seam, :meth:`SqliteConnections.run`, that every saver method goes through.

Three connections (one for ``":memory:"``, which is private to its connection):

``inline``
    busy timeout 0, used under :attr:`SqliteConnections.inline_lock` (taken without blocking) on whatever thread
    calls: the event loop's. A call runs here when the lock is free and SQLite does not answer ``SQLITE_BUSY``; then
    nothing has run, and the call goes to a thread instead.
``writer``
    the writer thread's (one :class:`~concurrent.futures.ThreadPoolExecutor` thread), under its own lock; waits up to
    ``busy_timeout`` for another connection's write lock. The writes waiting for it commit in groups (one
    transaction and one fsync for all; see :mod:`graphckpt.savers._sqlite_group`). Opened first: it checks the
    file's owner, sets WAL mode and applies missing migrations.
``reader``
    read-only, opened on the reader thread by the first read that cannot run inline, used only there, so reads never
    queue behind writes.

Why a call runs where it does, and what each durability setting means, is told in :mod:`graphckpt.savers.sqlite`.

Not built on aiosqlite: every aiosqlite call is a hop to its connection's thread (there is no inline path), and its
public API runs one statement per hop, where a transaction here is one function and at most one hop. Measured with
``synchronous="NORMAL"`` (no fsync to hide the hops), per operation against the inline path: a commit through
aiosqlite's public API 3.7x (this module's writer thread: 2.2x), an indexed read 7x.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar, cast

from graphckpt.errors import SaverError, StoreNotSetUpError
from graphckpt.savers._sqlite_group import GroupCommit
from graphckpt.savers._sqlite_readonly import open_read_only, read_only_error, read_only_reason
from graphckpt.savers._sqlite_schema import (
    MIGRATIONS,
    PAGE_SIZE,
    check_owner,
    extend_with_zeros,
    is_busy,
    migrate,
    open_hint,
    retry_busy,
    saver_error,
)
from graphckpt.savers._sqlite_writes import transaction

__all__ = ["SqliteConnections"]

_T = TypeVar("_T")
Body = Callable[[sqlite3.Connection], _T]


class SqliteConnections:
    """The connections of one open :class:`~graphckpt.savers.sqlite.SqliteSaver` and their threads.

    ``synchronous`` is applied to every connection (validated by the saver); ``preallocate_wal`` bytes of WAL are
    written ahead by the first write after :meth:`open` (with ``"FULL"`` only)."""

    def __init__(self, path: str, *, synchronous: str, busy_timeout: float, preallocate_wal: int) -> None:
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.preallocate_wal = preallocate_wal
        self.writer: sqlite3.Connection | None = None  # used under writer_lock, on the writer thread
        self.inline: sqlite3.Connection | None = None  # busy timeout 0; used under inline_lock, on any thread
        self.writer_lock = threading.Lock()
        self.inline_lock = threading.Lock()  # the same lock as writer_lock for ":memory:" (one connection)
        self._writer_thread: ThreadPoolExecutor | None = None
        self._reader_thread: ThreadPoolExecutor | None = None  # started on the first read that cannot run inline
        self._reader: sqlite3.Connection | None = None  # used only on the reader thread
        self._wal_ready = True  # set at each open: whether the WAL file is written ahead yet
        self._wal_path = ""
        self._group = GroupCommit(lambda: self.writer, self.writer_lock, self.error, synchronous)
        """The writes handed to the writer thread, committed in groups (see :mod:`graphckpt.savers._sqlite_group`)."""
        self.read_only: str | None = None  # why the file is open read-only (see _sqlite_readonly), or None
        self._uri: str | None = None  # the read-only URI every connection opens, or None (the path)

    # -- the seam ----------------------------------------------------------------------------------------------------

    async def run(self, fn: Body[_T], *, write: bool, inline: bool, relaxed: bool = False) -> _T:
        """``fn(connection)``: one ``BEGIN IMMEDIATE`` transaction when ``write``, else a read (WAL: it never waits
        for a writer). With ``inline`` it first tries the inline connection, on the calling thread, and runs there
        when that needs no waiting; otherwise on the writer thread (a write) or the reader thread (a read): one hop
        however many statements ``fn`` runs. ``relaxed``: the write commits without the fsync of
        ``synchronous=FULL``. A :class:`sqlite3.Error` is raised as :class:`~graphckpt.errors.SaverError` naming
        the file; other exceptions of ``fn`` pass through (after the rollback of a write)."""
        if write:
            if self.read_only is not None:
                raise read_only_error(self.path, self.read_only)
            if not self._wal_ready:
                fn = self._preallocating_wal(fn)
            relaxed = relaxed and self.synchronous == "FULL"
            if inline and self.inline_lock.acquire(blocking=False):
                try:
                    done, result = self._write_inline(fn, relaxed)
                finally:
                    self.inline_lock.release()
                if done:
                    return result
            assert self._writer_thread is not None
            return await self._group.write(self._writer_thread, fn, relaxed)
        if inline and self.inline_lock.acquire(blocking=False):
            try:
                assert self.inline is not None
                return fn(self.inline)
            except sqlite3.Error as exc:
                if not is_busy(exc):
                    raise self.error(exc) from exc
            finally:
                self.inline_lock.release()
        return await self._read_on_thread(fn)

    def _write_inline(self, fn: Body[_T], relaxed: bool) -> tuple[bool, _T]:
        """Under ``inline_lock``: ``(True, result)``, or ``(False, None)`` when the write lock is held (nothing ran)."""
        conn = self.inline
        assert conn is not None
        try:
            try:
                if relaxed:  # not allowed inside a transaction; set back to FULL right after it
                    conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("BEGIN IMMEDIATE")  # busy timeout 0: fails at once if anybody holds the lock
            except sqlite3.Error as exc:
                if relaxed:
                    conn.execute("PRAGMA synchronous = FULL")
                if not is_busy(exc):
                    raise self.error(exc) from exc
                return False, cast(_T, None)
            try:
                result = fn(conn)
                conn.execute("COMMIT")
                return True, result
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                if relaxed:
                    conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error as exc:
            raise self.error(exc) from exc

    def _preallocating_wal(self, fn: Body[_T]) -> Body[_T]:
        """``fn``, first extending the WAL file ahead (see :mod:`graphckpt.savers.sqlite`); runs under the write
        lock."""

        def run(conn: sqlite3.Connection) -> _T:
            if not self._wal_ready:
                self._wal_ready = True  # once per open saver, even if it fails: it only saves time
                extend_with_zeros(self._wal_path, self.preallocate_wal)
            return fn(conn)

        return run

    async def _read_on_thread(self, fn: Body[_T]) -> _T:
        loop = asyncio.get_running_loop()
        try:
            if self.path == ":memory:":  # one connection: its lock is taken on the writer thread
                return await self.on_writer(lambda: self._read_on_writer(fn))
            if self._reader_thread is None:
                self._reader_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="graphckpt-sqlite-reader")
            return await loop.run_in_executor(self._reader_thread, self._read_here, fn)
        except sqlite3.Error as exc:
            raise self.error(exc) from exc

    def _read_here(self, fn: Body[_T]) -> _T:
        """On the reader thread: ``fn`` on its read-only connection, opened here on first use. Its threads (like the
        writer's) are a :class:`~concurrent.futures.ThreadPoolExecutor`'s, which the interpreter stops at exit: a
        saver left open never hangs exit (tested)."""
        if self._reader is None:
            self._reader = self._connection(timeout=self.busy_timeout, read_only=True)
        return fn(self._reader)

    def _read_on_writer(self, fn: Body[_T]) -> _T:
        """On the writer thread, for ``":memory:"`` (one connection shared by everything)."""
        assert self.writer is not None
        with self.writer_lock:
            return fn(self.writer)

    async def on_writer(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` on the writer thread."""
        assert self._writer_thread is not None
        return await asyncio.get_running_loop().run_in_executor(self._writer_thread, fn)

    async def truncate_wal(self) -> bool:
        """Copy the WAL into the database and truncate it to zero bytes (``PRAGMA wal_checkpoint(TRUNCATE)``),
        waiting up to ``busy_timeout`` for readers; ``False`` when a reader kept it from finishing.

        Erasure: every connection runs with ``secure_delete = ON``, so a page or cell freed by a delete is
        overwritten with zeros in the WAL frame that frees it; once that frame is copied back and the WAL is
        truncated, no byte of a deleted row remains in the database, WAL or ``-shm`` file (which holds only the WAL
        index). The next write extends the WAL again with zeros (see ``preallocate_wal``)."""

        def run() -> bool:
            assert self.writer is not None
            with self.writer_lock:
                try:
                    busy = self.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                except sqlite3.Error as exc:
                    raise self.error(exc) from exc
                self._wal_ready = self.synchronous != "FULL" or not self.preallocate_wal
                return not busy

        if self.path == ":memory:":
            return True
        return await self.on_writer(run)

    def error(self, exc: sqlite3.Error) -> SaverError:
        return saver_error(exc, self.path, self.busy_timeout)

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def open(self, create: bool) -> None:
        """Start the writer thread and open the writer and inline connections; with ``create=False`` refuse (with
        :class:`~graphckpt.errors.StoreNotSetUpError`) a file that does not exist. On failure nothing stays open."""
        self._writer_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="graphckpt-sqlite")
        try:
            self.writer = await self.on_writer(lambda: self._connect(create))
            if self.path == ":memory:":  # one private database: one connection, one lock
                self.inline, self.inline_lock = self.writer, self.writer_lock
            else:
                self.inline = await self.on_writer(lambda: self._connection(timeout=0.0))
                self.inline_lock = threading.Lock()
            self._wal_ready = self.path == ":memory:" or self.synchronous != "FULL" or not self.preallocate_wal
        except BaseException as exc:
            await self.close()
            if isinstance(exc, sqlite3.Error):
                raise self.error(exc) from exc
            if isinstance(exc, OSError):  # a directory on the way that we may not enter, say
                raise SaverError(f"cannot open SQLite database {self.path!r}: {exc}") from exc
            raise

    async def close(self) -> None:
        """Close the connections (each after the calls already queued on its thread) and stop the threads."""
        executor, conn, inline = self._writer_thread, self.writer, self.inline
        read_executor, self._reader_thread = self._reader_thread, None
        self._writer_thread = self.writer = self.inline = None
        loop = asyncio.get_running_loop()
        try:
            if read_executor is not None:
                try:
                    await loop.run_in_executor(read_executor, self._close_reader)
                finally:
                    read_executor.shutdown(wait=True)
            if inline is not None and inline is not conn:
                with self.inline_lock:  # not while a read or write on another thread still uses it
                    inline.close()
        finally:
            if executor is not None:
                try:
                    if conn is not None:
                        await loop.run_in_executor(executor, conn.close)
                finally:
                    executor.shutdown(wait=True)

    def abandon(self) -> None:
        """For a saver collected while open: let its threads exit; the connections close when collected."""
        for executor in (self._writer_thread, self._reader_thread):
            if executor is not None:
                executor.shutdown(wait=False)

    def _close_reader(self) -> None:
        """On the reader thread, after the reads queued before it."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    def _connection(self, *, timeout: float, read_only: bool = False) -> sqlite3.Connection:
        """A connection with the saver's pragmas. ``check_same_thread=False``: each one is used by one thread at a
        time (under its lock, or only on its own thread), not always the thread that opened it."""
        if self._uri is not None:
            return sqlite3.connect(self._uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
        conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")  # validated by the saver; set per connection
            conn.execute("PRAGMA secure_delete = ON")  # see truncate_wal
            if read_only:
                conn.execute("PRAGMA query_only = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect(self, create: bool) -> sqlite3.Connection:
        """Open the writer connection (on the writer thread), set pragmas and apply missing migrations; first,
        before anything is written, refuse a file that is not graphckpt's (see ``_sqlite_schema.check_owner``)."""
        parent = Path(self.path).resolve().parent
        if self.path != ":memory:" and not parent.is_dir():
            raise SaverError(f"cannot open SQLite database {self.path!r}: directory {str(parent)!r} does not exist")
        if not create and (self.path == ":memory:" or not os.path.exists(self.path)):
            raise StoreNotSetUpError(f"no graphckpt database at {self.path!r}: the file does not exist")
        self.read_only = read_only_reason(self.path)
        if self.read_only is not None:  # every read works, every write is refused (see run)
            conn, self._uri = open_read_only(self.path, self.busy_timeout)
            try:
                check_owner(conn, self.path, create=False)
            except BaseException:
                conn.close()
                raise
            return conn
        self._uri = None
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
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA secure_delete = ON")
            if conn.execute("PRAGMA user_version").fetchone()[0] != len(MIGRATIONS):
                transaction(conn, lambda conn: migrate(conn, self.path))
        except BaseException:
            conn.close()
            raise
        return conn
