"""``PostgresSaver`` against the shared conformance suite, plus what only a server backend has: migrations, concurrent
set-up, several pools racing on one thread, and errors from an unreachable server.

The server is ``GRAPHCKPT_PG_DSN`` (default: ``postgresql://postgres@127.0.0.1:5432/test``). Every test gets its own
fresh schema, dropped afterwards. If the server is unreachable the tests skip, or fail when ``CI`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from psycopg import sql
from support.waiting import wait_for

from graphckpt.errors import SaverError, ThreadConflictError
from graphckpt.ids import new_id
from graphckpt.savers.base import Blob, BlobRange, StoredWrite
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.testing import SaverConformance, make_checkpoint

pytestmark = pytest.mark.postgres

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def require_postgres(dsn: str) -> None:
    """Skip the test when the server at ``dsn`` is unreachable, or fail it when ``CI`` is set (CI must not
    silently lose the PostgreSQL tests). Meant to move to ``tests/conftest.py`` once other modules need it."""
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        reason = f"PostgreSQL not reachable (set GRAPHCKPT_PG_DSN): {exc}".strip()
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    dsn = os.environ.get("GRAPHCKPT_PG_DSN", DEFAULT_DSN)
    require_postgres(dsn)
    return dsn


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A fresh schema name (the saver creates it), dropped with everything in it after the test."""
    name = f"gc_test_{secrets.token_hex(6)}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _query(dsn: str, query: sql.Composed) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query)
        return cur.fetchall() if cur.description is not None else []


class TestPostgresSaver(SaverConformance):
    @pytest.fixture
    async def saver(self, pg_dsn: str, pg_schema: str) -> AsyncIterator[PostgresSaver]:
        async with PostgresSaver(pg_dsn, schema=pg_schema, pool_max=4) as s:
            yield s


async def test_setup_twice_records_each_migration_once(pg_dsn: str, pg_schema: str) -> None:
    async with PostgresSaver(pg_dsn, schema=pg_schema) as saver:
        await saver.setup()
    async with PostgresSaver(pg_dsn, schema=pg_schema) as saver:
        await saver.setup()
    table = sql.Identifier(pg_schema, "graphckpt_migrations")
    rows = _query(pg_dsn, sql.SQL("SELECT version, count(*) FROM {} GROUP BY version ORDER BY version").format(table))
    assert rows and all(count == 1 for _, count in rows)
    assert [version for version, _ in rows] == list(range(1, len(rows) + 1))


async def test_concurrent_setups_from_several_savers_succeed(pg_dsn: str, pg_schema: str) -> None:
    savers = [PostgresSaver(pg_dsn, schema=pg_schema) for _ in range(4)]
    try:
        await asyncio.gather(*(s.setup() for s in savers))
        cp = make_checkpoint("t", 0)
        await savers[0].commit(cp, expected_head=None, run_id="r")
        assert [c.checkpoint_id for c in await savers[3].list_checkpoints("t")] == [cp.checkpoint_id]
    finally:
        await asyncio.gather(*(s.aclose() for s in savers))


async def test_concurrent_first_uses_of_one_saver_open_one_pool(pg_dsn: str, pg_schema: str) -> None:
    async with PostgresSaver(pg_dsn, schema=pg_schema) as probe:
        await probe.aclose()  # schema exists; now race lazy opens on a closed saver
        assert await asyncio.gather(*(probe.get_thread(f"t{i}") for i in range(5))) == [None] * 5


async def test_cas_race_between_two_pools_has_exactly_one_winner(pg_dsn: str, pg_schema: str) -> None:
    async with (
        PostgresSaver(pg_dsn, schema=pg_schema) as one,
        PostgresSaver(pg_dsn, schema=pg_schema) as two,
    ):
        t, run = "race", new_id()
        firsts = [make_checkpoint(t, 0), make_checkpoint(t, 0)]
        created = await asyncio.gather(
            *(s.commit(cp, expected_head=None, run_id=run) for s, cp in zip((one, two), firsts, strict=True)),
            return_exceptions=True,
        )
        assert sorted(type(r).__name__ for r in created) == ["NoneType", "ThreadConflictError"]
        head = firsts[created.index(None)]
        for step in range(1, 11):
            rivals = [make_checkpoint(t, step, parent=head), make_checkpoint(t, step, parent=head)]
            results = await asyncio.gather(
                *(
                    s.commit(cp, expected_head=head.checkpoint_id, run_id=run)
                    for s, cp in zip((one, two), rivals, strict=True)
                ),
                return_exceptions=True,
            )
            assert sorted(type(r).__name__ for r in results) == ["NoneType", "ThreadConflictError"], results
            head = rivals[results.index(None)]
            thread = await two.get_thread(t)
            assert thread is not None and thread.head_checkpoint_id == head.checkpoint_id
        assert len(await one.list_checkpoints(t)) == 11


