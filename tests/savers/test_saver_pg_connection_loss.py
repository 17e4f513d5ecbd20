"""A PostgreSQL connection that dies mid-call: the saver's :class:`SaverError` is one line naming the operation and
a short cause (never libpq's multi-line text), and the saver recovers on the next call. The backends are really
ended: ``pg_terminate_backend`` from a second connection on the shared server, and ``SIGKILL`` on a private
cluster (a backend that dies without a word, as a crashed server or a dropped network does)."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import psycopg
import pytest
from support.pgcluster import private_cluster
from support.postgres import PG_DSN, require_postgres
from support.waiting import await_for

from graphckpt.errors import SaverError
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.testing._records import make_checkpoint


def _sql(dsn: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query.encode(), params)
        return cur.fetchall() if cur.description is not None else []


def _assert_one_line(message: str, operation: str) -> None:
    assert "\n" not in message and "\t" not in message, repr(message)
    assert len(message) < 250, message
    assert message.startswith("PostgreSQL at 127.0.0.1:") and operation in message and " failed: " in message
    assert "This probably means" not in message, message


async def test_a_terminated_backend_mid_call_is_one_line_naming_the_call(pg_schema_name: str) -> None:
    require_postgres()
    app = "a24-terminated"
    dsn = f"{PG_DSN}?application_name={app}"
    async with PostgresSaver(dsn, schema=pg_schema_name) as saver:
        with psycopg.connect(PG_DSN) as locker:
            await saver.commit(make_checkpoint("other", 0), expected_head=None, run_id="r")
            first = make_checkpoint("t", 0)
            await saver.commit(first, expected_head=None, run_id="r")
            locker.execute(f'SELECT 1 FROM "{pg_schema_name}".threads WHERE thread_id = %s FOR UPDATE', ("t",))
            task = asyncio.create_task(
                saver.commit(make_checkpoint("t", 1, parent=first), expected_head=first.checkpoint_id, run_id="r")
            )
            waiting = "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'"
            rows = await await_for(lambda: _sql(PG_DSN, waiting, (app,)), 20, what="the commit to wait on the lock")
            _sql(PG_DSN, "SELECT pg_terminate_backend(%s)", (rows[0][0],))
            with pytest.raises(SaverError) as info:
                await task
            locker.rollback()
        _assert_one_line(str(info.value), "commit of checkpoint")
        assert "thread 't'" in str(info.value)
        thread = await saver.get_thread("t")  # the next call reconnects
        assert thread is not None and thread.head_checkpoint_id == first.checkpoint_id


async def test_a_killed_backend_mid_call_is_one_line_not_libpq_text() -> None:
    """SIGKILL leaves libpq with ``server closed the connection unexpectedly`` and two indented lines."""
    with private_cluster() as cluster:
        app = "a24-killed"
        dsn = f"{cluster.dsn}?application_name={app}"
        async with PostgresSaver(dsn) as saver:
            first = make_checkpoint("t", 0)
            await saver.commit(first, expected_head=None, run_id="r")
            locker = psycopg.connect(cluster.dsn)  # the crash ends it too: closed below, without a commit
            try:
                locker.execute("SELECT 1 FROM threads WHERE thread_id = %s FOR UPDATE", ("t",))
                task = asyncio.create_task(
                    saver.commit(make_checkpoint("t", 1, parent=first), expected_head=first.checkpoint_id, run_id="r")
                )
                waiting = "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'"
                rows = await await_for(
                    lambda: _sql(cluster.dsn, waiting, (app,)), 20, what="the commit to wait on the lock"
                )
                os.kill(int(rows[0][0]), signal.SIGKILL)
                with pytest.raises(SaverError) as info:
                    await task
            finally:
                locker.close()
            message = str(info.value)
            assert isinstance(info.value.__cause__, psycopg.OperationalError)
            assert "\n" in str(info.value.__cause__)  # what libpq said: several lines
            _assert_one_line(message, "commit of checkpoint")
            assert "server closed the connection unexpectedly" in message or "connection" in message, message

            async def back() -> bool:
                try:
                    return await saver.get_thread("t") is not None
                except SaverError:  # the cluster is still recovering from the crash
                    return False

            assert await await_for(back, 60, what="the saver to reconnect after crash recovery")
