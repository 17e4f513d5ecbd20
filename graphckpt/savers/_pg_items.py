"""PostgresSaver's item store (see :mod:`graphckpt.savers.items`): the ``store_items`` table, one statement per call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, LiteralString

from graphckpt.savers.items import ItemRow, ItemTable, namespace_range

PG_ITEMS_MIGRATION: Final[tuple[LiteralString, ...]] = (
    """CREATE TABLE {store_items} (
        namespace text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL, value text NOT NULL,
        created_at double precision NOT NULL, updated_at double precision NOT NULL, ttl_minutes double precision,
        expires_at double precision, vector bytea, PRIMARY KEY (namespace, key))""",
    "CREATE INDEX store_items_by_update ON {store_items} (updated_at)",
    "CREATE INDEX store_items_expiry ON {store_items} (expires_at) WHERE expires_at IS NOT NULL",
)
"""The table and its indexes (a migration of :data:`graphckpt.savers._pg_schema.MIGRATIONS`)."""

_COLS: LiteralString = "namespace, key, value, created_at, updated_at, ttl_minutes, expires_at, vector"
_LIVE: LiteralString = "(expires_at IS NULL OR expires_at > %(now)s)"
ITEM_SQL: dict[str, LiteralString] = {
    "item_put": "INSERT INTO {store_items} ("
    + _COLS
    + """) VALUES (%(ns)s, %(key)s, %(value)s, %(created)s, %(updated)s, %(ttl)s, %(expires)s, %(vector)s)
        ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at,
            ttl_minutes = excluded.ttl_minutes, expires_at = excluded.expires_at, vector = excluded.vector
        RETURNING 1""",
    "item_get": "SELECT " + _COLS + " FROM {store_items} WHERE namespace = %(ns)s AND key = %(key)s AND " + _LIVE,
    # the refreshed row, or the row as it is (no TTL): one statement either way
    "item_get_refresh": """WITH u AS (
            UPDATE {store_items} SET expires_at = %(now)s + ttl_minutes * 60.0
            WHERE namespace = %(ns)s AND key = %(key)s AND ttl_minutes IS NOT NULL AND """
    + _LIVE
    + " RETURNING "
    + _COLS
    + ") SELECT * FROM u UNION ALL SELECT "
    + _COLS
    + " FROM {store_items} WHERE namespace = %(ns)s AND key = %(key)s AND ttl_minutes IS NULL",
    "item_refresh": """UPDATE {store_items} SET expires_at = %(now)s + ttl_minutes * 60.0
        WHERE (namespace, key) IN (SELECT * FROM unnest(%(nss)s::text[], %(keys)s::text[]))
            AND ttl_minutes IS NOT NULL AND """
    + _LIVE
    + " RETURNING 1",
    "item_delete": "DELETE FROM {store_items} WHERE namespace = %(ns)s AND key = %(key)s RETURNING 1",
    "item_scan": "SELECT "
    + _COLS
    + """ FROM {store_items}
        WHERE (%(prefix)s = '' OR namespace = %(exact)s OR (namespace > %(low)s AND namespace < %(high)s)) AND """
    + _LIVE
    + " ORDER BY updated_at DESC, namespace, key LIMIT %(limit)s OFFSET %(offset)s",
    "item_namespaces": "SELECT DISTINCT namespace FROM {store_items} WHERE " + _LIVE,
    "item_sweep": "WITH d AS (DELETE FROM {store_items} WHERE expires_at IS NOT NULL AND expires_at <= %(now)s "
    "RETURNING 1) SELECT count(*) FROM d",
}
"""The item store's named statements (merged into :data:`graphckpt.savers._pg_sql.SQL`)."""


def _row(r: Sequence[Any]) -> ItemRow:
    vector = bytes(r[7]) if r[7] is not None else None
    return ItemRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], vector)


class PostgresItems(ItemTable):
    """Mixed into :class:`~graphckpt.savers.postgres.PostgresSaver`."""

    if TYPE_CHECKING:  # what the mixin needs of the saver

        async def _fetch(
            self, action: str, query: str, params: Sequence[Any] | Mapping[str, Any]
        ) -> list[tuple[Any, ...]]: ...

    async def item_put(self, row: ItemRow) -> None:
        params = {
            "ns": row.namespace,
            "key": row.key,
            "value": row.value,
            "created": row.created_at,
            "updated": row.updated_at,
            "ttl": row.ttl_minutes,
            "expires": row.expires_at,
            "vector": row.vector,
        }
        await self._fetch(f"put of store item {row.key!r}", "item_put", params)

    async def item_get(self, namespace: str, key: str, *, now: float, refresh: bool) -> ItemRow | None:
        params = {"ns": namespace, "key": key, "now": now}
        rows = await self._fetch(f"get of store item {key!r}", "item_get_refresh" if refresh else "item_get", params)
        return _row(rows[0]) if rows else None

    async def item_delete(self, namespace: str, key: str) -> bool:
        return bool(await self._fetch(f"delete of store item {key!r}", "item_delete", {"ns": namespace, "key": key}))

    async def item_scan(self, prefix: str, *, now: float, limit: int | None, offset: int) -> list[ItemRow]:
        exact, low, high = namespace_range(prefix)
        params = {"prefix": prefix, "exact": exact, "low": low, "high": high, "now": now, "limit": limit}
        params["offset"] = offset
        return [_row(r) for r in await self._fetch("search of the store", "item_scan", params)]

    async def item_refresh(self, keys: Sequence[tuple[str, str]], *, now: float) -> None:
        if keys:
            params = {"nss": [k[0] for k in keys], "keys": [k[1] for k in keys], "now": now}
            await self._fetch("refresh of store items", "item_refresh", params)

    async def item_namespaces(self, *, now: float) -> list[str]:
        return [r[0] for r in await self._fetch("list of store namespaces", "item_namespaces", {"now": now})]

    async def item_sweep(self, *, now: float) -> int:
        [(n,)] = await self._fetch("sweep of expired store items", "item_sweep", {"now": now})
        return int(n)
