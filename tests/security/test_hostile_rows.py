"""Hostile stored rows: a column edited to a value of the wrong type or out of range, in SQLite and PostgreSQL.
Every read (state, history, threads) fails with :class:`CorruptCheckpointError` naming the thread and the column,
never a ``TypeError``, ``ValueError`` or ``OverflowError``, and changes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.postgres import PG_DSN
from test_hostile_storage import doc_app, pg, pg_dump, sqlite_dump

from graphckpt import CorruptCheckpointError
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver

NEGATIVE_STEP = "UPDATE checkpoints SET step = -7 WHERE step = 1"
# (column named in the error, SQLite statement, PostgreSQL statement or None where its types forbid the value)
ROWS: dict[str, tuple[str, str, str | None]] = {
    "step text": ("step", "UPDATE checkpoints SET step = 'x' WHERE step = 1", None),
    "step past 64 bits": ("step", "UPDATE checkpoints SET step = 1e300 WHERE step = 1", None),
    "step negative": (
        "step",
        "UPDATE checkpoints SET step = -7 WHERE step = 1",
        "UPDATE checkpoints SET step = -7 WHERE step = 1",
    ),
    "parent id bytes": (
        "parent_checkpoint_id",
        "UPDATE checkpoints SET parent_checkpoint_id = x'00ff' WHERE step = 1",
        None,
    ),
    "thread status unknown": ("status", "UPDATE threads SET status = 'bogus'", None),  # PG: a CHECK refuses it
    "head step text": ("head_step", "UPDATE threads SET head_step = 'x'", None),
    "head step huge": ("head_step", "UPDATE threads SET head_step = 1e300", None),
    "head step negative": ("head_step", "UPDATE threads SET head_step = -9", "UPDATE threads SET head_step = -9"),
    "lease until text": ("lease_until", "UPDATE threads SET lease_until = 'x', lease_worker = 'w'", None),
    "lease until infinite": (
        "lease_until",
        "UPDATE threads SET lease_until = 9e999, lease_worker = 'w'",
        "UPDATE threads SET lease_until = 'Infinity', lease_worker = 'w'",
    ),
    "heartbeat nan": (
        "heartbeat_at",
        "UPDATE threads SET heartbeat_at = 'nan', lease_until = 1, lease_worker = 'w'",
        "UPDATE threads SET heartbeat_at = '-Infinity', lease_until = 1, lease_worker = 'w'",
    ),
    "lease pid text": ("lease_pid", "UPDATE threads SET lease_pid = 'x', lease_until = 1, lease_worker = 'w'", None),
    "lease worker number": ("lease_worker", "UPDATE threads SET lease_worker = x'01', lease_until = 1", None),
}


@pytest.fixture
def schema(pg_schema_name: str) -> str:
    return pg_schema_name


CASES = [("sqlite", case) for case in sorted(ROWS)] + [("postgres", c) for c in sorted(ROWS) if ROWS[c][2] is not None]
"""PostgreSQL's column types (bigint, double precision, a CHECK on status) refuse the other values."""


@pytest.mark.parametrize(("kind", "case"), CASES)
async def test_a_corrupt_column_is_a_corrupt_checkpoint_error_naming_it(
    tmp_path: Path, schema: str, kind: str, case: str
) -> None:
    column, lite, post = ROWS[case]
    path = tmp_path / "x.db"
    saver: Any = SqliteSaver(path) if kind == "sqlite" else PostgresSaver(PG_DSN, schema=schema)
    app = doc_app(saver)
    try:
        await app.ainvoke({}, thread_id="t")
    finally:
        await app.aclose()
    if kind == "sqlite":
        with sqlite3.connect(path) as conn:
            conn.execute(lite)
    else:
        assert post is not None
        pg(schema, post)
    before = sqlite_dump(path) if kind == "sqlite" else pg_dump(schema)
    app = doc_app(SqliteSaver(path) if kind == "sqlite" else PostgresSaver(PG_DSN, schema=schema))
    reads = [("state", lambda: app.aget_state("t")), ("history", lambda: app.ahistory("t"))]
    if not case.startswith(("step", "parent")):
        reads.append(("threads", lambda: app.athreads()))
    try:
        for what, read in reads:
            with pytest.raises(CorruptCheckpointError, match=rf"thread 't'.*column {column} is corrupt") as info:
                await read()
            assert info.value.thread_id == "t", what
    finally:
        await app.aclose()
    after = sqlite_dump(path) if kind == "sqlite" else pg_dump(schema)
    assert repr(after) == repr(before)  # by text: a stored NaN is not equal to itself
