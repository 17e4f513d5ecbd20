"""``SqliteSaver``: the embedded default saver, one SQLite file in WAL mode, safe for several processes at once.

Storage layout (schema version 1; see ``_MIGRATIONS``; new files have pages of ``_PAGE_SIZE`` = 4 KiB)::

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

The schema version is SQLite's ``PRAGMA user_version``; ``_MIGRATIONS`` is append-only, and opening a file applies
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
inline connection busy, or gets ``SQLITE_BUSY``, or all reads with ``read_inline=False``, go to an :mod:`aiosqlite`
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
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import starmap
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, cast

import aiosqlite

from graphckpt import ids
from graphckpt.errors import (
    SaverError,
    SerializationError,
    StoreNotSetUpError,
    ThreadConflictError,
    ThreadNotFoundError,
)
from graphckpt.savers.base import (
    Blob,
    BlobRange,
    Saver,
    Status,
    StoredCheckpoint,
    StoredWrite,
    ThreadRecord,
    brief,
    check_storable,
    filter_can_match,
    nul_free,
    utf8_safe,
)
from graphckpt.savers.lazyjson import LazyJsonMapping

__all__ = ["SqliteSaver"]

_T = TypeVar("_T")
Synchronous = Literal["FULL", "NORMAL", "OFF"]
_Row = tuple[Any, ...]

_PAGE_SIZE: Final = 4096
"""Page size of new files (SQLite's default). Most of a long list's bytes sit in chunk rows (see
:data:`graphckpt.codec.CHUNK`), whose overflow pages are full whatever their size, so larger pages would mostly
make every small table and index bigger (a file has eight; each needs at least one page). Measured on benchmark W2
(300 x 1 KiB appends): 4 KiB pages 1.45x the messages, 8 KiB 1.60x. Files made with 8 KiB pages keep them."""
_PREALLOCATE_WAL: Final = 4 * 1024 * 1024
"""About one checkpoint cycle of the WAL: SQLite's default ``wal_autocheckpoint`` of 1000 pages of 4 KiB."""

# Migration 1 was changed in place before the first release (page size, WITHOUT ROWID tables, checkpoints keyed by
# (thread_id, step)). Files made by earlier development versions have the same columns and constraints, so they keep
# working; they just keep their old layout.
_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (  # 1: initial schema
        """CREATE TABLE threads (
            thread_id TEXT PRIMARY KEY, head_checkpoint_id TEXT NOT NULL, head_step INTEGER NOT NULL,
            status TEXT NOT NULL, run_id TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
            parent_thread_id TEXT, parent_checkpoint_id TEXT, error TEXT, metadata TEXT NOT NULL,
            deleted INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID""",
        """CREATE TABLE checkpoints (
            thread_id TEXT NOT NULL, step INTEGER NOT NULL, checkpoint_id TEXT NOT NULL, parent_thread_id TEXT,
            parent_checkpoint_id TEXT, created_at REAL NOT NULL, status TEXT NOT NULL, metadata TEXT NOT NULL,
            body BLOB NOT NULL, PRIMARY KEY (thread_id, step)) WITHOUT ROWID""",
        "CREATE UNIQUE INDEX checkpoints_by_id ON checkpoints (thread_id, checkpoint_id)",
        """CREATE INDEX checkpoints_forks ON checkpoints (parent_thread_id)
            WHERE parent_thread_id IS NOT NULL AND parent_thread_id <> thread_id""",
        """CREATE TABLE blobs (
            thread_id TEXT NOT NULL, channel TEXT NOT NULL, step INTEGER NOT NULL, kind TEXT NOT NULL,
            data BLOB NOT NULL, UNIQUE (thread_id, channel, step))""",
        """CREATE TABLE writes (
            thread_id TEXT NOT NULL, checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, kind TEXT NOT NULL,
            idx INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (thread_id, checkpoint_id, task_id, kind, idx))
            WITHOUT ROWID""",
    ),
)

