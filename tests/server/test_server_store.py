"""The langgraph-sdk's ``client.store`` against a real ``graphckpt serve``: its five methods, LangGraph's semantics
for the same calls (namespaces, filters, pages, TTL), bad input as a 422 naming what was wrong, and per-token
namespaces: two tokens never see each other's items, and a node of a token's thread writes where that token reads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from support.serving import Served

GRAPH = "support.store_graphs:remember"


def test_the_sdk_store_methods(serve: Callable[..., Served]) -> None:
    from langgraph_sdk import get_client

    server = serve([GRAPH])

    async def main() -> None:
        client = get_client(url=server.url)
        store = client.store
        await store.put_item(["users", "u1"], "prefs", {"tone": "short", "n": 1})
        await store.put_item(["users", "u2"], "prefs", {"tone": "long", "n": 2}, ttl=5)
        await store.put_item(["users", "u2", "notes"], "n1", {"tone": "short", "n": 3})
        got = await store.get_item(["users", "u1"], "prefs")
        assert got["namespace"] == ["users", "u1"] and got["value"] == {"tone": "short", "n": 1}
        assert got["created_at"] and got["updated_at"]
        found = await store.search_items(["users"], filter={"tone": "short"})
        assert sorted(i["key"] for i in found["items"]) == ["n1", "prefs"]
        page = await store.search_items(["users"], filter={"n": {"$gte": 2}}, limit=1, offset=1)
        assert [i["value"]["n"] for i in page["items"]] == [2]  # newest updated first: n1 (3), then prefs of u2 (2)
        spaces = await store.list_namespaces(prefix=["users"], max_depth=2)
        assert spaces["namespaces"] == [["users", "u1"], ["users", "u2"]]
        assert (await store.list_namespaces(suffix=["notes"]))["namespaces"] == [["users", "u2", "notes"]]
        await store.delete_item(["users", "u1"], "prefs")
        with pytest.raises(httpx.HTTPStatusError) as missing:
            await store.get_item(["users", "u1"], "prefs")
        assert missing.value.response.status_code == 404
        with pytest.raises(httpx.HTTPStatusError) as bad:
            await store.search_items(["users"], filter={"n": {"$near": 1}})
        assert bad.value.response.status_code == 422 and "$near" in bad.value.response.text
        with pytest.raises(httpx.HTTPStatusError) as empty:
            await store.put_item([], "k", {"v": 1})
        assert empty.value.response.status_code == 422 and "namespace" in empty.value.response.text
        await client.aclose()

    asyncio.run(main())


def test_two_tokens_never_see_each_others_items(serve: Callable[..., Served], tmp_path: Path) -> None:
    from langgraph_sdk import get_client

    tokens = tmp_path / "tokens"
    tokens.write_text("token-a alpha\ntoken-b beta.x\n")
    server = serve([GRAPH], args=["--tokens-file", str(tokens)])

    async def main() -> None:
        a = get_client(url=server.url, headers={"Authorization": "Bearer token-a"})
        b = get_client(url=server.url, headers={"Authorization": "Bearer token-b"})
        await a.store.put_item(["facts"], "sky", {"text": "blue"})
        await b.store.put_item(["facts"], "grass", {"text": "green"})
        assert [i["key"] for i in (await a.store.search_items([]))["items"]] == ["sky"]
        assert [i["key"] for i in (await b.store.search_items(["facts"]))["items"]] == ["grass"]
        assert (await a.store.list_namespaces())["namespaces"] == [["facts"]]
        with pytest.raises(httpx.HTTPStatusError) as other:
            await b.store.get_item(["facts"], "sky")
        assert other.value.response.status_code == 404
        # a node of token b's thread writes into b's namespace, where b (and only b) reads it
        thread = await b.threads.create()
        out = await b.runs.wait(thread["thread_id"], GRAPH, input={"fact": "sea"})
        assert out["known"] == 2  # grass and sea: the node sees b's items only
        assert sorted(i["key"] for i in (await b.store.search_items(["facts"]))["items"]) == ["grass", "sea"]
        assert [i["key"] for i in (await a.store.search_items(["facts"]))["items"]] == ["sky"]
        stranger = get_client(url=server.url, headers={"Authorization": "Bearer nope"})
        with pytest.raises(httpx.HTTPStatusError) as anonymous:
            await stranger.store.search_items([])
        assert anonymous.value.response.status_code == 401
        await stranger.aclose()
        await a.aclose()
        await b.aclose()

    asyncio.run(main())