async def test_filter_is_a_bound_parameter(pg_dsn: str, pg_schema: str) -> None:
    async with PostgresSaver(pg_dsn, schema=pg_schema) as saver:
        cp = make_checkpoint("t", 0, metadata={"a') OR 1=1 --": "x", "source": "input"})
        await saver.commit(cp, expected_head=None, run_id="r")
        assert await saver.list_checkpoints("t", filter={"source": "input') OR 1=1 --"}) == []
        assert await saver.list_checkpoints("t", filter={"a') OR 1=1 --": "y"}) == []
        assert len(await saver.list_checkpoints("t", filter={"a') OR 1=1 --": "x"})) == 1
    tables = _query(pg_dsn, sql.SQL("SELECT count(*) FROM pg_tables WHERE schemaname = {}").format(pg_schema))
    # threads, checkpoints, blobs, writes, events, runs, created_threads, graphckpt_migrations, store_items, waits,
    # crons
    assert tables == [(11,)]


async def test_unreachable_server_is_a_saver_error_naming_host_and_port_not_password() -> None:
    saver = PostgresSaver("postgresql://postgres:s3cret-pw@127.0.0.1:1/test?connect_timeout=3")
    with pytest.raises(SaverError, match=r"127\.0\.0\.1:1") as info:
        await saver.get_thread("t")
    assert "s3cret-pw" not in str(info.value)
    assert isinstance(info.value.__cause__, psycopg.OperationalError)
    await saver.aclose()  # never opened: nothing to release, no warning


async def test_other_server_errors_are_saver_errors_and_commits_stay_atomic(pg_dsn: str, pg_schema: str) -> None:
    async with PostgresSaver(pg_dsn, schema=pg_schema) as saver:
        first = make_checkpoint("t", 0)
        await saver.commit(first, expected_head=None, run_id="r")
        _query(pg_dsn, sql.SQL("DROP TABLE {}").format(sql.Identifier(pg_schema, "blobs")))
        with pytest.raises(SaverError, match="get_blobs") as info:
            await saver.get_blobs([BlobRange("t", "x", 0, 1)])
        assert isinstance(info.value.__cause__, psycopg.errors.UndefinedTable)
        # the head moves first in graphckpt_commit, the blob insert fails after it: all rolled back
        child = make_checkpoint("t", 1, parent=first, channels={"x": b"1"})
        with pytest.raises(SaverError, match="commit"):
            await saver.commit(child, expected_head=first.checkpoint_id, run_id="r")
        thread = await saver.get_thread("t")
        assert thread is not None and thread.head_checkpoint_id == first.checkpoint_id
        assert await saver.get_checkpoint("t", child.checkpoint_id) is None
        with pytest.raises(SaverError):
            await saver.commit(make_checkpoint("u", 0, channels={"x": b"1"}), expected_head=None, run_id="r")
        assert await saver.get_thread("u") is None


async def test_data_survives_close_and_a_new_saver(pg_dsn: str, pg_schema: str) -> None:
    first = make_checkpoint("t", 0, channels={"x": b"\x00data"})
    saver = PostgresSaver(pg_dsn, schema=pg_schema)
    await saver.commit(first, expected_head=None, run_id="r")
    await saver.aclose()
    await saver.aclose()
    async with PostgresSaver(pg_dsn, schema=pg_schema) as other:
        assert await other.get_checkpoint("t") == dataclasses.replace(first, blobs=())
        [blob] = await other.get_blobs([BlobRange("t", "x", 0, 0)])
        assert blob.data == b"\x00data"
        second = make_checkpoint("t", 1, parent=first)
        await other.commit(second, expected_head=first.checkpoint_id, run_id="r")
    with pytest.raises(ThreadConflictError):
        await saver.commit(make_checkpoint("t", 2, parent=first), expected_head=first.checkpoint_id, run_id="r")
    await saver.aclose()


async def test_garbage_collected_while_open_warns(pg_dsn: str, pg_schema: str) -> None:
    saver = PostgresSaver(pg_dsn, schema=pg_schema)
    await saver.setup()
    with pytest.warns(ResourceWarning, match="PostgresSaver was not closed"):
        saver.__del__()
    await saver.aclose()
    del saver
    gc.collect()  # closed: no warning (filterwarnings=error would fail the test)


def test_import_graphckpt_does_not_import_psycopg() -> None:
    code = "import sys, graphckpt, graphckpt.savers; sys.exit('psycopg' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


