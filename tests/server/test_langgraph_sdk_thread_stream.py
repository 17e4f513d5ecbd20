"""LangGraph's v3 thread stream (langgraph-sdk's ``client.threads.stream``) against a real ``graphckpt serve``: a run
started with ``run.start``, its ``values`` as they come and its ``output``; an interrupt seen as
``thread.interrupts`` and answered with ``run.respond``; a reopened stream from a ``seq`` (``since``) replays only what
came after it; an unknown command is the protocol's error."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
from support.serving import Served, read_events
from support.waiting import await_for

COUNTER = "support.server_graphs:counter"
APPROVAL = "support.server_graphs:approval"


def test_run_start_values_output_interrupt_and_respond(serve: Callable[..., Served]) -> None:
    from langgraph_sdk import get_client

    server = serve([COUNTER, APPROVAL], env={"SERVE_TEST_DELAY": "0.1"})

    async def main() -> None:
        client = get_client(url=server.url, timeout=httpx.Timeout(30.0))
        async with client.threads.stream(assistant_id=COUNTER) as thread:
            started = await thread.run.start(input={"limit": 3})
            seen: list[Any] = []

            async def values() -> None:
                async for snapshot in thread.values:
                    seen.append(snapshot["n"])
                    if snapshot["n"] == 3:
                        return

            await asyncio.wait_for(values(), 30)
            assert len(seen) >= 2 and seen[-2:] == [2, 3]  # the state, then each step's values as they come
            assert (await asyncio.wait_for(thread.output, 30))["log"] == ["tick 1", "tick 2", "tick 3"]
            run = await client.runs.get(thread.thread_id, started["run_id"])
            assert run["status"] == "success"

        async with client.threads.stream(assistant_id=APPROVAL) as thread:
            await thread.run.start(input={})
            await await_for(lambda: thread.interrupted, 30, what="the interrupt")
            [asked] = thread.interrupts
            assert asked["value"] == {"question": "approve 'a draft'?"} and asked["namespace"] == []
            await thread.run.respond("yes")
            assert await asyncio.wait_for(thread.output, 30) == {"draft": "a draft", "verdict": "yes"}
        await client.aclose()

    asyncio.run(main())


def test_events_since_a_seq_and_protocol_errors(serve: Callable[..., Served]) -> None:
    server = serve([COUNTER])
    with httpx.Client(base_url=server.url, timeout=30) as c:
        c.post("/threads", json={"thread_id": "v3"}).raise_for_status()
        ok = c.post(
            "/threads/v3/commands",
            json={"id": 1, "method": "run.start", "params": {"assistant_id": COUNTER, "input": {"limit": 3}}},
        )
        assert ok.json()["type"] == "success" and ok.json()["id"] == 1 and ok.json()["result"]["run_id"]
        c.get(f"/threads/v3/runs/{ok.json()['result']['run_id']}/join").raise_for_status()

        def read(body: dict[str, Any], limit: int) -> list[dict[str, Any]]:
            return [
                d for _, _, d in read_events(c, "/threads/v3/stream/events", method="POST", json_body=body, limit=limit)
            ]

        everything = read({"channels": ["values", "lifecycle"], "since": 0}, 6)
        assert [e["method"] for e in everything[:2]] == ["lifecycle", "values"]
        assert everything[-1]["params"]["data"] == {"event": "completed"} and everything[-2]["params"]["data"]["n"] == 3
        seqs = [e["seq"] for e in everything]
        assert seqs == sorted(set(seqs))
        again = read({"channels": ["values", "lifecycle"], "since": seqs[2]}, 3)
        assert again == everything[3:]  # the same events, the same seqs, from after the one given
        unknown = c.post("/threads/v3/commands", json={"id": 2, "method": "agent.getTree", "params": {}})
        assert unknown.status_code == 400 and unknown.json()["error"] == "unknown_command" and unknown.json()["id"] == 2
        bad = c.post(
            "/threads/v3/commands", json={"id": 3, "method": "run.start", "params": {"assistant_id": COUNTER, "x": 1}}
        )
        assert bad.status_code == 422 and "params.x" in bad.json()["message"]
