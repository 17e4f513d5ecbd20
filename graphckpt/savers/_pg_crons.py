"""PostgresSaver's schedules (see :mod:`graphckpt.savers.crons`): the ``crons`` table; a firing is one statement
(its compare-and-set on ``next_run_at`` and the runs it queues, which exist only if the update matched)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, LiteralString

from graphckpt.savers.crons import CronRow, CronTable
from graphckpt.savers.queue import RunRecord

PG_CRONS_MIGRATION: Final[tuple[LiteralString, ...]] = (
    """CREATE TABLE {crons} (
        cron_id text COLLATE "C" PRIMARY KEY, schedule text NOT NULL, timezone text NOT NULL, graph text NOT NULL,
        thread_id text, payload bytea, metadata text NOT NULL, end_at double precision, missed text NOT NULL,
        next_run_at double precision, created_at double precision NOT NULL, last_run_at double precision,
        runs bigint NOT NULL DEFAULT 0, skipped bigint NOT NULL DEFAULT 0)""",
    "CREATE INDEX crons_due ON {crons} (next_run_at) WHERE next_run_at IS NOT NULL",
)
"""The table and its index (a migration of :data:`graphckpt.savers._pg_schema.MIGRATIONS`)."""

_COLS: LiteralString = (
    "cron_id, schedule, timezone, graph, thread_id, payload, metadata, end_at, missed, next_run_at, created_at, "
    "last_run_at, runs, skipped"
)
CRON_SQL: dict[str, LiteralString] = {
    "put_cron": "INSERT INTO {crons} ("
    + _COLS
    + """) VALUES (%(id)s, %(schedule)s, %(tz)s, %(graph)s, %(tid)s, %(payload)s, %(metadata)s, %(end)s,
            %(missed)s, %(next)s, %(created)s, %(last)s, %(runs)s, %(skipped)s)
        ON CONFLICT (cron_id) DO UPDATE SET schedule = excluded.schedule, timezone = excluded.timezone,
            graph = excluded.graph, thread_id = excluded.thread_id, payload = excluded.payload,
            metadata = excluded.metadata, end_at = excluded.end_at, missed = excluded.missed,
            next_run_at = excluded.next_run_at, last_run_at = excluded.last_run_at, runs = excluded.runs,
            skipped = excluded.skipped
        RETURNING 1""",
    "get_cron": "SELECT " + _COLS + " FROM {crons} WHERE cron_id = %(id)s",
    "list_crons": "SELECT " + _COLS + " FROM {crons} ORDER BY created_at, cron_id",
    "delete_cron": "DELETE FROM {crons} WHERE cron_id = %(id)s RETURNING 1",
    "due_crons": "SELECT " + _COLS + " FROM {crons} WHERE next_run_at <= %(now)s ORDER BY next_run_at, cron_id",
    # The compare-and-set: only the firing that read this next_run_at moves it, and only then are its runs queued.
    "fire_cron": """WITH f AS (
            UPDATE {crons} SET next_run_at = %(next)s, last_run_at = coalesce(%(last)s, last_run_at),
                runs = runs + %(n)s, skipped = skipped + %(skipped)s
            WHERE cron_id = %(id)s AND next_run_at = %(expected)s RETURNING 1
        ), q AS (
            INSERT INTO {runs} (run_id, thread_id, kind, status, graph, payload, attempt, created_at)
            SELECT r, t, k, 'queued', %(graph)s, p, 0, c
            FROM unnest(%(rids)s::text[], %(tids)s::text[], %(kinds)s::text[], %(payloads)s::bytea[],
                %(times)s::float8[]) AS x(r, t, k, p, c)
            WHERE EXISTS (SELECT 1 FROM f)
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM f), (SELECT count(*) FROM q), pg_notify(%(channel)s, '')""",
}
"""The crons' named statements (merged into :data:`graphckpt.savers._pg_sql.SQL`)."""


def _row(r: Sequence[Any]) -> CronRow:
    payload = bytes(r[5]) if r[5] is not None else None
    return CronRow(r[0], r[1], r[2], r[3], r[4], payload, r[6], r[7], r[8], r[9], r[10], r[11], int(r[12]), int(r[13]))


class PostgresCrons(CronTable):
    """Mixed into :class:`~graphckpt.savers.postgres.PostgresSaver`."""

    if TYPE_CHECKING:  # what the mixin needs of the saver

        @property
        def channel(self) -> str: ...

        async def _fetch(
            self, action: str, query: str, params: Sequence[Any] | Mapping[str, Any]
        ) -> list[tuple[Any, ...]]: ...

    async def put_cron(self, row: CronRow) -> None:
        params = {
            "id": row.cron_id,
            "schedule": row.schedule,
            "tz": row.timezone,
            "graph": row.graph,
            "tid": row.thread_id,
            "payload": row.payload,
            "metadata": row.metadata,
            "end": row.end_at,
            "missed": row.missed,
            "next": row.next_run_at,
            "created": row.created_at,
            "last": row.last_run_at,
            "runs": row.runs,
            "skipped": row.skipped,
        }
        await self._fetch(f"put of cron {row.cron_id!r}", "put_cron", params)

    async def get_cron(self, cron_id: str) -> CronRow | None:
        rows = await self._fetch(f"get of cron {cron_id!r}", "get_cron", {"id": cron_id})
        return _row(rows[0]) if rows else None

    async def list_crons(self) -> list[CronRow]:
        return [_row(r) for r in await self._fetch("list of crons", "list_crons", {})]

    async def delete_cron(self, cron_id: str) -> bool:
        return bool(await self._fetch(f"delete of cron {cron_id!r}", "delete_cron", {"id": cron_id}))

    async def due_crons(self, now: float) -> list[CronRow]:
        return [_row(r) for r in await self._fetch("read of due crons", "due_crons", {"now": now})]

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
        params = {
            "id": cron_id,
            "expected": expected_next,
            "next": next_run_at,
            "last": last_run_at,
            "n": len(runs),
            "skipped": skipped,
            "graph": runs[0].graph if runs else None,
            "rids": [r.run_id for r in runs],
            "tids": [r.thread_id for r in runs],
            "kinds": [r.kind for r in runs],
            "payloads": [r.payload for r in runs],
            "times": [r.created_at for r in runs],
            "channel": self.channel,
        }
        [(fired, _queued, _)] = await self._fetch(f"firing of cron {cron_id!r}", "fire_cron", params)
        return bool(fired)
