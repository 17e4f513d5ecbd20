"""``ItemStore``: the long-term memory of an application: namespaced items shared across threads (LangGraph's
``BaseStore`` semantics), kept by the saver beside the checkpoints (see :mod:`graphckpt.savers.items`).

Nodes reach it through ``ctx.store`` (:mod:`graphckpt.node_store`), inside the effect journal; applications and the
server use it directly::

    store = ItemStore(SqliteSaver("app.db"))
    await store.aput(("users", "u1"), "prefs", {"tone": "short"}, ttl=60 * 24)
    item = await store.aget(("users", "u1"), "prefs")            # Item(namespace, key, value, created_at, ...)
    hits = await store.asearch(("users",), filter={"tone": "short"}, limit=10)
    await store.alist_namespaces(prefix=("users",), max_depth=2)

Semantics (as LangGraph's stores): a namespace is a non-empty tuple of labels without periods; ``put`` inserts or
replaces (``value=None`` deletes); ``search`` takes a namespace prefix, an optional ``filter`` (field equality,
nested objects, ``$eq $ne $gt $gte $lt $lte``), ``limit`` (default 10) and ``offset``, and returns the newest
updated first; ``ttl`` is in minutes, restarted by reads unless ``refresh_ttl=False`` (expired items are invisible
at once and deleted by :meth:`ItemStore.asweep`, which workers run).

Semantic search (optional): pass ``embed``, a function (sync or async) from a list of texts to a list of vectors, and
the ``fields`` to index (``"$"``: the whole value as JSON; a dotted path: that field). ``put`` embeds the indexed
fields of the value as one text (the fields' texts joined by newlines) and stores one float32 vector per item;
``search(query=...)`` embeds the query and ranks every live item under the prefix that passes the filter by cosine
similarity. **Cost**: a scan: one read of all items under the prefix and one dot product per indexed item
(O(items x dimensions) in Python; about a millisecond per thousand 256-dimension vectors). Items not indexed come
after the ranked ones, with ``score=None``. pgvector is not used.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote

from graphckpt import ids
from graphckpt.errors import GraphckptError
from graphckpt.savers.items import (
    InvalidItemError,
    ItemRow,
    ItemTable,
    check_filter,
    decode_namespace,
    decode_vector,
    dump_value,
    encode_namespace,
    encode_vector,
    expiry,
    item_matches,
    select_namespaces,
)

__all__ = ["Embed", "InvalidItemError", "Item", "ItemStore", "ScopedItems", "tenant_of"]

Embed = Callable[[list[str]], Sequence[Sequence[float]] | Awaitable[Sequence[Sequence[float]]]]
"""A user's embedding function: texts in, one vector per text out (sync or async)."""

_UNSET: Any = object()
_ATTACHED: weakref.WeakKeyDictionary[Any, ItemStore] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class Item:
    """A stored item as a read returns it."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None
    score: float | None = None
    """The similarity to a search's ``query`` (``None`` without a query, or for an item that is not indexed)."""

    def to_dict(self) -> dict[str, Any]:
        """The item as JSON (LangGraph's wire form: times in ISO 8601, the namespace a list)."""
        out: dict[str, Any] = {
            "namespace": list(self.namespace),
            "key": self.key,
            "value": self.value,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }
        if self.expires_at is not None:
            out["expires_at"] = self.expires_at.isoformat()
        if self.score is not None:
            out["score"] = self.score
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Item:
        expires = data.get("expires_at")
        return cls(
            tuple(data["namespace"]),
            str(data["key"]),
            dict(data["value"]),
            datetime.fromisoformat(data["created_at"]),
            datetime.fromisoformat(data["updated_at"]),
            datetime.fromisoformat(expires) if expires else None,
            data.get("score"),
        )

    @classmethod
    def from_row(cls, row: ItemRow, score: float | None = None) -> Item:
        expires = datetime.fromtimestamp(row.expires_at, UTC) if row.expires_at is not None else None
        return cls(
            decode_namespace(row.namespace),
            row.key,
            json.loads(row.value),
            datetime.fromtimestamp(row.created_at, UTC),
            datetime.fromtimestamp(row.updated_at, UTC),
            expires,
            score,
        )


