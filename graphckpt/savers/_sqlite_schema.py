"""The SQLite file's schema and its checks: page size, migrations, whose file it is, and waiting out a locked file."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import Final, TypeVar

from graphckpt.errors import SaverError, StoreNotSetUpError
from graphckpt.savers._events_sql import SQLITE_EVENTS_MIGRATION
from graphckpt.savers._sqlite_crons import SQLITE_CRONS_MIGRATION
from graphckpt.savers._sqlite_items import SQLITE_ITEMS_MIGRATION
from graphckpt.savers._sqlite_waits import SQLITE_WAITS_MIGRATION

_T = TypeVar("_T")

PAGE_SIZE: Final = 4096
"""Page size of new files (SQLite's default). Most of a long list's bytes sit in chunk rows (see
:data:`graphckpt.codec.CHUNK`), whose overflow pages are full whatever their size, so larger pages would mostly
make every small table and index bigger (a file has eight; each needs at least one page). Measured on benchmark W2
(300 x 1 KiB appends): 4 KiB pages 1.45x the messages, 8 KiB 1.60x. Files made with 8 KiB pages keep them."""
PREALLOCATE_WAL: Final = 4 * 1024 * 1024
"""About one checkpoint cycle of the WAL: SQLite's default ``wal_autocheckpoint`` of 1000 pages of 4 KiB."""

# Migration 1 was changed in place before the first release (page size, WITHOUT ROWID tables, checkpoints keyed by
# (thread_id, step)). Files made by earlier development versions have the same columns and constraints, so they keep
# working; they just keep their old layout.
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
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
    SQLITE_EVENTS_MIGRATION,  # 2: the durable event log (events table, triggers on threads, checkpoints, writes)
    (  # 3: leases: who runs each thread, until when, and how many claims it has had
        "ALTER TABLE threads ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE threads ADD COLUMN lease_worker TEXT",
        "ALTER TABLE threads ADD COLUMN lease_host TEXT",
        "ALTER TABLE threads ADD COLUMN lease_pid INTEGER",
        "ALTER TABLE threads ADD COLUMN heartbeat_at REAL",
        "ALTER TABLE threads ADD COLUMN lease_until REAL",
        # the run queue (see graphckpt/savers/queue.py for the invariants)
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY, thread_id TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL,
            graph TEXT, payload BLOB, attempt INTEGER NOT NULL DEFAULT 0, worker TEXT, fence TEXT,
            lease_until REAL, created_at REAL NOT NULL, started_at REAL, ended_at REAL, error TEXT)""",
        "CREATE UNIQUE INDEX runs_one_running ON runs (thread_id) WHERE status = 'running'",
        "CREATE INDEX runs_queued ON runs (created_at) WHERE status = 'queued'",
        "CREATE INDEX runs_by_thread ON runs (thread_id, created_at)",
    ),
    (  # 4: threads created before their first checkpoint (the server's POST /threads), with their first tags; a
        # cancel asked of a running run (its worker stops after its step)
        "CREATE TABLE created_threads (thread_id TEXT PRIMARY KEY, tags TEXT NOT NULL, created_at REAL NOT NULL)",
        "ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0",
    ),
    # 5: a commit writes its checkpoint's events itself (graphckpt/savers/events.py), one per task; the trigger that
    # derived them from the stored metadata goes
    ("DROP TRIGGER events_checkpoint",),
    (  # 6: wave3 issue 25: every first page of threads (keyset on created_at, thread_id) and every lease sweep one
        # indexed read
        "CREATE INDEX threads_by_created ON threads (created_at, thread_id)",
        "CREATE INDEX threads_by_status ON threads (status, created_at, thread_id)",
        "CREATE INDEX threads_by_parent ON threads (parent_thread_id, created_at, thread_id)"
        " WHERE parent_thread_id IS NOT NULL",
        "CREATE INDEX threads_running_lease ON threads (lease_until) WHERE status = 'running'",
        "CREATE INDEX runs_graphless ON runs (created_at) WHERE status = 'queued' AND graph IS NULL",
        "CREATE INDEX runs_queued_order ON runs (created_at, run_id) WHERE status = 'queued'",
        "DROP INDEX runs_queued",
    ),
    SQLITE_ITEMS_MIGRATION,  # wave3 issue 29: the long-term item store (graphckpt/savers/items.py)
    SQLITE_WAITS_MIGRATION,  # wave3 issue 29: durable waits (graphckpt/savers/waits.py)
    SQLITE_CRONS_MIGRATION,  # wave3 issue 29: schedules (graphckpt/savers/crons.py)
)


TABLES: Final = frozenset({"threads", "checkpoints", "blobs", "writes"})
"""graphckpt's tables: a file that has others and not these belongs to somebody else."""


def open_hint(path: str) -> str:
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


def check_owner(conn: sqlite3.Connection, path: str, create: bool) -> None:
    """Reads only (no pragma or table is written): refuse a file holding tables of its own but not graphckpt's
    (another application's database, whose ``user_version`` and journal mode are its own), and with
    ``create=False`` a file without graphckpt's tables."""
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise SaverError(f"cannot open SQLite database {path!r}: {exc}{open_hint(path)}") from exc
    ours = tables >= TABLES
    if tables and not ours:
        mine = sorted(tables - TABLES)[:5]
        raise StoreNotSetUpError(
            f"SQLite database {path!r} is not a graphckpt database: it has tables of its own "
            f"({', '.join(map(repr, mine))}{', ...' if len(tables - TABLES) > len(mine) else ''}) and not "
            "graphckpt's; graphckpt leaves it untouched (give it a file of its own)"
        )
    if not ours and not create:
        raise StoreNotSetUpError(f"no graphckpt database at {path!r}: the file has no graphckpt tables")


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Apply the missing migrations; run in the write transaction (``BEGIN IMMEDIATE``)."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])  # re-read under the write lock
    if version > len(MIGRATIONS):
        raise SaverError(
            f"SQLite database {path!r} has schema version {version}, newer than this graphckpt "
            f"understands ({len(MIGRATIONS)}); upgrade graphckpt"
        )
    for number in range(version, len(MIGRATIONS)):
        for statement in MIGRATIONS[number]:
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS):d}")


def is_busy(exc: sqlite3.Error) -> bool:
    """The lock is held by another connection (``SQLITE_BUSY``/``SQLITE_LOCKED``, any extended code)."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in str(exc)


def retry_busy(statement: Callable[[], _T], timeout: float) -> _T:
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
            if not is_busy(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def extend_with_zeros(path: str, size: int) -> None:
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


def saver_error(exc: sqlite3.Error, path: str, busy_timeout: float) -> SaverError:
    """The :class:`~graphckpt.errors.SaverError` for ``exc``, naming the file and why it may have failed."""
    if is_busy(exc):
        return SaverError(
            f"SQLite database {path!r} is locked: another connection held its write lock for longer "
            f"than busy_timeout={busy_timeout}s"
        )
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    hint = open_hint(path) if code in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY) else ""
    return SaverError(f"SQLite database {path!r} failed: {exc}{hint}")
