"""Fill a store fast with threads whose rows are exactly the rows the engine writes.

``bench/scale.py`` needs 100,000 threads x 10 checkpoints on PostgreSQL; written by ``App.ainvoke`` that took
842 s per 10,000 threads on this shared machine (so about 2.5 hours for 100k). Here the engine writes ``TEMPLATES``
threads (``th000000`` .. ``th000009``, one per metadata team), and every other thread ``i`` is a copy of template
``i % 10``: each row of every table that has a ``thread_id`` column (``threads``, ``checkpoints``, ``blobs``,
``events``, ``writes``, ...) is written again with

- the thread id replaced by ``th{i:06d}`` (same length, so the msgpack bodies that carry it stay valid),
- each checkpoint id and run id of the template replaced by a new id from :func:`graphckpt.ids.new_id`, made in the
  template's order (so checkpoint ids still sort by step),
- every time column (``*_at``, ``lease_until``) moved so that thread ``i`` was created ``SPACING`` (5 ms) after
  thread ``i - 1``, all before the templates: the threads' creation order is ``i`` order (and the metadata teams
  interleave in it as they would in service);
- the ``id`` column (the event log's identity / rowid) left to the store.

Replacement is textual and exact: it applies to strings, JSON text and bytes alike, wherever the old id appears.
PostgreSQL: ``COPY ... FROM STDIN`` in one transaction with ``session_replication_role = replica`` (the copied
event rows already are what the triggers would add), then ``VACUUM ANALYZE``. SQLite: ``executemany`` in one
transaction, with its triggers dropped and re-created around it.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from graphckpt import ids

TEMPLATES = 10
SPACING = 0.005  # seconds between the creation of two copied threads

Field = tuple[str, Any]  # ("c", value) | ("t", float) | ("s", parts) | ("b", parts)


def thread_name(i: int) -> str:
    return f"th{i:06d}"


def _is_time(column: str) -> bool:
    return column.endswith("_at") or column == "lease_until"


@dataclass
class Table:
    name: str
    columns: list[str]
    rows: list[list[Field]]


@dataclass
class Template:
    """One engine-written thread: its old ids (index 0 the thread id) and its rows per table."""

    olds: list[str]
    tables: list[Table]

    @property
    def created(self) -> float:
        """When the template thread was created (its ``threads`` row's ``created_at``)."""
        table = next(t for t in self.tables if t.name == "threads")
        _, value = table.rows[0][table.columns.index("created_at")]
        return float(value)

    def rows(self, names: Sequence[str], offset: float, table: Table) -> Iterator[tuple[Any, ...]]:
        byte_names = [n.encode() for n in names]
        for fields in table.rows:
            out: list[Any] = []
            for kind, value in fields:
                if kind == "c":
                    out.append(value)
                elif kind == "t":
                    out.append(value + offset)
                elif kind == "s":
                    out.append("".join(p if isinstance(p, str) else names[p] for p in value))
                else:
                    out.append(b"".join(p if isinstance(p, bytes) else byte_names[p] for p in value))
            yield tuple(out)


def _split(value: Any, olds: list[str], text: re.Pattern[str], raw: re.Pattern[bytes]) -> Field:
    if isinstance(value, str) and text.search(value):
        parts = text.split(value)  # literal, id, literal, id, ... (the pattern has one group)
        return "s", [olds.index(p) if k % 2 else p for k, p in enumerate(parts)]
    if isinstance(value, (bytes, memoryview)) and raw.search(bytes(value)):
        parts_b = raw.split(bytes(value))
        return "b", [olds.index(p.decode()) if k % 2 else p for k, p in enumerate(parts_b)]
    if isinstance(value, memoryview):
        return "c", bytes(value)
    return "c", value


def _template(olds: list[str], tables: list[tuple[str, list[str], list[tuple[Any, ...]]]]) -> Template:
    text = re.compile("(" + "|".join(re.escape(o) for o in olds) + ")")
    raw = re.compile(b"(" + b"|".join(re.escape(o.encode()) for o in olds) + b")")
    out = []
    for name, columns, rows in tables:
        fields = [
            [
                ("t", v) if _is_time(c) and isinstance(v, float) else _split(v, olds, text, raw)
                for c, v in zip(columns, row, strict=True)
            ]
            for row in rows
        ]
        out.append(Table(name, columns, fields))
    return Template(olds, out)


def _new_names(template: Template, i: int) -> list[str]:
    return [thread_name(i), *(ids.new_id() for _ in template.olds[1:])]


def _same_tables(templates: list[Template]) -> None:
    shapes = {tuple((t.name, tuple(t.columns)) for t in tpl.tables) for tpl in templates}
    if len(shapes) != 1:
        raise RuntimeError(f"the template threads have rows in different tables: {shapes}")


def _offsets(templates: list[Template], n: int) -> dict[int, float]:
    """How far each copy's times move from its template's: thread ``i`` created ``(n - i) * SPACING`` before the
    first template."""
    first = min(t.created for t in templates)
    return {i: first - (n - i) * SPACING - templates[i % TEMPLATES].created for i in range(TEMPLATES, n)}


# -- PostgreSQL --------------------------------------------------------------------------------------------------------


def _pg_template(conn: psycopg.Connection[Any], schema: str, thread_id: str) -> Template:
    found = conn.execute(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = %s AND column_name = 'thread_id' "
        "ORDER BY table_name",
        (schema,),
    ).fetchall()
    head = conn.execute(
        sql.SQL("SELECT run_id FROM {}.threads WHERE thread_id = %s").format(sql.Identifier(schema)), (thread_id,)
    ).fetchone()
    cps = conn.execute(
        sql.SQL("SELECT checkpoint_id FROM {}.checkpoints WHERE thread_id = %s").format(sql.Identifier(schema)),
        (thread_id,),
    ).fetchall()
    olds = [thread_id, *sorted({r[0] for r in cps} | ({head[0]} if head and head[0] else set()))]
    raw: list[tuple[str, list[str], list[tuple[Any, ...]]]] = []
    for (table,) in found:
        cols = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s AND "
            "table_name = %s AND column_name <> 'id' ORDER BY ordinal_position",
            (schema, table),
        ).fetchall()
        select = sql.SQL(", ").join(
            sql.SQL("{}::text").format(sql.Identifier(c)) if t in ("json", "jsonb") else sql.Identifier(c)
            for c, t in cols
        )
        order = sql.SQL(" ORDER BY id") if table == "events" else sql.SQL("")
        rows = conn.execute(
            sql.SQL("SELECT {} FROM {}.{} WHERE thread_id = %s").format(
                select, sql.Identifier(schema), sql.Identifier(table)
            )
            + order,
            (thread_id,),
        ).fetchall()
        if rows:
            raw.append((table, [c for c, _ in cols], rows))
    return _template(olds, raw)


