"""The langgraph-sdk's ``client.crons`` against a real ``graphckpt serve``: its six methods (create,
create_for_thread, search, count, update, delete); a per-second cron's ticks run through the server's own worker;
a token sees only its own crons."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from support.serving import Served

GRAPH = "support.store_graphs:remember"


def test_the_sdk_crons_methods(serve: Callable[..., Served], tmp_path: Path) -> None:
    from langgraph_sdk import get_client

    tokens = tmp_path / "tokens"
    tokens.write_text("token-a alpha\ntoken-b beta\n")
    server = serve([GRAPH], args=["--tokens-file", str(tokens)])

    async def main() -> None:
        a = get_client(url=server.url, headers={"Authorization": "Bearer token-a"})
        b = get_client(url=server.url, headers={"Authorization": "Bearer token-b"})
        every = await a.crons.create(GRAPH, schedule="* * * * * *", input={"fact": "tick"}, metadata={"job": "t"})
        assert every["assistant_id"] == GRAPH and every["enabled"] and every["next_run_date"]
        thread = await a.threads.create()
        yearly = await a.crons.create_for_thread(
            thread["thread_id"], GRAPH, schedule="0 9 1 1 *", timezone="Europe/Oslo"
        )
        assert yearly["thread_id"] == thread["thread_id"] and yearly["timezone"] == "Europe/Oslo"
        assert yearly["next_run_date"].endswith("+00:00") and "-01-01T08:00:00" in yearly["next_run_date"]
        assert await a.crons.count(assistant_id=GRAPH) == 2
        assert await a.crons.count(thread_id=thread["thread_id"]) == 1
        found = await a.crons.search(metadata={"job": "t"})
        assert [c["cron_id"] for c in found] == [every["cron_id"]]
        assert await b.crons.count() == 0 and await b.crons.search() == []  # another token sees none
        deadline = time.monotonic() + 30
        while True:  # the server's worker fires the per-second cron: a new thread per tick
            [row] = await a.crons.search(metadata={"job": "t"})
            if row["runs"] >= 2:
                break
            assert time.monotonic() < deadline, row
            await asyncio.sleep(0.2)
        ticks = [t for t in await a.threads.search(limit=100) if t["thread_id"].startswith(every["cron_id"])]
        assert len(ticks) >= 1
        paused = await a.crons.update(every["cron_id"], enabled=False, schedule="0 * * * *")
        assert paused["enabled"] is False and paused["schedule"] == "0 * * * *" and paused["next_run_date"] is None
        with pytest.raises(httpx.HTTPStatusError) as other:
            await b.crons.delete(every["cron_id"])
        assert other.value.response.status_code == 404
        with pytest.raises(httpx.HTTPStatusError) as bad:
            await a.crons.create(GRAPH, schedule="every day")
        assert bad.value.response.status_code == 422 and "cron expression" in bad.value.response.text
        await a.crons.delete(every["cron_id"])
        await a.crons.delete(yearly["cron_id"])
        assert await a.crons.count() == 0
        await a.aclose()
        await b.aclose()

    asyncio.run(main())
