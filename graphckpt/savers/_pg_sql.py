"""The named SQL statements of PostgresSaver, with their column lists, and rows to records."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, LiteralString

from psycopg.types.json import Jsonb

from graphckpt.savers._checks import lease_from_columns, nul_free, thread_status
from graphckpt.savers._events_sql import PG_EVENT_KIND, PG_READ_EVENTS, PG_VERSION
from graphckpt.savers._pg_crons import CRON_SQL
from graphckpt.savers._pg_items import ITEM_SQL
from graphckpt.savers._pg_runs import RUN_SQL
from graphckpt.savers._pg_waits import WAIT_SQL
from graphckpt.savers._row_checks import checked_checkpoint, checked_lease_columns, checked_thread
from graphckpt.savers._thread_pages import decode_cursor
from graphckpt.savers.base import StoredCheckpoint, ThreadRecord
from graphckpt.savers.lazyjson import LazyJsonMapping
from graphckpt.savers.usage import PG_TABLE_BYTES, PG_THREAD_BYTES

THREAD_COLS: LiteralString = (
    "thread_id, head_checkpoint_id, head_step, status, run_id, created_at, updated_at, "
    "parent_thread_id, parent_checkpoint_id, error, metadata, "
    "lease_worker, lease_host, lease_pid, lease_epoch, heartbeat_at, lease_until"
)
CP_COLS: LiteralString = (
    "thread_id, checkpoint_id, parent_thread_id, parent_checkpoint_id, step, created_at, status, metadata, body"
)
THREAD_AND_CP_COLS: LiteralString = ", ".join(
    [*(f"t.{c}" for c in THREAD_COLS.split(", ")), *(f"c.{c}" for c in CP_COLS.split(", "))]
)  # built from the two literal column lists above
N_THREAD_COLS = len(THREAD_COLS.split(", "))
NUL_FREE_METADATA: LiteralString = r"""(CASE
                WHEN strpos(c.metadata::text, '\u0000') = 0 AND strpos(c.metadata::text, '\uffff') = 0
                THEN c.metadata::jsonb
                ELSE regexp_replace(regexp_replace(c.metadata::text,
                    '(?<!\\)((?:\\\\)*)\\uffff', '\1\\uffff1', 'g'),
                    '(?<!\\)((?:\\\\)*)\\u0000', '\1\\uffff0', 'g')::jsonb END)"""
"""``c.metadata`` as ``jsonb``, with :func:`nul_free`'s mapping applied to the text when it escapes NUL or U+FFFF
(``compact_json`` writes ASCII only, with lowercase escapes). An escape counts only where its backslash is not the
second half of an escaped backslash (``\\u0000`` in the text is a backslash and the letters ``u0000``)."""
SQL: dict[str, LiteralString] = {
    "usage_tables": PG_TABLE_BYTES,
    "usage_threads": PG_THREAD_BYTES,
    "read_events": PG_READ_EVENTS,
    "event_kind": PG_EVENT_KIND,
    "events_version": PG_VERSION,
    # Positional: thread, checkpoint, parent thread, parent checkpoint, step, created_at, status, metadata, body,
    # now, run, expected head, then the blobs' threads, channels, steps, kinds and data as arrays, the lease (worker,
    # host, pid, until), and the events' kinds and payloads as arrays.
    "commit": """SELECT won, head, run FROM {graphckpt_commit}(%s, %s, %s, %s, %s, %s, %s, %b, %b, %s, %s, %s,
        %b, %b, %b, %b, %b, %s, %s, %s, %s, %b, %b)""",
    # Leases (DESIGN.md invariant 9). Take a thread for a new run: compare-and-set on head and previous run (nobody
    # claimed it since it was read) and on the lease (nobody live holds it: a second resume is refused); the new
    # run_id fences the old owner. Returns the new epoch, or nothing (then the thread's row explains why).
    "claim": """UPDATE {threads} SET run_id = %(run)s, status = 'running', updated_at = %(now)s,
            lease_epoch = lease_epoch + 1, lease_worker = %(worker)s, lease_host = %(host)s, lease_pid = %(pid)s,
            heartbeat_at = CASE WHEN %(until)s::float8 IS NULL THEN NULL ELSE %(now)s END,
            lease_until = %(until)s::float8
        WHERE thread_id = %(tid)s AND head_checkpoint_id = %(expected)s AND run_id = %(old_run)s AND NOT deleted
            AND (status <> 'running' OR lease_until IS NULL OR lease_until < %(now)s
                OR lease_epoch = %(take)s::bigint)
        RETURNING lease_epoch""",
    # End the lease of a dead owner now (compare-and-set on its epoch), and its running run's (a worker's): reads,
    # claims and the sweeper see the thread crashed.
    "expire": """WITH t AS (
            UPDATE {threads} SET lease_until = %(now)s WHERE thread_id = %(tid)s AND lease_epoch = %(epoch)s
                AND status = 'running' AND lease_worker IS NOT NULL AND NOT deleted RETURNING thread_id
        ), r AS (
            UPDATE {runs} SET lease_until = %(now)s
            WHERE thread_id IN (SELECT thread_id FROM t) AND status = 'running'
        )
        SELECT 1 FROM t""",
    # Renew a run's lease; no row: it was taken over (the fence moved), or released by its own run.
    # The running run's lease follows its thread's.
    "heartbeat": """WITH r AS (
            UPDATE {runs} SET lease_until = %(until)s
            WHERE thread_id = %(tid)s AND status = 'running' AND fence = %(run)s)
        UPDATE {threads} SET heartbeat_at = %(now)s, lease_until = %(until)s
        WHERE thread_id = %(tid)s AND run_id = %(run)s AND lease_worker IS NOT NULL AND NOT deleted RETURNING 1""",
    # Give a lease up on a graceful stop: only the run that holds it can.
    "release": """UPDATE {threads} SET lease_worker = NULL, lease_host = NULL, lease_pid = NULL, heartbeat_at = NULL,
            lease_until = NULL
        WHERE thread_id = %(tid)s AND run_id = %(run)s AND NOT deleted""",
    # The writes go in before the status changes, so their events (effect, interrupt, task failure) come before the
    # stop's event (run.failed / run.interrupted): u waits for w's rows; o locks the thread row first (and checks
    # the fence: head and run). A stop that leaves the thread done, interrupted or failed releases the lease in the
    # same statement.
    "put_writes": """WITH o AS (
        SELECT 1 FROM {threads}
        WHERE thread_id = %(tid)s AND (head_checkpoint_id = %(cp)s OR %(anywhere)s::boolean) AND run_id = %(run)s
            AND NOT deleted
        FOR UPDATE
    ), w AS (
        INSERT INTO {writes} (thread_id, checkpoint_id, task_id, kind, idx, data)
        SELECT %(tid)s, %(cp)s, w.* FROM o, unnest(%(w_task)s::text[], %(w_kind)s::text[], %(w_idx)s::int[],
                                                   %(w_data)s::bytea[]) AS w
        ON CONFLICT (thread_id, checkpoint_id, task_id, kind, idx) DO UPDATE SET data = excluded.data
        RETURNING 1
    ), u AS (
        UPDATE {threads} SET status = %(status)s::text, error = %(error)s::text, updated_at = %(now)s,
            lease_worker = CASE WHEN %(status)s::text = 'running' THEN lease_worker END,
            lease_host = CASE WHEN %(status)s::text = 'running' THEN lease_host END,
            lease_pid = CASE WHEN %(status)s::text = 'running' THEN lease_pid END,
            heartbeat_at = CASE WHEN %(status)s::text = 'running' THEN heartbeat_at END,
            lease_until = CASE WHEN %(status)s::text = 'running' THEN lease_until END
        WHERE %(status)s::text IS NOT NULL AND thread_id = %(tid)s AND EXISTS (SELECT 1 FROM o)
            AND (SELECT count(*) FROM w) >= 0
        RETURNING 1
    ), r AS (  -- runs: a stop ends the run of this claim in the same statement
        UPDATE {runs} SET status = %(status)s::text, ended_at = %(now)s, error = %(error)s::text
        WHERE thread_id = %(tid)s AND status = 'running' AND fence = %(run)s
            AND coalesce(%(status)s::text, 'running') <> 'running' AND EXISTS (SELECT 1 FROM o))
        SELECT (SELECT count(*) FROM o), EXISTS (SELECT 1 FROM {threads} WHERE thread_id = %(tid)s AND NOT deleted)""",
    "lock_thread": "SELECT deleted, parent_thread_id FROM {threads} WHERE thread_id = %(tid)s FOR UPDATE",
    # The highest step of a thread that the first checkpoint of any remaining fork (deleted-but-kept ones included:
    # their own forks still need their lineage) names as its parent.
    "needed_step": """SELECT max(p.step) FROM {threads} f JOIN {checkpoints} p
        ON p.thread_id = f.parent_thread_id AND p.checkpoint_id = f.parent_checkpoint_id
        WHERE f.parent_thread_id = %(tid)s""",
    # drop_steps: a live thread's own steps under %(below)s, above the highest fork point (%(above)s); per channel
    # the blobs under its first needed step (unnest of %(chs)s, %(firsts)s), others under %(below)s.
    "drop_steps": """WITH c AS (
        DELETE FROM {checkpoints} WHERE thread_id = %(tid)s AND step > %(above)s AND step < %(below)s
        RETURNING checkpoint_id
    ), w AS (DELETE FROM {writes} WHERE thread_id = %(tid)s AND (checkpoint_id IN (SELECT checkpoint_id FROM c)
        OR checkpoint_id IN (SELECT checkpoint_id || '#kept' FROM c))
    ), e AS (DELETE FROM {events} WHERE thread_id = %(tid)s AND step > %(above)s AND step < %(below)s
    ), b AS (DELETE FROM {blobs} WHERE thread_id = %(tid)s AND step > %(above)s AND step < %(below)s
        AND NOT (channel = ANY(%(chs)s::text[]))
    ), n AS (DELETE FROM {blobs} AS x USING unnest(%(chs)s::text[], %(firsts)s::bigint[]) AS k(ch, first)
        WHERE x.thread_id = %(tid)s AND x.channel = k.ch AND x.step > %(above)s AND x.step < least(k.first, %(below)s)
    )
    SELECT count(*) FROM c""",
    "prune": """WITH c AS (
        DELETE FROM {checkpoints} WHERE thread_id = %(tid)s AND step > %(keep)s RETURNING checkpoint_id
    ), b AS (DELETE FROM {blobs} WHERE thread_id = %(tid)s AND step > %(keep)s
    ), e AS (DELETE FROM {events} WHERE thread_id = %(tid)s AND step > %(keep)s
    ), r AS (DELETE FROM {runs} WHERE thread_id = %(tid)s
    ), n AS (DELETE FROM {created_threads} WHERE thread_id = %(tid)s
    ), w AS (DELETE FROM {waits} WHERE thread_id = %(tid)s
    ), s AS (DELETE FROM {crons} WHERE thread_id = %(tid)s)
    -- every write not of a kept checkpoint: kept writes of a checkpoint never committed included
    DELETE FROM {writes} WHERE thread_id = %(tid)s AND checkpoint_id NOT IN (
        SELECT checkpoint_id FROM {checkpoints} WHERE thread_id = %(tid)s AND step <= %(keep)s
        UNION ALL SELECT checkpoint_id || '#kept' FROM {checkpoints} WHERE thread_id = %(tid)s AND step <= %(keep)s)""",
    # a placeholder: its tags, error and lease go; its lineage up to the fork point stays
    "mark_deleted": """UPDATE {threads} SET deleted = true, metadata = '{{}}', error = NULL, lease_worker = NULL,
        lease_host = NULL, lease_pid = NULL, heartbeat_at = NULL, lease_until = NULL WHERE thread_id = %(tid)s""",
    # the live threads whose lineage runs through a thread (through deleted placeholders too)
    "thread_forks": """WITH RECURSIVE d(tid) AS (
            SELECT thread_id FROM {threads} WHERE parent_thread_id = %(tid)s AND thread_id <> %(tid)s
            UNION SELECT t.thread_id FROM {threads} t JOIN d ON t.parent_thread_id = d.tid)
        SELECT t.thread_id FROM d JOIN {threads} t ON t.thread_id = d.tid WHERE NOT t.deleted ORDER BY 1""",
    "drop_thread": "DELETE FROM {threads} WHERE thread_id = %(tid)s",
    # a family's members (graphckpt.savers.base.FAMILY_SEP): a range scan of the primary key (COLLATE "C")
    "list_family": "SELECT "
    + THREAD_COLS
    + """ FROM {threads} WHERE NOT deleted AND (thread_id = %(tid)s OR (thread_id >= %(lo)s AND thread_id < %(hi)s))
        ORDER BY thread_id""",
    "get_thread": "SELECT " + THREAD_COLS + " FROM {threads} WHERE thread_id = %(tid)s AND NOT deleted",
    # crashed and running are told apart by the lease: running with an expired lease (or a dead owner on this host,
    # which only the reader can tell) is crashed; thread_status filters the rows read. One statement per kind of
    # filter, so that even a generic plan uses the index matching it (the running threads: threads_running_lease).
    "list_threads": "SELECT "
    + THREAD_COLS
    + " FROM {threads} WHERE NOT deleted ORDER BY updated_at DESC, thread_id DESC",
    "list_threads_status": "SELECT "
    + THREAD_COLS
    + " FROM {threads} WHERE NOT deleted AND status = %(status)s ORDER BY updated_at DESC, thread_id DESC",
    "list_threads_running": "SELECT "
    + THREAD_COLS
    + " FROM {threads} WHERE status = 'running' AND NOT deleted ORDER BY updated_at DESC, thread_id DESC",
    "list_threads_leased": "SELECT "
    + THREAD_COLS
    + """ FROM {threads} WHERE status = 'running' AND lease_until IS NOT NULL AND NOT deleted
        ORDER BY updated_at DESC, thread_id DESC""",
    "thread_cp_by_id": "SELECT "
    + THREAD_AND_CP_COLS
    + """ FROM {threads} t LEFT JOIN {checkpoints} c
        ON c.thread_id = t.thread_id AND c.checkpoint_id = %(cp)s WHERE t.thread_id = %(tid)s AND NOT t.deleted""",
    "thread_cp_by_step": "SELECT "
    + THREAD_AND_CP_COLS
    + """ FROM {threads} t LEFT JOIN {checkpoints} c
        ON c.thread_id = t.thread_id AND c.step = %(step)s WHERE t.thread_id = %(tid)s AND NOT t.deleted""",
    "cp_by_id": "SELECT " + CP_COLS + " FROM {checkpoints} WHERE thread_id = %(tid)s AND checkpoint_id = %(cp)s",
    "cp_by_step": "SELECT " + CP_COLS + " FROM {checkpoints} WHERE thread_id = %(tid)s AND step = %(step)s",
    "cp_head": "SELECT "
    + CP_COLS
    + """ FROM {checkpoints} WHERE (thread_id, checkpoint_id) =
        (SELECT thread_id, head_checkpoint_id FROM {threads} WHERE thread_id = %(tid)s AND NOT deleted)""",
    # JSON equality per top-level key (metadata is stored as compact ``json``, 50 bytes a row smaller than jsonb, and
    # converted only when a filter is given). Keys and values stay one bound jsonb parameter. jsonb cannot hold NUL:
    # both sides go through nul_free's one-to-one mapping.
    "list_cps": "SELECT "
    + CP_COLS
    + """ FROM {checkpoints} c WHERE thread_id = %(tid)s
        AND (%(before)s::bigint IS NULL OR step < %(before)s::bigint)
        AND (%(filter)s::jsonb IS NULL OR NOT EXISTS (
            SELECT 1 FROM jsonb_each(%(filter)s::jsonb) AS f(key, value)
            WHERE """
    + NUL_FREE_METADATA
    + """ -> f.key IS DISTINCT FROM f.value))
        ORDER BY step DESC LIMIT %(limit)s::bigint""",
    # One index probe per range (a LATERAL subquery kept apart by OFFSET 0, so the planner cannot flatten it into a
    # hash join over the whole table); DISTINCT ON returns a blob inside several ranges once. The bound ids compare
    # as COLLATE "C", the key's collation, so the primary key is usable.
    "get_blobs": """SELECT DISTINCT ON (b.channel, b.step, b.thread_id) b.thread_id, b.channel, b.step, b.kind, b.data
        FROM unnest(%(tid)s::text[], %(ch)s::text[], %(lo)s::bigint[], %(hi)s::bigint[]) AS r(tid, ch, lo, hi)
        CROSS JOIN LATERAL (SELECT x.thread_id, x.channel, x.step, x.kind, x.data FROM {blobs} x
            WHERE x.thread_id = r.tid COLLATE "C" AND x.channel = r.ch COLLATE "C" AND x.step BETWEEN r.lo AND r.hi
            OFFSET 0) b
        ORDER BY b.channel, b.step, b.thread_id""",
    "get_writes": """SELECT task_id, kind, idx, data FROM {writes} WHERE thread_id = %(tid)s AND checkpoint_id = %(cp)s
        ORDER BY task_id, kind, idx""",
}


SQL.update(RUN_SQL)
SQL.update(ITEM_SQL)
SQL.update(WAIT_SQL)
SQL.update(CRON_SQL)

PAGE_STATUS: dict[str, LiteralString] = {
    "all": "",
    "eq": " AND status = %(status)s",
    "running": " AND status = 'running'",
    "leased": " AND status = 'running' AND lease_until IS NOT NULL",
}


def page_query_name(status: str | None, parent: bool, after: bool, metadata: bool) -> str:
    """The name of the ``page_threads`` statement for this combination of filters."""
    kind = "all" if status is None else {"running": "running", "crashed": "leased"}.get(status, "eq")
    return f"page_threads:{kind}:{int(parent)}{int(after)}{int(metadata)}"


def page_query(
    limit: int, after: str | None, status: str | None, metadata: Mapping[str, Any] | None, parent: str | None
) -> tuple[str, dict[str, Any]]:
    """The name and parameters of the ``page_threads`` statement answering these arguments."""
    at, tid = decode_cursor(after) if after is not None else (None, None)
    params = {
        "status": status,
        "parent": parent,
        "at": at,
        "tid": tid,
        "filter": Jsonb(nul_free(dict(metadata))) if metadata else None,
        "limit": limit + 1,
    }
    return page_query_name(status, parent is not None, after is not None, bool(metadata)), params


def _page_queries() -> None:
    """One statement per combination of filters (32), so that each plan, generic ones included, walks the index
    matching its filters backwards from the cursor (see :mod:`graphckpt.savers._thread_pages`)."""
    for kind, status in PAGE_STATUS.items():
        for parent in (False, True):
            for after in (False, True):
                for metadata in (False, True):
                    text: LiteralString = "SELECT " + THREAD_COLS + " FROM {threads} c WHERE NOT deleted" + status
                    if parent:
                        text += ' AND parent_thread_id = %(parent)s COLLATE "C"'
                    if after:
                        text += ' AND (created_at, thread_id) < (%(at)s::float8, %(tid)s COLLATE "C")'
                    if metadata:
                        text += (
                            """ AND NOT EXISTS (SELECT 1 FROM jsonb_each(%(filter)s::jsonb) AS f(key, value)
                            WHERE """
                            + NUL_FREE_METADATA
                            + " -> f.key IS DISTINCT FROM f.value)"
                        )
                    text += " ORDER BY created_at DESC, thread_id DESC LIMIT %(limit)s::bigint"
                    SQL[f"page_threads:{kind}:{int(parent)}{int(after)}{int(metadata)}"] = text


_page_queries()


def thread_from_row(row: tuple[Any, ...], now: float) -> ThreadRecord:
    tid, head, step, status, run_id, created, updated, ptid, pcp, error, metadata = row[:11]
    lease = lease_from_columns(*checked_lease_columns(tid, row[11:17]))
    return checked_thread(
        ThreadRecord(
            thread_id=tid,
            head_checkpoint_id=head,
            head_step=step,
            status=thread_status(status, lease, now),
            run_id=run_id,
            created_at=created,
            updated_at=updated,
            parent_thread_id=ptid,
            parent_checkpoint_id=pcp,
            error=error,
            metadata=_mapping(metadata),
            lease=lease,
            epoch=row[14],
        )
    )


def checkpoint_from_row(row: tuple[Any, ...]) -> StoredCheckpoint:
    tid, cp, ptid, pcp, step, created, status, metadata, body = row
    return checked_checkpoint(
        StoredCheckpoint(
            thread_id=tid,
            checkpoint_id=cp,
            parent_thread_id=ptid,
            parent_checkpoint_id=pcp,
            step=step,
            created_at=created,
            status=status,
            metadata=_mapping(metadata),
            body=bytes(body),
        )
    )


def _mapping(metadata: Any) -> Mapping[str, Any]:
    """A row's metadata as read (a dict); an edited row's JSON that is not an object (an array, a string, a number)
    becomes a mapping that raises :class:`~graphckpt.errors.CorruptCheckpointError` when looked into, as SQLite's
    :class:`~graphckpt.savers.lazyjson.LazyJsonMapping` does."""
    if isinstance(metadata, LazyJsonMapping | dict):
        return metadata
    return LazyJsonMapping(json.dumps(metadata, allow_nan=True))