# In the order of StoredCheckpoint's fields (rows are converted positionally), as are _THREAD_SELECT's for ThreadRecord.
_CP_COLUMNS = (
    "thread_id, checkpoint_id, parent_thread_id, parent_checkpoint_id, step, created_at, status, metadata, body"
)
_CP_SELECT = f"SELECT {_CP_COLUMNS} FROM checkpoints"
_THREAD_SELECT = (
    "SELECT thread_id, head_checkpoint_id, head_step, status, run_id, created_at, updated_at, parent_thread_id,"
    " parent_checkpoint_id, error, metadata FROM threads WHERE deleted = 0"
)
_BLOB_SELECT = "SELECT thread_id, channel, step, kind, data FROM blobs"
_MAX_RANGES_PER_QUERY = 8000  # 4 bound parameters each, under SQLite's default limit of 32766


def _dump_json(value: Any, what: str) -> str:
    """Canonical JSON text: sorted keys, compact, and integral floats written as integers, so JSON-equal values (see
    :func:`~graphckpt.savers.base.json_equal`) stored and filtered give equal text. (So a stored ``2.0`` reads back
    as ``2``: equal in Python and in JSON.)"""
    try:
        try:  # most metadata has no integral float and only dicts and lists: one pass
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
            if _INTEGRAL_FLOAT.search(text) is None:
                return text
        except TypeError:  # a Mapping that is not a dict, say
            pass
        return json.dumps(_integral(value), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON-compatible: {exc}") from exc


_INTEGRAL_FLOAT = re.compile(r"\.0(?=[,\]}]|$)")
"""How ``json.dumps`` writes a float that is an integer below 2**53 (``2.0``); a match inside a string only costs the
slow path."""


def _integral(value: Any) -> Any:
    if type(value) is float and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, Mapping):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_integral(v) for v in value]
    return value


_NUL_FREE_METADATA = r"""(CASE WHEN instr(c.metadata, '\u0000') OR instr(c.metadata, '\uffff')
    THEN replace(replace(replace(replace(c.metadata, '\\', char(1)), '\uffff', '\uffff1'), '\u0000', '\uffff0'),
        char(1), '\\')
    ELSE c.metadata END)"""
"""``c.metadata`` with :func:`~graphckpt.savers.base.nul_free`'s mapping applied when it escapes NUL or U+FFFF
(``json_each`` stops a string or key at NUL). The text is ASCII (written by :func:`_dump_json`), so a raw ``char(1)``
never occurs in it and stands in for each escaped backslash meanwhile: ``\\u0000`` (a backslash, then the letters
``u0000``) is not a NUL."""


def _filter_clause(key: str, value: Any) -> tuple[str, list[Any]]:
    """SQL matching one metadata filter item on checkpoint ``c``; only fixed SQL text, the key and value are bound.

    ``json_each`` decodes keys itself, so any key (quotes, dots, backslashes, non-ASCII) works, unlike a JSON path.
    Equality is JSON equality: null, true and false by type, numbers numerically (integers beyond 64 bits by their
    digits), strings as text, arrays and objects by their canonical text (both sides are written with sorted keys).
    Keys and strings holding NUL go through :func:`~graphckpt.savers.base.nul_free` on both sides.
    """
    key, value = nul_free(key), nul_free(value)
    where = f"EXISTS (SELECT 1 FROM json_each({_NUL_FREE_METADATA}) AS m WHERE m.key = ? AND {{}})"
    if value is None:
        return where.format("m.type = 'null'"), [key]
    if isinstance(value, bool):
        return where.format("m.type = ?"), [key, "true" if value else "false"]
    if isinstance(value, int | float):
        clause, params = _number_clause(value)
        return where.format(clause), [key, *params]
    if isinstance(value, str):
        return where.format("m.type = 'text' AND m.value = ?"), [key, value]
    text = _dump_json(value, f"metadata filter value for key {brief(key)!r}")
    return where.format("m.type IN ('array', 'object') AND json(m.value) = json(?)"), [key, text]


