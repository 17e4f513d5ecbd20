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

Migration rule: ``MIGRATIONS`` (in ``_pg_schema``) is append-only. A released entry is never edited or removed; a
schema change is a new entry with the next version. :meth:`PostgresSaver.setup` applies the missing versions in one
transaction under a ``pg_advisory_xact_lock`` keyed by the schema, recording each in ``graphckpt_migrations``, so
concurrent set-ups from many processes are safe and idempotent. When none is missing it takes no lock and runs no
DDL (a role that may only read and write the tables can use a schema its owner set up).

Round trips: ``commit`` is one prepared statement, ``SELECT * FROM graphckpt_commit(...)``: the function moves the head
by compare-and-set and, only if that won, inserts the checkpoint and its blobs (a chunk first deletes the rows it
packs and then replaces the row at its step) and deletes the parent's pending writes.
One statement in autocommit mode is one transaction and one network round trip, all or nothing. Each statement of
the (volatile) PL/pgSQL function takes a fresh snapshot, so the deletion runs after the thread row lock is held and
sees every pending write committed before it. ``put_writes``, ``claim`` and every read are one statement each.

Connections (:mod:`graphckpt.savers._pg_io`): one dedicated connection serves every call while it is free (no pool
check-out on the hot path; its statements are prepared on first use); calls that overlap a busy dedicated connection
take one from the pool, so concurrent commits still run in parallel (and share WAL flushes on the server).

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

import contextlib
import functools
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

try:
    import psycopg
    import psycopg_pool  # noqa: F401  (used by _pg_io; imported here so that its absence gets this message)
    import zstandard
    from psycopg.types.json import Jsonb
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(f"PostgresSaver needs the postgres extra: pip install 'graphckpt[postgres]' ({exc})") from exc

from graphckpt import ids
from graphckpt.encryption import Keyring, is_sealed
from graphckpt.errors import (
    CorruptCheckpointError,
    LeaseLostError,
    SaverError,
    ThreadConflictError,
    ThreadNotFoundError,
)
from graphckpt.savers._checks import (
    brief,
    check_filter,
    check_storable,
    claim_lost,
    lease_lost,
    nul_free,
    utf8_safe,
)
from graphckpt.savers._inflate import MAX_INFLATED, inflate
from graphckpt.savers._pg_crons import PostgresCrons
from graphckpt.savers._pg_io import PostgresConnections, cursor_of
from graphckpt.savers._pg_items import PostgresItems
from graphckpt.savers._pg_listing import PostgresListings
from graphckpt.savers._pg_runs import PostgresRuns
from graphckpt.savers._pg_sql import N_THREAD_COLS, checkpoint_from_row, thread_from_row
from graphckpt.savers._pg_waits import PostgresWaits, Statements
from graphckpt.savers._pg_wire import (
    COMPRESSED,
    ELEM_I2,
    ELEM_I8,
    KIND_CODE,
    KIND_NAME,
    ByteaArray,
    Int2Array,
    Int8Array,
    JsonText,
    TextArray,
    array,
    bytes_elements,
)
from graphckpt.savers._row_checks import checked_checkpoint
from graphckpt.savers._sealing import Sealer
from graphckpt.savers.base import (
    Blob,
    BlobRange,
    Owner,
    Saver,
    Status,
    StoredCheckpoint,
    StoredWrite,
    ThreadRecord,
    WriteKind,
    kept_key,
)
from graphckpt.savers.events import checkpoint_events

__all__ = ["PostgresSaver"]


_compact_json = functools.partial(json.dumps, separators=(",", ":"))
_COMPRESS_MIN = 128
"""Blobs shorter than this are stored as they are."""


