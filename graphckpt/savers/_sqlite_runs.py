"""SqliteSaver's run queue (see :mod:`graphckpt.savers.queue` for the invariants). Several worker processes share
one file: every queue write is one ``BEGIN IMMEDIATE`` transaction, which SQLite serializes across processes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from graphckpt import ids
from graphckpt.errors import ThreadBusyError
from graphckpt.savers._checks import brief, check_storable, thread_busy
from graphckpt.savers._sqlite_sql import THREAD_SELECT, thread_from_row
from graphckpt.savers.base import Owner
from graphckpt.savers.queue import FAIR_WINDOW, GRAPHLESS, RunQueue, RunRecord, RunStatus

if TYPE_CHECKING:
    from graphckpt.savers._sealing import Sealer

_T = TypeVar("_T")

RUN_COLUMNS = (
    "run_id, thread_id, kind, status, graph, payload, attempt, worker, fence, lease_until, created_at, started_at,"
    " ended_at, error"
)
ENQUEUE = f"INSERT INTO runs ({RUN_COLUMNS}) VALUES (?,?,?,'queued',?,?,0,NULL,NULL,NULL,?,NULL,NULL,NULL)"
"""Queue a run. (``multitask="reject"`` checks :data:`BUSY` first, in the same transaction.)"""
BUSY = "SELECT run_id, status FROM runs WHERE thread_id = ? AND status IN ('queued', 'running') LIMIT 1"
"""``multitask="reject"``: a thread with a queued or running run is busy."""
CLAIM_RUN = (
    "UPDATE runs SET status = 'running', attempt = attempt + 1, worker = ?, fence = ?, lease_until = ?,"
    " started_at = ? WHERE run_id = ("
    " SELECT r.run_id FROM runs AS r WHERE r.status = 'queued' AND r.graph IN (SELECT value FROM json_each(?))"
    " AND NOT EXISTS (SELECT 1 FROM runs AS b WHERE b.thread_id = r.thread_id AND b.status = 'running')"
    " AND NOT EXISTS (SELECT 1 FROM threads AS t WHERE t.thread_id = r.thread_id AND t.status = 'running'"
    " AND t.lease_until >= ?)"
    f" ORDER BY r.created_at, r.run_id LIMIT 1) RETURNING {RUN_COLUMNS}"
)
"""Exactly one worker per run, one running run per thread (with the partial unique index ``runs_one_running``), and
never a thread that a live process outside the queue holds: the oldest such queued run of the worker's graphs."""
_NAMESPACE = "CASE WHEN instr({0}, '/') > 0 THEN substr({0}, 1, instr({0}, '/') - 1) ELSE '' END"
"""SQL of :func:`~graphckpt.savers.queue.namespace_of`."""
CLAIM_FAIR = (
    "UPDATE runs SET status = 'running', attempt = attempt + 1, worker = ?, fence = ?, lease_until = ?,"
    " started_at = ? WHERE run_id = ("
    " SELECT k.run_id FROM (SELECT w.run_id, w.thread_id, w.graph FROM (SELECT run_id, thread_id, graph, created_at"
    " FROM runs WHERE status = 'queued' ORDER BY created_at, run_id LIMIT ?) AS w"
    f" LEFT JOIN (SELECT {_NAMESPACE.format('thread_id')} AS ns, count(*) AS n FROM runs WHERE status = 'running'"
    f" GROUP BY ns) AS busy ON busy.ns = {_NAMESPACE.format('w.thread_id')}"
    " ORDER BY coalesce(busy.n, 0), w.created_at, w.run_id LIMIT -1) AS k"
    " WHERE k.graph IN (SELECT value FROM json_each(?))"
    " AND NOT EXISTS (SELECT 1 FROM runs AS b WHERE b.thread_id = k.thread_id AND b.status = 'running')"
    " AND NOT EXISTS (SELECT 1 FROM threads AS t WHERE t.thread_id = k.thread_id AND t.status = 'running'"
    " AND t.lease_until >= ?)"
    f" LIMIT 1) RETURNING {RUN_COLUMNS}"
)
"""Fair between namespaces (:mod:`graphckpt.savers.queue`): the ``FAIR_WINDOW`` oldest queued runs (an index range
of ``runs_queued_order``) sorted least busy namespace first, then oldest first (``LIMIT -1`` keeps SQLite from
flattening it, so the claimability checks run only until the first claimable run, not on the whole window); when
none of them is claimable, :data:`CLAIM_RUN` takes the oldest claimable run of the whole queue."""
ANY_RUNNING = "SELECT 1 FROM runs WHERE status = 'running' LIMIT 1"
"""Whether any run is running (``runs_one_running``). With none, every namespace is equally busy and the fair order
is the queue's order: :data:`CLAIM_RUN` alone (one index probe) claims the oldest, at any depth of the queue."""
FINISH_RUN = (
    "UPDATE runs SET status = ?, error = ?, ended_at = CASE WHEN ? = 'queued' THEN NULL ELSE ? END,"
    " fence = CASE WHEN ? = 'queued' THEN NULL ELSE fence END,"
    " lease_until = CASE WHEN ? = 'queued' THEN NULL ELSE lease_until END"
    " WHERE run_id = ? AND status = 'running' AND fence = ?"
)
"""Only the claim holding the fence ends (or re-queues) its run: a zombie changes nothing."""
CANCEL_RUN = "UPDATE runs SET status = 'cancelled', ended_at = ? WHERE run_id = ? AND status = 'queued'"
"""Only a queued run is cancelled here (a running one is the worker's to stop: :data:`REQUEST_CANCEL`)."""
REQUEST_CANCEL = "UPDATE runs SET cancel_requested = 1 WHERE run_id = ? AND status = 'running'"
"""Ask a running run's worker to stop it after its step; the worker ends it ``cancelled``."""
DELETE_RUN = "DELETE FROM runs WHERE run_id = ? AND status NOT IN ('queued', 'running')"
"""Only an ended run is deleted (a queued or running one is cancelled first)."""
CANCEL_REQUESTED = "SELECT cancel_requested FROM runs WHERE run_id = ? AND status = 'running'"
CANCELS_REQUESTED = (
    "SELECT run_id FROM runs WHERE run_id IN (SELECT value FROM json_each(?)) AND status = 'running' "
    "AND cancel_requested"
)
REQUEUE_EXPIRED = (
    "UPDATE runs SET status = 'queued', fence = NULL, lease_until = NULL WHERE status = 'running' AND lease_until < ?"
)
"""Nothing stranded: a running run whose worker stopped heartbeating goes back to the queue (a claim runs it)."""
CRASHED_WITHOUT_RUN = (
    "SELECT t.thread_id, json_extract(t.metadata, '$.tags.graph') FROM threads AS t"
    " WHERE t.deleted = 0 AND t.status = 'running' AND t.lease_until < ?"
    " AND json_extract(t.metadata, '$.subgraph') IS NULL AND json_type(t.metadata, '$.tags.graph') = 'text'"
    " AND NOT EXISTS (SELECT 1 FROM runs AS r WHERE r.thread_id = t.thread_id AND r.status IN ('queued', 'running'))"
)
"""Crashed threads nobody queued: recovery queues a resume for each (not a subgraph's child thread, whose
head metadata links it to its parent: the parent's resume continues it; nor a thread without a ``graph`` tag, run
outside the queue: no worker could claim its run, it stays ``crashed`` for ``graphckpt recover`` or a person)."""
CANCEL_GRAPHLESS = (
    "UPDATE runs SET status = 'cancelled', ended_at = ?, error = ? WHERE status = 'queued' AND graph IS NULL"
)
"""Nothing queued forever: a queued run without a graph (an older sweeper queued them for graph-less threads) can
never be claimed, so it is cancelled, saying why (it would keep its thread busy for every ``reject`` submit)."""

