"""Shared fixtures: the saver matrix every engine behaviour test runs against, and PostgreSQL reachability.

``saver`` is parametrized over memory, SQLite (a real file) and PostgreSQL (the real server on 127.0.0.1:5432, a
fresh schema per test). When PostgreSQL is unreachable its tests fail under CI (``CI`` set) and skip elsewhere.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

PG_DSN = os.environ.get("GRAPHCKPT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def postgres_reachable(host: str = "127.0.0.1", port: int = 5432) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def require_postgres() -> None:
    """Fail under CI, skip elsewhere, when the PostgreSQL server is not reachable."""
    if postgres_reachable():
        return
    message = "PostgreSQL is not reachable on 127.0.0.1:5432"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI needs it (.ci/run starts it)")
    pytest.skip(f"{message} (start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start)")


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    """A fresh schema name, dropped after the test."""
    require_postgres()
    import psycopg

    schema = f"gc_test_{uuid.uuid4().hex[:12]}"
    try:
        yield schema
    finally:
        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_schema_name() -> Iterator[str]:
    """A fresh schema name for sync tests, dropped after the test."""
    require_postgres()
    import psycopg
    from psycopg import sql

    name = f"gc_test_{os.urandom(6).hex()}"
    yield name
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


SAVER_KINDS = ["memory", "sqlite", "postgres"]


async def open_saver(kind: str, tmp_path: Path, schema: str | None = None) -> Any:
    if kind == "memory":
        from graphckpt.savers.memory import MemorySaver

        return MemorySaver()
    if kind == "sqlite":
        from graphckpt.savers.sqlite import SqliteSaver

        return SqliteSaver(tmp_path / "checkpoints.db")
    from graphckpt.savers.postgres import PostgresSaver

    return PostgresSaver(PG_DSN, schema=schema)


@pytest.fixture(params=SAVER_KINDS, ids=SAVER_KINDS)
async def saver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Every saver, opened on a fresh store; closed after the test."""
    kind: str = request.param
    schema = None
    if kind == "postgres":
        require_postgres()
        schema = f"gc_test_{uuid.uuid4().hex[:12]}"
    s = await open_saver(kind, tmp_path, schema)
    try:
        async with s:
            yield s
    finally:
        if schema is not None:
            import psycopg

            async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=SAVER_KINDS, ids=SAVER_KINDS)
def unopened_saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Every saver, on a fresh store, created but not opened: for tests of the sync API, whose first call opens it
    on the app's own loop (and whose ``close()`` closes it)."""
    import asyncio

    kind: str = request.param
    schema = None
    if kind == "postgres":
        require_postgres()
        schema = f"gc_test_{uuid.uuid4().hex[:12]}"
    s = asyncio.run(open_saver(kind, tmp_path, schema))  # only constructs it: savers open on first use
    try:
        yield s
    finally:
        if schema is not None:
            import psycopg

            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """``serve(targets, **kwargs)`` starts a real ``graphckpt serve`` subprocess on a free loopback port (see
    :class:`serving.Served`); every server a test started is killed after it."""
    from serving import Served

    started: list[Served] = []

    def start(targets: list[str], **kwargs: Any) -> Served:
        server = Served(tmp_path, targets, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()
