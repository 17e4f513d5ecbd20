"""The long-term item store (:mod:`graphckpt.savers.items`, used through :class:`graphckpt.items.ItemStore`): put,
get, delete, search by prefix with filters and pages, TTL and its refresh, namespaces, semantic ranking, bad input."""

from __future__ import annotations

import pytest

from graphckpt import ids
from graphckpt.items import InvalidItemError, ItemStore
from graphckpt.savers.base import Saver
from graphckpt.savers.items import ItemRow, ItemTable


def _root() -> str:
    return "t" + ids.new_id().replace("-", "").replace(".", "")


def _embed(texts: list[str]) -> list[list[float]]:
    """A toy embedding: letter counts of a, b, c (enough to rank by cosine)."""
    return [[t.count("a") + 0.01, t.count("b") + 0.01, t.count("c") + 0.01] for t in texts]


class ItemCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    async def test_item_put_get_replace_delete(self, saver: Saver) -> None:
        store, r = ItemStore(saver), _root()
        assert await store.aget((r, "u1"), "prefs") is None
        await store.aput((r, "u1"), "prefs", {"tone": "short", "n": 1})
        first = await store.aget((r, "u1"), "prefs")
        assert first is not None and first.value == {"tone": "short", "n": 1} and first.namespace == (r, "u1")
        await store.aput((r, "u1"), "prefs", {"tone": "long"})
        second = await store.aget((r, "u1"), "prefs")
        assert second is not None and second.value == {"tone": "long"}
        assert second.created_at == first.created_at and second.updated_at >= first.updated_at
        await store.adelete((r, "u1"), "prefs")
        assert await store.aget((r, "u1"), "prefs") is None
        await store.aput((r, "u1"), "k", {"x": 1})
        await store.aput((r, "u1"), "k", None)  # None deletes, as in LangGraph
        assert await store.aget((r, "u1"), "k") is None

    async def test_item_search_prefix_filter_and_pages(self, saver: Saver) -> None:
        store, r = ItemStore(saver), _root()
        for i in range(5):
            await store.aput((r, "docs", f"u{i % 2}"), f"k{i}", {"i": i, "kind": "even" if i % 2 == 0 else "odd"})
        await store.aput((r + "x", "docs"), "other", {"i": 99})  # a sibling namespace sharing the text prefix
        await store.aput((r, "docsx"), "near", {"i": 98})
        under = await store.asearch((r, "docs"), limit=50)
        assert sorted(it.key for it in under) == ["k0", "k1", "k2", "k3", "k4"]
        assert [it.key for it in under] == ["k4", "k3", "k2", "k1", "k0"]  # newest updated first
        assert [it.key for it in await store.asearch((r, "docs"), limit=2, offset=1)] == ["k3", "k2"]
        even = await store.asearch((r,), filter={"kind": "even"}, limit=50)
        assert sorted(it.key for it in even) == ["k0", "k2", "k4"]
        big = await store.asearch((r, "docs"), filter={"i": {"$gte": 2}, "kind": {"$ne": "odd"}}, limit=50)
        assert sorted(it.key for it in big) == ["k2", "k4"]
        assert [it.key for it in await store.asearch((r,), filter={"kind": "even"}, limit=1, offset=1)] == ["k2"]
        assert await store.asearch((r, "docs"), filter={"missing": 1}) == []
        assert len(await store.asearch((r,), limit=100)) == 6

    async def test_item_filter_nested_and_types(self, saver: Saver) -> None:
        store, r = ItemStore(saver), _root()
        await store.aput((r,), "a", {"user": {"name": "ann", "age": 30}, "tags": ["x"]})
        await store.aput((r,), "b", {"user": {"name": "bob", "age": "old"}})
        assert [i.key for i in await store.asearch((r,), filter={"user": {"name": "ann"}})] == ["a"]
        assert [i.key for i in await store.asearch((r,), filter={"user.age": {"$gt": 18}})] == ["a"]
        assert [i.key for i in await store.asearch((r,), filter={"tags": ["x"]})] == ["a"]

    async def test_item_ttl_expires_and_refreshes(self, saver: Saver) -> None:
        assert isinstance(saver, ItemTable), f"{type(saver).__name__} has no item store"
        r, now = _root(), ids.now()
        await saver.item_put(ItemRow(r, "k", '{"v":1}', now, now, 1.0, now + 60))
        row = await saver.item_get(r, "k", now=now + 30, refresh=True)
        assert row is not None and row.expires_at == pytest.approx(now + 90)
        assert await saver.item_get(r, "k", now=now + 80, refresh=False) is not None  # refreshed: alive past +60
        assert await saver.item_get(r, "k", now=now + 91, refresh=False) is None
        assert await saver.item_scan(r, now=now + 91, limit=None, offset=0) == []
        assert r not in await saver.item_namespaces(now=now + 91)
        await saver.item_refresh([(r, "k")], now=now + 85)
        assert await saver.item_get(r, "k", now=now + 140, refresh=False) is not None
        assert await saver.item_sweep(now=now + 146) >= 1
        assert not await saver.item_delete(r, "k")  # swept: gone

    async def test_item_put_with_ttl_and_without_refresh(self, saver: Saver) -> None:
        store, r = ItemStore(saver), _root()
        await store.aput((r,), "t", {"v": 1}, ttl=5)
        item = await store.aget((r,), "t", refresh_ttl=False)
        assert item is not None and item.expires_at is not None
        assert (item.expires_at - item.updated_at).total_seconds() == pytest.approx(300, abs=1)
        await store.aput((r,), "forever", {"v": 2})
        forever = await store.aget((r,), "forever")
        assert forever is not None and forever.expires_at is None

    async def test_item_list_namespaces(self, saver: Saver) -> None:
        store, r = ItemStore(saver), _root()
        for ns in [(r, "a", "x"), (r, "a", "y"), (r, "b", "x"), (r, "b")]:
            await store.aput(ns, "k", {"v": 1})
        assert await store.alist_namespaces(prefix=(r,)) == [(r, "a", "x"), (r, "a", "y"), (r, "b"), (r, "b", "x")]
        assert await store.alist_namespaces(prefix=(r,), max_depth=2) == [(r, "a"), (r, "b")]
        assert await store.alist_namespaces(prefix=(r,), suffix=("x",)) == [(r, "a", "x"), (r, "b", "x")]
        assert await store.alist_namespaces(prefix=(r, "*", "y")) == [(r, "a", "y")]
        assert await store.alist_namespaces(prefix=(r,), limit=2, offset=1) == [(r, "a", "y"), (r, "b")]

    async def test_item_semantic_search_ranks_by_similarity(self, saver: Saver) -> None:
        store, r = ItemStore(saver, embed=_embed, fields=("text",)), _root()
        await store.aput((r,), "as", {"text": "aaaa", "k": 1})
        await store.aput((r,), "bs", {"text": "bbbb", "k": 1})
        await store.aput((r,), "cs", {"text": "cccc", "k": 2})
        await store.aput((r,), "plain", {"text": "aaaa"}, index=False)
        hits = await store.asearch((r,), query="bbb b", limit=10)
        assert hits[0].key == "bs" and sorted(h.key for h in hits[1:3]) == ["as", "cs"]
        assert hits[0].score is not None and hits[0].score > 0.9
        assert hits[1].score is not None and hits[1].score < 0.1
        assert hits[-1].key == "plain" and hits[-1].score is None  # not indexed: after the ranked ones
        only = await store.asearch((r,), query="cc", filter={"k": 2})
        assert [h.key for h in only] == ["cs"]

    async def test_item_bad_input_is_named(self, saver: Saver) -> None:
        store = ItemStore(saver)
        with pytest.raises(InvalidItemError, match="period"):
            await store.aput(("a.b",), "k", {"v": 1})
        with pytest.raises(InvalidItemError, match="empty"):
            await store.aput((), "k", {"v": 1})
        with pytest.raises(InvalidItemError, match="key"):
            await store.aput(("a",), "", {"v": 1})
        with pytest.raises(InvalidItemError, match="JSON object"):
            await store.aput(("a",), "k", [1, 2])  # type: ignore[arg-type]
        with pytest.raises(InvalidItemError, match="ttl"):
            await store.aput(("a",), "k", {"v": 1}, ttl=-1)
        with pytest.raises(InvalidItemError, match="operator"):
            await store.asearch(("a",), filter={"v": {"$like": 1}})
        with pytest.raises(InvalidItemError, match="limit"):
            await store.asearch(("a",), limit=0)
        with pytest.raises(InvalidItemError, match="embed"):
            await store.asearch(("a",), query="x")
