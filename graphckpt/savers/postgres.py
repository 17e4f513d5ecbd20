"""``PostgresSaver``: checkpoints in PostgreSQL (psycopg 3, async, pooled), for many processes and machines.

Storage layout (in ``schema`` when given, else the connection's ``search_path``)::

    threads      (thread_id PK, head_checkpoint_id, head_step, status, run_id, created_at, updated_at,
                  parent_thread_id, parent_checkpoint_id, error, metadata json, deleted)
    checkpoints  (thread_id, checkpoint_id) PK, (thread_id, step) UNIQUE; parent ids, created_at, status,
                  metadata json, body bytea
    blobs        (thread_id, channel, step) PK; kind smallint, data bytea
    writes       (thread_id, checkpoint_id, task_id, kind, idx) PK; data bytea
    graphckpt_migrations (version, applied_at)
    graphckpt_commit(...)  PL/pgSQL: the whole of ``commit`` as one server-side call

Id columns use ``COLLATE "C"`` so that SQL ordering equals Python's string ordering. Times are seconds since the
epoch from :func:`graphckpt.ids.now` (patchable in tests). A deleted thread whose rows a fork still needs keeps its
``threads`` row with ``deleted = true``, so its id is not reused until the last dependent fork is deleted.

Migration rule: ``_MIGRATIONS`` is append-only. A released entry is never edited or removed; a schema change is a new
entry with the next version. :meth:`PostgresSaver.setup` applies the missing versions in one transaction under a
``pg_advisory_xact_lock`` keyed by the schema, recording each in ``graphckpt_migrations``, so concurrent set-ups
from many processes are safe and idempotent. When none is missing it takes no lock and runs no DDL (a role that may
only read and write the tables can use a schema its owner set up).

Round trips: ``commit`` is one prepared statement, ``SELECT * FROM graphckpt_commit(...)``: the function moves the head
by compare-and-set and, only if that won, inserts the checkpoint and its blobs (a chunk first deletes the rows it
packs and then replaces the row at its step) and deletes the parent's pending writes.
One statement in autocommit mode is one transaction and one network round trip, all or nothing. Each statement of
the (volatile) PL/pgSQL function takes a fresh snapshot, so the deletion runs after the thread row lock is held and
sees every pending write committed before it. ``put_writes``, ``claim`` and every read are one statement each.

Connections: one dedicated connection serves every call while it is free (no pool check-out on the hot path; its
statements are prepared on first use); calls that overlap a busy dedicated connection take one from the pool, so
concurrent commits still run in parallel (and share WAL flushes on the server).

Storage: ``blobs.kind`` is a small integer (``0`` snapshot, ``1`` delta, ``4`` chunk, ``+2`` when ``data`` is
compressed by the saver). PostgreSQL only compresses values of rows above ~2 KiB, so blobs of ``_COMPRESS_MIN``
bytes and more are compressed here, with zstd, when that saves at least an eighth; the saver still never interprets
them. (Earlier development versions compressed with zlib; both formats are read, told apart by their magic bytes.
zstd decodes about four times faster, which is most of the cost of reading a long list's past state.)
Stored bytes are untrusted when read: :func:`~graphckpt.savers._inflate.inflate` bounds every decompression (by the
frame's recorded size, what its length can hold and 1 GiB, the most the saver compresses), and a blob that does not
decompress raises :class:`~graphckpt.errors.CorruptCheckpointError` naming its thread and the checkpoint that wrote it.
``threads.updated_at`` is not indexed, so moving the head is a HOT update (no index entries per step);
``list_threads`` sorts instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import struct
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, LiteralString, cast

try:
    import psycopg
    import zstandard
    from psycopg import sql
    from psycopg.adapt import Dumper, Loader
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.pq import Format
    from psycopg.types.json import Jsonb
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(f"PostgresSaver needs the postgres extra: pip install 'graphckpt[postgres]' ({exc})") from exc

from graphckpt import ids
from graphckpt.errors import (
    CorruptCheckpointError,
    SaverError,
    StoreNotSetUpError,
    ThreadConflictError,
    ThreadNotFoundError,
)
from graphckpt.savers._inflate import MAX_INFLATED, inflate
from graphckpt.savers.base import (
    Blob,
    BlobKind,
    BlobRange,
    Saver,
    Status,
    StoredCheckpoint,
    StoredWrite,
    ThreadRecord,
    WriteKind,
    brief,
    check_storable,
    filter_can_match,
    nul_free,
    utf8_safe,
)
from graphckpt.savers.dsn import scrub_password
from graphckpt.savers.lazyjson import LazyJsonMapping

__all__ = ["PostgresSaver"]

_KIND_CODE: dict[BlobKind, int] = {"snapshot": 0, "delta": 1, "chunk": 4}
_COMPRESSED = 2
"""Added to ``blobs.kind`` when the saver stored ``data`` compressed (zstd; zlib in files of earlier versions)."""
_KIND_NAME: dict[int, BlobKind] = {code | z: kind for kind, code in _KIND_CODE.items() for z in (0, _COMPRESSED)}
"""``blobs.kind`` to the blob kind, compressed or not."""


class _Packed(bytes):
    """A parameter already in PostgreSQL's binary format: sent as it is (psycopg's generic list adaptation inspects
    every element on every call; these arrays are built in one pass instead)."""

    __slots__ = ()
    oid = 0


class _TextArray(_Packed):
    __slots__ = ()
    oid = 1009


class _Int8Array(_Packed):
    __slots__ = ()
    oid = 1016


class _Int2Array(_Packed):
    __slots__ = ()
    oid = 1005


class _ByteaArray(_Packed):
    __slots__ = ()
    oid = 1001


class _JsonText(_Packed):
    """Compact JSON text; the binary format of ``json`` is its text."""

    __slots__ = ()
    oid = 114


class _PackedDumper(Dumper):
    format = Format.BINARY

    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        self.oid = cast(type[_Packed], cls).oid

    def dump(self, obj: Any) -> bytes:
        return cast(bytes, obj)


_raw_decode = json.JSONDecoder().raw_decode


class _JsonLoader(Loader):
    """``json`` in binary format (its text) without ``json.loads``'s byte-encoding detection: half the cost per
    row, which is most of ``list_checkpoints``. The server validated the text; we wrote it compactly."""

    format = Format.BINARY

    def load(self, data: Any) -> Any:
        text = str(data, "utf-8")
        if text.startswith("{"):  # metadata objects: parsed only when somebody looks inside (long histories)
            return LazyJsonMapping(text)
        try:
            value, end = _raw_decode(text)
        except ValueError:
            return json.loads(text)  # leading whitespace: not written by this saver, but valid
        return value if end == len(text) else json.loads(text)


def _register_adapters(conn: psycopg.AsyncConnection[Any]) -> None:
    for cls in (_TextArray, _Int8Array, _Int2Array, _ByteaArray, _JsonText):
        conn.adapters.register_dumper(cls, _PackedDumper)
    conn.adapters.register_loader("json", _JsonLoader)


_I4 = struct.Struct("!i")
_ELEM_I8 = struct.Struct("!iq")
_ELEM_I2 = struct.Struct("!ih")


def _array(oid: int, elements: list[bytes]) -> bytes:
    """A one-dimensional array without NULLs in binary format; ``elements`` are encoded (length-prefixed) already."""
    if not elements:
        return struct.pack("!iii", 0, 0, oid)
    return struct.pack("!iiiii", 1, 0, oid, len(elements), 1) + b"".join(elements)


def _bytes_elements(values: Sequence[bytes]) -> list[bytes]:
    return [_I4.pack(len(v)) + v for v in values]


_MESSAGE_MAX = 300
"""At most this many characters of a driver's message go into a :class:`SaverError`."""
_compact_json = functools.partial(json.dumps, separators=(",", ":"))
_COMPRESS_MIN = 128
"""Blobs shorter than this are stored as they are."""


