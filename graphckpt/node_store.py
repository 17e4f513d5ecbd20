"""``ctx.store``: the item store (:mod:`graphckpt.items`) as a node sees it, every call inside the effect journal.

Each call is one journaled effect of the task (``store.get``, ``store.put``, ...): a re-run of the task (a resume
after a crash, a retry, a resume after an interrupt) gets the recorded result of each call in order and does not call
the store again. So a node that reads a counter and writes it plus one, killed at any point and resumed, sees the
same read and leaves one write. The only window: a kill between a put reaching the database and its journal entry
committing re-runs that put on resume, with the same value (a put is an upsert of ``(namespace, key)``, so the item
is the same; only its ``updated_at`` moves).

Async nodes ``await ctx.store.aget(...)``; sync nodes (run on worker threads) call ``ctx.store.get(...)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Literal, Protocol

from graphckpt.items import Item, ScopedItems

__all__ = ["NodeStore"]

_UNSET: Any = object()


class Effects(Protocol):
    """What the store needs of a node's context: its journaled calls."""

    async def aeffect(self, fn: Callable[..., Any], /, *args: Any) -> Any: ...
    def effect(self, fn: Callable[..., Any], /, *args: Any) -> Any: ...


class NodeStore:
    """What ``ctx.store`` returns: the app's :class:`~graphckpt.items.ItemStore` (as the thread's server namespace
    sees it), journaled per call."""

    def __init__(self, ctx: Effects, items: ScopedItems, loop: asyncio.AbstractEventLoop) -> None:
        self._ctx, self.items, self._loop = ctx, items, loop

    # -- the calls, as effects -------------------------------------------------------------------------------------

    def _named(self, name: str, body: Callable[..., Coroutine[Any, Any, Any]]) -> tuple[Callable[..., Any], ...]:
        """``body`` as an async effect function and as a sync one (for worker threads), both named ``store.<name>``."""

        async def run_async(*args: Any, **kwargs: Any) -> Any:
            return await body(*args, **kwargs)

        def run_sync(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(body(*args, **kwargs), self._loop).result()

        run_async.__qualname__ = run_sync.__qualname__ = f"store.{name}"
        return run_async, run_sync

    async def _get(self, ns: list[str], key: str, refresh_ttl: bool | None) -> dict[str, Any] | None:
        item = await self.items.aget(ns, key, refresh_ttl=refresh_ttl)
        return item.to_dict() if item is not None else None

    async def _put(self, ns: list[str], key: str, value: Any, index: Any, ttl: dict[str, Any]) -> None:
        await self.items.aput(ns, key, value, index, **ttl)

    async def _delete(self, ns: list[str], key: str) -> None:
        await self.items.adelete(ns, key)

    async def _search(self, prefix: list[str], options: dict[str, Any]) -> list[dict[str, Any]]:
        return [i.to_dict() for i in await self.items.asearch(prefix, **options)]

    async def _namespaces(self, options: dict[str, Any]) -> list[list[str]]:
        return [list(ns) for ns in await self.items.alist_namespaces(**options)]

    # -- async nodes -----------------------------------------------------------------------------------------------

    async def aget(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        """The item or ``None``, journaled: a re-run sees what the first run read."""
        found = await self._ctx.aeffect(self._named("get", self._get)[0], list(namespace), key, refresh_ttl)
        return Item.from_dict(found) if found is not None else None

    async def aput(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any] | None,
        index: Literal[False] | Sequence[str] | None = None,
        *,
        ttl: float | None = _UNSET,
    ) -> None:
        """Insert or replace (``None`` deletes), once per task, ever."""
        idx = list(index) if index else index
        fn = self._named("put", self._put)[0]
        data = dict(value) if value is not None else None
        await self._ctx.aeffect(fn, list(namespace), key, data, idx, {} if ttl is _UNSET else {"ttl": ttl})

    async def adelete(self, namespace: Sequence[str], key: str) -> None:
        await self._ctx.aeffect(self._named("delete", self._delete)[0], list(namespace), key)

    async def asearch(self, namespace_prefix: Sequence[str], /, **options: Any) -> list[Item]:
        """:meth:`ItemStore.asearch <graphckpt.items.ItemStore.asearch>`, journaled."""
        found = await self._ctx.aeffect(self._named("search", self._search)[0], list(namespace_prefix), options)
        return [Item.from_dict(d) for d in found]

    async def alist_namespaces(self, **options: Any) -> list[tuple[str, ...]]:
        found = await self._ctx.aeffect(self._named("list_namespaces", self._namespaces)[0], options)
        return [tuple(ns) for ns in found]

    # -- sync nodes ------------------------------------------------------------------------------------------------

    def get(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        found = self._ctx.effect(self._named("get", self._get)[1], list(namespace), key, refresh_ttl)
        return Item.from_dict(found) if found is not None else None

    def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any] | None,
        index: Literal[False] | Sequence[str] | None = None,
        *,
        ttl: float | None = _UNSET,
    ) -> None:
        idx = list(index) if index else index
        fn = self._named("put", self._put)[1]
        data = dict(value) if value is not None else None
        self._ctx.effect(fn, list(namespace), key, data, idx, {} if ttl is _UNSET else {"ttl": ttl})

    def delete(self, namespace: Sequence[str], key: str) -> None:
        self._ctx.effect(self._named("delete", self._delete)[1], list(namespace), key)

    def search(self, namespace_prefix: Sequence[str], /, **options: Any) -> list[Item]:
        found = self._ctx.effect(self._named("search", self._search)[1], list(namespace_prefix), options)
        return [Item.from_dict(d) for d in found]

    def list_namespaces(self, **options: Any) -> list[tuple[str, ...]]:
        found = self._ctx.effect(self._named("list_namespaces", self._namespaces)[1], options)
        return [tuple(ns) for ns in found]
