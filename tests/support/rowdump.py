"""Every row of a store as text, for erasure checks: SQLite tables and files read raw, PostgreSQL tables of a schema
rendered as ``row::text`` (bytea columns appear as hex, so markers are looked for in both forms)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["contains", "pg_rows", "sqlite_file_bytes", "sqlite_rows"]


def sqlite_rows(path: Path) -> list[str]:
    """Each row of each table of the SQLite file (read with a fresh connection), as text, prefixed by its table."""
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out = []
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                cells = [c.decode("latin-1") if isinstance(c, bytes) else str(c) for c in row]
                out.append(f"{table}: {' | '.join(cells)}")
        return out
    finally:
        conn.close()


def sqlite_file_bytes(path: Path) -> dict[str, bytes]:
    """The raw bytes of the database file and of its -wal, -shm and -journal files (those that exist)."""
    found = {}
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(f"{path}{suffix}")
        if p.exists():
            found[p.name] = p.read_bytes()
    return found


async def pg_rows(dsn: str, schema: str) -> list[str]:
    """Each row of each table of ``schema``, as ``table: row::text``."""
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_type = 'BASE TABLE'",
            (schema,),
        )
        tables = [r[0] for r in await cur.fetchall()]
        out = []
        for table in tables:
            query = sql.SQL("SELECT t::text FROM {} t").format(sql.Identifier(schema, table))
            rows = await (await conn.execute(query)).fetchall()
            out += [f"{table}: {r[0]}" for r in rows]
        return out


def contains(rows: list[str], needle: str) -> list[str]:
    """The rows naming ``needle`` as text or as bytea hex."""
    hexed = needle.encode().hex()
    return [r for r in rows if needle in r or hexed in r]