def _commit_function(store_blobs: LiteralString) -> LiteralString:
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


_MIGRATIONS: tuple[tuple[int, tuple[LiteralString, ...]], ...] = (
    (
        1,
        # Edited in place once, before any release (performance work of issue 5: no updated_at index, smallint blob
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
            _commit_function(
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
            _commit_function(
                """
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
            ),
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
_THREAD_AND_CP_COLS: LiteralString = ", ".join(
    [*(f"t.{c}" for c in _THREAD_COLS.split(", ")), *(f"c.{c}" for c in _CP_COLS.split(", "))]
)  # built from the two literal column lists above
_N_THREAD_COLS = len(_THREAD_COLS.split(", "))
_NUL_FREE_METADATA: LiteralString = r"""(CASE
                WHEN strpos(c.metadata::text, '\u0000') = 0 AND strpos(c.metadata::text, '\uffff') = 0
                THEN c.metadata::jsonb
                ELSE regexp_replace(regexp_replace(c.metadata::text,
                    '(?<!\\)((?:\\\\)*)\\uffff', '\1\\uffff1', 'g'),
                    '(?<!\\)((?:\\\\)*)\\u0000', '\1\\uffff0', 'g')::jsonb END)"""
"""``c.metadata`` as ``jsonb``, with :func:`nul_free`'s mapping applied to the text when it escapes NUL or U+FFFF
(``_compact_json`` writes ASCII only, with lowercase escapes). An escape counts only where its backslash is not the
second half of an escaped backslash (``\\u0000`` in the text is a backslash and the letters ``u0000``)."""
_SQL: dict[str, LiteralString] = {
    # Positional: thread, checkpoint, parent thread, parent checkpoint, step, created_at, status, metadata, body,
    # now, run, expected head, then the blobs' threads, channels, steps, kinds and data as arrays.
    "commit": """SELECT won, head FROM {graphckpt_commit}(%s, %s, %s, %s, %s, %s, %s, %b, %b, %s, %s, %s,
        %b, %b, %b, %b, %b)""",
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
    "thread_cp_by_id": "SELECT "
    + _THREAD_AND_CP_COLS
    + """ FROM {threads} t LEFT JOIN {checkpoints} c
        ON c.thread_id = t.thread_id AND c.checkpoint_id = %(cp)s WHERE t.thread_id = %(tid)s AND NOT t.deleted""",
    "thread_cp_by_step": "SELECT "
    + _THREAD_AND_CP_COLS
    + """ FROM {threads} t LEFT JOIN {checkpoints} c
        ON c.thread_id = t.thread_id AND c.step = %(step)s WHERE t.thread_id = %(tid)s AND NOT t.deleted""",
    "cp_by_id": "SELECT " + _CP_COLS + " FROM {checkpoints} WHERE thread_id = %(tid)s AND checkpoint_id = %(cp)s",
    "cp_by_step": "SELECT " + _CP_COLS + " FROM {checkpoints} WHERE thread_id = %(tid)s AND step = %(step)s",
    "cp_head": "SELECT "
    + _CP_COLS
    + """ FROM {checkpoints} WHERE (thread_id, checkpoint_id) =
        (SELECT thread_id, head_checkpoint_id FROM {threads} WHERE thread_id = %(tid)s AND NOT deleted)""",
    # JSON equality per top-level key (metadata is stored as compact ``json``, 50 bytes a row smaller than jsonb, and
    # converted only when a filter is given). Keys and values stay one bound jsonb parameter. jsonb cannot hold NUL:
    # both sides go through nul_free's one-to-one mapping.
    "list_cps": "SELECT "
    + _CP_COLS
    + """ FROM {checkpoints} c WHERE thread_id = %(tid)s
        AND (%(before)s::bigint IS NULL OR step < %(before)s::bigint)
        AND (%(filter)s::jsonb IS NULL OR NOT EXISTS (
            SELECT 1 FROM jsonb_each(%(filter)s::jsonb) AS f(key, value)
            WHERE """
    + _NUL_FREE_METADATA
    + """ -> f.key IS DISTINCT FROM f.value))
        ORDER BY step DESC LIMIT %(limit)s::bigint""",
    "get_blobs": """SELECT thread_id, channel, step, kind, data FROM {blobs} b WHERE EXISTS (
        SELECT 1 FROM unnest(%(tid)s::text[], %(ch)s::text[], %(lo)s::bigint[], %(hi)s::bigint[]) AS r(tid, ch, lo, hi)
        WHERE b.thread_id = r.tid AND b.channel = r.ch AND b.step BETWEEN r.lo AND r.hi)
        ORDER BY channel, step, thread_id""",
    "get_writes": """SELECT task_id, kind, idx, data FROM {writes} WHERE thread_id = %(tid)s AND checkpoint_id = %(cp)s
        ORDER BY task_id, kind, idx""",
}


class PostgresSaver(Saver):
    """A :class:`~graphckpt.savers.base.Saver` on PostgreSQL: one dedicated connection, plus an
    ``AsyncConnectionPool`` for calls that overlap it.

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
        self._conn: psycopg.AsyncConnection[Any] | None = None
        """The dedicated connection; ``None`` after it broke (the next call reconnects it)."""
        self._conn_lock: asyncio.Lock | None = None
        self._queries: dict[str, bytes] = {}
        self._lock: asyncio.Lock | None = None
        self._where, self._password = _describe(dsn)
        self._zstd = zstandard.ZstdCompressor(level=3)  # used on the saver's loop only (not thread-safe)

    def __repr__(self) -> str:
        return f"PostgresSaver({self._where!r}, schema={self._schema!r})"

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def setup(self, *, create: bool = True) -> None:
        if self._pool is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self._pool is None:  # not opened by a concurrent first use while we waited
                    await self._open_pool(create)

    async def _open_pool(self, create: bool) -> None:
        with self._errors("connect and set up"):
            # A direct first connection reports an unreachable server at once (a pool would retry in background);
            # it stays open as the dedicated connection.
            conn = await self._connect()
            try:
                await self._migrate(conn, create)
                self._queries = {name: self._compose(text).as_bytes(conn) for name, text in _SQL.items()}
                pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
                    self._dsn,
                    min_size=self._pool_min,
                    max_size=self._pool_max,
                    kwargs={"autocommit": True, "client_encoding": "UTF8", "prepare_threshold": 0},  # as _connect
                    configure=_configure,
                    open=False,
                    name="graphckpt",
                )
                await pool.open()
            except BaseException:
                await conn.close()
                raise
        self._conn, self._conn_lock = conn, asyncio.Lock()
        self._pool = pool
        self._open = True

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        # prepare_threshold=0: every statement is prepared on its first use.
        conn = await psycopg.AsyncConnection.connect(
            self._dsn, autocommit=True, prepare_threshold=0, client_encoding="UTF8"
        )
        _register_adapters(conn)
        return conn

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        conn, self._conn = self._conn, None
        self._open = False
        self._lock = self._conn_lock = None  # a later reopen may run on another event loop
        with self._errors("close"):
            if conn is not None:
                await conn.close()
            if pool is not None:
                await pool.close()

    def _compose(self, text: LiteralString) -> sql.Composed:
        def name(table: str) -> sql.Identifier:
            return sql.Identifier(self._schema, table) if self._schema else sql.Identifier(table)

        tables = ("threads", "checkpoints", "blobs", "writes", "graphckpt_migrations", "graphckpt_commit")
        return sql.SQL(text).format(**{t: name(t) for t in tables})

    async def _migrate(self, conn: psycopg.AsyncConnection[Any], create: bool = True) -> None:
        migrations = self._compose("{graphckpt_migrations}")
        # Up to date: no lock and no DDL, so a role without the right to create anything can use a schema that its
        # owner set up (CREATE SCHEMA/TABLE IF NOT EXISTS check that right before they look whether it exists).
        cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (migrations.as_string(conn),))
        if (await cur.fetchone()) == (True,):
            cur = await conn.execute(sql.SQL("SELECT version FROM {}").format(migrations))
            if self._known({row[0] for row in await cur.fetchall()}):
                return
        elif not create:
            where = f"schema {self._schema!r}" if self._schema else "the connection's search_path"
            raise StoreNotSetUpError(
                f"PostgreSQL at {self._where}: {where} has no graphckpt tables (graphckpt_migrations is missing)"
            )
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"graphckpt:{self._schema}",))
            if self._schema:
                await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._schema)))
            # No primary key (an index would cost 16 KiB): the advisory lock already makes each version unique.
            await conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (version integer NOT NULL, applied_at timestamptz NOT NULL)"
                ).format(migrations)
            )
            cur = await conn.execute(sql.SQL("SELECT version FROM {}").format(migrations))
            applied = {row[0] for row in await cur.fetchall()}
            self._known(applied)
            for version, statements in _MIGRATIONS:
                if version in applied:
                    continue
                for statement in statements:
                    await conn.execute(self._compose(self._dollar_quoted(statement)))
                await conn.execute(
                    sql.SQL("INSERT INTO {} (version, applied_at) VALUES (%s, now())").format(migrations), (version,)
                )

    def _known(self, applied: set[int]) -> bool:
        """Whether every migration is applied; raises :class:`SaverError` when one is recorded that this version
        does not know (a newer graphckpt set the schema up: writing into it could break that version's data)."""
        known = {version for version, _ in _MIGRATIONS}
        newer = sorted(applied - known)
        if newer:
            where = f"schema {self._schema!r}" if self._schema else "the connection's search_path"
            raise SaverError(
                f"PostgreSQL at {self._where}: {where} has schema version {newer[-1]}, newer than this graphckpt "
                f"understands ({max(known)}); upgrade graphckpt"
            )
        return applied >= known

    def _dollar_quoted(self, statement: LiteralString) -> LiteralString:
        """``statement`` with a dollar-quote tag for graphckpt_commit's body that the schema's name (quoted inside the
        body) does not contain; the body itself is the same whatever the tag."""
        tag = "$fn$"
        while self._schema and tag in self._schema:
            tag = tag[:-1] + "_$"
        return statement.replace("$fn$", tag)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The dedicated connection when it is free, else one from the pool."""
        if self._pool is None:
            await self.setup()
        lock = self._conn_lock
        if lock is not None and not lock.locked():
            async with lock:  # free: taken without yielding to the loop
                conn = self._conn
                if conn is None or conn.closed:
                    conn = self._conn = await self._connect()
                try:
                    yield conn
                finally:
                    self._drop_if_broken(conn)
            return
        assert self._pool is not None
        async with self._pool.connection() as conn:
            yield conn

    def _drop_if_broken(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if (conn.broken or conn.closed) and self._conn is conn:
            self._conn = None  # the next call reconnects
            with contextlib.suppress(Exception):
                conn.pgconn.finish()

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Turn driver errors into :class:`SaverError` naming the server (never the password)."""
        try:
            yield
        except psycopg.Error as exc:
            raise self._saver_error(action, exc) from exc

    def _saver_error(self, action: str, exc: psycopg.Error) -> SaverError:
        # The server's one-line message and its error code, never its detail, context or the statement's text (they
        # quote our SQL and the values bound to it: a megabyte thread id, say).
        primary = exc.diag.message_primary if isinstance(exc, psycopg.DatabaseError) and exc.sqlstate else None
        message = f"{primary} (SQLSTATE {exc.sqlstate})" if primary else str(exc).strip() or type(exc).__name__
        message = message if len(message) <= _MESSAGE_MAX else message[:_MESSAGE_MAX] + "…"
        if self._password:
            message = message.replace(self._password, "***")
        message = scrub_password(message, self._dsn)  # also as written in a URL (percent-encoded)
        return SaverError(f"PostgreSQL at {self._where}: {action} failed: {message}")

    async def _fetch(self, action: str, query: str, params: Sequence[Any] | Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """One prepared statement, rows as tuples in binary format. A parameter that no row can hold (text with a
        lone surrogate, which writes refuse before they get here) matches no row."""
        try:
            async with self._connection() as conn:
                cur = await conn.execute(self._queries[query], params, binary=True)
                return await cur.fetchall()
        except UnicodeEncodeError:
            return []
        except psycopg.Error as exc:
            raise self._saver_error(action, exc) from exc

    # -- writes ------------------------------------------------------------------------------------------------------

    async def commit(self, checkpoint: StoredCheckpoint, *, expected_head: str | None, run_id: str) -> None:
        check_storable(checkpoint, expected_head=expected_head, run_id=run_id)
        cp = checkpoint
        blobs = cp.blobs
        datas, kinds = [], []
        for b in blobs:
            data, kind = b.data, _KIND_CODE[b.kind]
            if _COMPRESS_MIN <= len(data) <= MAX_INFLATED:  # larger: refused by the server (its limit per value)
                packed = self._zstd.compress(data)
                if len(packed) <= len(data) - (len(data) >> 3):
                    data, kind = packed, kind | _COMPRESSED
            datas.append(data)
            kinds.append(kind)
        params = (
            cp.thread_id,
            cp.checkpoint_id,
            cp.parent_thread_id,
            cp.parent_checkpoint_id,
            cp.step,
            cp.created_at,
            cp.status,
            _JsonText(_compact_json(dict(cp.metadata)).encode()),
            cp.body,
            ids.now(),
            run_id,
            expected_head,
            _TextArray(_array(25, _bytes_elements([b.thread_id.encode() for b in blobs]))),
            _TextArray(_array(25, _bytes_elements([b.channel.encode() for b in blobs]))),
            _Int8Array(_array(20, [_ELEM_I8.pack(8, b.step) for b in blobs])),
            _Int2Array(_array(21, [_ELEM_I2.pack(2, k) for k in kinds])),
            _ByteaArray(_array(17, _bytes_elements(datas))),
        )
        try:
            [(won, current)] = await self._fetch(
                f"commit of checkpoint {brief(cp.checkpoint_id)!r} to thread {brief(cp.thread_id)!r}", "commit", params
            )
        except SaverError as exc:
            if isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
                raise ThreadConflictError(
                    f"thread {brief(cp.thread_id)!r} already has checkpoint {brief(cp.checkpoint_id)!r} "
                    f"or a checkpoint at step {cp.step}"
                ) from exc.__cause__
            raise
        if won:
            return
        if expected_head is None:
            raise ThreadConflictError(f"thread {brief(cp.thread_id)!r} already exists")
        if current is None:
            raise ThreadNotFoundError(f"thread {brief(cp.thread_id)!r} does not exist")
        raise ThreadConflictError(
            f"thread {brief(cp.thread_id)!r} moved or was claimed: head is {brief(current)!r}, "
            f"expected {brief(expected_head)!r} owned by run {brief(run_id)!r}"
        )

    async def claim(self, thread_id: str, *, expected_head: str, expected_run_id: str, run_id: str) -> None:
        check_storable(thread_id=thread_id, expected_head=expected_head, expected_run_id=expected_run_id, run_id=run_id)
        params = {"tid": thread_id, "expected": expected_head, "old_run": expected_run_id, "run": run_id}
        action = f"claim of thread {brief(thread_id)!r}"
        [(won, exists)] = await self._fetch(action, "claim", {**params, "now": ids.now()})
        if not exists:
            raise ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
        if not won:
            raise ThreadConflictError(f"thread {brief(thread_id)!r} was claimed or moved by another run")

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
        check_storable(thread_id=thread_id, checkpoint_id=checkpoint_id, run_id=run_id)
        error = utf8_safe(error)
        for w in writes:
            check_storable(task_id=w.task_id)
        if len({(w.task_id, w.kind, w.index) for w in writes}) < len(writes):
            # the last of writes with one key wins (ON CONFLICT DO UPDATE may not touch a row twice in a statement)
            writes = list({(w.task_id, w.kind, w.index): w for w in writes}.values())
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
        [(won, exists)] = await self._fetch(f"put_writes to thread {brief(thread_id)!r}", "put_writes", params)
        if not exists:
            raise ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
        if not won:
            raise ThreadConflictError(f"thread {brief(thread_id)!r} was claimed or moved by another run")

    async def delete_thread(self, thread_id: str) -> None:
        check_storable(thread_id=thread_id)
        with self._errors(f"delete of thread {brief(thread_id)!r}"):
            async with self._connection() as conn, conn.transaction():
                cur = await conn.execute(self._queries["lock_thread"], {"tid": thread_id})
                row = await cur.fetchone()
                if row is None or row[0]:
                    raise ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
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
        rows = await self._fetch(f"get_thread {brief(thread_id)!r}", "get_thread", {"tid": thread_id})
        return _thread(rows[0]) if rows else None

    async def list_threads(self, *, status: Status | None = None) -> list[ThreadRecord]:
        return [_thread(row) for row in await self._fetch("list_threads", "list_threads", {"status": status})]

    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None
    ) -> StoredCheckpoint | None:
        params = {"tid": thread_id, "cp": checkpoint_id, "step": step}
        query = "cp_by_id" if checkpoint_id is not None else "cp_by_step" if step is not None else "cp_head"
        rows = await self._fetch(f"get_checkpoint of thread {brief(thread_id)!r}", query, params)
        found = _checkpoint(rows[0]) if rows else None
        if found is not None and checkpoint_id is not None and step is not None and found.step != step:
            return None
        return found

    async def get_thread_and_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None
    ) -> tuple[ThreadRecord | None, StoredCheckpoint | None]:
        if checkpoint_id is None and step is None:
            return await super().get_thread_and_checkpoint(thread_id)
        params = {"tid": thread_id, "cp": checkpoint_id, "step": step}
        query = "thread_cp_by_id" if checkpoint_id is not None else "thread_cp_by_step"
        rows = await self._fetch(f"get_thread_and_checkpoint of thread {brief(thread_id)!r}", query, params)
        if not rows:
            return None, None
        record, cp_row = _thread(rows[0][:_N_THREAD_COLS]), rows[0][_N_THREAD_COLS:]
        if cp_row[0] is None or (step is not None and cp_row[4] != step):
            return record, None
        return record, _checkpoint(cp_row)

    async def list_checkpoints(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before_step: int | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredCheckpoint]:
        if filter and not filter_can_match(filter):
            return []
        params = {
            "tid": thread_id,
            "limit": limit,
            "before": before_step,
            "filter": Jsonb(nul_free(dict(filter))) if filter else None,
        }
        rows = await self._fetch(f"list_checkpoints of thread {brief(thread_id)!r}", "list_cps", params)
        return [StoredCheckpoint(*row) for row in rows]  # columns in field order; bytea arrives as bytes

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
        out: list[Blob] = []
        for t, c, s, k, d in rows:
            kind = _KIND_NAME.get(k)
            try:
                if kind is None:
                    raise ValueError(f"unknown blob kind {k}")
                out.append(Blob(t, c, s, kind, inflate(d) if k & _COMPRESSED else d))
            except ValueError as exc:
                raise await self._corrupt_blob(t, c, s, str(exc)) from None
        return out

    async def _corrupt_blob(self, thread_id: str, channel: str, step: int, why: str) -> CorruptCheckpointError:
        """The error for a stored blob that cannot be read, naming the checkpoint that wrote it (the thread's
        checkpoint at the blob's step)."""
        rows = await self._fetch("get_checkpoint", "cp_by_step", {"tid": thread_id, "cp": None, "step": step})
        checkpoint_id = rows[0][1] if rows else None
        return CorruptCheckpointError(
            f"checkpoint {checkpoint_id} of thread {brief(thread_id)!r}: the stored data of channel "
            f"{brief(channel)!r} at step {step} is corrupt: {why}",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
        )

    async def get_writes(self, thread_id: str, checkpoint_id: str) -> list[StoredWrite]:
        params = {"tid": thread_id, "cp": checkpoint_id}
        rows = await self._fetch(f"get_writes of thread {brief(thread_id)!r}", "get_writes", params)
        return [StoredWrite(task_id=t, kind=cast(WriteKind, k), index=i, data=bytes(d)) for t, k, i, d in rows]


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    _register_adapters(conn)


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
