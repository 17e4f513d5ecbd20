"""Assistants through the official langgraph-sdk against a real ``graphckpt serve``: durable (a restart keeps them),
versioned (update adds a version, set_latest goes back), one set per token, and a run created with an assistant
takes its graph, config (recursion limit) and metadata; a field its runs cannot honour is a 422 naming it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from support.serving import Served

COUNTER = "support.server_graphs:counter"
GRAPHS = [COUNTER, "review=support.server_graphs:approval"]


def test_assistants_are_durable_versioned_configurations(serve: Callable[..., Served], tmp_path: Path) -> None:
    from langgraph_sdk import get_client

    tokens = tmp_path / "tokens"
    tokens.write_text("token-a alpha\ntoken-b beta\n")
    server = serve(GRAPHS, args=["--tokens-file", str(tokens)])

    def client(token: str):  # type: ignore[no-untyped-def]
        return get_client(url=server.url, headers={"Authorization": f"Bearer {token}"})

    async def first() -> str:
        a, b = client("token-a"), client("token-b")
        assert await a.assistants.count() == 2  # one per served graph
        made = await a.assistants.create(
            COUNTER, config={"recursion_limit": 3}, metadata={"team": "x"}, name="short", description="d"
        )
        aid = made["assistant_id"]
        assert made["graph_id"] == COUNTER and made["version"] == 1 and made["name"] == "short"
        assert made["config"] == {"recursion_limit": 3} and made["metadata"] == {"team": "x"}
        assert (await a.assistants.get(aid)) == made
        assert await a.assistants.count() == 3 and await a.assistants.count(metadata={"team": "x"}) == 1
        assert [x["assistant_id"] for x in await a.assistants.search(name="shor")] == [aid]
        assert await b.assistants.count() == 2  # token b does not see it
        with pytest.raises(httpx.HTTPStatusError) as e:
            await b.assistants.get(aid)
        assert e.value.response.status_code == 404
        # the same id again: a 409, or the existing one with if_exists="do_nothing"
        with pytest.raises(httpx.HTTPStatusError) as e:
            await a.assistants.create(COUNTER, assistant_id=aid)
        assert e.value.response.status_code == 409
        assert (await a.assistants.create(COUNTER, assistant_id=aid, if_exists="do_nothing"))["name"] == "short"
        # a run with the assistant: its recursion limit (3) stops a run of 5 steps
        tid = (await a.threads.create())["thread_id"]
        failed = await a.runs.wait(tid, aid, input={"limit": 5}, raise_error=False)
        assert failed["n"] == 3, failed
        [run] = await a.runs.list(tid)
        assert run["status"] == "error" and run["metadata"]["team"] == "x" and run["metadata"]["assistant_id"] == aid
        # ... and the run's own config wins
        tid = (await a.threads.create())["thread_id"]
        done = await a.runs.wait(tid, aid, input={"limit": 5}, config={"recursion_limit": 50})
        assert done["n"] == 5
        # versions: update adds one, set_latest goes back
        v2 = await a.assistants.update(aid, config={"recursion_limit": 40}, name="long")
        assert v2["version"] == 2 and v2["name"] == "long" and v2["metadata"] == {"team": "x"}
        versions = await a.assistants.get_versions(aid)
        assert [v["version"] for v in versions] == [2, 1]
        assert versions[1]["config"] == {"recursion_limit": 3}
        back = await a.assistants.set_latest(aid, 1)
        assert back["version"] == 1 and back["name"] == "short" and back["config"] == {"recursion_limit": 3}
        graph = await a.assistants.get_graph(aid)
        assert graph["nodes"] == ["tick"]
        assert (await a.assistants.get_schemas(aid))["graph_id"] == COUNTER
        assert await a.assistants.get_subgraphs(aid) == {}
        # a field its runs cannot honour, a graph not served, a version it lacks
        for call, field in [
            (a.assistants.create(COUNTER, config={"tags": ["t"]}), "body.config.tags"),
            (a.assistants.create("nope"), "body.graph_id"),
            (a.assistants.set_latest(aid, 9), "body.version"),
        ]:
            with pytest.raises(httpx.HTTPStatusError) as e:
                await call
            assert e.value.response.status_code in (404, 422) and field in e.value.response.text
        await a.aclose()
        await b.aclose()
        return str(aid)

    aid = asyncio.run(first())
    server.stop()
    server.start()

    async def after_restart() -> None:
        a = client("token-a")
        kept = await a.assistants.get(aid)
        assert kept["version"] == 1 and kept["name"] == "short"
        assert [v["version"] for v in await a.assistants.get_versions(aid)] == [2, 1]
        # a served graph's own assistant can be updated (versioned) but not deleted
        own = await a.assistants.update(COUNTER, metadata={"tuned": True})
        assert own["version"] == 2 and own["assistant_id"] == COUNTER
        with pytest.raises(httpx.HTTPStatusError) as e:
            await a.assistants.delete(COUNTER)
        assert e.value.response.status_code == 409
        await a.assistants.delete(aid)
        assert await a.assistants.count() == 2
        with pytest.raises(httpx.HTTPStatusError) as e:
            await a.assistants.get(aid)
        assert e.value.response.status_code == 404
        await a.aclose()

    asyncio.run(after_restart())
