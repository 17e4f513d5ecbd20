"""The reads that must stay one indexed read at any size use their index: the query plans (EXPLAIN on PostgreSQL,
EXPLAIN QUERY PLAN on SQLite) of the statements the savers run, on stores holding 20,000 threads, 100,000 blobs and
10,000 queued runs (written with plain SQL: the plans depend on the rows' number, not on who wrote them)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb
from support.postgres import PG_DSN

from graphckpt.savers._pg_runs import RUN_SQL
from graphckpt.savers._pg_schema import compose
from graphckpt.savers._pg_sql import SQL, page_query_name
from graphckpt.savers._sqlite_runs import CANCEL_GRAPHLESS, CLAIM_RUN, CRASHED_WITHOUT_RUN
from graphckpt.savers._sqlite_sql import STATUS_CLAUSE, THREAD_SELECT, blobs_in_ranges, thread_page_query
from graphckpt.savers.base import BlobRange
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver

THREADS = 20_000
QUEUED = 10_000


# -- PostgreSQL ----------------------------------------------------------------------------------------------------


@pytest.fixture
async def pg_filled(pg_schema: str) -> str:
    async with PostgresSaver(PG_DSN, schema=pg_schema) as saver:
        await saver.setup()
    s = sql.Identifier(pg_schema)
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                """INSERT INTO {}.threads (head_step, created_at, updated_at, thread_id, head_checkpoint_id, status,
                run_id, parent_thread_id, metadata, lease_until)
            SELECT 9, i, i, 't' || i, 'c', CASE WHEN i %% 500 = 0 THEN 'running' WHEN i %% 7 = 0 THEN 'failed'
                ELSE 'done' END, 'r', CASE WHEN i %% 100 = 1 THEN 't1' END,
                json_build_object('user', 'u' || (i %% 50), 'tags', json_build_object('graph', 'g')),
                CASE WHEN i %% 500 = 0 THEN i END
            FROM generate_series(1, %s) i"""
            ).format(s),
            (THREADS,),
        )
        conn.execute(
            sql.SQL(
                """INSERT INTO {}.blobs (step, kind, thread_id, channel, data)
                SELECT st, 1, 't' || i, 'messages', '\\x00' FROM generate_series(1, %s) i, generate_series(0, 4) st"""
            ).format(s),
            (THREADS,),
        )
        conn.execute(
            sql.SQL(
                """INSERT INTO {}.runs (run_id, thread_id, kind, status, graph, created_at)
                SELECT 'q' || i, 'q' || i, 'input', 'queued', 'g', i FROM generate_series(1, %s) i"""
            ).format(s),
            (QUEUED,),
        )
        for table in ("threads", "blobs", "runs"):
            conn.execute(sql.SQL("ANALYZE {}.{}").format(s, sql.Identifier(table)))
    return pg_schema


def pg_plan(schema: str, name: str, params: Mapping[str, Any]) -> str:
    text = compose(SQL[name], schema)
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        return "\n".join(str(r[0]) for r in conn.execute(sql.SQL("EXPLAIN ") + text, params))


def assert_pg_index(plan: str, index: str) -> None:
    """``index`` (or, for a common status, the created-order index with the status as a filter: the planner's
    choice when most rows match) walked in keyset order: no sort, no scan of the table."""
    used = [f"using {i} on" for i in (index, "threads_by_created" if index == "threads_by_status" else index)]
    assert any(u in plan for u in used), plan
    assert "Seq Scan" not in plan, plan
    assert "Sort" not in plan.replace("Sort Key: b.channel", "").replace("Incremental", ""), plan


PAGE = {"status": None, "parent": None, "at": None, "tid": None, "filter": None, "limit": 51}


async def test_pg_blob_reads_probe_the_primary_key(pg_filled: str) -> None:
    params = {"tid": ["t5", "t6", "t5"], "ch": ["messages"] * 3, "lo": [0, 0, 2], "hi": [9, 3, 4]}
    plan = pg_plan(pg_filled, "get_blobs", params)
    assert "Index Scan using blobs_pkey" in plan and "Seq Scan" not in plan, plan


@pytest.mark.parametrize(
    ("status", "parent", "after", "metadata", "index"),
    [
        (None, False, False, False, "threads_by_created"),
        (None, False, True, False, "threads_by_created"),
        (None, False, False, True, "threads_by_created"),
        ("failed", False, False, False, "threads_by_status"),
        ("done", False, True, True, "threads_by_status"),
        ("running", False, False, False, "threads_running_lease"),
        ("crashed", False, False, False, "threads_running_lease"),
        (None, True, True, False, "threads_by_parent_created"),
    ],
)
async def test_pg_thread_pages_walk_an_index(
    pg_filled: str, status: str | None, parent: bool, after: bool, metadata: bool, index: str
) -> None:
    params = dict(PAGE, status=status)
    if parent:
        params["parent"] = "t1"
    if after:
        params |= {"at": 15000.0, "tid": "t15000"}
    if metadata:
        params["filter"] = Jsonb({"user": "u3"})
    plan = pg_plan(pg_filled, page_query_name(status, parent, after, metadata), params)
    if index == "threads_running_lease":  # the few running threads, sorted: no walk of the others
        assert "threads_running_lease" in plan and "Seq Scan" not in plan, plan
    else:
        assert_pg_index(plan, index)


@pytest.mark.parametrize("name", ["list_threads_leased", "list_threads_running"])
async def test_pg_crashed_and_running_threads_read_the_lease_index(pg_filled: str, name: str) -> None:
    plan = pg_plan(pg_filled, name, {})
    assert "threads_running_lease" in plan and "Seq Scan" not in plan, plan


async def test_pg_queue_claim_and_sweep_read_indexes_at_10k_queued(pg_filled: str) -> None:
    claim = pg_plan(pg_filled, "claim_run", {"graphs": ["g"], "now": 1.0, "worker": "w", "fence": "f", "until": 2.0})
    assert "runs_queued_order" in claim and "Seq Scan on runs" not in claim and "Sort" not in claim, claim
    assert "Seq Scan on threads" not in claim, claim
    sweep = pg_plan(pg_filled, "requeue_expired", {"now": 1.0, "graphless": "x", "salt": "s", "channel": "c"})
    assert "Seq Scan" not in sweep, sweep
    assert "runs_graphless" in sweep and "threads_running_lease" in sweep, sweep
    assert "requeue_expired" in RUN_SQL


# -- SQLite --------------------------------------------------------------------------------------------------------


@pytest.fixture
def sqlite_filled(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    import asyncio

    path = tmp_path / "plans.db"

    async def create() -> None:
        async with SqliteSaver(str(path)) as saver:
            await saver.setup()

    asyncio.run(create())
    conn = sqlite3.connect(path)
    conn.execute(
        """WITH RECURSIVE numbers(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM numbers WHERE value < ?)
        INSERT INTO threads (thread_id, head_checkpoint_id, head_step, status, run_id, created_at, updated_at,
            parent_thread_id, metadata, lease_until)
        SELECT 't' || value, 'c', 9, CASE WHEN value % 500 = 0 THEN 'running' WHEN value % 7 = 0 THEN 'failed'
            ELSE 'done' END, 'r', value, value, CASE WHEN value % 100 = 1 THEN 't1' END,
            json_object('user', 'u' || (value % 50)), CASE WHEN value % 500 = 0 THEN value END
        FROM numbers""",
        (THREADS,),
    )
    conn.execute(
        """WITH RECURSIVE numbers(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM numbers WHERE value < ?)
        INSERT INTO runs (run_id, thread_id, kind, status, graph, created_at)
        SELECT 'q' || value, 'q' || value, 'input', 'queued', 'g', value FROM numbers""",
        (QUEUED,),
    )
    conn.commit()
    conn.execute("ANALYZE")
    try:
        yield conn
    finally:
        conn.close()


def sqlite_plan(conn: sqlite3.Connection, text: str, params: Any) -> str:
    return "\n".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + text, params))


def test_sqlite_blob_reads_search_the_key(sqlite_filled: sqlite3.Connection) -> None:
    plan = sqlite_plan(sqlite_filled, *blobs_in_ranges([BlobRange("t5", "m", 0, 9), BlobRange("t6", "m", 1, 2)]))
    assert "SEARCH b USING COVERING INDEX sqlite_autoindex_blobs_1" in plan, plan
    assert "SCAN blobs" not in plan and "SCAN b\n" not in plan + "\n", plan


@pytest.mark.parametrize(
    ("status", "parent", "after", "metadata", "index"),
    [
        (None, None, None, None, "threads_by_created"),
        (None, None, (15000.0, "t15000"), None, "threads_by_created"),
        (None, None, None, {"user": "u3"}, "threads_by_created"),
        ("failed", None, None, None, "threads_by_status"),
        ("done", None, (15000.0, "t15000"), {"user": "u3"}, "threads_by_status"),
        (None, "t1", (15000.0, "t15000"), None, "threads_by_parent"),
        ("crashed", None, None, None, "threads_running_lease"),
        ("running", None, None, None, "threads_running_lease"),
    ],
)
def test_sqlite_thread_pages_walk_an_index(
    sqlite_filled: sqlite3.Connection,
    status: str | None,
    parent: str | None,
    after: tuple[float, str] | None,
    metadata: dict[str, Any] | None,
    index: str,
) -> None:
    plan = sqlite_plan(sqlite_filled, *thread_page_query(50, after, status, metadata, parent))
    assert f"INDEX {index}" in plan or (index == "threads_running_lease" and "INDEX threads_by_status" in plan), plan
    assert "SCAN c\n" not in plan + "\n", plan
    if index != "threads_running_lease":  # the few running threads are sorted; every other page is in index order
        assert "TEMP B-TREE" not in plan, plan


def test_sqlite_crashed_threads_read_the_lease_index(sqlite_filled: sqlite3.Connection) -> None:
    plan = sqlite_plan(sqlite_filled, THREAD_SELECT + STATUS_CLAUSE["crashed"], ())
    assert "threads_running_lease" in plan or "threads_by_status (status=?)" in plan, plan


def test_sqlite_queue_claim_and_sweep_read_indexes_at_10k_queued(sqlite_filled: sqlite3.Connection) -> None:
    claim = sqlite_plan(sqlite_filled, CLAIM_RUN, ("w", "f", 2.0, 1.0, '["g"]', 1.0))
    assert "INDEX runs_queued_order" in claim and "TEMP B-TREE" not in claim, claim
    assert "runs_graphless" in sqlite_plan(sqlite_filled, CANCEL_GRAPHLESS, (1.0, "x"))
    crashed = sqlite_plan(sqlite_filled, CRASHED_WITHOUT_RUN, (1.0,))
    assert "threads_running_lease" in crashed or "threads_by_status (status=?)" in crashed, crashed