async def test_commit_is_one_server_side_compare_and_set(pg_dsn: str, pg_schema: str) -> None:
    """``graphckpt_commit`` moves the head only from the expected head and owner, and writes nothing otherwise."""
    async with PostgresSaver(pg_dsn, schema=pg_schema) as saver:
        first = make_checkpoint("t", 0)
        await saver.commit(first, expected_head=None, run_id="r")
        commit = sql.Identifier(pg_schema, "graphckpt_commit")
        call = sql.SQL(
            "SELECT won, head FROM {}('t', {}, 't', {}, 1, 0.5, 'running', '{{}}', '\\x00', 1.0, {}, {}, "
            "ARRAY['t'], ARRAY['x'], ARRAY[1]::bigint[], ARRAY[0]::smallint[], ARRAY['\\x01'::bytea], "
            "NULL, NULL, NULL, NULL, ARRAY['checkpoint'], ARRAY['{{\"checkpoint_id\": \"c1\"}}'])"
        )
        wrong_head = call.format(commit, "c1", first.checkpoint_id, "r", "nope")
        wrong_run = call.format(commit, "c1", first.checkpoint_id, "other", first.checkpoint_id)
        assert _query(pg_dsn, wrong_head) == [(False, first.checkpoint_id)]
        assert _query(pg_dsn, wrong_run) == [(False, first.checkpoint_id)]
        assert await saver.get_checkpoint("t", "c1") is None
        assert await saver.get_blobs([BlobRange("t", "x", 1, 1)]) == []
        right = call.format(commit, "c1", first.checkpoint_id, "r", first.checkpoint_id)
        assert _query(pg_dsn, right) == [(True, None)]
        thread = await saver.get_thread("t")
        assert thread is not None and thread.head_checkpoint_id == "c1" and thread.head_step == 1
        [blob] = await saver.get_blobs([BlobRange("t", "x", 1, 1)])
        assert (blob.kind, blob.data) == ("snapshot", b"\x01")
        events = await saver.read_events([("t", 0, 2)], after=(-1, -1), limit=10)
        assert [(e.step, e.kind, dict(e.payload)) for e in events if e.step == 1] == [
            (1, "checkpoint", {"checkpoint_id": "c1"})
        ]  # the commit's events, once: the refused calls wrote none


async def test_large_blobs_are_compressed_when_it_pays_and_read_back_exactly(pg_dsn: str, pg_schema: str) -> None:
    compressible, random_bytes, small = b"x" * 4000 + b"\x00end", os.urandom(4000), b"y" * 100
    async with PostgresSaver(pg_dsn, schema=pg_schema) as saver:
        first = make_checkpoint("t", 0, channels={"a": compressible, "b": random_bytes, "c": small})
        second = dataclasses.replace(
            make_checkpoint("t", 1, parent=first), blobs=[Blob("t", "a", 1, "delta", compressible)]
        )
        await saver.commit(first, expected_head=None, run_id="r")
        await saver.commit(second, expected_head=first.checkpoint_id, run_id="r")
        blobs = await saver.get_blobs([BlobRange("t", ch, 0, 1) for ch in "abc"])
        assert [(b.channel, b.step, b.kind, b.data) for b in blobs] == [
            ("a", 0, "snapshot", compressible),
            ("a", 1, "delta", compressible),
            ("b", 0, "snapshot", random_bytes),
            ("c", 0, "snapshot", small),
        ]
    stored = _query(
        pg_dsn,
        sql.SQL("SELECT channel, step, kind, length(data) FROM {} ORDER BY channel, step").format(
            sql.Identifier(pg_schema, "blobs")
        ),
    )
    assert [(ch, step, kind) for ch, step, kind, _ in stored] == [("a", 0, 2), ("a", 1, 3), ("b", 0, 0), ("c", 0, 0)]
    lengths = {(ch, step): n for ch, step, _, n in stored}
    assert lengths[("a", 0)] < 200 and lengths[("b", 0)] == 4000 and lengths[("c", 0)] == 100


async def test_a_broken_dedicated_connection_is_replaced(pg_dsn: str, pg_schema: str) -> None:
    async with PostgresSaver(pg_dsn, schema=pg_schema) as saver:
        first = make_checkpoint("t", 0)
        await saver.commit(first, expected_head=None, run_id="r")
        assert saver._io.conn is not None
        pid = saver._io.conn.info.backend_pid
        _query(pg_dsn, sql.SQL("SELECT pg_terminate_backend({})").format(pid))
        alive = sql.SQL("SELECT 1 FROM pg_stat_activity WHERE pid = {}").format(pid)
        wait_for(lambda: not _query(pg_dsn, alive), 15, what=f"backend {pid} to exit")
        with contextlib.suppress(SaverError):  # the call that finds it broken may fail; the saver recovers
            await saver.get_thread("t")
        second = make_checkpoint("t", 1, parent=first)
        await saver.commit(second, expected_head=first.checkpoint_id, run_id="r")
        thread = await saver.get_thread("t")
        assert thread is not None and thread.head_checkpoint_id == second.checkpoint_id
        assert saver._io.conn is not None and saver._io.conn.info.backend_pid != pid


