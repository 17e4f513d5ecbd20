"""``PostgresSaver``: checkpoints in PostgreSQL (psycopg 3, async, pooled), for many processes and machines.

Storage layout (in ``schema`` when given, else the connection's ``search_path``)::

    threads      (thread_id PK, head_checkpoint_id, head_step, status, run_id, created_at, updated_at,
                  parent_thread_id, parent_checkpoint_id, error, metadata jsonb, deleted)
    checkpoints  (thread_id, checkpoint_id) PK, (thread_id, step) UNIQUE; parent ids, created_at, status,
                  metadata jsonb, body bytea
    blobs        (thread_id, channel, step) PK; kind, data bytea
    writes       (thread_id, checkpoint_id, task_id, kind, idx) PK; data bytea
    graphckpt_migrations (version PK, applied_at)

Id columns use ``COLLATE "C"`` so that SQL ordering equals Python's string ordering. Times are seconds since the
epoch from :func:`graphckpt.ids.now` (patchable in tests). A deleted thread whose rows a fork still needs keeps its
``threads`` row with ``deleted = true``, so its id is not reused until the last dependent fork is deleted.

Migration rule: ``_MIGRATIONS`` is append-only. A released entry is never edited or removed; a schema change is a new
entry with the next version. :meth:`PostgresSaver.setup` applies the missing versions in one transaction under a
``pg_advisory_xact_lock`` keyed by the schema, recording each in ``graphckpt_migrations``, so concurrent set-ups
from many processes are safe and idempotent.

Round trips: ``commit`` pipelines two statements, the head compare-and-set and one statement writing the checkpoint,
its blobs and the deletion of the parent's pending writes (only if the head is now that checkpoint), in the implicit
transaction that lasts until the pipeline's Sync: one network round trip, all or nothing. The second statement takes
a fresh snapshot after the first holds the thread row lock, so it sees every pending write committed before.
``put_writes`` and ``claim`` are one statement each.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, LiteralString, cast

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from graphckpt import ids
from graphckpt.errors import SaverError, ThreadConflictError, ThreadNotFoundError
from graphckpt.savers.base import (
    Blob,
    BlobRange,
    Saver,
    Status,
    StoredCheckpoint,
    StoredWrite,
    ThreadRecord,
    WriteKind,
)

__all__ = ["PostgresSaver"]

_MIGRATIONS: tuple[tuple[int, tuple[LiteralString, ...]], ...] = (
    (
        1,
        (
            """CREATE TABLE {threads} (
                thread_id text COLLATE "C" PRIMARY KEY,
                head_checkpoint_id text COLLATE "C" NOT NULL,
                head_step bigint NOT NULL,
                status text NOT NULL CHECK (status IN ('running', 'interrupted', 'failed', 'done')),
                run_id text COLLATE "C" NOT NULL,
                created_at double precision NOT NULL,
                updated_at double precision NOT NULL,
                parent_thread_id text COLLATE "C",
                parent_checkpoint_id text COLLATE "C",
                error text,
                metadata jsonb NOT NULL,
                deleted boolean NOT NULL DEFAULT false)""",
            "CREATE INDEX ON {threads} (updated_at DESC, thread_id DESC) WHERE NOT deleted",
            "CREATE INDEX ON {threads} (parent_thread_id) WHERE parent_thread_id IS NOT NULL",
            """CREATE TABLE {checkpoints} (
                thread_id text COLLATE "C" NOT NULL,
                checkpoint_id text COLLATE "C" NOT NULL,
                parent_thread_id text COLLATE "C",
                parent_checkpoint_id text COLLATE "C",
                step bigint NOT NULL,
                created_at double precision NOT NULL,
                status text NOT NULL,
                metadata jsonb NOT NULL,
                body bytea NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_id),
                UNIQUE (thread_id, step))""",
            """CREATE TABLE {blobs} (
                thread_id text COLLATE "C" NOT NULL,
                channel text COLLATE "C" NOT NULL,
                step bigint NOT NULL,
                kind text NOT NULL CHECK (kind IN ('snapshot', 'delta')),
                data bytea NOT NULL,
                PRIMARY KEY (thread_id, channel, step))""",
            """CREATE TABLE {writes} (
                thread_id text COLLATE "C" NOT NULL,
                checkpoint_id text COLLATE "C" NOT NULL,
                task_id text COLLATE "C" NOT NULL,
                kind text COLLATE "C" NOT NULL,
                idx integer NOT NULL,
                data bytea NOT NULL,
                PRIMARY KEY (thread_id, checkpoint_id, task_id, kind, idx))""",
        ),
    ),
)
"""Append-only: ``(version, statements)``. ``{threads}`` etc. are replaced by the (schema-qualified) table names."""

_THREAD_COLS: LiteralString = (
    "thread_id, head_checkpoint_id, head_step, status, run_id, created_at, updated_at, "
    "parent_thread_id, parent_checkpoint_id, error, metadata"
)
_CP_COLS: LiteralString = (
    "thread_id, checkpoint_id, parent_thread_id, parent_checkpoint_id, step, created_at, status, metadata, body"
)
_IS_HEAD: LiteralString = "SELECT 1 FROM {threads} WHERE thread_id = %(tid)s AND head_checkpoint_id = %(cp)s"

_SQL: dict[str, LiteralString] = {
    "advance": """WITH u AS (
        UPDATE {threads} SET head_checkpoint_id = %(cp)s, head_step = %(step)s, status = %(status)s, error = NULL,
            metadata = %(meta)s, updated_at = %(now)s
        WHERE thread_id = %(tid)s AND head_checkpoint_id = %(expected)s AND run_id = %(run)s AND NOT deleted
        RETURNING 1)
        SELECT (SELECT count(*) FROM u), (SELECT head_checkpoint_id FROM {threads}
                                          WHERE thread_id = %(tid)s AND NOT deleted)""",
    "create": """WITH u AS (
        INSERT INTO {threads} ("""
    + _THREAD_COLS
    + """) VALUES (%(tid)s, %(cp)s, %(step)s, %(status)s, %(run)s,
            %(now)s, %(now)s, %(fork_tid)s, %(fork_cp)s, NULL, %(meta)s)
        ON CONFLICT (thread_id) DO NOTHING RETURNING 1)
        SELECT (SELECT count(*) FROM u), NULL::text""",
    # Runs after the head statement, in the same transaction but with a fresh snapshot: it writes only when the head
    # is now our checkpoint (our compare-and-set won), and sees every pending write committed before we took the lock.
    "store": """WITH g AS ("""
    + _IS_HEAD
    + """), c AS (
        INSERT INTO {checkpoints} ("""
    + _CP_COLS
    + """) SELECT %(tid)s, %(cp)s, %(ptid)s, %(pcp)s, %(step)s, %(created)s, %(status)s, %(meta)s, %(body)s
        WHERE EXISTS (SELECT 1 FROM g)
    ), b AS (
        INSERT INTO {blobs} (thread_id, channel, step, kind, data)
        SELECT * FROM unnest(%(b_tid)s::text[], %(b_ch)s::text[], %(b_step)s::bigint[], %(b_kind)s::text[],
                             %(b_data)s::bytea[])
        WHERE EXISTS (SELECT 1 FROM g)
    )
    DELETE FROM {writes} WHERE thread_id = %(tid)s AND checkpoint_id = %(same_parent)s AND EXISTS (SELECT 1 FROM g)""",
    "claim": """WITH u AS (
        UPDATE {threads} SET run_id = %(run)s, status = 'running', updated_at = %(now)s
        WHERE thread_id = %(tid)s AND head_checkpoint_id = %(expected)s AND run_id = %(old_run)s AND NOT deleted
        RETURNING 1)
        SELECT (SELECT count(*) FROM u), EXISTS (SELECT 1 FROM {threads} WHERE thread_id = %(tid)s AND NOT deleted)""",
    "put_writes": """WITH u AS (
        UPDATE {threads} SET status = coalesce(%(status)s::text, status),
            error = CASE WHEN %(status)s::text IS NULL THEN error ELSE %(error)s::text END,
            updated_at = CASE WHEN %(status)s::text IS NULL THEN updated_at ELSE %(now)s END
        WHERE thread_id = %(tid)s AND head_checkpoint_id = %(cp)s AND run_id = %(run)s AND NOT deleted
        RETURNING 1
    ), w AS (
        INSERT INTO {writes} (thread_id, checkpoint_id, task_id, kind, idx, data)
        SELECT %(tid)s, %(cp)s, w.* FROM u, unnest(%(w_task)s::text[], %(w_kind)s::text[], %(w_idx)s::int[],
                                                   %(w_data)s::bytea[]) AS w
        ON CONFLICT (thread_id, checkpoint_id, task_id, kind, idx) DO UPDATE SET data = excluded.data)
        SELECT (SELECT count(*) FROM u), EXISTS (SELECT 1 FROM {threads} WHERE thread_id = %(tid)s AND NOT deleted)""",
    "lock_thread": "SELECT deleted, parent_thread_id FROM {threads} WHERE thread_id = %(tid)s FOR UPDATE",
    # The highest step of a thread that the first checkpoint of any remaining fork (deleted-but-kept ones included:
    # their own forks still need their lineage) names as its parent.
    "needed_step": """SELECT max(p.step) FROM {threads} f JOIN {checkpoints} p
        ON p.thread_id = f.parent_thread_id AND p.checkpoint_id = f.parent_checkpoint_id
        WHERE f.parent_thread_id = %(tid)s""",
    "prune": """WITH c AS (
        DELETE FROM {checkpoints} WHERE thread_id = %(tid)s AND step > %(keep)s RETURNING checkpoint_id
    ), b AS (DELETE FROM {blobs} WHERE thread_id = %(tid)s AND step > %(keep)s)
    DELETE FROM {writes} WHERE thread_id = %(tid)s AND checkpoint_id IN (SELECT checkpoint_id FROM c)""",
    "mark_deleted": "UPDATE {threads} SET deleted = true WHERE thread_id = %(tid)s",
    "drop_thread": "DELETE FROM {threads} WHERE thread_id = %(tid)s",
    "get_thread": "SELECT " + _THREAD_COLS + " FROM {threads} WHERE thread_id = %(tid)s AND NOT deleted",
    "list_threads": "SELECT "
    + _THREAD_COLS
    + """ FROM {threads} WHERE NOT deleted AND (%(status)s::text IS NULL OR status = %(status)s)
        ORDER BY updated_at DESC, thread_id DESC""",
    "cp_by_id": "SELECT " + _CP_COLS + " FROM {checkpoints} WHERE thread_id = %(tid)s AND checkpoint_id = %(cp)s",
    "cp_by_step": "SELECT " + _CP_COLS + " FROM {checkpoints} WHERE thread_id = %(tid)s AND step = %(step)s",
    "cp_head": "SELECT "
    + _CP_COLS
    + """ FROM {checkpoints} WHERE (thread_id, checkpoint_id) =
        (SELECT thread_id, head_checkpoint_id FROM {threads} WHERE thread_id = %(tid)s AND NOT deleted)""",
    # Containment narrows; the NOT EXISTS makes it JSON equality per top-level key (containment alone would let
    # {"tags": ["a"]} match ["a", "b"]). Keys and values stay one bound jsonb parameter.
    "list_cps": "SELECT "
    + _CP_COLS
    + """ FROM {checkpoints} c WHERE thread_id = %(tid)s
        AND (%(before)s::bigint IS NULL OR step < %(before)s::bigint)
        AND (%(filter)s::jsonb IS NULL OR (c.metadata @> %(filter)s::jsonb AND NOT EXISTS (
            SELECT 1 FROM jsonb_each(%(filter)s::jsonb) AS f(key, value)
            WHERE c.metadata -> f.key IS DISTINCT FROM f.value)))
        ORDER BY step DESC LIMIT %(limit)s::bigint""",
    "get_blobs": """SELECT thread_id, channel, step, kind, data FROM {blobs} b WHERE EXISTS (
        SELECT 1 FROM unnest(%(tid)s::text[], %(ch)s::text[], %(lo)s::bigint[], %(hi)s::bigint[]) AS r(tid, ch, lo, hi)
        WHERE b.thread_id = r.tid AND b.channel = r.ch AND b.step BETWEEN r.lo AND r.hi)
        ORDER BY channel, step, thread_id""",
    "get_writes": """SELECT task_id, kind, idx, data FROM {writes} WHERE thread_id = %(tid)s AND checkpoint_id = %(cp)s
        ORDER BY task_id, kind, idx""",
}


class PostgresSaver(Saver):
    """A :class:`~graphckpt.savers.base.Saver` on PostgreSQL through an ``AsyncConnectionPool``.

    ``dsn`` is a libpq connection string or URL; ``schema`` (created if missing) holds the tables, else the
    connection's ``search_path`` decides. The pool holds ``pool_min`` to ``pool_max`` connections. Nothing connects
    until the first operation (or ``async with``).
    """

    def __init__(self, dsn: str, *, schema: str | None = None, pool_min: int = 1, pool_max: int = 10) -> None:
        self._dsn = dsn
        self._schema = schema
        self._pool_min = pool_min
        self._pool_max = pool_max
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._queries: dict[str, bytes] = {}
        self._lock: asyncio.Lock | None = None
        self._where, self._password = _describe(dsn)

    def __repr__(self) -> str:
        return f"PostgresSaver({self._where!r}, schema={self._schema!r})"

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def setup(self) -> None:
        if self._pool is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self._pool is None:  # not opened by a concurrent first use while we waited
                    await self._open_pool()

    async def _open_pool(self) -> None:
        with self._errors("connect and set up"):
            # A direct first connection reports an unreachable server at once (a pool would retry in background).
            async with await psycopg.AsyncConnection.connect(self._dsn, autocommit=True) as conn:
                await self._migrate(conn)
                self._queries = {name: self._compose(text).as_bytes(conn) for name, text in _SQL.items()}
            pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
                self._dsn,
                min_size=self._pool_min,
                max_size=self._pool_max,
                kwargs={"autocommit": True},
                open=False,
                name="graphckpt",
            )
            await pool.open()
        self._pool = pool
        self._open = True

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        self._open = False
        self._lock = None  # a later reopen may run on another event loop
        if pool is not None:
            with self._errors("close"):
                await pool.close()

    def _compose(self, text: LiteralString) -> sql.Composed:
        def name(table: str) -> sql.Identifier:
            return sql.Identifier(self._schema, table) if self._schema else sql.Identifier(table)

        tables = ("threads", "checkpoints", "blobs", "writes", "graphckpt_migrations")
        return sql.SQL(text).format(**{t: name(t) for t in tables})

    async def _migrate(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"graphckpt:{self._schema}",))
            if self._schema:
                await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._schema)))
            migrations = self._compose("{graphckpt_migrations}")
            await conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (version integer PRIMARY KEY, applied_at timestamptz NOT NULL)"
                ).format(migrations)
            )
            cur = await conn.execute(sql.SQL("SELECT version FROM {}").format(migrations))
            applied = {row[0] for row in await cur.fetchall()}
            for version, statements in _MIGRATIONS:
                if version in applied:
                    continue
                for statement in statements:
                    await conn.execute(self._compose(statement))
                await conn.execute(
                    sql.SQL("INSERT INTO {} (version, applied_at) VALUES (%s, now())").format(migrations), (version,)
                )

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        await self.setup()
        assert self._pool is not None
        async with self._pool.connection() as conn:
            yield conn

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Turn driver errors into :class:`SaverError` naming the server (never the password)."""
        try:
            yield
        except psycopg.Error as exc:
            message = str(exc).strip() or type(exc).__name__
            if self._password:
                message = message.replace(self._password, "***")
            raise SaverError(f"PostgreSQL at {self._where}: {action} failed: {message}") from exc

    async def _fetch(self, action: str, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        with self._errors(action):
            async with self._connection() as conn:
                cur = await conn.execute(self._queries[query], params)
                return await cur.fetchall()

    # -- writes ------------------------------------------------------------------------------------------------------

    async def commit(self, checkpoint: StoredCheckpoint, *, expected_head: str | None, run_id: str) -> None:
        cp = checkpoint
        is_fork = cp.parent_thread_id is not None and cp.parent_thread_id != cp.thread_id
        same_parent = cp.parent_checkpoint_id if cp.parent_thread_id == cp.thread_id else None
        params: dict[str, Any] = {
            "tid": cp.thread_id,
            "cp": cp.checkpoint_id,
            "ptid": cp.parent_thread_id,
            "pcp": cp.parent_checkpoint_id,
            "step": cp.step,
            "created": cp.created_at,
            "status": cp.status,
            "meta": Jsonb(dict(cp.metadata)),
            "body": cp.body,
            "now": ids.now(),
            "run": run_id,
            "expected": expected_head,
            "fork_tid": cp.parent_thread_id if is_fork else None,
            "fork_cp": cp.parent_checkpoint_id,
            "same_parent": same_parent,
            "b_tid": [b.thread_id for b in cp.blobs],
            "b_ch": [b.channel for b in cp.blobs],
            "b_step": [b.step for b in cp.blobs],
            "b_kind": [b.kind for b in cp.blobs],
            "b_data": [b.data for b in cp.blobs],
        }
        head_query = "create" if expected_head is None else "advance"
        try:
            with self._errors(f"commit of checkpoint {cp.checkpoint_id!r} to thread {cp.thread_id!r}"):
                async with self._connection() as conn:
                    # Both statements go out together and run in the implicit transaction that lasts until the
                    # pipeline's Sync: committed together, or rolled back together on any error. One round trip.
                    # (``conn.transaction()`` here would cost extra syncs.)
                    async with conn.pipeline():
                        head = await conn.execute(self._queries[head_query], params)
                        await conn.execute(self._queries["store"], params)
                    row = await head.fetchone()
        except SaverError as exc:
            if isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
                raise ThreadConflictError(
                    f"thread {cp.thread_id!r} already has checkpoint {cp.checkpoint_id!r} or a checkpoint at step "
                    f"{cp.step}"
                ) from exc.__cause__
            raise
        assert row is not None
        won, current = row
        if won:
            return
        if expected_head is None:
            raise ThreadConflictError(f"thread {cp.thread_id!r} already exists")
        if current is None:
            raise ThreadNotFoundError(f"thread {cp.thread_id!r} does not exist")
        raise ThreadConflictError(
            f"thread {cp.thread_id!r} moved or was claimed: head is {current!r}, expected {expected_head!r} "
            f"owned by run {run_id!r}"
        )

    async def claim(self, thread_id: str, *, expected_head: str, expected_run_id: str, run_id: str) -> None:
        params = {"tid": thread_id, "expected": expected_head, "old_run": expected_run_id, "run": run_id}
        [(won, exists)] = await self._fetch(f"claim of thread {thread_id!r}", "claim", {**params, "now": ids.now()})
        if not exists:
            raise ThreadNotFoundError(f"thread {thread_id!r} does not exist")
        if not won:
            raise ThreadConflictError(f"thread {thread_id!r} was claimed or moved by another run")

    async def put_writes(
        self,
        thread_id: str,
        checkpoint_id: str,
        writes: Sequence[StoredWrite],
        *,
        run_id: str,
        status: Status | None = None,
        error: str | None = None,
    ) -> None:
        params = {
            "tid": thread_id,
            "cp": checkpoint_id,
            "run": run_id,
            "status": status,
            "error": error,
            "now": ids.now(),
            "w_task": [w.task_id for w in writes],
            "w_kind": [w.kind for w in writes],
            "w_idx": [w.index for w in writes],
            "w_data": [w.data for w in writes],
        }
        [(won, exists)] = await self._fetch(f"put_writes to thread {thread_id!r}", "put_writes", params)
        if not exists:
            raise ThreadNotFoundError(f"thread {thread_id!r} does not exist")
        if not won:
            raise ThreadConflictError(f"thread {thread_id!r} was claimed or moved by another run")

    async def delete_thread(self, thread_id: str) -> None:
        with self._errors(f"delete of thread {thread_id!r}"):
            async with self._connection() as conn, conn.transaction():
                cur = await conn.execute(self._queries["lock_thread"], {"tid": thread_id})
                row = await cur.fetchone()
                if row is None or row[0]:
                    raise ThreadNotFoundError(f"thread {thread_id!r} does not exist")
                # Prune the thread, then each deleted fork source that was kept only for the forks being removed.
                tid: str | None = thread_id
                source: str | None = row[1]
                while tid is not None:
                    [(keep,)] = await (await conn.execute(self._queries["needed_step"], {"tid": tid})).fetchall()
                    await conn.execute(self._queries["prune"], {"tid": tid, "keep": -1 if keep is None else keep})
                    if keep is not None:
                        await conn.execute(self._queries["mark_deleted"], {"tid": tid})
                        break
                    await conn.execute(self._queries["drop_thread"], {"tid": tid})
                    tid, row = None, None
                    if source is not None:
                        row = await (await conn.execute(self._queries["lock_thread"], {"tid": source})).fetchone()
                    if row is not None and row[0]:
                        tid, source = source, row[1]

    # -- reads -------------------------------------------------------------------------------------------------------

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        rows = await self._fetch(f"get_thread {thread_id!r}", "get_thread", {"tid": thread_id})
        return _thread(rows[0]) if rows else None

    async def list_threads(self, *, status: Status | None = None) -> list[ThreadRecord]:
        return [_thread(row) for row in await self._fetch("list_threads", "list_threads", {"status": status})]

    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None
    ) -> StoredCheckpoint | None:
        params = {"tid": thread_id, "cp": checkpoint_id, "step": step}
        query = "cp_by_id" if checkpoint_id is not None else "cp_by_step" if step is not None else "cp_head"
        rows = await self._fetch(f"get_checkpoint of thread {thread_id!r}", query, params)
        found = _checkpoint(rows[0]) if rows else None
        if found is not None and checkpoint_id is not None and step is not None and found.step != step:
            return None
        return found

    async def list_checkpoints(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before_step: int | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredCheckpoint]:
        params = {
            "tid": thread_id,
            "limit": limit,
            "before": before_step,
            "filter": Jsonb(dict(filter)) if filter else None,
        }
        rows = await self._fetch(f"list_checkpoints of thread {thread_id!r}", "list_cps", params)
        return [_checkpoint(row) for row in rows]

    async def get_blobs(self, ranges: Sequence[BlobRange]) -> list[Blob]:
        if not ranges:
            return []
        params = {
            "tid": [r.thread_id for r in ranges],
            "ch": [r.channel for r in ranges],
            "lo": [r.min_step for r in ranges],
            "hi": [r.max_step for r in ranges],
        }
        rows = await self._fetch("get_blobs", "get_blobs", params)
        return [Blob(thread_id=t, channel=c, step=s, kind=k, data=bytes(d)) for t, c, s, k, d in rows]

    async def get_writes(self, thread_id: str, checkpoint_id: str) -> list[StoredWrite]:
        params = {"tid": thread_id, "cp": checkpoint_id}
        rows = await self._fetch(f"get_writes of thread {thread_id!r}", "get_writes", params)
        return [StoredWrite(task_id=t, kind=cast(WriteKind, k), index=i, data=bytes(d)) for t, k, i, d in rows]


def _thread(row: tuple[Any, ...]) -> ThreadRecord:
    tid, head, step, status, run_id, created, updated, ptid, pcp, error, metadata = row
    return ThreadRecord(
        thread_id=tid,
        head_checkpoint_id=head,
        head_step=step,
        status=status,
        run_id=run_id,
        created_at=created,
        updated_at=updated,
        parent_thread_id=ptid,
        parent_checkpoint_id=pcp,
        error=error,
        metadata=metadata,
    )


def _checkpoint(row: tuple[Any, ...]) -> StoredCheckpoint:
    tid, cp, ptid, pcp, step, created, status, metadata, body = row
    return StoredCheckpoint(
        thread_id=tid,
        checkpoint_id=cp,
        parent_thread_id=ptid,
        parent_checkpoint_id=pcp,
        step=step,
        created_at=created,
        status=status,
        metadata=metadata,
        body=bytes(body),
    )


def _describe(dsn: str) -> tuple[str, str | None]:
    """``host:port`` for messages, and the password to scrub from them."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparsable dsn>", None
    host = params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    password = params.get("password")
    return f"{host}:{port}", str(password) if password else None