class PostgresSaver(PostgresListings, PostgresRuns, PostgresItems, PostgresWaits, PostgresCrons, Saver):
    """A :class:`~graphckpt.savers.base.Saver` on PostgreSQL: one dedicated connection, plus an
    ``AsyncConnectionPool`` for calls that overlap it.

    ``dsn`` is a libpq connection string or URL; ``schema`` (created if missing) holds the tables, else the
    connection's ``search_path`` decides. The pool holds ``pool_min`` to ``pool_max`` connections. Nothing connects
    until the first operation (or ``async with``).
    """

    keeps_dead_rows = True

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        pool_min: int = 1,
        pool_max: int = 10,
        events: bool = True,
        encryption: Keyring | None = None,
        require_encryption: bool | None = None,
    ) -> None:
        self.sealer = Sealer.configured(encryption, require_encryption)
        """Encryption at rest (see :mod:`graphckpt.savers._sealing`; ``encryption`` defaults to
        ``GRAPHCKPT_ENCRYPTION_KEYS``)."""
        self.events = events
        """Whether commits write their steps' events to the durable event log (see
        :mod:`graphckpt.savers.events`)."""
        self._dsn = dsn
        self._schema = schema
        self._io = PostgresConnections(dsn, schema=schema, pool_min=pool_min, pool_max=pool_max)
        self._zstd = zstandard.ZstdCompressor(level=3)  # used on the saver's loop only (not thread-safe)

    def __repr__(self) -> str:
        return f"PostgresSaver({self._io.where!r}, schema={self._schema!r})"

    async def _commit_with_writes(
        self, action: str, params: Sequence[Any], kept: Sequence[Mapping[str, Any]]
    ) -> list[tuple[Any, ...]]:
        """The commit statement, then (when it won) the kept writes' statements, in one transaction."""
        try:
            async with self._connection() as conn, conn.transaction():
                cur = await conn.execute(self._io.queries["commit"], params, binary=True)
                rows = await cur.fetchall()
                if rows and rows[0][0]:
                    for writes in kept:
                        await conn.execute(self._io.queries["put_writes"], writes, binary=True)
                return rows
        except psycopg.Error as exc:
            raise self._io.error(action, exc) from exc

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def setup(self, *, create: bool = True) -> None:
        await self._io.open(create)
        self._open = True

    async def aclose(self) -> None:
        self._open = False
        await self._io.close()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection of :class:`~graphckpt.savers._pg_io.PostgresConnections`, opening the saver on first use."""
        if not self._io.is_open:
            await self.setup()
        async with self._io.connection() as conn:
            yield conn

    async def _fetch(self, action: str, query: str, params: Sequence[Any] | Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """One prepared statement, rows as tuples in binary format. A parameter that no row can hold (text with a
        lone surrogate, which writes refuse before they get here) matches no row."""
        try:
            async with self._connection() as conn:
                cur = await cursor_of(conn).execute(self._io.queries[query], params, binary=True)
                return await cur.fetchall()
        except UnicodeEncodeError:
            return []
        except psycopg.Error as exc:
            raise self._io.error(action, exc) from exc

    @contextlib.asynccontextmanager
    async def _transaction(self, action: str) -> AsyncIterator[Statements]:
        """One transaction: the block runs named statements with the ``run(name, params)`` it gets; all or nothing."""
        with self._io.errors(action):
            async with self._connection() as conn, conn.transaction():

                async def run(query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
                    cur = await cursor_of(conn).execute(self._io.queries[query], params, binary=True)
                    return await cur.fetchall() if cur.description is not None else []

                yield run

    # -- writes ------------------------------------------------------------------------------------------------------

    async def commit(
        self,
        checkpoint: StoredCheckpoint,
        *,
        expected_head: str | None,
        run_id: str,
        owner: Owner | None = None,
        lease_until: float | None = None,
        kept_writes: Mapping[str, Sequence[StoredWrite]] | None = None,
    ) -> None:
        check_storable(checkpoint, expected_head=expected_head, run_id=run_id)
        kept = _kept_params(self.sealer, checkpoint.thread_id, kept_writes, run_id)
        cp = self.sealer.seal_checkpoint(checkpoint)
        blobs = cp.blobs
        events = checkpoint_events(cp) if self.events else []
        datas, kinds = [], []
        for b in blobs:
            data, kind = b.data, KIND_CODE[b.kind]
            # larger: refused by the server (its limit per value); sealed: compressed before it was (see encryption)
            if _COMPRESS_MIN <= len(data) <= MAX_INFLATED and not is_sealed(data):
                packed = self._zstd.compress(data)
                if len(packed) <= len(data) - (len(data) >> 3):
                    data, kind = packed, kind | COMPRESSED
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
            JsonText(_compact_json(dict(cp.metadata)).encode()),
            cp.body,
            ids.now(),
            run_id,
            expected_head,
            TextArray(array(25, bytes_elements([b.thread_id.encode() for b in blobs]))),
            TextArray(array(25, bytes_elements([b.channel.encode() for b in blobs]))),
            Int8Array(array(20, [ELEM_I8.pack(8, b.step) for b in blobs])),
            Int2Array(array(21, [ELEM_I2.pack(2, k) for k in kinds])),
            ByteaArray(array(17, bytes_elements(datas))),
            owner.stored_worker if owner is not None else None,
            owner.host if owner is not None else None,
            owner.pid if owner is not None else None,
            lease_until if owner is not None else None,
            TextArray(array(25, bytes_elements([kind.encode() for kind, _ in events]))),
            TextArray(array(25, bytes_elements([payload.encode() for _, payload in events]))),
        )
        action = f"commit of checkpoint {brief(cp.checkpoint_id)!r} to thread {brief(cp.thread_id)!r}"
        try:
            if kept:
                [(won, current, owner_run)] = await self._commit_with_writes(action, params, kept)
            else:
                [(won, current, owner_run)] = await self._fetch(action, "commit", params)
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
        if owner_run != run_id:
            raise await self._lease_lost(cp.thread_id, run_id)
        raise ThreadConflictError(
            f"thread {brief(cp.thread_id)!r} moved: head is {brief(current)!r}, expected {brief(expected_head)!r}"
        )

    async def _lease_lost(self, thread_id: str, run_id: str) -> Exception:
        """The error for a write of ``run_id`` refused by the fence: names who holds the thread now."""
        record = await self.get_thread(thread_id)
        if record is None:
            return ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
        if record.run_id == run_id:  # the head moved, not the owner
            return ThreadConflictError(f"thread {brief(thread_id)!r} moved: its head is {record.head_checkpoint_id!r}")
        return lease_lost(thread_id, record.lease, run_id, ids.now())

    async def claim(
        self,
        thread_id: str,
        *,
        expected_head: str,
        expected_run_id: str,
        run_id: str,
        owner: Owner | None = None,
        lease_until: float | None = None,
        take_epoch: int | None = None,
    ) -> int:
        check_storable(thread_id=thread_id, expected_head=expected_head, expected_run_id=expected_run_id, run_id=run_id)
        now = ids.now()
        params = {
            "tid": thread_id,
            "expected": expected_head,
            "old_run": expected_run_id,
            "run": run_id,
            "now": now,
            "worker": owner.stored_worker if owner else None,
            "host": owner.host if owner else None,
            "pid": owner.pid if owner else None,
            "until": lease_until if owner else None,
            "take": take_epoch,
        }
        rows = await self._fetch(f"claim of thread {brief(thread_id)!r}", "claim", params)
        if rows:
            return int(rows[0][0])
        record = await self.get_thread(thread_id)
        if record is None:
            raise ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
        raise claim_lost(thread_id, record, now)

    async def expire_lease(self, thread_id: str, *, epoch: int) -> bool:
        check_storable(thread_id=thread_id)
        params = {"tid": thread_id, "epoch": epoch, "now": ids.now() - 0.001}  # strictly past for later reads
        return bool(await self._fetch(f"expiry of the lease of thread {brief(thread_id)!r}", "expire", params))

    async def heartbeat(self, thread_id: str, *, run_id: str, lease_until: float) -> None:
        check_storable(thread_id=thread_id, run_id=run_id)
        params = {"tid": thread_id, "run": run_id, "until": lease_until, "now": ids.now()}
        if not await self._fetch(f"heartbeat of thread {brief(thread_id)!r}", "heartbeat", params):
            error = await self._lease_lost(thread_id, run_id)
            if not isinstance(error, ThreadConflictError) or isinstance(error, LeaseLostError):
                raise error  # (the run's own released lease is nothing to renew)

    async def release(self, thread_id: str, *, run_id: str) -> None:
        check_storable(thread_id=thread_id, run_id=run_id)
        with self._io.errors(f"release of thread {brief(thread_id)!r}"):
            async with self._connection() as conn:
                await conn.execute(self._io.queries["release"], {"tid": thread_id, "run": run_id})

    async def put_writes(
        self,
        thread_id: str,
        checkpoint_id: str,
        writes: Sequence[StoredWrite],
        *,
        run_id: str,
        status: Status | None = None,
        error: str | None = None,
        anywhere: bool = False,
    ) -> None:
        params = _writes_params(
            self.sealer, thread_id, checkpoint_id, writes, run_id=run_id, status=status, error=error, anywhere=anywhere
        )
        [(won, exists)] = await self._fetch(f"put_writes to thread {brief(thread_id)!r}", "put_writes", params)
        if not exists:
            raise ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
        if not won:
            raise await self._lease_lost(thread_id, run_id)

    async def delete_thread(self, thread_id: str) -> None:
        check_storable(thread_id=thread_id)
        with self._io.errors(f"delete of thread {brief(thread_id)!r}"):
            async with self._connection() as conn, conn.transaction():
                cur = await conn.execute(self._io.queries["lock_thread"], {"tid": thread_id})
                row = await cur.fetchone()
                if row is None or row[0]:
                    raise ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
                # Prune the thread, then each deleted fork source that was kept only for the forks being removed.
                tid: str | None = thread_id
                source: str | None = row[1]
                while tid is not None:
                    [(keep,)] = await (await conn.execute(self._io.queries["needed_step"], {"tid": tid})).fetchall()
                    await conn.execute(self._io.queries["prune"], {"tid": tid, "keep": -1 if keep is None else keep})
                    if keep is not None:
                        await conn.execute(self._io.queries["mark_deleted"], {"tid": tid})
                        break
                    await conn.execute(self._io.queries["drop_thread"], {"tid": tid})
                    tid, row = None, None
                    if source is not None:
                        row = await (await conn.execute(self._io.queries["lock_thread"], {"tid": source})).fetchone()
                    if row is not None and row[0]:
                        tid, source = source, row[1]

    async def drop_steps(self, thread_id: str, below: int, blobs_from: Mapping[str, int]) -> int:
        check_storable(thread_id=thread_id)
        async with self._transaction(f"drop_steps of thread {brief(thread_id)!r}") as run:
            found = await run("lock_thread", {"tid": thread_id})
            head = await run("get_thread", {"tid": thread_id})
            if not found or found[0][0] or not head or head[0][2] < below:  # [2]: head_step
                return 0
            [(needed,)] = await run("needed_step", {"tid": thread_id})
            chs, firsts = list(blobs_from), list(blobs_from.values())
            params = {"tid": thread_id, "above": -1 if needed is None else needed, "below": below}
            [(dropped,)] = await run("drop_steps", {**params, "chs": chs, "firsts": firsts})
            return int(dropped)

    # -- reads -------------------------------------------------------------------------------------------------------

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        rows = await self._fetch(f"get_thread {brief(thread_id)!r}", "get_thread", {"tid": thread_id})
        return self.sealer.open_thread(thread_from_row(rows[0], ids.now())) if rows else None

    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None
    ) -> StoredCheckpoint | None:
        params = {"tid": thread_id, "cp": checkpoint_id, "step": step}
        query = "cp_by_id" if checkpoint_id is not None else "cp_by_step" if step is not None else "cp_head"
        rows = await self._fetch(f"get_checkpoint of thread {brief(thread_id)!r}", query, params)
        found = self.sealer.open_checkpoint(checkpoint_from_row(rows[0])) if rows else None
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
        record = self.sealer.open_thread(thread_from_row(rows[0][:N_THREAD_COLS], ids.now()))
        cp_row = rows[0][N_THREAD_COLS:]
        if cp_row[0] is None or (step is not None and cp_row[4] != step):
            return record, None
        return record, self.sealer.open_checkpoint(checkpoint_from_row(cp_row))

    async def list_checkpoints(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before_step: int | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredCheckpoint]:
        if filter:
            check_filter(filter)
        self.sealer.check_filter(filter)
        params = {
            "tid": thread_id,
            "limit": limit,
            "before": before_step,
            "filter": Jsonb(nul_free(dict(filter))) if filter else None,
        }
        rows = await self._fetch(f"list_checkpoints of thread {brief(thread_id)!r}", "list_cps", params)
        # columns in field order; bytea arrives as bytes; metadata that is not an object is corrupt when read
        cps = [
            checked_checkpoint(StoredCheckpoint(*row)) if isinstance(row[7], Mapping) else checkpoint_from_row(row)
            for row in rows
        ]
        return self.sealer.open_checkpoints(cps)

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
            kind = KIND_NAME.get(k)
            try:
                if kind is None:
                    raise ValueError(f"unknown blob kind {k}")
                out.append(Blob(t, c, s, kind, inflate(d) if k & COMPRESSED else d))
            except ValueError as exc:
                raise await self._corrupt_blob(t, c, s, str(exc)) from None
        return self.sealer.open_blobs(out)

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
        writes = [StoredWrite(task_id=t, kind=cast(WriteKind, k), index=i, data=bytes(d)) for t, k, i, d in rows]
        return self.sealer.open_writes(thread_id, checkpoint_id, writes)

    @property
    def dsn(self) -> str:
        """The connection string (for a listener connection of its own: ``LISTEN graphckpt_events``)."""
        return self._dsn

    @property
    def schema(self) -> str | None:
        return self._schema


def _writes_params(
    sealer: Sealer,
    thread_id: str,
    checkpoint_id: str,
    writes: Sequence[StoredWrite],
    *,
    run_id: str,
    status: Status | None,
    error: str | None,
    anywhere: bool,
) -> dict[str, Any]:
    check_storable(thread_id=thread_id, checkpoint_id=checkpoint_id, run_id=run_id)
    error = utf8_safe(error)
    for w in writes:
        check_storable(task_id=w.task_id)
    if len({(w.task_id, w.kind, w.index) for w in writes}) < len(writes):
        # the last of writes with one key wins (ON CONFLICT DO UPDATE may not touch a row twice in a statement)
        writes = list({(w.task_id, w.kind, w.index): w for w in writes}.values())
    return {
        "tid": thread_id,
        "cp": checkpoint_id,
        "anywhere": anywhere,
        "run": run_id,
        "status": status,
        "error": error,
        "now": ids.now(),
        "w_task": [w.task_id for w in writes],
        "w_kind": [w.kind for w in writes],
        "w_idx": [w.index for w in writes],
        "w_data": [w.data for w in sealer.seal_writes(thread_id, checkpoint_id, writes)],
    }


def _kept_params(
    sealer: Sealer, thread_id: str, kept_writes: Mapping[str, Sequence[StoredWrite]] | None, run_id: str
) -> list[Mapping[str, Any]]:
    """The ``put_writes`` parameters of a commit's ``kept_writes`` (kept by checkpoint, wherever the head is)."""
    return [
        _writes_params(sealer, thread_id, kept_key(cid), ws, run_id=run_id, status=None, error=None, anywhere=True)
        for cid, ws in (kept_writes or {}).items()
    ]
