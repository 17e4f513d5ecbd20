"""PostgresSaver's schema: the append-only migrations, the ``graphckpt_commit`` function, and applying them."""

from __future__ import annotations

from typing import Any, LiteralString

import psycopg
from psycopg import sql

from graphckpt.errors import SaverError, StoreNotSetUpError
from graphckpt.savers._events_sql import PG_EVENTS_MIGRATION
from graphckpt.savers._pg_crons import PG_CRONS_MIGRATION
from graphckpt.savers._pg_items import PG_ITEMS_MIGRATION
from graphckpt.savers._pg_waits import PG_WAITS_MIGRATION


def commit_function(store_blobs: LiteralString) -> LiteralString:
    """``graphckpt_commit`` as a migration (re)creates it: the whole commit in one call. Migrations differ only in
    ``store_blobs``, the statements storing the ``p_b_*`` blobs; the rest is shared and frozen (changing it means a
    new migration). Volatile: every statement takes a fresh snapshot, so the DELETE (run after the UPDATE holds the
    thread row lock) sees every pending write committed before."""
    return (
        """CREATE OR REPLACE FUNCTION {graphckpt_commit}(
                p_tid text, p_cp text, p_ptid text, p_pcp text, p_step bigint, p_created double precision,
                p_status text, p_meta json, p_body bytea, p_now double precision, p_run text, p_expected text,
                p_b_tid text[], p_b_ch text[], p_b_step bigint[], p_b_kind smallint[], p_b_data bytea[],
                OUT won boolean, OUT head text)
            LANGUAGE plpgsql VOLATILE AS $fn$
            BEGIN
                IF p_expected IS NULL THEN
                    INSERT INTO {threads} (thread_id, head_checkpoint_id, head_step, status, run_id, created_at,
                        updated_at, parent_thread_id, parent_checkpoint_id, error, metadata)
                    VALUES (p_tid, p_cp, p_step, p_status, p_run, p_now, p_now,
                        CASE WHEN p_ptid IS DISTINCT FROM p_tid THEN p_ptid END, p_pcp, NULL, p_meta)
                    ON CONFLICT (thread_id) DO NOTHING;
                    won := FOUND;
                ELSE
                    UPDATE {threads} SET head_checkpoint_id = p_cp, head_step = p_step, status = p_status,
                        error = NULL, metadata = p_meta, updated_at = p_now
                    WHERE thread_id = p_tid AND head_checkpoint_id = p_expected AND run_id = p_run AND NOT deleted;
                    won := FOUND;
                    IF NOT won THEN
                        SELECT t.head_checkpoint_id INTO head FROM {threads} t
                        WHERE t.thread_id = p_tid AND NOT t.deleted;
                    END IF;
                END IF;
                IF NOT won THEN
                    RETURN;
                END IF;
                INSERT INTO {checkpoints} (step, created_at, thread_id, checkpoint_id, parent_thread_id,
                    parent_checkpoint_id, status, metadata, body)
                VALUES (p_step, p_created, p_tid, p_cp, p_ptid, p_pcp, p_status, p_meta, p_body);"""
        + store_blobs
        + """
                IF p_pcp IS NOT NULL AND p_ptid = p_tid THEN
                    DELETE FROM {writes} WHERE thread_id = p_tid AND checkpoint_id = p_pcp;
                END IF;
            END
            $fn$"""
    )


_STORE_BLOBS_V2: LiteralString = """
                FOR i IN 1..cardinality(p_b_ch) LOOP
                    IF p_b_kind[i] < 4 THEN
                        INSERT INTO {blobs} (step, kind, thread_id, channel, data)
                        VALUES (p_b_step[i], p_b_kind[i], p_b_tid[i], p_b_ch[i], p_b_data[i]);
                    ELSE
                        DELETE FROM {blobs} b WHERE b.thread_id = p_b_tid[i] AND b.channel = p_b_ch[i]
                            AND b.step > p_b_step[i] AND b.step < p_step;
                        INSERT INTO {blobs} AS b (step, kind, thread_id, channel, data)
                        VALUES (p_b_step[i], p_b_kind[i], p_b_tid[i], p_b_ch[i], p_b_data[i])
                        ON CONFLICT (thread_id, channel, step) DO UPDATE SET kind = excluded.kind, data = excluded.data;
                    END IF;
                END LOOP;"""
"""Migration 2's blob statements (chunks), shared by the commit functions of later migrations."""