def fill_postgres(dsn: str, schema: str, n: int, progress: Callable[[str], None] = print) -> float:
    """Threads ``TEMPLATES`` .. ``n - 1`` copied from the engine-written templates; seconds taken."""
    t0 = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        templates = [_pg_template(conn, schema, thread_name(j)) for j in range(TEMPLATES)]
        _same_tables(templates)
        names = {i: _new_names(templates[i % TEMPLATES], i) for i in range(TEMPLATES, n)}
        offsets = _offsets(templates, n)
        conn.execute("SET session_replication_role = replica")
        for k, table in enumerate(templates[0].tables):
            target = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
                sql.Identifier(schema),
                sql.Identifier(table.name),
                sql.SQL(", ").join(sql.Identifier(c) for c in table.columns),
            )
            with conn.cursor() as cur, cur.copy(target) as copy:
                for i in range(TEMPLATES, n):
                    tpl = templates[i % TEMPLATES]
                    for row in tpl.rows(names[i], offsets[i], tpl.tables[k]):
                        copy.write_row(row)
            progress(f"  {table.name}: {n - TEMPLATES:,} threads copied ({time.perf_counter() - t0:.0f} s)")
        conn.commit()
    vacuum_analyze(dsn, schema)
    return time.perf_counter() - t0


def vacuum_analyze(dsn: str, schema: str, *, vacuum: bool = True) -> None:
    """``VACUUM ANALYZE`` (or ``ANALYZE``) each table of ``schema``, by name: a bare ``VACUUM`` would walk every
    table of the database, other schemas' included."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", (schema,)
        ).fetchall()
        verb = sql.SQL("VACUUM ANALYZE" if vacuum else "ANALYZE")
        for (table,) in tables:
            conn.execute(sql.SQL("{} {}.{}").format(verb, sql.Identifier(schema), sql.Identifier(table)))


# -- SQLite ------------------------------------------------------------------------------------------------------------


def _sqlite_template(conn: sqlite3.Connection, thread_id: str) -> Template:
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    head = conn.execute("SELECT run_id FROM threads WHERE thread_id = ?", (thread_id,)).fetchone()
    cps = conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?", (thread_id,)).fetchall()
    olds = [thread_id, *sorted({r[0] for r in cps} | ({head[0]} if head and head[0] else set()))]
    raw: list[tuple[str, list[str], list[tuple[Any, ...]]]] = []
    for table in tables:
        cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
        if "thread_id" not in cols:
            continue
        cols = [c for c in cols if c != "id"]
        order = " ORDER BY id" if table == "events" else ""
        listed = ", ".join(f'"{c}"' for c in cols)
        rows = conn.execute(f'SELECT {listed} FROM "{table}" WHERE thread_id = ?{order}', (thread_id,)).fetchall()
        if rows:
            raw.append((table, cols, rows))
    return _template(olds, raw)


def fill_sqlite(path: str, n: int, progress: Callable[[str], None] = print) -> float:
    """As :func:`fill_postgres`, for a SQLite file (no other connection may be open on it)."""
    t0 = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        templates = [_sqlite_template(conn, thread_name(j)) for j in range(TEMPLATES)]
        _same_tables(templates)
        names = {i: _new_names(templates[i % TEMPLATES], i) for i in range(TEMPLATES, n)}
        offsets = _offsets(templates, n)
        triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
        conn.execute("BEGIN IMMEDIATE")
        for name, _ in triggers:
            conn.execute(f'DROP TRIGGER "{name}"')
        for k, table in enumerate(templates[0].tables):
            listed = ", ".join(f'"{c}"' for c in table.columns)
            marks = ", ".join("?" for _ in table.columns)

            def rows(k: int = k) -> Iterator[tuple[Any, ...]]:
                for i in range(TEMPLATES, n):
                    tpl = templates[i % TEMPLATES]
                    yield from tpl.rows(names[i], offsets[i], tpl.tables[k])

            conn.executemany(f'INSERT INTO "{table.name}" ({listed}) VALUES ({marks})', rows())
            progress(f"  {table.name}: {n - TEMPLATES:,} threads copied ({time.perf_counter() - t0:.0f} s)")
        for _, text in triggers:
            conn.execute(text)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return time.perf_counter() - t0
