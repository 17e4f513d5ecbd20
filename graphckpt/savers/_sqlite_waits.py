"""SqliteSaver's durable waits (see :mod:`graphckpt.savers.waits`): the ``waits`` table; the waker is one
``BEGIN IMMEDIATE`` transaction (the file's write lock makes its compare-and-set exclusive across processes)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from graphckpt import ids
from graphckpt.savers.waits import WaitRecord, WaitStatus, WaitTable

if TYPE_CHECKING:
    from graphckpt.savers._sealing import Sealer

_T = TypeVar("_T")

SQLITE_WAITS_MIGRATION: Final = (
    """CREATE TABLE waits (
        thread_id TEXT PRIMARY KEY, checkpoint_id TEXT NOT NULL, wake_at REAL NOT NULL, status TEXT NOT NULL,
        answer BLOB, created_at REAL NOT NULL, fired_at REAL, run_id TEXT)""",
    "CREATE INDEX waits_due ON waits (wake_at) WHERE status = 'pending'",
)
"""The table and its index (a migration of :data:`graphckpt.savers._sqlite_schema.MIGRATIONS`)."""

_COLS = "thread_id, checkpoint_id, wake_at, status, answer, created_at, fired_at, run_id"
PUT_WAIT = (
    f"INSERT INTO waits ({_COLS}) VALUES (?, ?, ?, 'pending', ?, ?, NULL, NULL) ON CONFLICT (thread_id) DO UPDATE SET "
    "wake_at = CASE WHEN waits.status = 'pending' AND waits.checkpoint_id = excluded.checkpoint_id "
    "THEN min(waits.wake_at, excluded.wake_at) ELSE excluded.wake_at END, "
    "checkpoint_id = excluded.checkpoint_id, status = 'pending', answer = excluded.answer, "
    "created_at = excluded.created_at, fired_at = NULL, run_id = NULL"
)
"""One wait per thread; a pending one at the same checkpoint keeps the earlier time."""
DUE = (
    "SELECT w.thread_id, w.checkpoint_id, w.answer, t.status, t.head_checkpoint_id = w.checkpoint_id, t.deleted,"
    " CASE WHEN json_type(t.metadata, '$.tags.graph') = 'text' AND json_type(t.metadata, '$.subgraph') IS NULL"
    " THEN json_extract(t.metadata, '$.tags.graph') END"
    " FROM waits AS w LEFT JOIN threads AS t ON t.thread_id = w.thread_id"
    " WHERE w.status = 'pending' AND w.wake_at <= ?"
)
FIRE = "UPDATE waits SET status = 'fired', fired_at = ?, run_id = ? WHERE thread_id = ? AND status = 'pending'"
"""The compare-and-set: only a pending wait fires (inside the waker's write transaction)."""
STALE = "UPDATE waits SET status = 'stale' WHERE thread_id = ? AND status = 'pending'"
QUEUE_RESUME = (
    "INSERT INTO runs (run_id, thread_id, kind, status, graph, payload, created_at) "
    "VALUES (?, ?, 'resume', 'queued', ?, ?, ?)"
)


class SqliteWaits(WaitTable):
    """Mixed into :class:`~graphckpt.savers.sqlite.SqliteSaver`."""

    if TYPE_CHECKING:  # what the mixin needs of the saver
        sealer: Sealer

        async def _write(self, body: Callable[[sqlite3.Connection], _T]) -> _T: ...
        async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]: ...

    async def put_wait(self, thread_id: str, checkpoint_id: str, wake_at: float, answer: bytes | None) -> None:
        params = (thread_id, checkpoint_id, wake_at, self.sealer.seal_wait(thread_id, checkpoint_id, answer), ids.now())
        await self._write(lambda conn: conn.execute(PUT_WAIT, params))

    async def wake_due(self, now: float) -> list[str]:
        def body(conn: sqlite3.Connection) -> list[str]:
            woken = []
            for thread_id, cp, answer, status, at_head, deleted, graph in conn.execute(DUE, (now,)).fetchall():
                if status == "running" and at_head and not deleted:
                    continue  # the node wrote its wait and is about to stop: fire after the stop commits
                if status != "interrupted" or not at_head or deleted or graph is None:
                    conn.execute(STALE, (thread_id,))
                    continue
                run_id = ids.new_id()
                if conn.execute(FIRE, (now, run_id, thread_id)).rowcount == 1:
                    payload = self.sealer.wake_payload(run_id, thread_id, cp, answer)
                    conn.execute(QUEUE_RESUME, (run_id, thread_id, graph, payload, now))
                    woken.append(thread_id)
            return woken

        return await self._write(body)

    async def list_waits(self, *, status: WaitStatus | None = None, thread_id: str | None = None) -> list[WaitRecord]:
        sql = f"SELECT {_COLS} FROM waits WHERE (? IS NULL OR status = ?) AND (? IS NULL OR thread_id = ?)"
        rows = await self._fetch(f"{sql} ORDER BY wake_at, thread_id", (status, status, thread_id, thread_id))
        return [WaitRecord(r[0], r[1], r[2], r[3], self.sealer.open_wait(r[0], r[1], r[4]), *r[5:]) for r in rows]
