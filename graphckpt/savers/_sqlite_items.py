"""SqliteSaver's item store (see :mod:`graphckpt.savers.items`): the ``store_items`` table, one statement per call."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from graphckpt.savers.items import ItemRow, ItemTable, namespace_range

_T = TypeVar("_T")

SQLITE_ITEMS_MIGRATION: Final = (
    """CREATE TABLE store_items (
        namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, created_at REAL NOT NULL,
        updated_at REAL NOT NULL, ttl_minutes REAL, expires_at REAL, vector BLOB, PRIMARY KEY (namespace, key))""",
    "CREATE INDEX store_items_by_update ON store_items (updated_at)",
    "CREATE INDEX store_items_expiry ON store_items (expires_at) WHERE expires_at IS NOT NULL",
)
"""The table and its indexes (a migration of :data:`graphckpt.savers._sqlite_schema.MIGRATIONS`)."""

_COLS = "namespace, key, value, created_at, updated_at, ttl_minutes, expires_at, vector"
_LIVE = "(expires_at IS NULL OR expires_at > ?)"
_PUT = (
    f"INSERT INTO store_items ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, key) DO UPDATE SET "
    "value = excluded.value, updated_at = excluded.updated_at, ttl_minutes = excluded.ttl_minutes, "
    "expires_at = excluded.expires_at, vector = excluded.vector"
)
_GET = f"SELECT {_COLS} FROM store_items WHERE namespace = ? AND key = ? AND {_LIVE}"
_REFRESH = (
    "UPDATE store_items SET expires_at = ? + ttl_minutes * 60.0 "
    f"WHERE namespace = ? AND key = ? AND ttl_minutes IS NOT NULL AND {_LIVE}"
)
_SCAN = (
    f"SELECT {_COLS} FROM store_items WHERE (? = '' OR namespace = ? OR (namespace > ? AND namespace < ?)) "
    f"AND {_LIVE} ORDER BY updated_at DESC, namespace, key LIMIT ? OFFSET ?"
)


def _row(r: Sequence[Any]) -> ItemRow:
    return ItemRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7])


class SqliteItems(ItemTable):
    """Mixed into :class:`~graphckpt.savers.sqlite.SqliteSaver`."""

    if TYPE_CHECKING:  # what the mixin needs of the saver

        async def _write(self, body: Callable[[sqlite3.Connection], _T]) -> _T: ...
        async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any]: ...

    async def item_put(self, row: ItemRow) -> None:
        params: tuple[Any, ...] = (row.namespace, row.key, row.value, row.created_at, row.updated_at)
        params += (row.ttl_minutes, row.expires_at, row.vector)
        await self._write(lambda conn: conn.execute(_PUT, params))

    async def item_get(self, namespace: str, key: str, *, now: float, refresh: bool) -> ItemRow | None:
        if refresh:

            def body(conn: sqlite3.Connection) -> list[Any]:
                conn.execute(_REFRESH, (now, namespace, key, now))
                return conn.execute(_GET, (namespace, key, now)).fetchall()

            rows = await self._write(body)
        else:
            rows = await self._fetch(_GET, (namespace, key, now))
        return _row(rows[0]) if rows else None

    async def item_delete(self, namespace: str, key: str) -> bool:
        sql = "DELETE FROM store_items WHERE namespace = ? AND key = ?"
        return bool(await self._write(lambda conn: conn.execute(sql, (namespace, key)).rowcount))

    async def item_scan(self, prefix: str, *, now: float, limit: int | None, offset: int) -> list[ItemRow]:
        exact, low, high = namespace_range(prefix)
        params = (prefix, exact, low, high, now, -1 if limit is None else limit, offset)
        return [_row(r) for r in await self._fetch(_SCAN, params)]

    async def item_refresh(self, keys: Sequence[tuple[str, str]], *, now: float) -> None:
        if keys:
            params = [(now, ns, key, now) for ns, key in keys]
            await self._write(lambda conn: conn.executemany(_REFRESH, params))

    async def item_namespaces(self, *, now: float) -> list[str]:
        rows = await self._fetch(f"SELECT DISTINCT namespace FROM store_items WHERE {_LIVE}", (now,))
        return [r[0] for r in rows]

    async def item_sweep(self, *, now: float) -> int:
        sql = "DELETE FROM store_items WHERE expires_at IS NOT NULL AND expires_at <= ?"
        return int(await self._write(lambda conn: conn.execute(sql, (now,)).rowcount))
