"""Shared fixtures: the saver matrix every engine behaviour test runs against, and PostgreSQL reachability.

Helpers live in ``tests/support`` (``from support.serving import Served``; see its ``__init__``).
``saver`` is parametrized over memory, SQLite (a real file) and PostgreSQL (the real server on 127.0.0.1:5432, a
fresh schema per test). When PostgreSQL is unreachable its tests fail under CI (``CI`` set) and skip elsewhere.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.postgres import PG_DSN, require_postgres
from support.savers import SAVER_KINDS, open_saver


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
    :class:`support.serving.Served`); every server a test started is killed after it."""
    from support.serving import Served

    started: list[Served] = []

    def start(targets: list[str], **kwargs: Any) -> Served:
        server = Served(tmp_path, targets, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()
