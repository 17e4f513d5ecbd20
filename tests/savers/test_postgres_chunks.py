"""Chunk blobs in ``PostgresSaver``: a blob of kind ``chunk`` at step ``a``, committed with the checkpoint of step
``s``, packs the deltas its channel wrote at steps ``a .. s``. In the commit's transaction it deletes that thread's and
channel's rows with ``a < step < s`` and replaces the row at ``a`` (see :meth:`graphckpt.savers.base.Saver.commit`).

Also here: databases created at schema version 1 (no chunks) upgrade in place and keep their rows readable.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from collections.abc import Sequence

import psycopg
import pytest
from psycopg import sql
from support.postgres import PG_DSN

from graphckpt.errors import ThreadConflictError
from graphckpt.savers import _pg_schema, _pg_sql
from graphckpt.savers.base import Blob, BlobKind, BlobRange, StoredCheckpoint
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.testing import make_checkpoint

pytestmark = pytest.mark.postgres

RUN = "run-1"


def _with_blobs(
    cp: StoredCheckpoint, blobs: Sequence[tuple[str, int, BlobKind, bytes]], thread_id: str | None = None
) -> StoredCheckpoint:
    tid = thread_id or cp.thread_id
    return dataclasses.replace(cp, blobs=[Blob(tid, ch, step, kind, data) for ch, step, kind, data in blobs])


async def _deltas(saver: PostgresSaver, thread_id: str, last_step: int) -> list[StoredCheckpoint]:
    """Step 0 snapshots channels ``m`` and ``o``; steps 1..``last_step`` write a delta to ``m``, even steps to ``o``."""
    first = make_checkpoint(thread_id, 0, channels={"m": b"m0", "o": b"o0"})
    await saver.commit(first, expected_head=None, run_id=RUN)
    chain = [first]
    for step in range(1, last_step + 1):
        blobs: list[tuple[str, int, BlobKind, bytes]] = [("m", step, "delta", f"m{step}".encode())]
        if step % 2 == 0:
            blobs.append(("o", step, "delta", f"o{step}".encode()))
        cp = _with_blobs(make_checkpoint(thread_id, step, parent=chain[-1]), blobs)
        await saver.commit(cp, expected_head=chain[-1].checkpoint_id, run_id=RUN)
        chain.append(cp)
    return chain


async def _rows(saver: PostgresSaver, thread_id: str, channel: str) -> list[tuple[int, BlobKind, bytes]]:
    blobs = await saver.get_blobs([BlobRange(thread_id, channel, 0, 1_000)])
    return [(b.step, b.kind, b.data) for b in blobs]


def _stored_kinds(schema: str) -> dict[tuple[str, str, int], int]:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        query = sql.SQL("SELECT thread_id, channel, step, kind FROM {}").format(sql.Identifier(schema, "blobs"))
        return {(t, c, s): k for t, c, s, k in conn.execute(query).fetchall()}


async def test_a_chunk_replaces_the_deltas_it_packs_and_nothing_else(pg_schema: str) -> None:
    async with PostgresSaver(PG_DSN, schema=pg_schema) as saver:
        chain = await _deltas(saver, "t", 4)
        other_thread = await _deltas(saver, "u", 4)
        # step 5 packs m's deltas of steps 2..5 into one chunk at step 2, and writes a delta to o
        five = _with_blobs(
            make_checkpoint("t", 5, parent=chain[-1]), [("m", 2, "chunk", b"m2+m3+m4+m5"), ("o", 5, "delta", b"o5")]
        )
        await saver.commit(five, expected_head=chain[-1].checkpoint_id, run_id=RUN)

        assert await _rows(saver, "t", "m") == [
            (0, "snapshot", b"m0"),
            (1, "delta", b"m1"),
            (2, "chunk", b"m2+m3+m4+m5"),
        ]
        # other channels and other threads keep every row
        assert await _rows(saver, "t", "o") == [
            (0, "snapshot", b"o0"),
            (2, "delta", b"o2"),
            (4, "delta", b"o4"),
            (5, "delta", b"o5"),
        ]
        assert await _rows(saver, "u", "m") == [(0, "snapshot", b"m0")] + [
            (s, "delta", f"m{s}".encode()) for s in (1, 2, 3, 4)
        ]
        # a chunk is inside a range when its own step is
        chunk = Blob("t", "m", 2, "chunk", b"m2+m3+m4+m5")
        assert await saver.get_blobs([BlobRange("t", "m", 2, 2)]) == [chunk]
        assert await saver.get_blobs([BlobRange("t", "m", 1, 3)]) == [Blob("t", "m", 1, "delta", b"m1"), chunk]
        assert await saver.get_blobs([BlobRange("t", "m", 3, 5)]) == []
        # the checkpoints themselves are all still there, and the head moved
        assert [cp.step for cp in await saver.list_checkpoints("t")] == [5, 4, 3, 2, 1, 0]
        thread = await saver.get_thread("t")
        assert thread is not None and thread.head_checkpoint_id == five.checkpoint_id
        assert len(other_thread) == 5


async def test_a_chunk_at_a_step_without_a_row_is_inserted_and_later_chunks_replace_earlier_ones(
    pg_schema: str,
) -> None:
    async with PostgresSaver(PG_DSN, schema=pg_schema) as saver:
        chain = await _deltas(saver, "t", 2)
        # a one-step chunk at the checkpoint's own step: nothing to delete, nothing to replace
        three = _with_blobs(make_checkpoint("t", 3, parent=chain[-1]), [("m", 3, "chunk", b"m3")])
        await saver.commit(three, expected_head=chain[-1].checkpoint_id, run_id=RUN)
        four = _with_blobs(make_checkpoint("t", 4, parent=three), [("m", 4, "delta", b"m4")])
        await saver.commit(four, expected_head=three.checkpoint_id, run_id=RUN)
        assert await _rows(saver, "t", "m") == [
            (0, "snapshot", b"m0"),
            (1, "delta", b"m1"),
            (2, "delta", b"m2"),
            (3, "chunk", b"m3"),
            (4, "delta", b"m4"),
        ]
        # a chunk at 1 packing 1..5 replaces the delta at 1 and deletes the delta, chunk and delta at 2, 3 and 4
        five = _with_blobs(make_checkpoint("t", 5, parent=four), [("m", 1, "chunk", b"m1..m5")])
        await saver.commit(five, expected_head=four.checkpoint_id, run_id=RUN)
        assert await _rows(saver, "t", "m") == [(0, "snapshot", b"m0"), (1, "chunk", b"m1..m5")]
        assert await _rows(saver, "t", "o") == [(0, "snapshot", b"o0"), (2, "delta", b"o2")]


async def test_a_first_checkpoint_may_carry_a_chunk(pg_schema: str) -> None:
    async with PostgresSaver(PG_DSN, schema=pg_schema) as saver:
        first = _with_blobs(make_checkpoint("t", 0), [("m", 0, "chunk", b"m0")])
        await saver.commit(first, expected_head=None, run_id=RUN)
        assert await _rows(saver, "t", "m") == [(0, "chunk", b"m0")]


async def test_a_failed_commit_with_a_chunk_deletes_nothing(pg_schema: str) -> None:
    async with PostgresSaver(PG_DSN, schema=pg_schema) as saver:
        chain = await _deltas(saver, "t", 4)
        before = {ch: await _rows(saver, "t", ch) for ch in "mo"}
        chunk = [("m", 1, "chunk", b"m1..m5")]
        stale = _with_blobs(make_checkpoint("t", 5, parent=chain[-2]), chunk)  # head has moved past its parent
        with pytest.raises(ThreadConflictError):
            await saver.commit(stale, expected_head=chain[-2].checkpoint_id, run_id=RUN)
        stranger = _with_blobs(make_checkpoint("t", 5, parent=chain[-1]), chunk)  # right head, wrong owner
        with pytest.raises(ThreadConflictError):
            await saver.commit(stranger, expected_head=chain[-1].checkpoint_id, run_id="run-2")
        clash = _with_blobs(make_checkpoint("t", 4, parent=chain[-1]), chunk)  # a checkpoint at step 4 exists
        with pytest.raises(ThreadConflictError):
            await saver.commit(clash, expected_head=chain[-1].checkpoint_id, run_id=RUN)
        assert {ch: await _rows(saver, "t", ch) for ch in "mo"} == before
        thread = await saver.get_thread("t")
        assert thread is not None and thread.head_checkpoint_id == chain[-1].checkpoint_id


async def test_chunks_are_compressed_when_it_pays_and_read_back_exactly(pg_schema: str) -> None:
    text = b"".join(f"message {i:04d} ".encode() * 64 for i in range(32))[: 32 * 1024]  # 32 x 1 KiB
    noise = os.urandom(32 * 1024)
    async with PostgresSaver(PG_DSN, schema=pg_schema) as saver:
        chain = await _deltas(saver, "t", 3)
        four = _with_blobs(
            make_checkpoint("t", 4, parent=chain[-1]), [("m", 1, "chunk", text), ("o", 2, "chunk", noise)]
        )
        await saver.commit(four, expected_head=chain[-1].checkpoint_id, run_id=RUN)
        assert await _rows(saver, "t", "m") == [(0, "snapshot", b"m0"), (1, "chunk", text)]
        assert await _rows(saver, "t", "o") == [(0, "snapshot", b"o0"), (2, "chunk", noise)]
    kinds = _stored_kinds(pg_schema)
    assert kinds[("t", "m", 1)] == 6  # chunk, compressed
    assert kinds[("t", "o", 2)] == 4  # chunk, stored as it is


V1_COMMIT = """SELECT c.won, c.head, NULL::text FROM {graphckpt_commit}(%s, %s, %s, %s, %s, %s, %s, %b, %b, %s, %s, %s,
    %b, %b, %b, %b, %b) AS c,
    (SELECT %s::text, %s::text, %s::int, %s::float8, %b::text[], %b::text[]) AS lease_and_event_arguments_of_today"""


async def test_a_database_at_schema_version_1_upgrades_and_keeps_its_rows(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = b"compressible " * 100
    with monkeypatch.context() as patch:
        patch.setattr(_pg_schema, "MIGRATIONS", _pg_schema.MIGRATIONS[:1])
        # version 1's graphckpt_commit takes 17 arguments and returns (won, head); today's call passes the 4 lease
        # arguments and the 2 event arrays too and reads the owner's run: the old saver calls the old function
        # (the newer arguments ignored)
        patch.setitem(_pg_sql.SQL, "commit", V1_COMMIT)
        async with PostgresSaver(PG_DSN, schema=pg_schema) as old:
            chain = await _deltas(old, "t", 3)
            four = _with_blobs(make_checkpoint("t", 4, parent=chain[-1]), [("m", 4, "delta", big)])
            await old.commit(four, expected_head=chain[-1].checkpoint_id, run_id=RUN)
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            versions = sql.SQL("SELECT version FROM {}").format(sql.Identifier(pg_schema, "graphckpt_migrations"))
            assert conn.execute(versions).fetchall() == [(1,)]
            insert_chunk = sql.SQL("INSERT INTO {} (step, kind, thread_id, channel, data) VALUES (9, 4, 't', 'x', '')")
            with pytest.raises(psycopg.errors.CheckViolation):  # version 1 knows no chunks
                conn.execute(insert_chunk.format(sql.Identifier(pg_schema, "blobs")))
    assert _stored_kinds(pg_schema)[("t", "m", 4)] == 3  # a compressed delta, written by version 1

    async with PostgresSaver(PG_DSN, schema=pg_schema) as saver:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            rows = conn.execute(versions).fetchall()
            assert sorted(rows) == [(v,) for v, _ in _pg_schema.MIGRATIONS]
        expected_m = [(0, "snapshot", b"m0"), (1, "delta", b"m1"), (2, "delta", b"m2"), (3, "delta", b"m3")]
        assert await _rows(saver, "t", "m") == [*expected_m, (4, "delta", big)]
        assert await _rows(saver, "t", "o") == [(0, "snapshot", b"o0"), (2, "delta", b"o2")]
        # the replaced graphckpt_commit packs deltas written before the upgrade
        five = _with_blobs(make_checkpoint("t", 5, parent=four), [("m", 2, "chunk", big)])
        await saver.commit(five, expected_head=four.checkpoint_id, run_id=RUN)
        assert await _rows(saver, "t", "m") == [*expected_m[:2], (2, "chunk", big)]
        assert _stored_kinds(pg_schema)[("t", "m", 2)] == 6
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            bad_kind = sql.SQL("INSERT INTO {} (step, kind, thread_id, channel, data) VALUES (9, 5, 't', 'x', '')")
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute(bad_kind.format(sql.Identifier(pg_schema, "blobs")))


async def test_blobs_compressed_with_zlib_by_earlier_versions_still_read(pg_schema: str) -> None:
    """Earlier versions compressed with zlib under the same kind bit; the magic bytes tell the formats apart."""
    text = b"an earlier version's compressed delta " * 40
    async with PostgresSaver(PG_DSN, schema=pg_schema) as saver:
        chain = await _deltas(saver, "t", 2)
        await saver.commit(
            _with_blobs(make_checkpoint("t", 3, parent=chain[-1]), [("m", 3, "delta", text)]),
            expected_head=chain[-1].checkpoint_id,
            run_id=RUN,
        )
        assert _stored_kinds(pg_schema)[("t", "m", 3)] == 3  # delta, compressed (zstd, by this version)
        with psycopg.connect(PG_DSN, autocommit=True) as conn:  # as an earlier version stored it
            query = sql.SQL("UPDATE {} SET data = %s WHERE thread_id = 't' AND channel = 'm' AND step = 3")
            conn.execute(query.format(sql.Identifier(pg_schema, "blobs")), (zlib.compress(text, 1),))
        assert (await _rows(saver, "t", "m"))[-1] == (3, "delta", text)