class ItemStore:
    """Items in ``saver`` (any graphckpt saver). ``embed`` and ``fields`` turn on semantic search (see the module
    docstring); ``default_ttl`` (minutes) applies to puts that give none; ``refresh_on_read`` is the default of
    ``refresh_ttl``."""

    def __init__(
        self,
        saver: Any,
        *,
        embed: Embed | None = None,
        fields: Sequence[str] = ("$",),
        default_ttl: float | None = None,
        refresh_on_read: bool = True,
    ) -> None:
        if not isinstance(saver, ItemTable):
            raise GraphckptError(f"{type(saver).__name__} has no item store (it does not implement ItemTable)")
        self.saver: ItemTable = saver
        self.embed = embed
        self.fields = tuple(fields)
        self.default_ttl = _check_ttl(default_ttl)
        self.refresh_on_read = refresh_on_read

    @classmethod
    def of(cls, saver: Any) -> ItemStore:
        """The store ``ctx.store`` uses for runs on ``saver``: the one :meth:`attach`-ed to it, else a plain one."""
        found = _ATTACHED.get(saver)
        if found is None:
            found = _ATTACHED[saver] = cls(saver)
        return found

    def attach(self) -> ItemStore:
        """Make this store (its ``embed``, ``fields``, TTL defaults) the one nodes running on its saver reach as
        ``ctx.store``; returns it."""
        _ATTACHED[self.saver] = self
        return self

    async def aput(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any] | None,
        index: Literal[False] | Sequence[str] | None = None,
        *,
        ttl: float | None = _UNSET,
    ) -> None:
        """Insert or replace the item (``value=None`` deletes it). ``index``: the fields to embed (``None``: the
        store's ``fields``; ``False``: none). ``ttl``: minutes until it expires (``None``: never; unset: the
        store's ``default_ttl``)."""
        ns = encode_namespace(namespace)
        _check_key(key)
        if value is None:
            await self.saver.item_delete(ns, key)
            return
        text = dump_value(value, key)
        minutes = self.default_ttl if ttl is _UNSET else _check_ttl(ttl)
        vector = None
        if self.embed is not None and index is not False:
            fields = self.fields if index is None else tuple(index)
            [vector] = await self._embed([_index_text(value, fields)])
        now = ids.now()
        row = ItemRow(ns, key, text, now, now, minutes, expiry(now, minutes), vector)
        await self.saver.item_put(row)

    async def aget(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        """The item, or ``None`` (missing or expired)."""
        ns = encode_namespace(namespace)
        _check_key(key)
        refresh = self.refresh_on_read if refresh_ttl is None else bool(refresh_ttl)
        row = await self.saver.item_get(ns, key, now=ids.now(), refresh=refresh)
        return Item.from_row(row) if row is not None else None

    async def adelete(self, namespace: Sequence[str], key: str) -> None:
        """Delete the item (nothing if there is none)."""
        ns = encode_namespace(namespace)
        _check_key(key)
        await self.saver.item_delete(ns, key)

    async def asearch(
        self,
        namespace_prefix: Sequence[str],
        /,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[Item]:
        """Items under ``namespace_prefix`` (``()``: all) passing ``filter``, newest updated first, or ranked by
        similarity to ``query`` (needs ``embed``), from ``offset``, at most ``limit``."""
        prefix = encode_namespace(namespace_prefix, what="namespace_prefix", empty=True)
        check_filter(filter)
        _check_page(limit, offset)
        if query is not None and self.embed is None:
            raise InvalidItemError("search with a query needs an ItemStore made with embed=")
        now = ids.now()
        if query is None and not filter:
            found: list[tuple[ItemRow, float | None]] = [
                (r, None) for r in await self.saver.item_scan(prefix, now=now, limit=limit, offset=offset)
            ]
        else:
            rows = await self.saver.item_scan(prefix, now=now, limit=None, offset=0)
            rows = [r for r in rows if item_matches(json.loads(r.value), filter)]
            ranked: list[tuple[ItemRow, float | None]] = [(r, None) for r in rows]
            if query is not None:
                [q] = await self._embed([query])
                ranked = _rank(decode_vector(q), rows)
            found = ranked[offset : offset + limit]
        refresh = self.refresh_on_read if refresh_ttl is None else bool(refresh_ttl)
        if refresh and any(r.ttl_minutes is not None for r, _ in found):
            await self.saver.item_refresh([(r.namespace, r.key) for r, _ in found], now=now)
        return [Item.from_row(r, score) for r, score in found]

    async def alist_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """The namespaces holding items, matching ``prefix`` / ``suffix`` (``"*"``: any one label), cut to
        ``max_depth`` labels and deduplicated, sorted, paged."""
        for what, labels in (("prefix", prefix), ("suffix", suffix)):
            if labels:
                encode_namespace([x for x in labels if x != "*"] or ["x"], what=what)
        _check_page(limit, offset)
        namespaces = await self.saver.item_namespaces(now=ids.now())
        return select_namespaces(
            namespaces, prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
        )

    async def asweep(self) -> int:
        """Delete the expired items; how many."""
        return await self.saver.item_sweep(now=ids.now())

    async def _embed(self, texts: list[str]) -> list[bytes]:
        assert self.embed is not None
        vectors = self.embed(texts)
        if inspect.isawaitable(vectors):
            vectors = await vectors
        out = [encode_vector(v) for v in vectors]
        if len(out) != len(texts):
            raise InvalidItemError(f"embed returned {len(out)} vectors for {len(texts)} texts")
        return out


def tenant_of(thread_id: str) -> str:
    """The server namespace (tenant) of a stored thread id: ``ns/ID`` -> ``ns``; ``""`` for an unscoped one."""
    tenant, sep, _ = thread_id.partition("/")
    return tenant if sep else ""


class ScopedItems:
    """One tenant's view of an :class:`ItemStore`: its namespaces are stored under a first label of its own
    (``@`` and the tenant, percent-quoted, so it holds no period), which it neither shows nor lets a caller name;
    two tenants never see each other's items. The tenant ``""`` sees the whole store, unscoped."""

    def __init__(self, items: ItemStore, tenant: str) -> None:
        self.items, self.tenant = items, tenant
        self._root: tuple[str, ...] = ("@" + quote(tenant, safe="").replace(".", "%2E"),) if tenant else ()

    def _in(self, namespace: Sequence[str], *, what: str = "namespace", empty: bool = False) -> tuple[str, ...]:
        encode_namespace(namespace, what=what, empty=empty)  # checked as the caller wrote it
        return (*self._root, *namespace)

    def _out(self, item: Item) -> Item:
        return dataclasses.replace(item, namespace=item.namespace[len(self._root) :]) if self._root else item

    async def aput(
        self, namespace: Sequence[str], key: str, value: Mapping[str, Any] | None, *args: Any, **kw: Any
    ) -> None:
        await self.items.aput(self._in(namespace), key, value, *args, **kw)

    async def aget(self, namespace: Sequence[str], key: str, **kw: Any) -> Item | None:
        found = await self.items.aget(self._in(namespace), key, **kw)
        return self._out(found) if found is not None else None

    async def adelete(self, namespace: Sequence[str], key: str) -> None:
        await self.items.adelete(self._in(namespace), key)

    async def asearch(self, namespace_prefix: Sequence[str], /, **kw: Any) -> list[Item]:
        prefix = self._in(namespace_prefix, what="namespace_prefix", empty=True)
        return [self._out(i) for i in await self.items.asearch(prefix, **kw)]

    async def alist_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        if not self._root:
            return await self.items.alist_namespaces(
                prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
            )
        if max_depth is not None and max_depth < 1:
            raise InvalidItemError(f"max_depth must be at least 1, not {max_depth}")
        depth = None if max_depth is None else max_depth + 1
        found = await self.items.alist_namespaces(
            prefix=(*self._root, *(prefix or ())), suffix=suffix, max_depth=depth, limit=limit, offset=offset
        )
        return [ns[1:] for ns in found]


def _rank(query: list[float], rows: list[ItemRow]) -> list[tuple[ItemRow, float | None]]:
    qn = math.sqrt(sum(x * x for x in query)) or 1.0
    scored: list[tuple[ItemRow, float | None]] = []
    unscored: list[tuple[ItemRow, float | None]] = []
    for row in rows:
        if row.vector is None:
            unscored.append((row, None))
            continue
        v = decode_vector(row.vector)
        if len(v) != len(query):
            raise InvalidItemError(
                f"item {row.key!r} has a {len(v)}-dimension vector, the query {len(query)}: re-put it with this embed"
            )
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        scored.append((row, sum(a * b for a, b in zip(query, v, strict=True)) / (qn * norm)))
    scored.sort(key=lambda p: -(p[1] or 0.0))
    return scored + unscored


def _index_text(value: Mapping[str, Any], fields: Sequence[str]) -> str:
    parts = []
    for path in fields:
        if path == "$":
            parts.append(json.dumps(value, sort_keys=True, ensure_ascii=False))
            continue
        current: Any = value
        for part in path.split("."):
            current = current.get(part) if isinstance(current, Mapping) else None
        if current is not None:
            parts.append(current if isinstance(current, str) else json.dumps(current, ensure_ascii=False))
    return "\n".join(parts)


def _check_key(key: Any) -> None:
    if not isinstance(key, str) or not key or "\x00" in key:
        raise InvalidItemError(f"key must be a non-empty string without NUL, not {key!r}")


def _check_ttl(ttl: Any) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
        raise InvalidItemError(f"ttl must be a positive number of minutes or None, not {ttl!r}")
    return float(ttl)


def _check_page(limit: Any, offset: Any) -> None:
    for name, v, low in (("limit", limit, 1), ("offset", offset, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise InvalidItemError(f"{name} must be an integer >= {low}, not {v!r}")
