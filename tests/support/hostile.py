"""Helpers of the hostile-input suites: the CLI as a bounded child process, full database dumps, the canary.

``run_cli`` starts ``python -m graphckpt.cli`` with ``RLIMIT_AS`` set in the child (a decoder that believes a length
header allocates until ``MemoryError`` instead of taking the machine) and a timeout. ``dump`` reads every row of every
table (SQLite: ``iterdump``; PostgreSQL: each table of the schema as text, sorted), so "the target is unchanged" is
an equality of two lists. The canary is a module in the child's working directory that writes a marker file when it
is imported: hostile data names it (as a graph, a model class, a pickled callable); the marker must never appear.
"""

from __future__ import annotations

import os
import resource
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MEMORY_LIMIT = 1 << 30
"""Address space of a CLI child (1 GiB): a few times what an import of these files needs."""
TIME_LIMIT = 60.0
"""Seconds before a CLI child is killed (the test then fails with TimeoutExpired)."""

CANARY_MODULE = "gc_canary"
CANARY_CODE = """
import pathlib
pathlib.Path(__file__).with_name("CANARY_RAN").write_text("imported")


def boom(*args, **kwargs):
    pathlib.Path(__file__).with_name("CANARY_RAN").write_text("called")


app = boom
"""


def plant_canary(cwd: Path) -> Path:
    """Write the canary module into ``cwd``; returns the marker path it would create."""
    (cwd / f"{CANARY_MODULE}.py").write_text(CANARY_CODE)
    return cwd / "CANARY_RAN"


@dataclass
class Run:
    code: int
    out: str
    err: str
    seconds: float


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_cli(cwd: Path, *args: str | bytes, db: str | None = None) -> Run:
    """``graphckpt [--db DB] ARGS`` in ``cwd`` (which is on ``sys.path``, as it is for a user), memory- and
    time-bounded. ``args`` may be bytes (argv that is not UTF-8)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHCKPT_")}
    env.update(COLUMNS="120", NO_COLOR="1")
    argv: list[str | bytes] = [sys.executable, "-m", "graphckpt.cli", *(["--db", db] if db else []), *args]
    started = time.monotonic()
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, timeout=TIME_LIMIT, preexec_fn=_limit_memory, check=False
    )
    seconds = time.monotonic() - started
    out = proc.stdout.decode("utf-8", "backslashreplace")
    err = proc.stderr.decode("utf-8", "backslashreplace")
    return Run(proc.returncode, out, err, seconds)


def one_line_error(result: Run, *needles: str, code: int | None = None) -> str:
    """The run failed with exactly one ``graphckpt: error:`` line on stderr (nothing else there), naming
    ``needles``, exit status non-zero (``code`` when given), no traceback anywhere."""
    assert "Traceback" not in result.err + result.out, result.err
    assert result.code != 0, (result.out, result.err)
    if code is not None:
        assert result.code == code, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphckpt: error: "), result.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# -- dumps -------------------------------------------------------------------------------------------------------------


def dump_sqlite(path: Path) -> list[str]:
    """Every statement that rebuilds the file: schema and every row."""
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())


def dump_postgres(dsn: str, schema: str) -> list[tuple[str, list[str]]]:
    """Every table of ``schema`` with all its rows as text, sorted."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (schema,)
            )
        ]
        out = []
        for table in tables:
            query = sql.SQL("SELECT t::text FROM {} AS t ORDER BY 1").format(sql.Identifier(schema, table))
            out.append((table, [row[0] for row in conn.execute(query)]))
        return out


@dataclass
class Target:
    """A database the hostile input is pointed at: its ``--db`` value and how to dump it whole."""

    name: str
    db: str
    path: Path | None = None
    dsn: str | None = None
    schema: str | None = None

    def dump(self) -> Any:
        if self.path is not None:
            return dump_sqlite(self.path)
        assert self.dsn is not None and self.schema is not None
        return dump_postgres(self.dsn, self.schema)