async def test_overlapping_calls_use_the_pool_and_all_succeed(pg_dsn: str, pg_schema: str) -> None:
    async with PostgresSaver(pg_dsn, schema=pg_schema, pool_max=3) as saver:
        cps = [make_checkpoint(f"t{i}", 0, channels={"x": bytes([i]) * 300}) for i in range(8)]
        await asyncio.gather(*(saver.commit(cp, expected_head=None, run_id="r") for cp in cps))
        threads = await asyncio.gather(*(saver.get_thread(f"t{i}") for i in range(8)))
        assert [t.head_checkpoint_id for t in threads if t is not None] == [cp.checkpoint_id for cp in cps]
        blobs = await saver.get_blobs([BlobRange(f"t{i}", "x", 0, 0) for i in range(8)])
        assert sorted(b.data for b in blobs) == sorted(bytes([i]) * 300 for i in range(8))


async def test_put_writes_with_one_key_twice_in_a_call_keeps_the_last(pg_dsn: str, pg_schema: str) -> None:
    """As in the memory and SQLite savers: a later write replaces an earlier one with the same key, also within one
    call (``INSERT ... ON CONFLICT DO UPDATE`` refuses to touch a row twice in one statement)."""
    async with PostgresSaver(pg_dsn, schema=pg_schema) as saver:
        first = make_checkpoint("t", 0)
        await saver.commit(first, expected_head=None, run_id="r")
        writes = [
            StoredWrite("a", "result", 0, b"1"),
            StoredWrite("b", "effect", 0, b"x"),
            StoredWrite("a", "result", 0, b"2"),
        ]
        await saver.put_writes("t", first.checkpoint_id, writes, run_id="r", status="failed", error="e")
        assert await saver.get_writes("t", first.checkpoint_id) == writes[1:][::-1]
        thread = await saver.get_thread("t")
        assert thread is not None and (thread.status, thread.error) == ("failed", "e")


async def test_a_role_without_ddl_rights_uses_a_schema_set_up_by_another(pg_dsn: str, pg_schema: str) -> None:
    """Least privilege: the owner sets the schema up; the application's role may read and write its tables but not
    create anything (by default a role cannot CREATE in a database it does not own). Opening needs no DDL then."""
    async with PostgresSaver(pg_dsn, schema=pg_schema) as owner:
        await owner.setup()
    role = f"gc_test_role_{secrets.token_hex(6)}"
    schema, ident = sql.Identifier(pg_schema), sql.Identifier(role)
    _query(pg_dsn, sql.SQL("CREATE ROLE {} LOGIN").format(ident))
    try:
        _query(pg_dsn, sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, ident))
        _query(
            pg_dsn,
            sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {} TO {}").format(schema, ident),
        )
        async with PostgresSaver(psycopg.conninfo.make_conninfo(pg_dsn, user=role), schema=pg_schema) as app:
            first = make_checkpoint("t", 0, channels={"x": b"1"})
            await app.commit(first, expected_head=None, run_id="r")
            assert await app.get_checkpoint("t") == dataclasses.replace(first, blobs=())
    finally:
        _query(pg_dsn, sql.SQL("DROP OWNED BY {}").format(ident))
        _query(pg_dsn, sql.SQL("DROP ROLE {}").format(ident))


async def test_schema_names_that_need_quoting_work_everywhere(pg_dsn: str, pg_schema: str) -> None:
    """Upper case, spaces, quotes, a semicolon, and the dollar-quote tag of graphckpt_commit's body."""
    for name in [f"{pg_schema} Odd \"Q\" 's';--", f"{pg_schema}$fn$x"]:
        try:
            async with PostgresSaver(pg_dsn, schema=name) as saver:
                first = make_checkpoint("t", 0, channels={"x": b"1"})
                await saver.commit(first, expected_head=None, run_id="r")
                second = make_checkpoint("t", 1, parent=first, channels={"x": b"2"})
                await saver.commit(second, expected_head=first.checkpoint_id, run_id="r")
                assert [b.data for b in await saver.get_blobs([BlobRange("t", "x", 0, 1)])] == [b"1", b"2"]
            tables = _query(pg_dsn, sql.SQL("SELECT count(*) FROM pg_tables WHERE schemaname = {}").format(name))
            assert tables == [(11,)]  # with events, runs, created_threads, store_items, waits, crons
        finally:
            _query(pg_dsn, sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