_TABLES: Final = frozenset({"threads", "checkpoints", "blobs", "writes"})
"""graphckpt's tables: a file that has others and not these belongs to somebody else."""


def _open_hint(path: str) -> str:
    """Why SQLite may be unable to open ``path`` ("unable to open database file" says nothing more)."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(path) and not os.access(parent, os.W_OK):
        return f" (its directory {parent!r} is not writable, so the file cannot be created there)"
    if os.path.exists(path) and not os.access(path, os.R_OK):
        return " (the file is not readable)"
    if not os.access(parent, os.W_OK):
        return f" (its directory {parent!r} is not writable: SQLite must create the -wal and -shm files beside it)"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return " (the file is not writable)"
    return ""


_NUMBER_TEXT = f"({_NUL_FREE_METADATA} -> m.fullkey)"
"""The stored JSON text of the number ``m``: its digits, for an integer beyond 64 bits (``json_each`` calls it an
``integer`` but gives its value as a rounded double)."""


def _number_clause(value: float) -> tuple[str, list[Any]]:
    """SQL matching a stored number equal to ``value`` exactly, as Python compares an int and a float: no rounding
    through doubles (``-2**63 - 1``, which ``json_each`` reads as the double ``-2**63``, does not equal ``-2**63``).
    A stored integer is compared as an integer (by its digits beyond 64 bits), a stored float as a float, and only
    when ``value`` converts to that type exactly. NaN equals nothing."""
    parts: list[str] = []
    params: list[Any] = []
    whole = value if isinstance(value, int) else int(value) if value.is_integer() else None
    if whole is not None:
        if -(2**63) <= whole < 2**63:
            parts.append("m.type = 'integer' AND typeof(m.value) = 'integer' AND m.value = ?")
            params.append(whole)
        else:  # SQLite's integers are 64-bit: compare the digits
            parts.append(f"m.type = 'integer' AND typeof(m.value) = 'real' AND {_NUMBER_TEXT} = ?")
            params.append(str(whole))
    try:
        as_float = float(value)
    except OverflowError:  # an integer beyond any float: no stored float equals it
        as_float = None
    if as_float is not None and as_float == value:
        parts.append("m.type = 'real' AND m.value = ?")  # written as a float: with a point or an exponent
        params.append(as_float)
    if not parts:
        return "0", []
    return "(" + " OR ".join(f"({part})" for part in parts) + ")", params


def _checkpoint(row: _Row) -> StoredCheckpoint:
    # positional, in _CP_COLUMNS order: a history page builds one per row
    return StoredCheckpoint(row[0], row[1], row[2], row[3], row[4], row[5], row[6], LazyJsonMapping(row[7]), row[8])


def _thread(row: _Row) -> ThreadRecord:
    return ThreadRecord(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9], LazyJsonMapping(row[10])
    )


def _is_busy(exc: sqlite3.Error) -> bool:
    """The lock is held by another connection (``SQLITE_BUSY``/``SQLITE_LOCKED``, any extended code)."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in str(exc)


