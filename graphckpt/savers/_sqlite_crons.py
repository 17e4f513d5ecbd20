"""SqliteSaver's schedules (see :mod:`graphckpt.savers.crons`): the ``crons`` table; a firing is one
``BEGIN IMMEDIATE`` transaction (its compare-and-set on ``next_run_at`` and the runs it queues)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from graphckpt.savers.crons import CronRow, CronTable
from graphckpt.savers.queue import RunRecord

_T = TypeVar("_T")

SQLITE_CRONS_MIGRATION: Final = (
    """CREATE TABLE crons (
        cron_id TEXT PRIMARY KEY, schedule TEXT NOT NULL, timezone TEXT NOT NULL, graph TEXT NOT NULL,
        thread_id TEXT, payload BLOB, metadata TEXT NOT NULL, end_at REAL, missed TEXT NOT NULL, next_run_at REAL,
        created_at REAL NOT NULL, last_run_at REAL, runs INTEGER NOT NULL DEFAULT 0,
        skipped INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX crons_due ON crons (next_run_at) WHERE next_run_at IS NOT NULL",
)
"""The table and its index (a migration of :data:`graphckpt.savers._sqlite_schema.MIGRATIONS`)."""

_COLS = (
    "cron_id, schedule, timezone, graph, thread_id, payload, metadata, end_at, missed, next_run_at, created_at, "
    "last_run_at, runs, skipped"
)
_FIRE = (
    "UPDATE crons SET next_run_at = ?, last_run_at = coalesce(?, last_run_at), runs = runs + ?, "
    "skipped = skipped + ? WHERE cron_id = ? AND next_run_at = ?"
)
"""The compare-and-set: only the firing that read this ``next_run_at`` moves it."""
_QUEUE = (
    "INSERT INTO runs (run_id, thread_id, kind, status, graph, payload, created_at) VALUES (?, ?, ?, 'queued', ?, ?, ?)"
)


class SqliteCrons(CronTable):
    """Mixed into :class:`~graphckpt.savers.sqlite.SqliteSaver`."""

    if TYPE_CHECKING:  # what the mixin needs of the saver

        async def _write(self, body: Callable[[sqlite3.Connection], _T]) -> _T: ...
        async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]: ...

    async def put_cron(self, row: CronRow) -> None:
        values = (
            row.cron_id,
            row.schedule,
            row.timezone,
            row.graph,
            row.thread_id,
            row.payload,
            row.metadata,
            row.end_at,
            row.missed,
            row.next_run_at,
            row.created_at,
            row.last_run_at,
            row.runs,
            row.skipped,
        )
        sql = f"INSERT OR REPLACE INTO crons ({_COLS}) VALUES ({', '.join('?' * 14)})"
        await self._write(lambda conn: conn.execute(sql, values))

    async def get_cron(self, cron_id: str) -> CronRow | None:
        rows = await self._fetch(f"SELECT {_COLS} FROM crons WHERE cron_id = ?", (cron_id,))
        return CronRow(*rows[0]) if rows else None

    async def list_crons(self) -> list[CronRow]:
        return [CronRow(*r) for r in await self._fetch(f"SELECT {_COLS} FROM crons ORDER BY created_at, cron_id", ())]

    async def delete_cron(self, cron_id: str) -> bool:
        return bool(await self._write(lambda c: c.execute("DELETE FROM crons WHERE cron_id = ?", (cron_id,)).rowcount))

    async def due_crons(self, now: float) -> list[CronRow]:
        sql = f"SELECT {_COLS} FROM crons WHERE next_run_at <= ? ORDER BY next_run_at, cron_id"
        return [CronRow(*r) for r in await self._fetch(sql, (now,))]

    async def fire_cron(
        self,
        cron_id: str,
        *,
        expected_next: float,
        next_run_at: float | None,
        last_run_at: float | None,
        runs: Sequence[RunRecord],
        skipped: int,
    ) -> bool:
        def body(conn: sqlite3.Connection) -> bool:
            params = (next_run_at, last_run_at, len(runs), skipped, cron_id, expected_next)
            if conn.execute(_FIRE, params).rowcount != 1:
                return False
            conn.executemany(_QUEUE, [(r.run_id, r.thread_id, r.kind, r.graph, r.payload, r.created_at) for r in runs])
            return True

        return await self._write(body)
