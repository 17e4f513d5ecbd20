"""The store's TTL with LangGraph's semantics, through :class:`ItemStore` on every saver, on a test clock
(``graphckpt.ids.now`` patched): ``ttl`` is in minutes from the put; a ``get`` or a ``search`` restarts it unless
``refresh_ttl=False`` (or the store's ``refresh_on_read=False``); an expired item is invisible at once to get, search
and list_namespaces; a put without ``ttl`` takes the store's ``default_ttl``, ``ttl=None`` never expires; a put
restarts the clock."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from graphckpt import ids
from graphckpt.items import ItemStore


class Clock:
    def __init__(self) -> None:
        self.t = ids.now()

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(ids, "now", c)
    return c


async def test_ttl_minutes_refreshed_by_get_and_search_unless_told_not_to(saver: Any, clock: Clock) -> None:
    store, r = ItemStore(saver), f"ttl-{uuid.uuid4().hex[:8]}"
    start = clock.t
    await store.aput((r, "a"), "k", {"v": 1}, ttl=1)  # one minute
    await store.aput((r, "b"), "forever", {"v": 2}, ttl=None)
    clock.t = start + 50
    assert await store.aget((r, "a"), "k") is not None  # a read restarts the minute: now expires at +110
    clock.t = start + 100
    [found] = await store.asearch((r, "a"), refresh_ttl=False)  # alive past +60; this read does not restart it
    assert found.key == "k" and found.expires_at is not None
    assert found.expires_at.timestamp() == pytest.approx(start + 110)
    clock.t = start + 105
    assert [i.key for i in await store.asearch((r,), filter={"v": 1})] == ["k"]  # a search restarts it: +165
    clock.t = start + 160
    assert await store.aget((r, "a"), "k", refresh_ttl=False) is not None
    clock.t = start + 166
    assert await store.aget((r, "a"), "k") is None  # expired: invisible at once
    assert [i.key for i in await store.asearch((r,))] == ["forever"]
    assert await store.alist_namespaces(prefix=(r,)) == [(r, "b")]
    forever = await store.aget((r, "b"), "forever")
    assert forever is not None and forever.expires_at is None


async def test_default_ttl_no_refresh_on_read_and_a_put_restarts_the_clock(saver: Any, clock: Clock) -> None:
    store, r = ItemStore(saver, default_ttl=2, refresh_on_read=False), f"ttl-{uuid.uuid4().hex[:8]}"
    start = clock.t
    await store.aput((r,), "k", {"v": 1})  # the store's default: two minutes
    clock.t = start + 100
    item = await store.aget((r,), "k")  # refresh_on_read=False: the read does not restart it
    assert item is not None and item.expires_at is not None
    assert item.expires_at.timestamp() == pytest.approx(start + 120)
    await store.aput((r,), "k", {"v": 2})  # a put restarts it: +220
    clock.t = start + 200
    again = await store.aget((r,), "k", refresh_ttl=True)  # asked for: restarts it, +320
    assert again is not None and again.value == {"v": 2} and again.created_at.timestamp() == pytest.approx(start)
    clock.t = start + 310
    assert await store.aget((r,), "k") is not None
    clock.t = start + 321
    assert await store.aget((r,), "k") is None