def leased_commit_function(store_blobs: LiteralString, *, events: bool = False) -> LiteralString:
    """``graphckpt_commit`` with leases: the same steps as :func:`commit_function`, plus, delimited by
    ``-- lease`` comments: a new thread is created with epoch 1 and leased to ``p_worker``/``p_host``/``p_pid``
    until ``p_until`` (when given and the status is ``running``); the head move releases the lease when the status
    is not ``running``. The fence itself is the ``run_id = p_run`` compare of the head move (a claim sets a new
    ``run_id`` with each epoch). On a lost compare-and-set ``run`` returns the thread's owner so the error can
    name who took it.

    ``events`` (migration 7): two more parameters, the kinds and JSON payloads of the events the commit writes
    (:func:`graphckpt.savers.events.checkpoint_events`), inserted after the step's earlier events, delimited by an
    ``-- events`` comment."""
    return (
        """CREATE FUNCTION {graphckpt_commit}(
                p_tid text, p_cp text, p_ptid text, p_pcp text, p_step bigint, p_created double precision,
                p_status text, p_meta json, p_body bytea, p_now double precision, p_run text, p_expected text,
                p_b_tid text[], p_b_ch text[], p_b_step bigint[], p_b_kind smallint[], p_b_data bytea[],
                p_worker text, p_host text, p_pid integer, p_until double precision,"""
        + (" p_e_kind text[], p_e_payload text[]," if events else "")
        + """
                OUT won boolean, OUT head text, OUT run text)
            LANGUAGE plpgsql VOLATILE AS $fn$
            BEGIN
                IF p_expected IS NULL THEN
                    INSERT INTO {threads} (thread_id, head_checkpoint_id, head_step, status, run_id, created_at,
                        updated_at, parent_thread_id, parent_checkpoint_id, error, metadata,
                        -- lease
                        lease_epoch, lease_worker, lease_host, lease_pid, heartbeat_at, lease_until)
                    VALUES (p_tid, p_cp, p_step, p_status, p_run, p_now, p_now,
                        CASE WHEN p_ptid IS DISTINCT FROM p_tid THEN p_ptid END, p_pcp, NULL, p_meta,
                        -- lease
                        1, CASE WHEN p_status = 'running' AND p_until IS NOT NULL THEN p_worker END,
                        CASE WHEN p_status = 'running' AND p_until IS NOT NULL THEN p_host END,
                        CASE WHEN p_status = 'running' AND p_until IS NOT NULL THEN p_pid END,
                        CASE WHEN p_status = 'running' AND p_until IS NOT NULL THEN p_now END,
                        CASE WHEN p_status = 'running' THEN p_until END)
                    ON CONFLICT (thread_id) DO NOTHING;
                    won := FOUND;
                ELSE
                    UPDATE {threads} SET head_checkpoint_id = p_cp, head_step = p_step, status = p_status,
                        error = NULL, metadata = p_meta, updated_at = p_now,
                        -- lease: released unless the thread is still running
                        lease_worker = CASE WHEN p_status = 'running' THEN lease_worker END,
                        lease_host = CASE WHEN p_status = 'running' THEN lease_host END,
                        lease_pid = CASE WHEN p_status = 'running' THEN lease_pid END,
                        heartbeat_at = CASE WHEN p_status = 'running' THEN heartbeat_at END,
                        lease_until = CASE WHEN p_status = 'running' THEN lease_until END
                    WHERE thread_id = p_tid AND head_checkpoint_id = p_expected AND run_id = p_run AND NOT deleted;
                    won := FOUND;
                    IF NOT won THEN
                        SELECT t.head_checkpoint_id, t.run_id INTO head, run FROM {threads} t
                        WHERE t.thread_id = p_tid AND NOT t.deleted;
                    END IF;
                END IF;
                IF NOT won THEN
                    RETURN;
                END IF;
                -- runs: the run of this claim ends with the commit that stops the thread (same transaction)
                IF p_status <> 'running' THEN
                    UPDATE {runs} SET status = p_status, ended_at = p_now, error = NULL
                    WHERE thread_id = p_tid AND status = 'running' AND fence = p_run;
                END IF;
                INSERT INTO {checkpoints} (step, created_at, thread_id, checkpoint_id, parent_thread_id,
                    parent_checkpoint_id, status, metadata, body)
                VALUES (p_step, p_created, p_tid, p_cp, p_ptid, p_pcp, p_status, p_meta, p_body);"""
        + store_blobs
        + """
                IF p_pcp IS NOT NULL AND p_ptid = p_tid THEN
                    DELETE FROM {writes} WHERE thread_id = p_tid AND checkpoint_id = p_pcp;
                END IF;"""
        + (_STORE_EVENTS if events else "")
        + """
            END
            $fn$"""
    )


