"""FLOOR: the physical cost of one durable per-step write, with no engine at all.

SQLite: one row of ``row_bytes`` per transaction, on a connection with the PRAGMAs both engines use (WAL,
``synchronous=FULL``). PostgreSQL: one ``INSERT`` per transaction on an autocommit connection (the server's
``synchronous_commit=on`` makes each commit wait for its WAL flush). A checkpointing engine cannot beat this per step.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time

from bench.storage import SQLITE_SYNCHRONOUS, Store


def sqlite_ms_per_commit(store: Store, commits: int, row_bytes: int, *, wal_ahead: int = 0) -> float:
    """Milliseconds per committed ``INSERT`` into a fresh SQLite file. With ``wal_ahead``, the ``-wal`` file is first
    extended with that many bytes of written zeros, as ``SqliteSaver`` does on its first write (``preallocate_wal``),
    so commits overwrite blocks the file has instead of growing it: the FLOOR for that technique."""
    assert store.path is not None
    path = store.path if not wal_ahead else f"{store.path}-ahead.db"
    payload = os.urandom(row_bytes)
    try:
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}")
            conn.execute("CREATE TABLE floor (step INTEGER PRIMARY KEY, body BLOB NOT NULL)")
            if wal_ahead:
                with open(f"{path}-wal", "r+b") as wal:  # nobody else uses this file: no lock needed
                    wal.seek(0, os.SEEK_END)
                    wal.write(bytes(max(0, wal_ahead - wal.tell())))
                    wal.flush()
                    os.fsync(wal.fileno())
            start = time.perf_counter()
            for step in range(commits):
                conn.execute("BEGIN")
                conn.execute("INSERT INTO floor (step, body) VALUES (?, ?)", (step, payload))
                conn.execute("COMMIT")
            elapsed = time.perf_counter() - start
    finally:
        if wal_ahead:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path + suffix)
    return 1e3 * elapsed / commits


def postgres_ms_per_commit(store: Store, commits: int, row_bytes: int) -> float:
    """Milliseconds per committed ``INSERT`` into a table of the store's schema."""
    import psycopg

    assert store.dsn is not None and store.schema is not None
    payload = os.urandom(row_bytes)
    table = f'"{store.schema}".floor'
    with psycopg.connect(store.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (step integer PRIMARY KEY, body bytea NOT NULL)")
        insert = f"INSERT INTO {table} (step, body) VALUES (%s, %s)"
        conn.execute(insert, (-1, payload), prepare=True)
        start = time.perf_counter()
        for step in range(commits):
            conn.execute(insert, (step, payload), prepare=True)
        elapsed = time.perf_counter() - start
    return 1e3 * elapsed / commits
