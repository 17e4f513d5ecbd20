"""``POST /threads/search`` pages in the saver (limit and offset over its keyset pages, newest created first),
against the real server: every thread on exactly one page, filters combined with paging."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from support.serving import Served


def test_search_pages_cover_every_thread_once_newest_first(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"])
    names = [f"s{i:02d}" for i in range(12)]
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for i, name in enumerate(names):
            c.post("/threads", json={"thread_id": name, "metadata": {"parity": i % 2}}).raise_for_status()
            c.post(f"/threads/{name}/runs/wait", json={"input": {"limit": 1}}).raise_for_status()
        pages = [
            [t["thread_id"] for t in c.post("/threads/search", json={"limit": 5, "offset": off}).json()]
            for off in (0, 5, 10, 15)
        ]
        assert pages[0] + pages[1] + pages[2] == list(reversed(names))
        assert [len(p) for p in pages] == [5, 5, 2, 0]
        odd = c.post("/threads/search", json={"metadata": {"parity": 1}, "limit": 2, "offset": 1}).json()
        assert [t["thread_id"] for t in odd] == ["s09", "s07"]
        assert all(t["metadata"]["parity"] == 1 for t in odd)
        idle = c.post("/threads/search", json={"status": "idle", "limit": 100}).json()
        assert sorted(t["thread_id"] for t in idle) == names
        assert c.post("/threads/search", json={"status": "busy"}).json() == []
