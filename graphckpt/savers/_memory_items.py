"""MemorySaver's item store: the reference of :mod:`graphckpt.savers.items`' rules, in one dictionary."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from graphckpt.savers.items import ItemRow, ItemTable, expiry, under


class MemoryItems(ItemTable):
    """Mixed into :class:`~graphckpt.savers.memory.MemorySaver`."""

    @property
    def _items(self) -> dict[tuple[str, str], ItemRow]:
        items: dict[tuple[str, str], ItemRow] | None = self.__dict__.get("_item_rows")
        if items is None:
            items = self.__dict__["_item_rows"] = {}
        return items

    async def item_put(self, row: ItemRow) -> None:
        old = self._items.get((row.namespace, row.key))
        if old is not None:
            row = dataclasses.replace(row, created_at=old.created_at)
        self._items[(row.namespace, row.key)] = row

    def _live_item(self, namespace: str, key: str, now: float) -> ItemRow | None:
        row = self._items.get((namespace, key))
        return row if row is not None and (row.expires_at is None or row.expires_at > now) else None

    async def item_get(self, namespace: str, key: str, *, now: float, refresh: bool) -> ItemRow | None:
        row = self._live_item(namespace, key, now)
        if row is not None and refresh and row.ttl_minutes is not None:
            row = self._items[(namespace, key)] = dataclasses.replace(row, expires_at=expiry(now, row.ttl_minutes))
        return row

    async def item_delete(self, namespace: str, key: str) -> bool:
        return self._items.pop((namespace, key), None) is not None

    async def item_scan(self, prefix: str, *, now: float, limit: int | None, offset: int) -> list[ItemRow]:
        rows = [
            r
            for r in self._items.values()
            if under(r.namespace, prefix) and (r.expires_at is None or r.expires_at > now)
        ]
        rows.sort(key=lambda r: (-r.updated_at, r.namespace, r.key))
        return rows[offset:] if limit is None else rows[offset : offset + limit]

    async def item_refresh(self, keys: Sequence[tuple[str, str]], *, now: float) -> None:
        for namespace, key in keys:
            await self.item_get(namespace, key, now=now, refresh=True)

    async def item_namespaces(self, *, now: float) -> list[str]:
        return sorted({r.namespace for r in self._items.values() if r.expires_at is None or r.expires_at > now})

    async def item_sweep(self, *, now: float) -> int:
        dead = [k for k, r in self._items.items() if r.expires_at is not None and r.expires_at <= now]
        for k in dead:
            del self._items[k]
        return len(dead)