_STORE_EVENTS: LiteralString = """
                -- events: the checkpoint's, after the step's earlier ones (a claim's run.started, a write's)
                INSERT INTO {events} (thread_id, step, seq, kind, payload, created_at)
                SELECT p_tid, p_step, n.base + e.o - 1, e.k, e.p::json, p_created
                FROM unnest(p_e_kind, p_e_payload) WITH ORDINALITY AS e(k, p, o),
                    (SELECT coalesce(max(x.seq) + 1, 0) AS base FROM {events} x
                     WHERE x.thread_id = p_tid AND x.step = p_step) n;"""


MIGRATIONS: tuple[tuple[int, tuple[LiteralString, ...]], ...] = (
    (
        1,
        # Edited in place once, before any release (performance work: no updated_at index, smallint blob
        # kinds, column order without alignment padding, the graphckpt_commit function). From now on: append only.
        (
            """CREATE TABLE {threads} (
                head_step bigint NOT NULL,
                created_at double precision NOT NULL,
                updated_at double precision NOT NULL,
                deleted boolean NOT NULL DEFAULT false,
                thread_id text COLLATE "C" PRIMARY KEY,
                head_checkpoint_id text COLLATE "C" NOT NULL,
                status text NOT NULL CHECK (status IN ('running', 'interrupted', 'failed', 'done')),
                run_id text COLLATE "C" NOT NULL,
                parent_thread_id text COLLATE "C",
                parent_checkpoint_id text COLLATE "C",
                error text,
                metadata json NOT NULL) WITH (fillfactor = 80)""",
            "CREATE INDEX ON {threads} (parent_thread_id) WHERE parent_thread_id IS NOT NULL",
            """CREATE TABLE {checkpoints} (
                step bigint NOT NULL,
                created_at double precision NOT NULL,
                thread_id text COLLATE "C" NOT NULL,
                checkpoint_id text COLLATE "C" NOT NULL,
                parent_thread_id text COLLATE "C",
                parent_checkpoint_id text COLLATE "C",
                status text NOT NULL,
                metadata json NOT NULL,
                body bytea NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_id),
                UNIQUE (thread_id, step))""",
            """CREATE TABLE {blobs} (
                step bigint NOT NULL,
                kind smallint NOT NULL CHECK (kind BETWEEN 0 AND 3),
                thread_id text COLLATE "C" NOT NULL,
                channel text COLLATE "C" NOT NULL,
                data bytea NOT NULL,
                PRIMARY KEY (thread_id, channel, step))""",
            # Compressed by the saver when worth it: the server need not try again.
            "ALTER TABLE {blobs} ALTER COLUMN data SET STORAGE EXTERNAL",
            """CREATE TABLE {writes} (
                idx integer NOT NULL,
                thread_id text COLLATE "C" NOT NULL,
                checkpoint_id text COLLATE "C" NOT NULL,
                task_id text COLLATE "C" NOT NULL,
                kind text COLLATE "C" NOT NULL,
                data bytea NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_id, task_id, kind, idx))""",
            # One prepared INSERT per blob is cheaper than INSERT ... SELECT FROM unnest() for the few blobs of a step.
            commit_function(
                """
                FOR i IN 1..cardinality(p_b_ch) LOOP
                    INSERT INTO {blobs} (step, kind, thread_id, channel, data)
                    VALUES (p_b_step[i], p_b_kind[i], p_b_tid[i], p_b_ch[i], p_b_data[i]);
                END LOOP;"""
            ),
        ),
    ),
    (
        2,
        # Chunk blobs (kind 4, 6 when compressed): one row packing the deltas of a run of steps, keyed by the first.
        (
            # The old constraint (0..3) implies the new one, so existing rows need no validating scan.
            """ALTER TABLE {blobs} DROP CONSTRAINT blobs_kind_check,
                ADD CONSTRAINT blobs_kind_check CHECK (kind IN (0, 1, 2, 3, 4, 6)) NOT VALID""",
            # A chunk at step a deletes its thread's and channel's blobs with a < step < p_step and replaces the row
            # at a (a delta it packs).
            commit_function(_STORE_BLOBS_V2),
        ),
    ),
    (
        3,
        # Status 'partial': an imported ancestor that holds only the checkpoints up to a descendant's fork point.
        (
            """ALTER TABLE {threads} DROP CONSTRAINT threads_status_check,
                ADD CONSTRAINT threads_status_check
                CHECK (status IN ('running', 'interrupted', 'failed', 'done', 'partial')) NOT VALID""",
        ),
    ),
    # The durable event log: the events table and its trigger functions (see _events_sql).
    (4, PG_EVENTS_MIGRATION),
    (
        5,
        # Leases: who runs each thread (worker id, host, pid), its last heartbeat, until when, and how
        # many claims the thread has had. graphckpt_commit gains the lease parameters (a new signature: the old
        # function is dropped).
        (
            """ALTER TABLE {threads} ADD COLUMN lease_epoch bigint NOT NULL DEFAULT 0,
                ADD COLUMN lease_pid integer, ADD COLUMN heartbeat_at double precision,
                ADD COLUMN lease_until double precision, ADD COLUMN lease_worker text COLLATE "C",
                ADD COLUMN lease_host text""",
            """DROP FUNCTION {graphckpt_commit}(text, text, text, text, bigint, double precision, text, json, bytea,
                double precision, text, text, text[], text[], bigint[], smallint[], bytea[])""",
            leased_commit_function(_STORE_BLOBS_V2),
            # The run queue (graphckpt/savers/queue.py states the invariants); columns in _pg_runs.RUN_COLS order.
            """CREATE TABLE {runs} (
                run_id text COLLATE "C" PRIMARY KEY,
                thread_id text COLLATE "C" NOT NULL,
                kind text NOT NULL CHECK (kind IN ('input', 'resume')),
                status text NOT NULL
                    CHECK (status IN ('queued', 'running', 'done', 'failed', 'interrupted', 'cancelled')),
                graph text,
                payload bytea,
                attempt integer NOT NULL DEFAULT 0,
                worker text,
                fence text COLLATE "C",
                lease_until double precision,
                created_at double precision NOT NULL,
                started_at double precision,
                ended_at double precision,
                error text)""",
            # One running run per thread, enforced by the database.
            "CREATE UNIQUE INDEX runs_one_running ON {runs} (thread_id) WHERE status = 'running'",
            "CREATE INDEX runs_queued ON {runs} (created_at) WHERE status = 'queued'",
            "CREATE INDEX runs_by_thread ON {runs} (thread_id, created_at)",
        ),
    ),
    (
        6,
        # Threads created before their first checkpoint (the server's POST /threads), with their first tags; a
        # cancel asked of a running run (its worker stops after its step).
        (
            """CREATE TABLE {created_threads} (
                thread_id text COLLATE "C" PRIMARY KEY, tags text NOT NULL, created_at double precision NOT NULL)""",
            "ALTER TABLE {runs} ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false",
        ),
    ),
    (
        7,
        # The commit writes its checkpoint's events itself (graphckpt/savers/events.py: one task.finished per task,
        # with its update), passed as two arrays; the trigger that derived them from the stored metadata goes.
        (
            "DROP TRIGGER graphckpt_events ON {checkpoints}",
            "DROP FUNCTION {graphckpt_events_checkpoints}()",
            """DROP FUNCTION {graphckpt_commit}(text, text, text, text, bigint, double precision, text, json, bytea,
                double precision, text, text, text[], text[], bigint[], smallint[], bytea[], text, text, integer,
                double precision)""",
            leased_commit_function(_STORE_BLOBS_V2, events=True),
        ),
    ),
    (
        8,
        # wave3 issue 25: every first page of threads and every lease sweep one indexed read. None of these columns
        # changes at an ordinary step (created_at never, status only when a run starts or stops, lease_until on a
        # claim or heartbeat), so moving the head stays a HOT update: no updated_at, head or metadata index.
        (
            "CREATE INDEX threads_by_created ON {threads} (created_at, thread_id)",
            "CREATE INDEX threads_by_status ON {threads} (status, created_at, thread_id)",
            "CREATE INDEX threads_by_parent_created ON {threads} (parent_thread_id, created_at, thread_id)"
            " WHERE parent_thread_id IS NOT NULL",
            # migration 1's index on parent_thread_id alone: the one above serves its reads (a thread's forks)
            "DROP INDEX {threads_parent_thread_id_idx}",
            "CREATE INDEX threads_running_lease ON {threads} (lease_until) WHERE status = 'running'",
            # the sweeper's look for graph-less queued runs: empty, instead of a walk of every queued run
            "CREATE INDEX runs_graphless ON {runs} (created_at) WHERE status = 'queued' AND graph IS NULL",
            # the claim's order (created_at, run_id) read off one index: no sort of the queued runs that tie
            "CREATE INDEX runs_queued_order ON {runs} (created_at, run_id) WHERE status = 'queued'",
            "DROP INDEX {runs_queued}",
        ),
    ),
    (9, PG_ITEMS_MIGRATION),  # wave3 issue 29: the long-term item store (graphckpt/savers/items.py)
    (10, PG_WAITS_MIGRATION),  # wave3 issue 29: durable waits (graphckpt/savers/waits.py)
    (11, PG_CRONS_MIGRATION),  # wave3 issue 29: schedules (graphckpt/savers/crons.py)
)
"""Append-only: ``(version, statements)``. ``{threads}`` etc. are replaced by the (schema-qualified) table names."""


