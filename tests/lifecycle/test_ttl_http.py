"""A TTL given when ``graphckpt serve`` creates a thread (LangGraph's ``ttl: {"strategy": "delete", "ttl": minutes}``)
is kept by its runs and expires the thread from its last activity; a malformed one is 422 naming the field."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from support.serving import Served

from graphckpt import ids
from graphckpt.prune import prune, ttl_of
from graphckpt.savers.sqlite import SqliteSaver


async def test_a_thread_created_with_a_ttl_expires(
    serve: Callable[..., Served], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve(["support.server_graphs:counter"])
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as c:
        for bad in ({"ttl": 0}, {"strategy": "archive", "ttl": 5}, "5m"):
            refused = await c.post("/threads", json={"thread_id": "bad", "ttl": bad})
            assert refused.status_code == 422 and "ttl" in refused.json()["message"], refused.text
        made = await c.post("/threads", json={"thread_id": "short", "ttl": {"strategy": "delete", "ttl": 2}})
        assert made.status_code == 200, made.text
        (await c.post("/threads", json={"thread_id": "plain"})).raise_for_status()
        for tid in ("short", "plain"):
            (await c.post(f"/threads/{tid}/runs/wait", json={"input": {"limit": 2}})).raise_for_status()
        (await c.post("/threads/short/runs/wait", json={"input": {"limit": 3}})).raise_for_status()  # a 2nd turn
    async with SqliteSaver(server.db) as saver:
        record = await saver.get_thread("short")
        assert record is not None and ttl_of(record.metadata) == 120
        later = record.updated_at + 121
        monkeypatch.setattr(ids, "now", lambda: later)
        report = await prune(saver, expired=True)
        assert report.threads == ["short"]
        assert [r.thread_id for r in await saver.list_threads()] == ["plain"]