PUT_CREATED = "INSERT INTO created_threads (thread_id, tags, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
"""A thread created before its first checkpoint; the first one of an id wins."""
GET_CREATED = "SELECT tags, created_at FROM created_threads WHERE thread_id = ?"
DELETE_CREATED = "DELETE FROM created_threads WHERE thread_id = ?"


class SqliteRuns(RunQueue):
    """Mixed into :class:`~graphckpt.savers.sqlite.SqliteSaver`."""

    if TYPE_CHECKING:  # what the mixin needs of the saver

        async def _write(self, body: Callable[[sqlite3.Connection], _T]) -> _T: ...
        async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]: ...

        sealer: Sealer

    async def enqueue_run(self, run: RunRecord, *, reject_busy: bool) -> None:
        check_storable(thread_id=run.thread_id, run_id=run.run_id, graph=run.graph)
        run = self.sealer.seal_run(run)
        now = ids.now()

        def body(conn: sqlite3.Connection) -> None:
            if reject_busy:
                _check_not_busy(conn, run.thread_id, now)
            conn.execute(ENQUEUE, (run.run_id, run.thread_id, run.kind, run.graph, run.payload, run.created_at or now))

        await self._write(body)

    async def claim_run(
        self, owner: Owner, *, graphs: Sequence[str], fence: str, lease_until: float
    ) -> RunRecord | None:
        now = ids.now()
        claim = (owner.worker_id, fence, lease_until, now)
        among = (json.dumps(list(graphs)), now)

        def body(conn: sqlite3.Connection) -> RunRecord | None:
            row = None
            if conn.execute(ANY_RUNNING).fetchone() is not None:  # else the fair order is the queue's order
                row = conn.execute(CLAIM_FAIR, (*claim, FAIR_WINDOW, *among)).fetchone()
            if row is None:
                row = conn.execute(CLAIM_RUN, claim + among).fetchone()
            return self.sealer.open_run(RunRecord.from_row(row)) if row is not None else None

        result: RunRecord | None = await self._write(body)
        return result

    async def finish_run(self, run_id: str, *, fence: str, status: RunStatus, error: str | None = None) -> None:
        now = ids.now()
        params = (status, error, status, now, status, status, run_id, fence)
        await self._write(lambda conn: conn.execute(FINISH_RUN, params))

    async def cancel_run(self, run_id: str) -> bool:
        now = ids.now()
        cancelled: int = await self._write(lambda conn: conn.execute(CANCEL_RUN, (now, run_id)).rowcount)
        return cancelled == 1

    async def request_cancel(self, run_id: str) -> bool:
        asked: int = await self._write(lambda conn: conn.execute(REQUEST_CANCEL, (run_id,)).rowcount)
        return asked == 1

    async def cancel_requested(self, run_id: str) -> bool:
        rows = await self._fetch(CANCEL_REQUESTED, (run_id,))
        return bool(rows and rows[0][0])

    async def cancels_requested(self, run_ids: Collection[str]) -> set[str]:
        if not run_ids:
            return set()
        rows = await self._fetch(CANCELS_REQUESTED, (json.dumps(list(run_ids)),))
        return {str(r[0]) for r in rows}

    async def delete_run(self, run_id: str) -> bool:
        deleted: int = await self._write(lambda conn: conn.execute(DELETE_RUN, (run_id,)).rowcount)
        return deleted == 1

    async def get_run(self, run_id: str) -> RunRecord | None:
        rows = await self._fetch(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        return self.sealer.open_run(RunRecord.from_row(rows[0])) if rows else None

    async def list_runs(self, *, thread_id: str | None = None, status: RunStatus | None = None) -> list[RunRecord]:
        sql = (
            f"SELECT {RUN_COLUMNS} FROM runs WHERE (? IS NULL OR thread_id = ?) AND (? IS NULL OR status = ?)"
            " ORDER BY created_at, run_id"
        )
        rows = await self._fetch(sql, (thread_id, thread_id, status, status))
        return self.sealer.open_runs([RunRecord.from_row(r) for r in rows])

    async def requeue_expired(self, now: float) -> int:
        def body(conn: sqlite3.Connection) -> int:
            moved = conn.execute(REQUEUE_EXPIRED, (now,)).rowcount
            conn.execute(CANCEL_GRAPHLESS, (now, GRAPHLESS))
            for thread_id, graph in conn.execute(CRASHED_WITHOUT_RUN, (now,)).fetchall():
                conn.execute(ENQUEUE, (ids.new_id(), thread_id, "resume", graph, None, now))
                moved += 1
            return int(moved)

        count: int = await self._write(body)
        return count

    async def put_created_thread(self, thread_id: str, tags: str, created_at: float) -> bool:
        check_storable(thread_id=thread_id)
        added: int = await self._write(lambda conn: conn.execute(PUT_CREATED, (thread_id, tags, created_at)).rowcount)
        return added == 1

    async def get_created_thread(self, thread_id: str) -> tuple[str, float] | None:
        rows = await self._fetch(GET_CREATED, (thread_id,))
        return (str(rows[0][0]), float(rows[0][1])) if rows else None

    async def delete_created_thread(self, thread_id: str) -> None:
        await self._write(lambda conn: conn.execute(DELETE_CREATED, (thread_id,)))


def _check_not_busy(conn: sqlite3.Connection, thread_id: str, now: float) -> None:
    busy = conn.execute(BUSY, (thread_id,)).fetchone()
    if busy is not None:
        raise ThreadBusyError(
            f"thread {brief(thread_id)!r} already has run {busy[0]} {busy[1]} (multitask='reject'; use "
            "multitask='enqueue' to run after it)",
            thread_id=thread_id,
        )
    row = conn.execute(f"{THREAD_SELECT} AND thread_id = ?", (thread_id,)).fetchone()
    if row is not None:
        record = thread_from_row(row, now)
        if record.status == "running" and record.lease is not None and record.lease.live(now):
            raise thread_busy(thread_id, record.lease, now)