def compose(text: LiteralString, schema: str | None) -> sql.Composed:
    """``text`` with ``{threads}`` etc. replaced by the table names, qualified by ``schema`` when given."""

    def name(table: str) -> sql.Identifier:
        return sql.Identifier(schema, table) if schema else sql.Identifier(table)

    tables = (
        "threads",
        "checkpoints",
        "blobs",
        "writes",
        "runs",
        "graphckpt_migrations",
        "graphckpt_commit",
        "events",
        "graphckpt_events_threads",
        "graphckpt_events_checkpoints",
        "graphckpt_events_writes",
        "created_threads",
        "threads_parent_thread_id_idx",
        "runs_queued",
        "store_items",
        "waits",
        "crons",
    )
    return sql.SQL(text).format(**{t: name(t) for t in tables})


async def migrate(conn: psycopg.AsyncConnection[Any], *, schema: str | None, where: str, create: bool) -> None:
    """Apply the missing migrations under an advisory lock (none when up to date); ``where`` names the server."""
    migrations = compose("{graphckpt_migrations}", schema)
    # Up to date: no lock and no DDL, so a role without the right to create anything can use a schema that its
    # owner set up (CREATE SCHEMA/TABLE IF NOT EXISTS check that right before they look whether it exists).
    cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (migrations.as_string(conn),))
    if (await cur.fetchone()) == (True,):
        cur = await conn.execute(sql.SQL("SELECT version FROM {}").format(migrations))
        if known({row[0] for row in await cur.fetchall()}, schema=schema, where=where):
            return
    elif not create:
        place = f"schema {schema!r}" if schema else "the connection's search_path"
        raise StoreNotSetUpError(
            f"PostgreSQL at {where}: {place} has no graphckpt tables (graphckpt_migrations is missing)"
        )
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"graphckpt:{schema}",))
        if schema:
            await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        # No primary key (an index would cost 16 KiB): the advisory lock already makes each version unique.
        await conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (version integer NOT NULL, applied_at timestamptz NOT NULL)").format(
                migrations
            )
        )
        cur = await conn.execute(sql.SQL("SELECT version FROM {}").format(migrations))
        applied = {row[0] for row in await cur.fetchall()}
        known(applied, schema=schema, where=where)
        for version, statements in MIGRATIONS:
            if version in applied:
                continue
            for statement in statements:
                await conn.execute(compose(dollar_quoted(statement, schema), schema))
            await conn.execute(
                sql.SQL("INSERT INTO {} (version, applied_at) VALUES (%s, now())").format(migrations), (version,)
            )


def known(applied: set[int], *, schema: str | None, where: str) -> bool:
    """Whether every migration is applied; raises :class:`SaverError` when one is recorded that this version
    does not know (a newer graphckpt set the schema up: writing into it could break that version's data)."""
    known = {version for version, _ in MIGRATIONS}
    newer = sorted(applied - known)
    if newer:
        place = f"schema {schema!r}" if schema else "the connection's search_path"
        raise SaverError(
            f"PostgreSQL at {where}: {place} has schema version {newer[-1]}, newer than this graphckpt "
            f"understands ({max(known)}); upgrade graphckpt"
        )
    return applied >= known


def dollar_quoted(statement: LiteralString, schema: str | None) -> LiteralString:
    """``statement`` with a dollar-quote tag for graphckpt_commit's body that the schema's name (quoted inside the
    body) does not contain; the body itself is the same whatever the tag."""
    tag = "$fn$"
    while schema and tag in schema:
        tag = tag[:-1] + "_$"
    return statement.replace("$fn$", tag)
