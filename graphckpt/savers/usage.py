"""Where the disk went: bytes per table and per thread (``graphckpt stats``), the same report from every saver."""

from __future__ import annotations

import dataclasses
from typing import Any, Final, LiteralString

__all__ = ["PG_TABLE_BYTES", "PG_THREAD_BYTES", "SQLITE_THREAD_BYTES", "StorageUsage", "ThreadUsage"]


@dataclasses.dataclass(frozen=True)
class ThreadUsage:
    thread_id: str
    """The thread (a deleted one kept as a fork's lineage shows too: its rows are still there)."""
    bytes: int
    """The stored size of its rows' variable parts: checkpoint bodies and metadata, blobs, pending writes, events."""
    checkpoints: int
    """How many checkpoints it stores."""


@dataclasses.dataclass(frozen=True)
class StorageUsage:
    tables: dict[str, int]
    """Bytes each table takes on disk, its indexes included (SQLite: its pages; PostgreSQL:
    ``pg_total_relation_size``, dead tuples and TOAST included; memory: the sum of its rows' byte strings)."""
    threads: list[ThreadUsage]
    """The biggest threads, biggest first."""
    total: int
    """Bytes of the whole store (SQLite: the database file plus its WAL; PostgreSQL and memory: the tables' sum)."""
    thread_count: int
    """How many threads have rows (deleted placeholders included)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "total_bytes": self.total,
            "tables": dict(sorted(self.tables.items(), key=lambda kv: -kv[1])),
            "thread_count": self.thread_count,
            "threads": [dataclasses.asdict(t) for t in self.threads],
        }


SQLITE_THREAD_BYTES: Final = """
    WITH r(thread_id, n, cps) AS (
        SELECT thread_id, length(body) + length(metadata), 1 FROM checkpoints
        UNION ALL SELECT thread_id, length(data), 0 FROM blobs
        UNION ALL SELECT thread_id, length(data), 0 FROM writes
        UNION ALL SELECT thread_id, length(payload), 0 FROM events)
    SELECT thread_id, sum(n), sum(cps), count(*) OVER () FROM r GROUP BY thread_id ORDER BY 2 DESC, 1 LIMIT ?"""
"""Per thread: the bytes of its rows' variable columns and its checkpoint count; the number of threads."""

PG_TABLE_BYTES: Final[LiteralString] = """SELECT c.relname::text, pg_total_relation_size(c.oid)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = coalesce(%(schema)s::text, current_schema()) AND c.relkind = 'r'"""

PG_THREAD_BYTES: Final[LiteralString] = """
    WITH r(thread_id, n, cps) AS (
        SELECT thread_id, pg_column_size(body) + pg_column_size(metadata), 1 FROM {checkpoints}
        UNION ALL SELECT thread_id, pg_column_size(data), 0 FROM {blobs}
        UNION ALL SELECT thread_id, pg_column_size(data), 0 FROM {writes}
        UNION ALL SELECT thread_id, pg_column_size(payload), 0 FROM {events})
    SELECT thread_id, sum(n)::bigint, sum(cps)::bigint, count(*) OVER () FROM r GROUP BY thread_id
    ORDER BY 2 DESC, 1 LIMIT %(top)s"""
"""As :data:`SQLITE_THREAD_BYTES`, with PostgreSQL's stored (compressed) sizes."""
