"""PostgresSaver's durable waits (see :mod:`graphckpt.savers.waits`): the ``waits`` table; the waker is one
statement whose ``FOR UPDATE SKIP LOCKED`` and compare-and-set on ``status`` fire each wait once across workers (with
a keyring, the queued runs' payloads are sealed again to each run in the same transaction)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, LiteralString

from graphckpt import ids
from graphckpt.savers.waits import WaitRecord, WaitStatus, WaitTable

Statements = Callable[[str, Mapping[str, Any]], Awaitable[list[tuple[Any, ...]]]]
"""``run(name, params)``: one named statement in an open transaction, its rows (see ``PostgresSaver._transaction``)."""

if TYPE_CHECKING:
    from graphckpt.savers._sealing import Sealer

PG_WAITS_MIGRATION: Final[tuple[LiteralString, ...]] = (
    """CREATE TABLE {waits} (
        thread_id text COLLATE "C" PRIMARY KEY, checkpoint_id text NOT NULL, wake_at double precision NOT NULL,
        status text NOT NULL, answer bytea, created_at double precision NOT NULL, fired_at double precision,
        run_id text)""",
    "CREATE INDEX waits_due ON {waits} (wake_at) WHERE status = 'pending'",
)
"""The table and its index (a migration of :data:`graphckpt.savers._pg_schema.MIGRATIONS`)."""

_COLS: LiteralString = "thread_id, checkpoint_id, wake_at, status, answer, created_at, fired_at, run_id"
WAIT_SQL: dict[str, LiteralString] = {
    "put_wait": "INSERT INTO {waits} ("
    + _COLS
    + """) VALUES (%(tid)s, %(cp)s, %(wake)s, 'pending', %(answer)s, %(now)s, NULL, NULL)
        ON CONFLICT (thread_id) DO UPDATE SET
            wake_at = CASE WHEN {waits}.status = 'pending' AND {waits}.checkpoint_id = excluded.checkpoint_id
                THEN least({waits}.wake_at, excluded.wake_at) ELSE excluded.wake_at END,
            checkpoint_id = excluded.checkpoint_id, status = 'pending', answer = excluded.answer,
            created_at = excluded.created_at, fired_at = NULL, run_id = NULL
        RETURNING 1""",
    # Exactly once: the due waits are locked (SKIP LOCKED: another waker's are skipped, never waited for), fired by
    # a compare-and-set on status, and their resume runs are queued by the same statement; a thread that moved on
    # makes its wait stale; a thread still running at that head (about to stop) keeps it pending.
    "wake_due": """WITH due AS (
            SELECT w.thread_id, w.checkpoint_id, w.answer, t.status AS tstatus, t.deleted,
                t.head_checkpoint_id = w.checkpoint_id AS at_head,
                CASE WHEN jsonb_typeof(t.metadata::jsonb #> '{{tags,graph}}') = 'string'
                    AND jsonb_typeof(t.metadata::jsonb -> 'subgraph') IS NULL
                    THEN t.metadata::jsonb #>> '{{tags,graph}}' END AS graph
            FROM {waits} w LEFT JOIN {threads} t ON t.thread_id = w.thread_id
            WHERE w.status = 'pending' AND w.wake_at <= %(now)s
            FOR UPDATE OF w SKIP LOCKED
        ), fire AS (
            UPDATE {waits} u SET status = 'fired', fired_at = %(now)s, run_id = md5(%(salt)s || u.thread_id)
            FROM due WHERE u.thread_id = due.thread_id AND u.status = 'pending' AND due.tstatus = 'interrupted'
                AND due.at_head AND NOT due.deleted AND due.graph IS NOT NULL
            RETURNING u.thread_id, u.run_id, due.checkpoint_id, due.answer, due.graph
        ), stale AS (
            UPDATE {waits} u SET status = 'stale'
            FROM due WHERE u.thread_id = due.thread_id AND u.status = 'pending'
                AND NOT (due.tstatus = 'running' AND due.at_head AND NOT due.deleted)
                AND NOT (due.tstatus = 'interrupted' AND due.at_head AND NOT due.deleted AND due.graph IS NOT NULL)
            RETURNING 1
        ), queued AS (
            INSERT INTO {runs} (run_id, thread_id, kind, status, graph, payload, attempt, created_at)
            SELECT run_id, thread_id, 'resume', 'queued', graph, answer, 0, %(now)s FROM fire
            RETURNING thread_id
        )
        SELECT fire.thread_id, fire.run_id, fire.checkpoint_id, fire.answer, pg_notify(%(channel)s, fire.thread_id)
        FROM fire JOIN queued ON queued.thread_id = fire.thread_id""",
    # In the waker's transaction: the queued run's payload sealed to the run (the wait's answer is sealed to the wait).
    "wake_payload": "UPDATE {runs} SET payload = %(payload)s WHERE run_id = %(rid)s",
    "list_waits": "SELECT " + _COLS + " FROM {waits} WHERE (%(status)s::text IS NULL OR status = %(status)s)"
    " AND (%(tid)s::text IS NULL OR thread_id = %(tid)s) ORDER BY wake_at, thread_id",
}
"""The waits' named statements (merged into :data:`graphckpt.savers._pg_sql.SQL`)."""


class PostgresWaits(WaitTable):
    """Mixed into :class:`~graphckpt.savers.postgres.PostgresSaver`."""

    if TYPE_CHECKING:  # what the mixin needs of the saver
        sealer: Sealer

        @property
        def channel(self) -> str: ...

        def _transaction(self, action: str) -> contextlib.AbstractAsyncContextManager[Statements]: ...

        async def _fetch(
            self, action: str, query: str, params: Sequence[Any] | Mapping[str, Any]
        ) -> list[tuple[Any, ...]]: ...

    async def put_wait(self, thread_id: str, checkpoint_id: str, wake_at: float, answer: bytes | None) -> None:
        sealed = self.sealer.seal_wait(thread_id, checkpoint_id, answer)
        params = {"tid": thread_id, "cp": checkpoint_id, "wake": wake_at, "answer": sealed, "now": ids.now()}
        await self._fetch(f"wait of thread {thread_id!r}", "put_wait", params)

    async def wake_due(self, now: float) -> list[str]:
        params = {"now": now, "salt": ids.new_id(), "channel": self.channel}
        if self.sealer.keyring is None:
            return [r[0] for r in await self._fetch("wake of due waits", "wake_due", params)]
        async with self._transaction("wake of due waits") as run:
            rows = await run("wake_due", params)
            for tid, rid, cp, answer, _ in rows:
                if answer is not None:
                    payload = self.sealer.wake_payload(rid, tid, cp, bytes(answer))
                    await run("wake_payload", {"payload": payload, "rid": rid})
        return [r[0] for r in rows]

    async def list_waits(self, *, status: WaitStatus | None = None, thread_id: str | None = None) -> list[WaitRecord]:
        rows = await self._fetch("list of waits", "list_waits", {"status": status, "tid": thread_id})
        return [
            WaitRecord(
                r[0],
                r[1],
                r[2],
                r[3],
                self.sealer.open_wait(r[0], r[1], bytes(r[4]) if r[4] is not None else None),
                *r[5:],
            )
            for r in rows
        ]