def _retry_busy(statement: Callable[[], _T], timeout: float) -> _T:
    """Run ``statement``, retrying while the file is locked, for up to ``timeout`` seconds.

    For statements that SQLite refuses at once instead of calling the busy handler: switching a file to WAL while
    another connection holds its write lock in rollback mode (processes creating one file together) fails
    immediately with ``SQLITE_BUSY`` whatever the busy timeout, since waiting there could deadlock."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            return statement()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _extend_with_zeros(path: str, size: int) -> None:
    """Append written zeros to the existing file ``path`` up to ``size`` bytes and fsync it; never touches the bytes it
    already has. Best effort: a missing file or an OS error (a full disk, say) leaves it as it is."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return
    try:
        end = os.fstat(fd).st_size
        piece = bytes(min(size - end, 1 << 20)) if end < size else b""
        while end < size:
            end += os.pwrite(fd, piece[: size - end], end)
        if piece:
            os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _transaction(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], _T]) -> _T:
    """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction; roll back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = body(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def _cas_failed(conn: sqlite3.Connection, thread_id: str, what: str) -> Exception:
    """The error for a compare-and-set on a thread that matched no row: missing thread, or somebody moved it."""
    row = conn.execute(
        "SELECT head_checkpoint_id, run_id FROM threads WHERE thread_id = ? AND deleted = 0", (thread_id,)
    ).fetchone()
    if row is None:
        return ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
    return ThreadConflictError(
        f"thread {brief(thread_id)!r} was moved or claimed by another run ({what}); its head is {row[0]!r}"
    )


class SqliteSaver(Saver):
    """Checkpoints in one SQLite file (WAL mode), shared safely by several processes.

    ``path``: the database file (created if missing; its directory must exist), or ``":memory:"`` for a private
    in-memory database. ``synchronous``: ``"FULL"`` (default), ``"NORMAL"`` or ``"OFF"``; see the module docstring
    for exactly what each survives. ``busy_timeout``: seconds to wait for another connection's write lock before
    raising :class:`~graphckpt.errors.SaverError`. ``commit_inline`` / ``read_inline``: run writes / reads on the
    calling thread when that needs no waiting (see the module docstring); ``False`` hands each to a thread.
    ``preallocate_wal``: bytes of WAL file written ahead on the first write, with ``synchronous="FULL"`` (see the
    module docstring); 0 turns it off.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 5.0,
        commit_inline: bool = True,
        read_inline: bool = True,
        preallocate_wal: int = _PREALLOCATE_WAL,
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
        self._wal_ready = True  # set at each open: whether the WAL file is written ahead yet
        self._wal_path = ""
        self._executor: ThreadPoolExecutor | None = None  # the writer thread
        self._conn: sqlite3.Connection | None = None  # the writer's connection, used under _conn_lock
        self._inline: sqlite3.Connection | None = None  # busy timeout 0; used under _inline_lock, on any thread
        self._conn_lock = threading.Lock()
        self._inline_lock = threading.Lock()  # the same lock as _conn_lock for ":memory:" (one connection)
        self._reader: aiosqlite.Connection | None = None  # opened on the first read that cannot run inline
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
        reader = self._reader
        self._executor = self._conn = self._inline = self._reader = None
        loop = asyncio.get_running_loop()
        try:
            if reader is not None:
                await reader.close()
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
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=False)  # its thread exits; the sqlite3 connection closes when collected

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
        before anything is written, refuse a file that is not graphckpt's (see :meth:`_check_owner`)."""
        parent = Path(self.path).resolve().parent
        if self.path != ":memory:" and not parent.is_dir():
            raise SaverError(f"cannot open SQLite database {self.path!r}: directory {str(parent)!r} does not exist")
        if not create and (self.path == ":memory:" or not os.path.exists(self.path)):
            raise StoreNotSetUpError(f"no graphckpt database at {self.path!r}: the file does not exist")
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise SaverError(f"cannot open SQLite database {self.path!r}: {exc}{_open_hint(self.path)}") from exc
        # where SQLite keeps the WAL (it resolves the path as it opens the file), not wherever a relative path points
        # after a chdir: the preallocation must never touch another database's WAL
        self._wal_path = os.path.realpath(self.path) + "-wal"
        try:
            self._check_owner(conn, create)
            conn.execute(f"PRAGMA page_size = {_PAGE_SIZE:d}")  # a new file only: before WAL and the first table
            mode = _retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0], self.busy_timeout)
            if mode != "wal" and self.path != ":memory:":
                raise SaverError(f"SQLite database {self.path!r} cannot use WAL mode (journal_mode is {mode!r})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")  # validated in __init__
            if conn.execute("PRAGMA user_version").fetchone()[0] != len(_MIGRATIONS):
                _transaction(conn, self._migrate)
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_owner(self, conn: sqlite3.Connection, create: bool) -> None:
        """Reads only (no pragma or table is written): refuse a file holding tables of its own but not graphckpt's
        (another application's database, whose ``user_version`` and journal mode are its own), and with
        ``create=False`` a file without graphckpt's tables."""
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise SaverError(f"cannot open SQLite database {self.path!r}: {exc}{_open_hint(self.path)}") from exc
        ours = tables >= _TABLES
        if tables and not ours:
            mine = sorted(tables - _TABLES)[:5]
            raise StoreNotSetUpError(
                f"SQLite database {self.path!r} is not a graphckpt database: it has tables of its own "
                f"({', '.join(map(repr, mine))}{', ...' if len(tables - _TABLES) > len(mine) else ''}) and not "
                "graphckpt's; graphckpt leaves it untouched (give it a file of its own)"
            )
        if not ours and not create:
            raise StoreNotSetUpError(f"no graphckpt database at {self.path!r}: the file has no graphckpt tables")

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])  # re-read under the write lock
        if version > len(_MIGRATIONS):
            raise SaverError(
                f"SQLite database {self.path!r} has schema version {version}, newer than this graphckpt "
                f"understands ({len(_MIGRATIONS)}); upgrade graphckpt"
            )
        for number in range(version, len(_MIGRATIONS)):
            for statement in _MIGRATIONS[number]:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {len(_MIGRATIONS):d}")

    # -- plumbing ----------------------------------------------------------------------------------------------------

    def _error(self, exc: sqlite3.Error) -> SaverError:
        if _is_busy(exc):
            return SaverError(
                f"SQLite database {self.path!r} is locked: another connection held its write lock for longer "
                f"than busy_timeout={self.busy_timeout}s"
            )
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        hint = _open_hint(self.path) if code in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY) else ""
        return SaverError(f"SQLite database {self.path!r} failed: {exc}{hint}")

    async def _submit(self, fn: Callable[[], _T]) -> _T:
        assert self._executor is not None
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _write(self, body: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``body`` as one transaction: inline when the write lock is free at once, else on the writer thread
        (one hop, however many statements)."""
        if not self._open:
            await self.setup()
        if not self._wal_ready:
            body = self._preallocating_wal(body)
        if self.commit_inline and self._inline_lock.acquire(blocking=False):
            try:
                conn = self._inline
                assert conn is not None
                try:
                    conn.execute("BEGIN IMMEDIATE")  # busy timeout 0: fails at once if anybody holds the lock
                except sqlite3.Error as exc:
                    if not _is_busy(exc):
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
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
            finally:
                self._inline_lock.release()
        conn, lock = self._conn, self._conn_lock  # nothing ran: the writer thread waits for the lock instead
        assert conn is not None

        def run() -> _T:
            with lock:
                try:
                    return _transaction(conn, body)
                except sqlite3.Error as exc:
                    raise self._error(exc) from exc

        return await self._submit(run)

    def _preallocating_wal(self, body: Callable[[sqlite3.Connection], _T]) -> Callable[[sqlite3.Connection], _T]:
        """``body``, first extending the WAL file ahead (see the module docstring); runs under the write lock."""

        def run(conn: sqlite3.Connection) -> _T:
            if not self._wal_ready:
                self._wal_ready = True  # once per open saver, even if it fails: it only saves time
                _extend_with_zeros(self._wal_path, self.preallocate_wal)
            return body(conn)

        return run

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[_Row]:
        """One query: inline when the inline connection is free, else one hop to the reader thread. A parameter
        that no row can hold (text with a lone surrogate, which writes refuse) matches no row."""
        try:
            return await self._query(sql, params)
        except UnicodeEncodeError:
            return []

    async def _query(self, sql: str, params: Sequence[Any]) -> list[_Row]:
        if not self._open:
            await self.setup()
        if self.read_inline and self._inline_lock.acquire(blocking=False):
            try:
                conn = self._inline
                assert conn is not None
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                if not _is_busy(exc):
                    raise self._error(exc) from exc
            finally:
                self._inline_lock.release()
        return await self._fetch_on_thread(sql, params)

    async def _fetch_on_thread(self, sql: str, params: Sequence[Any]) -> list[_Row]:
        try:
            if self.path == ":memory:":  # one connection: its lock is taken on the writer thread
                return await asyncio.get_running_loop().run_in_executor(self._executor, self._fetch_here, sql, params)
            if self._reader is None:
                self._reader = await self._open_reader()
            return cast(list[_Row], list(await self._reader.execute_fetchall(sql, params)))
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    async def _open_reader(self) -> aiosqlite.Connection:
        """The aiosqlite connection for reads that cannot run inline (one thread hop per query)."""
        pending = aiosqlite.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        worker = getattr(pending, "_thread", None)  # aiosqlite's worker thread is not a daemon: a saver left
        if isinstance(worker, threading.Thread):  # open would hang interpreter exit (tested)
            worker.daemon = True
        reader = await pending
        try:
            await reader.execute(f"PRAGMA synchronous = {self.synchronous}")
            await reader.execute("PRAGMA query_only = ON")
        except BaseException:
            await reader.close()
            raise
        return reader

    def _fetch_here(self, sql: str, params: Sequence[Any]) -> list[_Row]:
        """Run on the writer thread, for ``":memory:"`` (one connection shared by everything)."""
        assert self._conn is not None
        with self._conn_lock:
            return self._conn.execute(sql, params).fetchall()

    # -- writes ------------------------------------------------------------------------------------------------------

    async def commit(self, checkpoint: StoredCheckpoint, *, expected_head: str | None, run_id: str) -> None:
        check_storable(checkpoint, expected_head=expected_head, run_id=run_id)
        cp = checkpoint
        where = f"metadata of checkpoint {brief(cp.checkpoint_id)!r} in thread {brief(cp.thread_id)!r}"
        meta = _dump_json(dict(cp.metadata), where)
        now = ids.now()
        blobs = [(b.thread_id, b.channel, b.step, b.kind, b.data) for b in cp.blobs]
        same_thread_parent = cp.parent_checkpoint_id is not None and cp.parent_thread_id == cp.thread_id

        def body(conn: sqlite3.Connection) -> None:
            if expected_head is None:
                fork_of = cp.parent_thread_id if cp.parent_thread_id != cp.thread_id else None
                try:
                    conn.execute(
                        "INSERT INTO threads (thread_id, head_checkpoint_id, head_step, status, run_id, created_at,"
                        " updated_at, parent_thread_id, parent_checkpoint_id, metadata) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (cp.thread_id, cp.checkpoint_id, cp.step, cp.status, run_id, now, now, fork_of,
                         cp.parent_checkpoint_id, meta),
                    )  # fmt: skip
                except sqlite3.IntegrityError as exc:  # live, or deleted but still holding rows a fork needs
                    raise ThreadConflictError(f"thread {brief(cp.thread_id)!r} already exists") from exc
            else:
                moved = conn.execute(
                    "UPDATE threads SET head_checkpoint_id = ?, head_step = ?, status = ?, updated_at = ?,"
                    " error = NULL, metadata = ? WHERE thread_id = ? AND head_checkpoint_id = ? AND run_id = ?"
                    " AND deleted = 0",
                    (cp.checkpoint_id, cp.step, cp.status, now, meta, cp.thread_id, expected_head, run_id),
                )
                if moved.rowcount != 1:
                    raise _cas_failed(conn, cp.thread_id, f"expected head {brief(expected_head)!r}")
            try:
                conn.execute(
                    f"INSERT INTO checkpoints ({_CP_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                    (cp.thread_id, cp.checkpoint_id, cp.parent_thread_id, cp.parent_checkpoint_id, cp.step,
                     cp.created_at, cp.status, meta, cp.body),
                )  # fmt: skip
            except sqlite3.IntegrityError as exc:
                raise ThreadConflictError(
                    f"thread {brief(cp.thread_id)!r} already has checkpoint {brief(cp.checkpoint_id)!r} "
                    f"or a checkpoint at step {cp.step}"
                ) from exc
            if blobs:
                for thread_id, channel, step, kind, _ in blobs:
                    if kind == "chunk":  # it packs the deltas stored after its step: their rows go
                        conn.execute(
                            "DELETE FROM blobs WHERE thread_id = ? AND channel = ? AND step > ? AND step < ?",
                            (thread_id, channel, step, cp.step),
                        )
                conn.executemany(
                    "INSERT OR REPLACE INTO blobs (thread_id, channel, step, kind, data) VALUES (?,?,?,?,?)", blobs
                )
            if same_thread_parent:
                conn.execute(
                    "DELETE FROM writes WHERE thread_id = ? AND checkpoint_id = ?",
                    (cp.thread_id, cp.parent_checkpoint_id),
                )

        await self._write(body)

    async def claim(self, thread_id: str, *, expected_head: str, expected_run_id: str, run_id: str) -> None:
        check_storable(thread_id=thread_id, expected_head=expected_head, expected_run_id=expected_run_id, run_id=run_id)
        now = ids.now()

        def body(conn: sqlite3.Connection) -> None:
            claimed = conn.execute(
                "UPDATE threads SET run_id = ?, status = 'running', updated_at = ?"
                " WHERE thread_id = ? AND head_checkpoint_id = ? AND run_id = ? AND deleted = 0",
                (run_id, now, thread_id, expected_head, expected_run_id),
            )
            if claimed.rowcount != 1:
                what = f"expected head {brief(expected_head)!r}, owner {brief(expected_run_id)!r}"
                raise _cas_failed(conn, thread_id, what)

        await self._write(body)

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

        def body(conn: sqlite3.Connection) -> None:
            if status is not None:
                owned = conn.execute(
                    "UPDATE threads SET status = ?, error = ?, updated_at = ?"
                    " WHERE thread_id = ? AND head_checkpoint_id = ? AND run_id = ? AND deleted = 0",
                    (status, error, now, thread_id, checkpoint_id, run_id),
                ).rowcount
            else:
                owned = len(
                    conn.execute(
                        "SELECT 1 FROM threads WHERE thread_id = ? AND head_checkpoint_id = ? AND run_id = ?"
                        " AND deleted = 0",
                        (thread_id, checkpoint_id, run_id),
                    ).fetchall()
                )
            if owned != 1:
                raise _cas_failed(conn, thread_id, f"expected head {brief(checkpoint_id)!r}, owner {brief(run_id)!r}")
            conn.executemany(
                "INSERT OR REPLACE INTO writes (thread_id, checkpoint_id, task_id, kind, idx, data)"
                " VALUES (?,?,?,?,?,?)",
                rows,
            )

        await self._write(body)

    async def delete_thread(self, thread_id: str) -> None:
        check_storable(thread_id=thread_id)
        now = ids.now()

        def body(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT parent_thread_id FROM threads WHERE thread_id = ? AND deleted = 0", (thread_id,)
            ).fetchone()
            if row is None:
                raise ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
            target: str | None = thread_id
            while target is not None:  # a fully removed fork may free what its deleted parent kept for it
                target = self._trim_deleted(conn, target, now)

        await self._write(body)

    @staticmethod
    def _trim_deleted(conn: sqlite3.Connection, thread_id: str, now: float) -> str | None:
        """Mark ``thread_id`` deleted and drop its rows above the highest step a fork still needs (all of them, and
        its thread row, when none is needed). Returns its parent thread when that one is deleted too and should be
        trimmed again, else ``None``."""
        (needed,) = conn.execute(
            "SELECT MAX(p.step) FROM checkpoints AS f JOIN checkpoints AS p"
            " ON p.thread_id = f.parent_thread_id AND p.checkpoint_id = f.parent_checkpoint_id"
            " WHERE f.parent_thread_id = ? AND f.parent_thread_id <> f.thread_id",
            (thread_id,),
        ).fetchone()
        above = -1 if needed is None else int(needed)
        conn.execute(
            "DELETE FROM writes WHERE thread_id = ? AND checkpoint_id IN"
            " (SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND step > ?)",
            (thread_id, thread_id, above),
        )
        conn.execute("DELETE FROM blobs WHERE thread_id = ? AND step > ?", (thread_id, above))
        conn.execute("DELETE FROM checkpoints WHERE thread_id = ? AND step > ?", (thread_id, above))
        if needed is not None:
            conn.execute("UPDATE threads SET deleted = 1, updated_at = ? WHERE thread_id = ?", (now, thread_id))
            return None
        (parent,) = conn.execute(
            "DELETE FROM threads WHERE thread_id = ? RETURNING parent_thread_id", (thread_id,)
        ).fetchone()
        deleted_parent = conn.execute("SELECT 1 FROM threads WHERE thread_id = ? AND deleted = 1", (parent,)).fetchone()
        return cast(str, parent) if deleted_parent is not None else None

    # -- reads -------------------------------------------------------------------------------------------------------

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        rows = await self._fetch(f"{_THREAD_SELECT} AND thread_id = ?", (thread_id,))
        return _thread(rows[0]) if rows else None

    async def list_threads(self, *, status: Status | None = None) -> list[ThreadRecord]:
        sql, params = _THREAD_SELECT, []
        if status is not None:
            sql, params = f"{sql} AND status = ?", [status]
        rows = await self._fetch(f"{sql} ORDER BY updated_at DESC, thread_id DESC", params)
        return [_thread(row) for row in rows]

    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None
    ) -> StoredCheckpoint | None:
        params: list[Any]
        if checkpoint_id is not None:
            sql, params = f"{_CP_SELECT} WHERE thread_id = ? AND checkpoint_id = ?", [thread_id, checkpoint_id]
            if step is not None:
                sql, params = f"{sql} AND step = ?", [*params, step]
        elif step is not None:
            sql, params = f"{_CP_SELECT} WHERE thread_id = ? AND step = ?", [thread_id, step]
        else:
            sql = f"{_CP_SELECT} WHERE thread_id = ? AND step = (SELECT head_step FROM threads"  # the head's step
            sql, params = f"{sql} WHERE thread_id = ? AND deleted = 0)", [thread_id, thread_id]
        rows = await self._fetch(sql, params)
        return _checkpoint(rows[0]) if rows else None

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
            clause, clause_params = _filter_clause(key, value)
            clauses.append(clause)
            params.extend(clause_params)
        sql = f"{_CP_SELECT} AS c WHERE {' AND '.join(clauses)} ORDER BY c.step DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return list(map(_checkpoint, await self._fetch(sql, params)))

    async def get_blobs(self, ranges: Sequence[BlobRange]) -> list[Blob]:
        if len(ranges) == 1:  # the common case: one range scan of the unique index, already in order
            r = ranges[0]
            rows = await self._fetch(
                f"{_BLOB_SELECT} WHERE thread_id = ? AND channel = ? AND step BETWEEN ? AND ? ORDER BY step",
                (r.thread_id, r.channel, r.min_step, r.max_step),
            )
            return list(starmap(Blob, rows))  # rows in Blob's field order
        chunks = [
            ranges[start : start + _MAX_RANGES_PER_QUERY] for start in range(0, len(ranges), _MAX_RANGES_PER_QUERY)
        ]
        out: list[Blob] = []
        for chunk in chunks:  # one query unless there are very many ranges
            values = ", ".join(["(?, ?, ?, ?)"] * len(chunk))
            sql = (
                f"{_BLOB_SELECT} WHERE rowid IN ("
                f" WITH r (thread_id, channel, lo, hi) AS (VALUES {values})"
                " SELECT b.rowid FROM r JOIN blobs AS b"
                " ON b.thread_id = r.thread_id AND b.channel = r.channel AND b.step BETWEEN r.lo AND r.hi)"
                " ORDER BY channel, step, thread_id"
            )  # IN (...) returns a blob inside several ranges once
            params = [p for r in chunk for p in (r.thread_id, r.channel, r.min_step, r.max_step)]
            out += starmap(Blob, await self._fetch(sql, params))
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
