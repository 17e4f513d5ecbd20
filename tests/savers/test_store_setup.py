"""Opening a store: graphckpt never writes into another
application's SQLite file, ``setup(create=False)`` opens only a store that exists and creates nothing, and a store
set up by a newer graphckpt is refused on PostgreSQL as on SQLite."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel
from support import REPO
from support.postgres import PG_DSN

from graphckpt import END, START, SaverError, StateGraph
from graphckpt.errors import StoreNotSetUpError
from graphckpt.savers.memory import MemorySaver
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.testing import make_checkpoint

ROOT = REPO


class Count(BaseModel):
    n: int = 0


def count_app(saver: Any) -> Any:
    g = StateGraph(Count)
    g.add_node("inc", lambda s: {"n": s.n + 1})
    g.add_edge(START, "inc")
    g.add_edge("inc", END)
    return g.compile(saver=saver)


def files(directory: Path) -> dict[str, str]:
    """Every file in ``directory`` with the hash of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


# -- SQLite: another application's file ---------------------------------------------------------------------------


@pytest.fixture
def app_db(tmp_path: Path) -> Path:
    """Another application's database: its own table, its own ``user_version`` 7, rollback journal."""
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
        conn.execute("PRAGMA user_version = 7")
    conn.close()
    return path


@pytest.mark.parametrize("create", [True, False])
async def test_sqlite_refuses_another_applications_file_before_touching_it(app_db: Path, create: bool) -> None:
    before = files(app_db.parent)
    saver = SqliteSaver(app_db)
    with pytest.raises(StoreNotSetUpError, match="is not a graphckpt database: it has tables of its own") as info:
        await saver.setup(create=create)
    assert "newer" not in str(info.value) and "'users'" in str(info.value)
    await saver.aclose()
    assert files(app_db.parent) == before  # no -wal, no table, same user_version and journal mode
    with sqlite3.connect(app_db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (7,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["users"]
    conn.close()


async def test_a_run_on_another_applications_file_is_refused_and_writes_nothing(app_db: Path) -> None:
    before = files(app_db.parent)
    app = count_app(SqliteSaver(app_db))
    try:
        with pytest.raises(StoreNotSetUpError, match="not a graphckpt database"):
            await app.ainvoke({}, thread_id="t")
    finally:
        await app.aclose()
    assert files(app_db.parent) == before


# -- setup(create=False) ------------------------------------------------------------------------------------------


async def test_sqlite_setup_without_create_creates_no_file(tmp_path: Path) -> None:
    saver = SqliteSaver(tmp_path / "missing.db")
    with pytest.raises(StoreNotSetUpError, match="does not exist"):
        await saver.setup(create=False)
    await saver.aclose()
    assert os.listdir(tmp_path) == []


async def test_sqlite_setup_without_create_leaves_an_empty_file_empty(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()
    saver = SqliteSaver(tmp_path / "empty.db")
    with pytest.raises(StoreNotSetUpError, match="has no graphckpt tables"):
        await saver.setup(create=False)
    await saver.aclose()
    assert files(tmp_path) == {"empty.db": hashlib.sha256(b"").hexdigest()}


async def test_sqlite_memory_database_without_create_is_not_set_up() -> None:
    saver = SqliteSaver(":memory:")
    with pytest.raises(StoreNotSetUpError):
        await saver.setup(create=False)
    await saver.aclose()


async def test_sqlite_setup_without_create_opens_an_existing_store(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SqliteSaver(path) as saver:
        await saver.commit(make_checkpoint("t", 0), expected_head=None, run_id="r")
    saver = SqliteSaver(path)
    await saver.setup(create=False)
    try:
        assert (await saver.get_thread("t")) is not None
    finally:
        await saver.aclose()


async def test_memory_setup_without_create_opens() -> None:
    saver = MemorySaver()
    await saver.setup(create=False)
    await saver.aclose()


# -- PostgreSQL ---------------------------------------------------------------------------------------------------


@pytest.fixture
def schema(pg_schema_name: str) -> str:
    """A fresh PostgreSQL schema name, dropped after the test (conftest's ``pg_schema_name``)."""
    return pg_schema_name


def schema_exists(name: str) -> bool:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone() is not None


async def test_postgres_setup_without_create_creates_no_schema(schema: str) -> None:
    saver = PostgresSaver(PG_DSN, schema=schema)
    with pytest.raises(StoreNotSetUpError, match=f"schema '{schema}' has no graphckpt tables"):
        await saver.setup(create=False)
    await saver.aclose()
    assert not schema_exists(schema)


async def test_postgres_setup_without_create_opens_an_existing_store(schema: str) -> None:
    async with PostgresSaver(PG_DSN, schema=schema) as saver:
        await saver.commit(make_checkpoint("t", 0), expected_head=None, run_id="r")
    saver = PostgresSaver(PG_DSN, schema=schema)
    await saver.setup(create=False)
    try:
        assert (await saver.get_thread("t")) is not None
    finally:
        await saver.aclose()


@pytest.mark.parametrize("create", [True, False])
async def test_postgres_refuses_a_schema_set_up_by_a_newer_graphckpt(schema: str, create: bool) -> None:
    async with PostgresSaver(PG_DSN, schema=schema):
        pass
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} VALUES (99, now())").format(sql.Identifier(schema, "graphckpt_migrations"))
        )
    app = count_app(PostgresSaver(PG_DSN, schema=schema))
    try:
        with pytest.raises(SaverError, match="has schema version 99, newer than this graphckpt understands"):
            await app.ainvoke({}, thread_id="t")
        saver = PostgresSaver(PG_DSN, schema=schema)
        with pytest.raises(SaverError, match="newer"):
            await saver.setup(create=create)
        await saver.aclose()
    finally:
        await app.aclose()
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        threads = sql.Identifier(schema, "threads")
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(threads)).fetchone() == (0,)


# -- a directory the process may not write ------------------------------------------------------------------------

READ_ONLY_CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    from graphckpt.savers.sqlite import SqliteSaver

    os.setgid(65534)
    os.setuid(65534)  # nobody: the directory is root's and read-only for others

    async def main(path):
        saver = SqliteSaver(path)
        try:
            await saver.setup()
        except Exception as exc:
            print(type(exc).__name__, exc)
        finally:
            await saver.aclose()

    for path in sys.argv[1:]:
        asyncio.run(main(path))
    """
)


async def _create_store(path: Path) -> None:
    async with SqliteSaver(path) as saver:
        await saver.commit(make_checkpoint("t", 0), expected_head=None, run_id="r")


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory that the user nobody can reach (pytest's own are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="graphckpt-ro-"))
    path.chmod(0o755)
    yield path
    for sub in path.rglob("*"):
        sub.chmod(0o755)
    shutil.rmtree(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to the user nobody, which needs root")
def test_a_read_only_directory_is_named_in_the_error(shared_tmp: Path) -> None:
    locked = shared_tmp / "locked"
    locked.mkdir()
    asyncio.run(_create_store(locked / "old.db"))
    (locked / "old.db").chmod(0o666)  # the file may be written; its directory may not
    locked.chmod(0o555)
    out = subprocess.run(
        [sys.executable, "-c", READ_ONLY_CHILD, str(locked / "new.db"), str(locked / "old.db")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    # the new file cannot be made; the existing one opens read-only (reads work, writes are refused: see
    # tests/security/test_read_only_sqlite.py), so its setup prints nothing
    [new] = out.stdout.splitlines()
    assert new.startswith("SaverError") and "is not writable, so the file cannot be created there" in new, new
