"""Where a benchmark run keeps its data, and how many bytes it took.

A :class:`Store` names one backend instance: nothing (``none``), process memory, a fresh SQLite file in a temporary
directory, or a fresh PostgreSQL schema. Each workload run gets its own store and drops it afterwards, so runs never
see each other's rows. Both engines build their saver from the same store, at the same durability: SQLite in WAL mode
with ``synchronous=FULL``; PostgreSQL with the server's default ``synchronous_commit=on``.

Bytes are measured two ways, identically for both engines:
- ``disk_bytes``: SQLite file plus ``-wal`` after a ``wal_checkpoint(TRUNCATE)``; PostgreSQL ``pg_total_relation_size``
  summed over the schema's tables (with their indexes and TOAST). Page-granular.
- ``payload_bytes``: the logical bytes of every row (SQLite ``length()`` of each column, PostgreSQL ``pg_column_size``
  of each row). Exact enough to see the few hundred bytes a fork adds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import uuid
from typing import Literal

SaverKind = Literal["none", "memory", "sqlite", "postgres"]
DEFAULT_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"
SQLITE_SYNCHRONOUS = "FULL"


@dataclasses.dataclass(frozen=True)
class Store:
    """One backend instance for one workload run."""

    kind: SaverKind
    path: str | None = None
    """SQLite database file."""
    dsn: str | None = None
    """PostgreSQL connection string (loopback)."""
    schema: str | None = None
    """PostgreSQL schema holding this run's tables."""
    events: bool = True
    """graphckpt's savers: whether commits write the durable event log (``events=`` of the savers)."""

    @property
    def persistent(self) -> bool:
        return self.kind in ("sqlite", "postgres")

    def dsn_with_search_path(self) -> str:
        """The DSN with ``search_path`` set to this run's schema, for savers that take no schema argument."""
        from psycopg.conninfo import make_conninfo

        assert self.dsn is not None and self.schema is not None
        return make_conninfo(self.dsn, options=f"-c search_path={self.schema}")


def open_store(kind: SaverKind, tmpdir: str, dsn: str = DEFAULT_DSN) -> Store:
    """A fresh, empty store of ``kind``: a new file name under ``tmpdir`` or a new PostgreSQL schema."""
    token = uuid.uuid4().hex[:10]
    if kind == "sqlite":
        return Store(kind, path=os.path.join(tmpdir, f"bench-{token}.db"))
    if kind == "postgres":
        schema = f"bench_{token}"
        with _pg(dsn) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        return Store(kind, dsn=dsn, schema=schema)
    return Store(kind)


def drop_store(store: Store) -> None:
    """Delete the store's files or schema."""
    if store.kind == "sqlite" and store.path:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(store.path + suffix)
    elif store.kind == "postgres" and store.schema:
        with _pg(store.dsn or DEFAULT_DSN) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{store.schema}" CASCADE')


def postgres_reachable(dsn: str = DEFAULT_DSN) -> str | None:
    """``None`` when the server answers, else the reason it does not."""
    try:
        import psycopg
    except ImportError as exc:
        return f"psycopg not installed ({exc})"
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL not reachable at {dsn!r}: {exc}".strip()
    return None


def disk_bytes(store: Store) -> int | None:
    """Bytes the store occupies on disk, ``None`` for stores that keep nothing on disk."""
    if store.kind == "sqlite":
        assert store.path is not None
        with _sqlite(store.path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return sum(os.path.getsize(store.path + s) for s in ("", "-wal") if os.path.exists(store.path + s))
    if store.kind == "postgres":
        with _pg(store.dsn or DEFAULT_DSN) as conn:
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'm')",
                (store.schema,),
            ).fetchone()
        return int(row[0]) if row else 0
    return None


def payload_bytes(store: Store) -> int | None:
    """Logical bytes of every stored row, ``None`` for stores without tables."""
    if store.kind == "sqlite":
        assert store.path is not None
        total = 0
        with _sqlite(store.path) as conn:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                if table.startswith("sqlite_"):
                    continue
                cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
                expr = " + ".join(f'coalesce(length("{c}"), 0)' for c in cols) or "0"
                total += conn.execute(f'SELECT coalesce(sum({expr}), 0) FROM "{table}"').fetchone()[0]
        return int(total)
    if store.kind == "postgres":
        total = 0
        with _pg(store.dsn or DEFAULT_DSN) as conn:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s", (store.schema,)
                ).fetchall()
            ]
            for table in tables:
                row = conn.execute(
                    f'SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM "{store.schema}"."{table}" t'
                ).fetchone()
                total += int(row[0]) if row else 0
        return total
    return None


def _sqlite(path: str) -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(path, isolation_level=None))


def _pg(dsn: str):  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(dsn, autocommit=True, connect_timeout=5)
