"""PostgresSaver's run queue (see :mod:`graphckpt.savers.queue` for the invariants): claims with ``FOR UPDATE SKIP
LOCKED`` (workers never wait on each other's candidates), a ``NOTIFY`` on the schema's channel when a run is queued
(workers ``LISTEN`` and poll as a fallback), and the one-running-run-per-thread partial unique index."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, LiteralString

import psycopg

from graphckpt import ids
from graphckpt.errors import SaverError, ThreadBusyError
from graphckpt.savers._checks import brief, check_storable, thread_busy
from graphckpt.savers.base import Owner
from graphckpt.savers.queue import FAIR_WINDOW, GRAPHLESS, RunQueue, RunRecord, RunStatus

if TYPE_CHECKING:
    from graphckpt.savers._sealing import Sealer
    from graphckpt.savers.base import ThreadRecord

RUN_COLS: LiteralString = (
    "run_id, thread_id, kind, status, graph, payload, attempt, worker, fence, lease_until, created_at, started_at, "
    "ended_at, error"
)
FAIR_PICKS = 16
"""How many runs of the fair order a claim tries (locked by other claims meanwhile: the next)."""
# The fair order's limits are written into its text, not bound: with them as parameters PostgreSQL's generic plan
# is costed without the limits, so on a deep queue it planned the statement again at every claim (+0.35 ms at
# 10,000 queued runs, none at 100, where the generic plan won); with them in the text the cached plan serves both.
_WINDOW: LiteralString = str(int(FAIR_WINDOW))
_PICKS: LiteralString = str(int(FAIR_PICKS))
RUN_SQL: dict[str, LiteralString] = {
    # multitask="reject": a thread with a queued or running run is busy (checked in the enqueue's statement: the
    # insert happens only when none exists; a live lease is checked by the caller first).
    "enqueue": """WITH i AS (
            INSERT INTO {runs} ("""
    + RUN_COLS
    + """)
            SELECT %(run)s, %(tid)s, %(kind)s, 'queued', %(graph)s, %(payload)s, 0, NULL, NULL, NULL, %(now)s,
                NULL, NULL, NULL
            WHERE NOT %(reject)s OR NOT EXISTS (
                SELECT 1 FROM {runs} WHERE thread_id = %(tid)s AND status IN ('queued', 'running'))
            RETURNING 1)
        SELECT (SELECT count(*) FROM i), pg_notify(%(channel)s, %(tid)s)""",
    "busy": "SELECT run_id, status FROM {runs} WHERE thread_id = %(tid)s AND status IN ('queued', 'running') LIMIT 1",
    # Exactly one worker per run (SKIP LOCKED: a row another worker is claiming is skipped, not waited for), one
    # running run per thread (with the partial unique index), never a thread a live process outside the queue holds.
    "claim_run": """WITH c AS (
            SELECT r.run_id FROM {runs} r WHERE r.status = 'queued' AND r.graph = ANY(%(graphs)s::text[])
                AND NOT EXISTS (SELECT 1 FROM {runs} b WHERE b.thread_id = r.thread_id AND b.status = 'running')
                AND NOT EXISTS (SELECT 1 FROM {threads} t WHERE t.thread_id = r.thread_id AND t.status = 'running'
                    AND t.lease_until >= %(now)s)
            ORDER BY r.created_at, r.run_id LIMIT 1 FOR UPDATE OF r SKIP LOCKED)
        UPDATE {runs} u SET status = 'running', attempt = u.attempt + 1, worker = %(worker)s, fence = %(fence)s,
            lease_until = %(until)s, started_at = %(now)s
        FROM c WHERE u.run_id = c.run_id RETURNING u.*""",  # (the table's columns are in RUN_COLS order)
    # Fair between namespaces (savers/queue.py), in two statements so that each stays an indexed read. "fair_order":
    # of the FAIR_WINDOW oldest queued runs (an index range of runs_queued_order, no lock), the claimable ones of the
    # worker's graphs, the least busy namespace first, oldest first, the first FAIR_PICKS of them. "claim_among": the
    # first of those still claimable (rechecked: the order was read without locks), as claim_run; when none is (all
    # claimed or locked meanwhile, or none in the window), claim_run takes the oldest claimable run of the queue.
    # With no run running, every namespace is equally busy and the fair order is the queue's order: fair_order is
    # then empty at once (a one-time check of runs_one_running gates the window's read) and claim_run, one index
    # probe, claims the oldest, so an idle queue's claim costs the same at any depth (issue 25).
    "fair_order": """WITH w AS (
            SELECT run_id, thread_id, graph, created_at FROM {runs} WHERE status = 'queued'
            ORDER BY created_at, run_id LIMIT """
    + _WINDOW
    + """),
        busy AS (
            SELECT CASE WHEN strpos(thread_id, '/') > 0 THEN split_part(thread_id, '/', 1) ELSE '' END AS ns,
                count(*) AS n FROM {runs} WHERE status = 'running' GROUP BY 1)
        SELECT w.run_id FROM w LEFT JOIN busy ON busy.ns = CASE WHEN strpos(w.thread_id, '/') > 0
                THEN split_part(w.thread_id, '/', 1) ELSE '' END
        WHERE w.graph = ANY(%(graphs)s::text[])
            AND NOT EXISTS (SELECT 1 FROM {runs} b WHERE b.thread_id = w.thread_id AND b.status = 'running')
            AND NOT EXISTS (SELECT 1 FROM {threads} t WHERE t.thread_id = w.thread_id AND t.status = 'running'
                AND t.lease_until >= %(now)s)
            AND EXISTS (SELECT 1 FROM {runs} WHERE status = 'running')
        ORDER BY coalesce(busy.n, 0), w.created_at, w.run_id LIMIT """
    + _PICKS,
    "claim_among": """WITH c AS (
            SELECT r.run_id FROM {runs} r WHERE r.run_id = ANY(%(picks)s::text[]) AND r.status = 'queued'
                AND NOT EXISTS (SELECT 1 FROM {runs} b WHERE b.thread_id = r.thread_id AND b.status = 'running')
                AND NOT EXISTS (SELECT 1 FROM {threads} t WHERE t.thread_id = r.thread_id AND t.status = 'running'
                    AND t.lease_until >= %(now)s)
            ORDER BY array_position(%(picks)s::text[], r.run_id) LIMIT 1 FOR UPDATE OF r SKIP LOCKED)
        UPDATE {runs} u SET status = 'running', attempt = u.attempt + 1, worker = %(worker)s, fence = %(fence)s,
            lease_until = %(until)s, started_at = %(now)s
        FROM c WHERE u.run_id = c.run_id RETURNING u.*""",
    # Only the claim holding the fence ends (or re-queues) its run: a zombie changes nothing.
    "finish_run": """UPDATE {runs} SET status = %(status)s, error = %(error)s,
            ended_at = CASE WHEN %(status)s = 'queued' THEN NULL ELSE %(now)s END,
            fence = CASE WHEN %(status)s = 'queued' THEN NULL ELSE fence END,
            lease_until = CASE WHEN %(status)s = 'queued' THEN NULL ELSE lease_until END
        WHERE run_id = %(run)s AND status = 'running' AND fence = %(fence)s RETURNING 1""",
    # Only a queued run is cancelled.
    "cancel_run": "UPDATE {runs} SET status = 'cancelled', ended_at = %(now)s WHERE run_id = %(run)s "
    "AND status = 'queued' RETURNING 1",
    # Ask a running run's worker to stop it after its step (the worker ends it cancelled), and its check.
    "request_cancel": "UPDATE {runs} SET cancel_requested = true WHERE run_id = %(run)s AND status = 'running' "
    "RETURNING 1",
    "cancel_requested": "SELECT cancel_requested FROM {runs} WHERE run_id = %(run)s AND status = 'running'",
    "cancels_requested": "SELECT run_id FROM {runs} WHERE run_id = ANY(%(runs)s::text[]) AND status = 'running' "
    "AND cancel_requested",
    # Only an ended run is deleted (a queued or running one is cancelled first).
    "delete_run": "DELETE FROM {runs} WHERE run_id = %(run)s AND status NOT IN ('queued', 'running') RETURNING 1",
    "get_run": "SELECT " + RUN_COLS + " FROM {runs} WHERE run_id = %(run)s",
    "list_runs": "SELECT "
    + RUN_COLS
    + """ FROM {runs} WHERE (%(tid)s::text IS NULL OR thread_id = %(tid)s)
        AND (%(status)s::text IS NULL OR status = %(status)s) ORDER BY created_at, run_id""",
    # Nothing stranded: running runs whose worker stopped heartbeating go back to the queue, and every crashed
    # thread nobody queued gets a resume run (a claim runs them; the sweeper never does), but a subgraph's child
    # thread (its parent's resume continues it) and a thread without a graph tag (run outside the queue: no worker
    # could claim it; it stays crashed). Nothing queued forever: a queued run without a graph (older versions queued
    # them) is cancelled with GRAPHLESS as its error.
    "requeue_expired": """WITH q AS (
            UPDATE {runs} SET status = 'queued', fence = NULL, lease_until = NULL
            WHERE status = 'running' AND lease_until < %(now)s RETURNING 1
        ), g AS (
            UPDATE {runs} SET status = 'cancelled', ended_at = %(now)s, error = %(graphless)s
            WHERE status = 'queued' AND graph IS NULL RETURNING 1
        ), n AS (
            INSERT INTO {runs} ("""
    + RUN_COLS
    + """)
            SELECT md5(%(salt)s || t.thread_id), t.thread_id, 'resume', 'queued',
                t.metadata::jsonb #>> '{{tags,graph}}', NULL, 0, NULL, NULL, NULL, %(now)s, NULL, NULL, NULL
            FROM {threads} t WHERE NOT t.deleted AND t.status = 'running' AND t.lease_until < %(now)s
                AND t.metadata -> 'subgraph' IS NULL
                AND jsonb_typeof(t.metadata::jsonb #> '{{tags,graph}}') = 'string'
                AND NOT EXISTS (SELECT 1 FROM {runs} r WHERE r.thread_id = t.thread_id
                    AND r.status IN ('queued', 'running'))
            RETURNING 1)
        SELECT (SELECT count(*) FROM q) + (SELECT count(*) FROM n), pg_notify(%(channel)s, '')""",
    # A thread created before its first checkpoint; the first one of an id wins.
    "put_created": "INSERT INTO {created_threads} (thread_id, tags, created_at) VALUES (%(tid)s, %(tags)s, %(now)s) "
    "ON CONFLICT DO NOTHING RETURNING 1",
    "get_created": "SELECT tags, created_at FROM {created_threads} WHERE thread_id = %(tid)s",
    "delete_created": "DELETE FROM {created_threads} WHERE thread_id = %(tid)s RETURNING 1",
}


class PostgresRuns(RunQueue):
    """Mixed into :class:`~graphckpt.savers.postgres.PostgresSaver`."""

    if TYPE_CHECKING:
        _schema: str | None

        async def _fetch(self, action: str, query: str, params: Any) -> list[tuple[Any, ...]]: ...
        async def get_thread(self, thread_id: str) -> ThreadRecord | None: ...

        sealer: Sealer

    @property
    def channel(self) -> str:
        """The ``LISTEN``/``NOTIFY`` channel of this schema's queue."""
        return "graphckpt_runs_" + hashlib.sha1((self._schema or "").encode()).hexdigest()[:16]

    async def enqueue_run(self, run: RunRecord, *, reject_busy: bool) -> None:
        check_storable(thread_id=run.thread_id, run_id=run.run_id, graph=run.graph)
        now = ids.now()
        if reject_busy:
            record = await self.get_thread(run.thread_id)
            if record is not None and record.status == "running" and record.lease is not None:
                raise thread_busy(run.thread_id, record.lease, now)
        params = {
            "run": run.run_id,
            "tid": run.thread_id,
            "kind": run.kind,
            "graph": run.graph,
            "payload": self.sealer.seal_run(run).payload,
            "now": run.created_at or now,
            "reject": reject_busy,
            "channel": self.channel,
        }
        [(inserted, _)] = await self._fetch(f"enqueue to thread {brief(run.thread_id)!r}", "enqueue", params)
        if not inserted:
            rows = await self._fetch("busy", "busy", {"tid": run.thread_id})
            what = f"run {rows[0][0]} {rows[0][1]}" if rows else "a run"
            raise ThreadBusyError(
                f"thread {brief(run.thread_id)!r} already has {what} (multitask='reject'; use multitask='enqueue' "
                "to run after it)",
                thread_id=run.thread_id,
            )

    async def claim_run(
        self, owner: Owner, *, graphs: Sequence[str], fence: str, lease_until: float
    ) -> RunRecord | None:
        params = {
            "graphs": list(graphs),
            "now": ids.now(),
            "worker": owner.worker_id,
            "fence": fence,
            "until": lease_until,
        }
        try:
            picks = await self._fetch("claim of a queued run", "fair_order", params)
            rows = []
            if picks:
                params["picks"] = [row[0] for row in picks]
                rows = await self._fetch("claim of a queued run", "claim_among", params)
            if not rows:
                rows = await self._fetch("claim of a queued run", "claim_run", params)
        except SaverError as exc:
            if isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
                return None  # another worker claimed a run of the same thread at the same time: try again
            raise
        return self.sealer.open_run(RunRecord.from_row(rows[0])) if rows else None

    async def finish_run(self, run_id: str, *, fence: str, status: RunStatus, error: str | None = None) -> None:
        params = {"run": run_id, "fence": fence, "status": status, "error": error, "now": ids.now()}
        await self._fetch(f"finish of run {brief(run_id)!r}", "finish_run", params)

    async def cancel_run(self, run_id: str) -> bool:
        return bool(
            await self._fetch(f"cancel of run {brief(run_id)!r}", "cancel_run", {"run": run_id, "now": ids.now()})
        )

    async def request_cancel(self, run_id: str) -> bool:
        return bool(await self._fetch(f"cancel request of run {brief(run_id)!r}", "request_cancel", {"run": run_id}))

    async def cancel_requested(self, run_id: str) -> bool:
        rows = await self._fetch(f"cancel check of run {brief(run_id)!r}", "cancel_requested", {"run": run_id})
        return bool(rows and rows[0][0])

    async def cancels_requested(self, run_ids: Collection[str]) -> set[str]:
        if not run_ids:
            return set()
        rows = await self._fetch(f"cancel check of {len(run_ids)} runs", "cancels_requested", {"runs": list(run_ids)})
        return {str(r[0]) for r in rows}

    async def delete_run(self, run_id: str) -> bool:
        return bool(await self._fetch(f"delete of run {brief(run_id)!r}", "delete_run", {"run": run_id}))

    async def get_run(self, run_id: str) -> RunRecord | None:
        rows = await self._fetch(f"get_run {brief(run_id)!r}", "get_run", {"run": run_id})
        return self.sealer.open_run(RunRecord.from_row(rows[0])) if rows else None

    async def list_runs(self, *, thread_id: str | None = None, status: RunStatus | None = None) -> list[RunRecord]:
        rows = await self._fetch("list_runs", "list_runs", {"tid": thread_id, "status": status})
        return self.sealer.open_runs([RunRecord.from_row(r) for r in rows])

    async def requeue_expired(self, now: float) -> int:
        params = {"now": now, "salt": ids.new_id(), "channel": self.channel, "graphless": GRAPHLESS}
        [(count, _)] = await self._fetch("requeue of expired runs", "requeue_expired", params)
        return int(count)

    async def put_created_thread(self, thread_id: str, tags: str, created_at: float) -> bool:
        check_storable(thread_id=thread_id)
        params = {"tid": thread_id, "tags": tags, "now": created_at}
        return bool(await self._fetch(f"create of thread {brief(thread_id)!r}", "put_created", params))

    async def get_created_thread(self, thread_id: str) -> tuple[str, float] | None:
        rows = await self._fetch(f"get of created thread {brief(thread_id)!r}", "get_created", {"tid": thread_id})
        return (str(rows[0][0]), float(rows[0][1])) if rows else None

    async def delete_created_thread(self, thread_id: str) -> None:
        await self._fetch(f"delete of created thread {brief(thread_id)!r}", "delete_created", {"tid": thread_id})
